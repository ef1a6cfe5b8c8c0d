-- A prune (and a journal created anew) fences every write that began before it: a fence row
-- of target '*' matches whatever a write touches, since the rows that write should have been
-- checked against may be gone.
CREATE OR REPLACE FUNCTION fence_clear(targets TEXT[], since BIGINT) RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$ BEGIN RETURN NOT EXISTS (SELECT 1 FROM fence f WHERE f.target = ANY (array_append(targets, '*')) AND f.seq > since); END $$;

-- A journal created anew (an empty one) starts at the clock's microseconds, above any sequence
-- an earlier journal of this schema reached, with a `pruned` entry naming everything before it:
-- a process that followed the old journal learns that it cannot know what it missed.
WITH g AS (
    SELECT setval(pg_get_serial_sequence('journal', 'seq'),
                  (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS s
    WHERE NOT EXISTS (SELECT 1 FROM journal)
)
INSERT INTO journal (kind, subject, targets, at)
SELECT 'pruned', jsonb_build_array(s::text), '["*"]'::jsonb, extract(epoch FROM clock_timestamp())
FROM g;

INSERT INTO fence SELECT '*', seq, at FROM journal WHERE kind = 'pruned' ON CONFLICT DO NOTHING
