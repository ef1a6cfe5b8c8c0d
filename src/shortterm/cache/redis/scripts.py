"""The Redis hot tier's Lua scripts (``lua/``) and how one runs in its group's slot.

A script goes by its SHA (``EVALSHA``, no ``SCRIPT EXISTS`` first, also inside pipelines) and
by its source after a server answered ``NOSCRIPT`` (it restarted or was flushed: ``EVAL``
caches it again). Each starts with a ``#!lua`` shebang, so Redis (7 or later) checks every key
it touches against the slot of the keys it declares. What forgets and repairs run is flagged
``allow-oom``: a full Redis (``noeviction``) refuses new data, never a forget.

A call that depends on nothing another reads (a sidecar turn's registration, its end, the
settle of its upgrade guard) can *ride* with the next pipeline the same task sends
(:meth:`Groups.ride`), so it costs no round trip of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any, cast

from redis.exceptions import NoScriptError

from .client import BY_SOURCE, Calls, Client
from .layout import Layout
from .marks import Marks
from .sources import lua_source

__all__ = ["Groups", "Ride", "Script"]


def _failed(reply: object) -> bool:
    return isinstance(reply, Exception)


_SOURCES: dict[str, str] = {}  # every script's source by its SHA, to resend it by source


class Script:
    """A Lua script, run by its SHA and, after ``NOSCRIPT``, by its source."""

    def __init__(self, source: str, *, flags: str = "") -> None:
        shebang = f"#!lua flags={flags}\n" if flags else "#!lua\n"
        self.source = source if source.startswith("#!lua") else shebang + source
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()
        _SOURCES[self.sha] = self.source


class _Recorder:
    """Stands in for a pipeline while a batch is built: the commands, to send (again)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.commands.append((name, args, kwargs))

        return record


_NOT_YET = object()

_Command = tuple[str, tuple[Any, ...], dict[str, Any]]


class _Rider:
    """One script call waiting for a pipeline of its task to carry it."""

    __slots__ = ("command", "future", "task", "what")

    def __init__(self, what: str, command: _Command, task: _Task) -> None:
        self.what = what
        self.command = command
        self.task = task  # whose pipelines may carry it
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


_Task = asyncio.Task[Any] | None
_THIS_TASK: Any = object()  # batch's default: the calling task's riders


class Ride:
    """A script call riding with its task's next pipeline on the tier."""

    __slots__ = ("_groups", "_rider")

    def __init__(self, groups: Groups, rider: _Rider) -> None:
        self._groups = groups
        self._rider = rider

    async def result(self) -> Any:
        """The call's reply; sent now (with the task's other waiting riders) if no pipeline
        took it yet."""
        rider = self._rider
        if self._groups.waiting(rider):
            await self._groups.batch(rider.what, _nothing, task=rider.task)
        return await rider.future

    def drop(self) -> None:
        """Give up on the reply: unsent, the call is not sent; sent, its outcome is ignored."""
        rider = self._rider
        if self._groups.unqueue(rider):
            rider.future.cancel()
        elif rider.future.done() and not rider.future.cancelled():
            rider.future.exception()  # retrieved: no "never retrieved" warning


def _nothing(pipe: Any) -> None:
    return None


# Each starts with the shared helpers of prelude.lua; ARGV[1] is always the group's base (see
# redis_layout), and each file says what the rest of its ARGV is and what it returns.
_PRELUDE = lua_source("prelude")


def _script(name: str, *, allow_oom: bool = False) -> Script:
    return Script(_PRELUDE + lua_source(name), flags="allow-oom" if allow_oom else "")


READ = Script(lua_source("read"), flags="no-writes")  # no prelude: it names only its KEYS
RECENT = Script(lua_source("recent"), flags="no-writes")  # the same: a turn's recall read


CAPTURE = _script("capture")
APPLY = _script("apply")
DELETE = _script("delete", allow_oom=True)
DELETE_INDEX = _script("delete_index", allow_oom=True)
SWEEP = _script("sweep", allow_oom=True)
AUTHORED = _script("authored", allow_oom=True)
REWRITE = _script("rewrite", allow_oom=True)
RECORD_FORGET = _script("record_forget", allow_oom=True)
MARK = _script("mark", allow_oom=True)
REPLAY = _script("replay", allow_oom=True)
BACKFILL = _script("backfill", allow_oom=True)


class Groups:
    """Runs scripts and pipelines on the tier's client, and keeps each group's totals as
    its scripts last returned them (``stats()`` adds them up)."""

    def __init__(self, client: Client, layout: Layout, calls: Calls) -> None:
        self.client = client
        self.layout = layout
        self.calls = calls
        self.totals = [(0, 0)] * layout.groups
        self.marks = Marks(layout.groups)
        self._riders: dict[_Task, list[_Rider]] = {}  # per task, what no pipeline took yet
        self._scripts: dict[str, Script] = {}  # others' scripts (the sidecar's), by source

    def script(self, source: str) -> Script:
        """A script of another module's (the sidecar's turn registry), made once."""
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = Script(source)
        return script

    @property
    def all(self) -> range:
        return range(self.layout.groups)

    def declared(self, group: int, *keys: str) -> list[str]:
        """The group's fixed keys and ``keys``: what a script of the group declares."""
        return [*self.layout.fixed_keys(group), *keys]

    def eval(self, target: Any, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """Queue (on a pipeline) or start (on the client) one script call."""
        if BY_SOURCE.get():
            return target.eval(script.source, len(keys), *keys, *args)
        return target.evalsha(script.sha, len(keys), *keys, *args)

    async def run(self, what: str, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        return await self.calls.call(what, lambda: self.eval(self.client, script, keys, args))

    def ride(self, what: str, script: Script, keys: Sequence[str], args: Sequence[str]) -> Ride:
        """Queue one script call for this task's next :meth:`batch` on the tier."""
        task = asyncio.current_task()
        command: _Command = ("evalsha", (script.sha, len(keys), *keys, *args), {})
        rider = _Rider(what, command, task)
        self._riders.setdefault(task, []).append(rider)
        return Ride(self, rider)

    def waiting(self, rider: _Rider) -> bool:
        return rider in self._riders.get(rider.task, ())

    def unqueue(self, rider: _Rider) -> bool:
        """Take a rider off its queue; False when a pipeline took it already."""
        queue = self._riders.get(rider.task)
        if queue is None or rider not in queue:
            return False
        queue.remove(rider)
        if not queue:
            del self._riders[rider.task]
        return True

    async def batch(
        self, what: str, build: Callable[[Any], object], *, task: _Task = _THIS_TASK
    ) -> list[Any]:
        """One pipeline (one round trip per node), carrying the riders waiting in this task
        (or in ``task``). An attempt that failed in part (a node without the script, a slot
        moving) sends again only the commands that failed, so a command is never applied
        twice and every reply is its first application's."""
        recorder = _Recorder()
        build(recorder)
        own = len(recorder.commands)
        taken = self._riders.pop(asyncio.current_task() if task is _THIS_TASK else task, [])
        if not taken:
            return await self._send(what, recorder.commands)
        try:
            replies = await self._send(what, recorder.commands + [r.command for r in taken])
        except BaseException as exc:
            for rider in taken:
                if isinstance(exc, asyncio.CancelledError):
                    rider.future.cancel()
                else:
                    rider.future.set_exception(exc)
            raise
        for rider, reply in zip(taken, replies[own:], strict=True):
            rider.future.set_result(reply)
        return replies[:own]

    async def _send(self, what: str, commands: list[_Command]) -> list[Any]:
        replies: list[Any] = [_NOT_YET] * len(commands)
        by_source: set[int] = set()

        async def send() -> list[Any]:
            pending = [i for i, r in enumerate(replies) if r is _NOT_YET or _failed(r)]
            pipe = self.client.pipeline(transaction=False)
            for i in pending:
                name, args, kwargs = commands[i]
                if name == "evalsha" and (i in by_source or BY_SOURCE.get()):
                    name, args = "eval", (_SOURCES[args[0]], *args[1:])
                getattr(pipe, name)(*args, **kwargs)
            for i, reply in zip(pending, await pipe.execute(raise_on_error=False), strict=True):
                replies[i] = reply
                if isinstance(reply, NoScriptError):
                    by_source.add(i)
            for reply in replies:
                if _failed(reply):
                    raise reply
            return replies

        return cast(list[Any], await self.calls.call(what, send))

    def total(self, group: int, reply: Sequence[Any]) -> int:
        """Keep the group's totals and mark from a script's reply; returns its result."""
        self.totals[group] = (int(reply[1]), int(reply[2]))
        self.marks.seen(group, reply[3])
        return int(reply[0])
