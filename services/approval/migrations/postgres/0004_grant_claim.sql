-- One grant per approval (issue 18, F4): whoever records an approved concession's grant
-- (the resolve, or any replica's retry sweep) first claims it here until this time (ms
-- since the epoch), so two never ask policy at once.
ALTER TABLE pending ADD COLUMN grant_claimed_until BIGINT NOT NULL DEFAULT 0;
