//! Writes that run code later (DESIGN §6): the one rule the executors (at the point of use)
//! and the planner (to ask the person first) both apply to a path a call would write.

use std::cell::OnceCell;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use metnos_core::forbidden;

/// The places that decide whether a write runs code later.
#[derive(Debug, Clone, Copy)]
pub struct Places<'a> {
    /// The person's home, as configured.
    pub home: &'a Path,
    /// The folders on the person's PATH.
    pub program_dirs: &'a [PathBuf],
    /// Metnos's own folders (the data directory, its config).
    pub forbidden: &'a [PathBuf],
    /// The shell's workspace, as configured.
    pub workspace: &'a Path,
}

impl Places<'_> {
    /// The shell's workspace, resolved.
    pub fn workspace(&self) -> PathBuf {
        crate::scope::resolve(self.workspace).unwrap_or_else(|_| self.workspace.to_owned())
    }

    /// Whether the shell's workspace lies in Metnos's own folders (the default, in the data
    /// directory), where its hidden names are ordinary files.
    pub fn own_workspace(&self) -> bool {
        let workspace = self.workspace();
        crate::scope::real_roots(self.forbidden)
            .iter()
            .any(|dir| workspace.starts_with(dir))
    }

    /// The rule a write to `lexical` (resolved: `real`) meets because the file runs code
    /// later: a hidden name under the home (but in Metnos's own workspace), a folder of
    /// programs, an interpreter's start-up file, an executable, a folder git takes for a
    /// repository, where the home's hidden tree links to. `links`: where the hidden tree
    /// links to, computed on first need and kept for a command's other arguments.
    pub fn rule(
        &self,
        lexical: &Path,
        real: &Path,
        links: &OnceCell<Vec<PathBuf>>,
    ) -> Option<&'static str> {
        let workspace = if self.own_workspace() {
            self.workspace()
        } else {
            PathBuf::new()
        };
        let mut homes = vec![self.home.to_owned()];
        if let Ok(resolved) = crate::scope::resolve(self.home)
            && resolved != self.home
        {
            homes.push(resolved);
        }
        let program_dirs: Vec<PathBuf> = self
            .program_dirs
            .iter()
            .flat_map(|d| {
                [
                    d.clone(),
                    crate::scope::resolve(d).unwrap_or_else(|_| d.clone()),
                ]
            })
            .collect();
        [lexical, real]
            .into_iter()
            .find_map(|path| {
                homes.iter().find_map(|home| {
                    forbidden::runs_code_later_beside(path, home, &program_dirs, &workspace)
                })
            })
            .or_else(|| crate::scope::executable(real).then_some(forbidden::EXECUTABLE))
            .or_else(|| in_git_repository(real).then_some(forbidden::GIT_REPOSITORY))
            .or_else(|| in_environment(real, &homes).then_some(forbidden::INTERPRETER_STARTUP))
            .or_else(|| {
                let own = crate::scope::real_roots(self.forbidden);
                links
                    .get_or_init(|| {
                        homes
                            .iter()
                            .flat_map(|home| crate::scope::dotfile_targets(home, &own))
                            .collect()
                    })
                    .iter()
                    .any(|target| real.starts_with(target))
                    .then_some(forbidden::HOME_HIDDEN)
            })
    }
}

/// How many folders above a written path are looked at for a repository's shape.
const MAX_ANCESTORS: usize = 64;

/// The first character of `content` that ends a line for some programs that read a file
/// running code later and not for others, or any other control character but a tab and a
/// new line: Python's `splitlines` (a `.pth`) and Node break at a lone CR, VT, FF, FS, GS,
/// RS, NEL, U+2028 and U+2029, bash, git and systemd at LF only, and NUL ends a unit's line.
/// A card splits such a content at `\n` (where every one of them does): a write with any
/// other is refused, by the planner before a card and by the file executor at the write.
pub fn odd_line_end(content: &str) -> Option<char> {
    content.chars().find(|c| {
        (c.is_control() && *c != '\t' && *c != '\n') || matches!(c, '\u{2028}' | '\u{2029}')
    })
}

/// Whether writing `real` writes into a folder git takes for a repository, or completes
/// one: a `HEAD` beside `objects` and `refs` (or beside `commondir`), the folder's entry on
/// the way to `real` counted as there. Git finds such a folder by itself — a bare
/// repository (`~/repos/site.git`), or four plain files planted in a project's `src/` —
/// and runs what its `config` says (a pager, an alias, `core.fsmonitor`) at the person's
/// next git command there; `.git` folders are refused by name already.
pub fn in_git_repository(real: &Path) -> bool {
    real.ancestors().skip(1).take(MAX_ANCESTORS).any(|dir| {
        let on_the_way = real
            .strip_prefix(dir)
            .ok()
            .and_then(|below| below.components().next())
            .map(|c| c.as_os_str());
        let has = |name: &str| {
            on_the_way == Some(OsStr::new(name)) || dir.join(name).symlink_metadata().is_ok()
        };
        has("HEAD") && (has("commondir") || (has("objects") && has("refs")))
    })
}

/// Whether `real` lies in an installed environment under the home: a folder above it (below
/// the home) holds `conda-meta` (a conda, mamba or micromamba prefix) or `pyvenv.cfg` (a
/// virtual environment). What such a prefix holds is loaded or run by its programs and at
/// its activation — conda's `etc/conda/env_vars.d` and `conda-meta/state` (exported at every
/// new shell), Jupyter's and IPython's `etc/` configuration, kernels, the standard library —
/// more than any list of names could say.
pub fn in_environment(real: &Path, homes: &[PathBuf]) -> bool {
    real.ancestors()
        .skip(1)
        .take(MAX_ANCESTORS)
        .take_while(|dir| homes.iter().all(|home| dir != home))
        .filter(|dir| homes.iter().any(|home| dir.starts_with(home)))
        .any(|dir| {
            dir.join("conda-meta").symlink_metadata().is_ok()
                || dir.join("pyvenv.cfg").symlink_metadata().is_ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_installed_environment_holds_is_its_programs_start_up() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_path_buf();
        let homes = [home.clone()];
        std::fs::create_dir_all(home.join("miniconda3/conda-meta")).unwrap();
        std::fs::create_dir_all(home.join("projects/app/venv")).unwrap();
        std::fs::write(
            home.join("projects/app/venv/pyvenv.cfg"),
            "home = /usr/bin\n",
        )
        .unwrap();
        for written in [
            "miniconda3/etc/conda/env_vars.d/zz.json",
            "miniconda3/conda-meta/state",
            "miniconda3/etc/jupyter/jupyter_config.py",
            "miniconda3/share/jupyter/kernels/python3/kernel.json",
            "projects/app/venv/etc/ipython/ipython_config.py",
        ] {
            assert!(in_environment(&home.join(written), &homes), "{written}");
        }
        for ordinary in ["projects/app/main.py", "notes.txt", "projects/app/venv"] {
            assert!(!in_environment(&home.join(ordinary), &homes), "{ordinary}");
        }
        // The home holding a pyvenv.cfg of its own is not one environment.
        std::fs::write(home.join("pyvenv.cfg"), "").unwrap();
        assert!(!in_environment(&home.join("notes.txt"), &homes));
    }

    #[test]
    fn a_folder_with_git_s_shape_is_a_repository_and_its_last_piece_completes_one() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("objects")).unwrap();
        // Up to two of the three pieces: an ordinary folder, its files ordinary too.
        assert!(!in_git_repository(&src.join("config")));
        assert!(!in_git_repository(&src.join("objects/README")));
        assert!(!in_git_repository(&src.join("refs/README")));
        assert!(!in_git_repository(&src.join("HEAD")));
        std::fs::write(src.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        // The third, written as a file or made as the folder above a file: refused.
        assert!(in_git_repository(&src.join("refs/README")));
        assert!(in_git_repository(&src.join("refs")));
        assert!(in_git_repository(&src.join("commondir")));
        std::fs::create_dir(src.join("refs")).unwrap();
        // A repository's every file, however deep, and a project file beside it is not.
        assert!(in_git_repository(&src.join("config")));
        assert!(in_git_repository(&src.join("objects/info/alternates")));
        assert!(in_git_repository(&src.join("hooks/pre-commit")));
        assert!(!in_git_repository(&dir.path().join("README")));
        assert!(!in_git_repository(&dir.path().join("site.git/README")));
    }
}
