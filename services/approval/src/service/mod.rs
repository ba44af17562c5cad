//! The approval service's core: requests, decisions, cancellations, expiry, and the
//! grants a territory concession records in the policy service.

use std::path::PathBuf;
use std::sync::Arc;

use metnos_core::capability::{Capability, UnknownCapability};
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::{Principal, PrincipalError};
use metnos_core::target::Pattern;
use metnos_kit::client::TracedChannel;
use metnos_kit::clock::Clock;

use crate::extra::Extra;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use tokio::sync::broadcast;

use crate::card::{self, Card, CardError, CardRequest, Territory};
use crate::store::{Pending, PendingStore, Settled, Status};

mod create;
mod grants;
use crate::token;
use metnos_core::call::ArgsError;

/// Longest cancel reason kept, in bytes.
const MAX_REASON_BYTES: usize = 1024;

/// How long one caller holds the recording of a grant before another may try (policy's
/// idempotency key keeps a late second try from recording a twin).
const GRANT_CLAIM_MS: i64 = 30_000;

/// The most grants one revocation offer names (one card line each would not fit more).
pub const MAX_REVOKED: usize = 4;
pub use crate::describe::MAX_SHORTCUT_CHAIN;

/// How long policy is given to record a grant.
const POLICY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// What can go wrong in the approval service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("request: {0}")]
    Card(#[from] CardError),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error(transparent)]
    Principal(#[from] PrincipalError),
    #[error(transparent)]
    BadPrincipal(#[from] metnos_core::principal::BadPrincipal),
    #[error(transparent)]
    Capability(#[from] UnknownCapability),
    #[error("a rejection concedes no territory")]
    TerritoryWithReject,
    #[error("this request offers no territory: it can be approved once or rejected")]
    NoTerritoryOffered,
    #[error("{0} is unspecified")]
    Unspecified(&'static str),
    #[error("token `{0}` is malformed: a token is 32 lower-case hex digits")]
    MalformedToken(String),
    #[error("executor is empty")]
    EmptyExecutor,
    #[error("extra_json is not a JSON object")]
    BadExtra,
    #[error(
        "the call cannot be shown whole on a card: {what} is {length} characters, and a card shows at most {max}; split it into shorter calls"
    )]
    Uncardable {
        what: &'static str,
        length: usize,
        max: usize,
    },
    #[error(
        "a grant offer must name the capability and the pattern this service offers for its target, and carry only its proposal id"
    )]
    BadGrantOffer,
    #[error(
        "a revocation offer must name, by id, 1 to {MAX_REVOKED} of its person's active grants, with no capability, and carry only its proposal id"
    )]
    BadRevokeOffer,
    #[error(
        "a shortcut offer must name the wish, its first executor and one to {MAX_SHORTCUT_CHAIN} executors after it (executor names only) and how often it was wished, with no capability or target, and carry only its proposal id"
    )]
    BadShortcutOffer,
    #[error("the policy service is not reachable: {0}")]
    PolicyUnavailable(String),
    #[error(
        "only a grant offer approved for good, or a standing order's card approved once, can be accepted with an edit"
    )]
    EditNotOffered,
    /// An edited schedule that cannot be read: the schedule parser's words.
    #[error("the schedule sent cannot be used: {0}")]
    BadSchedule(String),
    #[error(
        "`{edited}` is not within `{offered}`: an edit may only name files or a folder under it (no `**`, no hidden names)"
    )]
    EditNotWithin { edited: String, offered: String },
    #[error("cancel reason is longer than {MAX_REASON_BYTES} bytes")]
    ReasonTooLong,
    #[error("unknown token")]
    NotFound,
    #[error("the request is already {0}")]
    NotPending(Settled),
    #[error("the request expired")]
    Expired,
    #[error("only the person who was asked may decide")]
    NotRequester,
    #[error("a client certificate of this installation is required")]
    Unauthenticated,
    /// The caller's identity does not speak for this person.
    #[error("{caller} may not act for {principal} (it speaks for: {channels})")]
    NotItsPeople {
        caller: String,
        principal: String,
        channels: String,
    },
    #[error(transparent)]
    TooBig(#[from] metnos_core::limits::TooBig),
    #[error("approval store: {0}")]
    Store(#[from] sqlx::Error),
}

/// How long things last, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub ttl_ms: i64,
    pub session_ms: i64,
}

/// A request to register, as the caller gives it.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub requester: Principal,
    /// The card fields; its territory is what the caller asks for and its recurrence
    /// count is ignored (the service counts).
    pub card: CardRequest,
    /// None: a proposal's request that names no capability (a revocation offer).
    pub capability: Option<Capability>,
    pub target: String,
    pub territory_target: String,
    pub executor: String,
    pub args_json: String,
    /// 0: the configured default.
    pub ttl_seconds: u32,
    pub extra_json: String,
    /// The autonomy level policy judged the call at (the card says why it asks).
    pub policy_level: Option<AutonomyLevel>,
}

/// The decision a requester gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

/// The approval service's state.
#[derive(Debug)]
pub struct Approvals {
    store: PendingStore,
    clock: Arc<dyn Clock>,
    settings: Settings,
    /// The user's home, to check territory patterns as policy will read them.
    home: PathBuf,
    /// People's time zones, for a standing order's card.
    telos: metnos_kit::config::TelosConfig,
    policy: Option<PolicyServiceClient<TracedChannel>>,
    changes: broadcast::Sender<String>,
    /// Notifications to the other replicas in flight (PostgreSQL): a burst of changes
    /// holds at most this many connections; past it, their poll tells them.
    notifying: Arc<tokio::sync::Semaphore>,
}

/// What a request another caller changed first is now: settled, or (still pending) past
/// its expiry, which its update refused.
fn lost_race(status: Status) -> Error {
    match status.settled() {
        Some(settled) => Error::NotPending(settled),
        None => Error::Expired,
    }
}

/// At most this many notifications to the other replicas at once.
const NOTIFYING: usize = 8;

/// A path as a card shows it: under the home, `~/…`.
pub(crate) fn shown_path(path: &str, home: &std::path::Path) -> String {
    let home = metnos_core::path::home_text(home);
    match path.strip_prefix(&home) {
        Some(rest) if !home.is_empty() && (rest.is_empty() || rest.starts_with('/')) => {
            format!("~{rest}")
        }
        _ => path.to_owned(),
    }
}

/// The territory a card offers for the call (approval_ux ch. 5), computed here from the
/// call, never from the caller: the target's folder (`~/Documents/invoices-2026/*`) for a
/// path, the host for a URL, the target itself for an exact one. None for a capability
/// that is never granted (code:exec, mail:send: asked every time) and for a pattern policy
/// would refuse as too broad (a file directly in `/` or in the home).
pub fn territory_offer(
    capability: Option<Capability>,
    target: &str,
    home: &std::path::Path,
) -> Option<String> {
    use metnos_core::target::Target;
    let spec = capability?.spec();
    if !spec.grantable() {
        return None;
    }
    let kind = spec.target_kind;
    let pattern = match Target::parse(kind, target, home).ok()? {
        // The folder as written is literal: a name holding a glob character (`~/?*/x`)
        // would make the offer a wildcard over more than the folder. No offer then.
        Target::Path(path) => {
            let (folder, _) = path.rsplit_once('/')?;
            if folder.contains(['*', '?', '[', ']', '{', '}', '\\']) {
                return None;
            }
            format!("{}/*", shown_path(folder, home))
        }
        // Exactly the host: never `*.` anything (a URL's host may hold a `*`).
        Target::Host(host) if host.contains('*') => return None,
        Target::Host(host) => host,
        Target::Exact(value) => value,
    };
    // What the card offers is what the person reads: nothing invisible in it.
    if crate::card::shown(&pattern, usize::MAX).had_invisible {
        return None;
    }
    Pattern::parse(kind, &pattern, home).ok()?;
    Some(pattern)
}

/// The class a request belongs to, computed here from the call (never the caller's
/// text): the executor and what its target generalises to — a path's folder
/// (`fs_write:~/downloads/**`, the seed's example), a URL's host, a command's program.
/// Recurrence counts approvals per person and class, so the card shortens as the same kind
/// of request comes back, not only the very same target.
pub fn class_of(
    executor: &str,
    capability: Option<Capability>,
    target: &str,
    home: &std::path::Path,
) -> String {
    use metnos_core::capability::TargetKind;
    use metnos_core::target::Target;
    let kind = capability.map_or(TargetKind::None, |c| c.spec().target_kind);
    let generalised = match (kind, Target::parse(kind, target, home)) {
        (TargetKind::PathGlob, Ok(Target::Path(path))) => {
            let folder = path.rsplit_once('/').map_or("", |(folder, _)| folder);
            Some(format!("{}/**", shown_path(folder, home)))
        }
        (TargetKind::Host, Ok(Target::Host(host))) => Some(host),
        (TargetKind::Exact, Ok(Target::Exact(value))) => value
            .split_whitespace()
            .next()
            .map(|program| program.rsplit('/').next().unwrap_or(program).to_owned()),
        _ => None,
    };
    match generalised {
        Some(g) => format!("{executor}:{g}"),
        None => executor.to_owned(),
    }
}

impl Approvals {
    /// People's time zones (`[telos]`), for standing orders' cards.
    pub fn with_telos(mut self, telos: metnos_kit::config::TelosConfig) -> Approvals {
        self.telos = telos;
        self
    }

    pub fn new(
        store: PendingStore,
        clock: Arc<dyn Clock>,
        settings: Settings,
        home: PathBuf,
        policy: Option<PolicyServiceClient<TracedChannel>>,
    ) -> Approvals {
        let (changes, _) = broadcast::channel(1024);
        Approvals {
            store,
            clock,
            settings,
            home,
            telos: metnos_kit::config::TelosConfig::default(),
            policy,
            changes,
            notifying: Arc::new(tokio::sync::Semaphore::new(NOTIFYING)),
        }
    }

    pub fn store(&self) -> &PendingStore {
        &self.store
    }

    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Tokens whose state changed on this replica.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Tells this replica's waiters, and every other replica's through the store, that
    /// `token` changed.
    fn changed(&self, token: &str) {
        self.changed_here(token);
        if !self.store.shared() {
            return;
        }
        let Ok(permit) = Arc::clone(&self.notifying).try_acquire_owned() else {
            tracing::debug!(
                "too many notifications in flight; the other replicas' poll will tell them"
            );
            return;
        };
        let store = self.store.clone();
        let token = token.to_owned();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = store.notify(&token).await {
                tracing::debug!(error = %e, "cannot tell the other replicas; their poll will");
            }
        });
    }

    /// Tells this replica's waiters that `token` changed (a change another replica made).
    pub fn changed_here(&self, token: &str) {
        let _ = self.changes.send(token.to_owned());
    }

    /// Renders a card without storing anything. With a capability, the territory marker
    /// is shown only when approving would record a grant.
    pub fn render(
        &self,
        request: &CardRequest,
        capability: Option<Capability>,
        token: &str,
    ) -> Result<Card, Error> {
        request.validate()?;
        let mut request = request.clone();
        if capability.is_some_and(|c| !c.spec().grantable()) {
            request.territory = Territory::None;
        }
        Ok(card::render(&request, token))
    }

    /// The card of a stored request.
    pub fn card(&self, pending: &Pending) -> Card {
        let card = self.plain_card(pending);
        if pending.executor == crate::describe::GRANT_OFFER {
            // A proposal: accept (the territory flow records the grant), reject, never
            // again, and edit a folder's glob (a host or an exact value has nothing
            // narrower) — nothing else.
            let editable = pending.capability.is_some_and(|c| {
                c.spec().target_kind == metnos_core::capability::TargetKind::PathGlob
            });
            return card::proposal_buttons(
                card,
                "confirm-always",
                editable,
                &pending.token,
                pending.language,
            );
        }
        if pending.executor == crate::describe::SCHEDULE_CREATE {
            // The person may change the schedule before approving (the gateway asks for
            // it and sends it as the resolve's edited schedule).
            return card::with_edit(card, &pending.token, pending.language);
        }
        if [
            crate::describe::GRANT_REVOKE,
            crate::describe::SHORTCUT_OFFER,
        ]
        .contains(&pending.executor.as_str())
        {
            // Accept approves once: the revocation, which this service then carries out,
            // or keeping the shortcut, which the planner records. Reject, never again.
            return card::proposal_buttons(
                card,
                "approve",
                false,
                &pending.token,
                pending.language,
            );
        }
        card
    }

    fn plain_card(&self, pending: &Pending) -> Card {
        let extra = Extra::parse(&pending.extra_json);
        card::render(
            &CardRequest {
                action_verb: pending.action_verb.clone(),
                target_summary: pending.target_summary.clone(),
                capability_class: pending.capability_class.clone(),
                reversibility: pending.reversibility,
                territory: pending.territory,
                recurrence_count: pending.recurrence_count,
                language: pending.language,
                reason: plain_reason(pending, &extra),
                territory_offer: Some(pending.territory_target.clone())
                    .filter(|p| !p.is_empty() && pending.status == Status::Pending),
                had_invisible: extra.had_invisible,
            },
            &pending.token,
        )
    }

    pub async fn get(&self, token: &str) -> Result<Pending, Error> {
        check_token(token)?;
        self.store.get(token).await?.ok_or(Error::NotFound)
    }

    /// The request `token` an edit may change: still pending, `decider`'s own, of
    /// `executor`; and whether `edited` (at most `max` bytes, named `field`) holds an
    /// invisible or control character.
    async fn editable(
        &self,
        token: &str,
        decider: &Principal,
        executor: &str,
        (field, edited, max): (&'static str, &str, usize),
    ) -> Result<(Pending, bool), Error> {
        let pending = self.get(token).await?;
        if let Some(settled) = pending.status.settled() {
            return Err(Error::NotPending(settled));
        }
        if &pending.requester != decider {
            return Err(Error::NotRequester);
        }
        if pending.executor != executor {
            return Err(Error::EditNotOffered);
        }
        metnos_core::limits::bytes(field, edited, max)?;
        let invisible = edited
            .chars()
            .any(|c| c.is_control() || metnos_core::html::is_invisible(c));
        Ok((pending, invisible))
    }

    /// Accept with edit: approves a grant offer for good with `edited` instead of the
    /// pattern offered, once it is checked to lie within it (the requester's alone).
    pub async fn resolve_edited(
        &self,
        token: &str,
        edited: &str,
        decider: &Principal,
    ) -> Result<Pending, Error> {
        let (pending, invisible) = self
            .editable(
                token,
                decider,
                crate::describe::GRANT_OFFER,
                ("edited_pattern", edited, 1024),
            )
            .await?;
        if pending.territory_target.is_empty() {
            return Err(Error::EditNotOffered);
        }
        if invisible {
            return Err(Error::EditNotWithin {
                edited: "(a pattern with invisible characters)".to_owned(),
                offered: shown_path(&pending.territory_target, &self.home),
            });
        }
        let kind = pending
            .capability
            .ok_or_else(|| UnknownCapability {
                name: String::new(),
            })?
            .spec()
            .target_kind;
        let not_within = || Error::EditNotWithin {
            edited: metnos_core::limits::shown(edited),
            offered: shown_path(&pending.territory_target, &self.home),
        };
        let offered = Pattern::parse(kind, &pending.territory_target, &self.home)
            .map_err(|_| not_within())?;
        let chosen = Pattern::parse(kind, edited.trim(), &self.home).map_err(|_| not_within())?;
        if !within(&offered, &chosen) {
            return Err(not_within());
        }
        // Kept as the offer was written (`~/…` under the home), so the card says it so;
        // written with the decision, in one update.
        let chosen = shown_path(&chosen.text, &self.home);
        self.decide(
            token,
            Decision::Approve,
            Territory::Permanent,
            decider,
            Some(&chosen),
        )
        .await
    }

    /// Accept with edit on a standing order's card: approves it (just this once) with the
    /// schedule `edited` instead of the card's, once it reads as a schedule (the requester's
    /// alone). The planner sets the order up on it; its own limits (the least interval)
    /// still apply there.
    pub async fn resolve_edited_schedule(
        &self,
        token: &str,
        edited: &str,
        decider: &Principal,
    ) -> Result<Pending, Error> {
        let (_, invisible) = self
            .editable(
                token,
                decider,
                crate::describe::SCHEDULE_CREATE,
                ("edited_schedule", edited, 200),
            )
            .await?;
        if invisible {
            return Err(Error::BadSchedule(
                "it holds invisible characters".to_owned(),
            ));
        }
        let schedule = metnos_kit::schedule::Schedule::parse(edited).map_err(Error::BadSchedule)?;
        // Written with the decision, in one update (a standing order's card offers no
        // territory: the column holds the person's schedule).
        self.decide(
            token,
            Decision::Approve,
            Territory::None,
            decider,
            Some(schedule.text()),
        )
        .await
    }

    /// Applies the requester's decision: known token, still pending, not expired (the
    /// expiry is written), decider = requester, then one conditional update.
    pub async fn resolve(
        &self,
        token: &str,
        decision: Decision,
        territory: Territory,
        decider: &Principal,
    ) -> Result<Pending, Error> {
        self.decide(token, decision, territory, decider, None).await
    }

    async fn decide(
        &self,
        token: &str,
        decision: Decision,
        territory: Territory,
        decider: &Principal,
        edited: Option<&str>,
    ) -> Result<Pending, Error> {
        let pending = self.get(token).await?;
        if let Some(settled) = pending.status.settled() {
            return Err(Error::NotPending(settled));
        }
        let now = self.now();
        if pending.expires_at <= now {
            if self.store.expire(token, now).await? {
                self.changed(token);
            }
            return Err(Error::Expired);
        }
        if &pending.requester != decider {
            tracing::warn!(
                token,
                "approval decision by someone other than the requester refused"
            );
            return Err(Error::NotRequester);
        }
        // After who decides: nobody else learns what a request offers.
        if territory != Territory::None {
            if decision == Decision::Reject {
                return Err(Error::TerritoryWithReject);
            }
            if pending.territory_target.is_empty() {
                return Err(Error::NoTerritoryOffered);
            }
        }
        let status = match decision {
            Decision::Approve => Status::Approved,
            Decision::Reject => Status::Rejected,
        };
        // The decision is a span of the turn's trace (the click or the y/n arrives in a
        // trace of its own, linked to it). Names only: no target, no class.
        let span = tracing::info_span!(
            "approval.decision",
            otel.kind = "internal",
            decision = status.as_str(),
            territory = territory.as_str(),
            executor = %pending.executor,
            capability = %Capability::name_of(pending.capability),
            decider_channel = %decider.channel(),
        );
        {
            use opentelemetry::trace::TraceContextExt;
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let caller = tracing::Span::current().context();
            let _ = span.set_parent(metnos_kit::propagation::context_of(&pending.traceparent));
            let caller = caller.span().span_context().clone();
            if caller.is_valid() {
                span.add_link(caller);
            }
        }
        let decided = {
            use tracing::Instrument;
            self.store
                .decide(token, status, territory, decider, now, edited)
                .instrument(span)
                .await?
        };
        if !decided {
            // Someone else decided first, or it expired in between: say which.
            return Err(lost_race(self.get(token).await?.status));
        }
        self.changed(token);
        tracing::info!(token, decision = status.as_str(), "approval resolved");
        let mut resolved = self.get(token).await?;
        if status == Status::Approved
            && (resolved.territory != Territory::None
                || resolved.executor == crate::describe::GRANT_REVOKE)
            && let Some(id) = self.record_grant(&resolved).await
        {
            resolved.grant_id = Some(id);
        }
        Ok(resolved)
    }

    /// Withdraws a pending request, keeping the reason.
    pub async fn cancel(&self, token: &str, reason: &str) -> Result<Pending, Error> {
        if reason.len() > MAX_REASON_BYTES {
            return Err(Error::ReasonTooLong);
        }
        let pending = self.get(token).await?;
        if let Some(settled) = pending.status.settled() {
            return Err(Error::NotPending(settled));
        }
        let reason = card::sanitize(reason, 300);
        if !self.store.cancel(token, &reason, self.now()).await? {
            // Decided, cancelled or swept first: it is settled now.
            return Err(lost_race(self.get(token).await?.status));
        }
        self.changed(token);
        tracing::info!(token, "approval cancelled");
        self.get(token).await
    }

    /// Requests, newest first; only `requester`'s when given.
    pub async fn list(
        &self,
        include_resolved: bool,
        limit: u32,
        requester: Option<&Principal>,
    ) -> Result<Vec<Pending>, Error> {
        let limit = if limit == 0 { 50 } else { limit.min(1000) };
        Ok(self.store.list(include_resolved, limit, requester).await?)
    }

    /// Marks every request past its expiry as expired; returns how many.
    pub async fn sweep(&self) -> Result<u32, Error> {
        let expired = self.store.sweep(self.now()).await?;
        for token in &expired {
            self.changed(token);
        }
        if !expired.is_empty() {
            tracing::info!(count = expired.len(), "approvals expired");
        }
        Ok(u32::try_from(expired.len()).unwrap_or(u32::MAX))
    }

    /// Walks the decisions journal (`metnos audit verify`).
    pub async fn verify_decisions(&self) -> Result<metnos_kit::chain::Report, Error> {
        Ok(self.store.verify_decisions().await?)
    }

    /// Records the territory grants that could not be recorded when approved.
    pub async fn retry_grants(&self) -> Result<(), Error> {
        if self.policy.is_none() {
            return Ok(());
        }
        for pending in self.store.ungranted(50, self.now()).await? {
            self.record_grant(&pending).await;
        }
        Ok(())
    }
}

/// Whether `chosen` lies within `offered`: the offered pattern itself, or — a path glob —
/// files or a folder under the offered glob's folder, named literally down to the last
/// segment (only that one may hold wildcards), with no `**` and no hidden (dot) name that
/// the offer's wildcard would not have matched; a host: the offered one (offered `*.host`:
/// one of its subdomains); an exact value: itself.
fn within(offered: &Pattern, chosen: &Pattern) -> bool {
    use metnos_core::capability::TargetKind;
    let wild = |s: &str| s.contains(['*', '?', '[', '{', '\\']);
    match offered.kind {
        TargetKind::PathGlob => {
            if chosen.text == offered.text {
                return true;
            }
            // The offered glob's folder: what comes before its first wildcard segment.
            let folder: Vec<&str> = offered.text.split('/').take_while(|s| !wild(s)).collect();
            let folder = folder.join("/");
            let Some(rest) = chosen.text.strip_prefix(&format!("{folder}/")) else {
                return false;
            };
            let segments: Vec<&str> = rest.split('/').collect();
            !folder.is_empty()
                && !rest.contains("**")
                && segments
                    .iter()
                    .all(|s| !s.is_empty() && !s.starts_with('.'))
                && segments[..segments.len() - 1].iter().all(|s| !wild(s))
        }
        TargetKind::Host => match offered.text.strip_prefix("*.") {
            Some(domain) => {
                chosen.text == offered.text || {
                    let host = chosen.text.strip_prefix("*.").unwrap_or(&chosen.text);
                    host.ends_with(&format!(".{domain}"))
                }
            }
            None => chosen.text == offered.text,
        },
        TargetKind::Exact | TargetKind::None => chosen.text == offered.text,
    }
}

fn check_token(token: &str) -> Result<(), Error> {
    if token::is_well_formed(token) {
        Ok(())
    } else {
        Err(Error::MalformedToken(metnos_core::limits::shown(token)))
    }
}

/// The card's reason line: a write that runs code later, the world's data reaching a
/// sink, a send after a private read, else policy's level (each says why it asks).
fn plain_reason(pending: &Pending, extra: &Extra) -> Option<String> {
    let language = pending.language;
    if let Some(rule) = &extra.runs_code_later {
        Some(crate::describe::reason_runs_code_later(rule, language))
    } else if !extra.tainted.is_empty() {
        Some(crate::describe::reason_tainted(&extra.tainted, language))
    } else if !extra.read_private.is_empty() {
        Some(crate::describe::reason_read_private(
            &extra.read_private,
            language,
        ))
    } else {
        pending
            .policy_level
            .map(|level| crate::describe::reason(level, pending.capability, language))
    }
}
