//! The turn's pure rules (seed agent_runtime.md ch. 2, 5, 10): caps, the duplicate-read
//! guard, the strictest policy answer over an executor's capabilities, which mode and tier a
//! turn starts in and when a hybrid turn escalates. No IO: the engine and the pipeline ask
//! these, tests pin them down.

use metnos_core::capability::{Capability, TargetKind};
use metnos_core::names::Builtin;
use metnos_llm::Tier;

use crate::turn::endings::Ending;
use crate::turn::{Finish, Mode};

/// Executors whose repeated use on the same target is intercepted (seed ch. 10).
pub const DUPLICATE_GUARDED: &[&str] = &[
    Builtin::FsRead.name(),
    Builtin::FsWrite.name(),
    Builtin::WebFetch.name(),
];

/// Whether `executor` on `target` is watched for repeats.
pub fn is_duplicate_guarded(executor: &str, target: &str) -> bool {
    !target.is_empty() && DUPLICATE_GUARDED.contains(&executor)
}

/// The step that already did `executor` on `target`, if it is a guarded repeat.
pub fn earlier_step(seen: &[(String, String, u32)], executor: &str, target: &str) -> Option<u32> {
    if !is_duplicate_guarded(executor, target) {
        return None;
    }
    seen.iter()
        .find(|(e, t, _)| e == executor && t == target)
        .map(|(_, _, step)| *step)
}

/// Step `step` would go over `cap_steps`: the turn stops (said in `language`).
pub fn over_cap_steps(
    step: u32,
    cap_steps: u32,
    language: Option<metnos_core::Language>,
) -> Option<Finish> {
    (step > cap_steps).then(|| Ending::CapSteps { cap: cap_steps }.finish(language))
}

/// `executor` was already called `calls_so_far` times, the cap: the turn stops.
pub fn over_cap_same_executor(
    executor: &str,
    calls_so_far: u32,
    cap: u32,
    language: Option<metnos_core::Language>,
) -> Option<Finish> {
    (calls_so_far >= cap).then(|| Ending::CapSameExecutor { executor, cap }.finish(language))
}

/// Policy's three answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    ApprovalRequired,
    Denied,
}

impl Outcome {
    /// How strict an answer is: denied over approval over allowed.
    pub fn strictness(self) -> u8 {
        match self {
            Outcome::Allowed => 0,
            Outcome::ApprovalRequired => 1,
            Outcome::Denied => 2,
        }
    }
}

/// The target policy is asked about for `capability` of an executor whose call targets
/// `target`; `None` when that capability is not exercised by this call: a secondary
/// capability that needs a target the call does not give (parse_local on text reads no
/// file). `several`: the executor declares more than one capability.
pub fn policy_target(capability: Capability, target: &str, several: bool) -> Option<String> {
    if capability.spec().target_kind == TargetKind::None {
        return Some(String::new());
    }
    if several && target.is_empty() {
        return None;
    }
    Some(target.to_owned())
}

/// Policy's answers over an executor's capabilities, folded: the strictest wins (the first
/// of equally strict ones), and the first capability that needs approval is the one the
/// card asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strictest {
    pub outcome: Outcome,
    pub reason: String,
    pub grant_id: Option<i64>,
    /// The first capability that needed approval.
    pub approval_capability: Option<Capability>,
    /// Whether any capability was asked.
    asked: bool,
}

impl Default for Strictest {
    /// No capability asked: allowed.
    fn default() -> Strictest {
        Strictest {
            outcome: Outcome::Allowed,
            reason: String::new(),
            grant_id: None,
            approval_capability: None,
            asked: false,
        }
    }
}

impl Strictest {
    /// Takes one capability's answer into account.
    pub fn add(
        &mut self,
        capability: Capability,
        outcome: Outcome,
        reason: String,
        grant_id: Option<i64>,
    ) {
        if outcome == Outcome::ApprovalRequired && self.approval_capability.is_none() {
            self.approval_capability = Some(capability);
        }
        // Decided by what was answered, never by the reason's text: an earlier denial
        // with an empty reason must not give way to a later, laxer answer.
        if !self.asked || outcome.strictness() > self.outcome.strictness() {
            self.asked = true;
            self.outcome = outcome;
            self.reason = reason;
            self.grant_id = grant_id;
        }
    }
}

/// The mode a turn runs in: the one asked for, else the configured one.
pub fn mode_of(requested: Option<Mode>, default: Mode) -> Mode {
    requested.unwrap_or(default)
}

/// The tier a turn starts on: online plans on the wise tier; a hybrid turn does when one
/// of its candidate executors needs a capability configured to start there.
pub fn starting_tier(mode: Mode, wise_capability_offered: bool) -> Tier {
    match mode {
        Mode::Online => Tier::Wise,
        Mode::Hybrid if wise_capability_offered => Tier::Wise,
        Mode::Local | Mode::Hybrid => Tier::Fast,
    }
}

/// Whether the LLM is offered tools: always, except for the answer after an online plan.
pub fn offers_tools(mode: Mode, planned: bool) -> bool {
    !(mode == Mode::Online && planned)
}

/// Whether a hybrid turn moves to the wise tier after `failures` failed steps
/// (`after` = 0: never).
pub fn escalates(mode: Mode, tier: Tier, failures: u32, after: u32) -> bool {
    mode == Mode::Hybrid && tier != Tier::Wise && after > 0 && failures >= after
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_guarded_read_of_the_same_target_is_a_repeat_and_other_calls_are_not() {
        let seen = vec![("fs_read".to_owned(), "/tmp/a".to_owned(), 2)];
        assert_eq!(earlier_step(&seen, "fs_read", "/tmp/a"), Some(2));
        assert_eq!(earlier_step(&seen, "fs_read", "/tmp/b"), None);
        assert_eq!(earlier_step(&seen, "fs_write", "/tmp/a"), None);
        // Unguarded executors and calls without a target are never repeats.
        let shell = vec![("shell_exec".to_owned(), "ls".to_owned(), 1)];
        assert_eq!(earlier_step(&shell, "shell_exec", "ls"), None);
        assert_eq!(earlier_step(&seen, "fs_read", ""), None);
        assert!(is_duplicate_guarded("web_fetch", "https://x"));
        assert!(!is_duplicate_guarded("web_fetch", ""));
    }

    #[test]
    fn the_caps_stop_the_turn_with_their_kind_and_a_reason() {
        use crate::turn::FinalKind;
        use metnos_core::Language::{English, Italian};
        assert_eq!(over_cap_steps(5, 5, None), None);
        let stop = over_cap_steps(6, 5, None).unwrap();
        assert_eq!(stop.kind, FinalKind::CapSteps);
        assert_eq!(
            stop.text,
            "I stopped after 5 steps without finding an answer."
        );
        let stop = over_cap_steps(6, 5, Some(Italian)).unwrap();
        assert_eq!(
            stop.text,
            "Mi sono fermato dopo 5 passi senza trovare una risposta."
        );
        assert_eq!(over_cap_same_executor("fs_read", 1, 2, None), None);
        let stop = over_cap_same_executor("fs_read", 2, 2, Some(English)).unwrap();
        assert_eq!(stop.kind, FinalKind::CapSameExecutor);
        assert!(
            stop.text.contains("I used fs_read 2 times"),
            "{}",
            stop.text
        );
    }

    #[test]
    fn policy_is_asked_about_the_target_only_where_the_capability_has_one() {
        // fs:read is a path capability: the call's target.
        assert_eq!(
            policy_target(Capability::FsRead, "/tmp/x", false).as_deref(),
            Some("/tmp/x")
        );
        // parse:local has no target kind: asked without one.
        assert_eq!(
            policy_target(Capability::ParseLocal, "/tmp/x", true).as_deref(),
            Some("")
        );
        // A secondary capability that needs a target the call does not give is skipped…
        assert_eq!(policy_target(Capability::FsRead, "", true), None);
        // …but a single capability is always asked.
        assert_eq!(
            policy_target(Capability::FsRead, "", false).as_deref(),
            Some("")
        );
        // An exact target is asked as written.
        assert_eq!(
            policy_target(Capability::MailSend, "x", false).as_deref(),
            Some("x")
        );
    }

    #[test]
    fn the_strictest_answer_wins_and_the_first_approval_capability_is_kept() {
        let mut s = Strictest::default();
        s.add(
            Capability::ParseLocal,
            Outcome::Allowed,
            "table".into(),
            None,
        );
        s.add(
            Capability::FsRead,
            Outcome::ApprovalRequired,
            "asks".into(),
            None,
        );
        s.add(
            Capability::NetworkHttp,
            Outcome::ApprovalRequired,
            "asks too".into(),
            Some(7),
        );
        assert_eq!(s.outcome, Outcome::ApprovalRequired);
        assert_eq!(s.reason, "asks");
        assert_eq!(s.approval_capability, Some(Capability::FsRead));
        s.add(Capability::FsWrite, Outcome::Denied, "no".into(), None);
        assert_eq!(s.outcome, Outcome::Denied);
        assert_eq!(s.reason, "no");
        assert_eq!(Strictest::default().outcome, Outcome::Allowed);
    }

    #[test]
    fn modes_and_tiers_start_where_the_seed_says() {
        assert_eq!(mode_of(None, Mode::Hybrid), Mode::Hybrid);
        assert_eq!(mode_of(Some(Mode::Online), Mode::Local), Mode::Online);
        assert_eq!(starting_tier(Mode::Online, false), Tier::Wise);
        assert_eq!(starting_tier(Mode::Hybrid, true), Tier::Wise);
        assert_eq!(starting_tier(Mode::Hybrid, false), Tier::Fast);
        assert_eq!(starting_tier(Mode::Local, true), Tier::Fast);
        assert!(offers_tools(Mode::Online, false));
        assert!(!offers_tools(Mode::Online, true));
        assert!(offers_tools(Mode::Local, true));
    }

    #[test]
    fn a_hybrid_turn_escalates_after_its_failures_and_only_once() {
        assert!(escalates(Mode::Hybrid, Tier::Fast, 2, 2));
        assert!(!escalates(Mode::Hybrid, Tier::Fast, 1, 2));
        assert!(!escalates(Mode::Hybrid, Tier::Wise, 5, 2), "already wise");
        assert!(!escalates(Mode::Hybrid, Tier::Fast, 9, 0), "0: never");
        assert!(!escalates(Mode::Local, Tier::Fast, 9, 1));
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop::sample::select(vec![
            Outcome::Allowed,
            Outcome::ApprovalRequired,
            Outcome::Denied,
        ])
    }

    #[test]
    fn a_denial_without_a_reason_still_wins() {
        let mut s = Strictest::default();
        s.add(Capability::FsWrite, Outcome::Denied, String::new(), None);
        s.add(
            Capability::ParseLocal,
            Outcome::Allowed,
            "table".into(),
            None,
        );
        assert_eq!(s.outcome, Outcome::Denied);
    }

    proptest! {
        /// Whatever the order of the answers and whatever their reasons (empty ones
        /// too), the result is as strict as the strictest answer.
        #[test]
        fn no_answer_is_laxer_than_the_strictest(
            answers in prop::collection::vec((outcome(), prop::bool::ANY), 1..6),
        ) {
            let mut s = Strictest::default();
            for (i, (outcome, has_reason)) in answers.iter().enumerate() {
                let reason = if *has_reason { format!("reason {i}") } else { String::new() };
                let capability = Capability::all().nth(i).unwrap();
                s.add(capability, *outcome, reason, None);
            }
            let answers: Vec<Outcome> = answers.iter().map(|(o, _)| *o).collect();
            let strictest = answers.iter().map(|o| o.strictness()).max().unwrap();
            prop_assert_eq!(s.outcome.strictness(), strictest);
            let needs_approval = answers.contains(&Outcome::ApprovalRequired);
            prop_assert_eq!(s.approval_capability.is_some(), needs_approval);
        }
    }
}
