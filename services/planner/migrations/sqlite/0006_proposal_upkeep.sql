-- Issue 22: a proposal's card left unanswered (48 h) is the telos engine's silence, said
-- once (followed_up_at is the claim); the digest's weekly line of discarded proposals goes
-- out at most once in seven days per person.
ALTER TABLE proposals ADD COLUMN followed_up_at INTEGER;
CREATE INDEX proposals_unanswered ON proposals (sent_at) WHERE token IS NOT NULL AND followed_up_at IS NULL;
ALTER TABLE digests ADD COLUMN weekly INTEGER NOT NULL DEFAULT 0;
