-- One grant per approval (issue 18, F4): a grant recorded with an idempotency key (the
-- approval's token) exists once; a retry with the same key returns it.
ALTER TABLE grants ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX grants_idempotency ON grants (idempotency_key) WHERE idempotency_key IS NOT NULL;
