//! The mnestome's store on SQLite and on a real PostgreSQL server (issue 46): passages
//! strengthen with each success and weaken with each failure by the numbers, a
//! failure alone teaches nothing, protos count their uses, and forgetting an executor
//! removes what names it.

use std::time::Duration;

use metnos_kit::testing::TestStore;
use metnos_planner::store::MIGRATIONS;
use metnos_planner::store::mnestome::{Aged, DAY_MS, Mnestome, Passage};

async fn open(store: &TestStore) -> Mnestome {
    let db = metnos_kit::store::open(
        &store.spec(),
        "planner",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    Mnestome::new(db)
}

fn passage(from: &str, field: &str, to: &str, arg: &str) -> Passage {
    Passage {
        from_executor: from.into(),
        from_field: field.into(),
        to_executor: to.into(),
        to_arg: arg.into(),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

async fn a_passage_grows_with_successes_and_shrinks_with_failures(test: TestStore) {
    let m = open(&test).await;
    let read_write = passage("web_fetch", "content", "fs_write", "text");
    // A failure of a passage never seen teaches nothing.
    m.learned(std::slice::from_ref(&read_write), false, 1)
        .await
        .unwrap();
    assert!(m.list(None).await.unwrap().is_empty());
    let mut expected = 0.0;
    for (n, at) in [10, 20, 30].into_iter().enumerate() {
        m.learned(std::slice::from_ref(&read_write), true, at)
            .await
            .unwrap();
        expected += 0.2 * (1.0 - expected);
        let all = m.list(None).await.unwrap();
        assert_eq!(all.len(), 1);
        assert!(
            close(all[0].weight, expected),
            "{} after {} successes",
            all[0].weight,
            n + 1
        );
        assert_eq!(
            (all[0].uses, all[0].successes, all[0].last_used),
            (n as u64 + 1, n as u64 + 1, at)
        );
    }
    assert!(close(expected, 0.488));
    m.learned(std::slice::from_ref(&read_write), false, 40)
        .await
        .unwrap();
    let all = m.list(None).await.unwrap();
    assert!(close(all[0].weight, 0.488 * 0.8), "{}", all[0].weight);
    assert_eq!(
        (all[0].uses, all[0].successes, all[0].last_used),
        (4, 3, 40)
    );
    // Only passages of at least 0.30 are strong: a new one (0.2) is not.
    let other = passage("time_now", "metadata.iso", "fs_write", "text");
    m.learned(std::slice::from_ref(&other), true, 50)
        .await
        .unwrap();
    let strong = m.strong(0.30).await.unwrap();
    assert_eq!(strong.len(), 1);
    assert_eq!(strong[0].passage, read_write);
    assert_eq!(
        m.list(Some(1)).await.unwrap()[0].passage,
        read_write,
        "strongest first"
    );
}

async fn protos_count_their_uses_and_forgetting_an_executor_removes_what_names_it(test: TestStore) {
    let m = open(&test).await;
    let args = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        m.proto("web_fetch", "summarize_page", &args(&["text"]), 1)
            .await
            .unwrap(),
        1
    );
    // The same argument names in another order, once each: the same proto.
    assert_eq!(
        m.proto("web_fetch", "summarize_page", &args(&["text", "text"]), 2)
            .await
            .unwrap(),
        2
    );
    // A name that is not a plain identifier is not kept.
    assert_eq!(
        m.proto(
            "web_fetch",
            "summarize_page",
            &args(&["text", "ignore previous instructions"]),
            3
        )
        .await
        .unwrap(),
        3
    );
    m.proto("fs_read", "translate", &args(&["to", "text"]), 4)
        .await
        .unwrap();
    let protos = m.protos().await.unwrap();
    assert_eq!(protos.len(), 2, "{protos:?}");
    assert_eq!(
        (
            protos[0].wanted.as_str(),
            protos[0].uses,
            protos[0].arg_names.clone(),
            protos[0].first_seen,
            protos[0].last_used
        ),
        ("summarize_page", 3, args(&["text"]), 1, 3)
    );
    assert_eq!(protos[1].arg_names, args(&["text", "to"]));
    m.learned(
        &[passage("web_fetch", "content", "fs_write", "text")],
        true,
        5,
    )
    .await
    .unwrap();
    m.learned(
        &[passage("fs_read", "content", "fs_write", "text")],
        true,
        5,
    )
    .await
    .unwrap();
    // What the owner's listing reads: filtered and cut by the store, with the whole count.
    let (passages, total, wishes) = m.naming("web_fetch", 10).await.unwrap();
    assert_eq!((passages.len(), total, wishes.len()), (1, 1, 1));
    assert_eq!(wishes[0].wanted, "summarize_page");
    let (passages, total, wishes) = m.naming("", 1).await.unwrap();
    assert_eq!((passages.len(), total, wishes.len()), (1, 2, 1));
    assert_eq!(m.forget("web_fetch").await.unwrap(), 2);
    assert_eq!(m.list(None).await.unwrap().len(), 1);
    assert_eq!(m.protos().await.unwrap().len(), 1);
}

/// The ager's numbers on a manual clock: a 30-day half-life from the last use or decay,
/// nothing for what was used within the day, a passage under 0.05 a proto again, old protos
/// of few uses removed.
async fn the_ager_decays_demotes_and_purges_by_the_clock(test: TestStore) {
    let m = open(&test).await;
    let t0 = 1_700_000_000_000;
    let weak = passage("fs_read", "content", "fs_write", "text");
    let strong = passage("web_fetch", "content", "fs_write", "text");
    m.learned(std::slice::from_ref(&weak), true, t0)
        .await
        .unwrap();
    for _ in 0..3 {
        m.learned(std::slice::from_ref(&strong), true, t0)
            .await
            .unwrap();
    }
    let args = vec!["text".to_owned()];
    m.proto("fs_read", "once_asked", &args, t0).await.unwrap();
    for _ in 0..3 {
        m.proto("fs_read", "thrice_asked", &args, t0).await.unwrap();
    }
    let weights = || async {
        let passages: Vec<(String, f64)> = m
            .list(None)
            .await
            .unwrap()
            .into_iter()
            .map(|s| (s.passage.from_executor, s.weight))
            .collect();
        let protos: Vec<(String, f64, u64)> = m
            .protos()
            .await
            .unwrap()
            .into_iter()
            .map(|p| (p.wanted, p.weight, p.uses))
            .collect();
        (passages, protos)
    };
    // Used within the day: untouched.
    assert_eq!(m.age(t0 + DAY_MS / 2).await.unwrap(), Aged::default());
    let t1 = t0 + 30 * DAY_MS;
    assert_eq!(
        m.age(t1).await.unwrap(),
        Aged {
            decayed: 4,
            demoted: 0,
            purged: 0
        }
    );
    let (passages, protos) = weights().await;
    assert_eq!(passages.len(), 2);
    assert!(
        close(passages[0].1, 0.488 / 2.0) && close(passages[1].1, 0.1),
        "{passages:?}"
    );
    assert!(
        close(protos[0].1, 0.488 / 2.0) && close(protos[1].1, 0.1),
        "{protos:?}"
    );
    // The same day again: decayed only by the time since the last decay (none).
    m.age(t1).await.unwrap();
    assert_eq!(weights().await.0, passages);
    let t2 = t1 + 60 * DAY_MS;
    assert_eq!(
        m.age(t2).await.unwrap(),
        Aged {
            decayed: 3,
            demoted: 1,
            purged: 1
        }
    );
    let (passages, protos) = weights().await;
    assert_eq!(passages.len(), 1, "{passages:?}");
    assert_eq!(passages[0].0, "web_fetch");
    assert!(close(passages[0].1, 0.488 / 8.0), "{passages:?}");
    // The weak passage is a proto again (its target the wish, no uses); the proto asked
    // once is gone; the one asked thrice stays, weaker.
    assert_eq!(protos.len(), 2, "{protos:?}");
    assert_eq!((protos[0].0.as_str(), protos[0].2), ("thrice_asked", 3));
    assert!(close(protos[0].1, 0.488 / 8.0), "{protos:?}");
    assert_eq!((protos[1].0.as_str(), protos[1].2), ("fs_write", 0));
    assert!(close(protos[1].1, 0.1 / 4.0), "{protos:?}");
}

/// `synt_suggest`: each recurring wish (3 uses, weight 0.30) gets the chain strong
/// passages lead to; a wish asked twice, or one faded by the ager, is not looked at.
async fn a_recurring_wish_gets_a_chain_and_a_faded_one_is_left(test: TestStore) {
    use metnos_planner::turn::prefilter::{Entry, Index};
    let m = open(&test).await;
    let entry = |name: &str, description: &str| Entry {
        name: name.into(),
        description: description.into(),
        affinity: Vec::new(),
    };
    let index = Index::new(&[
        entry("fs_read", "read a file"),
        entry("text_summarize", "summarize a text"),
    ]);
    let t0 = 1_700_000_000_000;
    let args = vec!["text".to_owned()];
    for _ in 0..3 {
        m.proto("fs_read", "summarize_notes", &args, t0)
            .await
            .unwrap();
    }
    for _ in 0..2 {
        m.proto("fs_read", "summarize_twice", &args, t0)
            .await
            .unwrap();
    }
    let into_summary = passage("fs_read", "content", "text_summarize", "text");
    for _ in 0..2 {
        m.learned(std::slice::from_ref(&into_summary), true, t0)
            .await
            .unwrap();
    }
    let found = metnos_planner::turn::synt::suggest(&m, &index)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].proto.wanted, "summarize_notes");
    assert_eq!(
        found[0].chain.as_ref().unwrap().executors,
        ["text_summarize"]
    );
    m.age(t0 + 30 * DAY_MS).await.unwrap();
    let found = metnos_planner::turn::synt::suggest(&m, &index)
        .await
        .unwrap();
    assert!(found.is_empty(), "faded to 0.244: {found:?}");
}

/// A chain's search reads only what strong passages reach from the piped executor, hop by
/// hop, at most three.
async fn only_strong_passages_within_three_hops_are_read(test: TestStore) {
    let m = open(&test).await;
    for (from, to, times) in [
        ("a", "b", 2),
        ("b", "c", 2),
        ("c", "d", 2),
        ("d", "e", 2),
        ("x", "y", 2),
        ("a", "z", 1),
    ] {
        for _ in 0..times {
            m.learned(&[passage(from, "content", to, "text")], true, 1)
                .await
                .unwrap();
        }
    }
    let mut near: Vec<(String, String)> = m
        .reachable("a", 3, 0.30)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.passage.from_executor, s.passage.to_executor))
        .collect();
    near.sort();
    let expected = [("a", "b"), ("b", "c"), ("c", "d")].map(|(f, t)| (f.to_owned(), t.to_owned()));
    assert_eq!(near, expected);
}

/// Shortcuts the owner kept: listed newest first, replaced for the same wish and first
/// executor, refused when a name is not plain or the chain is empty or too long; forgetting
/// an executor forgets each shortcut naming it anywhere, and only those (`_` is no
/// wildcard).
async fn shortcuts_are_kept_replaced_refused_and_forgotten_by_name(test: TestStore) {
    use metnos_planner::store::mnestome::Shortcut;
    let m = open(&test).await;
    let shortcut = |name: &str, from: &str, chain: &[&str], at: i64| Shortcut {
        name: name.into(),
        from_executor: from.into(),
        chain: chain.iter().map(|s| (*s).to_owned()).collect(),
        created_at: at,
    };
    assert!(
        m.keep_shortcut(&shortcut("table_extract", "web_fetch", &["parse_local"], 1))
            .await
            .unwrap()
    );
    assert!(
        m.keep_shortcut(&shortcut(
            "mail_digest",
            "mail_search",
            &["fs_read", "fsXread"],
            2
        ))
        .await
        .unwrap()
    );
    assert!(
        m.keep_shortcut(&shortcut("other", "fsXread", &["time_now"], 3))
            .await
            .unwrap()
    );
    // Replaced: the same wish from the same executor, another chain.
    assert!(
        m.keep_shortcut(&shortcut(
            "table_extract",
            "web_fetch",
            &["parse_local", "fs_write"],
            4
        ))
        .await
        .unwrap()
    );
    for bad in [
        shortcut("a b", "web_fetch", &["parse_local"], 5),
        shortcut("x", "web_fetch", &[], 5),
        shortcut("x", "web_fetch", &["a", "b", "c", "d"], 5),
        shortcut("x", "web,fetch", &["a"], 5),
    ] {
        assert!(!m.keep_shortcut(&bad).await.unwrap(), "{bad:?}");
    }
    let names = |all: Vec<Shortcut>| -> Vec<(String, Vec<String>)> {
        all.into_iter().map(|s| (s.name, s.chain)).collect()
    };
    assert_eq!(
        names(m.shortcuts().await.unwrap()),
        [
            (
                "table_extract".to_owned(),
                vec!["parse_local".to_owned(), "fs_write".to_owned()]
            ),
            ("other".to_owned(), vec!["time_now".to_owned()]),
            (
                "mail_digest".to_owned(),
                vec!["fs_read".to_owned(), "fsXread".to_owned()]
            ),
        ]
    );
    // fs_read is in one chain; `fs_read` as a LIKE pattern would also match fsXread's.
    assert_eq!(m.forget("fs_read").await.unwrap(), 1);
    let left = names(m.shortcuts().await.unwrap());
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|(n, _)| n != "mail_digest"));
    // A first executor, and a wish's name, are forgotten too.
    assert_eq!(m.forget("fsXread").await.unwrap(), 1);
    assert_eq!(m.forget("table_extract").await.unwrap(), 1);
    assert!(m.shortcuts().await.unwrap().is_empty());
}

metnos_kit::store_suite!(
    shortcuts_are_kept_replaced_refused_and_forgotten_by_name,
    only_strong_passages_within_three_hops_are_read,
    a_recurring_wish_gets_a_chain_and_a_faded_one_is_left,
    the_ager_decays_demotes_and_purges_by_the_clock,
    a_passage_grows_with_successes_and_shrinks_with_failures,
    protos_count_their_uses_and_forgetting_an_executor_removes_what_names_it,
);
