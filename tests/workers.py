"""Test worker processes: one JSON command per line in, one JSON reply per line out.

The test side drives a worker with :class:`Worker`; the worker side answers with
:func:`serve`. Several tests make promises about several OS processes; they share this.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REPLY_TIMEOUT_S = 120.0

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class Worker:
    """One worker process (``python -m module args…``), driven one command at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, module: str, *args: str) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT,
            limit=1 << 24,  # a view of hundreds of channels is one long line
        )  # fmt: skip
        worker = cls(proc)
        assert await worker.reply() == "ready"
        return worker

    async def reply(self) -> Any:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), REPLY_TIMEOUT_S)
        assert line, f"worker exited with {await self.proc.wait()}"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer["ok"]

    async def send(self, op: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        await self.proc.stdin.drain()

    async def call(self, op: str, **args: Any) -> Any:
        await self.send(op, **args)
        return await self.reply()

    async def stop(self) -> None:
        if self.proc.returncode is None:
            try:
                await self.call("quit")
            finally:
                if self.proc.returncode is None and self.proc.stdin is not None:
                    self.proc.stdin.close()
                await asyncio.wait_for(self.proc.wait(), REPLY_TIMEOUT_S)


async def serve(handle: Handler) -> None:
    """The worker's side: say ready, then answer each command until ``quit`` or EOF."""
    loop = asyncio.get_running_loop()
    print(json.dumps({"ok": "ready"}), flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or json.loads(line)["op"] == "quit":
            print(json.dumps({"ok": None}), flush=True)
            return
        try:
            reply: dict[str, Any] = {"ok": await handle(json.loads(line))}
        except Exception as exc:  # reported to the test, which fails on it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
