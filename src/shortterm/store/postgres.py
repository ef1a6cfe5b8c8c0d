"""PostgreSQL durable tier (psycopg 3, an async connection pool, autocommit).

Every statement is prepared on first use per connection (``prepare_threshold=0``). A logical
operation touching one row is a single autocommit statement; one touching several rows runs in
one transaction sent as a pipeline, so it costs one network round trip and applies whole or not
at all. Counters and category merges are computed by the server inside the upsert
(``INSERT … ON CONFLICT … DO UPDATE … RETURNING``), so concurrent writers in any number of
processes never lose an update.

PostgreSQL refuses NUL in ``text`` and ``jsonb``: every string is passed through
:func:`shortterm.model.text.clean_text` (NUL becomes U+FFFD) before it is sent, JSON values
included.

A dropped connection fails the operation in flight with ``StoreUnavailable`` (it is never
retried: a write whose commit was not confirmed must not be applied twice); the pool then
checks its idle connections so the next operation gets a working one once the server is back.
A server that stops answering without closing the connection (a partition, a stalled host)
would leave libpq waiting forever, so every operation, from getting a connection to reading
the result, is bounded by ``operation_timeout_s`` and then fails with ``StoreUnavailable``. A
query cut off in flight makes psycopg try to cancel it on the server first, which can add up
to 10 s before the connection is given up. The pool retries a failed connection for at most
``pool_reconnect_timeout_s`` (default 2 s, psycopg's own default is 5 minutes of growing
back-off), after which the next operation starts a fresh attempt: so once the server is back,
operations succeed again within that delay instead of waiting out the back-off.
Before the pool first opens, one direct connection is tried: an address that refuses
connections, or a host name that does not resolve, fails at once naming ``host:port``.

URL options (removed before the URL reaches libpq): ``schema`` (tables live in that schema,
created on migration), ``pool_min_size``, ``pool_max_size``, ``pool_timeout_s`` (default 30),
``pool_reconnect_timeout_s`` (default 2), ``operation_timeout_s`` (default 30). Standard libpq
options such as ``application_name`` or ``connect_timeout`` pass through.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..model import (
    DistilledWrite,
    Privacy,
    ScopeKey,
    ScopeKind,
    ScopeMeta,
    ScopeRow,
    ServerSettings,
    ServerSummary,
    UserSettings,
    urls,
)
from ..model.errors import ConfigError, StoreUnavailable
from ..model.fence import (
    JournalEntry,
    WriteFence,
    channel_target,
    private_target,
    scope_targets,
    server_channel_target,
    user_target,
)
from ..model.text import clean_text
from . import migrations
from .base import JOURNAL_RETENTION_S, Forgotten
from .sql_common import (
    SCOPE_COLS,
    SERVER_READ_COLS,
    key_args,
    key_where,
    put_params,
    server_settings,
    server_settings_values,
    server_upsert,
    user_settings,
)

__all__ = ["PostgresStore"]

Pool: TypeAlias = "AsyncConnectionPool[psycopg.AsyncConnection[Any]]"
Conn: TypeAlias = "psycopg.AsyncConnection[Any]"

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_OWN_OPTIONS = (
    "schema",
    "pool_min_size",
    "pool_max_size",
    "pool_timeout_s",
    "pool_reconnect_timeout_s",
    "operation_timeout_s",
)


# The category map a write leaves behind; NULL when the write does not touch categories.
# ``||`` lets the patch override stored slugs, and stripping nulls removes the slugs the patch
# clears. Computed by the server from the row it has locked, so merges never interleave.
_MERGED = (
    "CASE WHEN %(patch)s::jsonb IS NULL THEN NULL "
    "WHEN %(replace)s::boolean THEN jsonb_strip_nulls(%(patch)s::jsonb) "
    "ELSE jsonb_strip_nulls(s.categories || %(patch)s::jsonb) END"
)

# One upsert serves capture and tool writes alike, with the SQLite dialect's semantics:
# metadata given as NULL means "unknown, keep what is stored", the lineage is written on every
# upsert that knows it, and ``revision`` grows on every write.
_UPSERT = f"""
INSERT INTO {{t}}scopes AS s (kind, owner_id, channel_id, persona_id, server_id, server_name,
    channel_name, parent_channel_id, private, persona_lineage_id, summary, summary_at,
    categories, categories_at, turns_since_refresh, refresh_epoch, revision, created_at,
    updated_at)
VALUES (%(kind)s::text, %(owner)s::text, %(channel)s::text, %(persona)s::text,
    %(server_id)s::text, %(server_name)s::text, %(channel_name)s::text, %(parent)s::text,
    COALESCE(%(private)s::boolean, FALSE), %(lineage)s::text,
    CASE WHEN %(set_summary)s::boolean THEN %(summary)s::text END,
    CASE WHEN %(set_summary)s::boolean THEN %(summary_at)s::float8 END,
    COALESCE(jsonb_strip_nulls(%(patch)s::jsonb), '{{{{}}}}'::jsonb),
    CASE WHEN jsonb_strip_nulls(%(patch)s::jsonb) <> '{{{{}}}}'::jsonb THEN %(now)s::float8 END,
    %(inc)s::int, %(reset)s::int, 1, %(now)s::float8, %(now)s::float8)
ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    server_id = COALESCE(%(server_id)s::text, s.server_id),
    server_name = COALESCE(%(server_name)s::text, s.server_name),
    channel_name = COALESCE(%(channel_name)s::text, s.channel_name),
    parent_channel_id = COALESCE(%(parent)s::text, s.parent_channel_id),
    private = COALESCE(%(private)s::boolean OR s.private, s.private),
    persona_lineage_id = COALESCE(%(lineage)s::text, s.persona_lineage_id),
    summary = CASE WHEN %(set_summary)s::boolean THEN %(summary)s::text ELSE s.summary END,
    summary_at = CASE WHEN %(set_summary)s::boolean THEN %(summary_at)s::float8
        ELSE s.summary_at END,
    categories = COALESCE({_MERGED}, s.categories),
    categories_at = CASE WHEN %(patch)s::jsonb IS NULL THEN s.categories_at
        WHEN {_MERGED} = '{{{{}}}}'::jsonb THEN NULL ELSE %(now)s::float8 END,
    turns_since_refresh = CASE WHEN %(reset)s::int = 1 THEN 0
        ELSE s.turns_since_refresh + %(inc)s::int END,
    refresh_epoch = s.refresh_epoch + %(reset)s::int,
    revision = s.revision + 1,
    updated_at = %(now)s::float8
RETURNING {SCOPE_COLS}
"""

# Import: the row as given replaces every stored value; only the revision is ours.
_PUT = f"""
INSERT INTO {{t}}scopes AS s (kind, owner_id, channel_id, persona_id, server_id, server_name,
    channel_name, parent_channel_id, private, persona_lineage_id, summary, summary_at,
    categories, categories_at, turns_since_refresh, refresh_epoch, revision, created_at,
    updated_at)
VALUES (%(kind)s::text, %(owner)s::text, %(channel)s::text, %(persona)s::text,
    %(server_id)s::text, %(server_name)s::text, %(channel_name)s::text, %(parent)s::text,
    %(private)s::boolean, %(lineage)s::text, %(summary)s::text, %(summary_at)s::float8,
    %(categories)s::jsonb, %(categories_at)s::float8, %(turns)s::int, %(epoch)s::int, 1,
    %(updated_at)s::float8, %(updated_at)s::float8)
ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    server_id = excluded.server_id, server_name = excluded.server_name,
    channel_name = excluded.channel_name, parent_channel_id = excluded.parent_channel_id,
    private = excluded.private, persona_lineage_id = excluded.persona_lineage_id,
    summary = excluded.summary, summary_at = excluded.summary_at,
    categories = excluded.categories, categories_at = excluded.categories_at,
    turns_since_refresh = excluded.turns_since_refresh, refresh_epoch = excluded.refresh_epoch,
    revision = s.revision + 1, updated_at = excluded.updated_at
RETURNING {SCOPE_COLS}
"""

# The fenced upsert: the same row, kept only while no forget journaled after the write's
# position covers one of its targets. `lk` (the statement's first CTE, which every upsert reads)
# takes the shared fence lock first; forgets take it exclusively, so a forget waits for the
# writes in flight and a write that started during a forget waits for it. `fence_clear` is
# VOLATILE, so its check sees every forget committed before the lock was granted.
_FENCED_UPSERT = _UPSERT.replace("VALUES (", "SELECT ", 1).replace(
    "%(now)s::float8, %(now)s::float8)\nON CONFLICT",
    "%(now)s::float8, %(now)s::float8\nFROM lk WHERE {t}fence_clear(%(targets)s::text[], "
    "%(fence)s::bigint)\nON CONFLICT",
    1,
)
assert "fence_clear" in _FENCED_UPSERT

_KEY_WHERE = key_where("%s")

# One keyset page of servers: a range over the leading columns of scopes_key (kind, owner_id),
# read in index order so the GroupAggregate streams and the Limit stops the scan after the
# page. EXPLAIN: "Limit -> GroupAggregate -> Index Scan using scopes_key on scopes s, Index
# Cond: ((kind = 'server') AND (owner_id > $1))", no Sort; per group a SubPlan that is an
# Index Scan using scopes_key (kind, owner_id = s.owner_id) sorting that server's own rows.
# Ids compare in the database's collation (the index's), which is also the page order. The
# name is the one on the most recently updated row that has one (ties: the row created last).
_LIST_SERVERS = """
SELECT s.owner_id, COUNT(*), MAX(s.updated_at),
    (SELECT n.server_name FROM {t}scopes AS n
     WHERE n.kind = 'server' AND n.owner_id = s.owner_id AND n.server_name IS NOT NULL
     ORDER BY n.updated_at DESC, n.id DESC LIMIT 1)
FROM {t}scopes AS s
WHERE s.kind = 'server' AND s.owner_id > %s
GROUP BY s.owner_id ORDER BY s.owner_id LIMIT %s
"""

_PARAM = re.compile(r"%\((\w+)\)s")
_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"


def _clean(value: str | None) -> str | None:
    return None if value is None else clean_text(value)


def _clean_json(value: object) -> object:
    """A JSON-able value with every string (keys too) made storable in ``jsonb``."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        return [_clean_json(v) for v in value]
    return value


def _compact(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _jsonb(obj: object) -> Jsonb:
    return Jsonb(_clean_json(obj), dumps=_compact)


def _row(r: Sequence[Any]) -> ScopeRow:
    return ScopeRow(
        key=ScopeKey(r[0], r[1], r[2], r[3]),
        meta=ScopeMeta(
            server_id=r[4],
            server_name=r[5],
            channel_name=r[6],
            parent_channel_id=r[7],
            private=bool(r[8]),
            persona_lineage_id=r[9],
        ),
        summary=r[10],
        summary_at=r[11],
        categories=r[12] or {},
        categories_at=r[13],
        turns_since_refresh=r[14],
        refresh_epoch=r[15],
        revision=r[16],
        updated_at=r[17],
    )


def _params(key: ScopeKey, meta: ScopeMeta | None, now: float) -> dict[str, Any]:
    known = meta is not None
    m = meta if meta is not None else ScopeMeta()
    return {
        "kind": key.kind,
        "owner": key.owner_id,
        "channel": key.channel_id,
        "persona": key.persona_id,
        "server_id": m.server_id if known else (key.owner_id if key.kind == "server" else None),
        "server_name": _clean(m.server_name),
        "channel_name": _clean(m.channel_name),
        "parent": m.parent_channel_id,
        "private": m.private if known else None,
        "lineage": m.persona_lineage_id,
        "set_summary": False,
        "summary": None,
        "summary_at": None,
        "patch": None,
        "replace": False,
        "inc": 0,
        "reset": 0,
        "now": now,
    }


def _put_params(row: ScopeRow) -> dict[str, Any]:
    return put_params(row, text=_clean, flag=bool, categories=_jsonb)


async def _unreachable(conninfo: str) -> str | None:
    """Why nothing will answer at the single TCP address ``conninfo`` names, or ``None``
    (something listens there, or the address is not one plain host and port: a Unix socket,
    several hosts, ``hostaddr``)."""
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or os.environ.get("PGHOST") or "")
    port_text = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    if not host or host.startswith("/") or "," in host + port_text or params.get("hostaddr"):
        return None
    try:
        port = int(port_text)
    except ValueError:
        return None
    where = f"{host}:{port}"
    try:
        _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return f"{where} refused the connection (is PostgreSQL running and listening there?)"
    except socket.gaierror as exc:
        return f"{where}: the host name does not resolve ({exc.strerror})"
    except OSError as exc:
        return f"{where} is unreachable ({exc.strerror or exc})"
    writer.close()
    with suppress(OSError):
        await writer.wait_closed()
    return None


class PostgresStore:
    """A durable store in PostgreSQL. Use :meth:`from_url`, or pass a pool you manage.

    ``pool`` must hand out connections in autocommit mode. With ``schema``, every table lives
    in that schema (created by :meth:`migrate`), so several deployments or test runs can share
    one database without seeing each other.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str | None = None,
        owns_pool: bool = False,
        operation_timeout_s: float = 30.0,
    ) -> None:
        if not 0 < operation_timeout_s < float("inf"):
            raise ConfigError(
                f"operation_timeout_s={operation_timeout_s!r} must be a positive number of seconds"
            )
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ConfigError(
                f"schema={schema!r}: use 1-63 letters, digits or underscores, not starting "
                "with a digit"
            )
        self.pool = pool
        self.schema = schema
        self.operation_timeout_s = operation_timeout_s
        self._owns_pool = owns_pool
        self._first: tuple[str, dict[str, Any]] | None = None  # how to connect, for the probe
        self._opened = False
        self._closed = False
        t = f'"{schema}".' if schema else ""
        self._t = t
        self._upsert = _UPSERT.format(t=t)
        self._fenced_upsert = _FENCED_UPSERT.format(t=t)
        self._fence_lock = _lock_key(f"shortterm.fence:{schema or ''}")
        self._journal_lock = _lock_key(f"shortterm.journal:{schema or ''}")
        self._channel = f"stm_{_lock_key(schema or 'public') & 0xFFFFFFFFFFFF:x}"
        self._listener: asyncio.Task[None] | None = None
        self._heard = 0  # the newest sequence NOTIFY announced
        self._listening = False
        self._put = _PUT.format(t=t)
        self._multi: dict[tuple[int, bool, bool], str] = {}
        self._lock_name = f"shortterm.migrate:{schema or ''}"

    @classmethod
    def from_url(cls, url: str, *, schema: str | None = None) -> PostgresStore:
        """``postgresql://user@host:5432/db?schema=name&pool_max_size=10``.

        The pool is created closed; it opens on first use (``migrate`` at ``shortterm.open``).
        """
        conninfo, options = urls.split_options(
            url,
            schemes=("postgresql", "postgres"),
            ours=_OWN_OPTIONS,
            wrong_scheme=f"not a PostgreSQL URL: {url!r} (use postgresql://user@host/db)",
        )
        min_size = urls.at_least_one(options, "pool_min_size", 1, url)
        max_size = max(min_size, urls.at_least_one(options, "pool_max_size", 10, url))
        timeout_s = urls.positive_seconds(options, "pool_timeout_s", 30.0, url)
        reconnect_s = urls.positive_seconds(options, "pool_reconnect_timeout_s", 2.0, url)
        operation_timeout_s = urls.positive_seconds(options, "operation_timeout_s", 30.0, url)
        if "application_name=" not in conninfo:
            conninfo += ("&" if "?" in conninfo else "?") + "application_name=shortterm"
        connect_kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}
        pool: Pool = AsyncConnectionPool(
            conninfo,
            kwargs=connect_kwargs,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout_s,
            reconnect_timeout=reconnect_s,
            open=False,
            name="shortterm",
        )
        store = cls(
            pool,
            schema=schema or options.get("schema") or None,
            owns_pool=True,
            operation_timeout_s=operation_timeout_s,
        )
        store._first = (conninfo, connect_kwargs)
        return store

    # -- plumbing -------------------------------------------------------------------------

    @asynccontextmanager
    async def _conn(self, what: str) -> AsyncIterator[Conn]:
        if self._closed:
            raise StoreUnavailable("PostgreSQL store is closed")
        sent = False  # once the caller has the connection, a failure is ambiguous
        try:
            # The bound covers the caller's statements too: they run while we are suspended
            # at the yield, in the same task.
            async with asyncio.timeout(self.operation_timeout_s):
                if not self._opened and self._owns_pool:
                    await self._first_contact(what)
                    await self.pool.open(wait=True, timeout=self.pool.timeout)
                    self._opened = True
                async with self.pool.connection() as conn:
                    sent = True
                    yield conn
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"PostgreSQL {what} got no answer within {self.operation_timeout_s:g} s "
                "(operation_timeout_s)",
                maybe_applied=sent,
            ) from exc
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                await self._recheck()
            raise StoreUnavailable(
                f"PostgreSQL {what} failed: {exc}",
                maybe_applied=sent and not isinstance(exc, psycopg.errors.IntegrityError),
            ) from exc

    async def _first_contact(self, what: str) -> None:
        """One direct connection before the pool opens. The pool retries a failed connection
        until ``pool_timeout_s`` (a warning logged per attempt) and then reports a timeout; a
        server that refuses, or a host name that does not resolve, will not answer later
        either, so that fails at once, naming the address and the cause. Anything else (a
        silent server, one still starting up) is left to the pool and the operation's
        timeout, as before."""
        if self._first is None:
            return
        conninfo, kwargs = self._first
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            cause = await _unreachable(conninfo)
            if cause is not None:
                raise StoreUnavailable(f"PostgreSQL {what} failed: {cause}") from exc
            return
        await conn.close()

    async def _recheck(self) -> None:
        # A dropped connection often means its idle siblings were dropped too (a server
        # restart, a failover): test them now rather than failing the next operations.
        with suppress(psycopg.Error, TimeoutError):
            await asyncio.wait_for(self.pool.check(), timeout=5.0)

    @asynccontextmanager
    async def _tx(self, what: str) -> AsyncIterator[Conn]:
        async with self._conn(what) as conn, conn.transaction():
            yield conn

    def _multi_upsert(self, n: int, *, fenced: bool = False, journaled: bool = False) -> str:
        """One statement upserting ``n`` rows, each in its own data-modifying CTE.

        A statement is atomic on its own, so several scopes cost one round trip and no
        BEGIN/COMMIT; each CTE's ON CONFLICT clause locks and reads its own row, so counters
        and category merges stay exact under concurrency. ``fenced``: the rows go through the
        fence (see ``_FENCED_UPSERT``); ``journaled``: each written row is also journaled as
        an edit, under the journal lock, so journal sequence numbers commit in order."""
        sql = self._multi.get((n, fenced, journaled))
        if sql is None:
            ctes = []
            if fenced:
                locks = "pg_advisory_xact_lock_shared(%(fence_lock)s::bigint)"
                if journaled:
                    locks += ", pg_advisory_xact_lock(%(journal_lock)s::bigint)"
                ctes.append(f"lk AS MATERIALIZED (SELECT {locks})")
            body_sql = self._fenced_upsert if fenced else self._upsert
            for i in range(n):
                body = _PARAM.sub(rf"%(\1_{i})s", body_sql.strip())
                ctes.append(f"r{i} AS ({body})")
            if journaled:
                written = " UNION ALL ".join(
                    f"SELECT kind, owner_id, channel_id, persona_id FROM r{i}" for i in range(n)
                )
                ctes.append(
                    f"j AS (INSERT INTO {self._t}journal (kind, subject, subject_user, at) "
                    "SELECT 'edit', jsonb_build_array(w.kind, w.owner_id, w.channel_id, "
                    "w.persona_id), CASE WHEN w.kind = 'user' THEN w.owner_id END, "
                    f"%(journal_at)s::float8 FROM ({written}) AS w)"
                )
            union = " UNION ALL ".join(f"SELECT {i} AS i, * FROM r{i}" for i in range(n))
            if journaled:
                ctes.append(f"n AS (SELECT pg_notify('{self._channel}', ''))")
                union = f"SELECT u.* FROM ({union}) AS u CROSS JOIN n"
            sql = f"WITH {', '.join(ctes)} {union} ORDER BY i"
            self._multi[(n, fenced, journaled)] = sql
        return sql

    async def _upsert_many(
        self,
        what: str,
        params: list[dict[str, Any]],
        fence: WriteFence | None = None,
        *,
        journaled: bool = False,
    ) -> list[ScopeRow]:
        if fence is not None:
            for p in params:
                p["fence"] = fence.position
                p["targets"] = list(_targets_of(p, fence))
        extra: dict[str, Any] = {}
        if fence is not None:
            extra["fence_lock"] = self._fence_lock
            extra["journal_lock"] = self._journal_lock
            extra["journal_at"] = params[0]["now"] if params else 0.0
        fenced = fence is not None
        journaled = journaled and fenced
        if len(params) == 1 and not fenced:
            async with self._conn(what) as conn:
                cur = await conn.execute(self._upsert, params[0])
                return [_row(_one(await cur.fetchone()))]
        keys = [(p["kind"], p["owner"], p["channel"], p["persona"] or "") for p in params]
        if len(set(keys)) < len(keys):
            # One statement cannot change a row twice: apply repeats in order, in a
            # transaction (the caller asked for something odd, not for something fast).
            async with self._tx(what) as conn:
                out = []
                for p in params:
                    one = {f"{name}_0": value for name, value in p.items()} | extra
                    sql = self._multi_upsert(1, fenced=fenced, journaled=journaled)
                    cur = await conn.execute(sql, one)
                    found = await cur.fetchone()
                    if found is not None:
                        out.append(_row(found[1:]))
                return out
        # Rows are locked in key order, whatever the caller's order, so two writers of
        # overlapping scopes can never deadlock.
        order = sorted(range(len(params)), key=keys.__getitem__)
        merged: dict[str, Any] = dict(extra)
        for i, j in enumerate(order):
            merged.update({f"{name}_{i}": value for name, value in params[j].items()})
        async with self._conn(what) as conn:
            sql = self._multi_upsert(len(params), fenced=fenced, journaled=journaled)
            cur = await conn.execute(sql, merged)
            result = await cur.fetchall()
        rows: list[ScopeRow | None] = [None] * len(params)
        for r in result:
            rows[order[r[0]]] = _row(r[1:])
        if fenced:
            return [r for r in rows if r is not None]
        return [_one_row(r) for r in rows]

    async def _journal(
        self,
        conn: Conn,
        kind: str,
        subject: Sequence[str | None],
        targets: Sequence[str],
        now: float,
    ) -> int:
        """Append one journal entry and its fence rows, inside the caller's transaction,
        which must hold the exclusive fence and journal locks (see :meth:`_forget_tx`)."""
        cur = await conn.execute(
            f"INSERT INTO {self._t}journal (kind, subject, targets, at) "
            "VALUES (%s, %s, %s, %s) RETURNING seq",
            (kind, _jsonb(list(subject)), _jsonb(list(targets)), now),
        )
        seq = int(_one(await cur.fetchone())[0])
        if targets:
            await conn.execute(
                f"INSERT INTO {self._t}fence SELECT t, %s, %s FROM unnest(%s::text[]) AS t "
                "ON CONFLICT DO NOTHING",
                (seq, now, list(targets)),
            )
        return seq

    @asynccontextmanager
    async def _forget_tx(self, what: str) -> AsyncIterator[Conn]:
        """A transaction holding the fence lock exclusively (no fenced write is in flight
        while it runs) and the journal lock (sequence numbers commit in order)."""
        async with self._tx(what) as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s::bigint), pg_advisory_xact_lock(%s::bigint)",
                (self._fence_lock, self._journal_lock),
            )
            yield conn
            await conn.execute(f"SELECT pg_notify('{self._channel}', '')")

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations, each in one transaction with its ``schema_migrations``
        row. An advisory lock serializes processes migrating the same schema at once."""
        t = self._t
        applied: list[str] = []
        async with self._conn("migration") as conn:
            async with conn.transaction():
                await conn.execute(_LOCK, (self._lock_name,))
                if self.schema:
                    await conn.execute(
                        f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"', prepare=False
                    )
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {t}schema_migrations (version INTEGER PRIMARY "
                    "KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    prepare=False,
                )
            for m in migrations.load("postgresql"):
                async with conn.transaction():
                    await conn.execute(_LOCK, (self._lock_name,))
                    cur = await conn.execute(
                        f"SELECT 1 FROM {t}schema_migrations WHERE version = %s", (m.version,)
                    )
                    if await cur.fetchone() is not None:
                        continue  # another process applied it while we waited
                    if self.schema:
                        await conn.execute(
                            f'SET LOCAL search_path TO "{self.schema}"', prepare=False
                        )
                    for statement in m.statements:
                        await conn.execute(statement, prepare=False)
                    await conn.execute(
                        f"INSERT INTO {t}schema_migrations (version, name) VALUES (%s, %s)",
                        (m.version, m.name),
                    )
                applied.append(m.label)
        return applied

    async def schema_version(self) -> int:
        async with self._conn("schema query") as conn:
            cur = await conn.execute(f"SELECT MAX(version) FROM {self._t}schema_migrations")
            return int(_one(await cur.fetchone())[0] or 0)

    # -- scopes ---------------------------------------------------------------------------

    async def touch(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta]],
        *,
        increment: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        params = []
        for key, meta in scopes:
            p = _params(key, meta, now)
            if increment is not None and key == increment:
                p["inc"] = 1
            params.append(p)
        return await self._upsert_many("capture upsert", params, fence)

    async def write_distilled(
        self,
        scopes: Sequence[tuple[ScopeKey, ScopeMeta | None]],
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        summary = _clean(change.summary)
        patch = None if change.categories is None else _jsonb(change.categories)
        params = []
        for key, meta in scopes:
            p = _params(key, meta, now)
            if change.set_summary:
                p["set_summary"] = True
                p["summary"] = summary
                p["summary_at"] = None if summary is None else now
            if patch is not None:
                p["patch"] = patch
                p["replace"] = change.replace_categories
            if reset_counter is not None and key == reset_counter:
                p["reset"] = 1
            params.append(p)
        return await self._upsert_many("distilled write", params, fence, journaled=True)

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        async with self._conn("load") as conn:
            cur = await conn.execute(
                f"SELECT {SCOPE_COLS} FROM {self._t}scopes WHERE {_KEY_WHERE}", key_args(key)
            )
            r = await cur.fetchone()
            return None if r is None else _row(r)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        async with self._conn("owner load") as conn:
            cur = await conn.execute(
                f"SELECT {SCOPE_COLS} FROM {self._t}scopes WHERE kind = %s AND owner_id = %s",
                (kind, owner_id),
            )
            return [_row(r) for r in await cur.fetchall()]

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        async with self._conn("channel load") as conn:
            cur = await conn.execute(
                f"SELECT {SCOPE_COLS} FROM {self._t}scopes WHERE channel_id = %s", (channel_id,)
            )
            return [_row(r) for r in await cur.fetchall()]

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        # Ids are never empty, so "after ''" is "from the start" and the plan stays one range.
        async with self._conn("server list") as conn:
            cur = await conn.execute(_LIST_SERVERS.format(t=self._t), (after or "", limit))
            page = await cur.fetchall()
        return [ServerSummary(sid, name, n, at) for sid, n, at, name in page]

    async def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        sql = f"SELECT id, {SCOPE_COLS} FROM {self._t}scopes WHERE id > %s ORDER BY id LIMIT %s"
        last = 0
        while True:
            async with self._conn("export read") as conn:
                cur = await conn.execute(sql, (last, batch_rows))
                rows = await cur.fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [_row(r[1:]) for r in rows]
            if len(rows) < batch_rows:
                return

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: WriteFence | None = None
    ) -> list[ScopeRow]:
        if not rows:
            return []
        params = [_put_params(row) for row in rows]
        if fence is None:
            # One transaction; executemany pipelines the statements, so a batch costs about
            # one round trip rather than one per row.
            async with self._tx("row import") as conn, conn.cursor() as cur:
                await cur.executemany(self._put, params, returning=True)
                out = []
                while True:
                    out.append(_row(_one(await cur.fetchone())))
                    if not cur.nextset():
                        break
            return out
        written = []
        async with self._tx("row import") as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock_shared(%s::bigint), "
                "pg_advisory_xact_lock(%s::bigint)",
                (self._fence_lock, self._journal_lock),
            )
            for row, p in zip(rows, params, strict=True):
                m = row.meta
                targets = scope_targets(row.key, m.server_id, m.parent_channel_id, fence.triggerer)
                cur = await conn.execute(
                    f"SELECT {self._t}fence_clear(%s::text[], %s::bigint)",
                    (list(targets), fence.position),
                )
                if not _one(await cur.fetchone())[0]:
                    continue
                cur = await conn.execute(self._put, p)
                written.append(_row(_one(await cur.fetchone())))
            for r in written:
                k = r.key
                await conn.execute(
                    f"INSERT INTO {self._t}journal (kind, subject, subject_user, at) "
                    "VALUES ('edit', %s, %s, %s)",
                    (
                        _jsonb(list(k.astuple)),
                        k.owner_id if k.kind == "user" else None,
                        r.updated_at,
                    ),
                )
            await conn.execute(f"SELECT pg_notify('{self._channel}', '')")
        return written

    async def iter_distilled(
        self, *, since: float, batch_rows: int
    ) -> AsyncIterator[list[ScopeRow]]:
        # Keyset pages by id: each page is one short query on a pooled connection, so no
        # transaction or server-side cursor stays open while the caller works on a batch.
        sql = (
            f"SELECT id, {SCOPE_COLS} FROM {self._t}scopes WHERE id > %s AND "
            "((summary IS NOT NULL AND summary_at > %s) OR categories_at > %s) "
            "ORDER BY id LIMIT %s"
        )
        last = 0
        while True:
            async with self._conn("hydration read") as conn:
                cur = await conn.execute(sql, (last, since, since, batch_rows))
                rows = await cur.fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [_row(r[1:]) for r in rows]
            if len(rows) < batch_rows:
                return

    async def _delete(self, what: str, sql: str, args: Sequence[Any]) -> int:
        async with self._conn(what) as conn:
            cur = await conn.execute(sql, args)
            return cur.rowcount

    async def forget_channel(self, channel_id: str, *, now: float) -> Forgotten:
        async with self._forget_tx("channel delete") as conn:
            seq = await self._journal(
                conn, "channel", [channel_id], [channel_target(channel_id)], now
            )
            cur = await conn.execute(
                f"DELETE FROM {self._t}scopes WHERE channel_id = %s", (channel_id,)
            )
            return Forgotten(seq, cur.rowcount)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float
    ) -> Forgotten:
        target = user_target(user_id)
        t = self._t
        async with self._forget_tx("user delete") as conn:
            seq = await self._journal(conn, "user", [target], [target], now)
            cur = await conn.execute(
                f"DELETE FROM {t}scopes WHERE kind = 'user' AND owner_id = %s", (user_id,)
            )
            await conn.execute(f"DELETE FROM {t}journal WHERE subject_user = %s", (user_id,))
            if keep is None:
                await conn.execute(f"DELETE FROM {t}user_settings WHERE user_id = %s", (user_id,))
            else:
                await self._save_user(conn, user_id, keep, now)
            return Forgotten(seq, cur.rowcount)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        key = ScopeKey.server(server_id, channel_id, persona_id)
        target = server_channel_target(server_id, channel_id, persona_id)
        async with self._forget_tx("server channel delete") as conn:
            seq = await self._journal(conn, "server_channel", key.astuple[1:], [target], now)
            cur = await conn.execute(
                f"DELETE FROM {self._t}scopes WHERE {_KEY_WHERE}", key_args(key)
            )
            return Forgotten(seq, cur.rowcount)

    async def delete_channel(self, channel_id: str) -> int:
        return (await self.forget_channel(channel_id, now=time.time())).rows

    async def delete_user_scopes(self, user_id: str) -> int:
        """The user's personal rows only (their settings stay): see :meth:`forget_user`."""
        async with self._conn("user settings read") as conn:
            cur = await conn.execute(
                f"SELECT privacy, cross_server_opt_in FROM {self._t}user_settings "
                "WHERE user_id = %s",
                (user_id,),
            )
            found = await cur.fetchone()
        keep = None if found is None else user_settings(found[0], found[1])
        return (await self.forget_user(user_id, keep=keep, now=time.time())).rows

    async def delete_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None
    ) -> int:
        forgotten = await self.forget_server_channel(
            server_id, channel_id, persona_id, now=time.time()
        )
        return forgotten.rows

    async def janitor(self, *, untouched_since: float) -> int:
        t = self._t
        horizon = max(untouched_since, time.time() - JOURNAL_RETENTION_S)
        async with self._tx("janitor") as conn:
            cur = await conn.execute(
                f"DELETE FROM {t}scopes WHERE updated_at < %s", (untouched_since,)
            )
            await conn.execute(f"DELETE FROM {t}journal WHERE at < %s", (horizon,))
            await conn.execute(f"DELETE FROM {t}fence WHERE at < %s", (horizon,))
            return cur.rowcount

    # -- the journal ----------------------------------------------------------------------

    def journal_moved(self) -> bool:
        """True when NOTIFY announced a change since the last call. The listening connection
        counts one announcement each time it (re)connects, so whatever was journaled while it
        was away is read then. No query: an outage costs no extra wait here."""
        if self._listener is None and not self._closed:
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="shortterm-journal-listener"
            )
        heard, self._heard = self._heard, 0
        return heard > 0

    async def _listen(self) -> None:
        """Hold one connection LISTENing for journal changes; reconnect after a failure."""
        conninfo = self.pool.conninfo
        if not isinstance(conninfo, str):
            return  # a computed conninfo: journal_moved polls on every call instead
        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
                async with conn:
                    await conn.execute(f'LISTEN "{self._channel}"')
                    self._heard += 1  # anything committed before LISTEN is read once more
                    self._listening = True
                    async for _ in conn.notifies():
                        self._heard += 1
            except (psycopg.Error, OSError):
                pass  # journal_moved says True meanwhile; try again shortly
            finally:
                self._listening = False
            await asyncio.sleep(0.5)

    async def journal_since(self, seq: int, *, limit: int = 1000) -> list[JournalEntry]:
        async with self._conn("journal read") as conn:
            cur = await conn.execute(
                f"SELECT seq, kind, subject, targets FROM {self._t}journal WHERE seq > %s "
                "ORDER BY seq LIMIT %s",
                (seq, limit),
            )
            rows = await cur.fetchall()
        return [JournalEntry(int(r[0]), r[1], tuple(r[2]), tuple(r[3])) for r in rows]

    async def journal_head(self) -> int:
        async with self._conn("journal read") as conn:
            cur = await conn.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {self._t}journal")
            return int(_one(await cur.fetchone())[0])

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        s = settings
        t = self._t
        upsert = server_upsert(f"{t}server_settings", "%s")
        values = server_settings_values(server_id, s, now, text=_clean, flag=bool, id_list=_jsonb)
        labels = [clean_text(c.label) for c in s.categories]
        descriptions = [clean_text(c.description) for c in s.categories]
        async with self._forget_tx("server settings write") as conn:
            cur = await conn.execute(
                f"SELECT private_channel_ids FROM {t}server_settings WHERE server_id = %s",
                (server_id,),
            )
            old = await cur.fetchone()
            was_private = frozenset(old[0]) if old is not None else frozenset()
            await conn.execute(upsert, values)
            await conn.execute(
                f"DELETE FROM {t}server_categories WHERE server_id = %s", (server_id,)
            )
            if labels:
                await conn.execute(
                    f"INSERT INTO {t}server_categories "
                    "SELECT %s, c.ord - 1, c.label, c.description "
                    "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY "
                    "AS c(label, description, ord)",
                    (server_id, labels, descriptions),
                )
            # A channel turning private fences the writes still in flight that were made
            # while it was public (they carry a public flag).
            newly = sorted(s.private_channel_ids - was_private)
            targets = [private_target(server_id, c) for c in newly]
            return await self._journal(conn, "server_settings", [server_id], targets, now)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        t = self._t
        async with self._conn("server settings read") as conn:
            cur = await conn.execute(
                f"SELECT {', '.join(f's.{c}' for c in SERVER_READ_COLS)}, "
                "(SELECT COALESCE(jsonb_agg(jsonb_build_array(c.label, c.description) "
                f"ORDER BY c.position), '[]'::jsonb) FROM {t}server_categories c "
                "WHERE c.server_id = s.server_id) "
                f"FROM {t}server_settings s WHERE s.updated_at >= %s",
                (since,),
            )
            rows = await cur.fetchall()
        return {r[0]: server_settings(r, r[9], r[11]) for r in rows}

    async def _save_user(
        self, conn: Conn, user_id: str, settings: UserSettings, now: float
    ) -> None:
        await conn.execute(
            f"INSERT INTO {self._t}user_settings VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (user_id) DO UPDATE SET privacy = excluded.privacy, "
            "cross_server_opt_in = excluded.cross_server_opt_in, "
            "updated_at = excluded.updated_at",
            (user_id, settings.privacy.value, settings.cross_server_opt_in, now),
        )

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        async with self._forget_tx("user settings write") as conn:
            await self._save_user(conn, user_id, settings, now)
            full = settings.privacy is Privacy.FULL
            targets = [user_target(user_id)] if full else []
            return await self._journal(conn, "user_settings", [], targets, now)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        async with self._conn("user settings read") as conn:
            cur = await conn.execute(
                "SELECT user_id, privacy, cross_server_opt_in FROM "
                f"{self._t}user_settings WHERE updated_at >= %s",
                (since,),
            )
            rows = await cur.fetchall()
        return {uid: user_settings(p, opt) for uid, p, opt in rows}

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with suppress(asyncio.CancelledError):
                await self._listener
        if self._owns_pool:
            await self.pool.close()


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _targets_of(p: Mapping[str, Any], fence: WriteFence) -> tuple[str, ...]:
    key = ScopeKey._unchecked(p["kind"], p["owner"], p["channel"], p["persona"])
    return scope_targets(key, p["server_id"], p["parent"], fence.triggerer)


def _one_row(row: ScopeRow | None) -> ScopeRow:
    if row is None:  # pragma: no cover - every CTE returns its row
        raise StoreUnavailable("PostgreSQL returned fewer rows than scopes written")
    return row


def _one(row: Sequence[Any] | None) -> Sequence[Any]:
    if row is None:  # pragma: no cover - RETURNING and aggregates always yield a row
        raise StoreUnavailable("PostgreSQL returned no row where one was expected")
    return row
