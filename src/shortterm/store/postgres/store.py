"""The PostgreSQL store: the Store protocol, by calling the parts that do the work.

Each part has one job: :mod:`.pooled` holds the pool (bounding, guarding and transacting every
operation) and the journal listener, :mod:`.journaling` writes and reads the forget journal,
:mod:`.settings` keeps the settings and :mod:`.scopes` the scope rows; :mod:`.schema`
migrates. Reaching the server (probes, refusals, the pool's watch) is :mod:`.connection`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool

from ...model import urls
from ...model.errors import ConfigError
from ...model.fence import JournalEntry, WriteFence
from ...model.keys import ScopeKey, ScopeKind
from ...model.rows import DistilledWrite, HydrationRow, ScopeRow, ServerSummary
from ...model.settings import ServerSettings, UserSettings
from ..base import Distilled, Forgotten, TouchScopes, WriteScopes
from . import schema, sql
from .connection import Conn, Pool, PoolWatch, check_options, watched_connection
from .journaling import Journaling
from .pooled import Pooled
from .scopes import Scopes
from .settings import Settings

__all__ = ["POOL_MAX_SIZE", "PostgresStore"]

# Connections a process's pool may open (``pool_max_size``); with its LISTEN connection, each
# process may hold this plus one of the server's ``max_connections`` (docs/design.md, "The
# connection budget"). Four carry one process's load as fast as ten did.
POOL_MAX_SIZE = 4


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
        listen_timeout_s: float = 1.0,
        pooler: Literal["transaction"] | None = None,
        listen_url: str | None = None,
        watch: PoolWatch | None = None,
        probes: Sequence[tuple[str, dict[str, Any], str]] = (),
    ) -> None:
        """``pooler``: see :class:`Pooled`. ``watch``: what the pool's connections tell of
        their attempts (the pool must use ``watched_connection(watch)``); ``probes``: how to
        connect for the probe before the pool first opens (see ``connection.first_contact``),
        each with what it is for."""
        self._pooled = pooled = Pooled(
            pool,
            schema=schema,
            owns_pool=owns_pool,
            operation_timeout_s=operation_timeout_s,
            listen_timeout_s=listen_timeout_s,
            pooler=pooler,
            listen_url=listen_url,
            watch=watch,
            probes=probes,
        )
        self._listener = pooled.listener
        self._journal = Journaling(pooled)
        self._settings = Settings(pooled)
        self._scopes = Scopes(pooled)

    @classmethod
    def from_url(cls, url: str, *, schema: str | None = None) -> PostgresStore:
        """``postgresql://user@host:5432/db?schema=name&pool_max_size=4``.

        The pool is created closed; it opens on first use (``migrate`` at ``shortterm.open``).
        An option neither ours nor libpq's is refused here (``ConfigError``), by name.

        ``pooler=transaction`` says the URL reaches a pooler in transaction mode (PgBouncer,
        …). It is said, not guessed: a wrong guess towards prepared statements would run
        another client's statement of the same name. The open refuses a URL that reaches one
        without it (a pooler's backend id is not its server's, and in transaction mode it hands
        our session to our next connection), and a standby (``target_session_attrs``).
        ``listen_url`` (percent-encoded) is a direct connection to LISTEN on (refused at open
        when it reaches a pooler in transaction mode); without it, through the pooler, the
        journal's end is polled.
        """
        conninfo, options = urls.split_options(
            url,
            schemes=("postgresql", "postgres"),
            ours=sql.OWN_OPTIONS,
            wrong_scheme=f"not a PostgreSQL URL: {urls.shown_url(url)!r} (use postgresql://user@host/db)",
        )
        check_options(conninfo, url, sql.OWN_OPTIONS)
        min_size = urls.at_least_one(options, "pool_min_size", 1, url)
        max_size = max(min_size, urls.at_least_one(options, "pool_max_size", POOL_MAX_SIZE, url))
        timeout_s = urls.positive_seconds(options, "pool_timeout_s", 30.0, url)
        reconnect_s = urls.positive_seconds(options, "pool_reconnect_timeout_s", 2.0, url)
        operation_timeout_s = urls.positive_seconds(options, "operation_timeout_s", 30.0, url)
        listen_timeout_s = urls.positive_seconds(options, "listen_timeout_s", 1.0, url)
        pooler = _pooler(options, url)
        listen_url = options.get("listen_url") or None
        if listen_url is not None:
            try:
                check_options(listen_url, listen_url, ())
            except ConfigError as exc:
                raise ConfigError(f"listen_url: {exc}") from None
            listen_url = _named(listen_url)
        conninfo = _named(conninfo)
        # Through a transaction pooler nothing is prepared (see above); else every statement
        # is, on first use.
        connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": None if pooler else 0,
        }
        watch = PoolWatch()
        pool: Pool = AsyncConnectionPool(
            conninfo,
            kwargs=connect_kwargs,
            connection_class=watched_connection(watch),
            min_size=min_size,
            max_size=max_size,
            timeout=timeout_s,
            reconnect_timeout=reconnect_s,
            open=False,
            name="shortterm",
        )
        return cls(
            pool,
            schema=schema or options.get("schema") or None,
            owns_pool=True,
            operation_timeout_s=operation_timeout_s,
            listen_timeout_s=listen_timeout_s,
            pooler=pooler,
            listen_url=listen_url,
            watch=watch,
            probes=[
                (conninfo, connect_kwargs, ""),
                *([(listen_url, {"autocommit": True}, "listen_url")] if listen_url else []),
            ],
        )

    @property
    def pool(self) -> Pool:
        return self._pooled.pool

    @property
    def schema(self) -> str | None:
        return self._pooled.schema

    @property
    def pooler(self) -> Literal["transaction"] | None:
        return self._pooled.pooler

    @property
    def operation_timeout_s(self) -> float:
        return self._pooled.operation_timeout_s

    @property
    def pool_trouble(self) -> str | None:
        """Why the pool could not serve lately: the error of the newest wait for a connection
        that timed out, until a wait begun after it is served. Changes nothing; readiness
        reports it (a probe's own read may well be served while the bot's operations wait)."""
        return self._pooled.watch.trouble

    @property
    def server_down(self) -> bool:
        """Whether the pool's newest connection attempt failed (for another reason than the
        server's connection limit): requests then connect on their own, or fail within
        ``pooled.UNREACHABLE_WAIT_S``, until the pool connects again."""
        return self._pooled.watch.down

    @property
    def listening(self) -> bool:
        """Whether the ``LISTEN`` connection proved itself alive within ``listen_timeout_s``,
        so that :meth:`journal_moved` answers from its flag (asking changes nothing)."""
        return self._listener.alive

    # Reached by tests and benchmarks (cleanups, lock contention).
    @property
    def _t(self) -> str:
        return self._pooled.layout.t

    @property
    def _fence_lock(self) -> int:
        return self._pooled.layout.fence_lock

    def _conn(self, what: str) -> AbstractAsyncContextManager[Conn]:
        return self._pooled.conn(what)

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations, each in one transaction with its ``schema_migrations``
        row. An advisory lock serializes processes migrating the same schema at once."""
        pooled = self._pooled
        async with pooled.conn("migration") as conn:
            return await schema.migrate(
                conn, pooled.layout.t, pooled.schema, pooled.layout.migrate_lock
            )

    async def schema_version(self) -> int:
        async with self._pooled.conn("schema query") as conn:
            return await schema.version(conn, self._pooled.layout.t)

    async def close(self) -> None:
        await self._pooled.close()

    # -- scopes ---------------------------------------------------------------------------

    async def touch(
        self,
        scopes: TouchScopes,
        *,
        increment: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        return await self._scopes.touch(scopes, increment, now, fence)

    async def write_distilled(
        self,
        scopes: WriteScopes,
        change: DistilledWrite,
        *,
        reset_counter: ScopeKey | None,
        now: float,
        fence: WriteFence | None = None,
    ) -> list[ScopeRow]:
        write = Distilled(scopes, change, reset_counter)
        return await self._scopes.write_distilled(write, now, fence)

    async def load(self, key: ScopeKey) -> ScopeRow | None:
        return await self._scopes.load(key)

    async def load_many(self, keys: Sequence[ScopeKey]) -> list[ScopeRow | None]:
        return await self._scopes.load_many(keys)

    async def load_owner(self, kind: ScopeKind, owner_id: str) -> list[ScopeRow]:
        return await self._scopes.load_owner(kind, owner_id)

    async def load_channel(self, channel_id: str) -> list[ScopeRow]:
        return await self._scopes.load_channel(channel_id)

    async def list_servers(self, *, after: str | None, limit: int) -> list[ServerSummary]:
        return await self._scopes.list_servers(after, limit)

    def iter_rows(self, *, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        return self._scopes.iter_rows(batch_rows)

    async def put_rows(
        self, rows: Sequence[ScopeRow], *, fence: WriteFence | None = None
    ) -> list[ScopeRow]:
        return await self._scopes.put_rows(rows, fence)

    def iter_distilled(self, *, since: float, batch_rows: int) -> AsyncIterator[list[ScopeRow]]:
        return self._scopes.iter_distilled(since, batch_rows)

    def iter_hydration(self, *, since: float, batch_rows: int) -> AsyncIterator[list[HydrationRow]]:
        """:meth:`iter_distilled` as plain :data:`HydrationRow` tuples (model.rows): the
        columns in that order, an empty category map as NULL, the page's id cut off."""
        return self._scopes.iter_hydration(since, batch_rows)

    # -- the journal ----------------------------------------------------------------------

    async def forget_channel(
        self, channel_id: str, *, now: float, horizon: float | None = None
    ) -> Forgotten:
        at = now if horizon is None else horizon
        return await self._journal.forget_channel(channel_id, now, at)

    async def forget_user(
        self, user_id: str, *, keep: UserSettings | None, now: float, horizon: float | None = None
    ) -> Forgotten:
        at = now if horizon is None else horizon
        return await self._journal.forget_user(user_id, keep, now, at)

    async def forget_server_channel(
        self, server_id: str, channel_id: str, persona_id: str | None, *, now: float
    ) -> Forgotten:
        return await self._journal.forget_server_channel(server_id, channel_id, persona_id, now)

    async def janitor(self, *, untouched_since: float) -> int:
        return await self._journal.janitor(untouched_since)

    def journal_moved(self) -> bool:
        """True when NOTIFY announced a change since the last call, or when the ``LISTEN``
        connection has not proved itself alive within ``listen_timeout_s`` (see
        :class:`journal.JournalListener`). No query: while the listener is alive, a flag."""
        return self._listener.moved()

    async def journal_since(
        self, seq: int, *, limit: int = 1000, forgets_only: bool = False
    ) -> list[JournalEntry]:
        return await self._journal.since(seq, limit, forgets_only)

    async def journal_head(self) -> int:
        return await self._journal.head()

    def own_entry(self, seq: int) -> JournalEntry | None:
        """The entry this store journaled lately at ``seq`` (a forget, a settings change, an
        upgrade's fence), known without a read; ``None`` otherwise (see store/own_entries.py)."""
        return self._pooled.own_entries.get(seq)

    async def horizons(self) -> list[tuple[str, float]]:
        return await self._journal.horizons()

    async def journal_rewound(self, past: int, *, now: float) -> int:
        return await self._journal.rewound(past, now)

    async def fence_upgrade(
        self, scopes: Sequence[ScopeKey], *, since: int, targets: Sequence[str], now: float
    ) -> int | None:
        return await self._journal.fence_upgrade(scopes, since, targets, now)

    # -- settings -------------------------------------------------------------------------

    async def save_server_settings(
        self, server_id: str, settings: ServerSettings, *, now: float
    ) -> int:
        return await self._settings.save_server(server_id, settings, now)

    async def server_settings_since(self, since: float) -> dict[str, ServerSettings]:
        return await self._settings.servers_since(since)

    async def save_user_settings(self, user_id: str, settings: UserSettings, *, now: float) -> int:
        return await self._settings.save_user(user_id, settings, now)

    async def user_settings_since(self, since: float) -> dict[str, UserSettings]:
        return await self._settings.users_since(since)


def _pooler(options: dict[str, str], url: str) -> Literal["transaction"] | None:
    value = options.get("pooler", "none")
    if value == "transaction":
        return "transaction"
    if value == "none":
        return None
    raise ConfigError(
        f"pooler={value!r} in {urls.shown_url(url)!r}: use pooler=transaction for a pooler in "
        "transaction mode (PgBouncer, …), or none (the default: the server, or a pooler in "
        "session mode)"
    )


def _named(conninfo: str) -> str:
    """``conninfo`` with ``application_name=shortterm`` unless it names itself."""
    if "application_name=" in conninfo:
        return conninfo
    return conninfo + ("&" if "?" in conninfo else "?") + "application_name=shortterm"
