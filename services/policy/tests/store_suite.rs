//! The policy store suite: grants recorded, consulted, listed, revoked and pruned, the
//! same cases on SQLite and on a real PostgreSQL server.

use std::path::PathBuf;
use std::time::Duration;

use metnos_core::capability::Capability;
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_core::target::Pattern;
use metnos_kit::testing::TestStore;
use metnos_kit::time::now_ms;
use metnos_policy::grant::NewGrant;
use metnos_policy::outcome::Decider;
use metnos_policy::service::{Error, Policy};
use metnos_policy::store::{GrantStore, ListFilter, MIGRATIONS};
use metnos_policy::table::Outcome;

const DAY_MS: i64 = 86_400_000;

async fn open(store: &TestStore) -> (Policy, GrantStore) {
    let db = metnos_kit::store::open(
        &store.spec(),
        "policy",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    (
        Policy::new(db.clone(), PathBuf::from("/home/roberto")),
        GrantStore::new(db),
    )
}

fn who(channel: &str, sender: &str) -> Principal {
    Principal::new(channel, sender).unwrap()
}

fn roberto() -> Principal {
    who("telegram", "roberto")
}

/// A grant written straight to the store, with any times (bypassing validation, as a
/// grant recorded long ago or one that has expired since would look).
async fn raw_grant(
    store: &GrantStore,
    cap: Capability,
    target: &str,
    granted_at: i64,
    expires_at: Option<i64>,
) -> i64 {
    let pattern = Pattern::parse(
        cap.spec().target_kind,
        target,
        std::path::Path::new("/home/roberto"),
    )
    .unwrap();
    let new = NewGrant {
        principal: roberto(),
        capability: cap,
        target: target.to_owned(),
        pattern,
        expires_at,
        granted_by: "test".to_owned(),
        idempotency_key: None,
    };
    store.record(&new, granted_at).await.unwrap().grant().id
}

/// Seed case 5: record_grant_e_has_grant_round_trip (and the seed's example 1).
async fn a_recorded_grant_decides_a_matching_check(store: TestStore) {
    let (policy, _) = open(&store).await;
    let grant = policy
        .record(
            roberto(),
            "fs:write",
            "~/Documents/invoices-2026/*",
            None,
            "approval:abc",
            "",
        )
        .await
        .unwrap();
    assert!(grant.id > 0);
    let decision = policy
        .check(
            AutonomyLevel::Supervised,
            "fs:write",
            Some(roberto()),
            "~/Documents/invoices-2026/04-Acme.pdf",
        )
        .await
        .unwrap();
    assert_eq!(decision.outcome, Outcome::Allowed);
    assert_eq!(decision.decided_by, Decider::Grant);
    assert_eq!(decision.grant_id, Some(grant.id));
    // Another person, another capability, another folder: still asked.
    for (who, cap, target) in [
        (
            who("telegram", "anna"),
            "fs:write",
            "~/Documents/invoices-2026/04-Acme.pdf",
        ),
        (
            roberto(),
            "fs:read",
            "~/Documents/invoices-2026/04-Acme.pdf",
        ),
        (
            roberto(),
            "fs:write",
            "~/Documents/invoices-2025/04-Acme.pdf",
        ),
        (
            roberto(),
            "fs:write",
            "~/Documents/invoices-2026/../../.ssh/id_rsa",
        ),
    ] {
        let d = policy
            .check(AutonomyLevel::Supervised, cap, Some(who.clone()), target)
            .await
            .unwrap();
        assert_eq!(
            d.outcome,
            Outcome::ApprovalRequired,
            "{who:?} {cap} {target}"
        );
    }
}

/// Seed case 6: record_grant_capability_sconosciuta_solleva.
async fn an_unknown_capability_is_refused_and_nothing_is_stored(store: TestStore) {
    let (policy, _) = open(&store).await;
    let err = policy
        .record(roberto(), "fs:delete", "~/x", None, "", "")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownCapability(_)), "{err}");
    assert!(err.to_string().contains("fs:read, fs:write"), "{err}");
    let all = ListFilter {
        include_inactive: true,
        ..ListFilter::default()
    };
    assert!(policy.list(&all).await.unwrap().is_empty());
}

/// Seed case 7: revoke_grant_disattiva_has_grant.
async fn revoking_a_grant_stops_it_deciding(store: TestStore) {
    let (policy, _) = open(&store).await;
    let grant = policy
        .record(roberto(), "network:http", "*.example.com", None, "", "")
        .await
        .unwrap();
    let check = || {
        policy.check(
            AutonomyLevel::Supervised,
            "network:http",
            Some(roberto()),
            "https://api.example.com/v1",
        )
    };
    assert_eq!(check().await.unwrap().outcome, Outcome::Allowed);
    // Bound to another person (what the approval service sends): not theirs, nothing changes.
    let other = Principal::new("telegram", "someone-else").unwrap();
    assert!(!policy.revoke(grant.id, Some(&other)).await.unwrap());
    assert_eq!(check().await.unwrap().outcome, Outcome::Allowed);
    assert!(policy.revoke(grant.id, Some(&roberto())).await.unwrap());
    assert_eq!(check().await.unwrap().outcome, Outcome::ApprovalRequired);
    assert!(
        !policy.revoke(grant.id, None).await.unwrap(),
        "a second revoke is a no-op"
    );
    assert!(
        !policy.revoke(987_654, None).await.unwrap(),
        "an unknown id is a no-op"
    );
}

/// Seed case 10: list_grants_filtra_per_canale_e_revoked.
async fn listing_filters_by_channel_and_sender_and_hides_revoked(store: TestStore) {
    let (policy, _) = open(&store).await;
    let a = policy
        .record(roberto(), "fs:read", "~/a/*", None, "", "")
        .await
        .unwrap();
    let b = policy
        .record(who("telegram", "anna"), "fs:read", "~/b/*", None, "", "")
        .await
        .unwrap();
    let c = policy
        .record(who("cli", "roberto"), "fs:read", "~/c/*", None, "", "")
        .await
        .unwrap();
    let d = policy
        .record(roberto(), "calendar:read", "family", None, "", "")
        .await
        .unwrap();
    assert!(policy.revoke(d.id, None).await.unwrap());

    let ids =
        |grants: Vec<metnos_policy::grant::Grant>| grants.iter().map(|g| g.id).collect::<Vec<_>>();
    let filter = |channel: Option<&str>, sender: Option<&str>, all: bool| ListFilter {
        channel: channel.map(str::to_owned),
        sender_id: sender.map(str::to_owned),
        include_inactive: all,
    };
    // Newest first.
    assert_eq!(
        ids(policy.list(&filter(None, None, false)).await.unwrap()),
        [c.id, b.id, a.id]
    );
    assert_eq!(
        ids(policy
            .list(&filter(Some("telegram"), None, false))
            .await
            .unwrap()),
        [b.id, a.id]
    );
    assert_eq!(
        ids(policy
            .list(&filter(None, Some("roberto"), false))
            .await
            .unwrap()),
        [c.id, a.id]
    );
    assert_eq!(
        ids(policy
            .list(&filter(Some("telegram"), Some("roberto"), false))
            .await
            .unwrap()),
        [a.id]
    );
    let with_revoked = policy
        .list(&filter(Some("telegram"), Some("roberto"), true))
        .await
        .unwrap();
    assert_eq!(ids(with_revoked.clone()), [d.id, a.id]);
    assert!(with_revoked[0].revoked_at.is_some());
}

async fn expired_grants_neither_decide_nor_list(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let now = now_ms();
    raw_grant(
        &grants,
        Capability::FsRead,
        "~/old/*",
        now - DAY_MS,
        Some(now - 1),
    )
    .await;
    let d = policy
        .check(
            AutonomyLevel::Supervised,
            "fs:read",
            Some(roberto()),
            "~/old/x.txt",
        )
        .await
        .unwrap();
    assert_eq!(d.outcome, Outcome::ApprovalRequired);
    assert!(
        policy
            .list(&ListFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    let all = ListFilter {
        include_inactive: true,
        ..ListFilter::default()
    };
    assert_eq!(policy.list(&all).await.unwrap().len(), 1);
}

async fn a_deciding_grant_records_its_last_use(store: TestStore) {
    let (policy, _) = open(&store).await;
    let grant = policy
        .record(roberto(), "mail:read", "inbox@example.com", None, "", "")
        .await
        .unwrap();
    assert_eq!(grant.last_used_at, None);
    let before = now_ms();
    let d = policy
        .check(
            AutonomyLevel::ReadOnly,
            "mail:read",
            Some(roberto()),
            "inbox@example.com",
        )
        .await
        .unwrap();
    assert_eq!(d.grant_id, Some(grant.id));
    let listed = policy.list(&ListFilter::default()).await.unwrap();
    let used = listed[0]
        .last_used_at
        .expect("last_used_at set by the check");
    assert!(used >= before, "{used} < {before}");
}

async fn pruning_revokes_only_grants_unused_for_the_given_days(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let now = now_ms();
    let stale = raw_grant(
        &grants,
        Capability::FsRead,
        "~/stale/*",
        now - 40 * DAY_MS,
        None,
    )
    .await;
    let used = raw_grant(
        &grants,
        Capability::FsRead,
        "~/used/*",
        now - 40 * DAY_MS,
        None,
    )
    .await;
    let fresh = raw_grant(&grants, Capability::FsRead, "~/fresh/*", now - DAY_MS, None).await;
    // Using the old grant today keeps it.
    let d = policy
        .check(
            AutonomyLevel::Supervised,
            "fs:read",
            Some(roberto()),
            "~/used/a.txt",
        )
        .await
        .unwrap();
    assert_eq!(d.grant_id, Some(used));

    let revoked = policy.prune(30).await.unwrap();
    assert_eq!(revoked.iter().map(|g| g.id).collect::<Vec<_>>(), [stale]);
    assert!(revoked[0].revoked_at.is_some());
    let active: Vec<i64> = policy
        .list(&ListFilter::default())
        .await
        .unwrap()
        .iter()
        .map(|g| g.id)
        .collect();
    assert_eq!(active, [fresh, used]);
    assert!(
        policy.prune(30).await.unwrap().is_empty(),
        "pruning twice revokes nothing more"
    );
    assert!(matches!(
        policy.prune(0).await,
        Err(Error::InvalidUnusedDays)
    ));
}

async fn many_grants_of_one_person_still_find_the_one_that_matches(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let now = now_ms();
    let mut wanted = 0;
    for i in 0..300 {
        let id = raw_grant(
            &grants,
            Capability::FsWrite,
            &format!("~/projects/p{i}/**"),
            now,
            None,
        )
        .await;
        if i == 217 {
            wanted = id;
        }
    }
    let d = policy
        .check(
            AutonomyLevel::Supervised,
            "fs:write",
            Some(roberto()),
            "~/projects/p217/src/main.rs",
        )
        .await
        .unwrap();
    assert_eq!(d.grant_id, Some(wanted));
    let d = policy
        .check(
            AutonomyLevel::Supervised,
            "fs:write",
            Some(roberto()),
            "~/projects/p300/src/main.rs",
        )
        .await
        .unwrap();
    assert_eq!(d.outcome, Outcome::ApprovalRequired);
}

/// The grant cache (SQLite) must never hide a change: a grant recorded after a check
/// that found none, a prune, and a revocation all take effect at the next check.
async fn changes_take_effect_at_the_next_check(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let check = |target: &'static str| {
        policy.check(
            AutonomyLevel::Supervised,
            "fs:read",
            Some(roberto()),
            target,
        )
    };
    assert_eq!(
        check("~/a/1.txt").await.unwrap().outcome,
        Outcome::ApprovalRequired
    );
    let a = policy
        .record(roberto(), "fs:read", "~/a/*", None, "", "")
        .await
        .unwrap();
    assert_eq!(check("~/a/1.txt").await.unwrap().grant_id, Some(a.id));

    let now = now_ms();
    raw_grant(
        &grants,
        Capability::FsRead,
        "~/old/*",
        now - 40 * DAY_MS,
        None,
    )
    .await;
    // Written behind the service's back; a new grant through the service refreshes, and
    // a check that does not use the old grant loads it into the cache.
    let b = policy
        .record(roberto(), "fs:read", "~/b/*", None, "", "")
        .await
        .unwrap();
    assert_eq!(check("~/b/1.txt").await.unwrap().grant_id, Some(b.id));
    let pruned = policy.prune(30).await.unwrap();
    assert_eq!(pruned.len(), 1);
    assert_eq!(
        check("~/old/1.txt").await.unwrap().outcome,
        Outcome::ApprovalRequired
    );

    assert!(policy.revoke(a.id, None).await.unwrap());
    assert_eq!(
        check("~/a/1.txt").await.unwrap().outcome,
        Outcome::ApprovalRequired
    );
}

/// A person with more grants than the cache keeps per entry is still answered right.
async fn a_person_with_very_many_grants_is_answered_from_the_store(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let home = std::path::Path::new("/home/roberto");
    let batch: Vec<NewGrant> = (0..10_050)
        .map(|i| {
            let target = format!("~/many/d{i}/*");
            NewGrant {
                principal: roberto(),
                capability: Capability::FsRead,
                pattern: Pattern::parse(
                    metnos_core::capability::TargetKind::PathGlob,
                    &target,
                    home,
                )
                .unwrap(),
                target,
                expires_at: None,
                granted_by: String::new(),
                idempotency_key: None,
            }
        })
        .collect();
    grants.record_many(&batch, now_ms()).await.unwrap();
    for _ in 0..2 {
        let d = policy
            .check(
                AutonomyLevel::Supervised,
                "fs:read",
                Some(roberto()),
                "~/many/d10049/x",
            )
            .await
            .unwrap();
        assert_eq!(d.outcome, Outcome::Allowed);
        let d = policy
            .check(
                AutonomyLevel::Supervised,
                "fs:read",
                Some(roberto()),
                "~/many/d10050/x",
            )
            .await
            .unwrap();
        assert_eq!(d.outcome, Outcome::ApprovalRequired);
    }
}

/// Replicas sharing PostgreSQL see each other's grants and revocations at once.
#[tokio::test]
async fn replicas_sharing_postgres_agree_at_once() {
    async fn check(policy: &Policy) -> metnos_policy::outcome::Decision {
        policy
            .check(
                AutonomyLevel::Supervised,
                "fs:write",
                Some(roberto()),
                "~/shared/x.txt",
            )
            .await
            .unwrap()
    }
    let store = TestStore::postgres().await;
    let (a, _) = open(&store).await;
    let (b, _) = open(&store).await;
    assert_eq!(check(&b).await.outcome, Outcome::ApprovalRequired);
    let grant = a
        .record(roberto(), "fs:write", "~/shared/*", None, "", "")
        .await
        .unwrap();
    assert_eq!(check(&b).await.grant_id, Some(grant.id));
    assert!(a.revoke(grant.id, None).await.unwrap());
    assert_eq!(check(&b).await.outcome, Outcome::ApprovalRequired);
}

/// Twins an approval recorded before idempotency keys existed: the migration revokes them
/// all (which one the approval names cannot be known; the person is asked again) and keys
/// each approval's first grant, so a retry finds it (revoked: access is not restored).
/// Nothing else is touched.
async fn an_approval_s_old_twins_are_revoked_by_the_migration(store: TestStore) {
    let (_, grants) = open(&store).await;
    let old = |granted_by: &str, sender: &str| NewGrant {
        principal: who("telegram", sender),
        capability: Capability::FsWrite,
        target: "~/Documents/*".to_owned(),
        pattern: Pattern::parse(
            Capability::FsWrite.spec().target_kind,
            "~/Documents/*",
            std::path::Path::new("/home/roberto"),
        )
        .unwrap(),
        expires_at: None,
        granted_by: granted_by.to_owned(),
        idempotency_key: None,
    };
    let mut ids = Vec::new();
    for (by, sender) in [
        ("approval:t1", "roberto"),
        ("approval:t1", "roberto"),
        ("approval:t2", "roberto"),
        ("approval:t2", "roberto"),
        ("approval:t3", "roberto"),
        ("cli", "roberto"),
        ("cli", "roberto"),
        // Not twins: two people under one name (typed by hand).
        ("approval:x", "roberto"),
        ("approval:x", "ada"),
        // Not the approval service's spelling.
        ("Approval:t4", "roberto"),
    ] {
        ids.push(
            grants
                .record(&old(by, sender), 1_000)
                .await
                .unwrap()
                .grant()
                .id,
        );
    }
    // The person had revoked one of t2's twins.
    let pool = grants.db().pool();
    let revoke = "UPDATE grants SET revoked_at = 2000 WHERE id = $1";
    match pool {
        metnos_kit::store::Pool::Sqlite(p) => {
            sqlx::query(revoke).bind(ids[2]).execute(p).await.unwrap();
            sqlx::raw_sql(include_str!("../migrations/sqlite/0003_approval_twins.sql"))
                .execute(p)
                .await
                .unwrap();
        }
        metnos_kit::store::Pool::Postgres(p) => {
            sqlx::query(revoke).bind(ids[2]).execute(p).await.unwrap();
            sqlx::raw_sql(include_str!(
                "../migrations/postgres/0003_approval_twins.sql"
            ))
            .execute(p)
            .await
            .unwrap();
        }
    }
    let rows: Vec<(i64, bool, Option<String>)> = metnos_kit::on_db!(grants.db(), pool => {
        sqlx::query_as("SELECT id, revoked_at IS NOT NULL, idempotency_key FROM grants ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap()
    });
    assert_eq!(
        rows,
        [
            (ids[0], true, Some("approval:t1".to_owned())),
            (ids[1], true, None),
            (ids[2], true, Some("approval:t2".to_owned())),
            (ids[3], true, None),
            (ids[4], false, Some("approval:t3".to_owned())),
            (ids[5], false, None),
            (ids[6], false, None),
            (ids[7], false, None),
            (ids[8], false, None),
            (ids[9], false, None),
        ]
    );
}

/// Issue 41: a grant change whose journal record could not be written used to stand
/// anyway. Now the change and its record are one transaction.
async fn a_grant_change_the_journal_cannot_hold_is_not_made(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let kept = policy
        .record(roberto(), "fs:read", "~/notes/*", None, "cli", "")
        .await
        .unwrap();
    let rename = async |from: &str, to: &str| {
        let sql = format!("ALTER TABLE {from} RENAME TO {to}");
        metnos_kit::on_db!(grants.db(), pool => {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await.unwrap();
        });
    };
    rename("grant_changes", "grant_changes_away").await;
    let granted = policy
        .record(roberto(), "fs:write", "~/inv/*", None, "cli", "")
        .await;
    assert!(granted.is_err(), "{granted:?}");
    assert!(policy.revoke(kept.id, None).await.is_err());
    rename("grant_changes_away", "grant_changes").await;
    // Neither happened: one grant, still active; one record.
    let all = policy.list(&ListFilter::default()).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].revoked_at, None);
    assert_eq!(policy.verify_changes().await.unwrap().lines, 1);
    assert!(policy.revoke(kept.id, None).await.unwrap());
    let report = policy.verify_changes().await.unwrap();
    assert_eq!((report.lines, report.broken), (2, None));
}

/// Every change of the grant store — recorded (once per idempotency key), revoked, pruned —
/// is one chained record of its journal, which verifies whole; an edited record is named.
async fn each_grant_change_is_one_chained_record_of_the_journal(store: TestStore) {
    let (policy, grants) = open(&store).await;
    let first = policy
        .record(
            roberto(),
            "fs:write",
            "~/inv/*",
            None,
            "approval:a",
            "key-1",
        )
        .await
        .unwrap();
    let again = policy
        .record(
            roberto(),
            "fs:write",
            "~/inv/*",
            None,
            "approval:a",
            "key-1",
        )
        .await
        .unwrap();
    assert_eq!(first.id, again.id);
    let second = policy
        .record(roberto(), "fs:read", "~/notes/*", None, "cli", "")
        .await
        .unwrap();
    assert!(policy.revoke(first.id, None).await.unwrap());
    assert!(!policy.revoke(first.id, None).await.unwrap(), "once");
    let pruned = policy.prune(1).await.unwrap();
    assert!(pruned.is_empty(), "nothing unused for a day yet");
    let report = policy.verify_changes().await.unwrap();
    assert_eq!((report.lines, report.broken), (3, None));
    let (lines, _) = metnos_policy::store::CHANGES
        .read(grants.db())
        .await
        .unwrap();
    assert!(lines[0].contains("\"change\":\"granted\""), "{}", lines[0]);
    // Keys only: neither the pattern nor the approval's token is in it.
    assert!(
        !lines[0].contains("inv") && !lines[0].contains("approval:a\""),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(&format!("\"grant\":{}", second.id)),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("\"change\":\"revoked\""), "{}", lines[2]);
    // A record edited behind the service's back: named.
    metnos_kit::on_db!(grants.db(), pool => {
        sqlx::query("UPDATE grant_changes SET line = replace(line, 'granted', 'revoked') WHERE seq = 1")
            .execute(pool)
            .await
            .unwrap();
    });
    let report = policy.verify_changes().await.unwrap();
    assert_eq!(
        report.broken.as_deref(),
        Some(
            "grant changes, line 2: grant changes, line 1 was edited (this record's link to it no longer holds)"
        )
    );
}

metnos_kit::store_suite!(
    a_grant_change_the_journal_cannot_hold_is_not_made,
    each_grant_change_is_one_chained_record_of_the_journal,
    an_approval_s_old_twins_are_revoked_by_the_migration,
    changes_take_effect_at_the_next_check,
    a_person_with_very_many_grants_is_answered_from_the_store,
    a_recorded_grant_decides_a_matching_check,
    an_unknown_capability_is_refused_and_nothing_is_stored,
    revoking_a_grant_stops_it_deciding,
    listing_filters_by_channel_and_sender_and_hides_revoked,
    expired_grants_neither_decide_nor_list,
    a_deciding_grant_records_its_last_use,
    pruning_revokes_only_grants_unused_for_the_given_days,
    many_grants_of_one_person_still_find_the_one_that_matches,
);
