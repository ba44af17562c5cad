//! The crate graph DESIGN.md §2 asks for, read from cargo itself: services talk to each
//! other only through the contracts, so no service crate depends on another (not even to
//! test), and the shared vocabulary (`metnos-core`) depends on no service and does no IO.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

const SERVICES: [&str; 5] = [
    "metnos-policy",
    "metnos-vaglio",
    "metnos-approval",
    "metnos-planner",
    "metnos-gateway",
];

/// The workspace's packages as `cargo metadata --no-deps` describes them.
fn metadata() -> Value {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON")
}

/// Each workspace package and its dependencies (name, kind) as cargo resolves them.
fn workspace_dependencies() -> BTreeMap<String, Vec<(String, String)>> {
    let metadata = metadata();
    let mut packages = BTreeMap::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let deps = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .map(|d| {
                let kind = d["kind"].as_str().unwrap_or("normal").to_owned();
                (d["name"].as_str().unwrap_or_default().to_owned(), kind)
            })
            .collect();
        packages.insert(package["name"].as_str().unwrap().to_owned(), deps);
    }
    packages
}

#[test]
fn no_service_crate_depends_on_another_service_crate() {
    let packages = workspace_dependencies();
    let mut found = Vec::new();
    for service in SERVICES {
        let deps = packages
            .get(service)
            .unwrap_or_else(|| panic!("{service} is not in the workspace"));
        for (name, kind) in deps {
            if SERVICES.contains(&name.as_str()) && name != service {
                found.push(format!("{service} -> {name} ({kind})"));
            }
        }
        for shared in ["metnos-core", "metnos-kit", "metnos-proto"] {
            assert!(
                deps.iter()
                    .any(|(name, kind)| name == shared && kind == "normal"),
                "{service} should build on {shared}"
            );
        }
    }
    assert!(
        found.is_empty(),
        "service crates depend on each other: {found:?}"
    );
}

#[test]
fn the_shared_vocabulary_depends_on_no_service_and_no_io() {
    let packages = workspace_dependencies();
    let core = packages.get("metnos-core").expect("metnos-core exists");
    let io = [
        "tokio",
        "sqlx",
        "tonic",
        "reqwest",
        "metnos-kit",
        "teloxide",
    ];
    let bad: Vec<&String> = core
        .iter()
        .map(|(name, _)| name)
        .filter(|name| SERVICES.contains(&name.as_str()) || io.contains(&name.as_str()))
        .collect();
    assert!(bad.is_empty(), "metnos-core must stay pure: {bad:?}");
}

/// Issue 20: `make up` builds, and `make install` installs, every binary the workspace
/// has: a binary added to a crate and forgotten in the Makefile fails here, not on a
/// person's first `metnos executors install`.
#[test]
fn make_up_builds_and_make_install_installs_every_binary_of_the_workspace() {
    let metadata = metadata();
    let mut binaries: Vec<String> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .map(|t| t["name"].as_str().expect("a name").to_owned())
        .collect();
    binaries.sort();
    let makefile =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Makefile"))
            .expect("the Makefile");
    let mut listed: Vec<String> = makefile
        .lines()
        .find_map(|l| l.strip_prefix("BINS := "))
        .expect("a BINS line")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    listed.sort();
    assert_eq!(
        listed, binaries,
        "the Makefile's BINS against the workspace"
    );
    let recipe = |target: &str| {
        makefile
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{target}:")))
            .take_while(|l| l.starts_with(&format!("{target}:")) || l.starts_with('\t'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(recipe("release").contains("cargo build --release --locked --workspace --bins"));
    assert!(recipe("up").starts_with("up: release"), "{}", recipe("up"));
    assert!(recipe("install").starts_with("install: release"));
    assert!(recipe("install").contains("$(addprefix target/release/,$(BINS))"));
}
