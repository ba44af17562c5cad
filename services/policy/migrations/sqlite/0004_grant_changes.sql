-- The grant store's changes, hash-chained (issue 23): one line per grant recorded, revoked
-- or pruned (metnos_kit::chain), in seq order, and the chain's head in one row.
CREATE TABLE grant_changes (seq INTEGER PRIMARY KEY, line TEXT NOT NULL);
CREATE TABLE grant_changes_head (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL);
