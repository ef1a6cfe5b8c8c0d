-- A journal created anew (an empty one) starts at the clock's microseconds, above any sequence
-- an earlier journal could have reached, with a `pruned` entry naming everything before it (a
-- process that followed the old journal learns that it cannot know what it missed) and a fence
-- row of target '*', which every write matches: one that began before it is refused.
WITH g (s, at) AS (
    SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
           (julianday('now') - 2440587.5) * 86400.0
    WHERE NOT EXISTS (SELECT 1 FROM journal)
)
INSERT INTO journal (seq, kind, subject, targets, at)
SELECT s, 'pruned', json_array(CAST(s - 1 AS TEXT)), '["*"]', at FROM g;

INSERT OR IGNORE INTO fence SELECT '*', seq, at FROM journal WHERE kind = 'pruned';
