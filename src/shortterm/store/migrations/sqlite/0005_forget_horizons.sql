-- Forget horizons: the moment a clear, a purge or a FULL choice covers (docs/design.md,
-- "Forgetting"). The journal entry carries it to followers; the horizon table keeps the newest
-- per target (a digest, never an id) for far longer than the journal's 7 days, because the
-- platform keeps passing old messages back with every capture.
ALTER TABLE journal ADD COLUMN horizon REAL;

CREATE TABLE horizon (
    target  TEXT PRIMARY KEY,
    at      REAL NOT NULL,
    written REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX horizon_written ON horizon (written)
