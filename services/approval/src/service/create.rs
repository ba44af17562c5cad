//! Registering a request: what the caller sent is checked, and what the card says comes
//! from the call itself.

use metnos_core::call::call_sha256;
use metnos_core::capability::Capability;
use metnos_core::names::Builtin;

use super::{Approvals, Error, NewRequest, class_of, territory_offer};
use crate::card::{Card, Territory};
use crate::describe::Described;
use crate::extra::Extra;
use crate::store::{Pending, Status};
use crate::token;

/// A request that passed its own checks: the call's hash, its extra data (parsed too), and
/// the territory this service offers for it (empty: none).
struct Checked {
    call_sha256: String,
    extra_json: String,
    extra: Extra,
    territory_offer: String,
}

impl Approvals {
    /// Registers a request and renders its card: checked, described from the call itself,
    /// then stored.
    pub async fn create(&self, new: NewRequest) -> Result<(Pending, Card), Error> {
        let mut checked = self.validate(&new)?;
        let mut new = new;
        let described = self.describe(&mut new, &mut checked).await?;
        let pending = self.persist(new, checked, described).await?;
        let card = self.card(&pending);
        Ok((pending, card))
    }

    /// The request's checks, and the territory offered for it.
    fn validate(&self, new: &NewRequest) -> Result<Checked, Error> {
        let (call_sha256, extra_json) = checked(new)?;
        // What approving may also grant is the person's choice on the card, over a pattern
        // proposed here: the caller's territory and pattern are not taken.
        // A call carrying the world's data into a sink, a write that runs code later (the
        // person's message named it) and anything sent to another party after the turn read
        // private data are asked about every time: approving concedes nothing more.
        let extra = Extra::parse(&extra_json);
        let territory_offer = if !extra.asks_every_time() {
            territory_offer(new.capability, &new.target, &self.home).unwrap_or_default()
        } else {
            String::new()
        };
        check_proposal(new, &extra_json, &territory_offer)?;
        Ok(Checked {
            call_sha256,
            extra_json,
            extra,
            territory_offer,
        })
    }

    /// What the card will say, refused when it cannot show the call whole; an invisible
    /// character the description left out is marked in the kept extra data.
    async fn describe(
        &self,
        new: &mut NewRequest,
        checked: &mut Checked,
    ) -> Result<Described, Error> {
        let described = self.described(new, &checked.extra).await?;
        // What the person approves is what they read: a call too long to show whole is
        // refused, never cut.
        uncardable(&new.executor, &new.args_json, &described.summary)?;
        // Invisible characters the description left out are said on every rendering of the
        // card: the flag is kept with the request.
        if described.had_invisible {
            checked.extra_json = crate::extra::mark_invisible(&checked.extra_json);
        }
        Ok(described)
    }

    /// Stores the request as pending, with its class and how often its person approved
    /// that class before.
    async fn persist(
        &self,
        new: NewRequest,
        checked: Checked,
        described: Described,
    ) -> Result<Pending, Error> {
        let capability_class = class_of(&new.executor, new.capability, &new.target, &self.home);
        // Such a call's card is never shortened by habit: its reason is read every time.
        let recurrence_count = if !checked.extra.asks_every_time() {
            self.store
                .count_approved(&new.requester, &capability_class)
                .await?
        } else {
            0
        };
        let now = self.now();
        let ttl_ms = match new.ttl_seconds {
            0 => self.settings.ttl_ms,
            seconds => i64::from(seconds) * 1000,
        };
        let pending = Pending {
            token: token::new_token(),
            requester: new.requester,
            action_verb: described.verb,
            target_summary: described.summary,
            capability_class,
            reversibility: new.card.reversibility,
            territory: Territory::None,
            language: new.card.language,
            capability: new.capability,
            target: new.target,
            territory_target: checked.territory_offer,
            executor: new.executor,
            call_sha256: checked.call_sha256,
            recurrence_count,
            created_at: now,
            expires_at: now + ttl_ms,
            status: Status::Pending,
            decision_at: None,
            decided_by: None,
            cancel_reason: None,
            grant_id: None,
            extra_json: checked.extra_json,
            policy_level: new.policy_level,
            // The turn's trace (this call's server span is a child of the planner's).
            traceparent: metnos_kit::propagation::current_traceparent(),
        };
        self.store.insert(&pending).await?;
        // Names only: the class and the target hold the call's values (a path, a command,
        // a URL with its credentials); those stay in the store and on the card.
        tracing::info!(token = %metnos_kit::chain::token_name(&pending.token), executor = %pending.executor, capability = %Capability::name_of(pending.capability), recurrence = recurrence_count, "approval requested");
        Ok(pending)
    }

    /// What the card says the call does, from the call, not from the caller's words. A
    /// revocation offer names grants by id; what the card says of them (and what Accept
    /// revokes, `new.target`) comes from policy's store: only the requester's own active
    /// grants.
    async fn described(&self, new: &mut NewRequest, extra: &Extra) -> Result<Described, Error> {
        let person = new.requester.to_string();
        let described = match new.executor.as_str() {
            crate::describe::GRANT_REVOKE => {
                let grants = self
                    .revocable(&new.requester, new.capability, &new.args_json)
                    .await?;
                new.target = grants
                    .iter()
                    .map(|g| g.id.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                crate::describe::grant_revoke(
                    &grants,
                    self.clock.now_ms(),
                    new.card.language,
                    &self.home,
                )
            }
            crate::describe::SHORTCUT_OFFER => {
                crate::describe::shortcut_offer(&new.args_json, new.card.language)
            }
            crate::describe::SCHEDULE_CREATE
            | crate::describe::SCHEDULE_DELETE
            | crate::describe::SCHEDULE_RESUME
            | crate::describe::GRANT_OFFER => {
                let name = self.telos.time_zone_for(&person);
                crate::describe::standing_order(
                    &new.executor,
                    &new.args_json,
                    &self.telos.local_for(&person),
                    if name.is_empty() { "local" } else { name },
                    self.clock.now_ms(),
                    new.card.language,
                )
            }
            _ => crate::describe::describe(
                &new.executor,
                &new.target,
                &new.args_json,
                &extra.from_earlier,
                &extra.tainted,
                new.card.language,
                &self.home,
            )
            .through_link(extra.through_link.as_deref(), &new.target, &self.home)
            .unnamed_recipients(&extra.unnamed_recipients, new.card.language),
        };
        let described = if extra.runs_code_later.is_some() {
            described.whole_content(&new.args_json)
        } else {
            described
        };
        Ok(if extra.read_private.is_empty() {
            described
        } else {
            described.credentials_whole(&new.executor, &new.args_json, new.card.language)
        })
    }
}

/// The request's own checks: a card the person can read, an executor, a call that hashes,
/// extra data that is a JSON object, a known capability. Gives the call's hash and the
/// extra data.
fn checked(new: &NewRequest) -> Result<(String, String), Error> {
    new.card.validate()?;
    if new.executor.trim().is_empty() {
        return Err(Error::EmptyExecutor);
    }
    let call_sha256 = call_sha256(&new.executor, &new.args_json)?;
    let extra_json = if new.extra_json.is_empty() {
        String::new()
    } else {
        match serde_json::from_str::<serde_json::Value>(&new.extra_json) {
            Ok(v) if v.is_object() => new.extra_json.clone(),
            _ => return Err(Error::BadExtra),
        }
    };
    Ok((call_sha256, extra_json))
}

/// A proposal's request (a grant offer, a revocation offer) says which proposal it is,
/// nothing else (no reason line, no tainted marks of the caller's on its card); a grant
/// offer's card says what Accept grants: the capability and the pattern computed here from
/// the target (`offer`), never a caller's other words for them.
fn check_proposal(new: &NewRequest, extra_json: &str, offer: &str) -> Result<(), Error> {
    let grant = new.executor == crate::describe::GRANT_OFFER;
    if new.executor == crate::describe::SHORTCUT_OFFER {
        // Names only, no capability, no target: the card says it all from the arguments.
        let only_its_id = serde_json::from_str::<serde_json::Value>(extra_json)
            .ok()
            .and_then(|e| e.as_object().map(|o| o.keys().all(|k| k == "proposal_id")))
            .unwrap_or(false);
        let plain = new.capability.is_none() && new.target.is_empty();
        if !only_its_id || !plain || crate::describe::shortcut_parts(&new.args_json).is_none() {
            return Err(Error::BadShortcutOffer);
        }
        return Ok(());
    }
    if !grant && new.executor != crate::describe::GRANT_REVOKE {
        return Ok(());
    }
    let extra: serde_json::Value =
        serde_json::from_str(extra_json).unwrap_or(serde_json::Value::Null);
    let only_its_id = extra
        .as_object()
        .is_some_and(|o| o.keys().all(|k| k == "proposal_id"));
    if !only_its_id {
        return Err(if grant {
            Error::BadGrantOffer
        } else {
            Error::BadRevokeOffer
        });
    }
    if grant {
        let args: serde_json::Value =
            serde_json::from_str(&new.args_json).unwrap_or(serde_json::Value::Null);
        let said = |key: &str| args.get(key).and_then(serde_json::Value::as_str);
        if offer.is_empty()
            || said("pattern") != Some(offer)
            || said("capability") != new.capability.map(Capability::name)
        {
            return Err(Error::BadGrantOffer);
        }
    }
    Ok(())
}

/// Why a call's card could not show it whole: a command longer than
/// [`crate::describe::MAX_SHOWN_COMMAND`], or a summary longer than the card shows.
fn uncardable(executor: &str, args_json: &str, summary: &str) -> Result<(), Error> {
    if Builtin::of(executor) == Some(Builtin::ShellExec) {
        let args: serde_json::Value = serde_json::from_str(args_json).unwrap_or_default();
        let command = args
            .get("command")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let argv = shell_words::split(command)
            .map(shell_words::join)
            .unwrap_or_else(|_| command.to_owned());
        let length = argv.chars().count();
        if length > crate::describe::MAX_SHOWN_COMMAND {
            return Err(Error::Uncardable {
                what: "the command",
                length,
                max: crate::describe::MAX_SHOWN_COMMAND,
            });
        }
    }
    let length = summary.chars().count();
    if length > crate::card::SHOWN_SUMMARY {
        return Err(Error::Uncardable {
            what: "its description",
            length,
            max: crate::card::SHOWN_SUMMARY,
        });
    }
    Ok(())
}
