-- Issue 46: the mnestome (seed agent_runtime ch. 11.1). A passage is one executor's output
-- field piped into another executor's argument, learned from steps that succeeded; a proto
-- is a tool the model asked for that does not exist, with data piped from an earlier step.
-- Names and fields only: never values or targets. Per installation, not per person.
CREATE TABLE passages (
    from_executor TEXT NOT NULL,
    from_field TEXT NOT NULL,
    to_executor TEXT NOT NULL,
    to_arg TEXT NOT NULL,
    weight DOUBLE PRECISION NOT NULL,
    uses BIGINT NOT NULL,
    successes BIGINT NOT NULL,
    last_used BIGINT NOT NULL,
    -- When the daily ager last decayed the weight (0: never).
    decayed_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (from_executor, from_field, to_executor, to_arg)
);
CREATE TABLE protos (
    from_executor TEXT NOT NULL,
    wanted TEXT NOT NULL,
    arg_names TEXT NOT NULL,
    -- How recurrent the wish is: each use moves it toward 1 as a success moves a passage.
    weight DOUBLE PRECISION NOT NULL,
    uses BIGINT NOT NULL,
    first_seen BIGINT NOT NULL,
    last_used BIGINT NOT NULL,
    decayed_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (from_executor, wanted, arg_names)
);
