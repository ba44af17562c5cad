-- SendMessage with an idempotency key (issue 18): what became of each keyed message, so a
-- caller asking again (its answer lost, its deadline passed) never makes it show twice.
-- state: 'sending' (under way, or the gateway stopped during it), 'sent' (message_ids, a
-- JSON list), 'maybe' (part of it went or may have). A message that certainly did not go
-- leaves no row. Rows are kept two days.
CREATE TABLE sent_messages (
    idempotency_key TEXT PRIMARY KEY,
    state           TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    message_ids     TEXT NOT NULL DEFAULT '[]',
    created_at      INTEGER NOT NULL
);
CREATE INDEX sent_messages_created ON sent_messages (created_at);
