-- The fence's end: a write checks the fence rows only when a forget newer than its position
-- exists, and tool calls journal an edit (which fences nothing) every few turns, so the
-- journal's own end says little. This index answers MAX(seq) without a scan.
CREATE INDEX fence_seq ON fence (seq)
