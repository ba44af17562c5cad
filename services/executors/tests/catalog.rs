//! The catalog loader: what it accepts, each reason it refuses, and tampering after load.

mod common;

use common::*;
use metnos_executors::signing;
use metnos_executors::{Catalog, Trust};
use serde_json::json;

#[test]
fn the_signed_builtins_all_load() {
    let f = Fixture::with_builtins();
    let catalog = f.load();
    assert_eq!(catalog.refused(), &[]);
    let names: Vec<&str> = catalog.executors().map(|e| e.name()).collect();
    assert_eq!(
        names,
        [
            "calendar_add",
            "calendar_list",
            "fs_list",
            "fs_read",
            "fs_write",
            "mail_read",
            "mail_search",
            "mail_send",
            "parse_local",
            "shell_exec",
            "time_now",
            "web_fetch"
        ]
    );
    for executor in catalog.executors() {
        assert_eq!(executor.signer, "owner");
        let affinity = &executor.manifest.affinity;
        assert!(affinity.len() >= 8, "{}: {affinity:?}", executor.name());
        // Each runs in the small program that holds it, installed beside metnos-exec.
        let program = match executor.name() {
            "shell_exec" => SHELL,
            "web_fetch" | "parse_local" => WEB,
            n if n.starts_with("mail_") || n.starts_with("calendar_") => MAIL,
            _ => EXEC,
        };
        assert_eq!(
            executor.program,
            std::path::Path::new(program).canonicalize().unwrap(),
            "{}",
            executor.name()
        );
    }
}

#[test]
fn built_ins_are_not_installed_without_their_programs_and_an_old_catalog_is_told_why() {
    // metnos-exec alone, without metnos-web and metnos-shell beside it.
    let f = Fixture::new();
    let lonely = f.root.path().join("bin");
    std::fs::create_dir_all(&lonely).unwrap();
    std::fs::copy(EXEC, lonely.join("metnos-exec")).unwrap();
    let error =
        metnos_executors::install::install_builtins(&f.catalog_dir(), &lonely.join("metnos-exec"))
            .unwrap_err()
            .to_string();
    assert!(error.contains("metnos-"), "{error}");
    assert!(error.contains("is not beside"), "{error}");
    // A catalog installed before the split points shell_exec at metnos-exec: it says what to do.
    let out = std::process::Command::new(EXEC)
        .arg("shell_exec")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let o: metnos_executors::Observation = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!o.ok);
    let e = error_of(&o);
    assert!(e.contains("runs in metnos-shell"), "{e}");
    assert!(e.contains("metnos executors install"), "{e}");
    // And an executor no program has is named as such.
    let out = std::process::Command::new(WEB)
        .arg("nope")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let o: metnos_executors::Observation = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        o.error.as_deref(),
        Some("metnos-web has no executor `nope`")
    );
}

fn error_of(o: &metnos_executors::Observation) -> String {
    o.error.clone().unwrap_or_default()
}

fn refusal_of(catalog: &Catalog, folder: &str) -> String {
    catalog
        .refused()
        .iter()
        .find(|r| r.dir.ends_with(folder))
        .unwrap_or_else(|| panic!("{folder} was not refused: {:?}", catalog.refused()))
        .reason
        .clone()
}

#[test]
fn each_bad_executor_is_refused_with_its_reason_and_the_others_load() {
    let f = Fixture::with_builtins();
    let good = "printf '{\"ok\":true}'";
    // Malformed manifest.
    let dir = f.script_executor("malformed", good, "");
    std::fs::write(
        dir.join("manifest.toml"),
        "name = \"malformed\"\nthis is not toml",
    )
    .unwrap();
    // Not a valid JSON Schema.
    f.script_executor("bad_schema", good, "");
    let path = f.catalog_dir().join("bad_schema/manifest.toml");
    let text = std::fs::read_to_string(&path).unwrap() + "properties.x = { type = \"strnig\" }\n";
    std::fs::write(&path, text).unwrap();
    // Unknown capability.
    f.script_executor("unknown_cap", good, "");
    let path = f.catalog_dir().join("unknown_cap/manifest.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("time:read", "teleport:now");
    std::fs::write(&path, text).unwrap();
    f.sign_only_valid();

    // After signing: program changed, manifest changed, signer not trusted, no signature.
    f.script_executor("program_changed", good, "");
    f.script_executor("manifest_changed", good, "");
    f.script_executor("untrusted", good, "");
    f.script_executor("unsigned", good, "");
    // Unsigned, naming a FIFO: the catalog must not open it (an open would block the start).
    let fifo_dir = f.script_executor("unsigned_fifo", good, "");
    let fifo = fifo_dir.join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let path = fifo_dir.join("manifest.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("program = \"run.sh\""));
    std::fs::write(
        &path,
        text.replace(
            "program = \"run.sh\"",
            &format!("program = {:?}", fifo.display().to_string()),
        ),
    )
    .unwrap();
    for name in ["program_changed", "manifest_changed"] {
        metnos_executors::install::sign_dir(&f.catalog_dir().join(name), &f.key, "owner", false)
            .unwrap();
    }
    let stranger = signing::generate().unwrap();
    metnos_executors::install::sign_dir(
        &f.catalog_dir().join("untrusted"),
        &stranger,
        "mallory",
        false,
    )
    .unwrap();
    std::fs::write(
        f.catalog_dir().join("program_changed/run.sh"),
        "#!/bin/sh\nprintf '{\"ok\":true,\"content\":\"evil\"}'\n",
    )
    .unwrap();
    let path = f.catalog_dir().join("manifest_changed/manifest.toml");
    let text = std::fs::read_to_string(&path).unwrap() + "";
    std::fs::write(
        &path,
        text.replace("description = \"test", "description = \"friendly"),
    )
    .unwrap();

    let catalog = f.load();
    assert_eq!(catalog.len(), 12, "the built-ins still load");
    assert!(refusal_of(&catalog, "malformed").starts_with("malformed manifest"));
    assert!(refusal_of(&catalog, "bad_schema").contains("not a valid JSON Schema"));
    assert!(refusal_of(&catalog, "unknown_cap").contains("unknown capability `teleport:now`"));
    assert!(refusal_of(&catalog, "program_changed").contains("does not match its signed digest"));
    assert!(refusal_of(&catalog, "manifest_changed").contains("signature does not match"));
    assert!(refusal_of(&catalog, "untrusted").contains("signed by `mallory`"));
    assert!(refusal_of(&catalog, "unsigned").contains("no signature"));
    assert!(refusal_of(&catalog, "unsigned_fifo").contains("no signature"));
    assert_eq!(catalog.refused().len(), 8);
    // A refusal never carries the key.
    let key_text = signing::public_key_text(&f.key.verifying_key());
    assert!(
        catalog
            .refused()
            .iter()
            .all(|r| !r.reason.contains(&key_text))
    );
}

impl Fixture {
    /// Signs the folders that can be signed (a malformed one cannot).
    fn sign_only_valid(&self) {
        for entry in std::fs::read_dir(self.catalog_dir()).unwrap() {
            let dir = entry.unwrap().path();
            let _ = metnos_executors::install::sign_dir(&dir, &self.key, "owner", false);
        }
    }
}

#[tokio::test]
async fn an_empty_or_missing_catalog_is_a_clear_state() {
    let f = Fixture::new();
    let catalog = f.load();
    assert!(catalog.is_empty());
    assert_eq!(catalog.refused(), &[]);
    let missing = Catalog::load(&f.root.path().join("nowhere"), &f.trust);
    assert!(missing.is_empty());
    let observation = f.run(&catalog, "fs_read", json!({"path": "~/x"})).await;
    assert_eq!(error(&observation), "the catalog is empty");
}

#[tokio::test]
async fn a_program_swapped_after_loading_is_not_run() {
    let f = Fixture::new();
    f.script_executor("hello", "printf '{\"ok\":true,\"content\":\"hi\"}'", "");
    f.sign();
    let catalog = f.load();
    assert_eq!(
        content_text(&f.run(&catalog, "hello", json!({})).await),
        "hi"
    );
    // Swapped by rename, the way an attacker (or a botched upgrade) would.
    let program = f.catalog_dir().join("hello/run.sh");
    let swapped = f.catalog_dir().join("hello/swap.sh");
    std::fs::write(
        &swapped,
        "#!/bin/sh\nprintf '{\"ok\":true,\"content\":\"evil\"}'\n",
    )
    .unwrap();
    make_executable(&swapped);
    std::fs::rename(&swapped, &program).unwrap();
    let observation = f.run(&catalog, "hello", json!({})).await;
    assert!(
        error(&observation).contains("does not match its signed digest"),
        "{observation:?}"
    );
}

#[tokio::test]
async fn calls_are_checked_against_the_schema_and_the_scope_before_running() {
    let f = Fixture::with_builtins();
    let catalog = f.load();
    let o = f.run(&catalog, "fs_read", json!({"path": 5})).await;
    assert!(
        error(&o).starts_with("arguments of fs_read do not match its schema: /path:"),
        "{o:?}"
    );
    let o = f
        .run(&catalog, "fs_read", json!({"path": "~/x", "colour": "red"}))
        .await;
    assert!(error(&o).contains("colour"), "{o:?}");
    let o = f
        .run(&catalog, "fs_read", json!({"path": "/etc/passwd"}))
        .await;
    assert!(error(&o).contains("outside the allowed roots"), "{o:?}");
    let o = f.run(&catalog, "no_such", json!({})).await;
    assert_eq!(error(&o), "no executor named `no_such` in the catalog");
}

#[test]
fn trust_comes_only_from_config() {
    let f = Fixture::with_builtins();
    let catalog = Catalog::load(&f.catalog_dir(), &Trust::default());
    assert!(catalog.is_empty());
    assert!(
        catalog
            .refused()
            .iter()
            .all(|r| r.reason.contains("not among the trusted keys"))
    );
}

#[tokio::test]
async fn a_program_swapped_between_two_starts_is_refused_whatever_the_record_says() {
    let f = Fixture::new();
    f.script_executor("hello", "printf '{\"ok\":true,\"content\":\"hi\"}'", "");
    f.script_executor("other", "printf '{\"ok\":true,\"content\":\"other\"}'", "");
    f.sign();
    // Installed more than the 2 s racy window ago, as a program is at a later start.
    std::thread::sleep(std::time::Duration::from_millis(3_100));
    let record = f.root.path().join("program-digests.json");
    let first = Catalog::load_with_record(&f.catalog_dir(), &f.trust, Some(&record));
    assert_eq!(first.len(), 2);
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        text.contains("hello/run.sh") && text.contains("other/run.sh"),
        "{text}"
    );

    // Between the two starts one program is swapped by rename, same length.
    let program = f.catalog_dir().join("hello/run.sh");
    let before = std::fs::read_to_string(&program).unwrap();
    let swapped = f.catalog_dir().join("hello/swap.sh");
    std::fs::write(&swapped, before.replace("\"hi\"", "\"ev\"")).unwrap();
    make_executable(&swapped);
    std::fs::rename(&swapped, &program).unwrap();

    let next = Catalog::load_with_record(&f.catalog_dir(), &f.trust, Some(&record));
    assert_eq!(next.len(), 1, "{:?}", next.refused());
    assert!(refusal_of(&next, "hello").contains("does not match its signed digest"));
    assert_eq!(
        content_text(&f.run(&next, "other", json!({})).await),
        "other"
    );
    // The record keeps the digest the swapped file has now, under its new identity:
    // a fact for the next start, which refuses it again.
    let again = Catalog::load_with_record(&f.catalog_dir(), &f.trust, Some(&record));
    assert!(refusal_of(&again, "hello").contains("does not match its signed digest"));
}
