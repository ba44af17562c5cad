//! Metnos's own data directory: no executor reaches it, however the path is spelled, but
//! the shell's workspace.

use super::*;

/// Metnos's own folder inside the person's home, as the default data directory is
/// (`~/.local/share/metnos`), with a key in it and the shell's workspace beside it.
fn with_metnos_data(f: &Fixture) -> (metnos_executors::Runner, std::path::PathBuf) {
    let data = f.home().join(".local/share/metnos");
    std::fs::create_dir_all(data.join("pki")).unwrap();
    let key = data.join("pki/owner.key");
    std::fs::write(&key, "-----BEGIN PRIVATE KEY----- the owner's").unwrap();
    let runner = metnos_executors::Runner {
        forbidden: vec![data.clone()],
        ..f.runner()
    };
    (runner, key)
}

#[tokio::test]
async fn no_executor_reads_or_writes_metnos_s_own_data_however_the_path_is_spelled() {
    let (f, catalog) = setup();
    let (runner, key) = with_metnos_data(&f);
    std::fs::write(f.home().join("notes.txt"), "mine").unwrap();
    let home = f.home();
    std::os::unix::fs::symlink(home.join(".local/share/metnos"), home.join("innocent")).unwrap();
    for spelled in [
        "~/.local/share/metnos/pki/owner.key".to_owned(),
        key.display().to_string(),
        format!(
            "{}/.local/share/../share/metnos//pki/owner.key",
            home.display()
        ),
        "~/innocent/pki/owner.key".to_owned(),
    ] {
        let o = runner
            .check_and_run(&catalog, "fs_read", &json!({"path": spelled}))
            .await;
        assert!(!o.ok, "{spelled}: {o:?}");
        let error = o.error.as_deref().unwrap_or("");
        assert!(error.contains("Metnos's own data"), "{spelled}: {error}");
        assert!(
            !format!("{o:?}").contains("the owner's"),
            "{spelled}: {o:?}"
        );
    }
    let o = runner
        .check_and_run(
            &catalog,
            "fs_write",
            &json!({"path": "~/.local/share/metnos/pki/owner.key", "content": "x"}),
        )
        .await;
    assert!(
        !o.ok
            && o.error
                .as_deref()
                .unwrap_or("")
                .contains("Metnos's own data")
    );
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        "-----BEGIN PRIVATE KEY----- the owner's"
    );
    // The person's own files are read as before.
    let o = runner
        .check_and_run(&catalog, "fs_read", &json!({"path": "~/notes.txt"}))
        .await;
    assert!(o.ok, "{o:?}");
}

#[tokio::test]
async fn shell_exec_cannot_read_metnos_s_own_data() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let (runner, key) = with_metnos_data(&f);
    std::fs::write(f.home().join("notes.txt"), "mine").unwrap();
    let run = |command: String| {
        let runner = runner.clone();
        let catalog = &catalog;
        async move {
            runner
                .check_and_run(catalog, "shell_exec", &json!({ "command": command }))
                .await
        }
    };
    let o = run(format!("cat {}", key.display())).await;
    assert!(!o.ok, "{o:?}");
    assert!(!format!("{o:?}").contains("the owner's"), "{o:?}");
    // Nor by searching the folders around it.
    let o = run(format!(
        "grep -r PRIVATE {}",
        f.home().join(".local").display()
    ))
    .await;
    assert!(!format!("{o:?}").contains("the owner's"), "{o:?}");
    // The person's files are not the shell's to read unless the person adds their folder
    // (executors.shell_readable); the key stays hidden inside it. The workspace is writable.
    let o = run(format!("cat {}", f.home().join("notes.txt").display())).await;
    assert!(!o.ok && !format!("{o:?}").contains("mine"), "{o:?}");
    let opened = with_readable(&runner, &[f.home()]);
    let o = shell_with(
        &opened,
        &catalog,
        &format!("cat {}", f.home().join("notes.txt").display()),
    )
    .await;
    assert!(o.ok, "{o:?}");
    assert_eq!(
        o.content.as_ref().and_then(|c| c.as_str()).map(str::trim),
        Some("mine")
    );
    let o = shell_with(&opened, &catalog, &format!("cat {}", key.display())).await;
    assert!(!o.ok && !format!("{o:?}").contains("the owner's"), "{o:?}");
    let o = run("touch inside.txt".to_owned()).await;
    assert!(o.ok, "{o:?}");
}

#[tokio::test]
async fn with_the_default_layout_the_shell_reaches_its_workspace_and_nothing_else_of_metnos() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let (runner, data) = production_layout(&f);
    let run = |command: &str| {
        let runner = runner.clone();
        let catalog = &catalog;
        let args = json!({ "command": command });
        async move { runner.check_and_run(catalog, "shell_exec", &args).await }
    };
    let o = run("cat scratch.txt").await;
    assert!(o.ok, "{o:?}");
    // Relative spellings from the workspace, which lies inside the data directory.
    for command in [
        "cat ../keys/owner.key",
        "cat ../pki/owner.key",
        "cat ../planner.db",
        "cat ../turns/2026-11-24.jsonl",
        "ls ..",
        "ls ../pki",
    ] {
        let o = run(command).await;
        let seen = format!("{o:?}");
        assert!(!o.ok, "{command}: {o:?}");
        for secret in [
            "the owner's",
            "the signer's",
            "the conversations",
            "the diary",
        ] {
            assert!(!seen.contains(secret), "{command} showed {secret}: {seen}");
        }
        // Not even the names of what lies there.
        let listed = o
            .content
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        for name in ["owner.key", "planner.db", "keys", "pki"] {
            assert!(!listed.contains(name), "{command} listed {name}: {listed}");
        }
    }
    let o = run(&format!("cat {}", data.join("keys/owner.key").display())).await;
    assert!(!o.ok && !format!("{o:?}").contains("the signer's"), "{o:?}");
    let o = run("touch made.txt").await;
    assert!(o.ok && data.join("workspace/made.txt").exists(), "{o:?}");
}

#[tokio::test]
async fn with_the_default_layout_no_file_executor_reaches_metnos_s_data_but_the_workspace() {
    let (f, catalog) = setup();
    let (runner, data) = production_layout(&f);
    for path in [
        "~/.local/share/metnos/keys/owner.key",
        "~/.local/share/metnos/planner.db",
        "~/.local/share/metnos/workspace/../keys/owner.key",
    ] {
        let o = runner
            .check_and_run(&catalog, "fs_read", &json!({ "path": path }))
            .await;
        assert!(!o.ok, "{path}: {o:?}");
        assert!(
            o.error
                .as_deref()
                .unwrap_or("")
                .contains("Metnos's own data"),
            "{path}: {o:?}"
        );
    }
    let o = runner
        .check_and_run(
            &catalog,
            "fs_read",
            &json!({ "path": "~/.local/share/metnos/workspace/scratch.txt" }),
        )
        .await;
    assert!(o.ok, "{o:?}");
    assert!(data.join("workspace/scratch.txt").exists());
}

#[tokio::test]
async fn fs_list_does_not_show_what_lies_in_metnos_s_data() {
    let (f, catalog) = setup();
    let (runner, _) = production_layout(&f);
    let o = runner
        .check_and_run(
            &catalog,
            "fs_list",
            &json!({"path": "~/.local/share", "recursive": true}),
        )
        .await;
    assert!(o.ok, "{o:?}");
    let listed = o.content.as_ref().unwrap().to_string();
    for hidden in ["owner.key", "planner.db", "2026-11-24.jsonl", "pki", "keys"] {
        assert!(!listed.contains(hidden), "{hidden} listed: {listed}");
    }
    // The shell's workspace is the person's to see, listed by its own path.
    let o = runner
        .check_and_run(
            &catalog,
            "fs_list",
            &json!({"path": "~/.local/share/metnos/workspace"}),
        )
        .await;
    assert!(o.ok, "{o:?}");
    assert!(
        o.content
            .as_ref()
            .unwrap()
            .to_string()
            .contains("scratch.txt"),
        "{o:?}"
    );
}
