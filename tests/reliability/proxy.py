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

``cut_those(marker, mode)`` cuts only the relayed connections whose client has sent ``marker``
(say ``b"LISTEN"``) and keeps relaying the others: a NAT that forgot one idle flow
(``blackhole``: that connection stays open and delivers nothing either way, no reset) or one
connection dropped visibly (``reset``). New connections are relayed, unless ``new_too`` cuts
them too once they send the marker (until ``restore()``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

Mode = Literal["reset", "blackhole", "replies", "commit"]
_CHUNK = 1 << 16
_KEPT = 1 << 16  # what a client sent first is kept, for cut_those to match


class _Link:
    """One relayed connection: its two ends, what its client sent first, whether it is held."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter | None) -> None:
        self.client = client
        self.upstream = upstream
        self.sent = bytearray()
        self.held = False  # cut_those(..., "blackhole"): nothing passes any more
        self.committing = False  # its client sent a COMMIT under the "commit" cut

    def abort(self) -> None:
        self.client.transport.abort()
        if self.upstream is not None:
            self.upstream.transport.abort()


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: Mode | None = None  # None: relaying
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._cutting: dict[bytes, Literal["reset", "blackhole"]] = {}  # cut_those(new_too=True)
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
        return len(self._links)

    def cut(self, mode: Mode = "reset") -> None:
        self.mode = mode
        if mode == "reset":
            self._abort_all()

    def cut_those(
        self, marker: bytes, mode: Literal["reset", "blackhole"], *, new_too: bool = False
    ) -> int:
        """Cut the relayed connections whose client sent ``marker``; how many. With
        ``new_too``, so are later connections as soon as they send it, until :meth:`restore`."""
        if new_too:
            self._cutting[marker] = mode
        chosen = [link for link in self._links if marker in link.sent and not link.held]
        for link in chosen:
            self._cut_link(link, mode)
        return len(chosen)

    def _cut_link(self, link: _Link, mode: Literal["reset", "blackhole"]) -> None:
        if mode == "reset":
            link.abort()
            self._links.discard(link)
        else:
            link.held = True

    def restore(self) -> None:
        self._cutting.clear()
        held = self.mode == "blackhole"
        self.mode = None
        if held:
            self._abort_all()

    def _abort_all(self) -> None:
        for link in list(self._links):
            link.abort()
        self._links.clear()

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
            held = _Link(writer, None)
            self._links.add(held)
            with contextlib.suppress(ConnectionError, OSError):
                while await reader.read(_CHUNK):
                    pass  # swallowed: the partition delivers nothing
            self._links.discard(held)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        pumps = [
            asyncio.create_task(self._pump(link, reader, up_writer)),
            asyncio.create_task(self._pump(link, up_reader, writer, to_client=True)),
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
            self._links.discard(link)
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pump(
        self,
        link: _Link,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        to_client: bool = False,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    return
                if not to_client and len(link.sent) < _KEPT:
                    link.sent += data[: _KEPT - len(link.sent)]
                    for marker, mode in self._cutting.items():
                        if marker in link.sent and not link.held:
                            self._cut_link(link, mode)
                    if link not in self._links:
                        return  # reset just now
                if self.mode == "blackhole" or link.held:
                    continue  # a partition: bytes in flight are lost
                if self.mode == "replies" and to_client:
                    dst.transport.abort()  # the server did the work; its answer is lost
                    return
                if self.mode == "commit":
                    if to_client and link.committing:
                        dst.transport.abort()  # the commit is done; its answer is lost
                        return
                    if not to_client and b"COMMIT" in data:
                        link.committing = True  # before the server can answer it
                dst.write(data)
                await dst.drain()

    async def close(self) -> None:
        self._abort_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        # Aborted, the relays end by themselves: Python 3.11 logs a connection handler that
        # was cancelled instead as an error ("Exception in callback ... connection_made").
        pending: set[asyncio.Task[None]] = set()
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=2.0)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
