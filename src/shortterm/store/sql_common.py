"""What the SQLite and PostgreSQL stores share: column lists and the row ↔ settings mapping.

The two dialects run differently on purpose (SQLite on the loop thread, PostgreSQL on a pool),
so they share no base class; they share the table layout instead. Where the dialects store a
value differently (JSON text or ``jsonb``, 0/1 or booleans, NUL-free text) the caller passes
the conversion. The per-row builders of the hot paths (capture, hydration) stay in each
dialect, where they are one inlined function with no hooks to call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import Category, Privacy, ScopeKey, ScopeRow, ServerSettings, UserSettings
from ..model.rows import ScopeMeta, ServerSummary

__all__ = [
    "INSERT_COLS",
    "PUT_CONFLICT",
    "SCOPE_COLS",
    "SERVER_COLS",
    "SERVER_READ_COLS",
    "Statements",
    "key_args",
    "key_where",
    "put_params",
    "scope_key_params",
    "server_settings",
    "server_settings_values",
    "server_summaries",
    "server_upsert",
    "user_settings",
]

# Every column of a scope row, in the order the dialects' row builders read them.
SCOPE_COLS = (
    "kind, owner_id, channel_id, persona_id, server_id, server_name, channel_name, "
    "parent_channel_id, private, persona_lineage_id, summary, summary_at, categories, "
    "categories_at, turns_since_refresh, refresh_epoch, revision, updated_at"
)

# The columns an upsert or an import inserts, in the order of their VALUES.
INSERT_COLS = (
    "kind, owner_id, channel_id, persona_id, server_id, server_name, channel_name, "
    "parent_channel_id, private, persona_lineage_id, summary, summary_at, categories, "
    "categories_at, turns_since_refresh, refresh_epoch, revision, created_at, updated_at"
)

# An import's conflict clause: the row as given replaces every stored value; only the
# revision is ours.
PUT_CONFLICT = """ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    server_id = excluded.server_id, server_name = excluded.server_name,
    channel_name = excluded.channel_name, parent_channel_id = excluded.parent_channel_id,
    private = excluded.private, persona_lineage_id = excluded.persona_lineage_id,
    summary = excluded.summary, summary_at = excluded.summary_at,
    categories = excluded.categories, categories_at = excluded.categories_at,
    turns_since_refresh = excluded.turns_since_refresh, refresh_epoch = excluded.refresh_epoch,
    revision = s.revision + 1, updated_at = excluded.updated_at"""

# The server_settings columns a save writes, in the order of server_settings_values.
SERVER_COLS = (
    "refresh_cadence",
    "render_mode",
    "crude_message_count",
    "nudge_depth",
    "content_depth",
    "tool_description",
    "nudge_text",
    "stm_enabled",
    "private_channel_ids",
    "privacy_bypass",
    "updated_at",
)

# What a settings read selects, in the order server_settings expects (updated_at is not read).
SERVER_READ_COLS = ("server_id", *SERVER_COLS[:-1])


def server_upsert(table: str, mark: str) -> str:
    """Insert or replace one server's settings; ``mark`` is the dialect's placeholder."""
    return (
        f"INSERT INTO {table} (server_id, {', '.join(SERVER_COLS)}) "
        f"VALUES ({', '.join([mark] * (len(SERVER_COLS) + 1))}) "
        "ON CONFLICT (server_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in SERVER_COLS)
    )


def key_where(mark: str) -> str:
    """The condition naming one row by its key (matches the ``scopes_key`` index)."""
    return (
        f"kind = {mark} AND owner_id = {mark} AND channel_id = {mark} "
        f"AND COALESCE(persona_id, '') = {mark}"
    )


def key_args(key: ScopeKey) -> tuple[str, str, str, str]:
    """The arguments of :func:`key_where`."""
    return (key.kind, key.owner_id, key.channel_id, key.persona_id or "")


_ENTRY_COLS = "seq, kind, subject, targets, at, horizon"  # a JournalEntry's, in order


@dataclass(frozen=True, slots=True)
class Statements:
    """The statements both dialects write alike, for one table prefix and placeholder."""

    load: str
    load_owner: str
    load_channel: str
    rows_page: str  # keyset pages by id: (last id, limit)
    delete_channel: str
    delete_user_scopes: str
    delete_user_journal: str
    delete_user_settings: str
    delete_key: str
    janitor: str
    journal_since: str
    forgets_since: str  # journal_since without the distilled writes ("edit")
    journal_head: str
    private_keys: str
    horizons: str  # every kept horizon: (target, at)

    @classmethod
    def of(cls, t: str, mark: str) -> Statements:
        """``t``: the tables' prefix (a schema and a dot, or nothing); ``mark``: the
        dialect's placeholder."""
        select = f"SELECT {SCOPE_COLS} FROM {t}scopes WHERE"
        return cls(
            load=f"{select} {key_where(mark)}",
            load_owner=f"{select} kind = {mark} AND owner_id = {mark}",
            load_channel=f"{select} channel_id = {mark}",
            rows_page=(
                f"SELECT id, {SCOPE_COLS} FROM {t}scopes WHERE id > {mark} ORDER BY id LIMIT {mark}"
            ),
            delete_channel=f"DELETE FROM {t}scopes WHERE channel_id = {mark}",
            delete_user_scopes=f"DELETE FROM {t}scopes WHERE kind = 'user' AND owner_id = {mark}",
            delete_user_journal=f"DELETE FROM {t}journal WHERE subject_user = {mark}",
            delete_user_settings=f"DELETE FROM {t}user_settings WHERE user_id = {mark}",
            delete_key=f"DELETE FROM {t}scopes WHERE {key_where(mark)}",
            janitor=f"DELETE FROM {t}scopes WHERE updated_at < {mark}",
            journal_since=(
                f"SELECT {_ENTRY_COLS} FROM {t}journal WHERE seq > {mark} ORDER BY seq LIMIT {mark}"
            ),
            forgets_since=(
                f"SELECT {_ENTRY_COLS} FROM {t}journal WHERE seq > {mark} "
                f"AND kind <> 'edit' ORDER BY seq LIMIT {mark}"
            ),
            journal_head=f"SELECT COALESCE(MAX(seq), 0) FROM {t}journal",
            horizons=f"SELECT target, at FROM {t}horizon",
            private_keys=(
                f"SELECT kind, owner_id, channel_id, persona_id FROM {t}scopes WHERE private"
            ),
        )


def server_summaries(page: Iterable[Sequence[Any]]) -> list[ServerSummary]:
    """A dialect's ``LIST_SERVERS`` rows (id, entries, newest, name) as summaries."""
    return [ServerSummary(sid, name, n, at) for sid, n, at, name in page]


def server_settings_values(
    server_id: str,
    s: ServerSettings,
    now: float,
    *,
    text: Callable[[str | None], str | None],
    flag: Callable[[bool], Any],
    id_list: Callable[[list[str]], Any],
) -> tuple[Any, ...]:
    """The parameters of :func:`server_upsert`: ``text`` makes free text storable, ``flag``
    stores a boolean, ``id_list`` stores the sorted private channel ids."""
    return (
        server_id,
        s.refresh_cadence,
        s.render_mode,
        s.crude_message_count,
        s.nudge_depth,
        s.content_depth,
        text(s.tool_description),
        text(s.nudge_text),
        flag(s.stm_enabled),
        id_list(sorted(s.private_channel_ids)),
        flag(s.privacy_bypass),
        now,
    )


def server_settings(
    r: Sequence[Any], private_channel_ids: Iterable[str], categories: Iterable[Sequence[str]]
) -> ServerSettings:
    """Settings from a row of ``SERVER_READ_COLS``; the dialect decodes the id list and reads
    the categories (label, description) in position order."""
    return ServerSettings(
        refresh_cadence=r[1],
        render_mode=r[2],
        crude_message_count=r[3],
        nudge_depth=r[4],
        content_depth=r[5],
        tool_description=r[6],
        nudge_text=r[7],
        stm_enabled=bool(r[8]),
        private_channel_ids=frozenset(private_channel_ids),
        privacy_bypass=bool(r[10]),
        categories=tuple(Category(label, desc) for label, desc in categories),
    )


def user_settings(privacy: str, cross_server_opt_in: Any) -> UserSettings:
    return UserSettings(Privacy(privacy), bool(cross_server_opt_in))


_UNKNOWN_META = ScopeMeta()


def scope_key_params(
    key: ScopeKey,
    meta: ScopeMeta | None,
    *,
    text: Callable[[str | None], str | None],
    flag: Callable[[bool], Any],
) -> dict[str, Any]:
    """The upserts' parameters naming one scope and its metadata. Metadata ``None`` (not
    known) goes as NULLs, which keep what is stored; a server scope still names its server."""
    m = meta or _UNKNOWN_META
    known = meta is not None
    return {
        "kind": key.kind,
        "owner": key.owner_id,
        "channel": key.channel_id,
        "persona": key.persona_id,
        "server_id": m.server_id if known else (key.owner_id if key.kind == "server" else None),
        "server_name": text(m.server_name),
        "channel_name": text(m.channel_name),
        "parent": m.parent_channel_id,
        "private": flag(m.private) if known else None,
        "lineage": m.persona_lineage_id,
    }


def put_params(
    row: ScopeRow,
    *,
    text: Callable[[str | None], str | None],
    flag: Callable[[bool], Any],
    categories: Callable[[dict[str, str]], Any],
) -> dict[str, Any]:
    """The parameters of a dialect's import statement (``_PUT``) for one whole row."""
    key, m = row.key, row.meta
    return {
        "kind": key.kind,
        "owner": key.owner_id,
        "channel": key.channel_id,
        "persona": key.persona_id,
        "server_id": m.server_id,
        "server_name": text(m.server_name),
        "channel_name": text(m.channel_name),
        "parent": m.parent_channel_id,
        "private": flag(m.private),
        "lineage": m.persona_lineage_id,
        "summary": text(row.summary),
        "summary_at": row.summary_at,
        "categories": categories(dict(row.categories)),
        "categories_at": row.categories_at,
        "turns": row.turns_since_refresh,
        "epoch": row.refresh_epoch,
        "updated_at": row.updated_at,
    }
