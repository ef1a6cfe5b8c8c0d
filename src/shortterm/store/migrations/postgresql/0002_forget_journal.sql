-- The forget journal and the fence, as in the SQLite schema (see there).
CREATE TABLE journal (
    seq          BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         TEXT    NOT NULL,
    subject      JSONB   NOT NULL DEFAULT '[]'::jsonb,
    subject_user TEXT,
    targets      JSONB   NOT NULL DEFAULT '[]'::jsonb,
    at           DOUBLE PRECISION NOT NULL
);
CREATE INDEX journal_user ON journal (subject_user) WHERE subject_user IS NOT NULL;
CREATE INDEX journal_at ON journal (at);

CREATE TABLE fence (
    target TEXT   NOT NULL,
    seq    BIGINT NOT NULL,
    at     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (target, seq)
);
CREATE INDEX fence_at ON fence (at);

-- Whether a write that began at journal position `since` may still touch `targets`. VOLATILE
-- and PL/pgSQL (never inlined), so its query takes a fresh snapshot: called after the
-- statement took the shared fence lock, it sees every forget committed before that.
CREATE FUNCTION fence_clear(targets TEXT[], since BIGINT) RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$ BEGIN RETURN NOT EXISTS (SELECT 1 FROM fence f WHERE f.target = ANY (targets) AND f.seq > since); END $$
