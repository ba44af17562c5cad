-- Persistent per-target grants (seed policy.md 4.1, plus last_used_at and the lookup
-- columns). Times are milliseconds since the Unix epoch (UTC).
CREATE TABLE grants (
    id           BIGSERIAL PRIMARY KEY,
    channel      TEXT   NOT NULL,
    sender_id    TEXT   NOT NULL,
    capability   TEXT   NOT NULL,
    target       TEXT   NOT NULL,  -- as given, e.g. ~/Documents/invoices-2026/*
    pattern      TEXT   NOT NULL,  -- normalised for matching (~ expanded, host lower case)
    match_key    TEXT   NOT NULL,  -- glob's literal directory, host or wildcard, exact value
    granted_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    granted_by   TEXT   NOT NULL DEFAULT '',
    revoked_at   BIGINT,
    last_used_at BIGINT
);
CREATE INDEX grants_lookup ON grants (channel, sender_id, capability, match_key)
    WHERE revoked_at IS NULL;
CREATE INDEX grants_by_principal ON grants (channel, sender_id, granted_at);
CREATE INDEX grants_granted_at ON grants (granted_at);
