-- One row per scope key, as in the SQLite schema, with native types: epochs are DOUBLE
-- PRECISION seconds, categories a JSONB object (slug -> text), flags BOOLEAN.
-- Crude messages are never stored here (they live in the hot tier).
CREATE TABLE scopes (
    id                  BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind                TEXT    NOT NULL CHECK (kind IN ('user', 'server')),
    owner_id            TEXT    NOT NULL,
    channel_id          TEXT    NOT NULL,
    persona_id          TEXT,
    server_id           TEXT,
    server_name         TEXT,
    channel_name        TEXT,
    parent_channel_id   TEXT,
    private             BOOLEAN NOT NULL DEFAULT FALSE,
    persona_lineage_id  TEXT,
    summary             TEXT,
    summary_at          DOUBLE PRECISION,
    categories          JSONB   NOT NULL DEFAULT '{}'::jsonb,
    categories_at       DOUBLE PRECISION,
    turns_since_refresh INTEGER NOT NULL DEFAULT 0,
    refresh_epoch       INTEGER NOT NULL DEFAULT 0,
    revision            BIGINT  NOT NULL DEFAULT 1,
    created_at          DOUBLE PRECISION NOT NULL,
    updated_at          DOUBLE PRECISION NOT NULL
);
-- persona_id NULL ("no persona") and '0' are different personas; '' is never a valid id.
-- The key index also serves per-owner reads and user deletes (its leading columns).
CREATE UNIQUE INDEX scopes_key ON scopes (kind, owner_id, channel_id, COALESCE(persona_id, ''));
CREATE INDEX scopes_channel ON scopes (channel_id);
CREATE INDEX scopes_updated ON scopes (updated_at);

CREATE TABLE server_settings (
    server_id           TEXT    PRIMARY KEY,
    refresh_cadence     INTEGER NOT NULL,
    render_mode         TEXT    NOT NULL CHECK (render_mode IN ('crude_summary', 'supersede')),
    crude_message_count INTEGER NOT NULL,
    nudge_depth         INTEGER NOT NULL,
    content_depth       INTEGER NOT NULL,
    tool_description    TEXT,
    nudge_text          TEXT,
    stm_enabled         BOOLEAN NOT NULL,
    private_channel_ids JSONB   NOT NULL DEFAULT '[]'::jsonb,
    privacy_bypass      BOOLEAN NOT NULL,
    updated_at          DOUBLE PRECISION NOT NULL
);
CREATE INDEX server_settings_updated ON server_settings (updated_at);

CREATE TABLE server_categories (
    server_id   TEXT    NOT NULL REFERENCES server_settings (server_id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    label       TEXT    NOT NULL,
    description TEXT    NOT NULL,
    PRIMARY KEY (server_id, position)
);

CREATE TABLE user_settings (
    user_id             TEXT    PRIMARY KEY,
    privacy             TEXT    NOT NULL CHECK (privacy IN ('none', 'partial', 'full')),
    cross_server_opt_in BOOLEAN NOT NULL,
    updated_at          DOUBLE PRECISION NOT NULL
);
CREATE INDEX user_settings_updated ON user_settings (updated_at);
