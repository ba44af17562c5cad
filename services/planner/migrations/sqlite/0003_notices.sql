-- What the person must still be told about a turn that ended while nobody followed it
-- (issue 18): a turn a planner's restart interrupted, or one a sweep took up and finished.
-- `notice` is the text, NULL once delivered (or given up after a day); a replica sending it
-- holds it until `notice_claimed_until` (milliseconds since the epoch), so two replicas do
-- not both send it.
ALTER TABLE turns ADD COLUMN notice TEXT;
ALTER TABLE turns ADD COLUMN notice_claimed_until INTEGER NOT NULL DEFAULT 0;
CREATE INDEX turns_notice ON turns (updated_at) WHERE notice IS NOT NULL;
