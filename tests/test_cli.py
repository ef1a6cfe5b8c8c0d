"""The commands, through click's runner, against real SQLite files."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner, Result

import shortterm
from shortterm import Category, Message, Reply, ScopeKey, ServerSettings
from shortterm.cli import Declined, exit_code, main
from tests.support import clear_redis_prefix, service_url, with_query

MINUTES_AGO = 5 * 60


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    runner = CliRunner(env={"COLUMNS": "200", **(env or {})})
    return runner.invoke(main, list(args), input=input)


async def _fill(store: str, cache: str = "memory://", *, age_s: float = MINUTES_AGO) -> None:
    """A guild conversation written ``age_s`` ago: two personas, two users, a summary."""
    then = time.time() - age_s
    async with shortterm.open(store, cache, clock=lambda: then) as memory:
        await memory.configure_server(
            "g1", ServerSettings(categories=[Category("Mood", "How the room feels")])
        )
        for user, persona in (("u1", "7"), ("u2", "7"), ("u1", None)):
            turn = memory.turn(
                user_id=user,
                channel_id="c1",
                server_id="g1",
                persona_id=persona,
                channel_name="plans",
            )
            said = Message("user", f"[bold]hike?[/bold] says {user}", author_id=user, speaker=user)
            await turn.capture(history=[said], replies=[Reply("Saturday!", persona_name="Tomo")])
        await memory.set_summary(ScopeKey.server("g1", "c1", "7"), "Hike on Saturday, 8am.")
        await memory.set_categories(ScopeKey.server("g1", "c1", "7"), {"mood": "excited"})


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'stm.db'}"
    asyncio.run(_fill(url))
    return url


def test_inspect_lists_rows_as_a_table(db: str) -> None:
    result = run("inspect", "--store", db, "--channel", "c1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "kind",
        "owner",
        "channel",
        "persona",
        "summary",
        "categories",
        "turns",
        "written",
    ]
    body = [line.split() for line in lines[2:]]
    assert [row[:5] for row in body] == [
        ["server", "g1", "c1", "#plans", "—"],
        ["server", "g1", "c1", "#plans", "7"],
        ["user", "u1", "c1", "#plans", "—"],
        ["user", "u1", "c1", "#plans", "7"],
        ["user", "u2", "c1", "#plans", "7"],
    ]
    assert "Hike on Saturday, 8am." in result.stdout and "5 minutes ago" in result.stdout
    assert "mood" in result.stdout


def test_inspect_filters(db: str) -> None:
    result = run("inspect", "--store", db, "--server", "g1", "--persona", "7")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 3  # header, rule, one row
    result = run("inspect", "--store", db, "--user", "u1", "--no-persona")
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 3
    result = run("inspect", "--store", db, "--channel", "c1", "--kind", "user", "--limit", "1")
    assert result.exit_code == 0 and "… and 2 more" in result.stdout
    assert "no rows match" in run("inspect", "--store", db, "--user", "nobody").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "pass --server, --channel or --user"),
        (["--server", "g1", "--kind", "user"], "add user_id or channel_id"),
        (["--user", "u1", "--persona", "7", "--no-persona"], "either --persona or --no-persona"),
        (["--channel", "x" * 300], "ids are 1-256 characters"),
        (["--kind", "user"], "narrow --server, --channel or --user"),
    ],
)
def test_inspect_refuses_bad_filters_with_exit_2(db: str, args: list[str], message: str) -> None:
    result = run("inspect", "--store", db, *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_the_store_comes_from_the_environment(db: str, tmp_path: Path) -> None:
    result = run("inspect", "--channel", "c1", env={"SHORTTERM_STORE": db})
    assert result.exit_code == 0 and "Hike on Saturday" in result.stdout
    other = f"sqlite:///{tmp_path / 'other.db'}"
    asyncio.run(_fill(other, age_s=0))
    result = run("inspect", "--channel", "c9", "--store", other, env={"SHORTTERM_STORE": db})
    assert "no rows match in " + str(tmp_path / "other.db") in result.stdout  # the option wins


def test_show_prints_summary_categories_and_markup_as_text(db: str) -> None:
    result = run("show", "--store", db, "server", "g1", "c1", "--persona", "7")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "server g1 · channel c1 #plans · persona 7" in out
    assert "summary, written 5 minutes ago:" in out and "Hike on Saturday, 8am." in out
    assert "categories, written 5 minutes ago:" in out and "mood: excited" in out
    assert "turns since the last summary: 2" in out  # an admin edit leaves the counter
    assert "no recent messages in this hot tier" in out
    result = run("show", "--store", db, "user", "u9", "c1")
    assert result.exit_code == 0 and "nothing is remembered" in result.stdout
    assert run("show", "--store", db, "guild", "g1", "c1").exit_code == 2


def test_show_says_where_the_messages_are_when_it_cannot_see_them(db: str) -> None:
    for args in (("server", "g1", "c1", "--persona", "7"), ("user", "u9", "c1")):
        result = run("show", "--store", db, *args)
        assert result.exit_code == 0, result.output
        out = " ".join(result.stdout.split())
        assert "recent messages live only in the hot tier of the process" in out
        assert "--cache redis://" in out and "/ui/" in out


def test_show_on_a_shared_cache_does_not_send_the_reader_elsewhere(db: str) -> None:
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    cache = with_query(redis_url, prefix=quote(f"stm-test:{uuid.uuid4().hex[:16]}:"))
    result = run("show", "--store", db, "--cache", cache, "user", "u9", "c1")
    assert result.exit_code == 0, result.output
    assert "nothing is remembered" in result.stdout and "live only" not in result.stdout


async def test_show_sees_the_bots_messages_through_a_shared_cache(tmp_path: Path) -> None:
    redis_url = service_url("SHORTTERM_TEST_REDIS_URL", "Redis")
    prefix = f"stm-test:{uuid.uuid4().hex[:16]}:"
    cache = with_query(redis_url, prefix=quote(prefix))
    store = f"sqlite:///{tmp_path / 'stm.db'}"
    try:
        await _fill(store, cache)
        result = await asyncio.to_thread(
            run, "show", "--store", store, "--cache", cache, "server", "g1", "c1", "--persona", "7"
        )
    finally:
        await clear_redis_prefix(redis_url, prefix)
    assert result.exit_code == 0, result.output
    assert "recent messages (2):" in result.stdout  # a capture replaces the messages
    assert "[5 minutes ago] u2: [bold]hike?[/bold] says u2" in result.stdout  # not markup
    assert "[5 minutes ago] Tomo: Saturday!" in result.stdout


def _count(db: str, *args: str) -> int:
    result = run("export", "--store", db, *args)
    assert result.exit_code == 0, result.output
    return len(result.stdout.splitlines())


def test_clear_asks_first_and_a_no_changes_nothing(db: str) -> None:
    before = _count(db)
    result = run("clear", "channel", "c1", "--store", db, input="n\n")
    assert result.exit_code == 1
    assert "Forget everything remembered in channel c1?" in result.stderr
    assert "nothing was changed" in result.stderr
    assert _count(db) == before
    result = run("clear", "channel", "c1", "--store", db)  # no input at all: also a no
    assert result.exit_code == 1 and _count(db) == before
    result = run("clear", "channel", "c1", "--store", db, input="y\n")
    assert result.exit_code == 0 and "forgot 5 entries" in result.stdout
    assert _count(db) == 0


def test_clear_user_and_server_channel(db: str) -> None:
    result = run("clear", "user", "u1", "--store", db, "--yes")
    assert result.exit_code == 0, result.output
    assert _count(db, "--user", "u1") == 0 and _count(db, "--user", "u2") == 1
    result = run("clear", "server-channel", "g1", "c1", "--persona", "7", "--store", db, "--yes")
    assert result.exit_code == 0 and "forgot 1 entry" in result.stdout
    assert _count(db, "--server", "g1") == 1  # the no-persona row is another entry


async def _settings(store: str, user_id: str) -> shortterm.UserSettings:
    async with shortterm.open(store, hydrate=False) as memory:
        return await memory.user_settings(user_id)


def test_privacy_full_asks_then_forgets_and_is_stored(db: str) -> None:
    result = run("privacy", "u1", "full", "--store", db, input="n\n")
    assert result.exit_code == 1 and _count(db, "--user", "u1") == 2  # declined: unchanged
    result = run("privacy", "u1", "full", "--store", db, "--yes")
    assert result.exit_code == 0, result.output
    assert "privacy full" in result.stdout and "forgotten" in result.stdout
    assert _count(db, "--user", "u1") == 0 and _count(db, "--user", "u2") == 1
    assert asyncio.run(_settings(db, "u1")).privacy is shortterm.Privacy.FULL


def test_privacy_full_never_claims_recall(db: str) -> None:
    assert run("privacy", "u1", "none", "--cross-server", "--store", db).exit_code == 0
    result = run("privacy", "u1", "full", "--store", db, "--yes")
    assert result.exit_code == 0, result.output
    assert "recall on" not in result.stdout
    assert "nothing of them is remembered or recalled" in result.stdout
    # the opt-in is kept for a later, lower level
    assert asyncio.run(_settings(db, "u1")).cross_server_opt_in is True


def test_privacy_keeps_the_opt_in_unless_told(db: str) -> None:
    assert run("privacy", "u2", "none", "--cross-server", "--store", db).exit_code == 0
    result = run("privacy", "u2", "partial", "--store", db)  # no confirmation below full
    assert result.exit_code == 0 and "cross-server recall on" in result.stdout
    assert asyncio.run(_settings(db, "u2")) == shortterm.UserSettings(
        shortterm.Privacy.PARTIAL, True
    )
    assert run("privacy", "u2", "loud", "--store", db).exit_code == 2


def test_janitor_deletes_old_rows(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'old.db'}"
    asyncio.run(_fill(db, age_s=40 * 86400))
    result = run("janitor", "--store", db, "--retention-days", "60")
    assert result.exit_code == 0 and "deleted 0 row(s) untouched for 60 day(s)" in result.stdout
    result = run("janitor", "--store", db, env={"SHORTTERM_JANITOR_RETENTION_DAYS": "30"})
    assert result.exit_code == 0 and "deleted 5 row(s) untouched for 30 day(s)" in result.stdout
    bad = run("janitor", "--store", db, env={"SHORTTERM_JANITOR_RETENTION_DAYS": "soon"})
    assert bad.exit_code == 2 and "is not an integer" in bad.stderr


def test_migrate_applies_then_reports_up_to_date(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'new.db'}"
    first = run("migrate", "--store", db)
    applied = (
        "applied 0001_initial, 0002_forget_journal, 0003_fence_end, 0004_journal_floor, "
        "0005_forget_horizons, 0006_private_index"
    )
    assert first.exit_code == 0 and first.stdout.strip() == applied
    again = run("migrate", "--store", db)
    assert again.exit_code == 0 and again.stdout.strip() == "the schema is up to date"


def test_export_and_import_round_trip(db: str, tmp_path: Path) -> None:
    backup = tmp_path / "backup.jsonl"
    result = run("export", str(backup), "--store", db)
    assert result.exit_code == 0 and "exported 5 row(s)" in result.stderr
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    checked = run("import", str(backup), "--store", copy, "--dry-run")
    assert checked.exit_code == 0 and "5 valid row(s); nothing written" in checked.stdout
    assert _count(copy) == 0
    result = run("import", str(backup), "--store", copy)
    assert result.exit_code == 0 and "imported 5 of 5 row(s)" in result.stdout
    assert run("export", "--store", copy).stdout == run("export", "--store", db).stdout
    piped = run("import", "-", "--store", copy, input=backup.read_text("utf-8"))
    assert piped.exit_code == 0 and "imported 5 of 5" in piped.stdout
    shown = run("show", "--store", copy, "server", "g1", "c1", "--persona", "7")
    assert "Hike on Saturday, 8am." in shown.stdout


def test_import_refuses_a_malformed_file_whole(db: str, tmp_path: Path) -> None:
    good = run("export", "--store", db).stdout.splitlines()
    broken = json.loads(good[1])
    broken["summary_at"] = "yesterday"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], json.dumps(broken), good[2], "{"]) + "\n", "utf-8")
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    result = run("import", str(bad), "--store", copy)
    assert result.exit_code == 2
    assert "2 problem(s); nothing was imported" in result.stderr
    assert "line 2, summary_at: Input should be a valid number" in result.stderr
    assert "line 4, (row): Invalid JSON" in result.stderr
    assert _count(copy) == 0
    assert run("import", str(tmp_path / "missing.jsonl"), "--store", copy).exit_code == 2


def test_an_unavailable_store_exits_3(tmp_path: Path) -> None:
    result = run("inspect", "--store", f"sqlite:///{tmp_path}", "--channel", "c1")
    assert result.exit_code == 3
    assert "cannot open SQLite database" in result.stderr


def test_a_bad_url_exits_2(tmp_path: Path) -> None:
    result = run("inspect", "--store", "nonsense", "--channel", "c1")
    assert result.exit_code == 2 and "not a URL" in result.stderr
    result = run("export", "--store", "memory://", "--cache", "carrier-pigeon://x")
    assert result.exit_code == 2 and "unknown scheme" in result.stderr


def test_a_missing_extra_exits_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "shortterm.integrations.mcp", raising=False)
    monkeypatch.setitem(sys.modules, "mcp", None)  # what an absent package looks like
    result = run("mcp", "--store", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.exit_code == 4
    assert "pip install -e '.[mcp]'" in result.stderr


def test_exit_codes_are_mapped_in_one_place() -> None:
    assert exit_code(Declined()) == 1
    assert exit_code(shortterm.InvalidInput("f", 1, "no")) == 2
    assert exit_code(shortterm.ConfigError("bad")) == 2
    assert exit_code(shortterm.StoreUnavailable("down")) == 3
    assert exit_code(shortterm.ExtraMissing("mcp", "mcp")) == 4
    assert exit_code(RuntimeError("a bug")) is None
