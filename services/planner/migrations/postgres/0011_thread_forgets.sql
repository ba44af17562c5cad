-- Issue 40: when each person last had their conversations forgotten. A thread is written
-- when its first exchange is (one write for a turn in a new thread): a turn that began
-- before the person forgot opens no thread after it.
CREATE TABLE thread_forgets (
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
