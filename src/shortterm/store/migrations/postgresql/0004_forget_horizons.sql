-- Forget horizons, as in the SQLite schema (see there).
ALTER TABLE journal ADD COLUMN horizon DOUBLE PRECISION;

CREATE TABLE horizon (
    target  TEXT PRIMARY KEY,
    at      DOUBLE PRECISION NOT NULL,
    written DOUBLE PRECISION NOT NULL
);
CREATE INDEX horizon_written ON horizon (written)
