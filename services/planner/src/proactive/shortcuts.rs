//! Shortcut offers (issue 46, seed agent_runtime ch. 11.1.1): `synt_suggest` found a chain
//! of existing executors for a wish the model kept making (a proto used at least three
//! times), and the owner is asked, through the telos engine like every proposal: "you asked
//! for X three times; A then B does it — keep it as a shortcut?" The card is an approval
//! request of the approval service (executor `shortcut_offer`), whose words it writes from
//! the arguments; Accept approves it once, and `proposal_upkeep` then records the named
//! shortcut ([`Mnestome::keep_shortcut`]) — only the chain the approved call's hash binds,
//! and only for the person it was offered to. The pre-filter offers a kept shortcut's
//! executors to a request that names it ([`crate::turn::history`]); each call still passes
//! every filter.
//!
//! Who is asked: the mnestome is the installation's, so its owner — the first of
//! `[telos] owner_principals`, else the terminal's person who used Metnos last.

use metnos_core::principal::Principal;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_proto::approval::v1 as approval;
use serde_json::{Value, json};
use sqlx::Row;

use crate::filters::Filters;
use crate::proactive::proposals::{ProposalError, Weighed, plain_request};
use crate::store::mnestome::{Mnestome, Shortcut};
use crate::turn::synt::Suggestion;

/// The kind of a shortcut offer, and its executor on the card.
pub const SHORTCUT_OFFER: &str = metnos_core::names::proposals::SHORTCUT_OFFER;

/// A shortcut offer as an approval request: keep `from` then `chain` for `wanted`.
#[derive(Debug, Clone, Copy)]
pub struct ShortcutOffer<'a> {
    pub person: &'a Principal,
    pub id: &'a str,
    pub wanted: &'a str,
    pub from: &'a str,
    pub chain: &'a [String],
    pub uses: u64,
    pub language: i32,
}

impl ShortcutOffer<'_> {
    /// The card's arguments: what Accept keeps (its hash binds them).
    pub fn args(&self) -> Value {
        json!({"wanted": self.wanted, "from": self.from, "chain": self.chain, "uses": self.uses})
    }

    pub fn request(&self) -> approval::CreatePendingRequest {
        let args = self.args();
        plain_request(
            self.person,
            self.id,
            SHORTCUT_OFFER,
            self.wanted,
            &args,
            self.language,
        )
    }

    /// The offer stored as `payload` (its arguments), for the digest or a terminal session.
    pub fn queued(
        person: &Principal,
        id: &str,
        payload: &Value,
        language: i32,
    ) -> Option<approval::CreatePendingRequest> {
        let (wanted, from, chain, uses) = parts(payload)?;
        let offer = ShortcutOffer {
            person,
            id,
            wanted: &wanted,
            from: &from,
            chain: &chain,
            uses,
            language,
        };
        Some(offer.request())
    }
}

/// A stored offer's arguments: the wish, the first executor, the chain, the uses.
fn parts(args: &Value) -> Option<(String, String, Vec<String>, u64)> {
    let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    let chain = args
        .get("chain")?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect::<Option<_>>()?;
    Some((
        text("wanted")?,
        text("from")?,
        chain,
        args.get("uses")?.as_u64()?,
    ))
}

/// Whom a shortcut is offered to: the first of `owners` (`[telos] owner_principals`) that
/// is a principal, else the terminal's person whose turn was the latest; `None`: nobody.
pub async fn owner(db: &Db, owners: &[String]) -> Result<Option<Principal>, sqlx::Error> {
    if let Some(first) = owners.iter().find_map(|o| {
        let (channel, sender) = o.split_once(':')?;
        Principal::new(channel, sender).ok()
    }) {
        return Ok(Some(first));
    }
    let latest: Option<String> = on_db!(db, pool => {
        sqlx::query("SELECT sender_id FROM turns WHERE channel = $1 ORDER BY updated_at DESC LIMIT 1")
            .bind(metnos_core::principal::TERMINAL)
            .fetch_optional(pool).await?
            .map(|r| r.try_get(0)).transpose()?
    });
    Ok(latest.and_then(|s| Principal::new(metnos_core::principal::TERMINAL, &s).ok()))
}

/// Offers `found`'s chain to `owner`: once per wish, first executor and chain (the
/// proposal's row is the claim; its id is the same on every replica), and not when that
/// shortcut is kept already. `true` when offered.
pub async fn offer(
    db: &Db,
    filters: &dyn Filters,
    owner: &Principal,
    found: &Suggestion,
    now_ms: i64,
) -> Result<bool, ProposalError> {
    let Some(chain) = &found.chain else {
        return Ok(false);
    };
    let proto = &found.proto;
    let kept = Mnestome::new(db.clone()).shortcuts().await?;
    if kept.iter().any(|s| {
        s.name == proto.wanted
            && s.from_executor == proto.from_executor
            && s.chain == chain.executors
    }) {
        return Ok(false);
    }
    // A Telegram owner not paired is not asked; the terminal's level is its session's.
    let level = if owner.is_terminal() {
        None
    } else {
        match filters
            .pairing_level(owner)
            .await
            .map_err(|s| ProposalError::Service("gateway", s.code()))?
        {
            Some(level) => Some(level),
            None => return Ok(false),
        }
    };
    let subject = format!(
        "{}|{}|{}",
        proto.wanted,
        proto.from_executor,
        chain.executors.join(",")
    );
    // One id per owner, chain and 30-day bucket: two replicas write the same row (its
    // claim), and a chain not kept may be offered again a month on.
    let bucket = now_ms.div_euclid(REOFFER_DAYS * DAY_MS);
    let id = {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("{owner}\n{subject}\n{bucket}").as_bytes());
        format!("sc-{}", &hex::encode(digest)[..16])
    };
    let language = filters.pairing_language(owner).await;
    let steps = std::iter::once(proto.from_executor.as_str())
        .chain(chain.executors.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" → ");
    // Counted over the installation: whoever asked, in whichever turn.
    let description = if language == metnos_core::language::Language::Italian {
        format!(
            "«{}» è stato chiesto {} volte; lo fa {steps}. Lo tengo come scorciatoia?",
            proto.wanted, proto.uses
        )
    } else {
        format!(
            "{} was asked for {} times; {steps} does it. Keep it as a shortcut?",
            proto.wanted, proto.uses
        )
    };
    let offer = ShortcutOffer {
        person: owner,
        id: &id,
        wanted: &proto.wanted,
        from: &proto.from_executor,
        chain: &chain.executors,
        uses: proto.uses,
        language: language.to_wire(),
    };
    let stored = on_db!(db, pool => {
        // An earlier try that the telos engine never answered (the row kept, no decision):
        // this run tries again.
        sqlx::query("DELETE FROM proposals WHERE id = $1 AND decision = 'pending' AND token IS NULL AND created_at < $2")
            .bind(&id).bind(now_ms - RETRY_AFTER_MS)
            .execute(pool).await?;
        sqlx::query(
            "INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', '', $8) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id).bind(owner.channel()).bind(owner.sender_id()).bind(SHORTCUT_OFFER)
        .bind(&subject).bind(&description).bind(offer.args().to_string()).bind(now_ms)
        .execute(pool).await?
        .rows_affected() == 1
    });
    if !stored {
        return Ok(false);
    }
    Weighed {
        person: owner,
        level,
        id: &id,
        kind: SHORTCUT_OFFER,
        effect_class: effect_class(&proto.wanted),
        description,
        confidence: crate::proactive::proposals::confidence_of(
            SHORTCUT_OFFER,
            &offer.args().to_string(),
        ),
    }
    .settle(db, filters, offer.request(), now_ms)
    .await?;
    Ok(true)
}

/// A chain not kept is offered again at most this often.
const REOFFER_DAYS: i64 = 30;

const DAY_MS: i64 = 86_400_000;

/// An offer stored this long ago and never weighed (the telos engine did not answer) is
/// tried again.
const RETRY_AFTER_MS: i64 = 3_600_000;

/// The telos engine's effect class of a shortcut offer for `wanted`: Never again on one
/// wish's card is about that wish (the class takes lower-case letters, digits, `_ . -`).
pub fn effect_class(wanted: &str) -> String {
    let wanted: String = wanted
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_' | '.' | '-') => c,
            _ => '_',
        })
        .collect();
    format!("{SHORTCUT_OFFER}:{wanted}")
}

/// The most offers one upkeep run looks at.
const MAX_LOOKED: i64 = 100;

/// Records the shortcuts whose offers were accepted (`proposal_upkeep`), and closes the
/// offers answered otherwise. Kept is only what the approved call binds — the card's
/// arguments, checked against its hash — and only when its requester is the person the
/// offer was made to. How many were kept.
pub async fn keep_accepted(
    db: &Db,
    filters: &dyn Filters,
    now_ms: i64,
) -> Result<u64, ProposalError> {
    let open: Vec<(String, String, String, String, String)> = on_db!(db, pool => {
        let rows = sqlx::query(
            "SELECT id, channel, sender_id, token, payload FROM proposals WHERE kind = $1 \
             AND token IS NOT NULL AND decision NOT IN ('kept', 'answered') \
             ORDER BY created_at LIMIT $2",
        )
        .bind(SHORTCUT_OFFER).bind(MAX_LOOKED)
        .fetch_all(pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?)))
            .collect::<Result<_, sqlx::Error>>()?
    });
    let mnestome = Mnestome::new(db.clone());
    let mut kept = 0;
    for (id, channel, sender, token, payload) in open {
        let pending = match filters.get_pending(&token).await {
            Ok(pending) => pending,
            Err(status) if status.code() == tonic::Code::NotFound => {
                close(db, &id, "answered").await?;
                continue;
            }
            Err(status) => return Err(ProposalError::Service("approval", status.code())),
        };
        let outcome = match approval::ApprovalStatus::try_from(pending.status) {
            Ok(approval::ApprovalStatus::Pending) => continue,
            Ok(approval::ApprovalStatus::Approved) => {
                match accepted(&pending, &channel, &sender, &payload, now_ms) {
                    Some(shortcut) if mnestome.keep_shortcut(&shortcut).await? => {
                        tracing::info!(proposal = %id, shortcut = %shortcut.name, chain = ?shortcut.chain, "a shortcut was kept: the owner accepted it");
                        kept += 1;
                        "kept"
                    }
                    _ => {
                        tracing::warn!(proposal = %id, "an approved shortcut offer does not bind the offer made; nothing kept");
                        "answered"
                    }
                }
            }
            _ => "answered",
        };
        close(db, &id, outcome).await?;
    }
    Ok(kept)
}

/// The shortcut an approved card keeps: the offer's arguments, when the card's executor,
/// hash and requester are the offer's own.
fn accepted(
    pending: &approval::PendingApproval,
    channel: &str,
    sender: &str,
    payload: &str,
    now_ms: i64,
) -> Option<Shortcut> {
    let offered_to = Principal::new(channel, sender).ok()?.to_proto();
    let hash = metnos_core::call::call_sha256(SHORTCUT_OFFER, payload).ok()?;
    if pending.executor != SHORTCUT_OFFER
        || pending.call_sha256 != hash
        || pending.requester.as_ref() != Some(&offered_to)
    {
        return None;
    }
    let args: Value = serde_json::from_str(payload).ok()?;
    let (name, from_executor, chain, _) = parts(&args)?;
    Some(Shortcut {
        name,
        from_executor,
        chain,
        created_at: now_ms,
    })
}

async fn close(db: &Db, id: &str, outcome: &str) -> Result<(), sqlx::Error> {
    on_db!(db, pool => {
        sqlx::query("UPDATE proposals SET decision = $2 WHERE id = $1")
            .bind(id).bind(outcome).execute(pool).await?;
    });
    Ok(())
}
