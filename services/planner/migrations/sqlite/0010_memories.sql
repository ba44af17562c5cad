-- Issue 40: a forwarded flag on exchanges (at the end), and each person's long-term memory, what the model saved with memory_save: an entry
-- of at most 500 characters, when, the turn that saved it and where its text came from
-- (provenance labels, JSON: none for the person's own words). Searched by full text (FTS5,
-- bm25; accents kept, as PostgreSQL's 'simple' keeps them); used_at moves when a search
-- returns it (the oldest unused go first at the cap).
CREATE TABLE memories (
    -- The search index's key: an INTEGER PRIMARY KEY keeps its number through a VACUUM.
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    text TEXT NOT NULL,
    labels TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    saved_at INTEGER NOT NULL,
    used_at INTEGER NOT NULL
);
CREATE INDEX memories_person ON memories (channel, sender_id, used_at);
CREATE VIRTUAL TABLE memories_fts USING fts5(
    text, content = 'memories', content_rowid = 'seq',
    tokenize = 'unicode61 remove_diacritics 0'
);
CREATE TRIGGER memories_inserted AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.seq, new.text);
END;
CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.seq, old.text);
END;
-- A message the person forwarded is someone else's words: a later turn sees it fenced.
ALTER TABLE exchanges ADD COLUMN forwarded INTEGER NOT NULL DEFAULT 0;
