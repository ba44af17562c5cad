//! `metnos eval` (issue 42) against the repository's scripted model — the suite's ground
//! truth, served over the Ollama wire by a real HTTP server — and against a quirky one that
//! does what small local models really do: every call written as text the server did not
//! parse, `<think>` blocks, and per task one more quirk (Llama's `<|python_tag|>`, a lone
//! JSON call, a name that almost exists, an empty answer, `{{step…}}` left in an answer, the
//! same call in a loop). Every task passes both: the repairs make each one pass.

mod common;

use std::collections::BTreeMap;

use common::Sandbox;
use metnos::eval::suite::{self, Suite};
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::{Value, json};

/// The quirk a task's model has besides text calls and thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quirk {
    None,
    PythonTag,
    LoneJson,
    NearName,
    EmptyAnswer,
    Placeholder,
    Loop,
}

/// Which quirk each task's model has: the loop where a call is not a read (a repeated read
/// is stopped sooner, by the duplicate guard), the others in turn.
fn quirks(suite: &Suite) -> BTreeMap<String, Quirk> {
    let cycle = [
        Quirk::PythonTag,
        Quirk::NearName,
        Quirk::EmptyAnswer,
        Quirk::Placeholder,
        Quirk::LoneJson,
    ];
    suite
        .tasks
        .iter()
        .enumerate()
        .map(|(i, task)| {
            let quirk = if task.id.starts_with("time-") {
                Quirk::Loop
            } else {
                cycle[i % cycle.len()]
            };
            (task.id.clone(), quirk)
        })
        .collect()
}

/// The messages of an Ollama request.
fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

/// Whether `text` is the suite's `say`, `{site}` standing for any address.
fn says(say: &str, text: &str) -> bool {
    match say.split_once(suite::SITE) {
        None => say == text,
        Some((before, after)) => {
            let after = after.rsplit(suite::SITE).next().unwrap_or(after);
            text.starts_with(before) && text.ends_with(after)
        }
    }
}

/// The observation a tool message holds (inside the turn's fence when from the world).
fn observation(content: &str) -> Value {
    let body = match content.strip_prefix("<<untrusted-data ") {
        Some(fenced) => {
            let rest = fenced.split_once('\n').map_or("", |(_, r)| r);
            rest.rsplit_once('\n').map_or(rest, |(b, _)| b)
        }
        None => content,
    };
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// `{last}`, `{last.FIELD}` and `{site}` filled in `text`.
fn fill(text: &str, last: &Value, site: &str) -> String {
    let mut out = text.replace(suite::SITE, site);
    while let Some(start) = out.find("{last") {
        let Some(len) = out[start..].find('}') else {
            break;
        };
        let key = &out[start + 1..start + len];
        let value = match key.strip_prefix("last.") {
            Some(field) => last.get(field).cloned().unwrap_or(Value::Null),
            None if last["ok"] == true => last["content"].clone(),
            None => last["error"].clone(),
        };
        let value = match value {
            Value::String(s) => s,
            other => other.to_string(),
        };
        out.replace_range(start..start + len + 1, &value);
    }
    out
}

fn fill_args(args: &Value, last: &Value, site: &str) -> Value {
    match args {
        Value::String(s) => Value::String(fill(s, last, site)),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_args(v, last, site)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A name that almost exists, as small models write them.
fn near(name: &str) -> String {
    match name {
        "fs_read" => "read_file".to_owned(),
        "fs_write" => "write_file".to_owned(),
        "fs_list" => "list_files".to_owned(),
        "web_fetch" => "fetch_url".to_owned(),
        "time_now" => "get_time_now".to_owned(),
        other => format!("{other}s"),
    }
}

/// What the scripted model answers to `request`: the step of its turn's script that comes
/// next; with `quirks`, as a quirky model would write it.
fn answer(suite: &Suite, quirks: Option<&BTreeMap<String, Quirk>>, request: &Value) -> Reply {
    let messages = messages(request);
    let Some((at, task, turn)) = messages.iter().enumerate().rev().find_map(|(i, m)| {
        let text = m["content"].as_str()?;
        (m["role"] == "user").then_some(())?;
        suite.tasks.iter().find_map(|task| {
            let turn = task.turns.iter().find(|t| says(&t.say, text))?;
            Some((i, task, turn))
        })
    }) else {
        return Reply::Text("I do not know this task.".into());
    };
    let after = &messages[at + 1..];
    let results: Vec<Value> = after
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| observation(m["content"].as_str().unwrap_or_default()))
        .collect();
    let site = messages[at]["content"]
        .as_str()
        .and_then(|t| {
            let site = format!("http://{}:", metnos::eval::stack::PAGES_HOST);
            t.find(&site).map(|i| &t[i..])
        })
        .map(|t| t.split(['/', ' ']).take(3).collect::<Vec<_>>().join("/"))
        .unwrap_or_default();
    let quirk = quirks.map_or(Quirk::None, |q| q[&task.id]);
    let said = |what: &str| {
        after
            .iter()
            .any(|m| m["content"].as_str().unwrap_or_default().contains(what))
    };
    let errors = |what: &str| {
        results
            .iter()
            .filter(|r| r["error"].as_str().unwrap_or_default().contains(what))
            .count()
    };
    // The script's place: one step per result, but for what the quirks cost.
    let mut k = results.len() - errors("nonexistent executor");
    if quirk == Quirk::Loop && k > 0 {
        if errors("not run again") == 0 {
            k = 0;
        } else {
            k = 1;
        }
    }
    // What the model writes from: the last answer of a tool, not the planner's notes.
    let last = results
        .iter()
        .rev()
        .find(|r| {
            let error = r["error"].as_str().unwrap_or_default();
            !error.contains("nonexistent executor") && !error.contains("not run again")
        })
        .cloned()
        .unwrap_or(Value::Null);
    let step = &turn.scripted[k.min(turn.scripted.len() - 1)];
    if let Some(text) = step.get("answer").and_then(Value::as_str) {
        let text = fill(text, &last, &site);
        let Some(_) = quirks else {
            return Reply::Text(text);
        };
        let text = match quirk {
            Quirk::EmptyAnswer if !said("Your answer was empty") => String::new(),
            Quirk::Placeholder if k > 0 && !said("{{step…}} references") => {
                format!("Here it is: {{{{step{k}.content}}}}")
            }
            _ => text,
        };
        return Reply::Text(format!("<think>I have what I need.</think>\n{text}"));
    }
    let name = step["call"].as_str().unwrap_or_default().to_owned();
    let mut args = fill_args(step.get("args").unwrap_or(&json!({})), &last, &site);
    // A step refused for its name took a number: the model pipes from the one that ran.
    let refused = errors("nonexistent executor");
    if refused > 0 {
        let renumbered = args
            .to_string()
            .replace("{{step1.", &format!("{{{{step{}.", 1 + refused));
        args = serde_json::from_str(&renumbered).unwrap();
    }
    let Some(_) = quirks else {
        return Reply::ToolCalls(vec![(name, args)]);
    };
    let name = if quirk == Quirk::NearName && errors("nonexistent executor") == 0 {
        near(&name)
    } else {
        name
    };
    let call = json!({"name": name, "arguments": args});
    let written = match quirk {
        Quirk::PythonTag => format!(
            "<|python_tag|>{}<|eom_id|>",
            json!({"name": name, "parameters": args})
        ),
        Quirk::LoneJson => format!("```json\n{call}\n```"),
        _ => format!("<tool_call>\n{call}\n</tool_call>"),
    };
    Reply::Text(format!(
        "<think>The person asked: I should call {name}.</think>\n\n{written}"
    ))
}

async fn scripted_model(quirky: bool) -> FakeLlm {
    let suite = Suite::parse(suite::DEFAULT, "eval/suite.toml").unwrap();
    let fake = FakeLlm::start().await;
    fake.keep_requests(false);
    let quirks = quirky.then(|| quirks(&suite));
    fake.always(Reply::from_request(move |request| {
        answer(&suite, quirks.as_ref(), request)
    }));
    fake
}

/// `metnos eval` against `fake`: (exit code, the JSON lines, stderr).
async fn eval(fake: &FakeLlm, extra: &[&str]) -> (i32, Vec<Value>, String) {
    let sandbox = Sandbox::new();
    let mut args = vec![
        "eval",
        "--provider",
        "ollama",
        "--model",
        "qwen3:8b",
        "--base-url",
        fake.url(),
        "--turn-timeout",
        "120",
    ];
    args.extend_from_slice(extra);
    // `METNOS_EVAL_BIN`: another build of `metnos` to measure (BENCHMARKS.md: a release one).
    let program = std::env::var("METNOS_EVAL_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_metnos").to_owned());
    let output = sandbox
        .command(std::path::Path::new(&program))
        .args(&args)
        .output()
        .await
        .unwrap();
    let code = output.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (code, lines, stderr)
}

/// The default suite against `fake`, every task passing: (the JSON lines, stderr).
async fn every_task_passes(fake: &FakeLlm) -> (Vec<Value>, String) {
    let (code, lines, stderr) = eval(fake, &[]).await;
    let failures: Vec<&Value> = lines.iter().filter(|l| l["passed"] == false).collect();
    assert!(failures.is_empty(), "{failures:#?}\n{stderr}");
    assert_eq!(code, 0, "{stderr}");
    (lines, stderr)
}

#[tokio::test]
async fn the_scripted_model_passes_every_task_of_the_default_suite() {
    let fake = scripted_model(false).await;
    let (lines, stderr) = every_task_passes(&fake).await;
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["passed"], 20, "{stderr}");
    assert_eq!(summary["failed"], 0);
    assert!(
        stderr.contains("20 passed, 0 failed; median turn "),
        "{stderr}"
    );
    // What a task line says: the steps it took, its tokens, and no repairs to make.
    let read = lines.iter().find(|l| l["task"] == "read-en").unwrap();
    assert_eq!(read["steps"], 1);
    assert!(read["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(read["repairs"], json!([]));
    let scratch = lines.iter().find(|l| l["task"] == "scratchpad-en").unwrap();
    assert_eq!(scratch["steps"], 2);
    // The table, for the run's log (BENCHMARKS.md: the eval's own time per task).
    eprintln!("{stderr}");
}

#[tokio::test]
async fn the_quirky_model_passes_every_task_through_the_repairs() {
    let fake = scripted_model(true).await;
    let (lines, _) = every_task_passes(&fake).await;
    let repairs: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l["repairs"].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for kind in [
        "think",
        "text_tool_call",
        "unknown_tool",
        "repeated_call",
        "empty_answer",
        "placeholder",
    ] {
        assert!(repairs.contains(kind), "no {kind} in {repairs:?}");
    }
}

/// A model that answers every question with words only does what a broken one would:
/// the tasks that need a tool fail, each named with why, and the exit is 1 below the bar.
#[tokio::test]
async fn a_model_that_never_calls_a_tool_fails_with_reasons() {
    let fake = FakeLlm::start().await;
    fake.always(Reply::Text("I cannot do that.".into()));
    let (code, lines, stderr) = eval(&fake, &["--task", "read-en", "--task", "no-tool-en"]).await;
    assert_eq!(code, 1, "{stderr}");
    let read = lines.iter().find(|l| l["task"] == "read-en").unwrap();
    assert_eq!(read["passed"], false);
    assert_eq!(
        read["why"],
        json!(["fs_read was not called", "the answer lacks \"casa-metnos\""])
    );
    let honest = lines.iter().find(|l| l["task"] == "no-tool-en").unwrap();
    assert_eq!(honest["passed"], true, "{honest}");
    assert!(stderr.contains("1 passed, 1 failed"), "{stderr}");
}

#[tokio::test]
async fn a_bad_suite_or_model_is_refused_before_anything_starts() {
    let sandbox = Sandbox::new();
    let suite = sandbox.dir.path().join("mine.toml");
    std::fs::write(&suite, "[[task]]\nid = \"x\"\nlanguage = \"en\"\n").unwrap();
    let (code, _, stderr) = sandbox
        .run(&["eval", "--suite", suite.to_str().unwrap()])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("mine.toml") && stderr.contains("turn"),
        "{stderr}"
    );
    let (code, _, stderr) = sandbox
        .run(&["eval", "--provider", "olama", "--model", "x"])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--provider `olama`"), "{stderr}");
    let (code, _, stderr) = sandbox.run(&["eval", "--task", "nope"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no task `nope`"), "{stderr}");
    // A URL that is not one is refused without being echoed (it may hold a password).
    let (code, _, stderr) = sandbox
        .run(&[
            "eval",
            "--provider",
            "ollama",
            "--model",
            "x",
            "--base-url",
            "admin:hunter2@nas:11434",
        ])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--base-url is not an http:// or https:// URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    // The key's variable cannot move the throwaway home.
    let (code, _, stderr) = sandbox
        .run(&[
            "eval",
            "--provider",
            "openai",
            "--model",
            "x",
            "--api-key-env",
            "HOME",
        ])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("may not be HOME"), "{stderr}");
    let (code, _, stderr) = sandbox
        .run(&["eval", "--task", "read-en", "--min-pass", "2"])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--min-pass 2 is more than the 1 tasks run"),
        "{stderr}"
    );
}

/// Opt-in: `metnos eval` against the real server `METNOS_LLM_SMOKE_URL` names (with
/// `METNOS_LLM_SMOKE_PROVIDER`, ollama or openai, and `METNOS_LLM_SMOKE_MODEL`): every task
/// is run and reported. How many pass is the model's measure, not this test's.
#[tokio::test]
#[ignore = "opt-in: needs a real LLM server named by METNOS_LLM_SMOKE_URL"]
async fn smoke_metnos_eval_runs_against_a_real_server() {
    let url = std::env::var("METNOS_LLM_SMOKE_URL")
        .expect("set METNOS_LLM_SMOKE_URL to a running OpenAI-compatible or Ollama server");
    let provider =
        std::env::var("METNOS_LLM_SMOKE_PROVIDER").unwrap_or_else(|_| "openai".to_owned());
    let model = std::env::var("METNOS_LLM_SMOKE_MODEL").unwrap_or_else(|_| "default".to_owned());
    let sandbox = Sandbox::new();
    let (code, stdout, stderr) = sandbox
        .run(&[
            "eval",
            "--provider",
            &provider,
            "--model",
            &model,
            "--base-url",
            &url,
        ])
        .await;
    eprintln!("{stderr}");
    assert!(code == 0 || code == 1, "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.iter().filter(|l| l.get("task").is_some()).count(), 20);
    assert!(lines.last().unwrap()["summary"]["passed"].is_u64());
}

/// A base URL carrying a password is never printed; a model that cannot be reached fails
/// its tasks with the reason, and the exit is 1.
#[tokio::test]
async fn an_unreachable_model_fails_its_tasks_and_its_password_is_never_shown() {
    let sandbox = Sandbox::new();
    let port = common::free_port();
    let url = format!("http://eval:s3cret-pass@127.0.0.1:{port}");
    let (code, stdout, stderr) = sandbox
        .run(&[
            "eval",
            "--provider",
            "ollama",
            "--model",
            "qwen3:8b",
            "--base-url",
            &url,
            "--task",
            "no-tool-en",
        ])
        .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        !stdout.contains("s3cret") && !stderr.contains("s3cret"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("(http://127.0.0.1:{port})")),
        "{stderr}"
    );
    let line: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(line["passed"], false);
    assert!(
        line["why"][0]
            .as_str()
            .unwrap()
            .starts_with("ended as error, not answer"),
        "{line}"
    );
}

/// The person's own suite, against the fast tier of their config (no model named on the
/// command line): run as written, the default bar four in five.
#[tokio::test]
async fn your_own_suite_runs_against_your_config_s_tier() {
    let fake = FakeLlm::start().await;
    fake.always(Reply::Text("Hello there!".into()));
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(fake.url());
    let suite = sandbox.dir.path().join("mine.toml");
    std::fs::write(
        &suite,
        "[[task]]\nid = \"greet\"\nlanguage = \"en\"\n[[task.turn]]\nsay = \"Say hello.\"\nforbid = [\"*\"]\nanswer_has = [\"hello\"]\n",
    )
    .unwrap();
    let (code, stdout, stderr) = sandbox
        .run(&["eval", "--suite", suite.to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("1 tasks of ") && stderr.contains("with ollama qwen-test"),
        "{stderr}"
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["task"], "greet");
    assert_eq!(lines[0]["passed"], true, "{}", lines[0]);
    assert_eq!(lines[1]["summary"]["min_pass"], 1);
    // The model was asked the suite's words.
    let asked = fake.received();
    assert!(
        asked
            .iter()
            .any(|r| r.body.to_string().contains("Say hello."))
    );
}
