//! The telos engine's once-only question (seed telos.md: without a TELOS.md "Metnos asks the
//! user to fill the file"). The engine spends its once-only flag, across replicas, on the
//! first proposal it held back for the missing file and answers with the command that
//! writes the person's (`ask_person`); the planner that asked delivers the question on the
//! person's channel, in their language:
//!
//! - Telegram (any push channel): one message, under one idempotency key per person; if the
//!   gateway cannot take it, the proposals' upkeep tells it again under the same key every
//!   half hour until it does (a message that went after all is not sent twice: the gateway
//!   remembers the key);
//! - the terminal: the next `metnos chat` session shows it.
//!
//! The question names a command, not a template to fill by replying: a TELOS.md is signed
//! on the home server with its key, and what Metnos pursues for a person must not be
//! rewritten by whoever holds their chat. So the owner is told `metnos telos edit`, anyone
//! else to ask whoever runs Metnos for `metnos telos edit --person <channel>:<sender>`.

use metnos_core::language::Language;
use metnos_core::names::TELOS_EDIT;
use metnos_core::principal::Principal;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use sqlx::Row;

use crate::filters::Filters;

/// The kind of the question's row when it waits (for the digest or a terminal session).
pub const KIND: &str = "telos_question";

/// The question for `person`, naming `command` (what the telos engine answered: the owner's
/// command or theirs; anything else is replaced by theirs).
pub fn question(person: &Principal, command: &str, language: Language) -> String {
    let (owner, command) = checked(person, command);
    if language == Language::Italian {
        let who = if owner {
            "Scrivi il tuo sul server di casa con"
        } else {
            "Chiedi a chi gestisce il tuo Metnos di scrivere il tuo con"
        };
        format!(
            "Metnos a volte potrebbe proporti qualcosa di sua iniziativa, ma non sa ancora cosa \
             conta per te: per questo non propone nulla, e ha appena trattenuto una proposta. I \
             tuoi fini vanno in un TELOS.md: poche righe, una per fine, ciascuna con quanto pesa. \
             {who} `{command}` (apre un modello da compilare e lo firma). Metnos non te lo \
             chiederà più."
        )
    } else {
        let who = if owner {
            "Write yours on the home server with"
        } else {
            "Ask whoever runs your Metnos to write yours with"
        };
        format!(
            "Metnos could sometimes suggest things on its own, but it does not know yet what \
             matters to you, so it suggests nothing, and it just held a suggestion back. Your \
             ends go in a TELOS.md: a few lines, one per end, each with how much it counts. \
             {who} `{command}` (it opens a template to fill in, then signs it). Metnos will not \
             ask again."
        )
    }
}

/// The command to name: the owner's (when the engine said so) or `person`'s own.
fn checked(person: &Principal, command: &str) -> (bool, String) {
    if command == TELOS_EDIT {
        (true, TELOS_EDIT.to_owned())
    } else {
        (false, format!("{TELOS_EDIT} --person {person}"))
    }
}

/// Delivers the question to `person` (the telos engine answered `command` once for them).
/// Failures are logged: a proposal is never worth a turn's error.
pub async fn deliver(db: &Db, filters: &dyn Filters, person: &Principal, command: &str, now: i64) {
    if person.is_terminal() {
        // The terminal has no push channel: the next session shows it, in its language.
        let text = question(person, command, Language::English);
        keep(db, person, &text, command, "session", now).await;
        return;
    }
    let language = filters.pairing_language(person).await;
    let text = question(person, command, language);
    let key = format!("{KIND}:{person}");
    match filters.tell(person, &text, &key).await {
        Ok(()) => tracing::info!(person = %person, "the person was asked to write a TELOS.md"),
        // The gateway took part of it or may have: never sent again.
        Err(status) if status.code() == tonic::Code::Aborted => {
            tracing::warn!(person = %person, "the TELOS.md question may have reached its person; not sent again");
        }
        Err(status) => {
            tracing::warn!(person = %person, code = ?status.code(), "the TELOS.md question did not reach its person; it is told again later");
            keep(db, person, &text, command, RETELL, now).await;
        }
    }
}

/// The decision of a question the gateway did not take yet.
const RETELL: &str = "retell";

/// Tells again the questions the gateway did not take (the proposals' upkeep), under the
/// same key; how many went.
pub async fn retell(db: &Db, filters: &dyn Filters, now: i64) -> Result<usize, sqlx::Error> {
    let rows: Vec<(String, String, String, String)> = on_db!(db, pool => {
        let rows = sqlx::query(
            "SELECT id, channel, sender_id, payload FROM proposals WHERE kind = $1 AND decision = $2 \
             ORDER BY COALESCE(sent_at, 0), created_at LIMIT 50",
        )
        .bind(KIND).bind(RETELL)
        .fetch_all(pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<_, sqlx::Error>>()?
    });
    let mut told = 0;
    for (id, channel, sender_id, payload) in rows {
        let Ok(person) = Principal::new(&channel, &sender_id) else {
            continue;
        };
        let payload: serde_json::Value = serde_json::from_str(&payload).unwrap_or_default();
        let command = payload.get("command").and_then(serde_json::Value::as_str);
        let language = filters.pairing_language(&person).await;
        let text = question(&person, command.unwrap_or_default(), language);
        let key = format!("{KIND}:{person}");
        let decision = match filters.tell(&person, &text, &key).await {
            Ok(()) => {
                told += 1;
                "told"
            }
            // Part of it went or may have: never sent again.
            Err(status) if status.code() == tonic::Code::Aborted => "told",
            // Tried again later, after the others (`sent_at`: when it was last tried).
            Err(_) => RETELL,
        };
        on_db!(db, pool => {
            sqlx::query("UPDATE proposals SET decision = $3, sent_at = $2 WHERE id = $1")
                .bind(&id).bind(now).bind(decision).execute(pool).await?;
        });
    }
    Ok(told)
}

/// Keeps the question (`text`, naming `command`) for `decision` (`retell` or `session`):
/// one row per person.
async fn keep(db: &Db, person: &Principal, text: &str, command: &str, decision: &str, now: i64) {
    let id = {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("{KIND}\n{person}").as_bytes());
        format!("tq-{}", &hex::encode(digest)[..16])
    };
    let kept = on_db!(db, pool => {
        sqlx::query(
            "INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) \
             VALUES ($1, $2, $3, $4, '', $5, $6, $7, 'no_telos_declared', $8) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id).bind(person.channel()).bind(person.sender_id()).bind(KIND)
        .bind(text).bind(serde_json::json!({"command": command}).to_string())
        .bind(decision).bind(now)
        .execute(pool).await.map(|_| ())
    });
    if let Err(e) = kept {
        tracing::warn!(person = %person, error = %e, "the TELOS.md question could not be kept");
    }
}

/// The question waiting for `person`'s terminal session, said in `language`; shown once.
pub async fn waiting_notes(
    db: &Db,
    person: &Principal,
    language: Language,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String, String)> = on_db!(db, pool => {
        let rows = sqlx::query(
            "UPDATE proposals SET decision = 'shown', sent_at = $4 WHERE channel = $1 AND sender_id = $2 \
             AND kind = $3 AND decision = 'session' RETURNING id, payload",
        )
        .bind(person.channel()).bind(person.sender_id()).bind(KIND).bind(metnos_kit::time::now_ms())
        .fetch_all(pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, sqlx::Error>>()?
    });
    Ok(rows
        .iter()
        .map(|(_, payload)| {
            let payload: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
            let command = payload.get("command").and_then(serde_json::Value::as_str);
            question(person, command.unwrap_or_default(), language)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_names_the_command_that_writes_the_person_s_own_file() {
        let bob = Principal::new("telegram", "7").unwrap();
        let en = question(
            &bob,
            "metnos telos edit --person telegram:7",
            Language::English,
        );
        assert!(
            en.contains("`metnos telos edit --person telegram:7`") && en.contains("Ask whoever"),
            "{en}"
        );
        let it = question(&bob, "metnos telos edit", Language::Italian);
        assert!(
            it.contains("`metnos telos edit`") && it.contains("Scrivi il tuo"),
            "{it}"
        );
        assert!(!it.contains("suggest"), "Italian only: {it}");
        // Anything but the two commands is not repeated: theirs is named.
        let odd = question(&bob, "rm -rf ~ #", Language::English);
        assert!(!odd.contains("rm -rf"), "{odd}");
        assert!(
            odd.contains("`metnos telos edit --person telegram:7`"),
            "{odd}"
        );
    }
}
