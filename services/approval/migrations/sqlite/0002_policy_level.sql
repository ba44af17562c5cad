-- The autonomy level policy judged the call at, for the card's reason line (issue 17).
ALTER TABLE pending ADD COLUMN policy_level TEXT NOT NULL DEFAULT '';
