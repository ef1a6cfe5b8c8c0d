"""A loopback TCP relay between a client and a real server, which a test can cut and restore.

The real PostgreSQL and Redis servers are shared, so an outage is simulated here, between the
client and the server, never by stopping the server. Two kinds of cut:

* ``reset``: every relayed connection is aborted (the client sees a reset) and new ones are
  aborted as soon as they arrive: a server that went away.
* ``blackhole``: connections stay open but nothing is forwarded either way, and new ones are
  accepted and then ignored: a network partition, where only the client's own timeouts help.

* ``replies``: what the client sends still reaches the server, but the first bytes the server
  answers make the relay abort the connection instead: a commit whose outcome the client never
  learns.

* ``commit``: everything is relayed until the client sends a ``COMMIT`` (PostgreSQL's simple
  query); that reaches the server, and the relay aborts the connection at its answer: a
  transaction of several statements committed, without the client learning it.

``restore()`` lets new connections through again; connections held by a blackhole are aborted
then (their client gave up on them long ago).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

Mode = Literal["reset", "blackhole", "replies", "commit"]
_CHUNK = 1 << 16


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: Mode | None = None  # None: relaying
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the proxy first"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def open_connections(self) -> int:
        return len(self._pairs)

    def cut(self, mode: Mode = "reset") -> None:
        self.mode = mode
        if mode == "reset":
            self._abort_all()

    def restore(self) -> None:
        held = self.mode == "blackhole"
        self.mode = None
        if held:
            self._abort_all()

    def _abort_all(self) -> None:
        for client, upstream in list(self._pairs):
            client.transport.abort()
            if upstream is not None:
                upstream.transport.abort()
        self._pairs.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        finally:
            writer.transport.abort()
            self._tasks.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "reset":
            writer.transport.abort()
            return
        if self.mode == "blackhole":
            pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._pairs.add(pair)
            with contextlib.suppress(ConnectionError, OSError):
                while await reader.read(_CHUNK):
                    pass  # swallowed: the partition delivers nothing
            self._pairs.discard(pair)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        committing = [False]  # this connection sent a COMMIT under the "commit" cut
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, committing=committing)),
            asyncio.create_task(
                self._pump(up_reader, writer, to_client=True, committing=committing)
            ),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            for task in pumps:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self._tasks.discard(task)
            self._pairs.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        to_client: bool = False,
        committing: list[bool] | None = None,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    return
                if self.mode == "blackhole":
                    continue  # a partition: bytes in flight are lost
                if self.mode == "replies" and to_client:
                    dst.transport.abort()  # the server did the work; its answer is lost
                    return
                if committing is not None and self.mode == "commit":
                    if to_client and committing[0]:
                        dst.transport.abort()  # the commit is done; its answer is lost
                        return
                    if not to_client and b"COMMIT" in data:
                        committing[0] = True  # before the server can answer it
                dst.write(data)
                await dst.drain()

    async def close(self) -> None:
        self._abort_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
