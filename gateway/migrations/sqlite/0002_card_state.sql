-- A card keeps what it showed (its HTML and buttons, to show them again after the
-- "always" confirmation is declined), when it was closed to its outcome, and when its
-- reminder went out (once).
ALTER TABLE cards ADD COLUMN html TEXT NOT NULL DEFAULT '';
ALTER TABLE cards ADD COLUMN buttons TEXT NOT NULL DEFAULT '';
ALTER TABLE cards ADD COLUMN closed_at INTEGER;
ALTER TABLE cards ADD COLUMN reminded_at INTEGER;
CREATE INDEX cards_open ON cards (closed_at, created_at);
