"""Running the sidecar for a test: uvicorn on an ephemeral loopback port, in this event loop
(a background task) or in a thread of its own (for synchronous clients)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import uvicorn

import shortterm
from shortterm.server import SidecarSettings, create_app


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
