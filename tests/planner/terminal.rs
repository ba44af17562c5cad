//! `metnos ask` and `metnos chat` against the stack.

use super::*;

/// Thirtieth review of issue 38: what a file (or page) and the model said reached the
/// terminal raw: OSC 52 set the clipboard, SGR 8 hid every line after it (the card too).
#[tokio::test]
async fn metnos_ask_spells_terminal_escapes_from_the_world_and_the_model() {
    let s = stack_with(&[("METNOS_TURNS__CLI_LEVEL", "Full")], true).await;
    let osc = "\u{1b}]52;c;Y3VybCBldmlsfHNo\u{7}\u{1b}[8m";
    std::fs::write(s.home().join("page.txt"), format!("hello {osc} world")).unwrap();
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/page.txt"}))]));
    // A C1 control (CSI) in a call's arguments, which JSON does not escape.
    s.fake.push(tool_calls(&[(
        "fs_read",
        json!({"path": "~/other.txt", "note": "\u{9b}8m"}),
    )]));
    s.fake.push(Reply::Text(format!(
        "it says hello \u{1b}[1A\u{1b}[2K{osc} \u{202e}txt.exe"
    )));
    let output = s
        .run_with_input(&["ask", "read ~/page.txt", "--language", "en"], b"")
        .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}']),
            "{name}: {text:?}"
        );
    }
    assert!(
        stdout.contains(r"it says hello \x1b[1A\x1b[2K\x1b]52;c;"),
        "{stdout:?}"
    );
    assert!(stdout.contains(r"\u202etxt.exe"), "{stdout:?}");
    assert!(
        stderr.contains(r"hello \x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b[8m"),
        "{stderr:?}"
    );
}

#[tokio::test]
async fn metnos_ask_shows_the_steps_takes_y_from_a_pipe_and_prints_the_answer() {
    // The CLI's own level (turns.cli_level), Supervised as by default: cards are asked.
    let s = stack_with(&[("METNOS_TURNS__CLI_LEVEL", "Supervised")], true).await;
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/asked.txt", "content": "hi"}),
    )]));
    s.fake.push(Reply::Text("I wrote hi to ~/asked.txt".into()));
    let output = s
        .run_with_input(
            &["ask", "write hi to ~/asked.txt", "--language", "en"],
            b"y\n",
        )
        .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "I wrote hi to ~/asked.txt");
    assert!(stderr.contains("step 1: fs_write"), "{stderr}");
    // The card says what the call does, from the call itself.
    assert!(stderr.contains("May I create a file?"), "{stderr}");
    assert!(
        stderr.contains("~/asked.txt — new file, 2 B: «hi»"),
        "{stderr}"
    );
    // And why it asks.
    assert!(
        stderr.contains("Why: at Supervised, writing files asks first"),
        "{stderr}"
    );
    assert!(stderr.contains("approval: approved"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(s.home().join("asked.txt")).unwrap(),
        "hi"
    );

    // n: rejected, nothing written, the LLM's answer printed.
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/refused.txt", "content": "no"}),
    )]));
    s.fake.push(Reply::Text("ok, not written".into()));
    let output = s
        .run_with_input(&["ask", "write no to ~/refused.txt"], b"n\n")
        .await;
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "ok, not written"
    );
    assert!(!s.home().join("refused.txt").exists());
}

#[tokio::test]
async fn metnos_chat_runs_a_turn_per_line_with_cards_answered_inline() {
    // The CLI's own level (turns.cli_level), Supervised as by default: cards are asked.
    let s = stack_with(&[("METNOS_TURNS__CLI_LEVEL", "Supervised")], true).await;
    s.fake.push(Reply::Text("it is noon".into()));
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/chat.txt", "content": "hi"}),
    )]));
    s.fake.push(Reply::Text("written".into()));
    let output = s
        .run_with_input(
            &["chat", "--language", "en"],
            b"what time is it\nwrite hi to ~/chat.txt\ny\n/stop\n/quit\n",
        )
        .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["it is noon", "written"],
        "{stderr}"
    );
    assert!(stderr.contains("approval: approved"), "{stderr}");
    assert!(stderr.contains("nothing to stop"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(s.home().join("chat.txt")).unwrap(),
        "hi"
    );
    // The history is kept for the next session.
    let history = std::fs::read_to_string(s.sandbox.data_dir().join("chat_history")).unwrap();
    assert!(history.contains("write hi to ~/chat.txt"), "{history}");
}

#[tokio::test]
async fn the_terminal_answers_once_for_the_session_or_always_with_y_s_a_n() {
    let s = stack_with(&[("METNOS_TURNS__CLI_LEVEL", "Supervised")], true).await;
    for folder in ["inv", "docs"] {
        std::fs::create_dir_all(s.home().join(folder)).unwrap();
    }
    let write = |path: &str, answer: &str| {
        s.fake.push(tool_calls(&[(
            "fs_write",
            json!({"path": path, "content": "x"}),
        )]));
        s.fake.push(Reply::Text(answer.into()));
    };
    // An answer the card does not offer is asked again; s: for this session.
    write("~/inv/a.txt", "wrote a");
    let output = s
        .run_with_input(
            &["ask", "write x to ~/inv/a.txt", "--language", "en"],
            b"maybe\ns\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "Approve? [y] once · [s] for this session · [a] always for ~/inv/* · [n] no:"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("Please answer y, s, a or n."), "{stderr}");
    assert!(
        stderr.contains("for this session: ~/inv/* [territory: session]"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "wrote a");
    // The session covers the folder: no card, nothing read from stdin.
    write("~/inv/b.txt", "wrote b");
    let output = s
        .run_with_input(&["ask", "write x to ~/inv/b.txt", "--language", "en"], b"")
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("Approve?"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(s.home().join("inv/b.txt")).unwrap(),
        "x"
    );
    // a: always, in Italian too.
    write("~/docs/c.txt", "scritto c");
    let output = s
        .run_with_input(
            &["ask", "scrivi x in ~/docs/c.txt", "--language", "it"],
            b"a\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "Approvi? [y] una volta · [s] per questa sessione · [a] sempre per ~/docs/* · [n] no:"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("sempre per ~/docs/* [territorio: permanente]"),
        "{stderr}"
    );
    let (status, listed, _) = s.sandbox.run(&["grants", "list"]).await;
    assert_eq!(status, 0);
    assert!(
        listed.contains("~/docs/*") && listed.contains("~/inv/*"),
        "{listed}"
    );
    // y: once; the next write in that folder asks again, and n refuses it.
    std::fs::create_dir_all(s.home().join("once")).unwrap();
    write("~/once/d.txt", "wrote d");
    let output = s
        .run_with_input(
            &["ask", "write x to ~/once/d.txt", "--language", "en"],
            b"y\n",
        )
        .await;
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "wrote d");
    write("~/once/e.txt", "not written");
    let output = s
        .run_with_input(
            &["ask", "write x to ~/once/e.txt", "--language", "en"],
            b"n\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("approval: rejected"), "{stderr}");
    assert!(!s.home().join("once/e.txt").exists());
    // A command is never granted: y/n only.
    s.fake
        .push(tool_calls(&[("shell_exec", json!({"command": "echo hi"}))]));
    s.fake.push(Reply::Text("ran".into()));
    let output = s
        .run_with_input(&["ask", "run echo hi", "--language", "en"], b"s\ny\n")
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Approve? [y/n]"), "{stderr}");
    assert!(stderr.contains("Please answer y or n."), "{stderr}");
}

/// The roles and texts of the messages the LLM received in its `n`th request.
fn roles_and_texts(s: &Stack, n: usize) -> Vec<(String, String)> {
    common::roles_and_texts(&s.llm_request(n))
}

/// Issue 40, on the terminal: a follow-up in `metnos chat` sends the exchange before it
/// (the answer fenced as data); `/new` starts over; `metnos ask` is one-shot unless
/// `--continue`.
#[tokio::test]
async fn a_follow_up_at_the_terminal_carries_the_conversation_and_new_starts_over() {
    let s = stack_with(&[], true).await;
    for answer in [
        "it is noon",
        "Rome too: noon",
        "hello",
        "fine",
        "noon, as said",
    ] {
        s.fake.push(Reply::Text(answer.into()));
    }
    let output = s
        .run_with_input(
            &["chat", "--language", "en"],
            b"what time is it\nand in Rome?\n/new\nhi\n/quit\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        roles_and_texts(&s, 0),
        [("user".to_owned(), "what time is it".to_owned())]
    );
    let second = roles_and_texts(&s, 1);
    assert_eq!(second.len(), 3, "{second:#?}");
    assert_eq!(second[0], ("user".to_owned(), "what time is it".to_owned()));
    assert_eq!(second[1].0, "assistant");
    assert!(
        second[1].1.starts_with("<<untrusted-data ") && second[1].1.contains("it is noon"),
        "{}",
        second[1].1
    );
    assert_eq!(second[2], ("user".to_owned(), "and in Rome?".to_owned()));
    // After /new: only the new message.
    assert_eq!(
        roles_and_texts(&s, 2),
        [("user".to_owned(), "hi".to_owned())]
    );
    // `ask` alone is one-shot; with --continue it goes on with the terminal's thread.
    let output = s
        .run_with_input(&["ask", "--language", "en", "and now?"], b"")
        .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        roles_and_texts(&s, 3),
        [("user".to_owned(), "and now?".to_owned())]
    );
    let output = s
        .run_with_input(
            &["ask", "--continue", "--language", "en", "what did I say?"],
            b"",
        )
        .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = roles_and_texts(&s, 4);
    assert_eq!(
        last.iter()
            .filter(|(role, _)| role == "user")
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>(),
        ["hi", "what did I say?"],
        "{last:#?}"
    );
}

/// Issue 40: `metnos conversations forget` asks first (without a terminal it needs
/// `--yes`), then erases the terminal person's threads: the next `--continue` sees none of
/// them, and the turn log counts what went.
#[tokio::test]
async fn conversations_forget_asks_first_then_erases_the_thread() {
    let s = stack_with(&[], true).await;
    for answer in ["noted: 4417", "no idea"] {
        s.fake.push(Reply::Text(answer.into()));
    }
    let ask = async |args: &[&str]| {
        let output = s.run_with_input(args, b"").await;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr,
        )
    };
    let (code, _, err) = ask(&["ask", "--continue", "--language", "en", "my locker is 4417"]).await;
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = ask(&["conversations", "forget"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("add --yes"), "{err}");
    let (code, out, err) = ask(&["conversations", "forget", "--yes"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("erased 1 exchange(s) of cli:"), "{out}");
    let (code, _, err) = ask(&["ask", "--continue", "--language", "en", "my locker?"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        roles_and_texts(&s, 1),
        [("user".to_owned(), "my locker?".to_owned())]
    );
    let (_, turns, _) = s.sandbox.run(&["turns", "list"]).await;
    assert!(turns.contains("\"conversations_forgotten\""), "{turns}");
    assert!(!turns.contains("4417"), "{turns}");
    // A person that is not one is named.
    let (code, _, err) = ask(&["conversations", "forget", "--person", "nobody", "--yes"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--person `nobody`"), "{err}");
}

/// Issue 40: `metnos memory` lists, searches and forgets what the model saved, each entry
/// with where its words came from; `conversations forget --memory` erases the rest, and
/// the turn log counts it.
#[tokio::test]
async fn metnos_memory_lists_searches_and_forgets_what_was_remembered() {
    let s = stack_with(&[], true).await;
    let save = |text: &str| {
        s.fake.push(Reply::ToolCalls(vec![(
            "memory_save".into(),
            json!({"text": text}),
        )]));
        s.fake.push(Reply::Text("Noted.".into()));
    };
    save("My sister's birthday is on 3 May");
    save("The gym opens at 7");
    for asked in [
        "remember: my sister's birthday is on 3 May",
        "remember: the gym opens at 7",
    ] {
        let output = s
            .run_with_input(&["ask", "--language", "en", asked], b"")
            .await;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let (code, out, err) = s.sandbox.run(&["memory", "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("2 entries (0 from the world)"), "{out}");
    assert!(
        out.contains("«My sister's birthday is on 3 May»  (your words)"),
        "{out}"
    );
    let (code, out, err) = s
        .sandbox
        .run(&["memory", "search", "sister birthday"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let id = out.split_whitespace().next().unwrap().to_owned();
    assert!(id.starts_with("m-"), "{out}");
    let (code, out, err) = s.sandbox.run(&["memory", "forget", &id]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("forgot {id}")), "{out}");
    let (code, _, err) = s.sandbox.run(&["memory", "forget", &id]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no memory"), "{err}");
    let (_, out, _) = s.sandbox.run(&["memory", "search", "sister"]).await;
    assert!(out.contains("nothing found"), "{out}");
    let (code, out, err) = s
        .sandbox
        .run(&["conversations", "forget", "--memory", "--yes"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("erased 1 remembered entries"), "{out}");
    let (_, out, _) = s.sandbox.run(&["memory", "list"]).await;
    assert!(out.starts_with("0 entries"), "{out}");
    let (_, turns, _) = s.sandbox.run(&["turns", "list"]).await;
    assert!(turns.contains(r#""memories":1"#), "{turns}");
    assert!(!turns.contains("gym"), "{turns}");
}

/// Issue 46: a turn that pipes one step's output into the next teaches the mnestome, and
/// a missing tool fed that way is a wish; `metnos mnestome` lists, shows and forgets them,
/// names only.
#[tokio::test]
async fn metnos_mnestome_lists_shows_and_forgets_what_piping_taught() {
    let s = stack_with(&[], true).await;
    s.fake.push(Reply::ToolCalls(vec![(
        "time_now".into(),
        json!({"timezone": "UTC"}),
    )]));
    s.fake.push(Reply::ToolCalls(vec![(
        "time_now".into(),
        json!({"timezone": "{{step1.timezone}}"}),
    )]));
    s.fake.push(Reply::ToolCalls(vec![(
        "convert_timezone".into(),
        json!({"zone": "{{step1.timezone}}"}),
    )]));
    s.fake.push(Reply::Text("It is noon.".into()));
    let output = s
        .run_with_input(&["ask", "--language", "en", "what time is it in UTC?"], b"")
        .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (code, out, err) = s.sandbox.run(&["mnestome", "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("1 passage(s)"), "{out}");
    assert!(
        out.contains(
            "time_now.metadata.timezone → time_now(timezone)  weight 0.20  1 of 1 went well"
        ),
        "{out}"
    );
    assert!(
        out.contains("convert_timezone from time_now(zone)  asked 1 time(s)  weight 0.20"),
        "{out}"
    );
    assert!(!out.contains("UTC"), "names only: {out}");
    let (code, out, err) = s.sandbox.run(&["mnestome", "show", "fs_read"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("0 passage(s)"), "{out}");
    let (code, out, err) = s.sandbox.run(&["mnestome", "forget", "time_now"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("forgot 2 passage(s), wish(es) and shortcut(s) naming time_now"),
        "{out}"
    );
    let (_, out, _) = s.sandbox.run(&["mnestome", "list"]).await;
    assert_eq!(out.trim(), "0 passage(s)", "{out}");
    let (code, _, err) = s.sandbox.run(&["mnestome", "forget", " "]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("an executor's name is needed"), "{err}");
}

/// Issue 46, item 5, on the terminal: a request no tool serves ends asking what would let
/// Metnos do it; a stop as the next line is the attempt's — recorded by the vaglio
/// (the owner's non-retreat telos lowered) and said so, not "nothing to stop".
#[tokio::test]
async fn a_stop_after_an_attempt_in_metnos_chat_is_the_attempts() {
    let s = stack_with(&[], true).await;
    s.sandbox
        .sign_telos(
            "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: owner
previous_hash: genesis
---
## t.tempo — Free my time from repetitive chores
weight: 0.7
activation_threshold: 0.3
## t.coltivazione_strumenti — Try before saying I cannot
weight: 0.3
activation_threshold: 0.3
",
        )
        .await;
    let weight = || async {
        let (code, out, err) = s.sandbox.run(&["telos", "show"]).await;
        assert_eq!(code, 0, "{err}");
        out.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|t| t["non_retreat"] == true)
            .and_then(|t| t["weight_effective"].as_f64())
            .unwrap_or_else(|| panic!("{out}"))
    };
    let before = weight().await;
    s.fake.push(Reply::ToolCalls(vec![(
        "table_extract".into(),
        json!({"page": "prices"}),
    )]));
    s.fake.push(Reply::Text("I cannot.".into()));
    let output = s
        .run_with_input(
            &["chat", "--language", "en"],
            b"extract the table of prices\nstop\n/quit\n",
        )
        .await;
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{err}");
    assert!(
        out.contains("There is no tool for `table_extract`"),
        "{out}"
    );
    assert!(
        err.contains("all right: I will not look for a way to `table_extract` again today"),
        "{err}"
    );
    assert!(!err.contains("nothing to stop"), "{err}");
    let after = weight().await;
    assert!(after < before - 0.01, "{before} -> {after}");
}
