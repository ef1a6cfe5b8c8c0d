"""An operator's PostgreSQL mistakes, against servers and poolers of the test's own: each is
refused when memory opens, or named when it bites, in one line of at most 300 characters that
names the cause and the fix.

- ``listen_url`` pointing at a pooler in transaction mode (a LISTEN there is lost when the
  transaction ends, and its prepared statements collide) is refused at open; one at a pooler
  in session mode is not; one where nothing listens is reported as ``listen_url``'s, not as
  the migration's.
- A store URL that reaches a pooler in transaction mode without ``pooler=transaction`` is
  refused at open; once past the open (a pool of the caller's own), a statement bound to
  another client's prepared statement of the same name ("bind message supplies N
  parameters") names the option too.
- A multi-host URL whose first host is a standby, without ``target_session_attrs``, names that
  option; a single host that is a standby says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import shortterm
from shortterm import ConfigError, StoreUnavailable
from shortterm.cli.app import EXIT_INVALID
from shortterm.store.postgres import PostgresStore
from tests.pg_cluster_support import Pair, primary_and_standby
from tests.pgbouncer_support import running_pgbouncer
from tests.support import with_query
from tests.test_operator_errors import command, error_line

MAX_LINE = 300
CONFIG = shortterm.Config(sweep_interval_s=0)


def one_line(text: str) -> str:
    assert "\n" not in text, text
    assert len(text) <= MAX_LINE, (len(text), text)
    return text


async def open_fails(store: str, error: type[Exception]) -> str:
    with pytest.raises(error) as raised:
        async with shortterm.open(store=store, cache="memory://", config=CONFIG):
            pass
    return one_line(str(raised.value))


def serve_line(store: str, tmp_path: Path, code: int) -> str:
    done, _ = command(["serve", "--port", "0", "--store", store], tmp_path)
    assert done.returncode == code, done.stderr
    line = error_line(done.stderr)
    assert len(line) <= MAX_LINE, (len(line), line)
    return line


# -- poolers -----------------------------------------------------------------------------------


async def test_a_listen_url_at_a_transaction_pooler_is_refused_at_open(
    pgbouncer_url: str, schema: str, tmp_path: Path
) -> None:
    store = with_query(
        pgbouncer_url,
        schema=schema,
        pooler="transaction",
        listen_url=quote(pgbouncer_url, safe=""),
    )
    said = await open_fails(store, ConfigError)
    assert "listen_url" in said and "pooler in transaction mode" in said, said
    assert "server's own address" in said and "leave listen_url out" in said, said
    assert "listen_url" in serve_line(store, tmp_path, EXIT_INVALID)


async def test_an_unreachable_listen_url_is_named_as_such(pgbouncer_url: str, schema: str) -> None:
    nowhere = quote("postgresql://postgres@127.0.0.1:1/test", safe="")
    store = with_query(pgbouncer_url, schema=schema, pooler="transaction", listen_url=nowhere)
    said = await open_fails(store, StoreUnavailable)
    assert "listen_url" in said and "127.0.0.1:1 refused the connection" in said, said
    assert "migration" not in said, said


async def test_a_store_url_at_a_transaction_pooler_without_the_option_is_refused_at_open(
    pgbouncer_url: str, schema: str, tmp_path: Path
) -> None:
    store = with_query(pgbouncer_url, schema=schema)
    said = await open_fails(store, ConfigError)
    assert "pooler in transaction mode" in said and "add pooler=transaction" in said, said
    assert "add pooler=transaction" in serve_line(store, tmp_path, EXIT_INVALID)


async def test_a_session_pooler_is_taken_for_the_store_and_for_listen_url(
    pg_url: str, pgbouncer_url: str, schema: str
) -> None:
    """In session mode a session stays ours: nothing to refuse, either way."""
    with running_pgbouncer(pg_url, mode="session") as session:
        listening = with_query(
            pgbouncer_url,
            schema=schema,
            pooler="transaction",
            listen_url=quote(session, safe=""),
        )
        for store in (with_query(session, schema=schema), listening):
            async with shortterm.open(store=store, cache="memory://", config=CONFIG) as memory:
                await memory.ping_store()


async def test_a_bind_message_error_names_the_pooler_option(pg_url: str, schema: str) -> None:
    """Through a pooler with one server session, a pool of the caller's own (which skips the
    checks at open) prepares its statements; another client replaces one of the same name
    by one with two parameters, as another bot's store would: our next use of it binds the
    wrong number of parameters."""
    with running_pgbouncer(pg_url, pool_size=1) as pooled:
        pool: AsyncConnectionPool[psycopg.AsyncConnection[object]] = AsyncConnectionPool(
            pooled,
            kwargs={"autocommit": True, "prepare_threshold": 0},
            min_size=1,
            max_size=1,
            open=False,
        )
        await pool.open()
        store = PostgresStore(pool, schema=schema)
        try:
            await store.migrate()
            await store.journal_head()  # prepared on the one server session
            with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as other:
                names = other.execute(
                    "SELECT name FROM pg_prepared_statements WHERE name LIKE '_pg3_%'"
                ).fetchall()
                assert names, "nothing was prepared"
                for (name,) in names:
                    other.execute(f'DEALLOCATE "{name}"')
                    other.execute(f'PREPARE "{name}" (int, int) AS SELECT $1 + $2')
            with pytest.raises(StoreUnavailable) as raised:
                await store.journal_head()
        finally:
            await store.close()
            await pool.close()
    said = one_line(str(raised.value))
    assert "bind message supplies" in said and "add pooler=transaction" in said, said


# -- standbys ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with primary_and_standby() as both:
        yield both


def _hosts(*ports: int) -> str:
    return "postgresql://postgres@" + ",".join(f"127.0.0.1:{p}" for p in ports) + "/postgres"


async def test_a_standby_first_in_a_multi_host_url_names_target_session_attrs(
    pair: Pair, tmp_path: Path
) -> None:
    url = _hosts(pair.standby.port, pair.primary.port)
    said = await open_fails(url, ConfigError)
    assert f"127.0.0.1:{pair.standby.port}" in said and "is a standby" in said, said
    assert "target_session_attrs=read-write" in said, said
    assert "target_session_attrs" in serve_line(url, tmp_path, EXIT_INVALID)
    chosen = with_query(url, target_session_attrs="read-write")
    async with shortterm.open(store=chosen, cache="memory://", config=CONFIG) as memory:
        await memory.ping_store()


async def test_a_single_standby_says_it_is_one(pair: Pair) -> None:
    said = await open_fails(_hosts(pair.standby.port), StoreUnavailable)
    assert "is a standby" in said and "primary" in said, said


async def test_a_write_a_standby_refuses_later_names_it(pair: Pair) -> None:
    """Past the open (a pool of the caller's own): the server's read-only refusal says why."""
    pool: AsyncConnectionPool[psycopg.AsyncConnection[object]] = AsyncConnectionPool(
        _hosts(pair.standby.port), kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    store = PostgresStore(pool, schema="stm_standby")
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await store.migrate()
    finally:
        await store.close()
        await pool.close()
    said = one_line(str(raised.value))
    assert "read-only" in said and "target_session_attrs=read-write" in said, said
