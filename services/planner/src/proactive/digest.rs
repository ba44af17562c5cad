//! The evening digest (issue 22): what the telos engine kept for later (`defer_to_digest`)
//! reaches each person once a day at their `[telos] digest_at` (local time) — one message,
//! the items numbered, one button row per item (Accept, Reject, Never again). A builtin
//! task of the scheduler: it runs every few minutes and sends a person's digest once per
//! evening across replicas (the `digests` row is the claim), within three hours of its time
//! (a planner down all evening does not send it at midnight: the items wait for the next).
//!
//! Once a week (the first digest seven days after the last weekly one) it also says how
//! many proposals the telos engine discarded that week and the five closest to being
//! shown (its rejected journal) — even on an evening with nothing queued.

use std::sync::Arc;

use metnos_core::html::escape_html;
use metnos_core::language::Language;
use metnos_core::principal::Principal;
use metnos_kit::clock::Clock;
use metnos_kit::config::TelosConfig;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_proto::approval::v1 as approval;
use sqlx::Row;

use crate::filters::Filters;
use crate::proactive::proposals::queued_request;
use crate::proactive::scheduler::{Builtin, Done, Firing, Job, JobError};

const DAY_MS: i64 = 86_400_000;

/// How many discarded proposals the weekly line names.
const CLOSEST: u32 = 5;

/// A digest is sent at most this long after its time.
const LATE_MS: i64 = 3 * 3_600_000;

/// The most items one digest message holds (the ten; a card has at most 10 button
/// rows).
pub const MAX_ITEMS: usize = 10;

/// The most standing orders' results one digest lists (seed ch. 6: "1 digest, unlimited";
/// bounded all the same): the rest are counted, and marked sent with them.
pub const MAX_RESULTS: usize = 100;

/// The most characters one message of results holds (Telegram's limit is 4096).
const RESULTS_MESSAGE_CHARS: usize = 3500;

const STANDING: &str = metnos_core::names::proposals::STANDING_ORDER;

#[derive(Debug)]
pub struct EveningDigest {
    pub db: Db,
    pub filters: Arc<dyn Filters>,
    pub telos: TelosConfig,
    pub clock: Arc<dyn Clock>,
}

/// Why a person's digest was not sent (the next run tries again).
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error(transparent)]
    Store(#[from] sqlx::Error),
    /// A service answered with this code.
    #[error("{0}: {1:?}")]
    Service(&'static str, tonic::Code),
}

impl DigestError {
    /// What failed, in a word (services' and the store's messages stay out of the log).
    fn cause(&self) -> &'static str {
        match self {
            DigestError::Store(_) => "the store",
            DigestError::Service(who, _) => who,
        }
    }
}

/// The task's name and schedule.
impl Builtin for EveningDigest {
    const NAME: &'static str = "evening_digest";
    const SCHEDULE: &'static str = "every 5 minutes";
}

#[tonic::async_trait]
impl Job for EveningDigest {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let now = firing.now_ms;
        let mut people: Vec<(String, String)> = on_db!(&self.db, pool => {
            let rows = sqlx::query(
                "SELECT DISTINCT channel, sender_id FROM proposals WHERE decision = 'digest' AND sent_at IS NULL",
            )
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()?
        });
        // Whoever had proposals discarded this week may be owed the weekly line: the journal
        // is read only while someone's digest can go (anyone without a setting of their own
        // has the default time).
        let someone_due = std::iter::once("")
            .chain(self.telos.people.keys().map(String::as_str))
            .any(|person| {
                let local = self.telos.local_for(person);
                now - local.last_digest(now, self.telos.digest_minute_for(person)) <= LATE_MS
            });
        let journal = if someone_due {
            self.filters.discarded(None, now - 7 * DAY_MS, 0).await
        } else {
            Ok((Vec::new(), Vec::new()))
        };
        match journal {
            Ok((results, _)) => {
                for p in results.iter().filter_map(|r| r.principal.as_ref()) {
                    people.push((p.channel.clone(), p.sender_id.clone()));
                }
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), "the telos engine's journal was not read; the weekly lines wait")
            }
        }
        people.sort();
        people.dedup();
        let mut sent = 0;
        for (channel, sender_id) in people {
            let Ok(person) = Principal::new(&channel, &sender_id) else {
                tracing::warn!("a stored person's name is not a principal; no digest for it");
                continue;
            };
            match self.digest_of(&person, now).await {
                Ok(true) => sent += 1,
                Ok(false) => {}
                // What failed, in a word (services' and the store's messages stay out).
                Err(e) => {
                    tracing::warn!(person = %person, cause = e.cause(), "a digest was not sent; the next run tries again")
                }
            }
        }
        Ok(format!("{sent} digest(s) sent").into())
    }
}

impl EveningDigest {
    /// Sends `person`'s digest if it is its time and nobody sent it yet.
    async fn digest_of(&self, person: &Principal, now: i64) -> Result<bool, DigestError> {
        let key = person.to_string();
        let local = self.telos.local_for(&key);
        let slot = local.last_digest(now, self.telos.digest_minute_for(&key));
        if now - slot > LATE_MS || person.is_terminal() {
            return Ok(false);
        }
        // The claim: one digest per person per evening, whichever replica comes first.
        let claimed = on_db!(&self.db, pool => {
            sqlx::query("INSERT INTO digests (channel, sender_id, slot_at, sent_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
                .bind(person.channel()).bind(person.sender_id()).bind(slot).bind(now)
                .execute(pool).await?
                .rows_affected() == 1
        });
        if !claimed {
            return Ok(false);
        }
        let lang = self.filters.pairing_language(person).await;
        // The weekly line: unless one went out in the last seven days (an hour's slack for
        // a digest time moved a little).
        let weekly = on_db!(&self.db, pool => {
            sqlx::query("SELECT COUNT(*) FROM digests WHERE channel = $1 AND sender_id = $2 AND weekly = 1 AND slot_at > $3")
                .bind(person.channel()).bind(person.sender_id()).bind(slot - 7 * DAY_MS + 3_600_000)
                .fetch_one(pool).await?
                .try_get::<i64, _>(0)? == 0
        });
        let weekly = if weekly {
            match self
                .filters
                .discarded(Some(person), now - 7 * DAY_MS, CLOSEST)
                .await
            {
                Ok((all, closest)) if all.iter().any(discarded) => {
                    let closest: Vec<_> = closest.into_iter().filter(discarded).collect();
                    Some(weekly_line(
                        all.iter().filter(|r| discarded(r)).count(),
                        &closest,
                        lang,
                    ))
                }
                Ok(_) => None,
                Err(status) => {
                    tracing::warn!(person = %person, code = ?status.code(), "the weekly line was left out: the telos engine's journal was not read");
                    None
                }
            }
        } else {
            None
        };
        let sent = self.send(person, weekly.as_deref(), lang, slot).await;
        if let (Ok(true), Some(_)) = (&sent, &weekly) {
            on_db!(&self.db, pool => {
                sqlx::query("UPDATE digests SET weekly = 1 WHERE channel = $1 AND sender_id = $2 AND slot_at = $3")
                    .bind(person.channel()).bind(person.sender_id()).bind(slot)
                    .execute(pool).await?;
            });
        }
        if sent.is_err() {
            // Released: the next run (within the three hours) tries again.
            on_db!(&self.db, pool => {
                let _ = sqlx::query("DELETE FROM digests WHERE channel = $1 AND sender_id = $2 AND slot_at = $3")
                    .bind(person.channel()).bind(person.sender_id()).bind(slot)
                    .execute(pool).await;
            });
        }
        sent
    }

    /// Each item's card request first: one the approval service refuses for good (a grant
    /// revoked since the offer was queued) is dropped, not the whole digest; any other
    /// failure withdraws the requests made so far and the next run tries again. Returns
    /// the items kept (with their card's token and accept kind) and the tokens made.
    async fn request_cards(
        &self,
        person: &Principal,
        items: &[Item],
        lang: Language,
    ) -> Result<(Vec<Kept>, Vec<(String, String)>), DigestError> {
        let mut kept = Vec::new();
        let mut tokens: Vec<(String, String)> = Vec::new();
        for (id, kind, description, payload, reason) in items {
            if reason == "protected_window" {
                // Deferred by a window unjudged: judged now, before it takes a place.
                match self.judged(person, id, kind, description, payload).await {
                    Some(true) => {}
                    Some(false) => {
                        on_db!(&self.db, pool => {
                            sqlx::query("UPDATE proposals SET decision = 'reject', reason = 'judged at the digest' WHERE id = $1")
                                .bind(id).execute(pool).await?;
                        });
                        continue;
                    }
                    // The engine out of reach: it waits for the next digest.
                    None => continue,
                }
            }
            let Some((request, accept)) = queued_request(person, id, kind, payload, lang) else {
                if kind == crate::proactive::proposals::GRANT_OFFER {
                    // An offer whose payload no longer reads (a capability this version
                    // does not know) offers nothing: dropped, as one approval refuses.
                    tracing::info!(proposal = %id, "a queued grant offer cannot be read; dropped from the digest");
                    on_db!(&self.db, pool => {
                        sqlx::query("UPDATE proposals SET decision = 'dropped' WHERE id = $1")
                            .bind(id).execute(pool).await?;
                    });
                    continue;
                }
                kept.push((id.clone(), description.clone(), None));
                continue;
            };
            match self.filters.create_pending(request).await {
                Ok(created) => {
                    let token = created.approval.unwrap_or_default().token;
                    tokens.push((id.clone(), token.clone()));
                    kept.push((id.clone(), description.clone(), Some((token, accept))));
                }
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
                    ) =>
                {
                    tracing::info!(proposal = %id, code = ?status.code(), "a queued proposal no longer holds; dropped from the digest");
                    on_db!(&self.db, pool => {
                        sqlx::query("UPDATE proposals SET decision = 'dropped' WHERE id = $1")
                            .bind(id).execute(pool).await?;
                    });
                }
                Err(status) => {
                    self.withdraw(&tokens).await;
                    return Err(DigestError::Service("approval", status.code()));
                }
            }
        }
        Ok((kept, tokens))
    }

    /// Sends `person`'s queued items (and the weekly line) as one message.
    async fn send(
        &self,
        person: &Principal,
        weekly: Option<&str>,
        lang: Language,
        slot: i64,
    ) -> Result<bool, DigestError> {
        let it = lang == Language::Italian;
        let limit = (self.telos.quotas.digest_items as usize).min(MAX_ITEMS);
        // Ten places for what Metnos proposed; standing orders' results apart, all of them.
        let items: Vec<Item> = on_db!(&self.db, pool => {
            let rows = sqlx::query(
                "SELECT id, kind, description, payload, reason FROM proposals WHERE channel = $1 AND sender_id = $2 \
                 AND decision = 'digest' AND sent_at IS NULL AND kind <> $4 ORDER BY created_at, id LIMIT $3",
            )
            .bind(person.channel()).bind(person.sender_id()).bind(limit as i64).bind(STANDING)
            .fetch_all(pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?)))
                .collect::<Result<_, sqlx::Error>>()?
        });
        let results = self.results(person, slot).await?;
        let (kept, tokens) = self.request_cards(person, &items, lang).await?;
        if kept.is_empty() && weekly.is_none() && results.is_empty() {
            return Ok(false);
        }
        if let Err(e) = self.send_results(person, &results, it).await {
            self.withdraw(&tokens).await;
            return Err(e);
        }
        let mut card = digest_card(&kept, weekly, it);
        if !results.is_empty() {
            let line = results_line(results.len(), it);
            card.telegram_html.push('\n');
            card.telegram_html.push_str(&escape_html(&line));
            card.lines.push(line);
        }
        let digest_token = format!("digest-{}", metnos_kit::random::hex(8));
        if let Err(status) = self.filters.show_card(person, &digest_token, card).await {
            self.withdraw(&tokens).await;
            return Err(DigestError::Service("gateway", status.code()));
        }
        let sent_at = self.clock.now_ms();
        for (id, _) in &results {
            on_db!(&self.db, pool => {
                sqlx::query("UPDATE proposals SET sent_at = $2 WHERE id = $1")
                    .bind(id).bind(sent_at)
                    .execute(pool).await?;
            });
        }
        for (id, ..) in &kept {
            let token = tokens
                .iter()
                .find(|(t, _)| t == id)
                .map(|(_, tok)| tok.clone());
            on_db!(&self.db, pool => {
                sqlx::query("UPDATE proposals SET sent_at = $2, token = COALESCE($3, token) WHERE id = $1")
                    .bind(id).bind(sent_at).bind(token)
                    .execute(pool).await?;
            });
        }
        tracing::info!(person = %person, items = kept.len(), "an evening digest was sent");
        Ok(true)
    }

    /// `person`'s standing orders' results for the digest of `slot`, oldest first: `(id,
    /// line)`. The first try of a slot binds every result waiting then to it; a try again
    /// (the card was not shown) reads the same ones, so its messages are the same under
    /// the same keys — one that went is not sent twice, a result that came meanwhile waits
    /// for the next evening.
    async fn results(
        &self,
        person: &Principal,
        slot: i64,
    ) -> Result<Vec<(String, String)>, DigestError> {
        let bound = format!("digest:{slot}");
        Ok(on_db!(&self.db, pool => {
            sqlx::query(
                "UPDATE proposals SET reason = $4 WHERE channel = $1 AND sender_id = $2 AND kind = $3 \
                 AND decision = 'digest' AND sent_at IS NULL AND NOT EXISTS (SELECT 1 FROM proposals \
                 WHERE channel = $1 AND sender_id = $2 AND kind = $3 AND reason = $4)",
            )
            .bind(person.channel()).bind(person.sender_id()).bind(STANDING).bind(&bound)
            .execute(pool).await?;
            let rows = sqlx::query(
                "SELECT id, description FROM proposals WHERE channel = $1 AND sender_id = $2 \
                 AND decision = 'digest' AND sent_at IS NULL AND kind = $3 AND reason = $4 \
                 ORDER BY created_at, id",
            )
            .bind(person.channel()).bind(person.sender_id()).bind(STANDING).bind(&bound)
            .fetch_all(pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()?
        }))
    }

    /// The results as messages of their own (no buttons), before the digest's card: the
    /// first [`MAX_RESULTS`] one per line, the rest counted. Each message under a key made
    /// of the results it holds, so a digest tried again sends none twice and a message
    /// holding another result is never taken for one sent.
    async fn send_results(
        &self,
        person: &Principal,
        results: &[(String, String)],
        it: bool,
    ) -> Result<(), DigestError> {
        use sha2::{Digest, Sha256};
        for (text, ids) in results_messages(results, it) {
            let digest = Sha256::digest(ids.join("\n").as_bytes());
            let key = format!("digest-results:{}", &hex::encode(digest)[..32]);
            match self.filters.tell(person, &text, &key).await {
                Ok(()) => {}
                // Part of it went or may have: never sent again, and not worth the digest.
                Err(status) if status.code() == tonic::Code::Aborted => {
                    tracing::warn!(person = %person, "a message of results may have gone; not sent again");
                }
                Err(status) => return Err(DigestError::Service("gateway", status.code())),
            }
        }
        Ok(())
    }

    /// Whether a proposal a protected window deferred unjudged holds now (the telos
    /// engine's dry run: its fits against θ, the never-list, a stopped intent; nothing
    /// recorded, no place taken): `None` when the engine cannot answer.
    async fn judged(
        &self,
        person: &Principal,
        id: &str,
        kind: &str,
        description: &str,
        payload: &str,
    ) -> Option<bool> {
        use metnos_proto::vaglio::v1 as vaglio;
        let level = self.filters.pairing_level(person).await.ok().flatten();
        let asked = crate::proactive::proposals::Queued {
            person,
            id,
            kind,
            description,
            payload,
            level: level.map_or(0, |l| l.to_proto() as i32),
            session: "",
        }
        .evaluation(true);
        match self.filters.evaluate_proposal(asked).await {
            Ok(r) if r.decision == vaglio::AlignmentDecision::Reject as i32 => {
                match r.reason.as_str() {
                    // What the person or their ends say now: dropped.
                    "below_threshold" | "never_list" | "stopped_by_person"
                    | "no_telos_declared" => Some(false),
                    // Not judged now (the estimate, a TELOS.md being edited): it waits.
                    "fit_estimation_failed"
                    | "telos_signature_invalid"
                    | "telos_file_malformed" => None,
                    // A place a real evaluation would take (`digest_full`): not the point.
                    _ => Some(true),
                }
            }
            // Kept; one a window still covers (a digest time inside the person's window)
            // as it was, unjudged, rather than never shown.
            Ok(_) => Some(true),
            Err(status) => {
                tracing::warn!(proposal = %id, code = ?status.code(), "a proposal a window deferred was not judged; it waits for the next digest");
                None
            }
        }
    }

    /// Withdraws the approval requests made for a digest that was not sent.
    async fn withdraw(&self, tokens: &[(String, String)]) {
        for (_, token) in tokens {
            let _ = self
                .filters
                .cancel(token, "the digest holding it was not sent")
                .await;
        }
    }
}

/// Whether a journaled rejection was really discarded: a standing order's result beyond
/// what one digest lists (`digest_full`) is still in the digest, counted.
fn discarded(r: &metnos_proto::vaglio::v1::AlignmentResult) -> bool {
    !(r.reason == "digest_full"
        && r.effect_class
            .starts_with(metnos_core::names::proposals::STANDING_ORDER))
}

/// The weekly line: how many proposals were discarded, then the closest to being shown,
/// one per line with their alignment against the bar they missed.
fn weekly_line(
    count: usize,
    closest: &[metnos_proto::vaglio::v1::AlignmentResult],
    lang: Language,
) -> String {
    let it = lang == Language::Italian;
    let count = if count >= 1000 {
        "1000+".to_owned()
    } else {
        count.to_string()
    };
    let mut text = if it {
        format!("Proposte scartate questa settimana: {count}")
    } else {
        format!("This week {count} proposal(s) were discarded")
    };
    if closest.is_empty() {
        text.push('.');
        return text;
    }
    text.push_str(&if it {
        format!("; le {} più vicine a essere mostrate:", closest.len())
    } else {
        format!("; the {} closest to being shown:", closest.len())
    });
    for r in closest {
        let said = if r.description.is_empty() {
            &r.effect_class
        } else {
            &r.description
        };
        // One line each, as it reads, whatever the description holds.
        let said = metnos_core::html::one_visible_line(said, 100);
        text.push_str(&format!(
            "\n  · {said} ({:.2} {} {:.2})",
            r.expected_alignment,
            if it { "su" } else { "of" },
            r.threshold_used
        ));
    }
    text
}

/// The digest card's line about the results that came as messages of their own.
fn results_line(count: usize, it: bool) -> String {
    if it {
        format!("Risultati dei tuoi ordini ricorrenti: {count} (nei messaggi sopra).")
    } else {
        format!("Results of your standing orders: {count} (in the messages above).")
    }
}

/// The results as messages of at most [`RESULTS_MESSAGE_CHARS`] characters, each with
/// the ids of the results it lists or counts: one line each, the first [`MAX_RESULTS`],
/// then how many more were not listed.
fn results_messages(results: &[(String, String)], it: bool) -> Vec<(String, Vec<&str>)> {
    let mut messages = Vec::new();
    let mut current = (String::new(), Vec::new());
    for (id, line) in results.iter().take(MAX_RESULTS) {
        let line = metnos_core::html::one_visible_line(line, 320);
        if !current.0.is_empty()
            && current.0.chars().count() + line.chars().count() + 1 > RESULTS_MESSAGE_CHARS
        {
            messages.push(std::mem::take(&mut current));
        }
        if !current.0.is_empty() {
            current.0.push('\n');
        }
        current.0.push_str(&line);
        current.1.push(id.as_str());
    }
    let more = &results[results.len().min(MAX_RESULTS)..];
    if !more.is_empty() {
        let n = more.len();
        current.0.push('\n');
        current.0.push_str(&if it {
            format!("… e altri {n} risultati non elencati.")
        } else {
            format!("… and {n} more result(s) not listed.")
        });
        current.1.extend(more.iter().map(|(id, _)| id.as_str()));
    }
    if !current.0.is_empty() {
        messages.push(current);
    }
    messages
}

/// A queued proposal: id, kind, description, payload and why it was queued.
type Item = (String, String, String, String, String);

/// An item kept for the digest: its id, description and, when it has a card, the card's
/// token and accept kind.
type Kept = (String, String, Option<(String, &'static str)>);

/// The digest's message: a heading, one numbered line per item (with its buttons) and the
/// weekly lines.
fn digest_card(kept: &[Kept], weekly: Option<&str>, it: bool) -> approval::Card {
    let mut lines = vec![if kept.is_empty() {
        if it {
            "Riepilogo serale"
        } else {
            "Evening digest"
        }
        .to_owned()
    } else if it {
        format!("Riepilogo serale — proposte: {}", kept.len())
    } else {
        format!("Evening digest — {} proposal(s):", kept.len())
    }];
    let mut html = vec![format!("<b>{}</b>", escape_html(&lines[0]))];
    let mut rows = Vec::new();
    for (n, (_, description, card)) in kept.iter().enumerate() {
        let n = n + 1;
        // A card line is at most 1 KiB: a description is shown shortened (and on one
        // line), never refused.
        let shown = metnos_core::html::one_visible_line(description, 300);
        let line = format!("{n}. {shown}");
        html.push(escape_html(&line));
        lines.push(line);
        let Some((token, accept)) = card else {
            continue;
        };
        let button = |label: &str, kind: &str| approval::Button {
            text: format!("{n} · {label}"),
            data: format!("{kind}:{token}"),
        };
        rows.push(approval::ButtonRow {
            buttons: vec![
                button(if it { "Accetta" } else { "Accept" }, accept),
                button(if it { "Rifiuta" } else { "Reject" }, "reject"),
                button(if it { "Mai più" } else { "Never again" }, "never"),
            ],
        });
    }
    if let Some(weekly) = weekly {
        for line in weekly.lines() {
            html.push(escape_html(line));
            lines.push(line.to_owned());
        }
    }
    approval::Card {
        lines,
        buttons: rows,
        shape: 0,
        telegram_html: html.join("\n"),
    }
}
