"""The PostgreSQL statement text, with ``{t}`` for the schema prefix.

Kept apart from the code that runs it so the dialect's SQL reads as one piece.
"""

from __future__ import annotations

import re

from ..sql_common import INSERT_COLS, PUT_CONFLICT, SCOPE_COLS, key_where

SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
OWN_OPTIONS = (
    "schema",
    "pool_min_size",
    "pool_max_size",
    "pool_timeout_s",
    "pool_reconnect_timeout_s",
    "operation_timeout_s",
    "listen_timeout_s",
    "pooler",
    "listen_url",
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
UPSERT = f"""
INSERT INTO {{t}}scopes AS s ({INSERT_COLS})
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
PUT = f"""
INSERT INTO {{t}}scopes AS s ({INSERT_COLS})
VALUES (%(kind)s::text, %(owner)s::text, %(channel)s::text, %(persona)s::text,
    %(server_id)s::text, %(server_name)s::text, %(channel_name)s::text, %(parent)s::text,
    %(private)s::boolean, %(lineage)s::text, %(summary)s::text, %(summary_at)s::float8,
    %(categories)s::jsonb, %(categories_at)s::float8, %(turns)s::int, %(epoch)s::int, 1,
    %(updated_at)s::float8, %(updated_at)s::float8)
{PUT_CONFLICT}
RETURNING {SCOPE_COLS}
"""

# The fenced upsert: the same row, kept only while no forget journaled after the write's
# position covers one of its targets. `lk` (the statement's first CTE, which every upsert reads)
# takes the shared fence lock first; forgets take it exclusively, so a forget waits for the
# writes in flight and a write that started during a forget waits for it. `fence_clear` is
# VOLATILE, so its check sees every forget committed before the lock was granted.
FENCED_UPSERT = UPSERT.replace("VALUES (", "SELECT ", 1).replace(
    "%(now)s::float8, %(now)s::float8)\nON CONFLICT",
    "%(now)s::float8, %(now)s::float8\nFROM lk WHERE {t}fence_clear(%(targets)s::text[], "
    "%(fence)s::bigint)\nON CONFLICT",
    1,
)
assert "fence_clear" in FENCED_UPSERT

KEY_WHERE = key_where("%s")

# Many scopes by key in one statement (a journal follower's page of edits): the keys as four
# text arrays (kind, owner, channel, persona or ''), each looked up in scopes_key. The LATERAL
# subquery with its LIMIT keeps the plan a nested loop of index scans whatever the number of
# keys (a plain join of 2,000 keys was planned as a hash join over the whole table). EXPLAIN:
# "Nested Loop -> Function Scan on k; Limit -> Index Scan using scopes_key … Index Cond:
# ((kind = k.kind) AND (owner_id = k.owner_id) AND (channel_id = k.channel_id) AND
# (COALESCE(persona_id, '') = k.persona))".
LOAD_MANY = (
    "SELECT s.* FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
    "AS k(kind, owner_id, channel_id, persona) CROSS JOIN LATERAL "
    f"(SELECT {SCOPE_COLS} FROM {{t}}scopes AS s WHERE s.kind = k.kind AND "
    "s.owner_id = k.owner_id AND s.channel_id = k.channel_id "
    "AND COALESCE(s.persona_id, '') = k.persona LIMIT 1) AS s"
)

# One keyset page of servers: a range over the leading columns of scopes_key (kind, owner_id),
# read in index order so the GroupAggregate streams and the Limit stops the scan after the
# page. EXPLAIN: "Limit -> GroupAggregate -> Index Scan using scopes_key on scopes s, Index
# Cond: ((kind = 'server') AND (owner_id > $1))", no Sort; per group a SubPlan that is an
# Index Scan using scopes_key (kind, owner_id = s.owner_id) sorting that server's own rows.
# Ids compare in the database's collation (the index's), which is also the page order. The
# name is the one on the most recently updated row that has one (ties: the row created last).
LIST_SERVERS = """
SELECT s.owner_id, COUNT(*), MAX(s.updated_at),
    (SELECT n.server_name FROM {t}scopes AS n
     WHERE n.kind = 'server' AND n.owner_id = s.owner_id AND n.server_name IS NOT NULL
     ORDER BY n.updated_at DESC, n.id DESC LIMIT 1)
FROM {t}scopes AS s
WHERE s.kind = 'server' AND s.owner_id > %s
GROUP BY s.owner_id ORDER BY s.owner_id LIMIT %s
"""

_PARAM = re.compile(r"%\((\w+)\)s")
MIGRATE_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"


def multi_upsert(
    upsert: str, fenced_upsert: str, t: str, channel: str, n: int, *, fenced: bool, journaled: bool
) -> str:
    """One statement upserting ``n`` rows, each in its own data-modifying CTE.

    A statement is atomic on its own, so several scopes cost one round trip and no
    BEGIN/COMMIT; each CTE's ON CONFLICT clause locks and reads its own row, so counters
    and category merges stay exact under concurrency. ``fenced``: the rows go through the
    fence (see ``FENCED_UPSERT``); ``journaled``: each written row is also journaled as
    an edit, under the journal lock, so journal sequence numbers commit in order. ``upsert``
    and ``fenced_upsert`` are the schema's own statements, ``channel`` its NOTIFY channel."""
    ctes = []
    if fenced:
        locks = "pg_advisory_xact_lock_shared(%(fence_lock)s::bigint)"
        if journaled:
            locks += ", pg_advisory_xact_lock(%(journal_lock)s::bigint)"
        ctes.append(f"lk AS MATERIALIZED (SELECT {locks})")
    body_sql = fenced_upsert if fenced else upsert
    for i in range(n):
        body = _PARAM.sub(rf"%(\1_{i})s", body_sql.strip())
        ctes.append(f"r{i} AS ({body})")
    if journaled:
        written = " UNION ALL ".join(
            f"SELECT kind, owner_id, channel_id, persona_id FROM r{i}" for i in range(n)
        )
        ctes.append(
            f"j AS (INSERT INTO {t}journal (kind, subject, subject_user, at) "
            "SELECT 'edit', jsonb_build_array(w.kind, w.owner_id, w.channel_id, "
            "w.persona_id), CASE WHEN w.kind = 'user' THEN w.owner_id END, "
            f"%(journal_at)s::float8 FROM ({written}) AS w RETURNING seq)"
        )
    union = " UNION ALL ".join(f"SELECT {i} AS i, * FROM r{i}" for i in range(n))
    if journaled:
        # The notification names the newest entry, and each row carries it (last column):
        # the writing process knows its own entry and need not read it back.
        ctes.append("js AS (SELECT max(seq) AS seq FROM j)")
        ctes.append(f"n AS (SELECT pg_notify('{channel}', coalesce(js.seq::text, '')) FROM js)")
        union = f"SELECT u.*, js.seq FROM ({union}) AS u CROSS JOIN n CROSS JOIN js"
    return f"WITH {', '.join(ctes)} {union} ORDER BY i"


def positional(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement`` with its ``%(name)s`` parameters as ``$1``, ``$2``, … (a name used twice
    keeps its number), and the names in number order: run through a raw cursor, a statement
    is not converted again on every call. psycopg caches its own conversion only for short
    statements, and a multi-row upsert is longer (its conversion cost ~160 µs a call)."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match[1], len(names) + 1)}"

    if "%%" in statement:
        raise ValueError("a literal % in a statement run positionally")  # none today
    return _PARAM.sub(number, statement), tuple(names)
