-- Conversation threads (issue 40): which thread each answer Metnos sent belongs to, so a
-- Telegram reply to an older answer continues that answer's thread. Only the ids: the
-- words stay in the planner's thread. Rows go with conversation.retention_days, and with
-- the person's /forget.
CREATE TABLE answer_threads (
    chat_id    TEXT NOT NULL,
    message_id BIGINT NOT NULL,
    sender_id  TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    sent_at    BIGINT NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
CREATE INDEX answer_threads_sent ON answer_threads (sent_at);
CREATE INDEX answer_threads_sender ON answer_threads (sender_id);
