-- Issue 40 (review): when each person last had their memory forgotten. A save by a turn
-- that began before is refused (its person forgot what it would add to): stopping the
-- turns begun before is cooperative (a turn on another replica may be mid-step), and a
-- card approved later still applies for its turn.
CREATE TABLE memory_forgets (
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
-- SQLite's index of memory words split them where the planner does not (the unicode61
-- tokenizer splits a word at a combining mark the planner keeps in it): a word made to
-- split there could index, under its writer's tag, a token bearing another person's tag,
-- and crowd their searches. The `ascii` tokenizer splits only at ASCII punctuation and
-- spaces, and the planner writes words of letters and digits joined by spaces: each
-- indexed token is one of the planner's words. The planner indexes every entry again
-- when it starts.
DROP TRIGGER memory_words_deleted;
DROP TABLE memory_words;
CREATE VIRTUAL TABLE memory_words USING fts5(words, tokenize = 'ascii');
CREATE TRIGGER memory_words_deleted AFTER DELETE ON memories BEGIN
    DELETE FROM memory_words WHERE rowid = old.seq;
END;
