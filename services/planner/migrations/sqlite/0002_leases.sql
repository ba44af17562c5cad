-- Turn ownership by lease (issue 18): the replica that runs or resumes a turn (`owner`,
-- stable across its restarts; `owner_run`, this process) holds it until `lease_until`
-- (milliseconds since the epoch), renewed while it works or waits. Another replica takes
-- a turn over only once the lease has expired.
ALTER TABLE turns ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN owner_run TEXT NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
CREATE INDEX turns_lease ON turns (state, lease_until);
-- Turns a planner was running or resuming before this version: expired (a planner
-- upgrade restarts every replica), and once held, so the lease sweep takes them up.
UPDATE turns SET lease_until = 1 WHERE state IN ('running', 'resuming');
