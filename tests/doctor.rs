//! `metnos doctor`: a healthy installation passes; each broken thing — no LLM, a model not
//! pulled, an unsigned catalog, a busy port, a bad bot token, a bad config, an open data
//! directory — is its own `fail` line with its fix, and exit 1.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::Sandbox;
use common::telegram::{FakeTelegram, TOKEN};
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::Value;

/// `metnos doctor --json`: (exit code, checks).
async fn doctor(sandbox: &Sandbox) -> (i32, Vec<Value>) {
    let (code, stdout, stderr) = sandbox.run(&["doctor", "--json"]).await;
    let checks = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}\n{stderr}")))
        .collect();
    (code, checks)
}

fn failing(checks: &[Value]) -> Vec<&Value> {
    checks.iter().filter(|c| c["level"] == "fail").collect()
}

/// The one failing check, which must be `name`'s.
fn the_failure<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    let failed = failing(checks);
    assert_eq!(failed.len(), 1, "{checks:#?}");
    assert_eq!(failed[0]["check"], name, "{checks:#?}");
    failed[0]
}

/// A set-up installation (the first `metnos up` ran) with a fake LLM that makes tool calls.
async fn healthy() -> (Sandbox, FakeLlm) {
    let fake = FakeLlm::start().await;
    fake.always(Reply::ToolCalls(vec![(
        "ping".into(),
        serde_json::json!({}),
    )]));
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(fake.url());
    let (code, stderr) = sandbox.up().await.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    (sandbox, fake)
}

#[tokio::test]
async fn a_set_up_installation_passes_every_check() {
    let (sandbox, fake) = healthy().await;
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 0, "{checks:#?}");
    assert!(failing(&checks).is_empty(), "{checks:#?}");
    let names: Vec<&str> = checks
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    for name in [
        "config",
        "llm:fast",
        "catalog",
        "sandbox",
        "ports",
        "data_dir",
        "certificates",
    ] {
        assert!(names.contains(&name), "{name} not checked: {names:?}");
    }
    let llm = checks.iter().find(|c| c["check"] == "llm:fast").unwrap();
    assert!(
        llm["message"]
            .as_str()
            .unwrap()
            .contains("made a tool call"),
        "{llm}"
    );
    // The model was really asked to call a tool.
    let asked = fake.received();
    assert_eq!(asked.len(), 1, "one chat call: {asked:?}");
    assert_eq!(asked[0].body["tools"][0]["function"]["name"], "ping");
    let catalog = checks.iter().find(|c| c["check"] == "catalog").unwrap();
    assert!(
        catalog["message"]
            .as_str()
            .unwrap()
            .starts_with("12 executors load"),
        "{catalog}"
    );
    // The same in lines for a person.
    let (code, stdout, _) = sandbox.run(&["doctor"]).await;
    assert_eq!(code, 0);
    assert!(
        stdout
            .lines()
            .all(|l| l.starts_with("ok ") || l.starts_with("warn ")),
        "{stdout}"
    );
}

#[tokio::test]
async fn no_llm_and_a_model_not_pulled_each_fail_with_their_fix() {
    let (mut sandbox, fake) = healthy().await;
    fake.set_models(&["llama3.2:3b"]);
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    let failure = the_failure(&checks, "llm:fast");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("has no model qwen-test"),
        "{failure}"
    );
    assert_eq!(
        failure["fix"],
        "`ollama pull qwen-test`, or set [runtime.llm.fast] model to one it has"
    );

    // A model that answers in text when it must call a tool.
    fake.set_models(&["qwen-test"]);
    fake.always(Reply::Text("pong".into()));
    let (_, checks) = doctor(&sandbox).await;
    let failure = the_failure(&checks, "llm:fast");
    assert!(
        failure["fix"].as_str().unwrap().contains("tool calling"),
        "{failure}"
    );

    // Nothing listens where the LLM should be.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    sandbox.set(
        "METNOS_RUNTIME__LLM__FAST__BASE_URL",
        &format!("http://127.0.0.1:{port}"),
    );
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    let failure = the_failure(&checks, "llm:fast");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("not reachable"),
        "{failure}"
    );
    assert!(
        failure["fix"].as_str().unwrap().contains("ollama serve"),
        "{failure}"
    );
}

#[tokio::test]
async fn an_unsigned_catalog_fails_executor_by_executor() {
    let fake = FakeLlm::start().await;
    fake.always(Reply::ToolCalls(vec![(
        "ping".into(),
        serde_json::json!({}),
    )]));
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(fake.url());
    // Installed by hand and never signed.
    let catalog = sandbox.data_dir().join("executors");
    metnos_executors::install::install_builtins(&catalog, &common::sibling_binary("metnos-exec"))
        .unwrap();
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    let failed = failing(&checks);
    assert_eq!(failed.len(), 12, "{checks:#?}");
    let read = failed
        .iter()
        .find(|c| c["check"] == "executor:fs_read")
        .unwrap();
    assert!(
        read["message"].as_str().unwrap().contains("no signature"),
        "{read}"
    );
    assert!(
        read["fix"]
            .as_str()
            .unwrap()
            .contains("metnos executors sign"),
        "{read}"
    );
}

#[tokio::test]
async fn a_busy_port_fails_with_what_to_do() {
    let (mut sandbox, _fake) = healthy().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    sandbox.set("METNOS_POLICY__LISTEN", &addr.to_string());
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    let failure = the_failure(&checks, "port:policy");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{addr} is taken")),
        "{failure}"
    );
    assert!(
        failure["fix"].as_str().unwrap().contains("policy.listen"),
        "{failure}"
    );
}

#[tokio::test]
async fn a_bad_bot_token_fails_and_is_never_shown() {
    let (mut sandbox, _fake) = healthy().await;
    let tg = FakeTelegram::start();
    sandbox.set("METNOS_TELEGRAM__API_URL", &tg.url());
    sandbox.set("METNOS_TELEGRAM_TOKEN", TOKEN);
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 0, "{checks:#?}");
    let ok = checks.iter().find(|c| c["check"] == "telegram").unwrap();
    assert_eq!(ok["message"], "the token is the bot @metnos_bot");

    let wrong = "999999:WRONG-token-secret";
    sandbox.set("METNOS_TELEGRAM_TOKEN", wrong);
    let (code, stdout, stderr) = sandbox.run(&["doctor"]).await;
    assert_eq!(code, 1);
    assert!(
        stdout.contains("fail  telegram       the bot token was refused (HTTP 401)"),
        "{stdout}"
    );
    assert!(stdout.contains("@BotFather"), "{stdout}");
    assert!(
        !stdout.contains("WRONG") && !stderr.contains("WRONG"),
        "{stdout}{stderr}"
    );

    // Telegram down: the error names the address, never the URL with the token.
    drop(tg);
    sandbox.set("METNOS_TELEGRAM__API_URL", "http://127.0.0.1:9");
    let (_, stdout, stderr) = sandbox.run(&["doctor"]).await;
    assert!(stdout.contains("does not answer"), "{stdout}");
    assert!(
        !stdout.contains("WRONG") && !stderr.contains("WRONG"),
        "{stdout}{stderr}"
    );
}

#[tokio::test]
async fn a_bad_config_and_an_open_data_directory_fail_with_their_fix() {
    let (mut sandbox, _fake) = healthy().await;
    let data = sandbox.data_dir();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    let failure = the_failure(&checks, "data_dir");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("open to other users (mode 755)"),
        "{failure}"
    );
    assert_eq!(
        failure["fix"],
        format!("chmod 700 {} (metnos up also tightens it)", data.display())
    );
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();

    sandbox.set("METNOS_TURNS__CAP_STEPS", "0");
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    assert_eq!(checks.len(), 1, "{checks:#?}");
    let failure = the_failure(&checks, "config");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("`turns.cap_steps`"),
        "{failure}"
    );
}

/// Issue 42: the doctor says how big the planner's prompt is, against the context the fast
/// tier's server gives its model; and a model that writes its tool call as text (a server
/// that did not parse it) is a warning now, not a failure: Metnos takes such calls.
#[tokio::test]
async fn the_prompt_is_weighed_against_the_context_and_a_text_call_is_a_warning() {
    let (sandbox, fake) = healthy().await;
    fake.set_context(1_000_000);
    let (_, checks) = doctor(&sandbox).await;
    let prompt = checks.iter().find(|c| c["check"] == "prompt").unwrap();
    assert_eq!(prompt["level"], "ok", "{prompt}");
    let message = prompt["message"].as_str().unwrap();
    assert!(
        message.starts_with("the system prompt and the 16 tools a turn may be offered are about ")
            && message.ends_with("% of the fast tier's context of 1000000 tokens"),
        "{message}"
    );
    let total: u64 = message
        .split("are about ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // Too small a context for it: a warning with what to do.
    fake.set_context(total);
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 0, "{checks:#?}");
    let prompt = checks.iter().find(|c| c["check"] == "prompt").unwrap();
    assert_eq!(prompt["level"], "warn", "{prompt}");
    assert!(
        prompt["message"]
            .as_str()
            .unwrap()
            .contains("100% of the fast tier's context"),
        "{prompt}"
    );
    assert!(
        prompt["fix"].as_str().unwrap().contains("num_ctx"),
        "{prompt}"
    );

    fake.always(Reply::Text(
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>".into(),
    ));
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 0, "{checks:#?}");
    let llm = checks.iter().find(|c| c["check"] == "llm:fast").unwrap();
    assert_eq!(llm["level"], "warn", "{llm}");
    assert!(
        llm["message"]
            .as_str()
            .unwrap()
            .contains("wrote its tool call as text"),
        "{llm}"
    );
}

#[path = "../services/executors/tests/mail/servers.rs"]
mod mail_servers;

/// Issue 44: each mail account and calendar is logged in to for real; a server whose
/// certificate is not trusted, or a wrong password, is a `fail` naming the key to change,
/// and the password never shows.
#[tokio::test]
async fn mail_accounts_and_calendars_are_logged_in_to_and_each_failure_names_its_fix() {
    let mail = mail_servers::Mail::start().await;
    let dav = mail_servers::Dav::start().await;
    let (mut sandbox, _fake) = healthy().await;
    let account = mail.account();
    let source = dav.source();
    for (k, v) in [
        ("IMAP_HOST", account.imap_host.clone()),
        ("IMAP_PORT", account.imap_port.to_string()),
        ("SMTP_HOST", account.smtp_host.clone()),
        ("SMTP_PORT", account.smtp_port.to_string()),
        ("SMTP_TLS", "starttls".to_owned()),
        ("USER", account.user.clone()),
        ("PASSWORD_FILE", account.password_file.display().to_string()),
        ("CA_FILE", account.ca_file.display().to_string()),
    ] {
        sandbox.set(&format!("METNOS_MAIL__ACCOUNTS__HOME__{k}"), &v);
    }
    for (k, v) in [
        ("CALDAV_URL", source.caldav_url.clone()),
        ("USER", source.user.clone()),
        ("PASSWORD_FILE", source.password_file.display().to_string()),
        ("CA_FILE", source.ca_file.display().to_string()),
    ] {
        sandbox.set(&format!("METNOS_CALENDAR__SOURCES__WORK__{k}"), &v);
    }
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 0, "{checks:#?}");
    let message = |name: &str| {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name}: {checks:#?}"))["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        message("mail:home:imap").contains("logged in to 127.0.0.1"),
        "{checks:#?}"
    );
    assert!(
        message("mail:home:smtp").contains("(nothing sent)"),
        "{checks:#?}"
    );
    assert!(
        message("calendar:work").contains("event(s) in the next week"),
        "{checks:#?}"
    );
    assert!(mail.received().is_empty());

    // The home server's CA is not named: its certificate is not trusted.
    sandbox.set("METNOS_MAIL__ACCOUNTS__HOME__CA_FILE", "");
    let (code, checks) = doctor(&sandbox).await;
    assert_eq!(code, 1);
    let imap = checks
        .iter()
        .find(|c| c["check"] == "mail:home:imap")
        .unwrap();
    assert_eq!(imap["level"], "fail", "{imap}");
    assert!(
        imap["fix"]
            .as_str()
            .unwrap()
            .contains("mail.accounts.home.ca_file"),
        "{imap}"
    );

    // A wrong password: its check fails naming the keys, and the password is not shown.
    let wrong = sandbox.dir.path().join("wrong-password");
    std::fs::write(&wrong, "hunter2-not-it\n").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    sandbox.set(
        "METNOS_MAIL__ACCOUNTS__HOME__CA_FILE",
        &account.ca_file.display().to_string(),
    );
    sandbox.set(
        "METNOS_MAIL__ACCOUNTS__HOME__PASSWORD_FILE",
        &wrong.display().to_string(),
    );
    let (code, stdout, _) = sandbox.run(&["doctor", "--json"]).await;
    assert_eq!(code, 1);
    assert!(!stdout.contains("hunter2-not-it"), "{stdout}");
    assert!(!stdout.contains(mail_servers::PASSWORD), "{stdout}");
    let checks: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for name in ["mail:home:imap", "mail:home:smtp"] {
        let check = checks.iter().find(|c| c["check"] == name).unwrap();
        assert_eq!(check["level"], "fail", "{check}");
        assert!(
            check["fix"]
                .as_str()
                .unwrap()
                .contains("mail.accounts.home.password_file"),
            "{check}"
        );
    }
}
