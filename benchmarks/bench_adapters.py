"""Per-turn cost of shortterm's Agents SDK session beside the SDK's own sessions, in one run.

An adapter turn is what the Agents SDK asks of a session on each run: read it
(``get_items(limit=...)``), then save the user's message and the assistant's answer
(``add_items([user, assistant])``). Variants, measured in interleaved rounds:

* ``shortterm PG+Redis``: ``ShortTermSession`` over ``shortterm.open(postgres, cache=redis)``;
* ``RedisSession``: the SDK's ``agents.extensions.memory.RedisSession`` on the same Redis;
* ``shortterm SQLite+in-process``: ``ShortTermSession`` over the embedded default;
* ``SQLiteSession``: the SDK's own, on a file (a reference for the embedded default).

Several users talk in several channels of one server, in a fixed pseudo-random order, so a
shortterm read recalls the server's other channels (its default) as a real bot's does. Both
kinds of session read the same window: the newest ``Config.max_messages`` messages. One
session object serves each (user, channel) pair, as a bot keeps one per conversation.

    python benchmarks/bench_adapters.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        --redis redis://127.0.0.1:6379/0 [--turns 400] [--rounds 7] [--quick] [--json out.json] \\
        [--breakdown 300]

``--postgres`` / ``--redis`` default to ``SHORTTERM_TEST_POSTGRES_URL`` /
``SHORTTERM_TEST_REDIS_URL``. Each figure is the median over rounds of a round's median µs per
turn; a ratio divides two variants' medians of the same round, and its median is shown. The
PostgreSQL schema and the Redis keys of the run (one private prefix) are removed after.
``--breakdown N`` then runs N more shortterm PG+Redis turns timing ``get_items`` and
``add_items`` apart (wall and this process's CPU) and counting, by patching the clients for
the duration, Redis round trips and commands and PostgreSQL statements. The machine's load
moves the PostgreSQL figures most: compare variants of one run, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import shortterm
from shortterm.integrations.openai_agents import ShortTermSession

SERVER = "guild-1"
CHANNELS = ("general", "plans", "games", "music", "help", "random")
USERS = ("ana", "bo", "chen", "dara", "eli", "fin", "gus", "hana")
BOT = "Tomo"
WINDOW = shortterm.Config().max_messages  # both kinds of session read this many messages

_WORDS = (
    "hike",
    "saturday",
    "trail",
    "weather",
    "meet",
    "station",
    "eight",
    "bring",
    "water",
    "snacks",
    "map",
    "ticket",
    "train",
    "maybe",
    "later",
    "sounds",
    "good",
    "who",
    "is",
    "coming",
    "rain",
    "forecast",
    "plan",
    "b",
    "cafe",
    "after",
    "lunch",
)
# Now and then a message the quoting cannot wave through (non-ASCII, a bracket, a colon).
_ODD = ("café ☕ ok", "[link] see above", "note: bring a jacket", "«done»", "12:30 works")


def _text(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize()
    if rng.random() < 0.15:
        text += " " + rng.choice(_ODD)
    return text + rng.choice((".", "!", "?", ""))


@dataclass(frozen=True, slots=True)
class Step:
    user: str
    channel: str
    said: str
    answer: str


def plan(count: int, seed: int = 7) -> list[Step]:
    """The turns, the same for every variant: who speaks where, and what."""
    rng = random.Random(seed)
    steps = []
    channel = CHANNELS[0]
    for _ in range(count):
        if rng.random() < 0.4:  # conversations stay a while in one channel
            channel = rng.choice(CHANNELS)
        steps.append(
            Step(rng.choice(USERS), channel, _text(rng, rng.randint(4, 18)), _text(rng, 20))
        )
    return steps


# -- the variants ---------------------------------------------------------------------------


class Session(Protocol):
    """What the bench asks of a session (part of the SDK's ``Session`` protocol)."""

    async def get_items(self, limit: int | None = None) -> list[Any]: ...

    async def add_items(self, items: list[Any]) -> None: ...


@dataclass
class Variant:
    name: str
    session: Callable[[str, str], Session]  # (user, channel) → its session
    cursor: int = 0  # the next step of the plan: the run goes on from round to round
    rounds: list[float] = field(default_factory=list)  # each round's median µs per turn
    cpu: list[float] = field(default_factory=list)  # each round's client CPU µs per turn
    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)

    def of(self, step: Step) -> Session:
        key = (step.user, step.channel)
        s = self.sessions.get(key)
        if s is None:
            s = self.sessions[key] = self.session(step.user, step.channel)
        return s


def said(step: Step) -> list[dict[str, str]]:
    return [{"role": "user", "content": step.said}, {"role": "assistant", "content": step.answer}]


async def turn(session: Session, step: Step) -> None:
    await session.get_items(WINDOW)
    await session.add_items(said(step))


def shortterm_sessions(memory: shortterm.Memory) -> Callable[[str, str], Session]:
    def make(user: str, channel: str) -> Session:
        return ShortTermSession(
            memory,
            user_id=user,
            channel_id=channel,
            server_id=SERVER,
            server_name="Hikers",
            channel_name=channel,
            user_name=user.capitalize(),
            bot_name=BOT,
        )

    return make


def _with_query(url: str, **options: str) -> str:
    query = "&".join(f"{k}={quote(v)}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


@contextlib.asynccontextmanager
async def variants(
    pg_url: str, redis_url: str, tmp: Path, tag: str
) -> AsyncIterator[list[Variant]]:
    """The four variants, open; the run's PostgreSQL schema and Redis keys removed on exit."""
    import psycopg
    import redis.asyncio as aioredis
    from agents import SQLiteSession
    from agents.extensions.memory import RedisSession

    schema = f"bench_{tag}"
    prefixes = (f"bench-adapters:{tag}:st:", f"bench-adapters:{tag}:sdk")
    client = aioredis.Redis.from_url(redis_url)  # one client for every RedisSession, as an app
    sdk_sessions: list[SQLiteSession] = []

    async def cleanup() -> None:
        for session in sdk_sessions:
            session.close()
        for prefix in prefixes:
            async for name in client.scan_iter(match=f"{prefix}*", count=1000):
                await client.delete(name)
        await client.aclose()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(cleanup)  # runs last: after the memories are closed
        shared = await stack.enter_async_context(
            shortterm.open(
                _with_query(pg_url, schema=schema), _with_query(redis_url, prefix=prefixes[0])
            )
        )
        local = await stack.enter_async_context(shortterm.open(f"sqlite:///{tmp / 'st.db'}"))

        def redis_session(user: str, channel: str) -> Session:
            # One history per channel, like the bot's live scope.
            return RedisSession(channel, redis_client=client, key_prefix=prefixes[1])

        def sqlite_session(user: str, channel: str) -> Session:
            sdk_sessions.append(SQLiteSession(channel, tmp / "sdk.db"))
            return sdk_sessions[-1]

        yield [
            Variant("shortterm PG+Redis", shortterm_sessions(shared)),
            Variant("RedisSession", redis_session),
            Variant("shortterm SQLite+in-process", shortterm_sessions(local)),
            Variant("SQLiteSession", sqlite_session),
        ]


# -- measuring ------------------------------------------------------------------------------


def next_step(v: Variant, steps: list[Step]) -> Step:
    step = steps[v.cursor % len(steps)]
    v.cursor += 1
    return step


async def run(v: Variant, steps: list[Step], count: int) -> list[float]:
    """``count`` turns of ``v`` from where it left off; µs per turn."""
    samples = []
    for _ in range(count):
        step = next_step(v, steps)
        session = v.of(step)
        started = time.perf_counter_ns()
        await turn(session, step)
        samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


async def measure(vs: list[Variant], steps: list[Step], turns: int, rounds: int) -> None:
    warm = len(USERS) * len(CHANNELS) * 2  # every session made, every window full
    for v in vs:
        await run(v, steps, warm)
    for r in range(rounds):
        for v in vs[r % len(vs) :] + vs[: r % len(vs)]:  # who goes first rotates
            gc.collect()
            cpu = time.process_time_ns()
            samples = await run(v, steps, turns)
            v.cpu.append((time.process_time_ns() - cpu) / 1000 / turns)
            v.rounds.append(statistics.median(samples))


def results(vs: list[Variant], base: str) -> dict[str, Any]:
    by = {v.name: v for v in vs}
    out: dict[str, Any] = {}
    for v in vs:
        ratios = [a / b for a, b in zip(v.rounds, by[base].rounds, strict=True)]
        out[v.name] = {
            "median_us": statistics.median(v.rounds),
            "client_cpu_us": statistics.median(v.cpu),
            "ratio": statistics.median(ratios),
            "rounds_us": v.rounds,
        }
    return out


def report(res: dict[str, Any], base: str) -> str:
    lines = [
        f"| variant | median µs per turn | client CPU µs per turn | × {base} |",
        "|---|---:|---:|---:|",
    ]
    for name, r in res.items():
        lines.append(
            f"| {name} | {r['median_us']:.0f} | {r['client_cpu_us']:.0f} | {r['ratio']:.2f} |"
        )
    return "\n".join(lines)


# -- where a shortterm turn goes ------------------------------------------------------------

# psycopg converts a statement's placeholders on every execute unless the statement is at
# most this many bytes with at most 50 parameters (those conversions it keeps in a cache).
PSYCOPG_CACHED_BYTES = 4096


@dataclass
class Tally:
    """What the calls under count asked of the services."""

    redis_writes: int = 0  # one per command or pipeline sent: a round trip
    redis_commands: int = 0
    statements: dict[tuple[str, int, int, bool], int] = field(default_factory=dict)


@contextlib.contextmanager
def counting(tally: Tally) -> Iterator[None]:
    """Count Redis round trips and commands, and PostgreSQL statements, while inside."""
    import psycopg
    from redis.asyncio.connection import AbstractConnection

    send, pack = AbstractConnection.send_packed_command, AbstractConnection.pack_command
    execute = psycopg.AsyncCursor.execute

    async def counted_send(self: Any, command: Any, check_health: bool = True) -> None:
        tally.redis_writes += 1
        await send(self, command, check_health)

    def counted_pack(self: Any, *args: Any) -> Any:
        tally.redis_commands += 1  # a pipeline packs each of its commands through here too
        return pack(self, *args)

    async def counted_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        raw = isinstance(self, psycopg.AsyncRawCursor)  # positional: nothing to convert
        key = (" ".join(text.split())[:40], len(text.encode()), len(params or ()), raw)
        tally.statements[key] = tally.statements.get(key, 0) + 1
        return await execute(self, query, params, **kw)

    patches: list[tuple[Any, str, Any]] = [
        (AbstractConnection, "send_packed_command", counted_send),
        (AbstractConnection, "pack_command", counted_pack),
        (psycopg.AsyncCursor, "execute", counted_execute),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


async def breakdown(v: Variant, steps: list[Step], turns: int) -> dict[str, Any]:
    """``turns`` turns of ``v``, the read and the save timed apart (wall and client CPU),
    with the Redis round trips and commands and the PostgreSQL statements each made."""
    spent = {"get_items": [0, 0], "add_items": [0, 0]}
    tallies = {"get_items": Tally(), "add_items": Tally()}
    for _ in range(turns):
        step = next_step(v, steps)
        session = v.of(step)
        for name in spent:
            with counting(tallies[name]):
                wall, cpu = time.perf_counter_ns(), time.process_time_ns()
                if name == "get_items":
                    await session.get_items(WINDOW)
                else:
                    await session.add_items(said(step))
                spent[name][0] += time.perf_counter_ns() - wall
                spent[name][1] += time.process_time_ns() - cpu
    out: dict[str, Any] = {}
    for name, (wall, cpu) in spent.items():
        t = tallies[name]
        out[name] = {
            "wall_us": wall / turns / 1000,
            "client_cpu_us": cpu / turns / 1000,
            "redis_round_trips": t.redis_writes / turns,
            "redis_commands": t.redis_commands / turns,
            "statements": [
                {"sql": sql, "bytes": size, "params": params, "raw": raw, "per_turn": n / turns}
                for (sql, size, params, raw), n in t.statements.items()
            ],
        }
    return out


def report_breakdown(res: dict[str, Any]) -> str:
    lines = [
        "| call | wall µs | client CPU µs | Redis round trips | Redis commands | PG statements |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in res.items():
        n = sum(st["per_turn"] for st in r["statements"])
        lines.append(
            f"| {name} | {r['wall_us']:.0f} | {r['client_cpu_us']:.0f} | "
            f"{r['redis_round_trips']:.2f} | {r['redis_commands']:.2f} | {n:.2f} |"
        )
    for name, r in res.items():
        for st in r["statements"]:
            cached = st["bytes"] <= PSYCOPG_CACHED_BYTES and st["params"] <= 50
            how = (
                "positional, nothing to convert"
                if st.get("raw")
                else f"psycopg {'caches' if cached else 're-parses'} it"
            )
            lines.append(
                f"- {name}: {st['per_turn']:.2f} × `{st['sql']}…` ({st['bytes']} bytes, "
                f"{st['params']} parameters: {how})"
            )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--postgres",
        default=os.environ.get("SHORTTERM_TEST_POSTGRES_URL"),
        help="a PostgreSQL URL (default: $SHORTTERM_TEST_POSTGRES_URL)",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("SHORTTERM_TEST_REDIS_URL"),
        help="a Redis URL (default: $SHORTTERM_TEST_REDIS_URL)",
    )
    parser.add_argument("--turns", type=int, default=400, help="turns per variant per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="100 turns × 3 rounds")
    parser.add_argument(
        "--breakdown",
        type=int,
        default=0,
        metavar="TURNS",
        help="then time that many shortterm PG+Redis turns call by call, counting round trips",
    )
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args()
    if not args.postgres or not args.redis:
        parser.error("--postgres and --redis (or their environment variables) are required")
    if args.quick:
        args.turns, args.rounds = 100, 3
    steps = plan(5000)
    base = "RedisSession"
    split: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        async with variants(args.postgres, args.redis, Path(tmp), uuid.uuid4().hex[:12]) as vs:
            await measure(vs, steps, args.turns, args.rounds)
            if args.breakdown:
                split = await breakdown(vs[0], steps, args.breakdown)
    res = results(vs, base)
    print(f"{args.rounds} rounds × {args.turns} turns per variant, window {WINDOW} messages")
    print(report(res, base))
    if split is not None:
        print(f"\nshortterm PG+Redis, {args.breakdown} turns, per turn:")
        print(report_breakdown(split))
    if args.json is not None:
        out = {"turns": args.turns, "rounds": args.rounds, "window": WINDOW, "variants": res}
        args.json.write_text(json.dumps(out | {"breakdown": split}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
