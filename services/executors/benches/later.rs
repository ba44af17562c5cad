//! What judging a write for code that runs later costs (issue 38): every path write pays it
//! twice, in the planner and in the executor, and the shell in a workspace the person chose
//! once per command (one walk kept for all its arguments).
//!
//! `cargo bench -p metnos-executors --bench later`
//!
//! - `later/rule/lived_in_home`: one write to `~/Documents/report.txt` judged cold (the
//!   hidden tree walked, start-up files and git includes read) in a home with 5 000 entries
//!   in its hidden tree, 20 links out of it, a `.bashrc` sourcing two files and a
//!   `.gitconfig` including one.
//! - `later/rule/walk_kept`: the same write judged with the walk already done (a command's
//!   second argument).
//! - `later/started/developers_home`: what the start-up files of a developer's home name,
//!   read in turn (a `.bashrc` of 200 lines aliasing 60 scripts of 40 lines, a sourced
//!   loop of 10 files, 20 user units, 100 launchers): part of the cold judgment.
//! - `later/git_shape`: the repository-shape check alone, for a path eight folders deep.
//! - `later/pre_check/2k_files`: git's pre-check in the box for a repository of 2 000 files
//!   (its configuration read, nested repositories looked for).

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_executors::later::{Places, in_git_repository};

fn lived_in_home(home: &Path) {
    for i in 0..50 {
        let dir = home.join(format!(".config/app{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..100 {
            std::fs::write(dir.join(format!("f{j}")), "x").unwrap();
        }
    }
    std::fs::create_dir_all(home.join("dotfiles")).unwrap();
    for i in 0..20 {
        let target = home.join(format!("dotfiles/rc{i}"));
        std::fs::write(&target, "x").unwrap();
        std::os::unix::fs::symlink(&target, home.join(format!(".config/app{i}/link"))).unwrap();
    }
    std::fs::create_dir_all(home.join("tools")).unwrap();
    std::fs::write(home.join("tools/a.sh"), ". ~/tools/b.sh\n").unwrap();
    std::fs::write(home.join("tools/b.sh"), "export X=1\n").unwrap();
    std::fs::write(
        home.join(".bashrc"),
        "alias ll='ls -l'\n[ -f ~/tools/a.sh ] && . ~/tools/a.sh\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[include]\n\tpath = ~/dotfiles/gitconfig\n",
    )
    .unwrap();
    std::fs::write(home.join("dotfiles/gitconfig"), "[user]\n\tname = Ada\n").unwrap();
    std::fs::create_dir_all(home.join("Documents")).unwrap();
}

/// A home whose start-up files name many things: a `.bashrc` of 200 lines (60 aliases to
/// scripts of 40 lines each, variables, a sourced loop), 20 user units and 100 launchers.
fn developers_home(home: &Path) {
    let mut bashrc = String::from("export DOTFILES=$HOME/dotfiles\nexport GOPATH=$HOME/go\n");
    bashrc.push_str("for f in ~/dotfiles/bash/*; do\n  . \"$f\"\ndone\n");
    std::fs::create_dir_all(home.join("scripts")).unwrap();
    std::fs::create_dir_all(home.join("dotfiles/bash")).unwrap();
    for i in 0..60 {
        bashrc.push_str(&format!("alias s{i}='bash ~/scripts/s{i}.sh --verbose'\n"));
        let script = "echo step; cp ~/notes/a.md ~/notes/b.md; ls ~/Documents\n".repeat(40);
        std::fs::write(home.join(format!("scripts/s{i}.sh")), script).unwrap();
    }
    for i in 0..80 {
        bashrc.push_str(&format!(
            "# a comment line {i} about ~/Documents/notes{i}.md\n"
        ));
    }
    for i in 0..10 {
        std::fs::write(
            home.join(format!("dotfiles/bash/part{i}")),
            format!("alias p{i}='cd ~/projects/p{i}'\nsource $DOTFILES/lib{i}.sh\n"),
        )
        .unwrap();
    }
    std::fs::write(home.join(".bashrc"), bashrc).unwrap();
    let units = home.join(".config/systemd/user");
    std::fs::create_dir_all(&units).unwrap();
    for i in 0..20 {
        std::fs::write(
            units.join(format!("u{i}.service")),
            format!("[Service]\nExecStart=/usr/bin/python3 %h/tools/u{i}.py\nWorkingDirectory=%h/app{i}\n"),
        )
        .unwrap();
    }
    let launchers = home.join(".local/share/applications");
    std::fs::create_dir_all(&launchers).unwrap();
    for i in 0..100 {
        std::fs::write(
            launchers.join(format!("app{i}.desktop")),
            format!(
                "[Desktop Entry]\nName=App {i}\nExec={}/Applications/app{i}/run %U\nIcon={}/Pictures/app{i}.png\n",
                home.display(),
                home.display()
            ),
        )
        .unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    lived_in_home(&home);
    let data = home.join(".local/share/metnos");
    let workspace = data.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let forbidden = vec![data.clone()];
    let program_dirs = vec![PathBuf::from("/usr/local/bin"), PathBuf::from("/usr/bin")];
    let places = Places {
        home: &home,
        program_dirs: &program_dirs,
        forbidden: &forbidden,
        workspace: &workspace,
    };
    let written = home.join("Documents/report.txt");
    assert_eq!(places.rule(&written, &written, &OnceCell::new()), None);
    assert!(
        places
            .rule(
                &home.join("tools/b.sh"),
                &home.join("tools/b.sh"),
                &OnceCell::new()
            )
            .is_some()
    );
    c.bench_function("later/rule/lived_in_home", |b| {
        b.iter(|| places.rule(&written, &written, &OnceCell::new()))
    });
    let kept = OnceCell::new();
    places.rule(&written, &written, &kept);
    c.bench_function("later/rule/walk_kept", |b| {
        b.iter(|| places.rule(&written, &written, &kept))
    });
    // A developer's home: what its start-up files name, read in turn.
    let dev = tempfile::tempdir().unwrap();
    let dev_home = dev.path().canonicalize().unwrap();
    developers_home(&dev_home);
    c.bench_function("later/started/developers_home", |b| {
        b.iter(|| metnos_executors::started::by_path(&dev_home, &[], &[]))
    });
    let deep = home.join("Documents/a/b/c/d/e/f/g/report.txt");
    c.bench_function("later/git_shape", |b| b.iter(|| in_git_repository(&deep)));

    let repo = workspace.join("site");
    for i in 0..20 {
        let folder = repo.join(format!("src/m{i}"));
        std::fs::create_dir_all(&folder).unwrap();
        for j in 0..100 {
            std::fs::write(folder.join(format!("f{j}.rs")), "fn main() {}\n").unwrap();
        }
    }
    let made = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&repo)
        .status();
    if made.is_ok_and(|s| s.success()) {
        use metnos_executors::builtin::shell_exec::gitconfig::refused_repository;
        assert_eq!(refused_repository(&repo, &workspace), None);
        c.bench_function("later/pre_check/2k_files", |b| {
            b.iter(|| refused_repository(&repo, &workspace))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
