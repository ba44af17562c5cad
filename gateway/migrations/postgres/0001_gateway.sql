-- Who may talk to Metnos (pairings), the one-time codes that pair them, the cards sent
-- (to edit them once decided), the Telegram update offset and the updates handled.
-- Times are milliseconds since the Unix epoch (UTC).
CREATE TABLE pairings (
    channel      TEXT    NOT NULL,
    sender_id    TEXT    NOT NULL,
    chat_id      TEXT    NOT NULL,
    display_name TEXT    NOT NULL,
    level        TEXT    NOT NULL,
    language     TEXT    NOT NULL,
    paired_at    BIGINT  NOT NULL,
    PRIMARY KEY (channel, sender_id)
);

CREATE TABLE pairing_codes (
    code         TEXT    PRIMARY KEY,
    channel      TEXT    NOT NULL,
    sender_id    TEXT    NOT NULL,
    chat_id      TEXT    NOT NULL,
    display_name TEXT    NOT NULL,
    language     TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    expires_at   BIGINT  NOT NULL,
    used_at      BIGINT
);
CREATE INDEX pairing_codes_sender ON pairing_codes (channel, sender_id, expires_at);

CREATE TABLE cards (
    token      TEXT    PRIMARY KEY,
    channel    TEXT    NOT NULL,
    chat_id    TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    lines      TEXT    NOT NULL,
    created_at BIGINT  NOT NULL
);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE handled_updates (
    update_id  BIGINT  PRIMARY KEY,
    handled_at BIGINT  NOT NULL
);
