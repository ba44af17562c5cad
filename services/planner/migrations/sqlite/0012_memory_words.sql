-- Issue 40: the memory's search index, per person. Each entry's words are indexed
-- prefixed with its person's tag (written by the planner, which tokenises them as it
-- tokenises a query), so a search matches, and ranks by bm25, that person's entries
-- alone, and only the best few are read back: at 100,000 entries of a person the whole
-- index was ranked and every match joined to its row. The index before is dropped; the
-- planner indexes the entries it finds without words when it starts.
DROP TRIGGER memories_inserted;
DROP TRIGGER memories_deleted;
DROP TABLE memories_fts;
CREATE VIRTUAL TABLE memory_words USING fts5(words, tokenize = 'unicode61 remove_diacritics 0');
CREATE TRIGGER memory_words_deleted AFTER DELETE ON memories BEGIN
    DELETE FROM memory_words WHERE rowid = old.seq;
END;
