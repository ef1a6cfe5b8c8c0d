-- The private scopes, read whole at every open, as in the SQLite schema (see there).
CREATE INDEX scopes_private ON scopes (kind, owner_id, channel_id, persona_id) WHERE private
