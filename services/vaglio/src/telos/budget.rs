//! The budget of a weighed proposal (seed ch. 6), pure: its bother cost and quota decide
//! publish or the digest ([`Budget`]), and the decision takes its place in the ledger
//! ([`Placement`]). The ledger view they read comes from the store's transaction.

use metnos_kit::config::{TelosConfig, TelosQuotas};

use super::engine::{Bother, Source};
use super::store::{LedgerEntry, LedgerView, Quota, Write};
use super::{Decision, Evaluation, Reason};

/// Whether `score` reaches `theta`: a NaN or an infinity never does.
pub(super) fn clears(score: f64, theta: f64) -> bool {
    score.is_finite() && score >= theta
}

/// The engine's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub theta: f64,
    pub bother: Bother,
    pub config: TelosConfig,
}

impl Settings {
    pub fn from_config(config: &TelosConfig) -> Settings {
        Settings {
            theta: config.theta,
            bother: Bother {
                tau_minutes: config.bother_tau_minutes,
                beta: config.bother_beta,
                gamma: config.bother_gamma,
            },
            config: config.clone(),
        }
    }
}

/// Proposals a protected window defers unjudged, per person and digest, at most (the
/// digest's own ten places are for judged ones).
pub const WINDOW_QUEUE: u32 = 100;

/// Scheduler results one digest holds, at most (seed ch. 6: "1 digest, unlimited"; a
/// bound all the same, and the planner's digest counts what is over it). They never take
/// the ten places of ad hoc proposals.
pub const SCHEDULE_QUEUE: u32 = 100;

/// The budget decision of a weighed proposal (seed ch. 6): its bother cost, its quota, and
/// publish or the digest. Pure: the ledger view comes from the store's transaction.
#[derive(Debug, Clone)]
pub struct Budget {
    pub bother: Bother,
    pub theta: f64,
    pub quotas: metnos_kit::config::TelosQuotas,
    pub source: Source,
    /// The CLI's quota is per session.
    pub cli: bool,
    pub now_ms: i64,
    /// A standing order's firing in its agreed cadence: the ad hoc bother is not paid.
    pub consented: bool,
    /// An ad hoc proposal within the lead before a protected window: the digest, not the
    /// person, however well it scores.
    pub near_window: bool,
}

impl Budget {
    /// Sets `e`'s bother terms, expected alignment and decision from `view`.
    pub fn decide(&self, view: &LedgerView, e: &mut Evaluation) {
        e.bother_sum = self
            .bother
            .sum(self.now_ms, view.publications.iter().copied());
        // A firing in its agreed cadence was consented to with its cadence (seed ch. 6:
        // "the ad-hoc bother budget does not apply"): the sum is shown, nothing is paid.
        e.bother_cost = if self.consented {
            0.0
        } else {
            self.bother.cost(e.bother_sum)
        };
        e.expected_alignment = e.alignment_before_bother - e.bother_cost;
        let q = &self.quotas;
        let over_quota = match self.source {
            Source::Adhoc if self.cli => view.adhoc_this_session >= q.cli_adhoc_per_session,
            Source::Adhoc => {
                view.adhoc_last_hour >= q.adhoc_per_hour || view.adhoc_today >= q.adhoc_per_day
            }
            _ => view.scheduler_today >= q.scheduler_per_day,
        };
        (e.decision, e.reason) = if over_quota {
            (Decision::DeferToDigest, Reason::Quota)
        } else if !clears(e.expected_alignment, self.theta) {
            (Decision::DeferToDigest, Reason::Bother)
        } else if self.near_window {
            (Decision::DeferToDigest, Reason::NearWindow)
        } else {
            (Decision::Publish, Reason::Aligned)
        };
    }
}

/// Where a decided proposal goes in the ledger: a publication under its quota, a digest
/// item (a full digest rejects it, `digest_full`), or nowhere. Pure, like [`Budget`].
#[derive(Debug, Clone)]
pub struct Placement<'a> {
    pub source: Source,
    /// The terminal: no digest, and its ad hoc quota is per session.
    pub cli: bool,
    /// The CLI's session (empty elsewhere).
    pub session: &'a str,
    pub quotas: &'a TelosQuotas,
    pub now_ms: i64,
}

impl Placement<'_> {
    /// The write that records `e` as decided from `view`, with the place it takes.
    pub fn write(&self, view: &LedgerView, e: &mut Evaluation) -> Write {
        if self.cli && e.decision == Decision::DeferToDigest {
            // The terminal has no digest: its next session is its next slot, and weighs the
            // proposal again (nothing is kept).
            e.decision = Decision::DeferToSlot;
        }
        let place = match e.decision {
            Decision::Publish => Some((
                self.entry("publish", self.source.bother_weight()),
                self.publish_quota(),
            )),
            Decision::DeferToDigest => self.digest_place(view, e),
            _ => None,
        };
        Write {
            record: e.record(),
            place,
            // A proposal's deferral to the next session is weighed again then; a firing's
            // outcome is always kept (the journal).
            keep: !(self.cli
                && self.source == Source::Adhoc
                && e.decision == Decision::DeferToSlot),
        }
    }

    fn entry(&self, place: &'static str, weight: f64) -> LedgerEntry {
        LedgerEntry {
            place,
            source: self.source.as_str(),
            weight,
            session: self.session.to_owned(),
            at_ms: self.now_ms,
        }
    }

    fn publish_quota(&self) -> Quota {
        let q = self.quotas;
        match self.source {
            Source::Adhoc if self.cli => Quota::Session(q.cli_adhoc_per_session),
            Source::Adhoc => Quota::Adhoc {
                per_hour: q.adhoc_per_hour,
                per_day: q.adhoc_per_day,
            },
            _ => Quota::Scheduler(q.scheduler_per_day),
        }
    }

    /// Judged ad hoc ones fill the digest's ten places; scheduler results and those a
    /// window deferred unjudged (the planner's digest judges them) wait apart, bounded too.
    fn digest_place(&self, view: &LedgerView, e: &mut Evaluation) -> Option<(LedgerEntry, Quota)> {
        let (place, pending, limit) = if e.reason == Reason::ProtectedWindow {
            ("window", view.window_pending, WINDOW_QUEUE)
        } else if self.source.is_scheduler() {
            ("schedule", view.schedule_pending, SCHEDULE_QUEUE)
        } else {
            ("digest", view.digest_pending, self.quotas.digest_items)
        };
        if pending >= limit {
            e.decision = Decision::Reject;
            e.reason = Reason::DigestFull;
            return None;
        }
        Some((self.entry(place, 0.0), Quota::Digest(limit)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telos::Origin;

    fn weighed(before: f64) -> Evaluation {
        Evaluation {
            proposal_id: "p".into(),
            person: "telegram:42".into(),
            channel: "telegram".into(),
            effect_class: "c".into(),
            kind: "k".into(),
            description: String::new(),
            origin: Origin::Adhoc,
            urgency: 1.0,
            confidence: 1.0,
            per_telos: Vec::new(),
            alignment_before_bother: before,
            bother_sum: 0.0,
            bother_cost: 0.0,
            expected_alignment: 0.0,
            decision: Decision::Reject,
            reason: Reason::NoTelosDeclared,
            threshold_used: 0.15,
            at_ms: 0,
            not_before_ms: None,
            telos_version: String::new(),
            ask_person: None,
        }
    }

    #[test]
    fn a_number_that_is_not_one_never_publishes() {
        let budget = Budget {
            bother: Bother::default(),
            theta: 0.15,
            quotas: metnos_kit::config::TelosQuotas::default(),
            source: Source::Adhoc,
            cli: false,
            now_ms: 10 * 3_600_000,
            consented: false,
            near_window: false,
        };
        let quiet = LedgerView::default();
        for before in [f64::NAN, f64::NEG_INFINITY, 0.1] {
            let mut e = weighed(before);
            budget.decide(&quiet, &mut e);
            assert_eq!(e.decision, Decision::DeferToDigest, "{before}");
        }
        // A bother sum so large its cost overflows: infinite, not NaN, and never a publish.
        let flooded = LedgerView {
            publications: vec![(10 * 3_600_000, 1e6)],
            ..LedgerView::default()
        };
        let mut e = weighed(3.0);
        budget.decide(&flooded, &mut e);
        assert_eq!(e.decision, Decision::DeferToDigest);
        let mut e = weighed(0.5);
        budget.decide(&quiet, &mut e);
        assert_eq!(e.decision, Decision::Publish);
    }

    /// Only consent waives the ad hoc bother: an in-cadence source without it (not a
    /// standing order's own firing) pays it like any other.
    #[test]
    fn only_a_consented_firing_pays_no_bother() {
        let now = 10 * 3_600_000;
        let busy = LedgerView {
            publications: vec![(now - 60_000, 1.0), (now - 120_000, 1.0)],
            ..LedgerView::default()
        };
        let budget = |consented| Budget {
            bother: Bother::default(),
            theta: 0.15,
            quotas: TelosQuotas::default(),
            source: Source::SchedulerInCadence,
            cli: false,
            now_ms: now,
            consented,
            near_window: false,
        };
        let mut e = weighed(1.0);
        budget(true).decide(&busy, &mut e);
        assert!(e.bother_sum > 1.9 && e.bother_cost == 0.0, "{e:?}");
        assert_eq!(e.decision, Decision::Publish);
        let mut e = weighed(1.0);
        budget(false).decide(&busy, &mut e);
        assert!(e.bother_cost > 1.0, "{e:?}");
        assert_eq!(
            (e.decision, e.reason),
            (Decision::DeferToDigest, Reason::Bother)
        );
    }

    #[test]
    fn a_full_digest_rejects_and_the_terminal_has_none() {
        let quotas = TelosQuotas::default();
        let placement = Placement {
            source: Source::Adhoc,
            cli: false,
            session: "",
            quotas: &quotas,
            now_ms: 0,
        };
        let full = LedgerView {
            digest_pending: quotas.digest_items,
            ..LedgerView::default()
        };
        let mut e = weighed(0.5);
        e.decision = Decision::DeferToDigest;
        e.reason = Reason::Bother;
        let write = placement.write(&full, &mut e);
        assert_eq!(
            (e.decision, e.reason),
            (Decision::Reject, Reason::DigestFull)
        );
        assert!(write.place.is_none() && write.keep);

        // A window's deferral waits apart from the judged ones.
        let mut e = weighed(0.5);
        e.decision = Decision::DeferToDigest;
        e.reason = Reason::ProtectedWindow;
        let write = placement.write(&full, &mut e);
        let (entry, quota) = write.place.expect("a place in the window's queue");
        assert_eq!(
            (entry.place, quota),
            ("window", Quota::Digest(WINDOW_QUEUE))
        );

        // The terminal: its next session instead of a digest, weighed again then.
        let terminal = Placement {
            cli: true,
            session: "s1",
            ..placement
        };
        let mut e = weighed(0.5);
        e.decision = Decision::DeferToDigest;
        let write = terminal.write(&LedgerView::default(), &mut e);
        assert_eq!(e.decision, Decision::DeferToSlot);
        assert!(write.place.is_none() && !write.keep);
        let mut e = weighed(0.5);
        e.decision = Decision::Publish;
        let write = terminal.write(&LedgerView::default(), &mut e);
        let (entry, quota) = write.place.expect("a publication");
        assert_eq!(entry.session, "s1");
        assert_eq!(quota, Quota::Session(quotas.cli_adhoc_per_session));
    }
}
