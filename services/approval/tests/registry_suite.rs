//! The approval registry suite (seed approval_ux.md ch. 8.1 and the issue's additions),
//! the same cases on SQLite and on a real PostgreSQL server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use metnos_approval::card::{CardRequest, Language, Reversibility, Territory};
use metnos_approval::service::{Approvals, Decision, Error, NewRequest, Settings};
use metnos_approval::store::{MIGRATIONS, PendingStore, Settled, Status};
use metnos_approval::token;
use metnos_core::capability::Capability;
use metnos_core::principal::Principal;
use metnos_kit::clock::ManualClock;
use metnos_kit::testing::TestStore;

const TTL_MS: i64 = 600_000;

async fn open(store: &TestStore) -> (Arc<Approvals>, ManualClock) {
    let db = metnos_kit::store::open(
        &store.spec(),
        "approval",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let clock = ManualClock::new();
    let approvals = Approvals::new(
        PendingStore::new(db),
        Arc::new(clock.clone()),
        Settings {
            ttl_ms: TTL_MS,
            session_ms: 8 * 3_600_000,
        },
        PathBuf::from("/home/roberto"),
        None,
    );
    (Arc::new(approvals), clock)
}

fn roberto() -> Principal {
    Principal::new("telegram", "roberto").unwrap()
}

fn request(territory: Territory) -> NewRequest {
    NewRequest {
        requester: roberto(),
        card: CardRequest {
            action_verb: "scarichi".into(),
            target_summary: "rapporto.pdf da drive.google.com -> ~/downloads/ (~2.4 MB)".into(),
            capability_class: "fs_write:~/downloads/**".into(),
            reversibility: Reversibility::Reversible,
            territory,
            recurrence_count: 99, // ignored: the service counts
            language: Language::Italian,
            reason: None,
            territory_offer: None,
            had_invisible: false,
        },
        capability: Some(Capability::FsWrite),
        target: "~/downloads/rapporto.pdf".into(),
        territory_target: "~/downloads/**".into(),
        executor: "fs_write".into(),
        args_json: r#"{"path":"~/downloads/rapporto.pdf","content":"x"}"#.into(),
        ttl_seconds: 0,
        extra_json: String::new(),
        policy_level: Some(metnos_core::level::AutonomyLevel::Supervised),
    }
}

/// Seed case 1: create_pending_genera_token_e_record.
async fn create_issues_a_token_and_a_pending_record(store: TestStore) {
    let (approvals, clock) = open(&store).await;
    let now = clock_now(&clock);
    let (pending, card) = approvals.create(request(Territory::None)).await.unwrap();
    assert!(token::is_well_formed(&pending.token));
    assert_eq!(pending.status, Status::Pending);
    assert_eq!(pending.expires_at - pending.created_at, TTL_MS);
    assert_eq!(pending.created_at, now);
    assert_eq!(
        pending.recurrence_count, 0,
        "the caller's count is not trusted"
    );
    // The caller said "scarichi" and a download: the card says what the call does.
    assert_eq!(card.lines[0], "Vuoi che crei un file?");
    assert_eq!(
        card.lines[1],
        "~/downloads/rapporto.pdf — nuovo file, 1 B: «x»"
    );
    // Why it is asked: the level policy judged it at, and what that level asks about.
    assert_eq!(
        card.lines[3],
        "Perché: al livello Supervised, scrivere file chiede conferma"
    );
    assert!(
        card.telegram_html
            .contains("<i>Perché: al livello Supervised")
    );
    assert_eq!(
        card.buttons[0][0].data,
        format!("approve:{}", pending.token)
    );
    let stored = approvals.get(&pending.token).await.unwrap();
    assert_eq!(stored, pending);
    assert_eq!(
        stored.call_sha256,
        metnos_core::call::call_sha256(
            "fs_write",
            r#"{"content":"x","path":"~/downloads/rapporto.pdf"}"#
        )
        .unwrap()
    );
}

fn clock_now(clock: &ManualClock) -> i64 {
    use metnos_kit::clock::Clock;
    clock.now_ms()
}

/// Seed cases 2 and 3: resolve approve / reject.
async fn the_requester_approves_or_rejects_once(store: TestStore) {
    let (approvals, _) = open(&store).await;
    for (decision, status) in [
        (Decision::Approve, Status::Approved),
        (Decision::Reject, Status::Rejected),
    ] {
        let (pending, _) = approvals.create(request(Territory::None)).await.unwrap();
        let resolved = approvals
            .resolve(&pending.token, decision, Territory::None, &roberto())
            .await
            .unwrap();
        assert_eq!(resolved.status, status);
        assert!(resolved.decision_at.is_some());
        assert_eq!(resolved.decided_by, Some(roberto()));
    }
}

/// Seed case 4: resolve_token_sconosciuto_solleva.
async fn an_unknown_or_malformed_token_is_refused(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let unknown = token::new_token();
    assert!(matches!(
        approvals
            .resolve(&unknown, Decision::Approve, Territory::None, &roberto())
            .await,
        Err(Error::NotFound)
    ));
    assert!(matches!(
        approvals
            .resolve(
                "approve:../x",
                Decision::Approve,
                Territory::None,
                &roberto()
            )
            .await,
        Err(Error::MalformedToken(_))
    ));
}

/// A stored request whose person or capability is not one (a row edited by hand) is an
/// error naming what is wrong, never a request someone with an empty name could approve.
async fn a_stored_request_that_names_no_person_is_unreadable(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let (pending, _) = approvals.create(request(Territory::None)).await.unwrap();
    for (column, value, says) in [
        ("sender_id", "", "principal has an empty sender_id"),
        (
            "channel",
            "tele\ngram",
            "principal channel contains a control character",
        ),
        ("capability", "fs:delete", "unknown capability `fs:delete`"),
    ] {
        metnos_kit::on_db!(approvals.store().db(), pool => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE pending SET {column} = $1 WHERE token = $2"
            )))
            .bind(value)
            .bind(&pending.token)
            .execute(pool)
            .await
            .unwrap();
        });
        let error = approvals.get(&pending.token).await.unwrap_err().to_string();
        assert!(error.contains(says), "{column}: {error}");
        assert!(
            approvals
                .resolve(
                    &pending.token,
                    Decision::Approve,
                    Territory::None,
                    &roberto()
                )
                .await
                .is_err(),
            "{column}"
        );
        // Put back for the next column.
        metnos_kit::on_db!(approvals.store().db(), pool => {
            sqlx::query(
                "UPDATE pending SET channel = $1, sender_id = $2, capability = $3 WHERE token = $4",
            )
            .bind(pending.requester.channel())
            .bind(pending.requester.sender_id())
            .bind(Capability::name_of(pending.capability))
            .bind(&pending.token)
            .execute(pool)
            .await
            .unwrap();
        });
    }
    assert_eq!(approvals.get(&pending.token).await.unwrap(), pending);
}

/// Seed case 5: resolve_doppia_chiamata_e_idempotenza.
async fn a_second_resolve_is_refused(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let (pending, _) = approvals.create(request(Territory::None)).await.unwrap();
    approvals
        .resolve(
            &pending.token,
            Decision::Approve,
            Territory::None,
            &roberto(),
        )
        .await
        .unwrap();
    let err = approvals
        .resolve(
            &pending.token,
            Decision::Reject,
            Territory::None,
            &roberto(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotPending(Settled::Approved)), "{err}");
    assert_eq!(
        approvals.get(&pending.token).await.unwrap().status,
        Status::Approved
    );
}

/// Seed case 6: resolve_decisore_diverso_solleva_e_persistenza_expired.
async fn another_decider_is_refused_and_expiry_persists(store: TestStore) {
    let (approvals, clock) = open(&store).await;
    let (pending, _) = approvals.create(request(Territory::None)).await.unwrap();
    let anna = Principal::new("telegram", "anna").unwrap();
    let other_channel = Principal::new("cli", "roberto").unwrap();
    for decider in [anna, other_channel] {
        let err = approvals
            .resolve(&pending.token, Decision::Approve, Territory::None, &decider)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotRequester), "{err}");
    }
    assert_eq!(
        approvals.get(&pending.token).await.unwrap().status,
        Status::Pending
    );

    clock.advance(TTL_MS + 1);
    let err = approvals
        .resolve(
            &pending.token,
            Decision::Approve,
            Territory::None,
            &roberto(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Expired), "{err}");
    // The failed resolve wrote the expiry; it stays written.
    assert_eq!(
        approvals.get(&pending.token).await.unwrap().status,
        Status::Expired
    );
    let err = approvals
        .resolve(
            &pending.token,
            Decision::Approve,
            Territory::None,
            &roberto(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotPending(Settled::Expired)), "{err}");
}

/// 50 concurrent resolves of one token: exactly one succeeds.
async fn concurrent_resolves_succeed_exactly_once(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let (pending, _) = approvals.create(request(Territory::None)).await.unwrap();
    let attempts = (0..50).map(|i| {
        let approvals = Arc::clone(&approvals);
        let token = pending.token.clone();
        tokio::spawn(async move {
            let decision = if i % 2 == 0 {
                Decision::Approve
            } else {
                Decision::Reject
            };
            approvals
                .resolve(&token, decision, Territory::None, &roberto())
                .await
        })
    });
    let results = futures::future::join_all(attempts).await;
    let wins: Vec<_> = results
        .into_iter()
        .map(|r| r.unwrap())
        .filter(Result::is_ok)
        .collect();
    assert_eq!(wins.len(), 1, "exactly one resolve may win");
    let winner = wins.into_iter().next().unwrap().unwrap();
    assert_eq!(
        approvals.get(&pending.token).await.unwrap().status,
        winner.status
    );
}

async fn the_proposer_can_cancel_with_a_reason(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let (pending, _) = approvals.create(request(Territory::None)).await.unwrap();
    let cancelled = approvals
        .cancel(&pending.token, "the plan changed")
        .await
        .unwrap();
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_eq!(cancelled.cancel_reason.as_deref(), Some("the plan changed"));
    let err = approvals
        .resolve(
            &pending.token,
            Decision::Approve,
            Territory::None,
            &roberto(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NotPending(Settled::Cancelled)),
        "{err}"
    );
    assert!(matches!(
        approvals.cancel(&pending.token, "again").await,
        Err(Error::NotPending(Settled::Cancelled))
    ));
}

async fn the_sweep_expires_what_is_due_and_nothing_else(store: TestStore) {
    let (approvals, clock) = open(&store).await;
    let (old, _) = approvals.create(request(Territory::None)).await.unwrap();
    clock.advance(TTL_MS / 2);
    let (young, _) = approvals.create(request(Territory::None)).await.unwrap();
    clock.advance(TTL_MS / 2);
    assert_eq!(approvals.sweep().await.unwrap(), 1);
    assert_eq!(
        approvals.get(&old.token).await.unwrap().status,
        Status::Expired
    );
    assert_eq!(
        approvals.get(&young.token).await.unwrap().status,
        Status::Pending
    );
    assert_eq!(approvals.sweep().await.unwrap(), 0);
    let listed: Vec<String> = approvals
        .list(false, 0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.token)
        .collect();
    assert_eq!(listed, vec![young.token.clone()]);
    assert_eq!(approvals.list(true, 0, None).await.unwrap().len(), 2);
}

async fn recurrence_counts_this_persons_past_approvals_of_the_same_class(store: TestStore) {
    let (approvals, _) = open(&store).await;
    for expected in 0..4 {
        let (pending, card) = approvals.create(request(Territory::None)).await.unwrap();
        assert_eq!(pending.recurrence_count, expected);
        if expected == 3 {
            // The medium form's two lines, and why it asks.
            assert_eq!(card.lines.len(), 3, "the fourth time the card is medium");
        }
        approvals
            .resolve(
                &pending.token,
                Decision::Approve,
                Territory::None,
                &roberto(),
            )
            .await
            .unwrap();
    }
    // Rejections, other people and other folders do not count.
    let (rejected, _) = approvals.create(request(Territory::None)).await.unwrap();
    approvals
        .resolve(
            &rejected.token,
            Decision::Reject,
            Territory::None,
            &roberto(),
        )
        .await
        .unwrap();
    let mut anna = request(Territory::None);
    anna.requester = Principal::new("telegram", "anna").unwrap();
    assert_eq!(approvals.create(anna).await.unwrap().0.recurrence_count, 0);
    let mut elsewhere = request(Territory::None);
    elsewhere.target = "~/Documents/other.pdf".into();
    let (other, _) = approvals.create(elsewhere).await.unwrap();
    assert_eq!(other.recurrence_count, 0);
    assert_eq!(other.capability_class, "fs_write:~/Documents/**");
    // Another file of the same folder is the same class (the seed's `fs_write:~/downloads/**`),
    // whatever class the caller wrote.
    let mut sibling = request(Territory::None);
    sibling.target = "~/downloads/other.pdf".into();
    sibling.card.capability_class = "fs_write:~/downloads/other.pdf".into();
    let (pending, card) = approvals.create(sibling).await.unwrap();
    assert_eq!(pending.recurrence_count, 4);
    assert_eq!(pending.capability_class, "fs_write:~/downloads/**");
    assert_eq!(card.lines.len(), 3, "the medium form, and why it asks");
}

#[test]
fn the_class_generalises_a_target_to_its_folder_host_or_program() {
    use metnos_approval::service::class_of;
    let home = std::path::Path::new("/home/roberto");
    for (executor, capability, target, class) in [
        (
            "fs_write",
            "fs:write",
            "~/downloads/a.pdf",
            "fs_write:~/downloads/**",
        ),
        (
            "fs_write",
            "fs:write",
            "~/Documents/x/../y/b.txt",
            "fs_write:~/Documents/y/**",
        ),
        ("fs_read", "fs:read", "/etc/hosts", "fs_read:/etc/**"),
        (
            "web_fetch",
            "network:http",
            "https://Example.com/a?b=c",
            "web_fetch:example.com",
        ),
        (
            "shell_exec",
            "code:exec",
            "git log --oneline -5",
            "shell_exec:git",
        ),
        ("time_now", "time:read", "", "time_now"),
    ] {
        assert_eq!(
            class_of(executor, Capability::parse(capability).ok(), target, home),
            class,
            "{target}"
        );
    }
}

/// The card offers territory over a pattern the service proposes; the person chooses it
/// when approving. The caller can neither pre-concede nor name the pattern.
async fn the_card_offers_territory_and_the_person_chooses_it(store: TestStore) {
    let (approvals, _) = open(&store).await;
    // A caller asking for a permanent concession on "/**" gets neither.
    let mut greedy = request(Territory::Permanent);
    greedy.territory_target = "/**".into();
    let (pending, card) = approvals.create(greedy).await.unwrap();
    assert_eq!(pending.territory, Territory::None, "nothing conceded yet");
    assert_eq!(pending.territory_target, "~/downloads/*");
    assert!(!card.lines[2].contains("territorio"), "{card}");
    let rows: Vec<Vec<&str>> = card
        .buttons
        .iter()
        .map(|row| row.iter().map(|b| b.text.as_str()).collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["Approva una volta", "Rifiuta"],
            vec!["Per questa sessione", "Sempre per ~/downloads/*"],
        ]
    );
    // A rejection concedes nothing.
    assert!(matches!(
        approvals
            .resolve(
                &pending.token,
                Decision::Reject,
                Territory::Session,
                &roberto()
            )
            .await,
        Err(Error::TerritoryWithReject)
    ));
    let approved = approvals
        .resolve(
            &pending.token,
            Decision::Approve,
            Territory::Session,
            &roberto(),
        )
        .await
        .unwrap();
    assert_eq!(approved.territory, Territory::Session);
    let card = approvals.card(&approved);
    assert!(
        card.lines[2].ends_with("[territorio: sessione]"),
        "the decided card says what was conceded: {card}"
    );

    // What is offered, by capability and target.
    let offered = |capability: &str, target: &str| {
        let mut r = request(Territory::None);
        r.capability = Some(Capability::parse(capability).unwrap());
        r.target = target.into();
        let approvals = Arc::clone(&approvals);
        async move {
            let (pending, card) = approvals.create(r).await.unwrap();
            assert_eq!(
                card.buttons.len(),
                if pending.territory_target.is_empty() {
                    1
                } else {
                    2
                }
            );
            pending.territory_target
        }
    };
    assert_eq!(
        offered("fs:write", "~/Documents/invoices-2026/march.pdf").await,
        "~/Documents/invoices-2026/*"
    );
    assert_eq!(
        offered("network:http", "https://user:pw@Drive.Google.com:443/x?k=1").await,
        "drive.google.com"
    );
    assert_eq!(
        offered("fs:read", "/srv/data/a/../b.csv").await,
        "/srv/data/*"
    );
    // Never for what is asked every time, nor a pattern as broad as the home or `/`.
    assert_eq!(offered("code:exec", "find . -exec sh -c x").await, "");
    assert_eq!(offered("mail:send", "ada@example.org").await, "");
    assert_eq!(offered("fs:write", "~/.bashrc").await, "");
    assert_eq!(offered("fs:write", "/x.txt").await, "");
    assert_eq!(
        offered("network:http", "https://example.com.").await,
        "example.com"
    );
    // A target that would turn the offer into a wildcard gets none: glob characters in the
    // folder (`~/?*/**/*` would cover the whole home), a `*` in a URL's host (`*.lan`, the
    // whole home network), invisible characters (a look-alike folder).
    assert_eq!(offered("fs:read", "~/?*/**/x").await, "");
    assert_eq!(offered("fs:read", "/e?c/x").await, "");
    assert_eq!(offered("fs:write", "~/a[b]/x").await, "");
    assert_eq!(offered("network:http", "http://*.lan/").await, "");
    assert_eq!(offered("fs:write", "~/Docu\u{200B}ments/x.txt").await, "");
    let mut exec = request(Territory::None);
    exec.capability = Some(Capability::CodeExec);
    let (pending, _) = approvals.create(exec).await.unwrap();
    // Someone else learns nothing of what a request offers: refused as not theirs first.
    assert!(matches!(
        approvals
            .resolve(
                &pending.token,
                Decision::Approve,
                Territory::Permanent,
                &Principal::new("telegram", "mallory").unwrap()
            )
            .await,
        Err(Error::NotRequester)
    ));
    assert!(matches!(
        approvals
            .resolve(
                &pending.token,
                Decision::Approve,
                Territory::Permanent,
                &roberto()
            )
            .await,
        Err(Error::NoTerritoryOffered)
    ));
    assert_eq!(
        approvals.get(&pending.token).await.unwrap().status,
        Status::Pending,
        "a refused resolve decides nothing"
    );
}

async fn bad_requests_are_refused_and_nothing_is_stored(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let mut cases = Vec::new();
    let mut r = request(Territory::None);
    r.card.action_verb = String::new();
    cases.push(r);
    let mut r = request(Territory::None);
    r.card.target_summary = "x".repeat(1025);
    cases.push(r);
    let mut r = request(Territory::None);
    r.args_json = "[1,2]".into();
    cases.push(r);
    let mut r = request(Territory::None);
    r.executor = " ".into();
    cases.push(r);
    for case in cases {
        assert!(approvals.create(case).await.is_err());
    }
    assert!(approvals.list(true, 0, None).await.unwrap().is_empty());
}

/// The recording of a grant is claimed in the row: one claimer at a time, and a claimer
/// whose claim expired gives back or gives up only its own, never a later claimer's.
async fn a_grant_claim_is_one_caller_s_and_only_its_own_is_given_back(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let (pending, _) = approvals.create(request(Territory::Session)).await.unwrap();
    approvals
        .resolve(
            &pending.token,
            Decision::Approve,
            Territory::Session,
            &roberto(),
        )
        .await
        .unwrap();
    let rows = approvals.store();
    let token = &pending.token;
    assert!(rows.claim_grant(token, 1_000, 31_000).await.unwrap());
    assert!(
        !rows.claim_grant(token, 2_000, 32_000).await.unwrap(),
        "held"
    );
    // The first claimer hangs past its claim; a second takes it over.
    assert!(rows.claim_grant(token, 40_000, 70_000).await.unwrap());
    // The first comes back: its release and its giving up touch nothing.
    rows.release_grant(token, 31_000).await.unwrap();
    rows.give_up_grant(token, 31_000).await.unwrap();
    assert!(
        !rows.claim_grant(token, 41_000, 71_000).await.unwrap(),
        "the second claim still holds"
    );
    assert_eq!(rows.ungranted(10, 41_000).await.unwrap().len(), 0);
    // The second gives its own back: free again.
    rows.release_grant(token, 70_000).await.unwrap();
    assert_eq!(rows.ungranted(10, 42_000).await.unwrap().len(), 1);
    // Given up: never listed or claimed again.
    assert!(rows.claim_grant(token, 43_000, 73_000).await.unwrap());
    rows.give_up_grant(token, 73_000).await.unwrap();
    assert!(rows.ungranted(10, i64::MAX - 1).await.unwrap().is_empty());
    assert!(
        !rows
            .claim_grant(token, i64::MAX - 1, i64::MAX)
            .await
            .unwrap()
    );
}

/// Issue 22: a grant offer's card says what Accept grants, computed here: an offer naming
/// another pattern or capability than this service offers for its target is refused; a
/// matching one shows Accept (approve for good), Reject and Never again, and Accept grants
/// that pattern.
async fn a_grant_offer_names_exactly_what_accept_grants(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let offer = |capability: &str, pattern: &str| NewRequest {
        capability: Some(Capability::FsWrite),
        target: "/home/roberto/inv/3.txt".into(),
        territory_target: String::new(),
        executor: "grant_offer".into(),
        args_json:
            serde_json::json!({"capability": capability, "pattern": pattern, "count": 3, "days": 7})
                .to_string(),
        extra_json: r#"{"proposal_id":"go-1"}"#.into(),
        ttl_seconds: 48 * 3600,
        ..request(Territory::None)
    };
    for (capability, pattern) in [
        ("fs:write", "~/*"),
        ("fs:read", "~/inv/*"),
        ("fs:write", ""),
    ] {
        let refused = approvals
            .create(offer(capability, pattern))
            .await
            .unwrap_err();
        assert!(
            matches!(refused, Error::BadGrantOffer),
            "{capability} {pattern}: {refused:?}"
        );
    }
    let (pending, card) = approvals
        .create(offer("fs:write", "~/inv/*"))
        .await
        .unwrap();
    assert!(card.lines.join(" ").contains("~/inv/*"), "{:?}", card.lines);
    let data: Vec<String> = card.buttons[0].iter().map(|b| b.data.clone()).collect();
    assert_eq!(
        data,
        [
            format!("confirm-always:{}", pending.token),
            format!("reject:{}", pending.token),
            format!("never:{}", pending.token),
        ]
    );
    assert_eq!(pending.territory_target, "~/inv/*");
    let edit: Vec<String> = card.buttons[1].iter().map(|b| b.data.clone()).collect();
    assert_eq!(
        edit,
        [format!("edit:{}", pending.token)],
        "Edit, on its own row"
    );

    // Accept with edit: only narrower, only the requester, only a grant offer.
    for (edited, why) in [
        ("~/other/*", "another folder"),
        ("~/*", "broader"),
        ("~/inv/../secrets/*", "climbing out"),
        ("/home/roberto/invoices/*", "a sibling sharing the prefix"),
        ("~/inv/**", "the whole subtree"),
        (
            "~/inv/.git/hooks/*",
            "a hidden folder the offer's * never matched",
        ),
        ("~/inv/*/secret.txt", "a wildcard before the last name"),
        ("~/inv/2026\u{202e}/*", "an invisible character"),
    ] {
        let refused = approvals
            .resolve_edited(&pending.token, edited, &roberto())
            .await
            .unwrap_err();
        assert!(
            matches!(refused, Error::EditNotWithin { .. }),
            "{why}: {refused:?}"
        );
    }
    let bob = Principal::new("telegram", "bob").unwrap();
    assert!(matches!(
        approvals
            .resolve_edited(&pending.token, "~/inv/2026/*", &bob)
            .await
            .unwrap_err(),
        Error::NotRequester
    ));
    let (call, _) = approvals.create(request(Territory::None)).await.unwrap();
    assert!(matches!(
        approvals
            .resolve_edited(&call.token, "~/downloads/x/*", &roberto())
            .await
            .unwrap_err(),
        Error::EditNotOffered
    ));
    let accepted = approvals
        .resolve_edited(&pending.token, "~/inv/2026/*", &roberto())
        .await
        .unwrap();
    assert_eq!(accepted.status, Status::Approved);
    assert_eq!(accepted.territory, Territory::Permanent);
    assert_eq!(
        accepted.territory_target, "~/inv/2026/*",
        "what the grant will be"
    );
}

/// Accept with edit on a standing order's card: its card has Edit; the requester alone may
/// approve it with another schedule, which must read as one (else nothing is decided); the
/// schedule is written with the decision and is what the planner sets the order up on.
async fn a_standing_orders_card_is_approved_with_the_schedule_the_person_sends(store: TestStore) {
    let (approvals, _) = open(&store).await;
    let order = NewRequest {
        card: CardRequest {
            action_verb: "schedule_create".into(),
            target_summary: "daily@08:00".into(),
            capability_class: "schedule_create:daily@08:00".into(),
            territory: Territory::None,
            language: Language::English,
            ..request(Territory::None).card
        },
        capability: None,
        target: "daily@08:00".into(),
        territory_target: String::new(),
        executor: "schedule_create".into(),
        args_json: r#"{"schedule":"daily@08:00","request":"what time is it?","name":"clock","notify":"always","anchor_at":1}"#.into(),
        policy_level: None,
        ..request(Territory::None)
    };
    let (pending, card) = approvals.create(order).await.unwrap();
    let edit: Vec<String> = card
        .buttons
        .last()
        .unwrap()
        .iter()
        .map(|b| b.data.clone())
        .collect();
    assert_eq!(
        edit,
        [format!("edit:{}", pending.token)],
        "{:?}",
        card.buttons
    );
    for (edited, why) in [
        ("at eight", "not a schedule"),
        ("daily@25:00", "no such hour"),
        ("daily@07:30\u{200b}", "an invisible character"),
    ] {
        let refused = approvals
            .resolve_edited_schedule(&pending.token, edited, &roberto())
            .await
            .unwrap_err();
        assert!(
            matches!(refused, Error::BadSchedule(_)),
            "{why}: {refused:?}"
        );
    }
    let bob = Principal::new("telegram", "bob").unwrap();
    assert!(matches!(
        approvals
            .resolve_edited_schedule(&pending.token, "daily@07:30", &bob)
            .await
            .unwrap_err(),
        Error::NotRequester
    ));
    // Not on another card: a call's approval has no schedule to change.
    let (call, _) = approvals.create(request(Territory::None)).await.unwrap();
    assert!(matches!(
        approvals
            .resolve_edited_schedule(&call.token, "daily@07:30", &roberto())
            .await
            .unwrap_err(),
        Error::EditNotOffered
    ));
    let still = approvals.get(&pending.token).await.unwrap();
    assert_eq!(
        still.status,
        Status::Pending,
        "a refused edit decides nothing"
    );
    let accepted = approvals
        .resolve_edited_schedule(&pending.token, " daily@07:30 ", &roberto())
        .await
        .unwrap();
    assert_eq!(accepted.status, Status::Approved);
    assert_eq!(accepted.territory, Territory::None, "no grant");
    assert_eq!(accepted.territory_target, "daily@07:30");
    assert!(matches!(
        approvals
            .resolve_edited_schedule(&pending.token, "daily@06:00", &roberto())
            .await
            .unwrap_err(),
        Error::NotPending(_)
    ));
}

/// Issue 41: a decision whose journal record could not be written used to stand anyway
/// (logged, never in the chain). Now the decision and its record are one transaction: the
/// journal unwritable, nothing is decided; writable again, decided once, recorded once.
async fn a_decision_the_journal_cannot_hold_is_not_made(store: TestStore) {
    let (approvals, clock) = open(&store).await;
    let (a, _) = approvals.create(request(Territory::None)).await.unwrap();
    let (b, _) = approvals.create(request(Territory::None)).await.unwrap();
    let db = approvals.store().db().clone();
    let rename = async |from: &str, to: &str| {
        let sql = format!("ALTER TABLE {from} RENAME TO {to}");
        metnos_kit::on_db!(&db, pool => {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await.unwrap();
        });
    };
    rename("decisions", "decisions_away").await;
    let me = roberto();
    assert!(
        approvals
            .resolve(&a.token, Decision::Approve, Territory::None, &me)
            .await
            .is_err()
    );
    assert!(approvals.cancel(&b.token, "changed plans").await.is_err());
    rename("decisions_away", "decisions").await;
    // Neither happened: both still pending, the journal empty.
    for token in [&a.token, &b.token] {
        let pending = approvals.get(token).await.unwrap();
        assert_eq!(pending.status, Status::Pending, "{token}");
    }
    assert_eq!(approvals.verify_decisions().await.unwrap().lines, 0);
    approvals
        .resolve(&a.token, Decision::Approve, Territory::None, &me)
        .await
        .unwrap();
    clock.advance(TTL_MS + 1);
    approvals.sweep().await.unwrap();
    let report = approvals.verify_decisions().await.unwrap();
    assert_eq!((report.lines, report.broken), (2, None));
}

/// Every decision — approved, rejected, cancelled, expired, also many at once from two
/// callers — is one chained record of the decisions journal, which verifies whole; no
/// token or argument is in it.
async fn each_decision_is_one_chained_record_of_the_journal(store: TestStore) {
    let (approvals, clock) = open(&store).await;
    let report = approvals.verify_decisions().await.unwrap();
    assert_eq!((report.lines, report.broken), (0, None));
    let (a, _) = approvals.create(request(Territory::None)).await.unwrap();
    let (b, _) = approvals.create(request(Territory::None)).await.unwrap();
    let (c, _) = approvals.create(request(Territory::None)).await.unwrap();
    let (d, _) = approvals.create(request(Territory::None)).await.unwrap();
    approvals
        .resolve(&a.token, Decision::Approve, Territory::None, &roberto())
        .await
        .unwrap();
    approvals
        .resolve(&b.token, Decision::Reject, Territory::None, &roberto())
        .await
        .unwrap();
    approvals
        .cancel(&c.token, "the plan changed")
        .await
        .unwrap();
    clock.advance(TTL_MS + 1);
    approvals.sweep().await.unwrap();
    // Ten decided at once by concurrent callers: each one record, one chain.
    clock.advance(1);
    let mut tokens = Vec::new();
    for _ in 0..10 {
        tokens.push(
            approvals
                .create(request(Territory::None))
                .await
                .unwrap()
                .0
                .token,
        );
    }
    let me = roberto();
    let decided = futures::future::join_all(
        tokens
            .iter()
            .map(|t| approvals.resolve(t, Decision::Approve, Territory::None, &me)),
    )
    .await;
    assert!(decided.iter().all(Result::is_ok));
    let report = approvals.verify_decisions().await.unwrap();
    assert_eq!(report.broken, None);
    assert_eq!(report.lines, 14);
    let (lines, _) = approvals.store().decisions().await.unwrap();
    let all = lines.join("\n");
    for status in ["approved", "rejected", "cancelled", "expired"] {
        assert!(
            all.contains(&format!("\"status\":\"{status}\"")),
            "{status}: {all}"
        );
    }
    assert!(
        !all.contains(&a.token) && !all.contains(&d.token),
        "no token: {all}"
    );
    assert!(!all.contains("rapporto.pdf"), "no argument: {all}");
    // The daily root: today's, kept at the day's second decision (the first had nothing
    // before it); with one kept on an earlier day naming record 3 as it was, a journal
    // rewritten whole from there (every link and the head consistent) is a break.
    // (A run across midnight keeps one more root.)
    let base = report.days.len();
    assert!((1..=2).contains(&base), "{:?}", report.days);
    assert_eq!(report.days[0].1.seq, 1, "{:?}", report.days);
    let third = metnos_kit::chain::line_end(&lines[2]);
    metnos_kit::on_db!(approvals.store().db(), pool => {
        sqlx::query("INSERT INTO decisions_head (id, seq, hash) VALUES (20260101, 3, $1)")
            .bind(&third.hash)
            .execute(pool)
            .await
            .unwrap();
    });
    let report = approvals.verify_decisions().await.unwrap();
    assert_eq!(
        (report.broken.as_deref(), report.days.len()),
        (None, base + 1)
    );
    let mut end = metnos_kit::chain::line_end(&lines[1]);
    let mut relinked = Vec::new();
    for (n, line) in lines.iter().enumerate().skip(2) {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        let fields = record.as_object_mut().unwrap();
        fields.retain(|k, _| k != "seq" && k != "prev");
        if n == 2 {
            fields.insert("status".into(), "approved".into());
        }
        let (line, next) = metnos_kit::chain::link(&end, &record);
        relinked.push((next.seq, line));
        end = next;
    }
    metnos_kit::on_db!(approvals.store().db(), pool => {
        for (seq, line) in &relinked {
            sqlx::query("UPDATE decisions SET line = $1 WHERE seq = $2")
                .bind(line)
                .bind(i64::try_from(*seq).unwrap())
                .execute(pool)
                .await
                .unwrap();
        }
        sqlx::query("UPDATE decisions_head SET seq = $1, hash = $2 WHERE id = 1")
            .bind(i64::try_from(end.seq).unwrap())
            .bind(&end.hash)
            .execute(pool)
            .await
            .unwrap();
    });
    let said = approvals.verify_decisions().await.unwrap().broken.unwrap();
    assert!(
        said.contains("record 3") && said.contains("daily root of 2026-01-01"),
        "{said}"
    );
    // Put back as it was, for what follows.
    metnos_kit::on_db!(approvals.store().db(), pool => {
        for (n, line) in lines.iter().enumerate() {
            sqlx::query("UPDATE decisions SET line = $1 WHERE seq = $2")
                .bind(line)
                .bind(i64::try_from(n + 1).unwrap())
                .execute(pool)
                .await
                .unwrap();
        }
        let last = metnos_kit::chain::line_end(lines.last().unwrap());
        sqlx::query("UPDATE decisions_head SET seq = $1, hash = $2 WHERE id = 1")
            .bind(i64::try_from(last.seq).unwrap())
            .bind(&last.hash)
            .execute(pool)
            .await
            .unwrap();
    });
    assert_eq!(approvals.verify_decisions().await.unwrap().broken, None);
    // The head removed behind the service's back: a break, which the next decision keeps
    // visible (and still records).
    metnos_kit::on_db!(approvals.store().db(), pool => {
        sqlx::query("DELETE FROM decisions_head").execute(pool).await.unwrap();
    });
    let report = approvals.verify_decisions().await.unwrap();
    assert!(report.broken.unwrap().contains("the head is missing"));
    let (e, _) = approvals.create(request(Territory::None)).await.unwrap();
    approvals
        .resolve(&e.token, Decision::Reject, Territory::None, &roberto())
        .await
        .unwrap();
    let report = approvals.verify_decisions().await.unwrap();
    assert_eq!(report.lines, 15);
    assert_eq!(
        report.broken.as_deref(),
        Some("decisions, line 15: written after the chain's head was removed")
    );
}

metnos_kit::store_suite!(
    a_decision_the_journal_cannot_hold_is_not_made,
    each_decision_is_one_chained_record_of_the_journal,
    a_standing_orders_card_is_approved_with_the_schedule_the_person_sends,
    a_grant_offer_names_exactly_what_accept_grants,
    a_grant_claim_is_one_caller_s_and_only_its_own_is_given_back,
    create_issues_a_token_and_a_pending_record,
    the_requester_approves_or_rejects_once,
    an_unknown_or_malformed_token_is_refused,
    a_stored_request_that_names_no_person_is_unreadable,
    a_second_resolve_is_refused,
    another_decider_is_refused_and_expiry_persists,
    concurrent_resolves_succeed_exactly_once,
    the_proposer_can_cancel_with_a_reason,
    the_sweep_expires_what_is_due_and_nothing_else,
    recurrence_counts_this_persons_past_approvals_of_the_same_class,
    the_card_offers_territory_and_the_person_chooses_it,
    bad_requests_are_refused_and_nothing_is_stored,
);
