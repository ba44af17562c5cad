-- Issue 40: SQLite's memory index became per person (its 0012); PostgreSQL's tsvector
-- column and GIN index need nothing: a search there filters by person before it ranks.
SELECT 1;
