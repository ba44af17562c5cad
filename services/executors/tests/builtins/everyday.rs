//! The everyday built-ins: `fs_read`, `fs_write`, `fs_list`, `time_now` and `parse_local`,
//! in normal use and with their bad inputs.

use super::*;

#[tokio::test]
async fn fs_read_reads_whole_head_and_tail_and_reports_size_and_encoding() {
    let (f, catalog) = setup();
    std::fs::write(f.home().join("diary.md"), "one\ntwo\nthree è\n").unwrap();
    let o = f
        .run(&catalog, "fs_read", json!({"path": "~/diary.md"}))
        .await;
    assert_eq!(content_text(&o), "one\ntwo\nthree è\n");
    assert_eq!(meta(&o, "size"), &json!(17));
    assert_eq!(meta(&o, "encoding"), &json!("utf-8"));
    let o = f
        .run(
            &catalog,
            "fs_read",
            json!({"path": "~/diary.md", "head_bytes": 3}),
        )
        .await;
    assert_eq!(content_text(&o), "one");
    // The tail starts inside "è": the half character is skipped, not mangled.
    let o = f
        .run(
            &catalog,
            "fs_read",
            json!({"path": "~/diary.md", "tail_bytes": 2}),
        )
        .await;
    assert_eq!(content_text(&o), "\n");
    let o = f
        .run(
            &catalog,
            "fs_read",
            json!({"path": "~/diary.md", "max_bytes": 5}),
        )
        .await;
    assert_eq!(content_text(&o), "one\nt");
    assert_eq!(meta(&o, "truncated"), &json!(true));
    std::fs::write(f.home().join("latin.txt"), b"caf\xe9").unwrap();
    let o = f
        .run(&catalog, "fs_read", json!({"path": "~/latin.txt"}))
        .await;
    assert_eq!(content_text(&o), "café");
    assert_eq!(meta(&o, "encoding"), &json!("latin-1"));
}

#[tokio::test]
async fn fs_read_refuses_missing_files_folders_binaries_and_symlink_escapes() {
    let (f, catalog) = setup();
    let o = f
        .run(&catalog, "fs_read", json!({"path": "~/nope.txt"}))
        .await;
    assert_eq!(error(&o), "no such file: ~/nope.txt");
    std::fs::create_dir(f.home().join("docs")).unwrap();
    let o = f.run(&catalog, "fs_read", json!({"path": "~/docs"})).await;
    assert!(error(&o).contains("is a directory"), "{o:?}");
    std::fs::write(f.home().join("image.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let o = f
        .run(&catalog, "fs_read", json!({"path": "~/image.png"}))
        .await;
    assert!(error(&o).contains("is a binary file (16 bytes)"), "{o:?}");
    std::os::unix::fs::symlink("/etc/passwd", f.home().join("innocent.txt")).unwrap();
    let o = f
        .run(&catalog, "fs_read", json!({"path": "~/innocent.txt"}))
        .await;
    assert!(
        error(&o).contains("leads through a symbolic link to /etc/passwd"),
        "{o:?}"
    );
    let o = f
        .run(
            &catalog,
            "fs_read",
            json!({"path": "~/diary.md", "head_bytes": 1, "tail_bytes": 1}),
        )
        .await;
    assert!(error(&o).contains("not both"), "{o:?}");
}

#[test]
fn fs_read_checks_the_scope_itself_too() {
    // Run in-process with a context, as if the runner's own check had been skipped.
    let f = Fixture::new();
    std::os::unix::fs::symlink("/etc/passwd", f.home().join("link")).unwrap();
    let context = metnos_executors::ExecContext {
        user_home: f.home(),
        scope_paths: vec!["~".into()],
        ..Default::default()
    };
    let o = metnos_executors::builtin::run("fs_read", &json!({"path": "~/link"}), &context);
    assert!(error(&o).contains("symbolic link"), "{o:?}");
}

// ---- fs_write -----------------------------------------------------------------------

#[tokio::test]
async fn fs_write_creates_overwrites_and_appends_atomically() {
    let (f, catalog) = setup();
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "~/out/new.txt", "content": "hello"}),
        )
        .await;
    assert!(o.ok, "{o:?}");
    assert_eq!(meta(&o, "bytes_written"), &json!(5));
    assert_eq!(meta(&o, "created"), &json!(true));
    assert_eq!(
        std::fs::read_to_string(f.home().join("out/new.txt")).unwrap(),
        "hello"
    );
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "~/out/new.txt", "content": "again"}),
        )
        .await;
    assert!(error(&o).contains("already exists"), "{o:?}");
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "~/out/new.txt", "content": "bye", "mode": "overwrite"}),
        )
        .await;
    assert!(o.ok, "{o:?}");
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "~/out/new.txt", "content": "!", "mode": "append"}),
        )
        .await;
    assert_eq!(meta(&o, "bytes_written"), &json!(1));
    // An append begins on a line of its own: the card's appended lines never join the
    // file's last one (`export PATH=~/bin` and `:~/evil`, issue 38).
    assert_eq!(meta(&o, "new_line_added"), &json!(true));
    assert_eq!(
        std::fs::read_to_string(f.home().join("out/new.txt")).unwrap(),
        "bye\n!"
    );
    for (content, added, now) in [("?\n", true, "bye\n!\n?\n"), ("x", false, "bye\n!\n?\nx")] {
        let o = f
            .run(
                &catalog,
                "fs_write",
                json!({"path": "~/out/new.txt", "content": content, "mode": "append"}),
            )
            .await;
        assert_eq!(meta(&o, "new_line_added"), &json!(added), "{o:?}");
        assert_eq!(
            std::fs::read_to_string(f.home().join("out/new.txt")).unwrap(),
            now
        );
    }
    // No temporary files are left beside it.
    let names: Vec<String> = std::fs::read_dir(f.home().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["new.txt"]);
}

#[tokio::test]
async fn fs_write_refuses_out_of_scope_targets_and_bad_modes() {
    let (f, catalog) = setup();
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "/etc/metnos-test", "content": "x"}),
        )
        .await;
    assert!(error(&o).contains("outside the allowed roots"), "{o:?}");
    std::os::unix::fs::symlink("/etc", f.home().join("etc-link")).unwrap();
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "~/etc-link/evil", "content": "x"}),
        )
        .await;
    assert!(error(&o).contains("symbolic link"), "{o:?}");
    let o = f
        .run(
            &catalog,
            "fs_write",
            json!({"path": "~/x", "content": "x", "mode": "truncate"}),
        )
        .await;
    assert!(error(&o).contains("do not match its schema"), "{o:?}");
}

// ---- fs_list ------------------------------------------------------------------------

#[tokio::test]
async fn fs_list_lists_filters_recurses_and_caps() {
    let (f, catalog) = setup();
    let home = f.home();
    std::fs::create_dir_all(home.join("notes/deep")).unwrap();
    for name in ["a.md", "b.txt", "notes/c.md", "notes/deep/d.md"] {
        std::fs::write(home.join(name), "x").unwrap();
    }
    let o = f.run(&catalog, "fs_list", json!({"path": "~"})).await;
    assert!(o.ok, "{o:?}");
    let names: Vec<&str> = o
        .content
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.md", "b.txt", "notes"]);
    let o = f
        .run(
            &catalog,
            "fs_list",
            json!({"path": "~", "glob": "*.md", "recursive": true}),
        )
        .await;
    let names: Vec<&str> = o
        .content
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.md", "notes/c.md", "notes/deep/d.md"]);
    let o = f
        .run(
            &catalog,
            "fs_list",
            json!({"path": "~", "recursive": true, "max_entries": 2}),
        )
        .await;
    assert_eq!(meta(&o, "count"), &json!(2));
    assert_eq!(meta(&o, "truncated"), &json!(true));
    let o = f.run(&catalog, "fs_list", json!({"path": "~/a.md"})).await;
    assert!(error(&o).contains("is a file, not a folder"), "{o:?}");
    let o = f
        .run(
            &catalog,
            "fs_list",
            json!({"path": "~", "glob": "[unclosed"}),
        )
        .await;
    assert!(error(&o).contains("is not valid"), "{o:?}");
}

// ---- time_now -----------------------------------------------------------------------

#[tokio::test]
async fn time_now_answers_in_the_named_zone_and_refuses_unknown_ones() {
    let (f, catalog) = setup();
    let o = f
        .run(&catalog, "time_now", json!({"timezone": "Europe/Rome"}))
        .await;
    let text = content_text(&o);
    assert!(
        text.ends_with("+01:00") || text.ends_with("+02:00"),
        "{text}"
    );
    assert_eq!(meta(&o, "timezone"), &json!("Europe/Rome"));
    let unix = meta(&o, "unix").as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - unix).abs() < 60);
    let o = f
        .run(
            &catalog,
            "time_now",
            json!({"timezone": "Mars/Olympus_Mons"}),
        )
        .await;
    assert!(
        error(&o).starts_with("unknown time zone `Mars/Olympus_Mons`"),
        "{o:?}"
    );
}

// ---- parse_local --------------------------------------------------------------------

#[tokio::test]
async fn parse_local_turns_json_csv_and_html_into_text() {
    let (f, catalog) = setup();
    let o = f
        .run(&catalog, "parse_local", json!({"text": "{\"a\":[1,2]}"}))
        .await;
    assert_eq!(content_text(&o), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
    std::fs::write(f.home().join("people.csv"), "name,age\nAda,36\nAlan,41\n").unwrap();
    let o = f
        .run(&catalog, "parse_local", json!({"path": "~/people.csv"}))
        .await;
    assert_eq!(content_text(&o), "name | age\nAda | 36\nAlan | 41\n");
    assert_eq!(meta(&o, "rows"), &json!(2));
    let html = "<html><head><title>t</title><script>evil()</script></head><body><h1>Title</h1><p>Hello <b>world</b></p></body></html>";
    let o = f
        .run(
            &catalog,
            "parse_local",
            json!({"text": html, "format": "html"}),
        )
        .await;
    let text = content_text(&o);
    assert!(
        text.contains("Title") && text.contains("Hello") && text.contains("world"),
        "{text}"
    );
    assert!(!text.contains('<') && !text.contains("evil()"), "{text}");
}

#[tokio::test]
async fn parse_local_names_what_is_malformed() {
    let (f, catalog) = setup();
    std::fs::write(f.home().join("bad.csv"), "a,b\n1,2\n3,4,5\n").unwrap();
    let o = f
        .run(&catalog, "parse_local", json!({"path": "~/bad.csv"}))
        .await;
    assert_eq!(
        error(&o),
        "malformed CSV: line 3 has 3 fields, the header has 2"
    );
    let o = f
        .run(
            &catalog,
            "parse_local",
            json!({"text": "{\"a\": }", "format": "json"}),
        )
        .await;
    assert!(
        error(&o).starts_with("not valid JSON: expected value at line 1 column 7"),
        "{o:?}"
    );
    let o = f.run(&catalog, "parse_local", json!({})).await;
    assert!(error(&o).contains("give path"), "{o:?}");
    let o = f
        .run(&catalog, "parse_local", json!({"path": "~/missing.json"}))
        .await;
    assert_eq!(error(&o), "no such file: ~/missing.json");
}
