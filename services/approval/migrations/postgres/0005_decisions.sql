-- The approval decisions' tamper-evident journal (issue 23): one hash-chained line per
-- decision (approved, rejected, expired, cancelled; metnos_kit::chain), in seq order, and
-- the chain's head (its last seq and hash) in one row.
CREATE TABLE decisions (seq BIGINT PRIMARY KEY, line TEXT NOT NULL);
CREATE TABLE decisions_head (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL);
