//! The telos engine (seed telos.md): whether a proposal Metnos makes on its own reaches
//! the person now, in the evening digest, at the next open slot, or never.
//!
//! Anti-paternalism first: an explicit request is never judged. For a proactive proposal,
//! in this order: no TELOS.md, an unsigned one or one that does not parse → reject; the
//! effect class on the never-list, or the intent stopped by the person → reject; inside a
//! protected window → the digest (a scheduler firing: the window's end) — all decided by
//! code, with no model call. Then the fits (the `middle` tier, [`fit`]); the alignment
//! before bother below θ → reject (journaled); a hard quota reached → the digest; the
//! alignment after the bother kernel below θ → the digest; else publish.
//!
//! [`file`] is TELOS.md, [`engine`] the arithmetic, [`store`] the ledger and the rest of
//! the state.

pub mod engine;
pub mod file;
pub mod fit;
pub mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use metnos_core::Principal;
use metnos_kit::clock::Clock;
use metnos_kit::config::Local;
use metnos_kit::config::TelosConfig;
use serde::{Deserialize, Serialize};

use engine::{Bother, Signal, Source, Term};
use file::{FileError, TelosFile, TelosKey};
use fit::{Asked, FitEstimator};
use store::{LedgerEntry, LedgerView, Quota, Recorded, TelosStore, ViewSpan, Write};

/// What the engine decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Publish,
    Reject,
    DeferToDigest,
    DeferToSlot,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Publish => "publish",
            Decision::Reject => "reject",
            Decision::DeferToDigest => "defer_to_digest",
            Decision::DeferToSlot => "defer_to_slot",
        }
    }
}

/// Where a proposal comes from, explicit requests included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Adhoc,
    SchedulerInCadence,
    SchedulerOffCadence,
    ExplicitRequest,
}

impl Origin {
    fn source(self) -> Option<Source> {
        match self {
            Origin::Adhoc => Some(Source::Adhoc),
            Origin::SchedulerInCadence => Some(Source::SchedulerInCadence),
            Origin::SchedulerOffCadence => Some(Source::SchedulerOffCadence),
            Origin::ExplicitRequest => None,
        }
    }
}

/// A proposal to weigh.
#[derive(Debug, Clone)]
pub struct ProposalIn {
    pub proposal_id: String,
    pub kind: String,
    pub effect_class: String,
    pub description: String,
    pub channel: String,
    pub origin: Origin,
    pub schedule_id: String,
    pub person: Principal,
    pub session_id: String,
    pub level: Option<metnos_core::AutonomyLevel>,
    /// In [0.5, 2].
    pub urgency: f64,
    /// In [0, 1].
    pub confidence: f64,
}

/// One telos's part in a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitTerm {
    pub telos_id: String,
    pub fit: f64,
    pub why: String,
    pub activation_threshold: f64,
    pub weight_effective: f64,
    pub contribution: f64,
}

/// A decision with every term that led to it (seed ch. 10's `AlignmentResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub proposal_id: String,
    pub person: String,
    pub channel: String,
    pub effect_class: String,
    pub kind: String,
    pub description: String,
    pub origin: Origin,
    pub urgency: f64,
    pub confidence: f64,
    pub per_telos: Vec<FitTerm>,
    pub alignment_before_bother: f64,
    pub bother_sum: f64,
    pub bother_cost: f64,
    pub expected_alignment: f64,
    pub decision: Decision,
    pub reason: String,
    pub threshold_used: f64,
    pub at_ms: i64,
    pub not_before_ms: Option<i64>,
    pub telos_version: String,
    /// The message asking the person to write a TELOS.md (once per person).
    #[serde(default)]
    pub ask_person: Option<String>,
}

/// The engine's errors, as the edge maps them.
#[derive(Debug, thiserror::Error)]
pub enum TelosError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Precondition(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the telos store failed: {0}")]
    Store(#[from] sqlx::Error),
}

/// A person's telos in force.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub file: Arc<TelosFile>,
    pub path: PathBuf,
}

/// A person's TELOS.md as found on disk: none, one that does not hold, or one in force.
#[derive(Debug, Clone)]
pub enum Found {
    None,
    Bad(FileError, PathBuf),
    Good(Loaded),
}

/// Where people's files live.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<data_dir>/telos`.
    pub root: PathBuf,
    /// `~/.config/metnos/TELOS.md`, the owner's.
    pub owner_file: PathBuf,
    /// Besides every `cli` sender, who the owner is.
    pub owner_principals: Vec<String>,
    pub key_file: PathBuf,
}

/// A path component for `text`: ASCII letters, digits and `-` kept, every other byte
/// `%XX` (so `..`, `/` and NUL never reach the file system).
fn component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        // `_` joins channel and sender: escaped inside either, so no two people share a
        // folder (`a_b` + `c` and `a` + `b_c`).
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Files {
    /// From the config: `<data_dir>/telos`, `<config_dir>/TELOS.md`, `<data_dir>/keys/telos.key`.
    pub fn from_config(config: &metnos_kit::Config) -> Files {
        Files {
            root: config.data_dir.join("telos"),
            owner_file: config.config_dir.join(file::FILE_NAME),
            owner_principals: config.telos.owner_principals.clone(),
            key_file: file::key_path(&config.data_dir),
        }
    }

    /// `<data_dir>/telos/<channel>_<sender>/TELOS.md`.
    pub fn person_file(&self, person: &Principal) -> PathBuf {
        self.root.join(scope_of(person)).join(file::FILE_NAME)
    }

    /// Whether `person` is the owner (every `cli` sender, and the listed principals).
    pub fn is_owner(&self, person: &Principal) -> bool {
        person.channel == "cli" || self.owner_principals.contains(&person.to_string())
    }

    /// The file that holds `person`'s telos — their own, else (for the owner) the owner's —
    /// and the scope it is signed for ([`scope_of`], or `owner`).
    pub fn file_of(&self, person: &Principal) -> Option<(PathBuf, String)> {
        let own = self.person_file(person);
        if own.exists() {
            return Some((own, scope_of(person)));
        }
        (self.is_owner(person) && self.owner_file.exists())
            .then(|| (self.owner_file.clone(), OWNER_SCOPE.to_owned()))
    }
}

/// The scope a person's own file is signed for, and its folder's name:
/// `<channel>_<sender>`, each escaped, so no two people share one (`owner` is none of them:
/// it has no `_`).
pub fn scope_of(person: &Principal) -> String {
    format!(
        "{}_{}",
        component(&person.channel),
        component(&person.sender_id)
    )
}

/// The scope the owner's file is signed for.
/// The kind of a standing order's firing (the planner's): the only in-cadence proposal
/// taken as consented.
pub const STANDING_ORDER: &str = "standing_order";

pub const OWNER_SCOPE: &str = "owner";

/// A file's identity on disk, to re-read it only when it changed.
type Stamp = (u64, u64, i64, i64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
}

/// A file as last parsed.
type Parsed = Result<Arc<TelosFile>, FileError>;

/// Whether `file` says what the version `in_force` (kept in `.audit/`) said: the same signed
/// text saved again (another editor's line ends, trailing blanks).
fn same_text(path: &Path, in_force: &str, file: &TelosFile) -> bool {
    file::same_signed_text(&file::audit_dir(path).join(format!("{in_force}.md")), file)
}

/// Whether `score` reaches `theta`: a NaN or an infinity never does.
fn clears(score: f64, theta: f64) -> bool {
    score.is_finite() && score >= theta
}

/// Whether the time `a` is after `b` (both RFC 3339; false when either does not parse).
fn later(a: &str, b: &str) -> bool {
    match (a.parse::<jiff::Timestamp>(), b.parse::<jiff::Timestamp>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
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

/// The message asking a person without a TELOS.md to write one.
pub const ASK_TO_DECLARE: &str = "Metnos would sometimes propose things on its own, but you have not \
told it what matters to you. Write your ends in a TELOS.md (`metnos telos edit`); until then it \
proposes nothing. / Metnos a volte proporrebbe qualcosa di sua iniziativa, ma non gli hai detto cosa \
conta per te. Scrivi i tuoi fini in un TELOS.md (`metnos telos edit`); fino ad allora non propone nulla.";

/// The telos engine.
#[derive(Debug)]
pub struct TelosEngine {
    store: TelosStore,
    settings: Settings,
    files: Files,
    estimator: Arc<dyn FitEstimator>,
    clock: Arc<dyn Clock>,
    key: Result<TelosKey, String>,
    cache: Mutex<HashMap<(String, PathBuf), (Stamp, Parsed)>>,
}

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
}

impl Budget {
    /// Sets `e`'s bother terms, expected alignment and decision from `view`.
    pub fn decide(&self, view: &LedgerView, e: &mut Evaluation) {
        e.bother_sum = self
            .bother
            .sum(self.now_ms, view.publications.iter().copied());
        e.bother_cost = self.bother.cost(e.bother_sum);
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
            (Decision::DeferToDigest, "quota".to_owned())
        } else if !clears(e.expected_alignment, self.theta) {
            (Decision::DeferToDigest, "bother".to_owned())
        } else {
            (Decision::Publish, "aligned".to_owned())
        };
    }
}

impl TelosEngine {
    pub fn new(
        store: TelosStore,
        settings: Settings,
        files: Files,
        estimator: Arc<dyn FitEstimator>,
        clock: Arc<dyn Clock>,
    ) -> TelosEngine {
        let key = TelosKey::load_or_create(&files.key_file);
        if let Err(e) = &key {
            tracing::error!(error = %e, "the telos key cannot be used: every proposal is rejected");
        }
        TelosEngine {
            store,
            settings,
            files,
            estimator,
            clock,
            key,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn store(&self) -> &TelosStore {
        &self.store
    }

    pub fn files(&self) -> &Files {
        &self.files
    }

    fn local(&self, person: &Principal) -> Local {
        self.settings.config.local_for(&person.to_string())
    }

    /// `person`'s TELOS.md: read, parsed and its signature checked (cached until the file
    /// changes). A new version seen here discards the removed telos's fitness, once.
    pub async fn load(&self, person: &Principal) -> Result<Found, TelosError> {
        let Some((path, scope)) = self.files.file_of(person) else {
            return Ok(Found::None);
        };
        let Some(now_stamp) = stamp(&path) else {
            return Ok(Found::None);
        };
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(person.to_string(), path.clone()))
            .filter(|(s, _)| *s == now_stamp)
            .map(|(_, parsed)| parsed.clone());
        let parsed = match cached {
            Some(parsed) => parsed,
            None => {
                let parsed = match (&self.key, std::fs::read(&path)) {
                    (Err(e), _) => Err(FileError::SignatureInvalid(e.clone())),
                    (_, Err(e)) => Err(FileError::Unreadable(e.to_string())),
                    (Ok(key), Ok(bytes)) => match String::from_utf8(bytes) {
                        Ok(text) => file::parse_signed(&text, &key.scoped(&scope)).map(Arc::new),
                        Err(_) => Err(FileError::Malformed {
                            line: 1,
                            message: "the file is not UTF-8".to_owned(),
                        }),
                    },
                };
                let mut parsed = parsed;
                if let Ok(file) = &parsed {
                    if let Err(refused) = self.seen(person, &path, &scope, file).await? {
                        parsed = Err(refused);
                    } else {
                        for warning in &file.warnings {
                            tracing::warn!(person = %person, %warning, "TELOS.md");
                        }
                    }
                }
                self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    (person.to_string(), path.clone()),
                    (now_stamp, parsed.clone()),
                );
                parsed
            }
        };
        Ok(match parsed {
            Ok(file) => Found::Good(Loaded { file, path }),
            Err(e) => Found::Bad(e, path),
        })
    }

    /// A version in force for the first time: the telos it removed lose their fitness, and
    /// the audit says so, with the diff.
    /// `Ok(Err(_))`: the file is signed but does not follow the version in force (an older
    /// version put back, or a chain cut off): it is refused like an unsigned one.
    async fn seen(
        &self,
        person: &Principal,
        path: &Path,
        scope: &str,
        file: &TelosFile,
    ) -> Result<Result<(), FileError>, TelosError> {
        let key = person.to_string();
        // Only the key's holder signs, and a signature names whose file it is, so a replay
        // is the one attack left: a version signed before the one in force. A new version
        // follows it, or was written after it. Checked for the file (one owner file serves
        // several people) and for the person (who may move from one file to another).
        // A control character is in no principal, so this row is no person's.
        let file_row = format!("\u{1}file:{scope}");
        for row in [file_row.as_str(), key.as_str()] {
            if let Some((in_force, in_force_at)) = self.store.version_of(row).await?
                && !in_force.is_empty()
                && in_force != file.version
                && let Ok(signing_key) = &self.key
                && !file::follows(path, file, &in_force, &signing_key.scoped(scope))
                && !later(&file.front.written_at, &in_force_at)
                && !same_text(path, &in_force, file)
            {
                tracing::warn!(person = %person, in_force = %in_force, found = %file.version, "TELOS.md does not follow the version in force");
                return Ok(Err(FileError::SignatureInvalid(format!(
                    "this TELOS.md was signed before the version in force ({in_force}) and does not follow it: an older version was put back; run `metnos telos edit` to review and sign it"
                ))));
            }
        }
        let ids: Vec<String> = file.telos.iter().map(|t| t.id.clone()).collect();
        self.store
            .seen_version(&file_row, &file.version, &file.front.written_at, &ids)
            .await?;
        let Some((old_version, old_ids)) = self
            .store
            .seen_version(&key, &file.version, &file.front.written_at, &ids)
            .await?
        else {
            return Ok(Ok(()));
        };
        let removed: Vec<String> = old_ids
            .iter()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect();
        let added: Vec<String> = ids
            .iter()
            .filter(|id| !old_ids.contains(id))
            .cloned()
            .collect();
        if !removed.is_empty() {
            self.store.discard_fitness(&key, &removed).await?;
        }
        let audit = path
            .parent()
            .unwrap_or(Path::new("."))
            .join(file::AUDIT_DIR);
        let old_text =
            std::fs::read_to_string(audit.join(format!("{old_version}.md"))).unwrap_or_default();
        let new_text = std::fs::read_to_string(path).unwrap_or_default();
        let diff = similar::TextDiff::from_lines(&old_text, &new_text)
            .unified_diff()
            .header(&old_version, &file.version)
            .to_string();
        let line = serde_json::json!({
            "at": metnos_kit::time::rfc3339(self.clock.now_ms()),
            "person": key,
            "from": old_version,
            "to": file.version,
            "removed": removed,
            "added": added,
            "fitness_discarded": removed,
            "diff": diff,
        });
        let written = metnos_kit::datadir::create_dir_all(&audit).and_then(|()| {
            use std::io::Write as _;
            let mut f = metnos_kit::datadir::file_options()
                .create(true)
                .append(true)
                .open(audit.join("changes.jsonl"))?;
            writeln!(f, "{line}")
        });
        if let Err(e) = written {
            tracing::warn!(error = %e, "the telos audit line could not be written");
        }
        tracing::info!(person = %person, removed = ?removed, added = ?added, version = %file.version, "new TELOS.md in force");
        Ok(Ok(()))
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
            reason: String::new(),
            threshold_used: self.settings.theta,
            at_ms: now_ms,
            not_before_ms: None,
            telos_version: String::new(),
            ask_person: None,
        }
    }

    fn record_of(e: &Evaluation) -> Recorded {
        Recorded {
            proposal_id: e.proposal_id.clone(),
            person: e.person.clone(),
            channel: e.channel.clone(),
            effect_class: e.effect_class.clone(),
            decision: e.decision.as_str().to_owned(),
            reason: e.reason.clone(),
            expected_alignment: e.expected_alignment,
            before_bother: e.alignment_before_bother,
            threshold: e.threshold_used,
            contributors: e
                .per_telos
                .iter()
                .filter(|t| t.contribution > 0.0)
                .map(|t| t.telos_id.clone())
                .collect(),
            result_json: serde_json::to_string(e).unwrap_or_default(),
            at_ms: e.at_ms,
            answer: None,
            viewed: false,
        }
    }

    /// Records a decision that takes no place (unless a dry run); an id seen before answers
    /// with what was decided then.
    async fn settle(&self, e: Evaluation, dry_run: bool) -> Result<Evaluation, TelosError> {
        if !dry_run && !self.store.record(&Self::record_of(&e)).await? {
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

    /// Weighs one proposal. Nothing is recorded for a dry run.
    pub async fn evaluate(&self, p: &ProposalIn, dry_run: bool) -> Result<Evaluation, TelosError> {
        let now = self.clock.now_ms();
        let mut e = self.base(p, now);
        let Some(source) = p.origin.source() else {
            // Anti-paternalism: the person asked; nothing to weigh, nothing to record.
            e.decision = Decision::Publish;
            e.reason = "explicit_request".to_owned();
            return Ok(e);
        };
        if !dry_run && self.store.find(&p.proposal_id).await?.is_some() {
            return self.replayed(&e).await;
        }
        let person = p.person.to_string();
        // A standing order's firing in its cadence was consented to: it needs no telos to be
        // weighed against (and a missing or broken one does not silence it).
        let consented = source == Source::SchedulerInCadence
            && p.kind == STANDING_ORDER
            && !p.schedule_id.is_empty()
            && p.effect_class == format!("{STANDING_ORDER}:{}", p.schedule_id);
        let loaded = match self.load(&p.person).await? {
            Found::Good(loaded) => Some(loaded),
            Found::None | Found::Bad(..) if consented => None,
            Found::None => {
                e.reason = "no_telos_declared".to_owned();
                if !dry_run && self.store.ask_once(&person, now).await? {
                    e.ask_person = Some(ASK_TO_DECLARE.to_owned());
                }
                return self.settle(e, dry_run).await;
            }
            Found::Bad(error, path) => {
                // The kind and the line, never the file's words.
                let (kind, line) = match &error {
                    FileError::Malformed { line, .. } => ("malformed", *line),
                    FileError::SignatureInvalid(_) => ("signature_invalid", 0),
                    FileError::Unreadable(_) => ("unreadable", 0),
                };
                tracing::warn!(person = %p.person, path = %path.display(), kind, line, "TELOS.md not in force");
                e.reason = match error {
                    FileError::Malformed { .. } | FileError::Unreadable(_) => {
                        "telos_file_malformed"
                    }
                    FileError::SignatureInvalid(_) => "telos_signature_invalid",
                }
                .to_owned();
                return self.settle(e, dry_run).await;
            }
        };
        if let Some(loaded) = &loaded {
            e.telos_version = loaded.file.version.clone();
        }
        if self.store.is_never(&person, &p.effect_class).await? {
            e.reason = "never_list".to_owned();
            return self.settle(e, dry_run).await;
        }
        if let Some(until) = self.store.stopped(&person, &p.kind, now).await? {
            e.reason = "stopped_by_person".to_owned();
            e.not_before_ms = Some(until);
            return self.settle(e, dry_run).await;
        }
        let local = self.local(&p.person);
        let digest_minute = self
            .settings
            .config
            .digest_minute_for(&p.person.to_string());
        let span = ViewSpan {
            now_ms: now,
            // exp(−12) ≈ 6e-6: older publications weigh nothing that matters.
            bother_since_ms: now - (self.settings.bother.tau_minutes * 12.0 * 60_000.0) as i64,
            day_start_ms: local.day_start(now),
            digest_since_ms: local.last_digest(now, digest_minute),
        };
        let quotas = self.settings.config.quotas.clone();
        if local.protected(now) {
            // Decided by code, before any model: a firing waits for the window's end, a
            // proposal for the digest.
            e.reason = "protected_window".to_owned();
            if source.is_scheduler() {
                e.decision = Decision::DeferToSlot;
                e.not_before_ms = Some(local.next_open(now));
                return self.settle(e, dry_run).await;
            }
            return self
                .place(e, p, source, span, dry_run, |_, e| {
                    e.decision = Decision::DeferToDigest;
                    e.reason = "protected_window".to_owned();
                })
                .await;
        }

        let budget = Budget {
            bother: self.settings.bother,
            theta: self.settings.theta,
            quotas: quotas.clone(),
            source,
            cli: p.channel == "cli",
            now_ms: now,
        };
        if consented {
            // A firing of a standing order the person approved with its cadence (telos
            // ch. 6): the consent covers the cadence, so no fit is weighed and no model is
            // called; only the scheduler's own quota and the bother already spent apply.
            e.alignment_before_bother = 1.0;
            return self
                .place(e, p, source, span, dry_run, move |view, e| {
                    budget.decide(view, e)
                })
                .await;
        }
        if budget.cli && source == Source::Adhoc {
            // The terminal's session has had its two already: decided by code, before any
            // model (the place's own check stays the one that holds under races).
            let mut spent = false;
            let limit = quotas.cli_adhoc_per_session;
            self.store
                .decide(&person, &p.channel, &p.session_id, span, true, |view| {
                    spent = view.adhoc_this_session >= limit;
                    Write {
                        record: Self::record_of(&e),
                        place: None,
                        keep: false,
                    }
                })
                .await?;
            if spent {
                e.decision = Decision::DeferToSlot;
                e.reason = "quota".to_owned();
                return Ok(e);
            }
        }

        let Some(loaded) = loaded else {
            e.reason = "no_telos_declared".to_owned();
            return self.settle(e, dry_run).await;
        };
        let file = &loaded.file;
        // The fits: the model, in its own context; any failure rejects.
        let asked = Asked {
            kind: &p.kind,
            effect_class: &p.effect_class,
            description: &p.description,
            person: &p.person,
            level: p.level,
        };
        let fits = match tokio::time::timeout(
            self.settings.config.fit_timeout(),
            self.estimator.estimate(&asked, &file.telos),
        )
        .await
        {
            Ok(Ok(fits)) => fits,
            Ok(Err(why)) => {
                tracing::warn!(proposal = %p.proposal_id, why = %why, "fit estimate failed");
                e.reason = "fit_estimation_failed".to_owned();
                return self.settle(e, dry_run).await;
            }
            Err(_) => {
                tracing::warn!(proposal = %p.proposal_id, "fit estimate timed out");
                e.reason = "fit_estimation_failed".to_owned();
                return self.settle(e, dry_run).await;
            }
        };
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
        e.alignment_before_bother = engine::alignment(p.urgency, p.confidence, &terms);
        if !(clears(e.alignment_before_bother, self.settings.theta)
            && e.alignment_before_bother > 0.0)
        {
            e.expected_alignment = e.alignment_before_bother;
            e.reason = "below_threshold".to_owned();
            return self.settle(e, dry_run).await;
        }
        self.place(e, p, source, span, dry_run, move |view, e| {
            budget.decide(view, e)
        })
        .await
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
        let quotas = self.settings.config.quotas.clone();
        let cli = p.channel == "cli";
        let session = if cli {
            p.session_id.clone()
        } else {
            String::new()
        };
        // Twice at most: a quota taken between the read and the insert is seen the second
        // time (it cannot happen under the transaction's lock; the condition stays).
        for _ in 0..2 {
            let mut chosen = e.clone();
            let outcome = self
                .store
                .decide(
                    &chosen.person.clone(),
                    &p.channel,
                    &session,
                    span,
                    dry_run,
                    |view| {
                        decide(view, &mut chosen);
                        if cli && chosen.decision == Decision::DeferToDigest {
                            // The terminal has no digest: its next session is its next
                            // slot, and weighs the proposal again (nothing is kept).
                            chosen.decision = Decision::DeferToSlot;
                        }
                        let place = match chosen.decision {
                            Decision::Publish => Some((
                                LedgerEntry {
                                    place: "publish",
                                    source: source.as_str(),
                                    weight: source.bother_weight(),
                                    session: session.clone(),
                                    at_ms: span.now_ms,
                                },
                                match source {
                                    Source::Adhoc if cli => {
                                        Quota::Session(quotas.cli_adhoc_per_session)
                                    }
                                    Source::Adhoc => Quota::Adhoc {
                                        per_hour: quotas.adhoc_per_hour,
                                        per_day: quotas.adhoc_per_day,
                                    },
                                    _ => Quota::Scheduler(quotas.scheduler_per_day),
                                },
                            )),
                            Decision::DeferToDigest => {
                                // Judged ones fill the digest's ten places; those a window
                                // deferred unjudged wait apart (the digest judges them),
                                // bounded too.
                                let (place, pending, limit) = if chosen.reason == "protected_window"
                                {
                                    ("window", view.window_pending, WINDOW_QUEUE)
                                } else {
                                    ("digest", view.digest_pending, quotas.digest_items)
                                };
                                if pending >= limit {
                                    chosen.decision = Decision::Reject;
                                    chosen.reason = "digest_full".to_owned();
                                    None
                                } else {
                                    Some((
                                        LedgerEntry {
                                            place,
                                            source: source.as_str(),
                                            weight: 0.0,
                                            session: session.clone(),
                                            at_ms: span.now_ms,
                                        },
                                        Quota::Digest(limit),
                                    ))
                                }
                            }
                            _ => None,
                        };
                        Write {
                            record: Self::record_of(&chosen),
                            place,
                            // A proposal's deferral to the next session is weighed again
                            // then; a firing's outcome is always kept (the journal).
                            keep: !(cli
                                && source == Source::Adhoc
                                && chosen.decision == Decision::DeferToSlot),
                        }
                    },
                )
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
                Some((_, false)) => {
                    e.reason.clear();
                    continue;
                }
            }
        }
        e.reason = "quota".to_owned();
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

    /// A clear stop of a non-retreat attempt: −0.7 on the non-retreat telos, and `intent`
    /// not retried for 24 hours. Returns until when.
    pub async fn stopped(&self, by: &Principal, intent: &str) -> Result<i64, TelosError> {
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
        tracing::info!(person = %by, "stop of a non-retreat attempt recorded");
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

#[cfg(test)]
mod tests {
    use super::*;

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
            reason: String::new(),
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
}
