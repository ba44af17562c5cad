-- One message, one trace (issue 41): the W3C traceparent of the call that sent a card, so
-- the click that answers it joins the turn's trace. Cards sent before have none.
ALTER TABLE cards ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
