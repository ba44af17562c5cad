//! `metnos telos …`: a person's declared ends (seed telos.md) from the terminal. `show`,
//! `evaluate`, `rejected` and `never` ask the running vaglio (JSON lines); `edit` and
//! `verify` work on the files themselves — `edit` opens `$EDITOR` on a copy, shows the
//! diff, and on confirmation signs the new version and keeps the old one in `.audit/`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use metnos_core::Principal;
use metnos_kit::client::TracedChannel;
use metnos_kit::time::{from_timestamp, rfc3339};
use metnos_kit::{Config, ServiceName};
use metnos_proto::common::v1 as common;
use metnos_proto::vaglio::v1 as pb;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use metnos_vaglio::telos::Files;
use metnos_vaglio::telos::file::{self, TelosKey};
use serde_json::{Value, json};

use crate::admin::{connect, failed, print_line};

const SERVICE: ServiceName = ServiceName::Vaglio;

#[derive(Debug, Subcommand)]
pub enum TelosCommand {
    /// The telos in force, with declared and effective weights.
    Show {
        /// Whose, as <channel>:<sender> (e.g. telegram:42); the owner's when left out.
        #[arg(long)]
        person: Option<String>,
    },
    /// Edit TELOS.md in $EDITOR; the diff is shown, and on confirmation the new version is
    /// signed and the old one kept in .audit/.
    Edit {
        #[arg(long)]
        person: Option<String>,
        /// Sign without asking.
        #[arg(long)]
        yes: bool,
        /// Sign a file that was changed outside this command (or put back from an older
        /// copy) after reading the diff; without a terminal, or with --yes, it is otherwise
        /// refused.
        #[arg(long)]
        accept_changes: bool,
    },
    /// Walk the chain of versions back to the first; exit 1 at the first break.
    Verify {
        #[arg(long)]
        person: Option<String>,
    },
    /// How a proposal would be decided now (nothing is recorded).
    Evaluate {
        /// The class of effect, e.g. grant_offer:fs:write.
        #[arg(long)]
        effect_class: String,
        /// The proposal in one line.
        #[arg(long)]
        summary: String,
        #[arg(long, default_value = "proposal")]
        kind: String,
        /// Whose: <channel>:<sender> (the proposal goes to their channel); the local user
        /// when left out.
        #[arg(long)]
        person: Option<String>,
        /// adhoc, scheduler_in_cadence or scheduler_off_cadence.
        #[arg(long, default_value = "adhoc")]
        source: String,
        /// From 0.5 (chronic) to 2 (a deadline within 24 h).
        #[arg(long, default_value_t = 1.0)]
        urgency: f64,
        /// How sure the proposer is, from 0 to 1.
        #[arg(long, default_value_t = 1.0)]
        confidence: f64,
    },
    /// The proposals that were not published, newest first, with why.
    Rejected {
        #[arg(long)]
        person: Option<String>,
        /// Only the N closest to θ in the last 7 days.
        #[arg(long)]
        borderline: Option<u32>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// The never-list: effect classes a person said "never again" to.
    Never {
        #[command(subcommand)]
        command: NeverCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum NeverCommand {
    /// Every entry (or one person's).
    List {
        #[arg(long)]
        person: Option<String>,
    },
    /// Take an effect class off a person's never-list.
    Remove {
        #[arg(long)]
        person: Option<String>,
        effect_class: String,
    },
}

/// `<channel>:<sender>`, or the CLI's own person.
pub(crate) fn person_of(arg: Option<&str>) -> Result<Principal, ExitCode> {
    match arg {
        None => {
            let p = crate::ask_cli::cli_principal();
            Principal::new(&p.channel, &p.sender_id).map_err(|e| {
                eprintln!("metnos: the local user is not a valid person: {e}");
                ExitCode::from(2)
            })
        }
        Some(text) => {
            let parsed = text
                .split_once(':')
                .ok_or_else(|| "not <channel>:<sender>".to_owned())
                .and_then(|(c, s)| Principal::new(c, s).map_err(|e| e.to_string()));
            parsed.map_err(|e| {
                eprintln!("metnos: --person `{text}`: {e} (e.g. telegram:42)");
                ExitCode::from(2)
            })
        }
    }
}

fn when(ts: Option<&prost_types::Timestamp>) -> Value {
    ts.and_then(from_timestamp)
        .map_or(Value::Null, |ms| json!(rfc3339(ms)))
}

fn decision_word(d: i32) -> &'static str {
    match pb::AlignmentDecision::try_from(d) {
        Ok(pb::AlignmentDecision::Publish) => "publish",
        Ok(pb::AlignmentDecision::Reject) => "reject",
        Ok(pb::AlignmentDecision::DeferToDigest) => "defer_to_digest",
        Ok(pb::AlignmentDecision::DeferToSlot) => "defer_to_slot",
        _ => "unspecified",
    }
}

fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn result_json(r: &pb::AlignmentResult) -> Value {
    json!({
        "proposal_id": r.proposal_id,
        "decision": decision_word(r.decision),
        "reason": r.reason,
        "expected_alignment": round(r.expected_alignment),
        "alignment_before_bother": round(r.alignment_before_bother),
        "bother_cost": round(r.bother_cost),
        "bother_sum": round(r.bother_sum),
        "threshold": r.threshold_used,
        "urgency": r.urgency,
        "confidence": r.confidence,
        "per_telos": r.per_telos.iter().map(|t| json!({
            "telos_id": t.telos_id,
            "fit": t.fit,
            "why": t.why,
            "activation_threshold": t.activation_threshold,
            "weight_effective": round(t.weight_effective),
            "contribution": round(t.contribution),
        })).collect::<Vec<_>>(),
        "effect_class": r.effect_class,
        "person": r.principal.as_ref().map(|p| format!("{}:{}", p.channel, p.sender_id)),
        "channel": r.channel,
        "summary": r.description,
        "telos_version": r.telos_version,
        "at": when(r.at.as_ref()),
        "not_before": when(r.not_before.as_ref()),
    })
}

fn telos_json(t: &pb::Telos) -> Value {
    json!({
        "id": t.id,
        "phrase": t.phrase,
        "weight_declared": round(t.weight_declared),
        "weight_effective": round(t.weight_effective),
        "fitness": round(t.fitness),
        "activation_threshold": t.activation_threshold,
        "non_retreat": t.is_non_retreat,
        "notes": t.notes,
    })
}

pub async fn telos(config: &Config, command: TelosCommand) -> ExitCode {
    match command {
        TelosCommand::Edit {
            person,
            yes,
            accept_changes,
        } => return edit(config, person.as_deref(), yes, accept_changes).await,
        TelosCommand::Verify { person } => return verify(config, person.as_deref()),
        _ => {}
    }
    let (channel, url) = match connect(config, SERVICE) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut vaglio = Vaglio {
        client: VaglioServiceClient::new(channel),
        url,
    };
    let result = match command {
        TelosCommand::Show { person } => vaglio.show(person.as_deref()).await,
        TelosCommand::Evaluate {
            effect_class,
            summary,
            kind,
            person,
            source,
            urgency,
            confidence,
        } => {
            let dry_run = DryRun {
                effect_class,
                summary,
                kind,
                source,
                urgency,
                confidence,
            };
            vaglio.evaluate(dry_run, person.as_deref()).await
        }
        TelosCommand::Rejected {
            person,
            borderline,
            limit,
        } => vaglio.rejected(person.as_deref(), borderline, limit).await,
        TelosCommand::Never {
            command: NeverCommand::List { person },
        } => vaglio.never_list(person.as_deref()).await,
        TelosCommand::Never {
            command:
                NeverCommand::Remove {
                    person,
                    effect_class,
                },
        } => vaglio.never_remove(person.as_deref(), effect_class).await,
        TelosCommand::Edit { .. } | TelosCommand::Verify { .. } => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// The running vaglio, as the commands that ask it see it.
struct Vaglio {
    client: VaglioServiceClient<TracedChannel>,
    url: String,
}

/// `metnos telos evaluate`'s proposal, before it names a person.
struct DryRun {
    effect_class: String,
    summary: String,
    kind: String,
    source: String,
    urgency: f64,
    confidence: f64,
}

/// `--person`, when given, as the proto's principal.
fn principal_of(person: Option<&str>) -> Result<Option<common::Principal>, ExitCode> {
    match person {
        Some(p) => Ok(Some(person_of(Some(p))?.to_proto())),
        None => Ok(None),
    }
}

impl Vaglio {
    fn failed(&self, status: &tonic::Status) -> ExitCode {
        failed(SERVICE, &self.url, status)
    }

    /// `metnos telos show`.
    async fn show(&mut self, person: Option<&str>) -> Result<(), ExitCode> {
        let person = person_of(person)?;
        let r = self
            .client
            .get_telos(pb::GetTelosRequest {
                principal: Some(person.to_proto()),
            })
            .await
            .map_err(|s| self.failed(&s))?
            .into_inner();
        print_line(&json!({"version": r.version, "path": r.path, "warnings": r.warnings}));
        for t in &r.telos {
            print_line(&telos_json(t));
        }
        Ok(())
    }

    /// `metnos telos evaluate`: a dry run, nothing recorded.
    async fn evaluate(&mut self, dry_run: DryRun, person: Option<&str>) -> Result<(), ExitCode> {
        let person = person_of(person)?;
        let origin = match dry_run.source.as_str() {
            "adhoc" => pb::ProposalOrigin::Spontaneous,
            "scheduler_in_cadence" => pb::ProposalOrigin::SchedulerInCadence,
            "scheduler_off_cadence" => pb::ProposalOrigin::SchedulerOutOfCadence,
            other => {
                eprintln!(
                    "metnos: --source `{other}`: adhoc, scheduler_in_cadence or scheduler_off_cadence"
                );
                return Err(ExitCode::from(2));
            }
        };
        let r = self
            .client
            .evaluate_proposal(pb::EvaluateProposalRequest {
                proposal: Some(pb::ActionProposal {
                    proposal_id: format!("dry-{}", metnos_kit::random::hex(8)),
                    kind: dry_run.kind,
                    effect_class: dry_run.effect_class,
                    description: dry_run.summary,
                    channel: person.channel().to_owned(),
                    origin: origin as i32,
                    principal: Some(person.to_proto()),
                    session_id: "dry-run".to_owned(),
                    ..Default::default()
                }),
                urgency_hint: dry_run.urgency,
                confidence: Some(dry_run.confidence),
                dry_run: true,
            })
            .await
            .map_err(|s| self.failed(&s))?
            .into_inner();
        print_line(&result_json(&r.result.unwrap_or_default()));
        Ok(())
    }

    /// `metnos telos rejected`.
    async fn rejected(
        &mut self,
        person: Option<&str>,
        borderline: Option<u32>,
        limit: u32,
    ) -> Result<(), ExitCode> {
        let principal = principal_of(person)?;
        let r = self
            .client
            .list_rejected_proposals(pb::ListRejectedProposalsRequest {
                limit,
                principal,
                borderline: borderline.unwrap_or(0),
                since: None,
            })
            .await
            .map_err(|s| self.failed(&s))?
            .into_inner();
        for result in &r.results {
            print_line(&result_json(result));
        }
        Ok(())
    }

    /// `metnos telos never list`.
    async fn never_list(&mut self, person: Option<&str>) -> Result<(), ExitCode> {
        let principal = principal_of(person)?;
        let r = self
            .client
            .list_never(pb::ListNeverRequest { principal })
            .await
            .map_err(|s| self.failed(&s))?
            .into_inner();
        for e in &r.entries {
            let person = e
                .principal
                .as_ref()
                .map(|p: &common::Principal| format!("{}:{}", p.channel, p.sender_id));
            print_line(&json!({
                "person": person,
                "effect_class": e.effect_class,
                "since": when(e.since.as_ref()),
                "proposal_id": e.proposal_id,
            }));
        }
        Ok(())
    }

    /// `metnos telos never remove`.
    async fn never_remove(
        &mut self,
        person: Option<&str>,
        effect_class: String,
    ) -> Result<(), ExitCode> {
        let person = person_of(person)?;
        self.client
            .remove_never(pb::RemoveNeverRequest {
                principal: Some(person.to_proto()),
                effect_class: effect_class.clone(),
            })
            .await
            .map_err(|s| self.failed(&s))?;
        print_line(&json!({"removed": effect_class, "person": person.to_string()}));
        Ok(())
    }
}

/// The file `person`'s telos is written to: their own under the data directory, or (for
/// the owner, without --person) `~/.config/metnos/TELOS.md`.
/// …and the scope its signature is for (`owner`, or the person's `<channel>_<sender>`).
fn file_for(config: &Config, person: Option<&str>) -> Result<(PathBuf, String), ExitCode> {
    let files = Files::from_config(config);
    match person {
        None => Ok((
            files.owner_file,
            metnos_vaglio::telos::OWNER_SCOPE.to_owned(),
        )),
        Some(text) => {
            let person = person_of(Some(text))?;
            Ok((
                files.person_file(&person),
                metnos_vaglio::telos::scope_of(&person),
            ))
        }
    }
}

const TEMPLATE: &str = "---
telos_version: 1.1
written_at: 2026-01-01T00:00:00Z
written_by: me
previous_hash: genesis
---
# My ultimate ends
# One section per end: `## t.<slug> — <one sentence>`, then weight (how much it counts
# against the others; they are renormalised to sum to 1), activation_threshold (a
# proposal must fit this end at least this well for it to count) and notes (read by the
# model that weighs proposals; may run over several lines).
## t.tempo — Free my time from repetitive chores
weight: 0.4
activation_threshold: 0.30
notes: if something frees at least 30 minutes a week and I can trust it,
consider proposing it.
## t.ordine — Keep the order of my digital data
weight: 0.3
activation_threshold: 0.40
notes: I prefer small incremental tidying to large reorganisations.
## t.coltivazione_strumenti — Don't leave a request of mine unmet, if possible
weight: 0.3
activation_threshold: 0.10
notes: try other ways before answering \"I cannot\"; stop when I say stop.
";

pub(crate) fn ask(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(
        line.trim().to_lowercase().as_str(),
        "y" | "yes" | "s" | "si" | "sì"
    )
}

/// Why the person's editor did not run to a clean end.
#[derive(Debug, thiserror::Error)]
enum EditorError {
    #[error("$EDITOR `{editor}`: {source}")]
    Words {
        editor: String,
        source: shell_words::ParseError,
    },
    #[error("$EDITOR is empty")]
    Empty,
    #[error("the editor `{program}` could not be started: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("the editor `{program}` exited with {status}")]
    Exited {
        program: String,
        status: std::process::ExitStatus,
    },
}

/// Runs the person's editor on `path`.
fn run_editor(path: &Path) -> Result<(), EditorError> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .or_else(|| {
            std::env::var("EDITOR")
                .ok()
                .filter(|e| !e.trim().is_empty())
        })
        .unwrap_or_else(|| "vi".to_owned());
    let words = match shell_words::split(&editor) {
        Ok(words) => words,
        Err(source) => return Err(EditorError::Words { editor, source }),
    };
    let (program, args) = words.split_first().ok_or(EditorError::Empty)?;
    let status = std::process::Command::new(program)
        .args(args)
        .arg(path)
        .status()
        .map_err(|source| EditorError::Start {
            program: program.clone(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(EditorError::Exited {
            program: program.clone(),
            status,
        })
    }
}

/// The versions signed beside `path` (`.audit/<sha256>.md` whose sha256 is their name and
/// whose signature holds): `(sha256, written_at, text)`.
fn signed_versions(path: &Path, key: &TelosKey) -> Vec<(String, jiff::Timestamp, String)> {
    let Ok(entries) = std::fs::read_dir(file::audit_dir(path)) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let sha = name.strip_suffix(".md")?.to_owned();
            let text = std::fs::read_to_string(entry.path()).ok()?;
            (file::sha256_hex(text.as_bytes()) == sha).then_some(())?;
            let parsed = file::parse_signed(&text, key).ok()?;
            let at = parsed.front.written_at.parse().ok()?;
            Some((sha, at, text))
        })
        .collect()
}

/// Whether the vaglio refuses `person`'s telos as it stands (`Some(true)`), holds it
/// (`Some(false)`), or cannot be asked (`None`).
async fn vaglio_refuses(config: &Config, person: &Principal) -> Option<bool> {
    let (channel, _) = connect(config, SERVICE).ok()?;
    let mut client = VaglioServiceClient::new(channel);
    let asked = client.get_telos(pb::GetTelosRequest {
        principal: Some(person.to_proto()),
    });
    match tokio::time::timeout(std::time::Duration::from_secs(3), asked).await {
        Ok(Ok(_)) => Some(false),
        Ok(Err(status)) if status.code() == tonic::Code::FailedPrecondition => Some(true),
        _ => None,
    }
}

/// The telos file as it stands, against the versions signed beside it.
struct OnDisk {
    current: Option<String>,
    /// The last version signed here: the newest in `.audit/` by its signed date — not
    /// `.audit/head`, which anyone who can write the folder can change. `(sha256,
    /// written_at, text)`.
    newest: Option<(String, jiff::Timestamp, String)>,
    /// Signed here and the newest signed version (or the same text saved again), and not
    /// refused by the vaglio, which remembers what it had in force.
    in_force: bool,
}

impl OnDisk {
    async fn read(config: &Config, path: &Path, key: &TelosKey, person: Option<&str>) -> OnDisk {
        let current = std::fs::read_to_string(path).ok();
        let newest = signed_versions(path, key)
            .into_iter()
            .max_by_key(|(_, at, _)| *at);
        let signed_now = current
            .as_deref()
            .and_then(|c| file::parse_signed(c, key).ok());
        let mut in_force = match (&signed_now, &newest) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(now), Some((sha, _, text))) => {
                &now.version == sha
                    || file::parse(text).is_ok_and(|kept| {
                        kept.canonical == now.canonical
                            && kept.front.signature == now.front.signature
                    })
            }
        };
        let asked_for = match person {
            Some(p) => person_of(Some(p)).ok(),
            None => person_of(None).ok(),
        };
        if in_force
            && let Some(who) = &asked_for
            && vaglio_refuses(config, who).await == Some(true)
        {
            in_force = false;
        }
        OnDisk {
            current,
            newest,
            in_force,
        }
    }

    fn last_signed(&self) -> Option<&str> {
        self.newest.as_ref().map(|(_, _, text)| text.as_str())
    }
}

async fn edit(config: &Config, person: Option<&str>, yes: bool, accept_changes: bool) -> ExitCode {
    let (path, scope) = match file_for(config, person) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let key = match TelosKey::load_or_create(&file::key_path(&config.data_dir)) {
        Ok(key) => key.scoped(&scope),
        Err(e) => {
            eprintln!("metnos: {e}");
            return ExitCode::FAILURE;
        }
    };
    let disk = OnDisk::read(config, &path, &key, person).await;
    let interactive = std::io::stdin().is_terminal();
    let start = match starting_text(&path, &disk, interactive, yes, accept_changes) {
        Ok(start) => start,
        Err(code) => return code,
    };
    let text = match edit_copy(&path, &start, interactive, yes) {
        Ok(text) => text,
        Err(code) => return code,
    };
    sign_edit(&path, &disk, &text, &key, yes)
}

/// The text the editor opens on: the file, else the last signed version, else the
/// template. A file changed outside this command is shown as a diff first, and refused
/// unless the person reviews it in a terminal or passes `--accept-changes`.
fn starting_text(
    path: &Path,
    disk: &OnDisk,
    interactive: bool,
    yes: bool,
    accept_changes: bool,
) -> Result<String, ExitCode> {
    let last_signed = disk.last_signed();
    let start = disk
        .current
        .clone()
        .or_else(|| last_signed.map(str::to_owned))
        .unwrap_or_else(|| TEMPLATE.to_owned());
    let changed = !disk.in_force && (disk.current.is_some() || last_signed.is_some());
    if !changed {
        return Ok(start);
    }
    // Changed by hand, by another program, removed, or an older version put back:
    // signing it must be a decision taken on what changed, never a habit.
    eprintln!(
        "metnos: {} was changed without `metnos telos edit` (or removed, or an older version was put back). What changed since the last version signed here:",
        path.display()
    );
    let diff = similar::TextDiff::from_lines(
        last_signed.unwrap_or(""),
        disk.current.as_deref().unwrap_or(""),
    )
    .unified_diff()
    .header("TELOS.md (last signed)", "TELOS.md (on disk)")
    .to_string();
    // What another program wrote is shown as it is: nothing hidden signed unseen.
    eprint!("{}", crate::admin::terminal(&diff));
    if !accept_changes && (yes || !interactive) {
        eprintln!(
            "metnos: nothing changed; review it in a terminal, or pass --accept-changes to sign it as it is"
        );
        return Err(ExitCode::FAILURE);
    }
    if let Some(signed) = last_signed
        && interactive
        && ask("Start from the last signed version instead?")
    {
        return Ok(signed.to_owned());
    }
    Ok(start)
}

/// Runs the editor on a copy of `start` beside `path` (same folder, same protection,
/// 0600) until it parses, and returns what was written; the copy is removed then, and
/// kept (and named) when the edit is given up.
fn edit_copy(path: &Path, start: &str, interactive: bool, yes: bool) -> Result<String, ExitCode> {
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    if let Err(e) = metnos_kit::datadir::create_dir_all(&dir) {
        eprintln!("metnos: {}: {e}", dir.display());
        return Err(ExitCode::FAILURE);
    }
    let copy = dir.join(format!(".TELOS.md.edit-{}", metnos_kit::random::hex(4)));
    if let Err(e) = metnos_kit::datadir::write_file(&copy, start.as_bytes()) {
        eprintln!("metnos: {}: {e}", copy.display());
        return Err(ExitCode::FAILURE);
    }
    let text = loop {
        if let Err(e) = run_editor(&copy) {
            eprintln!("metnos: {e}; your copy is {}", copy.display());
            return Err(ExitCode::FAILURE);
        }
        let text = match std::fs::read_to_string(&copy) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("metnos: {}: {e}", copy.display());
                return Err(ExitCode::FAILURE);
            }
        };
        match file::parse(&text) {
            Ok(parsed) => {
                for warning in &parsed.warnings {
                    eprintln!("metnos: note: {}", crate::admin::terminal(warning));
                }
                break text;
            }
            Err(e) => {
                eprintln!("metnos: {e}");
                if interactive && !yes && ask("Edit again?") {
                    continue;
                }
                eprintln!(
                    "metnos: nothing changed; your edit is kept in {}",
                    copy.display()
                );
                return Err(ExitCode::FAILURE);
            }
        }
    };
    let _ = std::fs::remove_file(&copy);
    Ok(text)
}

/// Shows the diff of `text` against what is in force and, on the person's word (or
/// `--yes`), signs it and puts it in force.
fn sign_edit(path: &Path, disk: &OnDisk, text: &str, key: &TelosKey, yes: bool) -> ExitCode {
    let current = disk.current.as_deref();
    // Unchanged and already in force: nothing to sign. A file changed outside this command
    // is signed only after the question (never with --yes, above).
    if disk.in_force && current == Some(text) {
        eprintln!("metnos: no change");
        return ExitCode::SUCCESS;
    }
    // Against what is really in force: the file, or the last signed version.
    let base = if disk.in_force {
        current
    } else {
        disk.last_signed()
    };
    let diff = similar::TextDiff::from_lines(base.unwrap_or(""), text)
        .unified_diff()
        .header("TELOS.md (in force)", "TELOS.md (edited)")
        .to_string();
    eprint!("{}", crate::admin::terminal(&diff));
    if !yes && !ask("Sign this version and put it in force?") {
        eprintln!("metnos: nothing changed");
        return ExitCode::FAILURE;
    }
    let by = crate::ask_cli::cli_principal().sender_id;
    // After every version signed here, whatever this machine's clock says.
    let mut at = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    if let Some((_, newest_at, _)) = &disk.newest
        && *newest_at >= at
    {
        at = newest_at
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap_or(*newest_at);
    }
    match file::commit(path, text, key, &by, &at.to_string()) {
        Ok(version) => {
            print_line(&json!({
                "path": path.display().to_string(),
                "version": version,
                "previous": current.map(|c| file::sha256_hex(c.as_bytes())),
            }));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("metnos: {e}");
            ExitCode::FAILURE
        }
    }
}

fn verify(config: &Config, person: Option<&str>) -> ExitCode {
    let (path, scope) = match file_for(config, person) {
        Ok(found) => found,
        Err(code) => return code,
    };
    if !path.exists() {
        eprintln!(
            "metnos: {} does not exist; `metnos telos edit` writes it",
            path.display()
        );
        return ExitCode::FAILURE;
    }
    let key_path = file::key_path(&config.data_dir);
    if !key_path.exists() {
        eprintln!(
            "metnos: there is no telos key ({}): nothing was ever signed here",
            key_path.display()
        );
        return ExitCode::FAILURE;
    }
    let key = match TelosKey::load_or_create(&key_path) {
        Ok(key) => key.scoped(&scope),
        Err(e) => {
            eprintln!("metnos: {e}");
            return ExitCode::FAILURE;
        }
    };
    match file::verify_chain(&path, &key) {
        Ok(links) => {
            for link in &links {
                print_line(&json!({
                    "version": link.version,
                    "written_at": link.written_at,
                    "written_by": link.written_by,
                    "path": link.path.display().to_string(),
                    "ok": true,
                }));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            print_line(&json!({"ok": false, "error": e}));
            eprintln!("metnos: the chain is broken: {e}");
            ExitCode::FAILURE
        }
    }
}
