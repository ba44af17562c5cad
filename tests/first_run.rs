//! The first `metnos up` sets itself up — certificates, the owner's key, the built-ins
//! installed, signed and trusted — says so once, and later runs do nothing of it but
//! re-sign what they installed after an upgrade.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{Sandbox, sibling_binary};
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::Value;

const BUILTINS: [&str; 12] = [
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
    "web_fetch",
];

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `metnos executors list` through `metnos`: (name, status, signer) sorted.
async fn listed(sandbox: &Sandbox, metnos: &Path) -> Vec<(String, String, String)> {
    let output = sandbox
        .command(metnos)
        .args(["executors", "list"])
        .output()
        .await
        .unwrap();
    let mut rows: Vec<(String, String, String)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("status"), s("signer"))
        })
        .collect();
    rows.sort();
    rows
}

fn all_ok(signer: &str) -> Vec<(String, String, String)> {
    BUILTINS
        .iter()
        .map(|n| ((*n).to_owned(), "ok".to_owned(), signer.to_owned()))
        .collect()
}

/// `metnos executors run time_now` through `metnos`: whether the observation is ok.
async fn time_now_runs(sandbox: &Sandbox, metnos: &Path) -> bool {
    let output = sandbox
        .command(metnos)
        .args([
            "executors",
            "run",
            "time_now",
            "--args",
            r#"{"timezone":"UTC"}"#,
        ])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let observation: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    output.status.success() && observation["ok"] == true
}

const SETUP_WORDS: [&str; 5] = [
    "made the owner",
    "trusted it",
    "installed",
    "created",
    "re-signed",
];

#[tokio::test]
async fn the_first_up_sets_itself_up_and_says_so_once() {
    let sandbox = Sandbox::new();
    let home = sandbox.dir.path();
    let metnos = Path::new(env!("CARGO_BIN_EXE_metnos"));
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");

    let key = home.join(".config/metnos/keys/owner.key");
    let trust = home.join(".config/metnos/trusted_keys.toml");
    let catalog = sandbox.data_dir().join("executors");
    for expected in [
        format!("made the owner's signing key {}", key.display()),
        format!("trusted it as `owner` in {}", trust.display()),
        format!(
            "installed the built-in executors fs_read, fs_write, fs_list, web_fetch, time_now, parse_local, shell_exec, mail_search, mail_read, mail_send, calendar_list, calendar_add in {} and signed them as `owner`",
            catalog.display()
        ),
        "created the installation's CA and certificates".to_owned(),
    ] {
        assert!(stderr.contains(&expected), "{expected:?} not in:\n{stderr}");
    }
    // The key: the owner's alone, outside the data directory, never printed.
    assert_eq!(mode(&key), 0o600);
    let pem = std::fs::read_to_string(&key).unwrap();
    assert!(!stderr.contains(pem.lines().nth(1).unwrap()));
    assert_eq!(mode(&trust), 0o600);
    assert!(
        !home.join(".config/metnos/metnos.toml").exists(),
        "no config file was written"
    );

    assert_eq!(listed(&sandbox, metnos).await, all_ok("owner"));
    assert!(time_now_runs(&sandbox, metnos).await);

    // The second run has nothing to set up and says nothing of it.
    let before = std::fs::read(catalog.join("time_now/manifest.sig")).unwrap();
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    for word in SETUP_WORDS {
        assert!(
            !stderr.contains(word),
            "{word:?} in a second run:\n{stderr}"
        );
    }
    assert_eq!(
        std::fs::read(catalog.join("time_now/manifest.sig")).unwrap(),
        before
    );
}

/// `metnos` and its three executor programs copied into `<sandbox>/bin`, as
/// `make install` lays them out.
fn installed_copy(sandbox: &Sandbox) -> PathBuf {
    let bin = sandbox.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for program in [
        PathBuf::from(env!("CARGO_BIN_EXE_metnos")),
        sibling_binary("metnos-exec"),
        sibling_binary("metnos-web"),
        sibling_binary("metnos-shell"),
        sibling_binary("metnos-mail"),
    ] {
        let to = bin.join(program.file_name().unwrap());
        std::fs::copy(&program, &to).unwrap();
    }
    bin.join("metnos")
}

#[tokio::test]
async fn an_upgrade_re_signs_the_builtins_metnos_installed_and_no_one_elses() {
    let sandbox = Sandbox::new();
    let metnos = installed_copy(&sandbox);
    let catalog = sandbox.data_dir().join("executors");
    let (code, stderr) = sandbox
        .up_with({
            let mut c = sandbox.command(&metnos);
            c.arg("up");
            c
        })
        .await
        .interrupt()
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(listed(&sandbox, &metnos).await, all_ok("owner"));

    // The person's own executor, on the same program, signed with the same key.
    let theirs = catalog.join("my_clock");
    std::fs::create_dir_all(&theirs).unwrap();
    let exec = metnos.with_file_name("metnos-exec");
    std::fs::write(
        theirs.join("manifest.toml"),
        format!(
            "name = \"my_clock\"\ndescription = \"my clock\"\ncapabilities = [\"time:read\"]\nprogram = \"{}\"\nprogram_args = [\"time_now\"]\n[args]\ntype = \"object\"\n",
            exec.display()
        ),
    )
    .unwrap();
    let key = sandbox.dir.path().join(".config/metnos/keys/owner.key");
    let (code, _, stderr) = sandbox
        .run(&[
            "executors",
            "sign",
            &theirs.display().to_string(),
            "--key",
            &key.display().to_string(),
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let theirs_before = std::fs::read(theirs.join("manifest.sig")).unwrap();

    // metnos-exec swapped on its own (anything that could write it): reported at start,
    // not re-signed, so the catalog keeps refusing it.
    let mut bytes = std::fs::read(&exec).unwrap();
    bytes.extend_from_slice(b"\0a newer build");
    std::fs::write(&exec, bytes).unwrap();
    let up_copy = || {
        let mut c = sandbox.command(&metnos);
        c.arg("up");
        c
    };
    let (code, stderr) = sandbox.up_with(up_copy()).await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "left time_now as it is: {} changed while this metnos did not (no upgrade): not re-signed",
            exec.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("re-signed fs_read"), "{stderr}");
    assert!(
        !time_now_runs(&sandbox, &metnos).await,
        "the swapped program is refused"
    );

    // An upgrade: a new metnos with its programs (here: the same build copied again).
    std::fs::remove_file(&metnos).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_metnos"), &metnos).unwrap();
    let (code, stderr) = sandbox
        .up_with({
            let mut c = sandbox.command(&metnos);
            c.arg("up");
            c
        })
        .await
        .interrupt()
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} changed since the built-ins were signed: re-signed fs_read, fs_write, fs_list, time_now (only what Metnos installed itself)",
            exec.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("made the owner"), "{stderr}");
    let mut expected = all_ok("owner");
    expected.push(("my_clock".into(), "refused".into(), String::new()));
    expected.sort();
    assert_eq!(
        listed(&sandbox, &metnos).await,
        expected,
        "the person's executor is the person's to re-sign"
    );
    assert_eq!(
        std::fs::read(theirs.join("manifest.sig")).unwrap(),
        theirs_before
    );
    assert!(time_now_runs(&sandbox, &metnos).await);

    // A metnos-exec the person built themselves: their word re-signs it.
    let mut bytes = std::fs::read(&exec).unwrap();
    bytes.extend_from_slice(b"\0built by hand");
    std::fs::write(&exec, bytes).unwrap();
    assert!(!time_now_runs(&sandbox, &metnos).await);
    let output = sandbox
        .command(&metnos)
        .args(["executors", "install"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("re-signed fs_read, fs_write, fs_list, time_now"),
        "{stderr}"
    );
    assert!(time_now_runs(&sandbox, &metnos).await);
    assert_eq!(
        std::fs::read(theirs.join("manifest.sig")).unwrap(),
        theirs_before,
        "still never the person's executor"
    );
}

#[tokio::test]
async fn a_key_the_config_already_trusts_as_owner_is_never_replaced() {
    let mut sandbox = Sandbox::new();
    let someone = metnos_executors::signing::generate().unwrap();
    let theirs = metnos_executors::signing::public_key_text(&someone.verifying_key());
    sandbox.set("METNOS_EXECUTORS__TRUSTED_KEYS__OWNER", &theirs);
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("trusted it as `owner2`"), "{stderr}");
    let metnos = Path::new(env!("CARGO_BIN_EXE_metnos"));
    assert_eq!(listed(&sandbox, metnos).await, all_ok("owner2"));
}

#[tokio::test]
async fn a_catalog_filled_by_hand_is_left_alone() {
    let mut sandbox = Sandbox::new();
    sandbox.with_builtins();
    let catalog = sandbox.data_dir().join("executors");
    let before = std::fs::read(catalog.join("fs_read/manifest.sig")).unwrap();
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("installed"), "{stderr}");
    assert!(!stderr.contains("made the owner"), "{stderr}");
    assert!(!sandbox.dir.path().join(".config/metnos/keys").exists());
    assert!(
        !catalog
            .join(metnos_executors::install::RECORD_FILE)
            .exists()
    );
    assert_eq!(
        std::fs::read(catalog.join("fs_read/manifest.sig")).unwrap(),
        before
    );
}

#[tokio::test]
async fn a_trust_file_others_may_write_stops_the_stack_with_its_name() {
    let sandbox = Sandbox::new();
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    let trust = sandbox.dir.path().join(".config/metnos/trusted_keys.toml");
    std::fs::set_permissions(&trust, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, stderr) = sandbox.run(&["up"]).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!(
            "the trust file {}: group or others may write it (mode 666)",
            trust.display()
        )),
        "{stderr}"
    );
    let (code, _, stderr) = sandbox.run(&["executors", "list"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("group or others may write it"), "{stderr}");
}

/// The commands of the README's first-run block, as a person types them.
fn readme_first_run() -> Vec<Vec<String>> {
    let readme = include_str!("../README.md");
    let begin = readme
        .find("<!-- first-run:begin -->")
        .expect("the README marks its first-run commands");
    let end = readme[begin..]
        .find("<!-- first-run:end -->")
        .expect("the first-run block ends")
        + begin;
    readme[begin..end]
        .lines()
        .filter(|l| !l.starts_with("```") && !l.starts_with("<!--") && !l.trim().is_empty())
        .map(|l| {
            // A comment starts at `#` after blanks, outside quotes.
            let words = shell_words::split(l).expect("a shell line");
            words
                .into_iter()
                .take_while(|w| !w.starts_with('#'))
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn the_readme_s_first_run_gets_an_answer_that_used_a_tool() {
    use tokio::io::AsyncBufReadExt;
    let commands = readme_first_run();
    assert_eq!(
        commands.first().map(|c| c.join(" ")),
        Some("make install".to_owned()),
        "{commands:?}"
    );
    // The default LLM, with a fake Ollama where the default port stands in: OLLAMA_HOST,
    // the variable the README names for an Ollama elsewhere.
    let fake = FakeLlm::start().await;
    fake.push(Reply::ToolCalls(vec![(
        "time_now".into(),
        serde_json::json!({"timezone": "UTC"}),
    )]));
    fake.push(Reply::Text("It is the time the tool said.".into()));
    let mut sandbox = Sandbox::new();
    sandbox.set("OLLAMA_HOST", fake.url().trim_start_matches("http://"));
    let metnos = Path::new(env!("CARGO_BIN_EXE_metnos"));
    let mut up = None;
    let mut answered = None;
    for command in &commands {
        match command.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            // What `make install` does is copy the binaries this suite built (checked
            // against the Makefile by crate_graph.rs); the siblings are beside `metnos`.
            ["make", "install"] => {
                assert!(metnos.with_file_name("metnos-exec").is_file());
            }
            ["metnos", "up"] => {
                let mut child = sandbox
                    .command(metnos)
                    .arg("up")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
                let mut said = Vec::new();
                let ready = async {
                    while let Some(line) = lines.next_line().await.unwrap() {
                        let done = line.starts_with("ready:");
                        said.push(line);
                        if done {
                            break;
                        }
                    }
                };
                tokio::time::timeout(common::START_LIMIT, ready)
                    .await
                    .expect("metnos up became ready");
                assert!(
                    said.contains(&format!(
                        "fast tier: ready (qwen3:8b on ollama at {})",
                        fake.url()
                    )),
                    "{said:?}"
                );
                up = Some(child);
            }
            ["metnos", ..] => {
                let output = sandbox
                    .command(metnos)
                    .args(&command[1..])
                    .output()
                    .await
                    .unwrap();
                let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                assert!(
                    output.status.success(),
                    "{command:?}: {stdout}{}",
                    String::from_utf8_lossy(&output.stderr)
                );
                // The steps go to stderr as they happen, the answer to stdout.
                answered = Some(format!(
                    "{}{stdout}",
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            _ => panic!("the README's first run has a command this test cannot run: {command:?}"),
        }
    }
    let answer = answered.expect("the first run asks something");
    assert!(answer.contains("step 1: time_now"), "{answer}");
    assert!(answer.contains("  ok ("), "the tool ran: {answer}");
    assert!(answer.contains("It is the time the tool said."), "{answer}");
    let mut up = up.expect("the first run starts metnos up");
    common::signal(&up, "INT").await;
    let status = up.wait().await.unwrap();
    assert!(status.success(), "{status:?}");
}
