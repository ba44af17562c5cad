//! The effective outcome (seed policy.md ch. 5): the table cell, lifted from
//! approval_required to allowed by an active grant whose pattern matches the target.
//! A grant can never lift `denied`.

use crate::grant::Candidate;
use crate::matcher::Matcher;
use crate::table::{Outcome, table_outcome};
use metnos_core::capability::{Capability, DefaultApproval, TargetKind};
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_core::target::Target;

/// What decided an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    Table,
    Grant,
}

/// An effective outcome and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub outcome: Outcome,
    pub table_outcome: Outcome,
    pub decided_by: Decider,
    /// The grant that lifted approval_required, when `decided_by` is `Grant`.
    pub grant_id: Option<i64>,
    pub reason: String,
}

/// Who and what a check is about, when grants may be consulted.
#[derive(Debug, Clone)]
pub struct Scope<'a> {
    pub principal: &'a Principal,
    pub target: &'a Target,
    /// The target as the caller wrote it, for the reason.
    pub raw_target: &'a str,
}

/// Whether grants are worth looking up for this check: only when the table says
/// approval_required, the capability is grantable, and principal and target are given.
pub fn needs_grants(
    level: AutonomyLevel,
    capability: Capability,
    scope: Option<&Scope<'_>>,
) -> bool {
    table_outcome(level, capability) == Outcome::ApprovalRequired
        && capability.spec().grantable()
        && scope.is_some()
}

/// Decides, given the grants the store found for the scope (possibly none). Pure: the
/// candidates are filtered again here (revoked, expired, not matching), so the invariant
/// "a grant never lifts denied" does not depend on what the store returned.
pub fn decide(
    level: AutonomyLevel,
    capability: Capability,
    scope: Option<&Scope<'_>>,
    candidates: &[Candidate],
    now_ms: i64,
    matcher: &Matcher,
) -> Decision {
    let table = table_outcome(level, capability);
    let cell = format!("table: {level} x {capability} = {table}");
    let by_table = |reason: String| Decision {
        outcome: table,
        table_outcome: table,
        decided_by: Decider::Table,
        grant_id: None,
        reason,
    };
    match table {
        Outcome::Allowed => return by_table(cell),
        Outcome::Denied => return by_table(format!("{cell}; a grant never lifts denied")),
        Outcome::ApprovalRequired => {}
    }
    let spec = capability.spec();
    if spec.default_approval == DefaultApproval::Always {
        return by_table(format!(
            "{cell}; {capability} is asked every time and never granted"
        ));
    }
    if spec.target_kind == TargetKind::None {
        return by_table(format!("{cell}; {capability} has no target to grant"));
    }
    let Some(scope) = scope else {
        return by_table(format!(
            "{cell}; no principal or target given, so no grant was consulted"
        ));
    };
    let found = candidates.iter().find(|c| {
        c.revoked_at.is_none()
            && c.expires_at.is_none_or(|e| e > now_ms)
            && matcher.matches(spec.target_kind, &c.pattern, scope.target)
    });
    match found {
        Some(grant) => Decision {
            outcome: Outcome::Allowed,
            table_outcome: table,
            decided_by: Decider::Grant,
            grant_id: Some(grant.id),
            reason: format!(
                "grant {} ({capability} on {}) lifts {cell} to allowed",
                grant.id, grant.pattern
            ),
        },
        None => by_table(format!(
            "{cell}; no active grant of {}/{} matches {}",
            scope.principal.channel(),
            scope.principal.sender_id(),
            scope.raw_target
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    const HOME: &str = "/home/roberto";

    fn roberto() -> Principal {
        Principal::new("telegram", "roberto").unwrap()
    }

    fn candidate(id: i64, pattern: &str) -> Candidate {
        Candidate {
            id,
            pattern: pattern.to_owned(),
            expires_at: None,
            revoked_at: None,
        }
    }

    fn check(
        level: AutonomyLevel,
        cap: Capability,
        target: &str,
        candidates: &[Candidate],
    ) -> Decision {
        let kind = cap.spec().target_kind;
        let principal = roberto();
        let parsed = Target::parse(kind, target, Path::new(HOME)).unwrap();
        let scope = Scope {
            principal: &principal,
            target: &parsed,
            raw_target: target,
        };
        decide(
            level,
            cap,
            Some(&scope),
            candidates,
            1_000,
            &Matcher::default(),
        )
    }

    /// Seed case 8: effective_outcome_grant_alza_a_allowed (and the seed's example 1).
    #[test]
    fn an_active_matching_grant_lifts_approval_required_to_allowed() {
        let grants = [candidate(7, "/home/roberto/Documents/invoices-2026/*")];
        let d = check(
            AutonomyLevel::Supervised,
            Capability::FsWrite,
            "~/Documents/invoices-2026/04-Acme.pdf",
            &grants,
        );
        assert_eq!(d.outcome, Outcome::Allowed);
        assert_eq!(d.table_outcome, Outcome::ApprovalRequired);
        assert_eq!(d.decided_by, Decider::Grant);
        assert_eq!(d.grant_id, Some(7));
        assert!(
            d.reason
                .starts_with("grant 7 (fs:write on /home/roberto/Documents/invoices-2026/*)"),
            "{}",
            d.reason
        );
    }

    /// Seed case 9 [security]: effective_outcome_denied_non_e_alzato_da_grant (example 2).
    #[test]
    fn a_grant_never_lifts_denied() {
        let grants = [candidate(7, "/home/roberto/Documents/invoices-2026/*")];
        let d = check(
            AutonomyLevel::ReadOnly,
            Capability::FsWrite,
            "~/Documents/invoices-2026/04-Acme.pdf",
            &grants,
        );
        assert_eq!(d.outcome, Outcome::Denied);
        assert_eq!(d.decided_by, Decider::Table);
        assert_eq!(d.grant_id, None);
        assert!(
            d.reason.contains("a grant never lifts denied"),
            "{}",
            d.reason
        );
    }

    /// The seed's example 3: mail:send at Full stays approval_required.
    #[test]
    fn mail_send_at_full_is_asked_every_time() {
        let d = check(
            AutonomyLevel::Full,
            Capability::MailSend,
            "x@example.com",
            &[candidate(1, "x@example.com")],
        );
        assert_eq!(d.outcome, Outcome::ApprovalRequired);
        assert!(d.reason.contains("asked every time"), "{}", d.reason);
    }

    #[test]
    fn expired_revoked_and_non_matching_grants_are_ignored() {
        let target = "~/Documents/invoices-2026/04.pdf";
        let pattern = "/home/roberto/Documents/invoices-2026/*";
        let expired = Candidate {
            expires_at: Some(1_000),
            ..candidate(1, pattern)
        };
        let revoked = Candidate {
            revoked_at: Some(5),
            ..candidate(2, pattern)
        };
        let elsewhere = candidate(3, "/home/roberto/Pictures/*");
        let d = check(
            AutonomyLevel::Supervised,
            Capability::FsWrite,
            target,
            &[expired, revoked, elsewhere],
        );
        assert_eq!(d.outcome, Outcome::ApprovalRequired);
        assert!(
            d.reason
                .contains("no active grant of telegram/roberto matches"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn without_a_scope_only_the_table_decides() {
        let d = decide(
            AutonomyLevel::Supervised,
            Capability::FsWrite,
            None,
            &[],
            0,
            &Matcher::default(),
        );
        assert_eq!(d.outcome, Outcome::ApprovalRequired);
        assert!(
            d.reason.contains("no principal or target given"),
            "{}",
            d.reason
        );
        let d = decide(
            AutonomyLevel::Full,
            Capability::FsRead,
            None,
            &[],
            0,
            &Matcher::default(),
        );
        assert_eq!(
            (d.outcome, d.decided_by),
            (Outcome::Allowed, Decider::Table)
        );
        assert_eq!(d.reason, "table: Full x fs:read = allowed");
    }

    fn any_level() -> impl Strategy<Value = AutonomyLevel> {
        prop::sample::select(AutonomyLevel::ALL.to_vec())
    }

    fn any_capability() -> impl Strategy<Value = Capability> {
        prop::sample::select(Capability::all().collect::<Vec<_>>())
    }

    fn any_candidate() -> impl Strategy<Value = Candidate> {
        // Patterns that match the target, that do not, and odd ones; any state.
        let pattern = prop::sample::select(vec![
            "/home/roberto/t".to_owned(),
            "/home/roberto/*".to_owned(),
            "/**".to_owned(),
            "t".to_owned(),
            "*.t".to_owned(),
            "/elsewhere/*".to_owned(),
            "[".to_owned(),
        ]);
        (
            1i64..1_000,
            pattern,
            prop::option::of(0i64..2_000),
            prop::option::of(0i64..2_000),
        )
            .prop_map(|(id, pattern, expires_at, revoked_at)| Candidate {
                id,
                pattern,
                expires_at,
                revoked_at,
            })
    }

    proptest! {
        /// For every level x capability x any set of grants, a denied cell stays denied,
        /// and only approval_required can become allowed.
        #[test]
        fn denied_stays_denied_whatever_the_grants(
            level in any_level(),
            cap in any_capability(),
            candidates in prop::collection::vec(any_candidate(), 0..12),
            now in 0i64..2_000,
        ) {
            // Distinct ids, so "the grant that decided" is unambiguous.
            let candidates: Vec<Candidate> = candidates
                .into_iter()
                .enumerate()
                .map(|(i, c)| Candidate { id: i as i64 + 1, ..c })
                .collect();
            let kind = cap.spec().target_kind;
            let raw = match kind {
                TargetKind::PathGlob => "~/t",
                TargetKind::Host => "t",
                _ => "t",
            };
            let principal = roberto();
            let target = Target::parse(
                if kind == TargetKind::None { TargetKind::Exact } else { kind },
                raw,
                Path::new(HOME),
            ).unwrap();
            let scope = Scope { principal: &principal, target: &target, raw_target: raw };
            let d = decide(level, cap, Some(&scope), &candidates, now, &Matcher::default());
            let table = table_outcome(level, cap);
            prop_assert_eq!(d.table_outcome, table);
            match table {
                Outcome::Denied => prop_assert_eq!(d.outcome, Outcome::Denied),
                Outcome::Allowed => prop_assert_eq!(d.outcome, Outcome::Allowed),
                Outcome::ApprovalRequired => {
                    prop_assert!(d.outcome != Outcome::Denied);
                    if let Some(id) = d.grant_id {
                        let grant = candidates.iter().find(|c| c.id == id).unwrap();
                        prop_assert!(grant.revoked_at.is_none());
                        prop_assert!(grant.expires_at.is_none_or(|e| e > now));
                    }
                }
            }
        }
    }
}
