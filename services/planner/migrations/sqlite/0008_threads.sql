-- Issue 40: each person's conversation on a channel is a thread: the person's messages and
-- Metnos's final answers verbatim, each step as one line (executor, outcome, provenance
-- labels, scratchpad id), never an observation's content. One exchange per turn (its turn
-- id unique: a turn's end recorded twice, by a replica that died and the one that took
-- over, writes one exchange).
CREATE TABLE threads (
    id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    last_at INTEGER NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX threads_person ON threads (channel, sender_id, last_at);
CREATE INDEX threads_last_at ON threads (last_at);
CREATE TABLE exchanges (
    thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    turn_id TEXT NOT NULL UNIQUE,
    at INTEGER NOT NULL,
    message TEXT NOT NULL,
    answer TEXT NOT NULL,
    labels TEXT NOT NULL,
    steps TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
