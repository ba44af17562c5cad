//! `shell_exec`: allowed programs in the workspace, what is not allowed, its limits.

use super::*;

#[tokio::test]
async fn shell_exec_runs_allowed_programs_in_the_workspace() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let o = f
        .run(
            &catalog,
            "shell_exec",
            json!({"command": "echo 'hello world'"}),
        )
        .await;
    assert_eq!(content_text(&o), "hello world\n");
    assert_eq!(meta(&o, "exit_code"), &json!(0));
    assert_eq!(
        meta(&o, "cwd"),
        &json!(f.workspace().canonicalize().unwrap().display().to_string())
    );
    let o = f
        .run(
            &catalog,
            "shell_exec",
            json!({"command": "ls no-such-file"}),
        )
        .await;
    assert!(error(&o).contains("exited with status 2"), "{o:?}");
    assert!(
        meta(&o, "stderr")
            .as_str()
            .unwrap()
            .contains("no-such-file")
    );
}

#[tokio::test]
async fn shell_exec_refuses_what_is_not_allowed() {
    let (f, catalog) = setup();
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "rm -rf build"}))
        .await;
    assert!(
        error(&o).starts_with("`rm` is not an allowed program"),
        "{o:?}"
    );
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "/bin/echo hi"}))
        .await;
    assert!(error(&o).contains("is not an allowed program"), "{o:?}");
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "echo hi | cat"}))
        .await;
    assert!(
        error(&o).contains("pipes, lists and redirections are not supported"),
        "{o:?}"
    );
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "echo $(id)"}))
        .await;
    assert!(error(&o).contains("command substitution"), "{o:?}");
    let o = f
        .run(
            &catalog,
            "shell_exec",
            json!({"command": "ls", "cwd": "../.."}),
        )
        .await;
    assert!(error(&o).contains("outside the workspace"), "{o:?}");
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "echo 'unclosed"}))
        .await;
    assert_eq!(error(&o), "the command has an unclosed quote");
}

#[tokio::test]
async fn shell_exec_holds_the_file_size_limit() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    // 3 MB into a file with a 1 MB limit: the kernel stops it.
    let o = f
        .run(
            &catalog,
            "shell_exec",
            json!({"command": "dd if=/dev/zero of=big bs=1M count=3"}),
        )
        .await;
    assert!(!o.ok, "{o:?}");
    let size = std::fs::metadata(f.workspace().join("big"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(size <= 1024 * 1024, "wrote {size} bytes");
}

#[tokio::test]
async fn shell_exec_writes_only_in_the_workspace() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let o = f
        .run(
            &catalog,
            "shell_exec",
            json!({"command": "touch inside.txt"}),
        )
        .await;
    assert!(o.ok, "{o:?}");
    assert!(f.workspace().join("inside.txt").exists());
    let outside = f.home().join("outside.txt");
    let o = f
        .run(
            &catalog,
            "shell_exec",
            json!({"command": format!("touch {}", outside.display())}),
        )
        .await;
    assert!(!o.ok, "{o:?}");
    assert!(
        meta(&o, "stderr")
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{o:?}"
    );
    assert!(
        !outside.exists(),
        "Landlock let a write outside the workspace through"
    );
}
