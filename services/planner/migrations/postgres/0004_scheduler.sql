-- The builtin scheduler (issue 22, seed agent_runtime.md ch. 11.2). `tasks`: maintenance
-- tasks and people's standing orders, each with its schedule and the slot it owes next;
-- `runs`: one row per firing, never removed (written when it starts, its end once). Times
-- are milliseconds since the Unix epoch.
--
-- A firing is claimed by moving `next_run_at` on with a conditional UPDATE (the slot read
-- must still be there): two ticks, two replicas or a restart inside one slot run it once.
-- `due_at` is when the owed slot may run: the slot itself, or the end of the person's
-- protected window it fell in (`deferred` = 1). `next_run_at` = -1 (and
-- `due_at` the largest time): it never fires again.
CREATE TABLE tasks (
    id          TEXT    PRIMARY KEY,
    kind        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    channel     TEXT    NOT NULL,
    sender_id   TEXT    NOT NULL,
    schedule    TEXT    NOT NULL,
    anchor_at   BIGINT  NOT NULL,
    query       TEXT    NOT NULL,
    level       TEXT    NOT NULL,
    notify      TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    next_run_at BIGINT  NOT NULL,
    due_at      BIGINT  NOT NULL,
    deferred    BIGINT NOT NULL DEFAULT 0,
    last_run_at BIGINT,
    last_status TEXT,
    last_output TEXT,
    last_digest TEXT,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL
);
CREATE INDEX tasks_due ON tasks (due_at) WHERE state = 'active';
CREATE INDEX tasks_person ON tasks (channel, sender_id);

CREATE TABLE runs (
    id          BIGSERIAL PRIMARY KEY,
    task_id     TEXT    NOT NULL,
    slot_at     BIGINT  NOT NULL,
    in_cadence  BIGINT NOT NULL,
    replica     TEXT    NOT NULL,
    started_at  BIGINT  NOT NULL,
    finished_at BIGINT,
    status      TEXT    NOT NULL,
    output      TEXT,
    turn_id     TEXT,
    UNIQUE (task_id, slot_at)
);
CREATE INDEX runs_task ON runs (task_id, started_at);
