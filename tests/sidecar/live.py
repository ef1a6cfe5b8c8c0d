"""Running the sidecar for a test: uvicorn on an ephemeral loopback port, in this event loop
(a background task), in a thread of its own (for synchronous clients), or as a real
``shortterm serve`` process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import uvicorn

import shortterm
from shortterm.sidecar import SidecarSettings, create_app


def _server(app: Any) -> uvicorn.Server:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, lifespan="off", access_log=False
    )
    return uvicorn.Server(config)


def _port(server: uvicorn.Server) -> int:
    port: int = server.servers[0].sockets[0].getsockname()[1]
    return port


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` in a background task of the running loop; yields its base URL."""
    server = _server(app)
    task = asyncio.get_running_loop().create_task(server.serve())
    for _ in range(1000):  # bounded polling on the server's own flag
        if server.started or task.done():
            break
        await asyncio.sleep(0.005)
    if task.done():
        task.result()  # startup failed: raise its error
    assert server.started, "uvicorn did not start within 5 s"
    try:
        yield f"http://127.0.0.1:{_port(server)}"
    finally:
        server.should_exit = True
        await task


@contextmanager
def serving_in_thread(
    open_memory: Callable[[], Any], settings: SidecarSettings | None = None
) -> Iterator[str]:
    """Open a memory and serve it from a thread with its own event loop; yields the URL."""
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def main() -> None:
        memory: shortterm.Memory = await open_memory()
        try:
            server = _server(create_app(memory, settings))
            holder["server"] = server
            task = asyncio.get_running_loop().create_task(server.serve())
            for _ in range(1000):
                if server.started or task.done():
                    break
                await asyncio.sleep(0.005)
            holder["url"] = f"http://127.0.0.1:{_port(server)}" if server.started else None
            ready.set()
            await task
        finally:
            await memory.close()

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the test below
            holder["error"] = exc
            ready.set()

    thread = threading.Thread(target=target, name="sidecar-under-test", daemon=True)
    thread.start()
    ready.wait(10)
    if holder.get("error") is not None or not holder.get("url"):
        thread.join(5)
        raise AssertionError(f"the sidecar did not start: {holder.get('error')!r}")
    try:
        yield holder["url"]
    finally:
        holder["server"].should_exit = True
        thread.join(10)
        assert not thread.is_alive(), "the sidecar thread did not stop"
        if holder.get("error") is not None:
            raise holder["error"]


SHORTTERM = Path(sys.executable).with_name("shortterm")


@contextmanager
def sidecar_process(
    store: str,
    cache: str = "memory://",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[str]:
    """``shortterm serve`` in a process of its own on a free loopback port; yields its URL.
    ``env`` adds ``SHORTTERM_*`` settings (the test's own are not passed on), ``args`` more
    options of ``serve``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = subprocess.Popen(
        [str(SHORTTERM), "serve", "--port", "0", "--store", store, "--cache", cache, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, **(env or {})},
    )
    assert proc.stderr is not None
    url = ""
    seen: list[str] = []
    for _ in range(200):
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("shortterm sidecar listening on "):
            url = line.split()[4]
            break
    if not url:
        proc.kill()
        proc.wait(10)
        proc.stderr.close()
        raise AssertionError("the sidecar did not start:\n" + "".join(seen))
    # Keep reading its log so a full pipe never blocks it.
    log: list[str] = []
    drain = threading.Thread(target=lambda: log.extend(proc.stderr or ()), daemon=True)
    drain.start()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(20)
        drain.join(5)
        proc.stderr.close()
        assert "Traceback" not in "".join(log), "".join(log)
