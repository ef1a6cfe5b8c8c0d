"""The SQLite statement text. Kept apart from the code that runs it so the dialect's SQL reads
as one piece; the statements of 1-4 rows (every capture) are built once, at import."""

from __future__ import annotations

import functools

from ...model.fence import EVERY_TARGET
from ..sql_common import INSERT_COLS, PUT_CONFLICT, SCOPE_COLS, Statements, key_where, server_upsert

# One upsert serves capture and tool writes alike. Metadata given as NULL means "unknown,
# keep what is stored"; the lineage is written on every upsert that knows it (never lost to a
# racing counter insert).
UPSERT = f"""
INSERT INTO scopes AS s ({INSERT_COLS})
VALUES (:kind, :owner, :channel, :persona, :server_id, :server_name, :channel_name, :parent,
    COALESCE(:private, 0), :lineage, :summary, :summary_at, COALESCE(:categories, '{{}}'),
    :categories_at, :inc, :reset, 1, :now, :now)
ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET
    server_id = COALESCE(:server_id, s.server_id),
    server_name = COALESCE(:server_name, s.server_name),
    channel_name = COALESCE(:channel_name, s.channel_name),
    parent_channel_id = COALESCE(:parent, s.parent_channel_id),
    private = CASE WHEN :private IS NULL THEN s.private ELSE MAX(:private, s.private) END,
    persona_lineage_id = COALESCE(:lineage, s.persona_lineage_id),
    summary = CASE WHEN :set_summary THEN :summary ELSE s.summary END,
    summary_at = CASE WHEN :set_summary THEN :summary_at ELSE s.summary_at END,
    categories = COALESCE(:categories, s.categories),
    categories_at = CASE WHEN :categories IS NULL THEN s.categories_at ELSE :categories_at END,
    turns_since_refresh = CASE WHEN :reset THEN 0 ELSE s.turns_since_refresh + :inc END,
    refresh_epoch = s.refresh_epoch + :reset,
    revision = s.revision + 1,
    updated_at = :now
RETURNING {SCOPE_COLS}
"""

SERVER_UPSERT = server_upsert("server_settings", "?")

# The capture path: every scope of a turn in one statement (one implicit transaction, one
# WAL append). Capture always knows its metadata, so only "unknown" names and lineage keep
# the stored value; the counter grows by each row's own increment.
_TOUCH_COLS = (
    "kind, owner_id, channel_id, persona_id, server_id, server_name, channel_name, "
    "parent_channel_id, private, persona_lineage_id, turns_since_refresh, revision, "
    "created_at, updated_at"
)
_TOUCH_ON_CONFLICT = (
    "ON CONFLICT (kind, owner_id, channel_id, COALESCE(persona_id, '')) DO UPDATE SET "
    "server_id = COALESCE(excluded.server_id, s.server_id), "
    "server_name = COALESCE(excluded.server_name, s.server_name), "
    "channel_name = COALESCE(excluded.channel_name, s.channel_name), "
    "parent_channel_id = COALESCE(excluded.parent_channel_id, s.parent_channel_id), "
    "private = MAX(excluded.private, s.private), "
    "persona_lineage_id = COALESCE(excluded.persona_lineage_id, s.persona_lineage_id), "
    "turns_since_refresh = s.turns_since_refresh + excluded.turns_since_refresh, "
    "revision = s.revision + 1, updated_at = excluded.updated_at "
    f"RETURNING {SCOPE_COLS}"
)
TOUCH_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"
TOUCH = f"INSERT INTO scopes AS s ({_TOUCH_COLS}) VALUES {{rows}} {_TOUCH_ON_CONFLICT}"
TOUCH_BY_ROWS = {n: TOUCH.format(rows=", ".join([TOUCH_ROW] * n)) for n in (1, 2, 3, 4)}

# A write-behind's flush: many rows per statement, built once per row count. 13 parameters a
# row keeps a full chunk far below SQLite's variable limit.
BATCH_TOUCH_ROWS = 200


@functools.cache
def touch_rows(n: int, returning: bool) -> str:
    statement = TOUCH.format(rows=", ".join([TOUCH_ROW] * n))
    if returning:
        return statement
    bare = statement.removesuffix(f" RETURNING {SCOPE_COLS}")
    assert bare != statement
    return bare


# The fence's end: the newest forget a write could be covered by (the fence_seq index reads it
# without a scan). Edits and settings changes are journaled too but fence nothing, so they do
# not move it. A pruned fence row covers nothing any more, here as in the full check.
FENCE_END = "SELECT MAX(seq) FROM fence"

# The fenced capture: the same upsert, each row kept only while no forget journaled after the
# write's position covers one of its targets (up to MAX_TARGETS per row, NULL-padded). One
# statement, so the check and the write are one atomic step under SQLite's write lock.
MAX_TARGETS = 6
_TARGET_COLS = ", ".join(f"v.column{15 + i}" for i in range(MAX_TARGETS))
FENCED_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?" + ", ?" * MAX_TARGETS + ")"
FENCED_TOUCH = (
    f"INSERT INTO scopes AS s ({_TOUCH_COLS}) "
    f"SELECT {', '.join(f'v.column{i}' for i in range(1, 15))} FROM (VALUES {{rows}}) AS v "
    # No forget after the position (the usual case): the fence's end, read once per
    # statement, decides it without a look at the fence rows.
    f"WHERE COALESCE(({FENCE_END}), 0) <= ? "
    "OR NOT EXISTS (SELECT 1 FROM fence AS f WHERE f.seq > ? "
    f"AND f.target IN ('{EVERY_TARGET}', {_TARGET_COLS})) {_TOUCH_ON_CONFLICT}"
)
FENCED_TOUCH_BY_ROWS = {
    n: FENCED_TOUCH.format(rows=", ".join([FENCED_ROW] * n)) for n in (1, 2, 3, 4)
}
_TARGET_PARAMS = ", ".join(f":t{i}" for i in range(MAX_TARGETS))
FENCED_UPSERT = UPSERT.replace("VALUES (", "SELECT ", 1).replace(
    ":now, :now)\nON CONFLICT",
    ":now, :now\nWHERE NOT EXISTS (SELECT 1 FROM fence AS f WHERE f.seq > :fence "
    f"AND f.target IN ('{EVERY_TARGET}', {_TARGET_PARAMS}))\nON CONFLICT",
    1,
)
assert FENCED_UPSERT.count("NOT EXISTS") == 1

KEY_WHERE = key_where("?")
COMMON = Statements.of("", "?")

# Many scopes by key in one statement (a journal follower's page of edits): the keys go as one
# JSON array of [kind, owner, channel, persona or ''], so no bound on parameters applies, and
# each is looked up in scopes_key. EXPLAIN QUERY PLAN: "SCAN k VIRTUAL TABLE", then "SEARCH s
# USING INDEX scopes_key (kind=? AND owner_id=? AND channel_id=? AND <expr>=?)".
LOAD_MANY = (
    f"SELECT {', '.join(f's.{c}' for c in SCOPE_COLS.split(', '))} "
    "FROM json_each(?) AS k CROSS JOIN scopes AS s "
    "WHERE s.kind = json_extract(k.value, '$[0]') AND s.owner_id = json_extract(k.value, '$[1]') "
    "AND s.channel_id = json_extract(k.value, '$[2]') "
    "AND COALESCE(s.persona_id, '') = json_extract(k.value, '$[3]')"
)
CATEGORIES_OF = f"SELECT categories FROM scopes WHERE {KEY_WHERE}"

# One keyset page of servers: a range over the leading columns of scopes_key (kind, owner_id),
# which also yields the groups in order, so the scan stops after LIMIT groups. EXPLAIN QUERY
# PLAN: "SEARCH s USING INDEX scopes_key (kind=? AND owner_id>?)", no temp B-tree for the
# GROUP BY or ORDER BY; per group, a "CORRELATED SCALAR SUBQUERY" doing "SEARCH n USING INDEX
# scopes_key (kind=? AND owner_id=?)" and sorting that server's own rows. The name is the one
# on the most recently updated row that has one (ties: the row created last).
LIST_SERVERS = """
SELECT s.owner_id, COUNT(*), MAX(s.updated_at),
    (SELECT n.server_name FROM scopes AS n
     WHERE n.kind = 'server' AND n.owner_id = s.owner_id AND n.server_name IS NOT NULL
     ORDER BY n.updated_at DESC, n.id DESC LIMIT 1)
FROM scopes AS s
WHERE s.kind = 'server' AND s.owner_id > ?
GROUP BY s.owner_id ORDER BY s.owner_id LIMIT ?
"""

# Import: the row as given replaces every stored value; only the revision is ours.
PUT = f"""
INSERT INTO scopes AS s ({INSERT_COLS})
VALUES (:kind, :owner, :channel, :persona, :server_id, :server_name, :channel_name, :parent,
    :private, :lineage, :summary, :summary_at, :categories, :categories_at, :turns, :epoch, 1,
    :updated_at, :updated_at)
{PUT_CONFLICT}
RETURNING {SCOPE_COLS}
"""
