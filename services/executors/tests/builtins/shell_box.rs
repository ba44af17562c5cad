//! `shell_exec`'s box: what a command can no longer do (git's configuration, daemons, the
//! network, local sockets, other processes, Metnos's memory), and the box started ahead.

use super::*;

/// A repository in the workspace with one commit, made through shell_exec itself.
async fn repository(runner: &metnos_executors::Runner, catalog: &Catalog, f: &Fixture) {
    std::fs::create_dir_all(f.workspace()).unwrap();
    for command in [
        "git init -q repo",
        "git -C repo config user.name Tester",
        "git -C repo config user.email tester@example.invalid",
    ] {
        let o = shell(runner, catalog, command).await;
        assert!(o.ok, "{command}: {o:?}");
    }
    std::fs::write(f.workspace().join("repo/README.md"), "# TODO: write it\n").unwrap();
    for command in ["git -C repo add README.md", "git -C repo commit -qm first"] {
        let o = shell(runner, catalog, command).await;
        assert!(o.ok, "{command}: {o:?}");
    }
}

#[tokio::test]
async fn everyday_git_find_and_grep_work_in_the_workspace() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["git", "find", "grep"]);
    repository(&runner, &catalog, &f).await;
    std::fs::write(
        f.workspace().join("repo/README.md"),
        "# TODO: write it\nmore\n",
    )
    .unwrap();
    let o = shell(&runner, &catalog, "git -C repo status --short").await;
    assert_eq!(content_text(&o), " M README.md\n");
    let o = shell(&runner, &catalog, "git -C repo log --format=%s").await;
    assert_eq!(content_text(&o), "first\n");
    let o = shell(&runner, &catalog, "git -C repo diff --stat").await;
    assert!(content_text(&o).contains("README.md"), "{o:?}");
    let o = shell(&runner, &catalog, "find . -name '*.md'").await;
    assert_eq!(content_text(&o), "./repo/README.md\n");
    let o = shell(&runner, &catalog, "grep -r TODO .").await;
    assert!(
        content_text(&o).contains("./repo/README.md:# TODO"),
        "{o:?}"
    );
}

#[tokio::test]
async fn git_aliases_and_configuration_on_the_command_line_are_refused() {
    let (f, catalog) = setup();
    let runner = shell_runner(&f, &["git"]);
    std::fs::create_dir_all(f.workspace()).unwrap();
    let pwned = f.workspace().join("pwned");
    let command = format!("git -c alias.x='!touch {}' x", pwned.display());
    let o = shell(&runner, &catalog, &command).await;
    assert!(error(&o).contains("git: `-c`"), "{o:?}");
    assert!(!pwned.exists(), "the alias ran");
    // An alias the repository defines is no git command either.
    let o = shell(&runner, &catalog, "git x").await;
    assert!(
        error(&o).contains("`x` is not one of the git commands"),
        "{o:?}"
    );
}

#[tokio::test]
async fn git_transports_that_run_commands_are_refused() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["git"]);
    repository(&runner, &catalog, &f).await;
    let pwned = f.workspace().join("pwned-ext");
    // git refuses `ext::` by default; a repository's configuration may allow it.
    let config = f.workspace().join("repo/.git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[protocol \"ext\"]\n\tallow = always\n[remote \"origin\"]\n\turl = ext::touch {}\n",
        pwned.display()
    ));
    std::fs::write(&config, text).unwrap();
    let command = format!("git -C repo ls-remote 'ext::touch {}'", pwned.display());
    let o = shell(&runner, &catalog, &command).await;
    assert!(!pwned.exists(), "the ext:: transport ran");
    assert!(error(&o).contains("the `ext::` transport"), "{o:?}");
    let o = shell(&runner, &catalog, "git -C repo fetch origin").await;
    assert!(!pwned.exists(), "the ext:: transport ran");
    assert!(error(&o).contains("git is refused here"), "{o:?}");
}

#[tokio::test]
async fn a_gitconfig_planted_in_the_workspace_is_not_read() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["git"]);
    repository(&runner, &catalog, &f).await;
    let fsmonitor = f.workspace().join("pwned-fsmonitor");
    let rewrite = f.workspace().join("pwned-insteadof");
    // The workspace was the command's home: fs_write could plant a global configuration.
    std::fs::write(
        f.workspace().join(".gitconfig"),
        format!(
            "[core]\n\tfsmonitor = \"touch {}; false\"\n[protocol \"ext\"]\n\tallow = always\n[url \"ext::touch {}\"]\n\tinsteadOf = https://example.invalid/\n",
            fsmonitor.display(),
            rewrite.display()
        ),
    )
    .unwrap();
    let o = shell(&runner, &catalog, "git -C repo status --short").await;
    assert!(o.ok, "{o:?}");
    assert!(!fsmonitor.exists(), "core.fsmonitor ran");
    let o = shell(
        &runner,
        &catalog,
        "git -C repo ls-remote https://example.invalid/r.git",
    )
    .await;
    assert!(!o.ok, "{o:?}");
    assert!(
        !rewrite.exists(),
        "url.insteadOf rewrote to ext:: and it ran"
    );
}

#[tokio::test]
async fn the_repository_s_configuration_runs_nothing() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["git"]);
    repository(&runner, &catalog, &f).await;
    let config = f.workspace().join("repo/.git/config");
    let clean = std::fs::read_to_string(&config).unwrap();
    let pwned = f.workspace().join("pwned");
    // Keys git lets us override: neutralised, and git still works.
    for key in [
        "fsmonitor = \"touch {p}; false\"",
        "hooksPath = hooks",
        "pager = touch {p}",
    ] {
        let key = key.replace("{p}", &pwned.display().to_string());
        std::fs::write(&config, format!("{clean}[core]\n\t{key}\n")).unwrap();
        std::fs::create_dir_all(f.workspace().join("repo/hooks")).unwrap();
        let hook = f.workspace().join("repo/hooks/pre-commit");
        std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", pwned.display())).unwrap();
        make_executable(&hook);
        std::fs::write(f.workspace().join("repo/README.md"), key.as_bytes()).unwrap();
        for command in [
            "git -C repo status",
            "git -C repo commit -qam again",
            "git -C repo log",
        ] {
            let o = shell(&runner, &catalog, command).await;
            assert!(o.ok, "{key}: {command}: {o:?}");
        }
        assert!(!pwned.exists(), "{key} ran");
    }
    // Keys named by the repository (filters, aliases, rewrites): git is refused there.
    std::fs::write(f.workspace().join("repo/.gitattributes"), "* filter=x\n").unwrap();
    for section in [
        format!("[filter \"x\"]\n\tclean = touch {}\n", pwned.display()),
        format!("[alias]\n\tst = !touch {}\n", pwned.display()),
        format!("[diff \"x\"]\n\ttextconv = touch {}\n", pwned.display()),
    ] {
        std::fs::write(&config, format!("{clean}{section}")).unwrap();
        std::fs::write(f.workspace().join("repo/README.md"), section.as_bytes()).unwrap();
        let o = shell(&runner, &catalog, "git -C repo add README.md").await;
        assert!(
            error(&o).contains("git is refused here"),
            "{section}: {o:?}"
        );
        assert!(!pwned.exists(), "{section} ran");
    }
}

#[tokio::test]
async fn find_cannot_run_programs() {
    let (f, catalog) = setup();
    let runner = shell_runner(&f, &["find"]);
    std::fs::create_dir_all(f.workspace()).unwrap();
    let pwned = f.workspace().join("pwned");
    for action in ["-exec", "-execdir", "-ok"] {
        let command = format!("find . -maxdepth 0 {action} touch {} +", pwned.display());
        let o = shell(&runner, &catalog, &command).await;
        assert!(error(&o).contains(&format!("find: `{action}`")), "{o:?}");
    }
    assert!(!pwned.exists(), "find ran a program");
}

/// Processes whose command line is exactly `words`.
fn processes_running(words: &[&str]) -> Vec<u32> {
    let wanted = words.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes())
        })
        .collect()
}

#[tokio::test]
async fn a_daemon_does_not_outlive_its_command() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["setsid", "sleep"]);
    // `setsid -f` forks a new session and returns at once: the daemon would live on.
    let o = shell(&runner, &catalog, "setsid -f sleep 31.4159").await;
    let survivors = processes_running(&["sleep", "31.4159"]);
    for pid in &survivors {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
    assert_eq!(survivors, Vec::<u32>::new(), "a daemon outlived shell_exec");
    assert!(o.ok, "{o:?}");
    assert_eq!(meta(&o, "sandbox")["tree_killed"], json!(true));
}

#[tokio::test]
async fn the_command_has_no_network() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["bash"]);
    // What Metnos's own services do: listen on loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!("bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'");
    let o = shell(&runner, &catalog, &command).await;
    assert!(!o.ok, "{o:?}");
    // A connection to loopback is queued before connect() returns: none came.
    let accepted = listener.accept();
    assert!(
        accepted
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the command connected: {accepted:?}"
    );
    assert_eq!(meta(&o, "sandbox")["network"], json!(true));
}

/// Issue 38 (seventeenth review): Landlock guards files, not the connect() of a socket that
/// has a path. From the box a script reached the person's D-Bus at `/run/user/<uid>/bus`
/// and had her systemd run a command outside any box, with the network; an ssh-agent in
/// `/tmp` and Docker's socket the same. No Unix-domain socket is opened in the box.
#[tokio::test]
async fn the_command_reaches_no_local_socket_outside_the_box() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    // A service of the person's, listening on a socket with a path, as her bus does.
    let outside = tempfile::tempdir().unwrap();
    let path = outside.path().join("bus");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = format!(
        "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ARGV[0]) or die qq(refused: $!)' {}",
        path.display()
    );
    // Outside the box the same command connects (what the box must stop).
    let control = std::process::Command::new("sh")
        .args(["-c", &connect])
        .output()
        .unwrap();
    assert!(control.status.success(), "{control:?}");
    assert!(listener.accept().is_ok(), "the control connected");
    let runner = shell_runner(&f, &["perl"]);
    let o = shell(&runner, &catalog, &connect).await;
    assert!(!o.ok, "{o:?}");
    assert!(
        format!("{o:?}").contains("refused: Permission denied"),
        "{o:?}"
    );
    let accepted = listener.accept();
    assert!(
        accepted
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the command connected: {accepted:?}"
    );
    assert_eq!(meta(&o, "sandbox")["no_local_sockets"], json!(true));
    // Eighteenth review: a datagram pair's end sends to a path's socket (journald's); and
    // the kernel keyring, which no namespace separates.
    let datagrams = outside.path().join("journal");
    let receiver = std::os::unix::net::UnixDatagram::bind(&datagrams).unwrap();
    receiver.set_nonblocking(true).unwrap();
    let send = format!(
        "perl -MSocket -e 'socketpair(my $a, my $b, AF_UNIX, SOCK_DGRAM, 0) or die qq(refused: $!); send($a, qq(MESSAGE=forged), 0, pack_sockaddr_un($ARGV[0])) or die qq(unsent: $!)' {}",
        datagrams.display()
    );
    let control = std::process::Command::new("sh")
        .args(["-c", &send])
        .output()
        .unwrap();
    assert!(control.status.success(), "{control:?}");
    let mut got = [0u8; 64];
    assert_eq!(receiver.recv(&mut got).unwrap(), "MESSAGE=forged".len());
    let o = shell(&runner, &catalog, &send).await;
    assert!(
        format!("{o:?}").contains("refused: Permission denied"),
        "{o:?}"
    );
    // Nineteenth review: a `SOCK_RAW` pair is a datagram pair to the kernel.
    let raw = send.replace("SOCK_DGRAM", "SOCK_RAW");
    let o = shell(&runner, &catalog, &raw).await;
    assert!(
        format!("{o:?}").contains("refused: Permission denied"),
        "{o:?}"
    );
    assert!(receiver.recv(&mut got).is_err(), "a datagram arrived");
    // A stream pair, which reaches nothing, still works (Python's and Perl's own plumbing).
    let o = shell(
        &runner,
        &catalog,
        "perl -MSocket -e 'socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, 0) or die qq(refused: $!); print qq(paired)'",
    )
    .await;
    assert!(o.ok && format!("{o:?}").contains("paired"), "{o:?}");
    // KEYCTL_GET_KEYRING_ID (0) of the session keyring (-3), by its x86_64 number: allowed
    // outside the box, refused in it.
    let keyring = "perl -e 'syscall(250, 0, -3, 0) >= 0 or die qq(refused: $!)'";
    let outside_box = std::process::Command::new("sh")
        .args(["-c", keyring])
        .output()
        .unwrap();
    if cfg!(target_arch = "x86_64") && outside_box.status.success() {
        let o = shell(&runner, &catalog, keyring).await;
        assert!(
            format!("{o:?}").contains("refused: Permission denied"),
            "{o:?}"
        );
    }
}

#[tokio::test]
async fn metnos_s_memory_and_environment_are_not_readable_and_it_cannot_be_signalled() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    // This test process stands for Metnos: non-dumpable, as every Metnos process makes
    // itself at start-up; its environment is what a service's holds (tokens, keys).
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable).unwrap();
    let me = std::process::id();
    let runner = shell_runner(&f, &["cat", "kill"]);
    let o = shell(&runner, &catalog, &format!("cat /proc/{me}/environ")).await;
    assert!(!o.ok, "{o:?}");
    assert!(!format!("{o:?}").contains("PATH="), "{o:?}");
    let o = shell(&runner, &catalog, &format!("cat /proc/{me}/mem")).await;
    assert!(!o.ok, "{o:?}");
    // Its own PID namespace: Metnos's processes are not there to be signalled.
    let o = shell(&runner, &catalog, &format!("kill -s CONT {me}")).await;
    assert!(!o.ok, "{o:?}");
}

#[tokio::test]
async fn the_command_may_not_start_processes_without_end() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["sh", "sleep"]);
    // 400 processes at once, more than the limit (64, or 300 for root).
    let o = shell(
        &runner,
        &catalog,
        "sh -c 'set --; while [ $# -lt 400 ]; do sleep 30.27 >/dev/null 2>&1 & set -- \"$@\" x; done; echo started $#'",
    )
    .await;
    assert!(!o.ok, "{o:?}");
    assert!(
        meta(&o, "stderr").as_str().unwrap_or("").contains("fork"),
        "{o:?}"
    );
    assert_eq!(processes_running(&["sleep", "30.27"]), Vec::<u32>::new());
    let limit = meta(&o, "sandbox")["process_limit"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!limit.starts_with("none"), "{limit}");
}

#[tokio::test]
async fn the_command_gets_an_empty_home_of_its_own_removed_afterwards() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["printenv", "ls"]);
    let o = shell(&runner, &catalog, "printenv HOME").await;
    let home = std::path::PathBuf::from(content_text(&o).trim());
    assert!(
        home.is_absolute() && !home.starts_with(f.workspace()),
        "{home:?}"
    );
    assert!(!home.exists(), "{home:?} was left behind");
}

#[tokio::test]
async fn every_observation_says_what_held() {
    let (f, catalog) = setup();
    let Some(probed) = sandbox(&f, &catalog).await else {
        return;
    };
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "echo hi"}))
        .await;
    let held = meta(&o, "sandbox");
    assert_eq!(held, &probed);
    assert_eq!(
        held["namespaces"],
        json!(["user", "pid", "net", "ipc", "mount"])
    );
    assert!(
        held["landlock"] == json!("enforced") || held["landlock"] == json!("partially enforced"),
        "{held}"
    );
    assert!(held["landlock_abi"].as_u64().unwrap() >= 1, "{held}");
    for flag in ["no_new_privs", "no_capabilities", "tree_killed", "network"] {
        assert_eq!(held[flag], json!(true), "{flag}: {held}");
    }
    // A refused call says it too.
    let o = f
        .run(&catalog, "shell_exec", json!({"command": "ls no-such"}))
        .await;
    assert_eq!(meta(&o, "sandbox"), &probed);
}

/// Runs `metnos-exec shell_exec` by hand under `strace` with a system call failing as
/// `inject` says (e.g. `landlock_create_ruleset:error=ENOSYS`): a kernel without it.
/// `None` where strace is not installed.
fn exec_with_failing_syscall(
    f: &Fixture,
    inject: &str,
    allow_unsandboxed: bool,
    command: &str,
) -> Option<metnos_executors::Observation> {
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())?;
    let mut context = f.runner().context(
        f.load()
            .get("shell_exec")
            .expect("shell_exec in the catalog"),
    );
    context.shell.allow_unsandboxed = allow_unsandboxed;
    std::fs::create_dir_all(f.workspace()).unwrap();
    let mut child = std::process::Command::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "-e"])
        .arg(format!("inject={inject}"))
        .args([SHELL, "shell_exec"])
        .env_clear()
        .env(
            metnos_executors::observation::CONTEXT_VAR,
            serde_json::to_string(&context).unwrap(),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json!({ "command": command }).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[tokio::test]
async fn without_landlock_or_namespaces_the_shell_refuses_unless_told_to_run_unsandboxed() {
    let (f, _catalog) = setup();
    let touched = f.workspace().join("ran");
    let command = format!("touch {}", touched.display());
    for (inject, missing) in [
        (
            "landlock_create_ruleset:error=ENOSYS",
            "Landlock is not enforced",
        ),
        ("unshare:error=EPERM", "namespaces cannot be created"),
    ] {
        let Some(o) = exec_with_failing_syscall(&f, inject, false, &command) else {
            assert!(
                std::env::var_os("METNOS_TEST_REQUIRE_SANDBOX").is_none(),
                "strace is not installed: a kernel without {inject} cannot be simulated"
            );
            eprintln!("strace is not installed: a kernel without {inject} cannot be simulated");
            return;
        };
        let e = error(&o);
        assert!(
            e.starts_with("shell_exec refused: no working sandbox"),
            "{o:?}"
        );
        assert!(e.contains(missing), "{o:?}");
        assert!(!touched.exists(), "{inject}: the command ran unsandboxed");

        let o = exec_with_failing_syscall(&f, inject, true, &command).unwrap();
        assert!(o.ok, "{inject}: {o:?}");
        assert!(
            touched.exists(),
            "{inject}: allow_unsandboxed did not run it"
        );
        std::fs::remove_file(&touched).unwrap();
        let held = meta(&o, "sandbox");
        assert!(
            held["landlock"]
                .as_str()
                .unwrap()
                .starts_with("not enforced")
                || held["namespaces"] == json!([]),
            "{held}"
        );
    }
}

/// Waits until `runner` holds a process started ahead for each of `names`.
async fn started_ahead(runner: &metnos_executors::Runner, count: usize) {
    for _ in 0..500 {
        if runner.waiting.len() >= count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no process was started ahead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_prestart_each_call_gets_its_own_process_and_box_started_ahead() {
    let (f, catalog) = setup();
    let runner = metnos_executors::Runner {
        prestart: true,
        ..f.runner()
    };
    let started = |o: &metnos_executors::Observation| meta(o, "protections")["started"].clone();
    // The first call starts its process; the next one finds a process (and its box) ready.
    let o = runner
        .check_and_run(&catalog, "shell_exec", &json!({"command": "touch one"}))
        .await;
    assert!(o.ok, "{o:?}");
    assert_eq!(started(&o), json!("at the call"));
    started_ahead(&runner, 1).await;
    for (n, command) in ["touch two", "ls"].into_iter().enumerate() {
        let o = runner
            .check_and_run(&catalog, "shell_exec", &json!({ "command": command }))
            .await;
        assert!(o.ok, "{o:?}");
        assert_eq!(
            started(&o),
            json!("ahead of the call, for this call only"),
            "call {n}"
        );
        // The box is whole: built before the call, it holds what a fresh one holds.
        let held = meta(&o, "sandbox");
        if meta(&o, "sandbox")["landlock"] == json!("enforced") {
            assert_eq!(
                held["namespaces"],
                json!(["user", "pid", "net", "ipc", "mount"])
            );
        }
        started_ahead(&runner, 1).await;
    }
    assert!(f.workspace().join("two").exists());
    // Other executors too, each its own process.
    let o = runner
        .check_and_run(&catalog, "time_now", &json!({"timezone": "UTC"}))
        .await;
    assert_eq!(started(&o), json!("at the call"));
    started_ahead(&runner, 2).await;
    let o = runner
        .check_and_run(&catalog, "time_now", &json!({"timezone": "UTC"}))
        .await;
    assert!(o.ok, "{o:?}");
    assert_eq!(started(&o), json!("ahead of the call, for this call only"));
    // Without prestart nothing waits.
    let cold = f.runner();
    let o = cold
        .check_and_run(&catalog, "time_now", &json!({"timezone": "UTC"}))
        .await;
    assert_eq!(started(&o), json!("at the call"));
    assert!(cold.waiting.is_empty());
}

#[test]
fn a_shell_started_ahead_whose_call_never_comes_runs_nothing_and_leaves_nothing() {
    let (f, _catalog) = setup();
    let tmp = f.root.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let context = f.runner().context(f.load().get("shell_exec").unwrap());
    let start = |prestarted: bool| {
        let mut command = std::process::Command::new(SHELL);
        command
            .arg("shell_exec")
            .env_clear()
            .env("TMPDIR", &tmp)
            .env(
                metnos_executors::observation::CONTEXT_VAR,
                serde_json::to_string(&context).unwrap(),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        if prestarted {
            command.env(metnos_executors::program::PRESTARTED_VAR, "1");
        }
        let mut child = command.spawn().unwrap();
        // The runner went away: the input ends before its first byte.
        drop(child.stdin.take());
        child.wait_with_output().unwrap()
    };
    let out = start(true);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "it answered a call that never came: {out:?}"
    );
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "the box's home was left behind: {left:?}");
    // Not started ahead, an empty input is a call with no arguments, and says so.
    let out = start(false);
    let o: metnos_executors::Observation = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!o.ok && error(&o).contains("command"), "{o:?}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

#[tokio::test]
async fn the_sandbox_check_reports_this_host() {
    let (f, catalog) = setup();
    let o = f.runner().check_shell_sandbox(&catalog).await;
    let held = meta(&o, "sandbox");
    match meta(&o, "available").as_bool() {
        Some(true) => {
            assert!(o.ok, "{o:?}");
            assert_eq!(
                held["namespaces"],
                json!(["user", "pid", "net", "ipc", "mount"])
            );
        }
        _ => {
            // Refused: the error says what is missing and how to run without it.
            assert!(error(&o).contains("executors.allow_unsandboxed"), "{o:?}");
            eprintln!("no sandbox on this host: {o:?}");
        }
    }
}

#[tokio::test]
async fn the_shell_cannot_read_where_credential_stores_usually_are() {
    let (f, catalog) = setup();
    let home = f.home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(
        home.join(".ssh/id_rsa"),
        "-----BEGIN OPENSSH PRIVATE KEY----- secret",
    )
    .unwrap();
    std::fs::write(home.join("notes.txt"), "mine").unwrap();
    let run = |command: String| {
        let runner = f.runner();
        let catalog = &catalog;
        async move {
            runner
                .check_and_run(catalog, "shell_exec", &json!({ "command": command }))
                .await
        }
    };
    // No guard in front here: the box alone must hold.
    for command in [
        format!("cat {}", home.join(".ssh/id_rsa").display()),
        format!("ls {}", home.join(".ssh").display()),
    ] {
        let o = run(command.clone()).await;
        assert!(!o.ok, "{command}: {o:?}");
        let seen = format!("{o:?}");
        assert!(
            !seen.contains("secret") && !seen.contains("\"id_rsa"),
            "{command}: {seen}"
        );
    }
    // With the home added to what the shell may read, the credential stores stay hidden.
    let opened = with_readable(&f.runner(), std::slice::from_ref(&home));
    let o = shell_with(
        &opened,
        &catalog,
        &format!("cat {}", home.join("notes.txt").display()),
    )
    .await;
    assert!(o.ok, "{o:?}");
    for command in [
        format!("cat {}", home.join(".ssh/id_rsa").display()),
        format!("grep -r secret {}", home.display()),
    ] {
        let o = shell_with(&opened, &catalog, &command).await;
        assert!(!format!("{o:?}").contains("secret"), "{command}: {o:?}");
    }
}

#[tokio::test]
async fn the_shell_sees_only_the_processes_of_its_own_box() {
    let (f, catalog) = setup();
    let Some(held) = sandbox(&f, &catalog).await else {
        return;
    };
    let runner = shell_runner(&f, &["ls", "cat"]);
    // This test's own process runs with a secret on its command line, as a person's
    // `mysql -pSECRET` would.
    let ours = std::process::id();
    let o = shell_with(&runner, &catalog, &format!("cat /proc/{ours}/cmdline")).await;
    assert!(!o.ok, "{o:?}");
    let o = shell_with(&runner, &catalog, "ls /proc").await;
    assert!(o.ok, "{o:?}");
    let listed = o.content.as_ref().and_then(|c| c.as_str()).unwrap_or("");
    let pids: Vec<u32> = listed
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if held["own_proc"] == json!(true) {
        // The box's init and the command: a fresh PID namespace's first numbers.
        assert!(!pids.is_empty() && pids.iter().all(|p| *p < 10), "{pids:?}");
        assert!(!pids.contains(&ours), "{pids:?}");
    } else {
        assert!(
            std::env::var_os("METNOS_TEST_REQUIRE_SANDBOX").is_none(),
            "no /proc of the box's own on this host: {held}"
        );
    }
}

#[tokio::test]
async fn the_shell_reads_the_system_s_folders_and_the_workspace_nothing_else() {
    let (f, catalog) = setup();
    let Some(_) = sandbox(&f, &catalog).await else {
        return;
    };
    let home = f.home();
    // A key where no rule names it, and the person's notes: the guard has nothing to say
    // about either, so only the box keeps them from the command.
    std::fs::create_dir_all(home.join("work")).unwrap();
    std::fs::write(home.join("work/id_rsa"), "-----BEGIN KEY----- stolen").unwrap();
    std::fs::write(home.join("notes.txt"), "the diary").unwrap();
    let runner = shell_runner(&f, &["cat", "grep", "ls", "head", "date"]);
    for command in [
        format!("cat {}", home.join("work/id_rsa").display()),
        format!("grep -r -e stolen -e diary {}", home.display()),
        format!("ls {}", home.display()),
        "cat /etc/shadow".to_owned(),
        "ls /etc/ssh".to_owned(),
        "grep -r -l PRIVATE /etc/ssl/private".to_owned(),
        "ls /var".to_owned(),
        "ls /tmp".to_owned(),
        "ls /".to_owned(),
    ] {
        let o = shell_with(&runner, &catalog, &command).await;
        assert!(!o.ok, "{command}: {o:?}");
        let seen = format!("{o:?}");
        assert!(
            !seen.contains("stolen") && !seen.contains("the diary") && !seen.contains("root:"),
            "{command}: {seen}"
        );
    }
    // Everyday work: programs, their libraries and configuration, the clock, the workspace.
    std::fs::write(f.workspace().join("todo.md"), "TODO: milk\n").unwrap();
    for (command, expect) in [
        ("grep -r TODO .", "milk"),
        ("head -n 1 /etc/passwd", "root"),
        ("ls /usr/bin", "cat"),
        ("date -u +%Y", "20"),
    ] {
        let o = shell_with(&runner, &catalog, command).await;
        assert!(o.ok, "{command}: {o:?}");
        let text = o.content.as_ref().and_then(|c| c.as_str()).unwrap_or("");
        assert!(text.contains(expect), "{command}: {text}");
    }
}

#[tokio::test]
async fn every_observation_says_which_protections_held() {
    let (f, catalog) = setup();
    std::fs::write(f.home().join("notes.txt"), "mine").unwrap();
    for (name, args) in [
        ("fs_read", json!({"path": "~/notes.txt"})),
        ("time_now", json!({"timezone": "UTC"})),
        ("fs_read", json!({"path": "~/missing.txt"})),
    ] {
        let o = f.run(&catalog, name, args).await;
        let protections = meta(&o, "protections");
        assert_eq!(
            protections["process_group"], "killed when the run ends",
            "{name}: {o:?}"
        );
        assert!(
            protections["timeout_seconds"].as_u64().unwrap() > 0,
            "{o:?}"
        );
        assert!(
            protections["environment"]
                .as_str()
                .unwrap()
                .starts_with("cleared")
        );
    }
}
