-- The private scopes, read whole at every open (the write-behind must never buffer one):
-- without an index that read scanned every row (0.5 CPU s of an open at 1M rows). Partial
-- and covering, so it holds the few private rows only and the read never touches the table.
CREATE INDEX scopes_private ON scopes (kind, owner_id, channel_id, persona_id) WHERE private
