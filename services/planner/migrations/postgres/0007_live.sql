-- Issue 23: the spectator watches turns as they run. Each step of a running turn writes
-- its record so far (keys only, as the turn log) in live; live_at orders every change,
-- the end included, across replicas sharing the store.
ALTER TABLE turns ADD COLUMN live TEXT;
ALTER TABLE turns ADD COLUMN live_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX turns_live_at ON turns (live_at);
