-- Grants an approval recorded before idempotency keys (issue 18, F4): one approval could
-- leave twins, and revoking the one the approval named left the other, so the access
-- stayed. For each approval ("approval:<token>"), one grant is kept — the one with its key,
-- else the first — and the rest are revoked; when any of them was revoked, the person meant
-- the access gone, and all are. The kept one takes the approval's key, so a retry of that
-- approval's recording returns it instead of making a twin.
UPDATE grants SET revoked_at = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT
WHERE revoked_at IS NULL AND granted_by LIKE 'approval:%'
  AND EXISTS (SELECT 1 FROM grants t WHERE t.granted_by = grants.granted_by AND t.revoked_at IS NOT NULL);
UPDATE grants SET revoked_at = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT
WHERE revoked_at IS NULL AND granted_by LIKE 'approval:%'
  AND id <> COALESCE(
      (SELECT MIN(k.id) FROM grants k WHERE k.idempotency_key = grants.granted_by),
      (SELECT MIN(k.id) FROM grants k WHERE k.granted_by = grants.granted_by));
UPDATE grants SET idempotency_key = granted_by
WHERE idempotency_key IS NULL AND granted_by LIKE 'approval:%'
  AND NOT EXISTS (SELECT 1 FROM grants k WHERE k.idempotency_key = grants.granted_by)
  AND id = (SELECT MIN(k.id) FROM grants k WHERE k.granted_by = grants.granted_by);
