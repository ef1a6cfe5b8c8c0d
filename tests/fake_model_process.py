"""``shortterm fake-model`` as a real OS process on a free loopback port, for the tests that
run what a user runs."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0  # generous: the machine may be loaded


@dataclass
class FakeModelProcess:
    proc: subprocess.Popen[str]
    url: str  # the /v1 base URL
    log: Path
    stderr: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        """The loopback port it listens on."""
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def logged(self) -> list[dict[str, Any]]:
        """Every record of the request log, oldest first."""
        text = self.log.read_text("utf-8") if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def chats(self) -> list[dict[str, Any]]:
        """The chat-completions requests that were answered, as sent."""
        return [
            r["request"]
            for r in self.logged()
            if r["path"] == "/v1/chat/completions" and r["status"] == 200
        ]


def _drain(stream: Any, lines: queue.Queue[str | None], kept: list[str]) -> None:
    # Read until the process ends, so a full pipe never blocks it.
    for line in stream:
        kept.append(line)
        lines.put(line)
    lines.put(None)


@contextlib.contextmanager
def fake_model_process(log: Path, *args: str) -> Iterator[FakeModelProcess]:
    """Start ``shortterm fake-model --port 0 --log-requests <log>``; stop it afterwards."""
    command = [sys.executable, "-m", "shortterm.cli", "fake-model", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--log-requests", str(log), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    kept: list[str] = []
    reader = threading.Thread(target=_drain, args=(proc.stderr, lines, kept), daemon=True)
    reader.start()
    try:
        url = _announced_url(lines, kept)
        yield FakeModelProcess(proc, url, log, kept)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        reader.join(timeout=15)
        if proc.stderr is not None:
            proc.stderr.close()


def _announced_url(lines: queue.Queue[str | None], kept: list[str]) -> str:
    while True:
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"fake-model did not start: {''.join(kept)}") from None
        if line is None:
            raise AssertionError(f"fake-model exited: {''.join(kept)}")
        if " listening on " in line:
            return line.split(" listening on ", 1)[1].split()[0]
