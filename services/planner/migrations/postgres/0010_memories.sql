-- Issue 40: a forwarded flag on exchanges (at the end), and each person's long-term memory, what the model saved with memory_save: an entry
-- of at most 500 characters, when, the turn that saved it and where its text came from
-- (provenance labels, JSON: none for the person's own words). Searched by full text
-- (tsvector, ts_rank; the 'simple' configuration, as SQLite's unicode61: no stemming, no
-- stop words); used_at moves when a search returns it (the oldest unused go first at the cap).
CREATE TABLE memories (
    id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    text TEXT NOT NULL,
    labels TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    saved_at BIGINT NOT NULL,
    used_at BIGINT NOT NULL,
    words tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
);
CREATE INDEX memories_person ON memories (channel, sender_id, used_at);
CREATE INDEX memories_words ON memories USING GIN (words);
-- A message the person forwarded is someone else's words: a later turn sees it fenced.
ALTER TABLE exchanges ADD COLUMN forwarded BIGINT NOT NULL DEFAULT 0;
