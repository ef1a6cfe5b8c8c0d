"""The JSON-lines format: export, validation, import (all or nothing), round trips."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shortterm
from shortterm import ScopeKey, StoreUnavailable
from shortterm.store.base import ScopeMeta, ScopeRow
from shortterm.store.reference import ReferenceStore
from shortterm.transfer.rows import (
    LineError,
    MalformedFile,
    dump_row,
    export_jsonl,
    import_jsonl,
    parse_row,
)
from tests.support import T0, FakeClock

GUILD = ScopeMeta(server_id="g1", server_name="Guild", channel_name="general")


def _rows() -> list[ScopeRow]:
    return [
        ScopeRow(
            key=ScopeKey.server("g1", "c1", "7"),
            meta=ScopeMeta(server_id="g1", server_name="Guild", persona_lineage_id="L"),
            summary="Hike on Saturday.\nRidge trail, 8am.",
            summary_at=T0 - 10,
            categories={"mood": "calm", "plans": "Saturday"},
            categories_at=T0 - 5,
            turns_since_refresh=3,
            refresh_epoch=2,
            updated_at=T0 - 5,
        ),
        ScopeRow(key=ScopeKey.user("@ana:matrix.org", "c1", "0"), meta=GUILD, updated_at=T0),
        ScopeRow(key=ScopeKey.user("u2", "dm1"), meta=ScopeMeta(private=True), updated_at=T0),
    ]


def _comparable(row: ScopeRow) -> tuple[Any, ...]:
    return (
        row.key,
        row.meta,
        row.summary,
        row.summary_at,
        dict(row.categories),
        row.categories_at,
        row.turns_since_refresh,
        row.refresh_epoch,
        row.updated_at,
    )


async def _all(memory: shortterm.Memory) -> list[tuple[Any, ...]]:
    rows = [r async for b in memory.export_rows() for r in b]
    return sorted(map(_comparable, rows), key=repr)


@pytest.fixture
async def source(db_url: str, clock: FakeClock) -> shortterm.Memory:
    async with shortterm.open(db_url, clock=clock, hydrate=False) as memory:
        await memory.import_rows(_rows())
        yield memory


class Recorder:
    def __init__(self) -> None:
        self.phases: list[tuple[str, int | None]] = []
        self.done = 0

    def start(self, description: str, total: int | None, unit: str = "rows") -> None:
        self.phases.append((description, total))

    def advance(self, amount: int) -> None:
        self.done += amount


async def test_export_then_import_round_trips(
    source: shortterm.Memory, tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "backup.jsonl"
    progress = Recorder()
    assert await export_jsonl(source, path, progress=progress, batch_rows=2) == 3
    assert progress.phases == [("exporting rows", None)] and progress.done == 3
    assert [n for n in os.listdir(tmp_path) if n.startswith(".backup")] == []
    lines = path.read_text("utf-8").splitlines()
    assert len(lines) == 3 and all(json.loads(line)["v"] == 1 for line in lines)
    async with shortterm.open(f"sqlite:///{tmp_path / 'restored.db'}", clock=clock) as target:
        report = await import_jsonl(target, path, progress=progress, batch_rows=2)
        assert (report.rows, report.written, report.skipped_private, report.capped) == (3, 3, 0, 0)
        assert await _all(target) == await _all(source)
        entry = await target.get(ScopeKey.server("g1", "c1", "7"))
        assert entry is not None and entry.summary == "Hike on Saturday.\nRidge trail, 8am."
        again = await import_jsonl(target, path)  # replacing by key: a re-run changes nothing
        assert again.written == 3 and await _all(target) == await _all(source)


async def test_export_with_filters_and_to_a_stream(source: shortterm.Memory) -> None:
    out = io.StringIO()
    assert await export_jsonl(source, out, channel_id="c1") == 2
    keys = [json.loads(line)["key"]["owner_id"] for line in out.getvalue().splitlines()]
    assert sorted(keys) == ["@ana:matrix.org", "g1"]


async def test_a_failed_export_leaves_no_file(tmp_path: Path, clock: FakeClock) -> None:
    class Failing(ReferenceStore):
        async def iter_rows(self, *, batch_rows: int):  # type: ignore[no-untyped-def,override]
            yield [_rows()[0]]
            raise StoreUnavailable("the store went away")

    path = tmp_path / "backup.jsonl"
    async with shortterm.open(Failing(), clock=clock) as memory:
        with pytest.raises(StoreUnavailable):
            await export_jsonl(memory, path)
    assert os.listdir(tmp_path) == []


def _line(**changes: Any) -> str:
    obj: dict[str, Any] = {
        "v": 1,
        "key": {"kind": "user", "owner_id": "u1", "channel_id": "c1"},
        "updated_at": T0,
    }
    obj.update(changes)
    return json.dumps(obj)


async def test_a_malformed_file_is_refused_whole_naming_lines_and_fields(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(
            [
                _line(),
                "not json",
                _line(key={"kind": "user", "owner_id": "u2", "channel_id": ""}),
                "",
                _line(summary="orphan"),
                _line(summary_at=T0),
                _line(key={"kind": "server", "owner_id": "g1", "channel_id": "c1"}, extra=1),
                _line(updated_at="yesterday"),
                _line(),
            ]
        ),
        "utf-8",
    )
    async with shortterm.open(f"sqlite:///{tmp_path / 'db.db'}", clock=clock) as memory:
        with pytest.raises(MalformedFile) as caught:
            await import_jsonl(memory, path)
        assert [r async for b in memory.export_rows() for r in b] == []
    problems = [(p.line, p.field) for p in caught.value.problems]
    assert problems == [
        (2, "(row)"),
        (3, "key.channel_id"),
        (5, "(row)"),
        (6, "(row)"),
        (7, "extra"),
        (8, "updated_at"),
        (9, "key"),
    ]
    message = str(caught.value)
    assert "nothing was imported" in message
    assert "line 9, key: the same key as line 1" in message
    assert isinstance(caught.value, shortterm.InvalidInput)


async def test_many_problems_are_summarised(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("{}\n" * 50, "utf-8")
    async with shortterm.open("memory://", clock=clock) as memory:
        with pytest.raises(MalformedFile) as caught:
            await import_jsonl(memory, path)
    assert caught.value.count == 150  # each line lacks "v", "key" and "updated_at"
    assert len(caught.value.problems) == 20 and "... and 130 more" in str(caught.value)


async def test_dry_run_stdin_stream_blank_lines_and_capping(clock: FakeClock) -> None:
    long = "x" * 5000
    lines = [_line(summary=long, summary_at=T0), "   ", dump_row(_rows()[2])]
    async with shortterm.open("memory://", clock=clock) as memory:
        stream = io.BytesIO("\n".join(lines).encode())
        report = await import_jsonl(memory, stream, dry_run=True)
        assert (report.rows, report.written, report.capped) == (2, 0, 1)
        assert [b async for b in memory.export_rows()] == []
        report = await import_jsonl(memory, io.BytesIO("\n".join(lines).encode()))
        assert report.written == 2
        entry = await memory.get(ScopeKey.user("u1", "c1"))
        assert entry is not None and entry.summary is not None
        assert len(entry.summary) == memory.config.max_summary_chars


async def test_a_store_failure_midway_says_a_rerun_completes_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    class FailsSecondBatch(ReferenceStore):
        calls = 0

        async def put_rows(self, rows: Any, *, fence: Any = None) -> list[ScopeRow]:
            self.calls += 1
            if self.calls == 2:
                raise StoreUnavailable("connection lost")
            return await super().put_rows(rows, fence=fence)

    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(dump_row(r) for r in _rows()), "utf-8")
    async with shortterm.open(FailsSecondBatch(), clock=clock) as memory:
        with pytest.raises(StoreUnavailable, match=r"after 2 of 3 rows.*again completes it"):
            await import_jsonl(memory, path, batch_rows=2)
        report = await import_jsonl(memory, path, batch_rows=2)
        assert report.written == 3


async def test_import_checks_its_arguments(tmp_path: Path, clock: FakeClock) -> None:
    async with shortterm.open("memory://", clock=clock) as memory:
        with pytest.raises(shortterm.InvalidInput, match="readable file"):
            await import_jsonl(memory, tmp_path / "missing.jsonl")
        with pytest.raises(shortterm.InvalidInput, match="batch_rows"):
            await import_jsonl(memory, tmp_path / "missing.jsonl", batch_rows=0)


def test_server_rows_take_their_server_from_the_key() -> None:
    line = _line(key={"kind": "server", "owner_id": "g1", "channel_id": "c1"})
    row, _ = parse_row(line, max_chars=100)
    assert row.meta.server_id == "g1"
    bad = _line(
        key={"kind": "server", "owner_id": "g1", "channel_id": "c1"}, meta={"server_id": "g2"}
    )
    with pytest.raises(LineError, match="owner_id"):
        parse_row(bad, max_chars=100)


ids = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1)
texts = st.text(min_size=1).filter(lambda t: t.strip() != "")
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["user", "server"]),
    owner=ids,
    channel=ids,
    persona=st.none() | ids,
    summary=st.none() | texts,
    categories=st.dictionaries(ids, texts, max_size=3),
    at=times,
    turns=st.integers(0, 10_000),
    name=st.none() | st.text(max_size=50),
)
def test_every_row_survives_a_round_trip(
    kind: str,
    owner: str,
    channel: str,
    persona: str | None,
    summary: str | None,
    categories: dict[str, str],
    at: float,
    turns: int,
    name: str | None,
) -> None:
    from shortterm.model.text import clean_text

    summary = None if summary is None else clean_text(summary)
    categories = {k: clean_text(v) for k, v in categories.items()}
    name = None if name is None else clean_text(name)
    row = ScopeRow(
        key=ScopeKey(kind, owner, channel, persona),  # type: ignore[arg-type]
        meta=ScopeMeta(server_id=owner if kind == "server" else None, channel_name=name),
        summary=summary,
        summary_at=None if summary is None else at,
        categories=categories,
        categories_at=at if categories else None,
        turns_since_refresh=turns,
        updated_at=at,
    )
    parsed, capped = parse_row(dump_row(row), max_chars=100_000)
    assert not capped and _comparable(parsed) == _comparable(row)
