//! The telos engine (seed telos.md): whether a proposal Metnos makes on its own reaches
//! the person now, in the evening digest, at the next open slot, or never.
//!
//! Anti-paternalism first: an explicit request is never judged. For a proactive proposal,
//! in this order: no TELOS.md, an unsigned one or one that does not parse → reject; the
//! effect class on the never-list, or the intent stopped by the person → reject; inside a
//! protected window → the digest (a scheduler firing: the window's end) — all decided by
//! code, with no model call. Then the fits (the `middle` tier, [`fit`]); the alignment
//! before bother below θ → reject (journaled); a hard quota reached → the digest; the
//! alignment after the bother kernel below θ → the digest; an ad hoc proposal within
//! `[telos] window_lead_minutes` before a window → the digest (`near_window`); else publish.
//! A standing order's firing in its agreed cadence is consented: no fit, no model, and no
//! ad hoc bother paid — only its never-list, the windows and the scheduler's quota.
//!
//! Layout: [`evaluation`] is what goes in and comes out (the decision, its [`Reason`]);
//! [`loader`] finds and checks a person's TELOS.md ([`file`], signed with the [`key`]) and
//! follows the version in force; [`budget`] is the pure budget and ledger placement over [`engine`]'s arithmetic;
//! [`store`] the ledger and the rest of the state. [`TelosEngine`] here runs the stages.

pub mod budget;
pub mod engine;
pub mod evaluation;
pub mod file;
pub mod fit;
pub mod key;
pub mod loader;
pub mod store;

use std::sync::Arc;

use metnos_core::Principal;
use metnos_kit::clock::Clock;
use metnos_kit::config::Local;

pub use budget::{Budget, Placement, Settings, WINDOW_QUEUE};
pub use evaluation::{
    ASK_OWNER, Decision, Evaluation, FitTerm, Origin, ProposalIn, Reason, STANDING_ORDER,
    TelosError,
};
pub use loader::{Files, Found, Loaded, Loader, OWNER_SCOPE, scope_of};

use budget::clears;
use engine::{Signal, Source, Term};
use file::{FileError, TelosFile};
use fit::{Asked, FitEstimator};
use store::{LedgerView, TelosStore, ViewSpan, Write};

/// The command that writes `person`'s TELOS.md, which the once-only question names: the
/// owner's own (`metnos telos edit`), or theirs (`--person`), run by whoever runs Metnos.
pub fn ask_command(files: &Files, person: &Principal) -> String {
    if files.is_owner(person) {
        ASK_OWNER.to_owned()
    } else {
        format!("{ASK_OWNER} --person {person}")
    }
}

/// The telos engine.
#[derive(Debug)]
pub struct TelosEngine {
    store: TelosStore,
    settings: Settings,
    loader: Loader,
    estimator: Arc<dyn FitEstimator>,
    clock: Arc<dyn Clock>,
}

/// When a proposal is weighed: the person's day and the ledger's windows at `now_ms`.
#[derive(Debug, Clone)]
struct Moment {
    now_ms: i64,
    local: Local,
    span: ViewSpan,
}

impl TelosEngine {
    pub fn new(
        store: TelosStore,
        settings: Settings,
        files: Files,
        estimator: Arc<dyn FitEstimator>,
        clock: Arc<dyn Clock>,
    ) -> TelosEngine {
        let loader = Loader::new(store.clone(), files, Arc::clone(&clock));
        TelosEngine {
            store,
            settings,
            loader,
            estimator,
            clock,
        }
    }

    pub fn store(&self) -> &TelosStore {
        &self.store
    }

    pub fn files(&self) -> &Files {
        self.loader.files()
    }

    /// `person`'s TELOS.md: read, parsed and its signature checked (cached until the file
    /// changes). A new version seen here discards the removed telos's fitness, once.
    pub async fn load(&self, person: &Principal) -> Result<Found, TelosError> {
        self.loader.load(person).await
    }

    /// The effective weight of each telos of `file` for `person`: `(declared, effective, ema)`.
    pub async fn weights(
        &self,
        person: &Principal,
        file: &TelosFile,
    ) -> Result<Vec<(f64, f64, f64)>, TelosError> {
        let fitness = self.store.fitness(&person.to_string()).await?;
        Ok(file
            .telos
            .iter()
            .map(|t| {
                let ema = fitness.get(&t.id).copied().unwrap_or(0.0);
                (t.weight, t.weight * engine::fitness_factor(ema), ema)
            })
            .collect())
    }

    /// The proposal as received, rejected until a stage decides (the reason is the first
    /// check's: nothing is recorded before a stage sets its own).
    fn base(&self, p: &ProposalIn, now_ms: i64) -> Evaluation {
        Evaluation {
            proposal_id: p.proposal_id.clone(),
            person: p.person.to_string(),
            channel: p.channel.clone(),
            effect_class: p.effect_class.clone(),
            kind: p.kind.clone(),
            description: p.description.clone(),
            origin: p.origin,
            urgency: p.urgency,
            confidence: p.confidence,
            per_telos: Vec::new(),
            alignment_before_bother: 0.0,
            bother_sum: 0.0,
            bother_cost: 0.0,
            expected_alignment: 0.0,
            decision: Decision::Reject,
            reason: Reason::NoTelosDeclared,
            threshold_used: self.settings.theta,
            at_ms: now_ms,
            not_before_ms: None,
            telos_version: String::new(),
            ask_person: None,
        }
    }

    /// Records a decision that takes no place (unless a dry run); an id seen before answers
    /// with what was decided then.
    async fn settle(&self, e: Evaluation, dry_run: bool) -> Result<Evaluation, TelosError> {
        if !dry_run && !self.store.record(&e.record()).await? {
            return self.replayed(&e).await;
        }
        Ok(e)
    }

    /// A proposal id evaluated before: the same answer for the same proposal (a retry takes
    /// no second slot); another proposal under that id is refused.
    async fn replayed(&self, now: &Evaluation) -> Result<Evaluation, TelosError> {
        let before = self.recorded(&now.proposal_id).await?;
        let same = before.person == now.person
            && before.channel == now.channel
            && before.effect_class == now.effect_class
            && before.kind == now.kind
            && before.description == now.description
            && before.origin == now.origin;
        if !same {
            return Err(TelosError::Conflict(format!(
                "proposal id `{}` was used for another proposal",
                now.proposal_id
            )));
        }
        tracing::info!(proposal = %now.proposal_id, decision = before.decision.as_str(), "proposal evaluated before: the same answer");
        Ok(before)
    }

    async fn recorded(&self, proposal_id: &str) -> Result<Evaluation, TelosError> {
        let r = self
            .store
            .find(proposal_id)
            .await?
            .ok_or_else(|| TelosError::NotFound(format!("no proposal `{proposal_id}`")))?;
        serde_json::from_str(&r.result_json).map_err(|e| {
            TelosError::Precondition(format!("proposal `{proposal_id}` cannot be read back: {e}"))
        })
    }

    /// Rejects `e` for `reason` and records it (unless a dry run).
    async fn settle_as(
        &self,
        mut e: Evaluation,
        reason: Reason,
        dry_run: bool,
    ) -> Result<Evaluation, TelosError> {
        e.reason = reason;
        self.settle(e, dry_run).await
    }

    /// Weighs one proposal. Nothing is recorded for a dry run.
    pub async fn evaluate(&self, p: &ProposalIn, dry_run: bool) -> Result<Evaluation, TelosError> {
        let now = self.clock.now_ms();
        let mut e = self.base(p, now);
        let Some(source) = p.origin.source() else {
            // Anti-paternalism: the person asked; nothing to weigh, nothing to record.
            e.decision = Decision::Publish;
            e.reason = Reason::ExplicitRequest;
            return Ok(e);
        };
        if !dry_run && self.store.find(&p.proposal_id).await?.is_some() {
            return self.replayed(&e).await;
        }
        // A standing order's firing in its cadence was consented to: it needs no telos to be
        // weighed against (and a missing or broken one does not silence it).
        let consented = source == Source::SchedulerInCadence
            && p.kind == STANDING_ORDER
            && !p.schedule_id.is_empty()
            && p.effect_class == format!("{STANDING_ORDER}:{}", p.schedule_id);
        let loaded = match self.in_force(p, consented, &mut e, dry_run).await? {
            Ok(loaded) => loaded,
            Err(reason) => return self.settle_as(e, reason, dry_run).await,
        };
        if let Some(loaded) = &loaded {
            e.telos_version = loaded.file.version.clone();
        }
        if let Some(reason) = self.refused_by_person(p, now, &mut e).await? {
            return self.settle_as(e, reason, dry_run).await;
        }
        let at = self.moment(&p.person, now);
        if at.local.protected(now) {
            return self.in_window(e, p, source, &at, dry_run).await;
        }
        let budget = Budget {
            bother: self.settings.bother,
            theta: self.settings.theta,
            quotas: self.settings.config.quotas.clone(),
            source,
            cli: p.channel == metnos_core::principal::TERMINAL,
            now_ms: now,
            consented,
            // Close to a window: the digest, not an interruption that runs into it.
            near_window: source == Source::Adhoc && at.local.near_window(now),
        };
        if consented {
            // A firing of a standing order the person approved with its cadence (telos
            // ch. 6): the consent covers the cadence, so no fit is weighed, no model is
            // called and no ad hoc bother is paid; only the scheduler's own quota applies.
            e.alignment_before_bother = 1.0;
            let decide = move |view: &LedgerView, e: &mut Evaluation| budget.decide(view, e);
            return self.place(e, p, source, at.span, dry_run, decide).await;
        }
        if budget.cli && source == Source::Adhoc && self.session_spent(p, at.span, &e).await? {
            e.decision = Decision::DeferToSlot;
            e.reason = Reason::Quota;
            return Ok(e);
        }
        let Some(loaded) = loaded else {
            return self.settle_as(e, Reason::NoTelosDeclared, dry_run).await;
        };
        if let Err(reason) = self.weigh(p, &loaded.file, &mut e).await? {
            return self.settle_as(e, reason, dry_run).await;
        }
        if !(clears(e.alignment_before_bother, self.settings.theta)
            && e.alignment_before_bother > 0.0)
        {
            e.expected_alignment = e.alignment_before_bother;
            return self.settle_as(e, Reason::BelowThreshold, dry_run).await;
        }
        let decide = move |view: &LedgerView, e: &mut Evaluation| budget.decide(view, e);
        self.place(e, p, source, at.span, dry_run, decide).await
    }

    /// The person's telos in force: `Ok(None)` for a consented firing without one, `Err`
    /// with the reason to reject otherwise (the first time without one asks the person to
    /// write one, unless a dry run).
    async fn in_force(
        &self,
        p: &ProposalIn,
        consented: bool,
        e: &mut Evaluation,
        dry_run: bool,
    ) -> Result<Result<Option<Loaded>, Reason>, TelosError> {
        Ok(match self.load(&p.person).await? {
            Found::Good(loaded) => Ok(Some(loaded)),
            Found::None | Found::Bad(..) if consented => Ok(None),
            Found::None => {
                if !dry_run && self.store.ask_once(&p.person.to_string(), e.at_ms).await? {
                    e.ask_person = Some(ask_command(self.files(), &p.person));
                }
                Err(Reason::NoTelosDeclared)
            }
            Found::Bad(error, path) => {
                // The kind and the line, never the file's words.
                let (kind, line) = match &error {
                    FileError::Malformed { line, .. } => ("malformed", *line),
                    FileError::SignatureInvalid(_) => ("signature_invalid", 0),
                    FileError::Unreadable(_) => ("unreadable", 0),
                };
                tracing::warn!(person = %p.person, path = %path.display(), kind, line, "TELOS.md not in force");
                Err(match error {
                    FileError::Malformed { .. } | FileError::Unreadable(_) => {
                        Reason::TelosFileMalformed
                    }
                    FileError::SignatureInvalid(_) => Reason::TelosSignatureInvalid,
                })
            }
        })
    }

    /// What the person said before: the effect class never again, or the intent stopped
    /// (until when, in `e`).
    async fn refused_by_person(
        &self,
        p: &ProposalIn,
        now: i64,
        e: &mut Evaluation,
    ) -> Result<Option<Reason>, TelosError> {
        let person = p.person.to_string();
        if self.store.is_never(&person, &p.effect_class).await? {
            return Ok(Some(Reason::NeverList));
        }
        if let Some(until) = self.store.stopped(&person, &p.kind, now).await? {
            e.not_before_ms = Some(until);
            return Ok(Some(Reason::StoppedByPerson));
        }
        Ok(None)
    }

    fn moment(&self, person: &Principal, now: i64) -> Moment {
        let key = person.to_string();
        let local = self.settings.config.local_for(&key);
        let digest_minute = self.settings.config.digest_minute_for(&key);
        let span = ViewSpan {
            now_ms: now,
            // exp(−12) ≈ 6e-6: older publications weigh nothing that matters.
            bother_since_ms: now - (self.settings.bother.tau_minutes * 12.0 * 60_000.0) as i64,
            day_start_ms: local.day_start(now),
            digest_since_ms: local.last_digest(now, digest_minute),
        };
        Moment {
            now_ms: now,
            local,
            span,
        }
    }

    /// Inside a protected window, decided by code before any model: a firing waits for the
    /// window's end, a proposal for the digest.
    async fn in_window(
        &self,
        mut e: Evaluation,
        p: &ProposalIn,
        source: Source,
        at: &Moment,
        dry_run: bool,
    ) -> Result<Evaluation, TelosError> {
        e.reason = Reason::ProtectedWindow;
        if source.is_scheduler() {
            e.decision = Decision::DeferToSlot;
            e.not_before_ms = Some(at.local.next_open(at.now_ms));
            return self.settle(e, dry_run).await;
        }
        let decide = |_: &LedgerView, e: &mut Evaluation| {
            e.decision = Decision::DeferToDigest;
            e.reason = Reason::ProtectedWindow;
        };
        self.place(e, p, source, at.span, dry_run, decide).await
    }

    /// Whether the terminal's session has had its ad hoc proposals already: decided by
    /// code, before any model (the place's own check stays the one that holds under races).
    async fn session_spent(
        &self,
        p: &ProposalIn,
        span: ViewSpan,
        e: &Evaluation,
    ) -> Result<bool, TelosError> {
        let mut spent = false;
        let limit = self.settings.config.quotas.cli_adhoc_per_session;
        let person = p.person.to_string();
        self.store
            .decide(&person, &p.channel, &p.session_id, span, true, |view| {
                spent = view.adhoc_this_session >= limit;
                Write {
                    record: e.record(),
                    place: None,
                    keep: false,
                }
            })
            .await?;
        Ok(spent)
    }

    /// The fits of `file`'s telos (the model, in its own context) and the alignment before
    /// bother they make, in `e`; `Err(reason)`: the estimate failed or timed out.
    async fn weigh(
        &self,
        p: &ProposalIn,
        file: &TelosFile,
        e: &mut Evaluation,
    ) -> Result<Result<(), Reason>, TelosError> {
        let asked = Asked {
            kind: &p.kind,
            effect_class: &p.effect_class,
            description: &p.description,
            person: &p.person,
            level: p.level,
        };
        let estimate = self.estimator.estimate(&asked, &file.telos);
        let estimate =
            match tokio::time::timeout(self.settings.config.fit_timeout(), estimate).await {
                Ok(Ok(estimate)) => estimate,
                Ok(Err(why)) => {
                    tracing::warn!(proposal = %p.proposal_id, why = %why, "fit estimate failed");
                    return Ok(Err(Reason::FitEstimationFailed));
                }
                Err(_) => {
                    tracing::warn!(proposal = %p.proposal_id, "fit estimate timed out");
                    return Ok(Err(Reason::FitEstimationFailed));
                }
            };
        let fits = estimate.fits;
        // How sure the estimator is of its fits, on top of how sure the proposer was.
        e.confidence = p.confidence * estimate.confidence;
        let weights = self.weights(&p.person, file).await?;
        let terms: Vec<Term> = file
            .telos
            .iter()
            .zip(&fits)
            .zip(&weights)
            .map(|((t, f), (_, effective, _))| Term {
                fit: f.fit,
                threshold: t.activation_threshold,
                weight_effective: *effective,
            })
            .collect();
        e.per_telos = fits
            .iter()
            .zip(&terms)
            .map(|(f, term)| FitTerm {
                telos_id: f.telos_id.clone(),
                fit: f.fit,
                why: f.why.clone(),
                activation_threshold: term.threshold,
                weight_effective: term.weight_effective,
                contribution: term.contribution(),
            })
            .collect();
        e.alignment_before_bother = engine::alignment(e.urgency, e.confidence, &terms);
        Ok(Ok(()))
    }

    /// Decides inside the ledger's transaction (`decide` sets the decision from the view)
    /// and takes the place it needs: a publication under its quota, or a digest item (a
    /// full digest rejects with `digest_full`).
    async fn place(
        &self,
        mut e: Evaluation,
        p: &ProposalIn,
        source: Source,
        span: ViewSpan,
        dry_run: bool,
        decide: impl Fn(&LedgerView, &mut Evaluation) + Send,
    ) -> Result<Evaluation, TelosError> {
        let cli = p.channel == metnos_core::principal::TERMINAL;
        let session = if cli { p.session_id.as_str() } else { "" };
        let placement = Placement {
            source,
            cli,
            session,
            quotas: &self.settings.config.quotas,
            now_ms: span.now_ms,
        };
        // Twice at most: a quota taken between the read and the insert is seen the second
        // time (it cannot happen under the transaction's lock; the condition stays).
        for _ in 0..2 {
            let mut chosen = e.clone();
            let outcome = self
                .store
                .decide(&e.person, &p.channel, session, span, dry_run, |view| {
                    decide(view, &mut chosen);
                    placement.write(view, &mut chosen)
                })
                .await?;
            match outcome {
                None => return self.replayed(&e).await,
                Some((_, true)) => {
                    tracing::info!(
                        proposal = %chosen.proposal_id,
                        decision = chosen.decision.as_str(),
                        reason = %chosen.reason,
                        expected_alignment = chosen.expected_alignment,
                        before_bother = chosen.alignment_before_bother,
                        bother_cost = chosen.bother_cost,
                        telos = ?chosen.per_telos.iter().map(|t| t.telos_id.as_str()).collect::<Vec<_>>(),
                        "proposal decided"
                    );
                    return Ok(chosen);
                }
                Some((_, false)) => continue,
            }
        }
        e.reason = Reason::Quota;
        if cli {
            e.decision = Decision::DeferToSlot;
            if source == Source::Adhoc {
                return Ok(e);
            }
            return self.settle(e, dry_run).await;
        }
        e.decision = Decision::DeferToDigest;
        self.settle(e, dry_run).await
    }

    /// The person's answer to a proposal.
    pub async fn feedback(
        &self,
        proposal_id: &str,
        signal: Signal,
        by: &Principal,
    ) -> Result<(Vec<(file::Telos, f64, f64, f64)>, bool), TelosError> {
        let r = self
            .store
            .find(proposal_id)
            .await?
            .ok_or_else(|| TelosError::NotFound(format!("no proposal `{proposal_id}`")))?;
        if r.person != by.to_string() {
            return Err(TelosError::Denied(format!(
                "proposal `{proposal_id}` was not made to {by}"
            )));
        }
        let telos: Vec<String> = if signal == Signal::Stop {
            vec![file::NON_RETREAT.to_owned()]
        } else {
            r.contributors.clone()
        };
        let now = self.clock.now_ms();
        let answer = signal.is_answer().then_some(signal.as_str());
        if !self
            .store
            .answer(
                proposal_id,
                answer,
                &r.person,
                &telos,
                store::Step {
                    alpha: engine::ALPHA,
                    signal: signal.strength(),
                    now_ms: now,
                },
            )
            .await?
        {
            return Err(TelosError::Precondition(format!(
                "proposal `{proposal_id}` was answered already"
            )));
        }
        let never = signal == Signal::NeverAgain;
        if never {
            self.store
                .add_never(&r.person, &r.effect_class, proposal_id, now)
                .await?;
        }
        tracing::info!(proposal = %proposal_id, signal = signal.as_str(), telos = ?telos, never_listed = never, "feedback");
        let mut updated = Vec::new();
        if let Found::Good(loaded) = self.load(by).await? {
            let weights = self.weights(by, &loaded.file).await?;
            for (t, (declared, effective, ema)) in loaded.file.telos.iter().zip(weights) {
                if telos.contains(&t.id) {
                    updated.push((t.clone(), declared, effective, ema));
                }
            }
        }
        Ok((updated, never))
    }

    /// A clear stop of a non-retreat attempt (`attempt_id`, when the planner named it):
    /// −0.7 on the non-retreat telos, and `intent` not retried for 24 hours. Returns until
    /// when.
    pub async fn stopped(
        &self,
        by: &Principal,
        intent: &str,
        attempt_id: &str,
    ) -> Result<i64, TelosError> {
        let now = self.clock.now_ms();
        let until = now + 24 * 3_600_000;
        let person = by.to_string();
        self.store
            .nudge(
                &person,
                file::NON_RETREAT,
                store::Step {
                    alpha: engine::ALPHA,
                    signal: Signal::Stop.strength(),
                    now_ms: now,
                },
            )
            .await?;
        if !intent.is_empty() {
            self.store.stop(&person, intent, until).await?;
        }
        tracing::info!(person = %by, attempt = attempt_id, intent, "stop of a non-retreat attempt recorded");
        Ok(until)
    }

    /// The rejected journal, or its borderline part.
    pub async fn journal(
        &self,
        person: Option<&Principal>,
        since_ms: Option<i64>,
        limit: u32,
        borderline: u32,
    ) -> Result<Vec<Evaluation>, TelosError> {
        let now = self.clock.now_ms();
        let (since, limit) = if borderline > 0 {
            (since_ms.unwrap_or(now - 7 * 24 * 3_600_000), borderline)
        } else {
            (since_ms.unwrap_or(0), limit)
        };
        let person = person.map(ToString::to_string);
        let rows = self
            .store
            .journal(person.as_deref(), since, limit, borderline > 0)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(&r.result_json).ok())
            .collect())
    }
}
