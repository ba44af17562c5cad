//! What `metnos up` does to a catalog by itself: installs and signs the built-ins once,
//! re-signs exactly those after an upgrade of their programs, and never signs anything it
//! did not write.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{EXEC, MAIL, SHELL, WEB, make_executable};
use metnos_executors::Catalog;
use metnos_executors::install::{BuiltinsRecord, SyncRequest, Synced, sign_dir, sync_builtins};
use metnos_executors::signing::{self, Trust};

const EXEC_BUILTINS: [&str; 4] = ["fs_list", "fs_read", "fs_write", "time_now"];

struct Install {
    root: tempfile::TempDir,
    trust: Trust,
    /// The installing `metnos`'s identity: a new one is an upgrade.
    installer: std::cell::RefCell<String>,
}

impl Install {
    /// The three programs copied into a `bin` folder of their own (so an "upgrade" can
    /// change them), a key in `keys/`, an empty catalog.
    fn new() -> Install {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for program in [EXEC, WEB, SHELL, MAIL] {
            let to = bin.join(Path::new(program).file_name().unwrap());
            std::fs::copy(program, &to).unwrap();
            make_executable(&to);
        }
        let key = signing::generate().unwrap();
        signing::write_key(&root.path().join("keys/owner.key"), &key).unwrap();
        let mut keys = BTreeMap::new();
        keys.insert(
            "owner".to_owned(),
            signing::public_key_text(&key.verifying_key()),
        );
        Install {
            root,
            trust: Trust::from_config(&keys).unwrap(),
            installer: std::cell::RefCell::new("metnos 1".to_owned()),
        }
    }

    fn catalog(&self) -> PathBuf {
        self.root.path().join("catalog")
    }

    fn program(&self) -> PathBuf {
        self.root.path().join("bin/metnos-exec")
    }

    fn key_file(&self) -> PathBuf {
        self.root.path().join("keys/owner.key")
    }

    fn try_sync(&self, force: bool) -> Result<Synced, String> {
        sync_builtins(&SyncRequest {
            catalog: &self.catalog(),
            program: &self.program(),
            signer: "owner",
            key_file: &self.key_file(),
            installer: &self.installer.borrow(),
            force,
        })
        .map_err(|e| e.to_string())
    }

    fn sync(&self) -> Synced {
        self.try_sync(false).unwrap()
    }

    fn load(&self) -> Catalog {
        Catalog::load(&self.catalog(), &self.trust)
    }

    /// An upgrade: a new `metnos` with a new build of `metnos-exec`.
    fn upgrade_exec(&self) {
        self.installer.replace("metnos 2".to_owned());
        self.change_exec();
    }

    /// `metnos-exec` alone rewritten: other bytes, still a working program.
    fn change_exec(&self) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.program())
            .unwrap();
        file.write_all(b"\0upgrade").unwrap();
    }

    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        walk(&self.catalog())
    }
}

fn walk(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    files
}

fn names(catalog: &Catalog) -> Vec<String> {
    let mut names: Vec<String> = catalog.executors().map(|e| e.name().to_owned()).collect();
    names.sort();
    names
}

fn all_builtins() -> Vec<String> {
    let mut all: Vec<String> = metnos_executors::builtin::MANIFESTS
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .collect();
    all.sort();
    all
}

#[test]
fn a_first_sync_installs_and_signs_every_builtin_and_a_second_changes_nothing() {
    let i = Install::new();
    let synced = i.sync();
    let mut installed = synced.installed.clone();
    installed.sort();
    assert_eq!(installed, all_builtins());
    assert!(synced.updated.is_empty() && synced.kept.is_empty());
    let catalog = i.load();
    assert!(catalog.refused().is_empty(), "{:?}", catalog.refused());
    assert_eq!(names(&catalog), all_builtins());
    for executor in catalog.executors() {
        assert_eq!(executor.signer, "owner");
    }
    // Private, record included.
    for (path, _) in i.files() {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    let record = BuiltinsRecord::read(&i.catalog()).unwrap().unwrap();
    assert_eq!(record.signer, "owner");
    assert_eq!(record.executors.len(), all_builtins().len());

    let before = i.files();
    assert_eq!(i.sync(), Synced::default(), "nothing to do the second time");
    assert_eq!(i.files(), before, "not a byte rewritten");
}

#[tokio::test]
async fn an_upgrade_of_metnos_exec_re_signs_its_builtins_and_nothing_else() {
    let i = Install::new();
    i.sync();
    // A third-party executor beside them, signed by the person, whose program is the very
    // metnos-exec being upgraded: it is the person's to re-sign, never Metnos's.
    let theirs = i.catalog().join("my_clock");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(
        theirs.join("manifest.toml"),
        format!(
            "name = \"my_clock\"\ndescription = \"my clock\"\ncapabilities = [\"time:read\"]\nprogram = \"{}\"\nprogram_args = [\"time_now\"]\n[args]\ntype = \"object\"\n",
            i.program().display()
        ),
    )
    .unwrap();
    let key = signing::read_key(&i.key_file()).unwrap();
    sign_dir(&theirs, &key, "owner", false).unwrap();
    let theirs_before = walk(&theirs);
    let web_before = walk(&i.catalog().join("web_fetch"));

    i.upgrade_exec();
    let stale = i.load();
    assert!(
        stale
            .refused()
            .iter()
            .any(|r| r.reason.contains("does not match its signed digest")),
        "the old signatures no longer hold: {:?}",
        stale.refused()
    );

    let synced = i.sync();
    let mut updated = synced.updated.clone();
    updated.sort();
    assert_eq!(updated, EXEC_BUILTINS, "exactly metnos-exec's built-ins");
    assert!(synced.installed.is_empty());
    assert!(synced.kept.is_empty(), "{:?}", synced.kept);
    assert_eq!(
        walk(&theirs),
        theirs_before,
        "the person's executor untouched"
    );
    assert_eq!(
        walk(&i.catalog().join("web_fetch")),
        web_before,
        "metnos-web did not change"
    );

    let catalog = i.load();
    let refused: Vec<&str> = catalog
        .refused()
        .iter()
        .filter_map(|r| r.name.as_deref())
        .collect();
    assert_eq!(refused, ["my_clock"], "only the one Metnos did not sign");
    // And the upgraded program really runs under its new signature.
    let observation = metnos_executors::Runner::default()
        .check_and_run(
            &catalog,
            "time_now",
            &serde_json::json!({"timezone": "UTC"}),
        )
        .await;
    assert!(observation.ok, "{observation:?}");
}

#[test]
fn a_builtin_changed_by_someone_else_is_never_re_signed() {
    let i = Install::new();
    i.sync();
    // Someone widens fs_read's scope to the whole disk: the catalog refuses the change
    // (its signature no longer holds), and the next upgrade must not launder it.
    let manifest = i.catalog().join("fs_read/manifest.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let widened = format!("{text}\n# widened\n");
    std::fs::write(&manifest, &widened).unwrap();
    i.upgrade_exec();

    let synced = i.sync();
    assert!(
        synced.kept.contains(&(
            "fs_read".to_owned(),
            "changed since Metnos installed it; sign it yourself".to_owned()
        )),
        "{synced:?}"
    );
    assert!(!synced.updated.contains(&"fs_read".to_owned()));
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), widened);
    let catalog = i.load();
    let refused: Vec<&str> = catalog
        .refused()
        .iter()
        .filter_map(|r| r.name.as_deref())
        .collect();
    assert_eq!(refused, ["fs_read"], "{:?}", catalog.refused());
}

#[test]
fn a_removed_builtin_stays_removed_and_a_new_one_is_added() {
    let i = Install::new();
    i.sync();
    std::fs::remove_dir_all(i.catalog().join("web_fetch")).unwrap();
    // As if this version had brought time_now new: not in the record, no folder.
    let mut record = BuiltinsRecord::read(&i.catalog()).unwrap().unwrap();
    record.executors.remove("time_now");
    record.write(&i.catalog()).unwrap();
    std::fs::remove_dir_all(i.catalog().join("time_now")).unwrap();

    // Without an upgrade nothing new comes in; with one, the new built-in does.
    let synced = i.sync();
    assert_eq!(synced, Synced::default());
    i.installer.replace("metnos 2".to_owned());
    let synced = i.sync();
    assert_eq!(synced.installed, ["time_now"]);
    assert!(
        !i.catalog().join("web_fetch").exists(),
        "the person removed it"
    );
    assert!(
        BuiltinsRecord::read(&i.catalog())
            .unwrap()
            .unwrap()
            .executors
            .contains_key("time_now")
    );
}

#[test]
fn a_lost_key_is_named_when_an_upgrade_needs_it() {
    let i = Install::new();
    i.sync();
    std::fs::remove_file(i.key_file()).unwrap();
    // Nothing to sign: the key is not needed.
    assert_eq!(i.sync(), Synced::default());
    i.upgrade_exec();
    let e = i.try_sync(false).unwrap_err();
    assert!(e.contains("cannot sign it"), "{e}");
    assert!(e.contains(&i.key_file().display().to_string()), "{e}");
}

#[test]
fn a_program_swapped_without_an_upgrade_is_reported_not_re_signed() {
    let i = Install::new();
    i.sync();
    // Anything that could write metnos-exec (and not metnos) swaps it.
    i.change_exec();
    let synced = i.sync();
    assert!(!synced.changed(), "{synced:?}");
    let mut kept: Vec<&str> = synced.kept.iter().map(|(n, _)| n.as_str()).collect();
    kept.sort_unstable();
    assert_eq!(kept, EXEC_BUILTINS, "{synced:?}");
    assert!(
        synced.kept[0]
            .1
            .contains("changed while this metnos did not (no upgrade)"),
        "{synced:?}"
    );
    let catalog = i.load();
    assert!(
        catalog.refused().len() == EXEC_BUILTINS.len()
            && catalog
                .refused()
                .iter()
                .all(|r| r.reason.contains("does not match its signed digest")),
        "the swapped program stays refused: {:?}",
        catalog.refused()
    );
    // The person's word (`metnos executors install`) re-signs it.
    let forced = i.try_sync(true).unwrap();
    assert_eq!(forced.updated.len(), EXEC_BUILTINS.len(), "{forced:?}");
    assert!(i.load().refused().is_empty());
}

#[test]
fn nothing_is_written_through_a_link_in_the_catalog() {
    let i = Install::new();
    i.sync();
    // The folder of a built-in swapped for a link to a folder of the attacker's, whose
    // manifest is byte for byte Metnos's and whose signature is a link to a file of the
    // person's.
    let elsewhere = i.root.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let victim = i.root.path().join("victim.txt");
    std::fs::write(&victim, "the person's file\n").unwrap();
    let dir = i.catalog().join("fs_read");
    std::fs::copy(dir.join("manifest.toml"), elsewhere.join("manifest.toml")).unwrap();
    std::os::unix::fs::symlink(&victim, elsewhere.join("manifest.sig")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    i.upgrade_exec();
    let e = i.try_sync(false).unwrap_err();
    assert!(e.contains("not a real folder"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the person's file\n"
    );

    // A link left at a file's name is replaced, never written through.
    let i = Install::new();
    i.sync();
    let sig = i.catalog().join("time_now/manifest.sig");
    std::fs::remove_file(&sig).unwrap();
    std::os::unix::fs::symlink(&victim, &sig).unwrap();
    std::os::unix::fs::symlink(&victim, i.catalog().join("time_now/manifest.toml.partial"))
        .unwrap();
    i.upgrade_exec();
    i.sync();
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the person's file\n"
    );
    assert!(
        !std::fs::symlink_metadata(&sig)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(i.load().refused().is_empty(), "{:?}", i.load().refused());
}

#[test]
fn a_program_others_may_change_is_never_signed() {
    let i = Install::new();
    std::fs::set_permissions(i.program(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = i.try_sync(false).unwrap_err();
    assert!(
        e.contains("may be changed by another user than its owner (mode 777"),
        "{e}"
    );
    assert!(!i.catalog().join("fs_read").exists());
}
