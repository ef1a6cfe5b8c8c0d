"""The distiller against a hostile or broken model, over real HTTP: an answer nested 100,000
arrays deep, 64 MB long, not JSON, not UTF-8, of the wrong types or trickled fails its own
scope (``ModelFailed``) while a healthy scope of the same run is distilled; the body is read
with a byte cap; the sidecar's background loop outlives a run that raised; the command prints
one line per failed scope, never a traceback.

The model is a tiny chat-completions server on 127.0.0.1 in the test's own event loop: a
request quoting :data:`MARK` gets the hostile answer, any other the fake model's."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import pytest

import shortterm
from shortterm import Category, Message, Reply, ScopeKey, ServerSettings, fake_model
from shortterm.memory import distill as distiller
from tests.support import clear_redis_prefix, service_url, with_query

MARK = "zq-hostile-mark"
HOSTILE = ScopeKey.server("s1", "c1", None)
HEALTHY = ScopeKey.server("s1", "c2", None)
MB = 1024 * 1024

Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]


# -- the model: a chat-completions endpoint speaking just enough HTTP/1.1 ----------------------


def _head(status: int, length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", "Connection: close"]
    lines.append("Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def sent(body: bytes, status: int = 200) -> Answer:
    """``body`` in one piece, with its Content-Length."""

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(_head(status, len(body)) + body)
        await writer.drain()

    return answer


def streamed(
    parts: Callable[[], Iterable[bytes]],
    *,
    declared: int | None = None,
    status: int = 200,
    pause_s: float = 0.0,
    on_part: Callable[[], None] = lambda: None,
) -> Answer:
    """The body as ``parts``, each written and drained before the next (nothing of the whole
    is held): chunked, or behind a ``declared`` Content-Length."""

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(_head(status, declared))
        for part in parts():
            writer.write(part if declared is not None else b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()  # raises once the client has hung up
            on_part()
            if pause_s:
                await asyncio.sleep(pause_s)
        if declared is None:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    return answer


def completion(content: object) -> bytes:
    """A well-formed chat completion whose message content is ``content``."""
    message = {"role": "assistant", "content": content}
    envelope = {"id": "x", "object": "chat.completion", "choices": [{"message": message}]}
    return json.dumps(envelope).encode()


ENVELOPE_HEAD = b'{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"'
ENVELOPE_TAIL = b'"}}]}'


class HostileModel:
    """``async with HostileModel(answer) as model``: ``model.url`` is its ``/v1`` URL."""

    def __init__(self, hostile: Answer) -> None:
        self.hostile = hostile
        self.asked = {"hostile": 0, "healthy": 0}
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> HostileModel:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(length.group(1)) if length else 0)
            if MARK.encode() in body:
                self.asked["hostile"] += 1
                await self.hostile(writer)
            else:
                self.asked["healthy"] += 1
                await sent(json.dumps(fake_model.complete(json.loads(body))).encode())(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what a capped read does
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


# -- the memory: one hostile scope (c1), one healthy (c2), both due --------------------------


async def _said(memory: shortterm.Memory, text: str, channel: str) -> None:
    t = memory.turn(user_id="u1", channel_id=channel, server_id="s1")
    await t.capture(history=[Message("user", text, author_id="u1")], replies=[Reply("ok")])


async def _two_scopes(memory: shortterm.Memory, settings: ServerSettings | None = None) -> None:
    await memory.configure_server("s1", settings or ServerSettings(refresh_cadence=1))
    await _said(memory, f"the plan for Friday {MARK}", "c1")
    await _said(memory, "the plan for Saturday is the ridge trail", "c2")


@pytest.fixture
async def mem(tmp_path: Path) -> AsyncIterator[shortterm.Memory]:
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(f"sqlite:///{tmp_path / 'd.db'}", config=config) as memory:
        yield memory


async def _assert_only_the_hostile_scope_failed(
    memory: shortterm.Memory, report: distiller.DistillReport, why: str
) -> None:
    assert [key for key, _ in report.failed] == [HOSTILE], report
    reason = report.failed[0][1]
    assert why in reason, reason
    assert "\n" not in reason and len(reason) < 600, reason  # one line, bounded
    assert report.distilled == [HEALTHY], report
    hostile = await memory.get(HOSTILE)  # nothing written or reset: the next run tries again
    assert hostile is not None and hostile.summary is None and hostile.turns_since_refresh == 1
    healthy = await memory.get(HEALTHY)
    assert healthy is not None and healthy.summary is not None
    assert "ridge trail" in healthy.summary


DEEP = b"[" * 100_000 + b"]" * 100_000

BAD_ANSWERS = {
    "a body nested 100,000 arrays deep": (sent(DEEP), "nested too deeply"),
    "content nested 100,000 arrays deep": (
        sent(ENVELOPE_HEAD[:-1] + DEEP + ENVELOPE_TAIL[1:]),
        "nested too deeply",
    ),
    "an HTML page": (sent(b"<html><body>Bad gateway\n</body></html>"), "not JSON"),
    "a truncated body": (sent(ENVELOPE_HEAD + b"half an answ"), "not JSON"),
    "not UTF-8": (sent(ENVELOPE_HEAD + b"caf\xe9 \xff\xfe" + ENVELOPE_TAIL), "not UTF-8"),
    "an empty body": (sent(b""), "not JSON"),
    "null": (sent(b"null"), "not a chat completion"),
    "a JSON string": (sent(b'"Notes: all fine"'), "not a chat completion"),
    "a JSON array": (sent(b"[1, 2, 3]"), "not a chat completion"),
    "no choices": (sent(b'{"choices": []}'), "not a chat completion"),
    "choices as a string": (sent(b'{"choices": "abc"}'), "not a chat completion"),
    "message as a list": (sent(b'{"choices": [{"message": []}]}'), "not a chat completion"),
    "content a number": (sent(completion(42)), "a number where its text belongs"),
    "content an object": (sent(completion({"summary": "x"})), "an object where its text"),
    "content a list": (sent(completion([{"type": "text"}])), "an array where its text belongs"),
    "content null": (sent(completion(None)), "null where its text belongs"),
    "content blank": (sent(completion("  \n ")), "no text"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
async def test_a_bad_answer_fails_its_scope_and_the_run_goes_on(
    mem: shortterm.Memory, case: str
) -> None:
    answer, why = BAD_ANSWERS[case]
    await _two_scopes(mem)
    async with HostileModel(answer) as model:
        report = await shortterm.distill(mem, base_url=model.url, model="m", retries=2)
    assert model.asked == {"hostile": 1, "healthy": 1}  # a bad answer is not retried
    await _assert_only_the_hostile_scope_failed(mem, report, why)


async def test_deep_json_in_a_category_answer_fails_its_scope(mem: shortterm.Memory) -> None:
    # In category mode the answer's text is JSON itself, parsed by the tool's own parser.
    cats = (Category("Plans", "what is planned"),)
    await _two_scopes(mem, ServerSettings(refresh_cadence=1, categories=cats))
    nested = '{"plans": ' + "[" * 20_000 + "]" * 20_000 + "}"  # under the size limit
    async with HostileModel(sent(completion(nested))) as model:
        report = await shortterm.distill(mem, base_url=model.url, model="m", retries=0)
    assert [key for key, _ in report.failed] == [HOSTILE], report
    assert "nested too deeply" in report.failed[0][1]
    assert report.distilled == [HEALTHY]


# -- a 64 MB answer: read up to the cap, never whole ------------------------------------------


def _status_kb(field: str) -> int | None:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else None


def _reset_peak_rss() -> bool:
    """Linux: VmHWM restarts from the current RSS (``5`` to clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _huge_body() -> Iterable[bytes]:
    yield ENVELOPE_HEAD
    piece = b"a" * (64 * 1024)
    for _ in range(64 * MB // len(piece)):
        yield piece
    yield ENVELOPE_TAIL


class RssWatch:
    """The test process's peak RSS growth over a block (VmHWM, reset at its start; and the RSS
    sampled as the server writes each part of a body), in MB; ``None`` without /proc."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.before: int | None = None
        self.growth_mb: float | None = None

    def sample(self) -> None:
        rss = _status_kb("VmRSS")
        if rss is not None:
            self.samples.append(rss)

    def __enter__(self) -> RssWatch:
        gc.collect()
        self.before = _status_kb("VmRSS")
        self._peak_reset = _reset_peak_rss()
        return self

    def __exit__(self, *exc: object) -> None:
        peaks = [*self.samples, (_status_kb("VmHWM") or 0) if self._peak_reset else 0]
        if self.before is not None:
            self.growth_mb = (max(peaks) - self.before) / 1024


def _assert_bounded(rss: RssWatch) -> None:
    """Well under the body's 64 MB (where /proc tells: Linux)."""
    if rss.growth_mb is not None:
        assert rss.growth_mb < 50, f"RSS grew by {rss.growth_mb:.0f} MB reading a 64 MB answer"


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
async def test_a_64_mb_answer_fails_its_scope_and_is_never_held(
    mem: shortterm.Memory, framing: str
) -> None:
    await _two_scopes(mem)
    size = sum(len(part) for part in _huge_body())
    rss = RssWatch()
    declared = size if framing == "content-length" else None
    async with HostileModel(streamed(_huge_body, declared=declared, on_part=rss.sample)) as model:
        with rss:
            started = time.monotonic()
            report = await shortterm.distill(mem, base_url=model.url, model="m", retries=0)
            elapsed = time.monotonic() - started
    _assert_bounded(rss)
    await _assert_only_the_hostile_scope_failed(mem, report, "the answer is too large")
    assert f"{distiller._MAX_ANSWER_BYTES:,} bytes" in report.failed[0][1]
    assert size > 10 * distiller._MAX_ANSWER_BYTES
    assert elapsed < 30


async def test_a_64_mb_error_is_read_no_further_than_its_excerpt(mem: shortterm.Memory) -> None:
    await _two_scopes(mem)
    rss = RssWatch()
    async with HostileModel(streamed(_huge_body, status=500, on_part=rss.sample)) as model:
        with rss:
            report = await shortterm.distill(mem, base_url=model.url, model="m", retries=0)
    _assert_bounded(rss)
    assert [key for key, _ in report.failed] == [HOSTILE], report
    reason = report.failed[0][1]
    assert "/v1/ answered 500: " in reason and "\n" not in reason and len(reason) < 600


async def test_a_trickled_answer_runs_into_the_whole_answer_timeout(
    mem: shortterm.Memory,
) -> None:
    # Every byte comes within the read timeout, the whole answer does not within timeout_s.
    body = completion("Notes: Friday.")

    def bytes_one_by_one() -> Iterable[bytes]:
        return (body[i : i + 1] for i in range(len(body)))

    await _two_scopes(mem)
    async with HostileModel(streamed(bytes_one_by_one, pause_s=0.1)) as model:
        started = time.monotonic()
        report = await shortterm.distill(mem, base_url=model.url, model="m", timeout_s=1, retries=0)
        elapsed = time.monotonic() - started
    await _assert_only_the_hostile_scope_failed(mem, report, "did not answer")
    assert elapsed < 4, elapsed


# -- the sidecar's background loop: it outlives every run ------------------------------------


async def test_the_background_loop_outlives_a_run_that_raised(mem: shortterm.Memory) -> None:
    await _two_scopes(mem)
    real_write = mem.write
    raised = 0

    async def write_once_broken(*args: Any, **kwargs: Any) -> Any:
        nonlocal raised
        if raised == 0:
            raised += 1
            raise RuntimeError("a bug no one foresaw")
        return await real_write(*args, **kwargs)

    mem.write = write_once_broken  # type: ignore[method-assign]
    reports: list[distiller.DistillReport] = []
    async with HostileModel(sent(DEEP)) as model:
        schedule = distiller.DistillSchedule(base_url=model.url, model="m", interval_s=0.05)
        task = asyncio.create_task(
            distiller.distill_forever(mem, schedule, on_report=reports.append)
        )
        try:
            for _ in range(1000):
                if len(reports) >= 4 or task.done():
                    break
                await asyncio.sleep(0.01)
            assert not task.done(), task.exception() if not task.cancelled() else "cancelled"
            assert len(reports) >= 4, reports
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert task.cancelled()  # a CancelledError still stops it
    first = reports[0]
    assert first.error == "RuntimeError: a bug no one foresaw", first
    later = reports[1:]
    # The healthy scope was distilled in a later run; the hostile one fails in every run.
    assert any(r.distilled == [HEALTHY] for r in later), later
    assert all([k for k, _ in r.failed] == [HOSTILE] for r in later), later
    assert all("nested too deeply" in r.failed[0][1] for r in later), later


# -- as an operator meets it: `shortterm serve` and `shortterm distill` as processes ---------


@pytest.fixture
async def shared(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    yield f"sqlite:///{tmp_path / 'shared.db'}", with_query(redis_url, prefix=quote(prefix))
    await clear_redis_prefix(redis_url, prefix)


def _env(store: str, cache: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    return {**clean, "SHORTTERM_STORE": store, "SHORTTERM_CACHE": cache}


def _popen(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


# The first run raises out of distill() (what a 100,000-deep answer did): the task must live.
_FIRST_RUN_RAISES = """
import shortterm.memory.distill as d
_real, _runs = d.distill, []
async def _distill(*args, **kwargs):
    _runs.append(1)
    if len(_runs) == 1:
        raise RecursionError("maximum recursion depth exceeded (injected)")
    return await _real(*args, **kwargs)
d.distill = _distill
"""


async def test_serve_keeps_distilling_after_a_run_that_raised(
    tmp_path: Path, shared: tuple[str, str]
) -> None:
    store, cache = shared
    async with shortterm.open(store, cache) as bot:
        await _two_scopes(bot)
    log = tmp_path / "serve.log"
    async with HostileModel(sent(DEEP)) as model:
        code = f"{_FIRST_RUN_RAISES}\nfrom shortterm.cli import main\nmain()"
        command = [sys.executable, "-c", code, "serve", "--port", "0"]
        command += ["--distill-base-url", model.url, "--distill-model", "m"]
        command += ["--distill-interval", "0.1"]
        proc = _popen(command, _env(store, cache), log)
        try:
            failures = 0
            for _ in range(600):
                failures = log.read_text().count("distill of server s1 channel c1 failed")
                if failures >= 3 or proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            said = log.read_text()
            assert proc.poll() is None, said
            assert "distill run failed: RecursionError" in said, said
            assert failures >= 3, said  # runs go on after the one that raised
            assert "nested too deeply" in said and "Traceback" in said  # the raise's cause
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 30)
    async with shortterm.open(store, cache) as bot:
        healthy = await bot.get(HEALTHY)
    assert healthy is not None and healthy.summary is not None


async def test_the_command_prints_one_line_per_failed_scope(shared: tuple[str, str]) -> None:
    store, cache = shared
    async with shortterm.open(store, cache) as bot:
        await _two_scopes(bot)
    async with HostileModel(sent(DEEP)) as model:
        command = [sys.executable, "-m", "shortterm.cli", "distill"]
        command += ["--base-url", model.url, "--model", "m", "--retries", "0"]
        done = await asyncio.to_thread(
            subprocess.run,
            command,
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(store, cache),
        )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "distilled 1" in done.stdout and "failed 1" in done.stdout, done.stdout
    errors = done.stderr.splitlines()
    assert errors == [
        "error: server s1 channel c1: the answer is not a chat completion: JSON nested too deeply",
        "error: the model failed; nothing was written for those scopes",
    ], done.stderr
