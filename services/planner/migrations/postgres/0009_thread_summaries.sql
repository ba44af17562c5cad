-- Issue 40: a thread's older exchanges, folded into one summary by the fast tier (its own
-- prompt), so a turn sees them when they no longer fit in conversation.history_tokens. It
-- covers exchanges 1..=upto_seq, carries the union of their provenance labels (JSON), and
-- was made when the thread's last exchange was made_at_seq (one summary call per
-- conversation.summary_every turns at most).
CREATE TABLE thread_summaries (
    thread_id TEXT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    upto_seq BIGINT NOT NULL,
    made_at_seq BIGINT NOT NULL,
    text TEXT NOT NULL,
    labels TEXT NOT NULL,
    made_at BIGINT NOT NULL
);
