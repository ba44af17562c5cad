-- Grants an approval recorded before idempotency keys (issue 18, F4): one approval could
-- leave twins (the same person, capability and target under one "approval:<token>"), and
-- revoking the one the approval named left the other, so the access stayed. Which twin the
-- approval names cannot be known here: every twin is revoked (the person is asked again
-- next time, and may grant it again). The first grant of each approval takes the
-- approval's key (revoked or not), so a retry of that approval's recording returns it
-- instead of making a new one. Only what the approval service writes is touched: the
-- case-sensitive prefix, and one person, capability and target under the name.
CREATE INDEX IF NOT EXISTS grants_granted_by ON grants (granted_by);
UPDATE grants SET revoked_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000
WHERE revoked_at IS NULL AND substr(granted_by, 1, 9) = 'approval:'
  AND (SELECT COUNT(*) FROM grants t
       WHERE t.granted_by = grants.granted_by AND t.channel = grants.channel
         AND t.sender_id = grants.sender_id AND t.capability = grants.capability
         AND t.target = grants.target) > 1;
UPDATE grants SET idempotency_key = granted_by
WHERE idempotency_key IS NULL AND substr(granted_by, 1, 9) = 'approval:'
  AND id = (SELECT MIN(k.id) FROM grants k WHERE k.granted_by = grants.granted_by)
  AND NOT EXISTS (SELECT 1 FROM grants k
                  WHERE k.granted_by = grants.granted_by
                    AND (k.channel <> grants.channel OR k.sender_id <> grants.sender_id
                         OR k.capability <> grants.capability OR k.target <> grants.target))
  AND NOT EXISTS (SELECT 1 FROM grants k WHERE k.idempotency_key = grants.granted_by);
