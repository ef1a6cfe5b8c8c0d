-- The forget journal: every forget and every change other processes must follow, in order.
-- A follower reads the entries after the last one it applied. Subjects never hold a purged
-- user's id: a user forget names them by digest; `subject_user` (edits of a user's personal
-- scope) is deleted with the user.
CREATE TABLE journal (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT    NOT NULL,
    subject      TEXT    NOT NULL DEFAULT '[]',
    subject_user TEXT,
    targets      TEXT    NOT NULL DEFAULT '[]',
    at           REAL    NOT NULL
);
CREATE INDEX journal_user ON journal (subject_user) WHERE subject_user IS NOT NULL;
CREATE INDEX journal_at ON journal (at);

-- The fence: one row per target a forget covers. A write lands only if no target it touches
-- has a sequence above the position the write began at (checked in the write's statement).
CREATE TABLE fence (
    target TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    at     REAL    NOT NULL,
    PRIMARY KEY (target, seq)
) WITHOUT ROWID;
CREATE INDEX fence_at ON fence (at)
