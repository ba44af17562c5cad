-- Proposals the planner makes on its own (issue 22). `approvals_seen`: each approved call
-- whose approval could grant a pattern (its capability, the pattern, when), the source of
-- approval-fatigue offers. `proposals`: each proposal, what the telos engine decided
-- (publish, digest, reject) and the approval token of its card once sent. Times are
-- milliseconds since the Unix epoch.
CREATE TABLE approvals_seen (
    person     TEXT    NOT NULL,
    capability TEXT    NOT NULL,
    pattern    TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    at         INTEGER  NOT NULL
);
CREATE INDEX approvals_seen_key ON approvals_seen (person, capability, pattern, at);

CREATE TABLE proposals (
    id          TEXT    PRIMARY KEY,
    channel     TEXT    NOT NULL,
    sender_id   TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    description TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    decision    TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    token       TEXT,
    created_at  INTEGER  NOT NULL,
    sent_at     INTEGER
);
CREATE INDEX proposals_subject ON proposals (channel, sender_id, kind, subject, created_at);
CREATE INDEX proposals_digest ON proposals (decision, channel, sender_id) WHERE sent_at IS NULL;

-- The evening digests sent: one per person per evening (the row is the claim).
CREATE TABLE digests (
    channel   TEXT   NOT NULL,
    sender_id TEXT   NOT NULL,
    slot_at   INTEGER NOT NULL,
    sent_at   INTEGER NOT NULL,
    PRIMARY KEY (channel, sender_id, slot_at)
);
