-- Pending approvals (seed approval_ux.md 6.1, plus the call they approve, the territory
-- they may concede, cancellation and the grant a concession recorded). Times are
-- milliseconds since the Unix epoch (UTC).
CREATE TABLE pending (
    token               TEXT    PRIMARY KEY,
    channel             TEXT    NOT NULL,
    sender_id           TEXT    NOT NULL,
    capability_class    TEXT    NOT NULL,
    action_verb         TEXT    NOT NULL,
    target_summary      TEXT    NOT NULL,
    reversibility       TEXT    NOT NULL,
    territory           TEXT    NOT NULL,
    language            TEXT    NOT NULL,
    capability          TEXT    NOT NULL,
    target              TEXT    NOT NULL,
    territory_target    TEXT    NOT NULL,
    executor            TEXT    NOT NULL,
    call_sha256         TEXT    NOT NULL,
    recurrence_count    INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    status              TEXT    NOT NULL DEFAULT 'pending',
    decision_at         INTEGER,
    decision_by_channel TEXT,
    decision_by_sender  TEXT,
    cancel_reason       TEXT,
    grant_id            INTEGER,
    request_extra       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX pending_status ON pending (status, expires_at);
CREATE INDEX pending_recurrence ON pending (channel, sender_id, capability_class, target, status);
CREATE INDEX pending_created ON pending (created_at);
