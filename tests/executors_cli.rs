//! `metnos executors keygen|install|sign|verify|list|run|sandbox`: the owner's whole path
//! from a fresh key to running a built-in by hand, and what tampering looks like from there.

mod common;

use common::{Sandbox, sibling_binary};
use serde_json::Value;

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[tokio::test]
async fn keygen_install_sign_list_and_run() {
    let mut sandbox = Sandbox::new();
    let exec = sibling_binary("metnos-exec");
    let catalog = sandbox.data_dir().join("executors");

    let (code, stdout, stderr) = sandbox
        .run(&["executors", "keygen", "--name", "owner"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let key = &lines(&stdout)[0];
    let public = key["public_key"].as_str().unwrap().to_owned();
    let key_file = key["key_file"].as_str().unwrap().to_owned();
    assert!(
        stderr.contains(&format!("owner = \"{public}\"")),
        "{stderr}"
    );
    let private = std::fs::read_to_string(&key_file).unwrap();
    assert!(
        !stdout.contains(private.lines().nth(1).unwrap()),
        "the private key was printed"
    );
    let (code, _, stderr) = sandbox
        .run(&["executors", "keygen", "--name", "owner"])
        .await;
    assert_eq!(code, 1);
    assert!(stderr.contains("already exists"), "{stderr}");

    let exec_text = exec.display().to_string();
    let (code, stdout, stderr) = sandbox
        .run(&["executors", "install", "--program", &exec_text])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines(&stdout).len(), 12);

    // Not yet signed and not yet trusted: listed as refused, with reasons.
    let (code, stdout, _) = sandbox.run(&["executors", "list"]).await;
    assert_eq!(code, 0);
    assert!(lines(&stdout).iter().all(|l| l["status"] == "refused"));

    let catalog_text = catalog.display().to_string();
    let (code, stdout, stderr) = sandbox
        .run(&["executors", "sign", &catalog_text, "--key", &key_file])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let signed = lines(&stdout);
    assert_eq!(signed.len(), 12);
    assert!(
        signed
            .iter()
            .all(|l| l["signer"] == "owner" && l["program_sha256"].as_str().unwrap().len() == 64)
    );

    // Signed but the key is not trusted yet.
    let (code, stdout, _) = sandbox.run(&["executors", "verify"]).await;
    assert_eq!(code, 1);
    assert!(lines(&stdout).iter().all(|l| {
        l["reason"]
            .as_str()
            .unwrap()
            .contains("not among the trusted keys")
    }));

    sandbox.set("METNOS_EXECUTORS__TRUSTED_KEYS__OWNER", &public);
    let (code, stdout, stderr) = sandbox.run(&["executors", "list"]).await;
    assert_eq!(code, 0, "{stderr}");
    let listed = lines(&stdout);
    assert_eq!(listed.len(), 12);
    let fs_read = listed.iter().find(|l| l["name"] == "fs_read").unwrap();
    assert_eq!(fs_read["capabilities"], serde_json::json!(["fs:read"]));
    assert_eq!(fs_read["signer"], "owner");
    assert_eq!(fs_read["status"], "ok");

    std::fs::write(sandbox.dir.path().join("notes.txt"), "buy milk\n").unwrap();
    let (code, stdout, stderr) = sandbox
        .run(&[
            "executors",
            "run",
            "fs_read",
            "--args",
            r#"{"path": "~/notes.txt"}"#,
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let observation = &lines(&stdout)[0];
    assert_eq!(observation["ok"], true);
    assert_eq!(observation["content"], "buy milk\n");

    let (code, stdout, _) = sandbox
        .run(&[
            "executors",
            "run",
            "fs_read",
            "--args",
            r#"{"path": "~/missing.txt"}"#,
        ])
        .await;
    assert_eq!(code, 1);
    assert_eq!(lines(&stdout)[0]["error"], "no such file: ~/missing.txt");
    let (code, _, stderr) = sandbox
        .run(&["executors", "run", "fs_read", "--args", "{oops"])
        .await;
    assert_eq!(code, 1);
    assert!(stderr.contains("--args is not JSON"), "{stderr}");

    // What shell_exec's box holds on this host, through the signed shell_exec: one line,
    // exit 1 when it cannot be built.
    let (code, stdout, stderr) = sandbox.run(&["executors", "sandbox"]).await;
    let report = &lines(&stdout)[0];
    if report["available"] == true {
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            report["sandbox"]["namespaces"],
            serde_json::json!(["user", "pid", "net", "ipc", "mount"])
        );
        assert_eq!(report["allow_unsandboxed"], false);
    } else {
        assert_eq!(code, 1, "{report}");
        let error = report["error"].as_str().unwrap();
        assert!(error.contains("executors.allow_unsandboxed"), "{report}");
        eprintln!("no sandbox on this host: {report}");
    }

    // A manifest edited after signing is refused, by name and reason.
    let manifest = catalog.join("time_now/manifest.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("timeout_seconds = 5", "timeout_seconds = 600"),
    )
    .unwrap();
    let (code, stdout, _) = sandbox.run(&["executors", "verify"]).await;
    assert_eq!(code, 1);
    let refused: Vec<Value> = lines(&stdout)
        .into_iter()
        .filter(|l| l["status"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["name"], "time_now");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("signature does not match")
    );
    let (code, stdout, _) = sandbox.run(&["executors", "run", "time_now"]).await;
    assert_eq!(code, 1);
    assert_eq!(
        lines(&stdout)[0]["error"],
        "no executor named `time_now` in the catalog"
    );
}

#[tokio::test]
async fn a_malformed_trusted_key_is_a_config_error() {
    let mut sandbox = Sandbox::new();
    sandbox.set("METNOS_EXECUTORS__TRUSTED_KEYS__BOB", "not a key");
    let (code, _, stderr) = sandbox.run(&["executors", "list"]).await;
    assert_eq!(code, 2);
    assert!(
        stderr.contains("trusted key `bob` is not a base64 ed25519 public key"),
        "{stderr}"
    );
}

#[tokio::test]
async fn keygen_writes_a_key_only_its_owner_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // The umask most machines have: the modes must not come from a stricter one.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let sandbox = Sandbox::new();
    let (code, stdout, stderr) = sandbox
        .run(&["executors", "keygen", "--name", "owner"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let key_file = lines(&stdout)[0]["key_file"].as_str().unwrap().to_owned();
    let key_file = std::path::Path::new(&key_file);
    assert_eq!(mode(key_file), 0o600, "the key");
    assert_eq!(mode(key_file.parent().unwrap()), 0o700, "keys/");
    // In the configuration folder, never the data directory (no service needs it).
    let config_dir = sandbox.dir.path().join(".config/metnos");
    assert!(key_file.starts_with(&config_dir), "{}", key_file.display());
    assert_eq!(
        mode(&config_dir),
        0o700,
        "the configuration folder it created"
    );
    assert!(!sandbox.data_dir().join("keys").exists());

    // Into a folder of the person's own: the key is private, their folder keeps its mode.
    let own = sandbox.dir.path().join("mine");
    std::fs::create_dir(&own).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = own.join("signer.key").display().to_string();
    let (code, _, stderr) = sandbox
        .run(&["executors", "keygen", "--name", "signer", "--out", &out])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(mode(&own.join("signer.key")), 0o600);
    assert_eq!(mode(&own), 0o755);
}

#[tokio::test]
async fn a_stolen_signing_key_is_out_of_every_executor_s_reach() {
    // Key theft, then a forged "clock" that runs /bin/sh: the key lives in the
    // configuration folder, which no executor reads, nor the config file, nor the catalog.
    let mut sandbox = Sandbox::new();
    let key_file = sandbox.owner_first_steps().await;
    let catalog = sandbox.data_dir().join("executors").display().to_string();
    let config = sandbox.dir.path().join(".config/metnos/metnos.toml");
    std::fs::write(&config, "[turns]\ncap_steps = 5\n").unwrap();
    for path in [
        key_file.clone(),
        "~/.config/metnos/keys/owner.key".to_owned(),
        "~/.config/metnos/metnos.toml".to_owned(),
        format!("{catalog}/time_now/manifest.toml"),
    ] {
        let args = serde_json::json!({ "path": path }).to_string();
        let (_, stdout, stderr) = sandbox
            .run(&["executors", "run", "fs_read", "--args", &args])
            .await;
        let observation = &lines(&stdout)[0];
        assert_eq!(observation["ok"], false, "{path}: {stdout} {stderr}");
        assert!(
            observation["error"]
                .as_str()
                .unwrap()
                .contains("Metnos's own data"),
            "{path}: {stdout}"
        );
        assert!(!stdout.contains("PRIVATE KEY"), "{path}: {stdout}");
    }
}
