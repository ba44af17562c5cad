//! Grants: persistent concessions "this person may do this capability on this target".

use metnos_core::capability::{Capability, DefaultApproval, TargetKind};
use metnos_core::principal::Principal;
use metnos_core::target::{Pattern, TargetError};

/// A stored grant. Times are milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub id: i64,
    pub principal: Principal,
    pub capability: String,
    /// As given, e.g. `~/Documents/invoices-2026/*`.
    pub target: String,
    /// Normalised for matching.
    pub pattern: String,
    pub granted_at: i64,
    pub expires_at: Option<i64>,
    pub granted_by: String,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

impl Grant {
    /// Neither revoked nor expired at `now_ms`.
    pub fn is_active(&self, now_ms: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now_ms)
    }
}

/// A grant to record, validated.
#[derive(Debug, Clone)]
pub struct NewGrant {
    pub principal: Principal,
    pub capability: Capability,
    pub target: String,
    pub pattern: Pattern,
    pub expires_at: Option<i64>,
    pub granted_by: String,
    /// Recorded once per key (e.g. the approval that conceded it).
    pub idempotency_key: Option<String>,
}

/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// Why a grant cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("{capability} is asked every time (default approval always): it is never granted")]
    AlwaysAsked { capability: Capability },
    #[error("{capability} has no target, so a grant for it could never be consulted")]
    NoTarget { capability: Capability },
    #[error("{capability} never needs approval, so a grant for it could never be consulted")]
    NeverAsked { capability: Capability },
    #[error("expires_at {expires} is not in the future")]
    ExpiryInPast { expires: String },
    #[error("grant target: {0}")]
    Target(#[from] TargetError),
    #[error("granted_by is longer than 1024 bytes")]
    GrantedByTooLong,
    #[error("idempotency_key is longer than {MAX_IDEMPOTENCY_KEY} bytes")]
    KeyTooLong,
}

impl NewGrant {
    /// Validates a grant request against the registry and the clock.
    pub fn new(
        principal: Principal,
        capability: Capability,
        target: &str,
        expires_at: Option<i64>,
        granted_by: &str,
        home: &std::path::Path,
        now_ms: i64,
    ) -> Result<NewGrant, GrantError> {
        let spec = capability.spec();
        match (spec.default_approval, spec.target_kind) {
            (DefaultApproval::Always, _) => return Err(GrantError::AlwaysAsked { capability }),
            (DefaultApproval::None, _) => return Err(GrantError::NeverAsked { capability }),
            (DefaultApproval::PerTarget, TargetKind::None) => {
                return Err(GrantError::NoTarget { capability });
            }
            (DefaultApproval::PerTarget, _) => {}
        }
        if let Some(expires) = expires_at
            && expires <= now_ms
        {
            return Err(GrantError::ExpiryInPast {
                expires: metnos_kit::time::rfc3339(expires),
            });
        }
        if granted_by.len() > 1024 {
            return Err(GrantError::GrantedByTooLong);
        }
        let pattern = Pattern::parse(spec.target_kind, target, home)?;
        Ok(NewGrant {
            principal,
            capability,
            target: target.to_owned(),
            pattern,
            expires_at,
            granted_by: granted_by.to_owned(),
            idempotency_key: None,
        })
    }

    /// The same grant, recorded once per `key` (empty: no key).
    pub fn keyed(mut self, key: &str) -> Result<NewGrant, GrantError> {
        if key.len() > MAX_IDEMPOTENCY_KEY {
            return Err(GrantError::KeyTooLong);
        }
        self.idempotency_key = (!key.is_empty()).then(|| key.to_owned());
        Ok(self)
    }
}

/// A grant that might decide a check, as the store returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: i64,
    pub pattern: String,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn principal() -> Principal {
        Principal::new("telegram", "roberto").unwrap()
    }

    fn new(cap: &str, target: &str, expires: Option<i64>) -> Result<NewGrant, GrantError> {
        NewGrant::new(
            principal(),
            Capability::parse(cap).unwrap(),
            target,
            expires,
            "test",
            Path::new("/home/roberto"),
            1_000,
        )
    }

    #[test]
    fn always_never_and_targetless_capabilities_are_not_grantable() {
        assert!(matches!(
            new("code:exec", "apt", None),
            Err(GrantError::AlwaysAsked { .. })
        ));
        assert!(matches!(
            new("mail:send", "a@b.c", None),
            Err(GrantError::AlwaysAsked { .. })
        ));
        // An online provider is granted by its host.
        assert!(new("llm:online", "api.anthropic.com", None).is_ok());
        assert!(matches!(
            new("time:read", "x", None),
            Err(GrantError::NeverAsked { .. })
        ));
        assert!(new("fs:write", "~/Documents/invoices-2026/*", None).is_ok());
        assert!(new("network:http", "*.example.com", None).is_ok());
    }

    #[test]
    fn an_expiry_in_the_past_is_refused() {
        let err = new("fs:read", "~/x", Some(999)).unwrap_err().to_string();
        assert!(err.contains("not in the future"), "{err}");
        assert!(new("fs:read", "~/x", Some(1_001)).is_ok());
    }

    #[test]
    fn principals_must_be_non_empty_and_printable() {
        assert!(Principal::new("", "x").is_err());
        assert!(Principal::new("telegram", "").is_err());
        assert!(Principal::new("telegram", "a\u{0}b").is_err());
        assert!(Principal::new("telegram", &"9".repeat(300)).is_err());
    }

    #[test]
    fn activity_follows_revocation_and_expiry() {
        let grant = Grant {
            id: 1,
            principal: principal(),
            capability: "fs:read".into(),
            target: "~/x".into(),
            pattern: "/home/roberto/x".into(),
            granted_at: 0,
            expires_at: Some(100),
            granted_by: String::new(),
            revoked_at: None,
            last_used_at: None,
        };
        assert!(grant.is_active(99));
        assert!(!grant.is_active(100));
        let revoked = Grant {
            revoked_at: Some(5),
            expires_at: None,
            ..grant
        };
        assert!(!revoked.is_active(0));
    }
}
