//! The data directory is its owner's alone: what Metnos writes there (stores with their
//! `-wal`, `-shm` and `.lock`, turn and verdict logs, keys, the run file, the chat
//! history, the certificates) can be read by no other user of the host, under the umask
//! most machines have (022), and an installation left open is closed at the next start.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::Sandbox;
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::json;

/// What most machines have; the tests must not pass only because this one is stricter.
fn usual_umask() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
}

/// `YYYY-MM` now (UTC), as the verdict log names its files.
fn this_month() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    metnos_vaglio::log::month_of(now)
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Every file or folder under `dir` (links not followed) that group or others may use.
fn open_to_others(dir: &Path) -> Vec<String> {
    let mut open = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.permissions().mode() & 0o077 != 0 {
            open.push(format!("{} {:o}", path.display(), mode(&path)));
        }
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    open.sort();
    open
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect()
}

/// The stores as a running stack has them (SQLite removes `-wal` and `-shm` when the
/// last connection closes): a walk over a data directory missing them would prove nothing.
fn assert_stores_open(data: &Path) {
    for service in ["policy", "vaglio", "approval", "planner", "gateway"] {
        for suffix in ["", "-wal", "-shm", ".lock"] {
            let file = data.join(format!("{service}.db{suffix}"));
            assert!(file.is_file(), "{} was not written", file.display());
        }
    }
}

/// The logs, keys and history a turn and the owner's first steps leave behind.
fn assert_written(data: &Path) {
    for file in ["chat_history", "pki/ca.key", "pki/owner.key"] {
        assert!(data.join(file).is_file(), "{file} was not written");
    }
    for dir in ["turns", "vaglio", "executors/time_now"] {
        assert!(
            !files_under(&data.join(dir)).is_empty(),
            "nothing was written in {dir}/"
        );
    }
}

#[tokio::test]
async fn nothing_metnos_writes_in_the_data_directory_is_open_to_other_users() {
    usual_umask();
    let fake = FakeLlm::start().await;
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(fake.url());
    let data = sandbox.data_dir();

    // The owner's first steps: a key, the built-ins, a signature, trust.
    sandbox.owner_first_steps().await;

    let up = sandbox.up().await;
    // A turn with a tool call: a turn log line, a verdict, a chat history.
    fake.push(Reply::ToolCalls(vec![(
        "time_now".to_owned(),
        json!({"timezone": "UTC"}),
    )]));
    fake.push(Reply::Text("it is noon".into()));
    let mut chat = sandbox
        .metnos()
        .args(["chat", "--language", "en"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = chat.stdin.take().unwrap();
        stdin.write_all(b"what time is it\n/quit\n").await.unwrap();
    }
    let output = tokio::time::timeout(common::START_LIMIT, chat.wait_with_output())
        .await
        .expect("metnos chat ended")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("it is noon"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    assert_stores_open(&data);
    assert_eq!(mode(&data), 0o700, "the data directory");
    assert_eq!(open_to_others(&data), Vec::<String>::new(), "while running");
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert_written(&data);
    assert_eq!(open_to_others(&data), Vec::<String>::new(), "after Ctrl-C");
    assert!(
        !stderr.contains("open to other users"),
        "a fresh installation has nothing to tighten: {stderr}"
    );
}

#[tokio::test]
async fn the_first_metnos_up_creates_a_private_data_directory() {
    usual_umask();
    let sandbox = Sandbox::new();
    let data = sandbox.data_dir();
    assert!(!data.exists());
    let up = sandbox.up().await;
    for file in [
        "metnos-up.json",
        "pki/owner.key",
        "planner.db",
        "planner.db.lock",
    ] {
        assert!(data.join(file).is_file(), "{file} was not written");
    }
    assert_eq!(mode(&data), 0o700);
    assert_eq!(open_to_others(&data), Vec::<String>::new());
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn an_installation_open_to_other_users_is_made_private_at_the_next_start() {
    usual_umask();
    let sandbox = Sandbox::new();
    let data = sandbox.data_dir();
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");

    // What an older version, or a copy with `cp -r`, left behind: everything open.
    let verdicts = format!("vaglio/{}.jsonl", this_month());
    for (file, text) in [
        ("turns/2026-11-01.jsonl", "{\"query\":\"my diary\"}\n"),
        (verdicts.as_str(), "{\"verdict\":\"approved\"}\n"),
        ("chat_history", "what is in my diary\n"),
        ("metnos-up.json", "{\"pid\":1,\"services\":{}}"),
    ] {
        let path = data.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let mut loosened = 0;
    let mut stack = vec![data.clone()];
    while let Some(path) = stack.pop() {
        // The catalog and the shell's workspace (the first start made both, private) are
        // the person's to arrange, and the start-up check leaves them as it finds them.
        if path == data.join("executors") || path == data.join("workspace") {
            continue;
        }
        let open = if path.is_dir() {
            stack.extend(files_under(&path));
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(open)).unwrap();
        loosened += 1;
    }
    assert!(
        open_to_others(&data).len() == loosened,
        "the setup loosened everything"
    );
    let before: Vec<(PathBuf, Vec<u8>)> =
        ["turns/2026-11-01.jsonl", verdicts.as_str(), "chat_history"]
            .iter()
            .map(|f| (data.join(f), std::fs::read(data.join(f)).unwrap()))
            .collect();

    let up = sandbox.up().await;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(
        open_to_others(&data),
        Vec::<String>::new(),
        "after the next start"
    );
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    for (path, bytes) in before {
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{} changed",
            path.display()
        );
    }
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the data directory was open to other users"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning for five services: {stderr}");
    assert!(
        warnings[0].contains(&data.display().to_string()),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("755"), "{}", warnings[0]);
}

#[tokio::test]
async fn the_verdict_log_keeps_twelve_months_and_removes_older_ones_at_start() {
    let sandbox = Sandbox::new();
    let dir = sandbox.data_dir().join("vaglio");
    std::fs::create_dir_all(&dir).unwrap();
    let current = this_month();
    for file in [
        "2020-01.jsonl".to_owned(),
        format!("{current}.jsonl"),
        "notes.txt".to_owned(),
    ] {
        std::fs::write(dir.join(&file), "{}\n").unwrap();
    }
    let up = sandbox.up().await;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !dir.join("2020-01.jsonl").exists(),
        "a month older than vaglio.log_retention_months (12) was kept"
    );
    assert!(dir.join(format!("{current}.jsonl")).exists());
    assert!(
        dir.join("notes.txt").exists(),
        "only the log's own files go"
    );
}
