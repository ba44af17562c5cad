-- Issue 40 (review): when each person last had their memory forgotten. A save by a turn
-- that began before is refused (its person forgot what it would add to): stopping the
-- turns begun before is cooperative (a turn on another replica may be mid-step), and a
-- card approved later still applies for its turn.
-- (SQLite's 0013 also rebuilds its word index; PostgreSQL's words are a column.)
CREATE TABLE memory_forgets (
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
