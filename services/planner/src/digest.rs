//! The evening digest (issue 22): what the telos engine kept for later (`defer_to_digest`)
//! reaches each person once a day at their `[telos] digest_at` (local time) — one message,
//! the items numbered, one button row per item (Accept, Reject, Never again). A builtin
//! task of the scheduler: it runs every few minutes and sends a person's digest once per
//! evening across replicas (the `digests` row is the claim), within three hours of its time
//! (a planner down all evening does not send it at midnight: the items wait for the next).

use std::sync::Arc;

use metnos_core::html::escape_html;
use metnos_core::principal::Principal;
use metnos_kit::clock::Clock;
use metnos_kit::config::TelosConfig;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_proto::approval::v1 as approval;
use serde_json::Value;
use sqlx::Row;

use crate::filters::Filters;
use crate::proposals::{GRANT_OFFER, Offer};
use crate::scheduler::{Done, Firing, Job};

/// The task's name and schedule.
pub const EVENING_DIGEST: (&str, &str) = ("evening_digest", "every 5 minutes");

/// A digest is sent at most this long after its time.
const LATE_MS: i64 = 3 * 3_600_000;

/// The most items one digest message holds (a card has at most 8 button rows).
pub const MAX_ITEMS: usize = 8;

#[derive(Debug)]
pub struct EveningDigest {
    pub db: Db,
    pub filters: Arc<dyn Filters>,
    pub telos: TelosConfig,
    pub clock: Arc<dyn Clock>,
}

#[tonic::async_trait]
impl Job for EveningDigest {
    async fn run(&self, firing: &Firing) -> Result<Done, String> {
        let now = firing.now_ms;
        let people: Vec<(String, String)> = on_db!(&self.db, pool => {
            let rows = sqlx::query(
                "SELECT DISTINCT channel, sender_id FROM proposals WHERE decision = 'digest' AND sent_at IS NULL",
            )
            .fetch_all(pool)
            .await
            .map_err(|e| e.to_string())?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(|e| e.to_string())?
        });
        let mut sent = 0;
        for (channel, sender_id) in people {
            let person = Principal { channel, sender_id };
            match self.digest_of(&person, now).await {
                Ok(true) => sent += 1,
                Ok(false) => {}
                // What failed, in a word (services' and the store's messages stay out).
                Err(e) => {
                    tracing::warn!(person = %person, cause = e.split(':').next().unwrap_or_default(), "a digest was not sent; the next run tries again")
                }
            }
        }
        Ok(format!("{sent} digest(s) sent").into())
    }
}

impl EveningDigest {
    /// Sends `person`'s digest if it is its time and nobody sent it yet.
    async fn digest_of(&self, person: &Principal, now: i64) -> Result<bool, String> {
        let key = person.to_string();
        let local = self.telos.local_for(&key);
        let slot = local.last_digest(now, self.telos.digest_minute_for(&key));
        if now - slot > LATE_MS || person.channel == "cli" {
            return Ok(false);
        }
        // The claim: one digest per person per evening, whichever replica comes first.
        let claimed = on_db!(&self.db, pool => {
            sqlx::query("INSERT INTO digests (channel, sender_id, slot_at, sent_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
                .bind(&person.channel).bind(&person.sender_id).bind(slot).bind(now)
                .execute(pool).await.map_err(|e| e.to_string())?
                .rows_affected() == 1
        });
        if !claimed {
            return Ok(false);
        }
        let sent = self.send(person).await;
        if sent.is_err() {
            // Released: the next run (within the three hours) tries again.
            on_db!(&self.db, pool => {
                let _ = sqlx::query("DELETE FROM digests WHERE channel = $1 AND sender_id = $2 AND slot_at = $3")
                    .bind(&person.channel).bind(&person.sender_id).bind(slot)
                    .execute(pool).await;
            });
        }
        sent
    }

    /// Sends `person`'s queued items as one message.
    async fn send(&self, person: &Principal) -> Result<bool, String> {
        let limit = (self.telos.quotas.digest_items as usize).min(MAX_ITEMS);
        let items: Vec<(String, String, String, String)> = on_db!(&self.db, pool => {
            let rows = sqlx::query(
                "SELECT id, kind, description, payload FROM proposals WHERE channel = $1 AND sender_id = $2 \
                 AND decision = 'digest' AND sent_at IS NULL ORDER BY created_at, id LIMIT $3",
            )
            .bind(&person.channel).bind(&person.sender_id).bind(limit as i64)
            .fetch_all(pool).await.map_err(|e| e.to_string())?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(|e| e.to_string())?
        });
        if items.is_empty() {
            return Ok(false);
        }
        let mut lines = vec![format!("Evening digest — {} proposal(s):", items.len())];
        let mut html = vec![format!("<b>{}</b>", escape_html(&lines[0]))];
        let mut rows = Vec::new();
        let mut tokens = Vec::new();
        for (n, (id, kind, description, payload)) in items.iter().enumerate() {
            let n = n + 1;
            // A card line is at most 1 KiB: a description is shown shortened, never refused.
            let shown: String = description.chars().take(300).collect();
            let line = format!("{n}. {shown}");
            html.push(escape_html(&line));
            lines.push(line);
            if kind != GRANT_OFFER {
                continue;
            }
            let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
            let text = |k: &str| {
                payload
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let (capability, pattern, target) =
                (text("capability"), text("pattern"), text("target"));
            let request = Offer {
                person,
                id,
                capability: &capability,
                pattern: &pattern,
                target: &target,
                count: payload
                    .get("count")
                    .and_then(Value::as_u64)
                    .unwrap_or_default(),
                days: payload.get("days").and_then(Value::as_u64).unwrap_or(7),
                language: 0,
            }
            .request();
            let created = self
                .filters
                .create_pending(request)
                .await
                .map_err(|s| format!("approval: {:?}", s.code()))?;
            let token = created.approval.unwrap_or_default().token;
            let button = |label: &str, kind: &str| approval::Button {
                text: format!("{n} · {label}"),
                data: format!("{kind}:{token}"),
            };
            rows.push(approval::ButtonRow {
                buttons: vec![
                    button("Accept", "confirm-always"),
                    button("Reject", "reject"),
                    button("Never again", "never"),
                ],
            });
            tokens.push((id.clone(), token));
        }
        let card = approval::Card {
            lines,
            buttons: rows,
            shape: 0,
            telegram_html: html.join("\n"),
        };
        let digest_token = format!("digest-{}", metnos_kit::random::hex(8));
        self.filters
            .show_card(person, &digest_token, card)
            .await
            .map_err(|s| format!("gateway: {:?}", s.code()))?;
        let sent_at = self.clock.now_ms();
        for (id, ..) in &items {
            let token = tokens
                .iter()
                .find(|(t, _)| t == id)
                .map(|(_, tok)| tok.clone());
            on_db!(&self.db, pool => {
                sqlx::query("UPDATE proposals SET sent_at = $2, token = COALESCE($3, token) WHERE id = $1")
                    .bind(id).bind(sent_at).bind(token)
                    .execute(pool).await.map_err(|e| e.to_string())?;
            });
        }
        tracing::info!(person = %person, items = items.len(), "an evening digest was sent");
        Ok(true)
    }
}
