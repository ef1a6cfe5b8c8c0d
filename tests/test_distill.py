"""The distiller: summaries written with any OpenAI-compatible model, through the tool's fenced
write path (docs/tool.md, "The distiller")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import shortterm
from shortterm import (
    Category,
    Message,
    Privacy,
    Reply,
    ScopeKey,
    ServerSettings,
    UserSettings,
    fake_model,
)
from shortterm.memory import distill as distiller
from tests.fake_model_process import fake_model_process
from tests.reliability.proxy import Proxy
from tests.support import clear_redis_prefix, service_url, with_query

SERVER = ScopeKey.server("s1", "c1", None)


async def _said(
    memory: shortterm.Memory, text: str, *, channel: str = "c1", user: str = "u1", **turn: Any
) -> None:
    t = memory.turn(user_id=user, channel_id=channel, server_id="s1", **turn)
    await t.capture(history=[Message("user", text, author_id=user)], replies=[Reply(f"ok: {text}")])


def _fake_post(sent: list[list[dict[str, str]]]) -> distiller.Poster:
    async def post(messages: list[dict[str, str]]) -> str:
        sent.append(messages)
        answer = fake_model.complete({"model": "m", "messages": messages})
        return str(answer["choices"][0]["message"]["content"])

    return post


@pytest.fixture
async def mem(tmp_path: Path) -> AsyncIterator[shortterm.Memory]:
    config = shortterm.Config(sweep_interval_s=0)
    async with shortterm.open(f"sqlite:///{tmp_path / 'd.db'}", config=config) as memory:
        await memory.configure_server("s1", ServerSettings(refresh_cadence=2))
        yield memory


async def test_a_due_scope_gets_a_summary_made_from_its_messages(mem: shortterm.Memory) -> None:
    await _said(mem, "we hike the ridge trail on Saturday")
    sent: list[list[dict[str, str]]] = []
    report = await distiller.run(mem, _fake_post(sent))
    assert report.distilled == [] and report.skipped.get("not due") == 1  # 1 of 2 turns
    await _said(mem, "meet at the north gate at 8")
    report = await distiller.run(mem, _fake_post(sent))
    assert report.distilled == [SERVER]
    entry = await mem.get(SERVER)
    assert entry is not None and entry.summary is not None
    assert "meet at the north gate at 8" in entry.summary
    assert entry.turns_since_refresh == 0
    row = await mem.store.load(SERVER)
    assert row is not None and row.summary == entry.summary
    # Nothing due now: a second run asks nothing and changes nothing.
    asked = len(sent)
    again = await distiller.run(mem, _fake_post(sent))
    assert again.distilled == [] and len(sent) == asked
    assert (await mem.store.load(SERVER)) == row


async def test_categories_mode_writes_the_fields(mem: shortterm.Memory) -> None:
    cats = (Category("Plans", "what is planned"), Category("People", "who is involved"))
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1, categories=cats))
    await _said(mem, "dinner at Lupa on Friday")
    sent: list[list[dict[str, str]]] = []
    report = await distiller.run(mem, _fake_post(sent))
    assert report.distilled == [SERVER]
    assert "Fields:" in sent[0][0]["content"]
    entry = await mem.get(SERVER)
    assert entry is not None and entry.summary is None
    assert "dinner at Lupa on Friday" in entry.categories["plans"]
    assert "people" not in entry.categories


async def test_private_channels_and_full_privacy_never_reach_the_model(
    mem: shortterm.Memory,
) -> None:
    await mem.configure_server(
        "s1", ServerSettings(refresh_cadence=1, private_channel_ids=("secret",))
    )
    await mem.configure_user("u2", UserSettings(privacy=Privacy.FULL))
    await _said(mem, "the vault code is 4471", channel="secret")
    t = mem.turn(user_id="u1", channel_id="c1", server_id="s1")
    history = [
        Message("user", "u2 whispers: my address is 9 Elm", author_id="u2"),
        Message("user", "lunch at noon", author_id="u1"),
    ]
    await t.capture(history=history, replies=[Reply("noted")])
    sent: list[list[dict[str, str]]] = []
    report = await distiller.run(mem, _fake_post(sent))
    assert report.distilled == [SERVER]
    assert report.skipped.get("private channel") == 1
    text = json.dumps(sent)
    assert "lunch at noon" in text
    assert "4471" not in text and "9 Elm" not in text


async def test_a_full_privacy_choice_learned_after_the_capture_is_honoured(
    mem: shortterm.Memory,
) -> None:
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1))
    t = mem.turn(user_id="u1", channel_id="c1", server_id="s1")
    history = [
        Message("user", "my phone is 555-0199", author_id="u2"),
        Message("user", "lunch at noon", author_id="u1"),
    ]
    await t.capture(history=history, replies=[Reply("noted")])
    # What a process knows between learning u2's choice and its forget reaching the hot
    # tier: the read path hides u2's messages by the known settings alone, and so must we.
    mem.known_settings.put_users({"u2": UserSettings(privacy=Privacy.FULL)})
    sent: list[list[dict[str, str]]] = []
    report = await distiller.run(mem, _fake_post(sent))
    assert report.distilled == [SERVER]
    text = json.dumps(sent)
    assert "lunch at noon" in text and "555-0199" not in text


async def test_an_answer_that_cannot_be_used_writes_nothing(mem: shortterm.Memory) -> None:
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1))
    await _said(mem, "hello")

    async def blank(messages: list[dict[str, str]]) -> str:
        return "   "

    report = await distiller.run(mem, blank)
    assert [k for k, _ in report.failed] == [SERVER]
    entry = await mem.get(SERVER)
    assert entry is not None and entry.summary is None and entry.turns_since_refresh == 1


async def test_a_run_stops_at_its_cap_and_the_next_one_goes_on(mem: shortterm.Memory) -> None:
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1))
    for channel in ("c1", "c2", "c3"):
        await _said(mem, f"news of {channel}", channel=channel)
    sent: list[list[dict[str, str]]] = []
    first = await distiller.run(mem, _fake_post(sent), limit=2)
    assert len(first.distilled) == 2 and first.capped
    second = await distiller.run(mem, _fake_post(sent), limit=2)
    assert len(second.distilled) == 1 and not second.capped
    assert {k.channel_id for k in first.distilled + second.distilled} == {"c1", "c2", "c3"}
    assert len(sent) == 3


async def test_a_failing_model_starts_nothing_more_and_loses_nothing(
    mem: shortterm.Memory,
) -> None:
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1))
    for channel in ("c1", "c2", "c3"):
        await _said(mem, f"news of {channel}", channel=channel)
    calls = 0

    async def down(messages: list[dict[str, str]]) -> str:
        nonlocal calls
        calls += 1
        raise distiller.ModelFailed("http://model/v1 did not answer")

    report = await distiller.run(mem, down, concurrency=1)
    assert calls == 1 and len(report.failed) == 1 and report.distilled == []
    for channel in ("c1", "c2", "c3"):
        entry = await mem.get(ScopeKey.server("s1", channel, None))
        assert entry is not None and entry.summary is None and entry.turns_since_refresh == 1
        assert entry.messages[0].content == f"news of {channel}"


# -- a distill racing a forget: the forget wins, in every tier --------------------------------


async def _race_round(memory: shortterm.Memory, rng: random.Random, round_: int) -> None:
    channel = f"r{round_}"
    key = ScopeKey.server("s1", channel, None)
    await _said(memory, f"plan {round_}", channel=channel)

    async def post(messages: list[dict[str, str]]) -> str:
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        return f"summary of {channel}"

    async def clear() -> None:
        for _ in range(rng.randint(0, 6)):
            await asyncio.sleep(0)
        await memory.clear_channel(channel)

    # Yield points inside the distiller as well: the forget may land at any await.
    original = memory.begin_write

    async def begin(triggerer: str | None = None) -> Any:
        fence = await original(triggerer)
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        return fence

    memory.begin_write = begin  # type: ignore[method-assign]
    try:
        await asyncio.gather(distiller.run(memory, post, limit=1_000_000), clear())
    finally:
        del memory.begin_write
    assert await memory.get(key) is None, f"round {round_}: the hot tier kept it"
    assert await memory.store.load(key) is None, f"round {round_}: the store kept it"
    assert await memory.cache.get(key, memory.clock()) is None


async def _race(memory: shortterm.Memory, rounds: int) -> None:
    await memory.configure_server("s1", ServerSettings(refresh_cadence=1))
    rng = random.Random(int(os.environ.get("SHORTTERM_RACE_SEED", "31")))
    for round_ in range(rounds):
        await _race_round(memory, rng, round_)


async def test_a_clear_racing_a_distill_wins_in_every_tier(mem: shortterm.Memory) -> None:
    await _race(mem, 300)


async def test_a_clear_racing_a_distill_wins_on_redis_too(
    tmp_path: Path, shared: tuple[str, str]
) -> None:
    store, cache = shared
    async with shortterm.open(store, cache, config=shortterm.Config(sweep_interval_s=0)) as memory:
        await _race(memory, 100)


# -- the command, as a user runs it: a shared Redis tier and the fake model as processes -----


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _popen(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "shortterm.cli", "distill", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
async def shared(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    yield f"sqlite:///{tmp_path / 'shared.db'}", with_query(redis_url, prefix=quote(prefix))
    await clear_redis_prefix(redis_url, prefix)


async def test_the_command_distills_what_a_bot_said_on_a_shared_tier(
    tmp_path: Path, shared: tuple[str, str]
) -> None:
    store, cache = shared
    env = {**os.environ, "SHORTTERM_STORE": store, "SHORTTERM_CACHE": cache}
    async with shortterm.open(store, cache) as bot:
        await bot.configure_server("s1", ServerSettings(refresh_cadence=1))
        await _said(bot, "the release is on Thursday")
    with fake_model_process(tmp_path / "requests.jsonl") as model:
        done = await asyncio.to_thread(_cli, "--base-url", model.url, "--model", "m", env=env)
        assert done.returncode == 0, done.stderr
        assert "distilled 1" in done.stdout
        assert len(model.chats()) == 1
        async with shortterm.open(store, cache) as bot:
            entry = await bot.get(SERVER)
        assert entry is not None and entry.summary is not None
        assert "the release is on Thursday" in entry.summary
        again = await asyncio.to_thread(_cli, "--base-url", model.url, "--model", "m", env=env)
        assert again.returncode == 0, again.stderr
        assert "distilled 0" in again.stdout
        assert len(model.chats()) == 1  # nothing due: nothing asked
        async with shortterm.open(store, cache) as bot:
            assert await bot.get(SERVER) == entry


async def test_an_unreachable_model_fails_clearly_and_loses_nothing(
    shared: tuple[str, str],
) -> None:
    store, cache = shared
    env = {**os.environ, "SHORTTERM_STORE": store, "SHORTTERM_CACHE": cache}
    async with shortterm.open(store, cache) as bot:
        await bot.configure_server("s1", ServerSettings(refresh_cadence=1))
        await _said(bot, "keep this")
        before = await bot.get(SERVER)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    done = await asyncio.to_thread(
        _cli, "--base-url", url, "--model", "m", "--retries", "1", "--timeout", "5", env=env
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "did not answer" in done.stderr and "nothing was written" in done.stderr
    async with shortterm.open(store, cache) as bot:
        after = await bot.get(SERVER)
    assert after == before and after is not None and after.turns_since_refresh == 1


def test_an_in_process_tier_is_named_as_the_reason(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SHORTTERM_STORE": f"sqlite:///{tmp_path / 'x.db'}",
        "SHORTTERM_CACHE": "memory://",
    }
    done = _cli("--base-url", "http://127.0.0.1:9/v1", "--model", "m", env=env)
    assert done.returncode == 0, done.stderr
    assert "in-process" in done.stderr and "redis://" in done.stderr
    assert "looked at 0 scope(s)" in done.stdout


# -- in the background: the sidecar's task ----------------------------------------------------


async def test_the_background_task_never_holds_a_turn_up(
    tmp_path: Path, mem: shortterm.Memory
) -> None:
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1))
    await _said(mem, "first")
    with fake_model_process(tmp_path / "requests.jsonl") as model:
        proxy = await Proxy("127.0.0.1", model.port).start()
        proxy.cut("blackhole")  # the model is silent for as long as the test wants
        schedule = distiller.DistillSchedule(
            base_url=f"http://127.0.0.1:{proxy.port}/v1", model="m", interval_s=0.05
        )
        reports: list[distiller.DistillReport] = []
        task = asyncio.create_task(
            distiller.distill_forever(mem, schedule, on_report=reports.append)
        )
        try:
            for _ in range(3000):
                if proxy.accepted:
                    break
                await asyncio.sleep(0.01)
            assert proxy.accepted, "the background task never called the model"
            # A call is in flight: turns in the same channel and elsewhere go through.
            for i in range(20):
                await _said(mem, f"turn {i}", channel=f"c{i % 3 + 1}")
                await mem.turn(user_id="u1", channel_id="c1", server_id="s1").context()
            entry = await mem.get(SERVER)
            assert entry is not None and entry.summary is None and reports == []
            proxy.restore()  # the held call is cut; its retry reaches the model
            for _ in range(3000):
                entry = await mem.get(SERVER)
                if entry is not None and entry.summary is not None:
                    break
                await asyncio.sleep(0.01)
            assert entry is not None and entry.summary is not None
            # Made from what the scope held when the call began: captures are no forgets.
            assert "first" in entry.summary
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await proxy.close()


async def test_serve_distills_in_the_background(tmp_path: Path, shared: tuple[str, str]) -> None:
    store, cache = shared
    async with shortterm.open(store, cache) as bot:
        await bot.configure_server("s1", ServerSettings(refresh_cadence=1))
        await _said(bot, "the demo is at noon")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    with fake_model_process(tmp_path / "requests.jsonl") as model:
        command = [sys.executable, "-m", "shortterm.cli", "serve", "--port", "0"]
        options = ["--store", store, "--cache", cache, "--distill-base-url", model.url]
        options += ["--distill-model", "m", "--distill-interval", "0.2"]
        proc = _popen([*command, *options], clean)
        try:
            summary = None
            async with shortterm.open(store, cache) as bot:
                for _ in range(600):
                    entry = await bot.get(SERVER)
                    summary = entry.summary if entry is not None else None
                    if summary is not None or proc.poll() is not None:
                        break
                    await asyncio.sleep(0.1)
            assert proc.poll() is None, "serve exited"
            assert summary is not None and "the demo is at noon" in summary
            assert len(model.chats()) == 1
        finally:
            proc.terminate()
            proc.wait(30)


# -- the model's network: retries with backoff, timeouts (a loopback proxy cuts it) -----------


async def test_a_refused_call_is_retried_and_a_silent_model_times_out(
    tmp_path: Path, mem: shortterm.Memory
) -> None:
    await mem.configure_server("s1", ServerSettings(refresh_cadence=1))
    await _said(mem, "the ferry leaves at 7")
    with fake_model_process(tmp_path / "requests.jsonl") as model:
        proxy = await Proxy("127.0.0.1", model.port).start()
        url = f"http://127.0.0.1:{proxy.port}/v1"
        try:
            # Silent: a partition. The call times out, nothing is written.
            proxy.cut("blackhole")
            report = await shortterm.distill(mem, base_url=url, model="m", timeout_s=0.5, retries=0)
            assert report.distilled == [] and "did not answer" in report.failed[0][1]
            entry = await mem.get(SERVER)
            assert entry is not None and entry.summary is None and entry.turns_since_refresh == 1
            proxy.restore()
            # Refused, then back: the retry (after a backoff) gets the answer.
            proxy.cut("reset")
            accepted = proxy.accepted
            run = asyncio.create_task(
                shortterm.distill(mem, base_url=url, model="m", timeout_s=30, retries=3)
            )
            for _ in range(3000):
                if proxy.accepted > accepted or run.done():
                    break
                await asyncio.sleep(0.01)
            proxy.restore()
            report = await asyncio.wait_for(run, 120)
            assert report.distilled == [SERVER], report
            assert proxy.accepted >= accepted + 2  # the refused call and its retry
        finally:
            await proxy.close()
    entry = await mem.get(SERVER)
    assert entry is not None and entry.summary is not None
    assert "the ferry leaves at 7" in entry.summary
