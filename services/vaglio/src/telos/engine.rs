//! The alignment engine's arithmetic (seed telos.md ch. 3, 4, 6, 7, with the two formulas
//! the seed lost), pure and IO-free:
//!
//! ```text
//! expected_alignment = urgency · confidence · Σ_i w_eff_i · gate(fit_i, threshold_i) − bother_cost
//! gate(f, t)         = f if f ≥ t else 0
//! S                  = Σ_j m_j · exp(−Δt_j / τ)          (the person's publications on the channel)
//! bother_cost        = β · (e^{γ·S} − 1)
//! w_eff              = w_declared · clamp(1 + 0.5 · ema, 0.5, 1.5)
//! ema               ← (1 − α) · ema + α · s,  α = 0.2
//! ```

/// The EMA's step.
pub const ALPHA: f64 = 0.2;

/// `f` when it clears the threshold `t`, else 0.
pub fn gate(fit: f64, threshold: f64) -> f64 {
    if fit >= threshold { fit } else { 0.0 }
}

/// One telos as the composition sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Term {
    pub fit: f64,
    pub threshold: f64,
    pub weight_effective: f64,
}

impl Term {
    /// What it adds before urgency and confidence.
    pub fn contribution(&self) -> f64 {
        self.weight_effective * gate(self.fit, self.threshold)
    }
}

/// `urgency · confidence · Σ w_eff · gate(fit, threshold)`: the alignment before bother.
pub fn alignment(urgency: f64, confidence: f64, terms: &[Term]) -> f64 {
    urgency * confidence * terms.iter().map(Term::contribution).sum::<f64>()
}

/// The bother kernel's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bother {
    pub tau_minutes: f64,
    pub beta: f64,
    pub gamma: f64,
}

impl Default for Bother {
    fn default() -> Self {
        Bother {
            tau_minutes: 120.0,
            beta: 0.02,
            gamma: 2.75,
        }
    }
}

impl Bother {
    /// `k(Δt) = exp(−Δt/τ)`; a publication "in the future" (clock skew between replicas)
    /// counts as now.
    pub fn kernel(&self, elapsed_ms: i64) -> f64 {
        let minutes = elapsed_ms.max(0) as f64 / 60_000.0;
        (-minutes / self.tau_minutes).exp()
    }

    /// `S = Σ m_j · k(now − t_j)` over `(at_ms, m)`.
    pub fn sum(&self, now_ms: i64, publications: impl IntoIterator<Item = (i64, f64)>) -> f64 {
        publications
            .into_iter()
            .map(|(at, m)| m * self.kernel(now_ms - at))
            .sum()
    }

    /// `β·(e^{γ·S} − 1)`, at most 10¹² (finite: it is stored and compared).
    pub fn cost(&self, sum: f64) -> f64 {
        (self.beta * ((self.gamma * sum).exp() - 1.0)).min(1e12)
    }
}

/// The factor on a declared weight for a fitness EMA: within [0.5, 1.5].
pub fn fitness_factor(ema: f64) -> f64 {
    (1.0 + 0.5 * ema).clamp(0.5, 1.5)
}

/// The EMA after signal `s`.
pub fn ema_step(ema: f64, signal: f64) -> f64 {
    (1.0 - ALPHA) * ema + ALPHA * signal
}

/// A person's answer to a proposal, with the seed's strengths (ch. 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Accept,
    AcceptWithEdit,
    Reject,
    NeverAgain,
    /// Only on the non-retreat telos.
    Stop,
    Silence48h,
    ViewedUndecided,
}

impl Signal {
    pub fn strength(self) -> f64 {
        match self {
            Signal::Accept => 1.0,
            Signal::AcceptWithEdit => 0.5,
            Signal::Reject => -1.0,
            Signal::NeverAgain => -2.0,
            Signal::Stop => -0.7,
            Signal::Silence48h => -0.3,
            Signal::ViewedUndecided => -0.1,
        }
    }

    /// The word stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Accept => "accept",
            Signal::AcceptWithEdit => "accept_with_edit",
            Signal::Reject => "reject",
            Signal::NeverAgain => "never_again",
            Signal::Stop => "stop",
            Signal::Silence48h => "silence_48h",
            Signal::ViewedUndecided => "viewed_undecided",
        }
    }

    /// An answer that closes the proposal (a later one is refused); "viewed, undecided"
    /// does not.
    pub fn is_answer(self) -> bool {
        self != Signal::ViewedUndecided
    }
}

/// Where a proposal comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Adhoc,
    SchedulerInCadence,
    SchedulerOffCadence,
}

impl Source {
    /// Its weight `m` in the bother sum.
    pub fn bother_weight(self) -> f64 {
        match self {
            Source::Adhoc => 1.0,
            Source::SchedulerOffCadence => 0.5,
            Source::SchedulerInCadence => 0.0,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Adhoc => "adhoc",
            Source::SchedulerInCadence => "scheduler_in_cadence",
            Source::SchedulerOffCadence => "scheduler_off_cadence",
        }
    }

    pub fn parse(text: &str) -> Option<Source> {
        Some(match text {
            "adhoc" => Source::Adhoc,
            "scheduler_in_cadence" => Source::SchedulerInCadence,
            "scheduler_off_cadence" => Source::SchedulerOffCadence,
            _ => return None,
        })
    }

    pub fn is_scheduler(self) -> bool {
        self != Source::Adhoc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_kernel_and_the_cost_match_the_issue_s_figures() {
        let b = Bother::default();
        assert!((b.kernel(60_000) - 0.9917).abs() < 1e-3, "k(1 min) ≈ 0.99");
        assert!(
            (b.kernel(8 * 3_600_000) - 0.0183).abs() < 1e-3,
            "k(8 h) ≈ 0.02"
        );
        // Three publications within the last hour cost at least 2.9.
        let now = 10 * 3_600_000;
        let s = b.sum(
            now,
            [
                (now - 3_600_000, 1.0),
                (now - 3_600_000, 1.0),
                (now - 3_600_000, 1.0),
            ],
        );
        assert!(b.cost(s) >= 2.9, "cost {} for S {s}", b.cost(s));
        // No publication costs nothing; an in-cadence firing weighs nothing.
        assert_eq!(b.cost(b.sum(now, [])), 0.0);
        assert_eq!(
            b.sum(now, [(now, Source::SchedulerInCadence.bother_weight())]),
            0.0
        );
        assert_eq!(
            b.sum(now, [(now, Source::SchedulerOffCadence.bother_weight())]),
            0.5
        );
    }

    #[test]
    fn no_proposal_can_outscore_three_publications_in_the_last_hour() {
        // The best a proposal can score: urgency 2, confidence 1, every fit 1, every
        // weight at 150 %.
        let best = alignment(
            2.0,
            1.0,
            &[Term {
                fit: 1.0,
                threshold: 0.0,
                weight_effective: 1.5,
            }],
        );
        let b = Bother::default();
        let now = 3_600_000;
        let s = b.sum(now, [(0, 1.0), (0, 1.0), (0, 1.0)]);
        assert!(best - b.cost(s) < 0.15);
    }

    #[test]
    fn a_fit_below_its_threshold_adds_nothing() {
        assert_eq!(gate(0.29, 0.30), 0.0);
        assert_eq!(gate(0.30, 0.30), 0.30);
        let terms = [
            Term {
                fit: 0.9,
                threshold: 0.95,
                weight_effective: 0.5,
            },
            Term {
                fit: 0.0,
                threshold: 0.1,
                weight_effective: 0.5,
            },
        ];
        assert_eq!(alignment(2.0, 1.0, &terms), 0.0);
    }

    fn signal() -> impl Strategy<Value = Signal> {
        prop_oneof![
            Just(Signal::Accept),
            Just(Signal::AcceptWithEdit),
            Just(Signal::Reject),
            Just(Signal::NeverAgain),
            Just(Signal::Stop),
            Just(Signal::Silence48h),
            Just(Signal::ViewedUndecided),
        ]
    }

    proptest! {
        #[test]
        fn the_effective_weight_stays_within_half_and_one_and_a_half_of_the_declared(
            declared in 0.0f64..=1.0,
            signals in proptest::collection::vec(signal(), 0..400),
        ) {
            let mut ema = 0.0;
            for s in signals {
                ema = ema_step(ema, s.strength());
                let effective = declared * fitness_factor(ema);
                prop_assert!(effective >= 0.5 * declared - 1e-12);
                prop_assert!(effective <= 1.5 * declared + 1e-12);
                prop_assert!(declared == 0.0 || effective > 0.0, "never zero");
            }
        }

        #[test]
        fn the_alignment_grows_with_any_fit_above_its_threshold(
            fits in proptest::collection::vec(0.0f64..=1.0, 1..8),
            thresholds in proptest::collection::vec(0.0f64..=1.0, 8),
            weights in proptest::collection::vec(0.01f64..=1.5, 8),
            which in 0usize..8,
            raise in 0.0f64..=1.0,
            urgency in 0.5f64..=2.0,
            confidence in 0.0f64..=1.0,
        ) {
            let terms: Vec<Term> = fits.iter().enumerate().map(|(i, f)| Term {
                fit: *f, threshold: thresholds[i], weight_effective: weights[i],
            }).collect();
            let i = which % terms.len();
            prop_assume!(terms[i].fit >= terms[i].threshold);
            let mut higher = terms.clone();
            higher[i].fit = terms[i].fit + (1.0 - terms[i].fit) * raise;
            prop_assert!(alignment(urgency, confidence, &higher) >= alignment(urgency, confidence, &terms));
        }
    }
}
