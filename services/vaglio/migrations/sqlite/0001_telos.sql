-- The telos engine's state (seed telos.md): every proactive proposal evaluated (the
-- rejected ones are the journal), the ledger of publications and digest places (bother and
-- quotas), per-telos fitness, the never-list, who was asked to write a TELOS.md, and
-- stopped intents. A person is "<channel>:<sender>". Times are milliseconds since the Unix
-- epoch (UTC).
CREATE TABLE telos_proposals (
    proposal_id             TEXT    PRIMARY KEY,
    person                  TEXT    NOT NULL,
    channel                 TEXT    NOT NULL,
    effect_class            TEXT    NOT NULL,
    decision                TEXT    NOT NULL,
    reason                  TEXT    NOT NULL,
    expected_alignment      REAL    NOT NULL,
    before_bother           REAL    NOT NULL,
    threshold               REAL    NOT NULL,
    contributors            TEXT    NOT NULL,
    result_json             TEXT    NOT NULL,
    at_ms                   INTEGER NOT NULL,
    answer                  TEXT,
    viewed                  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX telos_proposals_journal ON telos_proposals (decision, at_ms);
CREATE INDEX telos_proposals_person ON telos_proposals (person, at_ms);

CREATE TABLE telos_ledger (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    person      TEXT    NOT NULL,
    channel     TEXT    NOT NULL,
    place       TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    weight      REAL    NOT NULL,
    session     TEXT    NOT NULL,
    proposal_id TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL
);
CREATE INDEX telos_ledger_person ON telos_ledger (person, channel, at_ms);
CREATE INDEX telos_ledger_place ON telos_ledger (person, place, at_ms);
CREATE INDEX telos_ledger_session ON telos_ledger (person, channel, session);

CREATE TABLE telos_fitness (
    person     TEXT    NOT NULL,
    telos_id   TEXT    NOT NULL,
    ema        REAL    NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (person, telos_id)
);

CREATE TABLE telos_never (
    person       TEXT    NOT NULL,
    effect_class TEXT    NOT NULL,
    since_ms     INTEGER NOT NULL,
    proposal_id  TEXT    NOT NULL,
    PRIMARY KEY (person, effect_class)
);

CREATE TABLE telos_people (
    person    TEXT    PRIMARY KEY,
    asked_ms  INTEGER,
    version   TEXT    NOT NULL DEFAULT '',
    telos_ids TEXT    NOT NULL DEFAULT '',
    written_at TEXT   NOT NULL DEFAULT ''
);

CREATE TABLE telos_stops (
    person   TEXT    NOT NULL,
    intent   TEXT    NOT NULL,
    until_ms INTEGER NOT NULL,
    PRIMARY KEY (person, intent)
);
