-- Issue 46: shortcuts the owner kept. `synt_suggest` found a chain of existing executors
-- for a recurring wish (a proto) and offered it through the telos engine; Accept records
-- it here, and the pre-filter then offers the chain's executors to a request that names
-- the wish. Names only, like the rest of the mnestome.
CREATE TABLE shortcuts (
    -- The wished tool's name.
    name TEXT NOT NULL,
    -- The executor whose output the wish was fed (it runs first).
    from_executor TEXT NOT NULL,
    -- The executors after it, in order, comma-separated.
    chain TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (name, from_executor)
);
