-- The W3C trace context of the turn that asked (its traceparent), so the decision is a
-- span of the turn's trace (issue 17). Empty when the request was made without one.
ALTER TABLE pending ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
