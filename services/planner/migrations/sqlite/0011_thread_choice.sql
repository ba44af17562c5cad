-- Issue 40: a thread is written with its first exchange (one write for a turn in a new
-- thread). The current thread of a person is the one chosen last (started, or taken up
-- again by a reply), not one of those still "open": `/new` writes nothing but its thread.
ALTER TABLE threads ADD COLUMN chosen_at BIGINT NOT NULL DEFAULT 0;
-- A thread closed by `/new` is never current again; of the open ones, the newest is.
UPDATE threads SET chosen_at = CASE WHEN closed = 0 THEN last_at ELSE 0 END;
ALTER TABLE threads DROP COLUMN closed;
CREATE INDEX threads_chosen ON threads (channel, sender_id, chosen_at);
-- Every index is written with each new thread: the person's threads by last_at and all of
-- them by last_at go (the current one is found by chosen_at; the daily retention reads
-- the table through once).
DROP INDEX threads_person;
DROP INDEX threads_last_at;
-- When each person last had their conversations forgotten: a turn that began before
-- opens no thread of theirs after it.
CREATE TABLE thread_forgets (
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
