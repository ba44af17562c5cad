-- Turns (their checkpoint while they run or wait for an approval, and their log record
-- once finished) and the scratchpad of large observations. Times are milliseconds since
-- the Unix epoch (UTC).
CREATE TABLE turns (
    turn_id          TEXT    PRIMARY KEY,
    channel          TEXT    NOT NULL,
    sender_id        TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    approval_token   TEXT,
    checkpoint       TEXT    NOT NULL,
    record           TEXT,
    cancel_requested BIGINT  NOT NULL DEFAULT 0,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL
);
CREATE INDEX turns_principal ON turns (channel, sender_id, state);
CREATE INDEX turns_token ON turns (approval_token);
CREATE INDEX turns_updated ON turns (updated_at);

CREATE TABLE scratchpad (
    id          TEXT    PRIMARY KEY,
    turn_id     TEXT    NOT NULL,
    step        BIGINT  NOT NULL,
    kind        TEXT    NOT NULL,
    content     TEXT    NOT NULL,
    observation TEXT    NOT NULL,
    size_bytes  BIGINT  NOT NULL,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX scratchpad_turn ON scratchpad (turn_id);
CREATE INDEX scratchpad_created ON scratchpad (created_at);
