//! Ed25519 signatures over canonical manifests: key files (PKCS#8 PEM, as OpenSSL writes
//! them), the detached `manifest.sig`, and the trusted keys from config.
//!
//! Key material never appears in an error or a log line: errors name the file, not what
//! is in it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::manifest::Manifest;

/// The detached signature file beside a manifest.
pub const SIGNATURE_FILE: &str = "manifest.sig";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the key file {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("the key file {0} is not an ed25519 private key in PKCS#8 PEM form")]
    Format(PathBuf),
    #[error("cannot write the key file {path}: {message}")]
    Write { path: PathBuf, message: String },
    #[error("{0} already exists; refusing to overwrite a key")]
    Exists(PathBuf),
    #[error("no randomness from the operating system: {0}")]
    Random(String),
    #[error("trusted key `{0}` is not a base64 ed25519 public key (32 bytes)")]
    Trusted(String),
    #[error("the trust file {path}: {message}")]
    TrustFile { path: PathBuf, message: String },
}

/// A fresh signing key from the operating system's CSPRNG.
pub fn generate() -> Result<SigningKey, KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Writes `key` to a new file readable by its owner only.
pub fn write_key(path: &Path, key: &SigningKey) -> Result<(), KeyError> {
    let write_error = |e: std::io::Error| KeyError::Write {
        path: path.to_owned(),
        message: e.to_string(),
    };
    if path.exists() {
        return Err(KeyError::Exists(path.to_owned()));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        // Folders it has to make (`keys/`, perhaps the data directory) are private too.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(write_error)?;
    }
    let pem = key
        .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|_| KeyError::Format(path.to_owned()))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(write_error)?;
    file.write_all(pem.as_bytes()).map_err(write_error)?;
    file.sync_all().map_err(write_error)
}

/// Reads a key written by [`write_key`] (or `openssl genpkey -algorithm ed25519`).
/// A key others can read (or change) is refused, as ssh refuses one: whoever read it can
/// sign any executor.
pub fn read_key(path: &Path) -> Result<SigningKey, KeyError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let read_error = |message: String| KeyError::Read {
        path: path.to_owned(),
        message,
    };
    let mut file = std::fs::File::open(path).map_err(|e| read_error(e.to_string()))?;
    let meta = file.metadata().map_err(|e| read_error(e.to_string()))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.mode() & 0o077 != 0 {
        return Err(read_error(format!(
            "group or others may read or change it (mode {:o}); `chmod 600` it",
            meta.mode() & 0o777
        )));
    }
    if meta.uid() != me && meta.uid() != 0 {
        return Err(read_error(format!(
            "owned by uid {}, not by this user (uid {me})",
            meta.uid()
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| read_error(e.to_string()))?;
    SigningKey::from_pkcs8_pem(&text).map_err(|_| KeyError::Format(path.to_owned()))
}

/// A public key as config and signature files carry it.
pub fn public_key_text(key: &VerifyingKey) -> String {
    BASE64.encode(key.as_bytes())
}

fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = BASE64.decode(text.trim()).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// The signers whose signatures are accepted (config `executors.trusted_keys`).
#[derive(Debug, Clone, Default)]
pub struct Trust {
    keys: BTreeMap<String, VerifyingKey>,
}

impl Trust {
    /// The keys of config (`[executors.trusted_keys]`) and of the trust file `metnos up`
    /// keeps (`executors.trust_file`; absent is none). A signer named in both must have
    /// the same key in both; a trust file others may write is refused, as a catalog
    /// signed by a key anyone could add would be no catalog at all.
    pub fn load(config: &BTreeMap<String, String>, trust_file: &Path) -> Result<Trust, KeyError> {
        let mut trust = Trust::from_config(config)?;
        let from_file = read_trust_file(trust_file)?;
        for (name, text) in from_file {
            let bad = |message: String| KeyError::TrustFile {
                path: trust_file.to_owned(),
                message,
            };
            let key = parse_public_key(&text).ok_or_else(|| {
                bad(format!(
                    "`{name}` is not a base64 ed25519 public key (32 bytes)"
                ))
            })?;
            match trust.keys.get(&name) {
                Some(known) if *known != key => {
                    return Err(bad(format!(
                        "`{name}` has another key here than in [executors.trusted_keys]; remove one"
                    )));
                }
                _ => {
                    trust.keys.insert(name, key);
                }
            }
        }
        Ok(trust)
    }

    /// From config: signer name → base64 public key. A malformed key is an error naming
    /// the signer.
    pub fn from_config(keys: &BTreeMap<String, String>) -> Result<Trust, KeyError> {
        let keys = keys
            .iter()
            .map(|(name, text)| {
                parse_public_key(text)
                    .map(|key| (name.clone(), key))
                    .ok_or_else(|| KeyError::Trusted(name.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Trust { keys })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a signer is trusted under `name`.
    pub fn names(&self, name: &str) -> bool {
        self.keys.contains_key(name)
    }

    /// The name `key` is trusted under, if it is.
    pub fn signer_of(&self, key: &VerifyingKey) -> Option<&str> {
        self.keys
            .iter()
            .find(|(_, trusted)| *trusted == key)
            .map(|(name, _)| name.as_str())
    }
}

/// The signer → key table of a trust file, empty when there is none. Refused: a file
/// group or others may write, or one owned by another user (root's excepted), and any
/// content but `name = "base64 key"` lines.
fn read_trust_file(path: &Path) -> Result<BTreeMap<String, String>, KeyError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let bad = |message: String| KeyError::TrustFile {
        path: path.to_owned(),
        message,
    };
    use std::io::Read;
    // Opened once, not through a link, and judged by what was opened.
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(bad(
                "is a symbolic link; a trust file must be the file itself".to_owned(),
            ));
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    let me = rustix::process::geteuid().as_raw();
    let meta = file.metadata().map_err(|e| bad(e.to_string()))?;
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(std::fs::metadata)
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    for (what, meta) in [("it", Some(&meta)), ("its folder", folder.as_ref())] {
        let Some(meta) = meta else { continue };
        let mode = meta.mode() & 0o7777;
        // A sticky folder lets others add files, not replace this one.
        let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
        if mode & 0o022 != 0 && !sticky_dir {
            return Err(bad(format!(
                "group or others may write {what} (mode {:o}); `chmod go-w` it after checking its keys",
                mode & 0o777
            )));
        }
        if meta.uid() != me && meta.uid() != 0 {
            return Err(bad(format!(
                "{what} is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            )));
        }
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| bad(e.to_string()))?;
    toml::from_str(&text).map_err(|e: toml::de::Error| {
        bad(format!(
            "{} (expected lines `name = \"base64 public key\"`)",
            e.message()
        ))
    })
}

/// Adds `name = key` to the trust file (created 0600, its folder 0700, comments kept),
/// replacing the file atomically.
pub fn trust_in_file(path: &Path, name: &str, key: &VerifyingKey) -> Result<(), KeyError> {
    let bad = |message: String| KeyError::TrustFile {
        path: path.to_owned(),
        message,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => TRUST_FILE_HEADER.to_owned(),
        Err(e) => return Err(bad(e.to_string())),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| bad(format!("{e}")))?;
    doc[name] = toml_edit::value(public_key_text(key));
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| bad(e.to_string()))?;
    }
    crate::install::replace_file(path, doc.to_string().as_bytes()).map_err(|e| bad(e.to_string()))
}

const TRUST_FILE_HEADER: &str = "\
# Executor signers Metnos trusts besides [executors.trusted_keys] in the config:
# name = \"ed25519 public key, base64\". Written by `metnos up` for the key it made;
# only its owner may write it (group- or world-writable, it is refused).
";

/// `manifest.sig`: who signed, with which key, and the signature.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SignatureFile {
    pub signer: String,
    pub public_key: String,
    pub signature: String,
}

/// Why a signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no signature ({SIGNATURE_FILE} is missing)")]
    Missing,
    #[error("{SIGNATURE_FILE} is malformed: {0}")]
    Malformed(String),
    #[error("signed by `{0}`, whose key is not among the trusted keys")]
    Untrusted(String),
    #[error("the signature does not match the manifest (changed after signing?)")]
    Mismatch,
}

/// Signs `manifest` as `signer`.
pub fn sign(manifest: &Manifest, key: &SigningKey, signer: &str) -> SignatureFile {
    let signature = key.sign(&manifest.canonical_bytes());
    SignatureFile {
        signer: signer.to_owned(),
        public_key: public_key_text(&key.verifying_key()),
        signature: BASE64.encode(signature.to_bytes()),
    }
}

/// Reads the signature file in `dir`.
pub fn read_signature(dir: &Path) -> Result<SignatureFile, SignatureError> {
    let text = match std::fs::read_to_string(dir.join(SIGNATURE_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SignatureError::Missing),
        Err(e) => return Err(SignatureError::Malformed(e.to_string())),
    };
    toml::from_str(&text).map_err(|e| SignatureError::Malformed(e.message().to_owned()))
}

/// Checks `signature` over `manifest` against the trusted keys; the trusted signer's
/// name (as config names it) when it holds.
pub fn verify(
    manifest: &Manifest,
    signature: &SignatureFile,
    trust: &Trust,
) -> Result<String, SignatureError> {
    let key = parse_public_key(&signature.public_key)
        .ok_or_else(|| SignatureError::Malformed("public_key is not an ed25519 key".into()))?;
    let Some(signer) = trust.signer_of(&key) else {
        return Err(SignatureError::Untrusted(
            signature.signer.chars().take(64).collect(),
        ));
    };
    let bytes: [u8; 64] = BASE64
        .decode(signature.signature.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| SignatureError::Malformed("signature is not 64 base64 bytes".into()))?;
    key.verify_strict(&manifest.canonical_bytes(), &Signature::from_bytes(&bytes))
        .map_err(|_| SignatureError::Mismatch)?;
    Ok(signer.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest::parse(
            r#"
name = "time_now"
description = "The time"
capabilities = ["time:read"]
program = "metnos-exec"
[args]
type = "object"
"#,
        )
        .unwrap()
    }

    #[test]
    fn a_signature_holds_until_the_manifest_changes_and_only_for_trusted_keys() {
        let key = generate().unwrap();
        let m = manifest();
        let sig = sign(&m, &key, "owner");
        let mut keys = BTreeMap::new();
        keys.insert("home".to_owned(), public_key_text(&key.verifying_key()));
        let trust = Trust::from_config(&keys).unwrap();
        assert_eq!(verify(&m, &sig, &trust).unwrap(), "home");

        let mut changed = m.clone();
        changed.timeout_seconds = 31;
        assert_eq!(
            verify(&changed, &sig, &trust),
            Err(SignatureError::Mismatch)
        );

        let stranger = generate().unwrap();
        let forged = sign(&m, &stranger, "home");
        assert_eq!(
            verify(&m, &forged, &trust),
            Err(SignatureError::Untrusted("home".into()))
        );
    }

    #[test]
    fn keys_round_trip_through_a_private_file_and_errors_do_not_show_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/owner.key");
        let key = generate().unwrap();
        write_key(&path, &key).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(read_key(&path).unwrap().to_bytes(), key.to_bytes());
        assert!(matches!(write_key(&path, &key), Err(KeyError::Exists(_))));

        let pem = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, pem.replace('A', "B")).unwrap();
        let error = read_key(&path).unwrap_err().to_string();
        assert!(error.contains("owner.key"), "{error}");
        assert!(!error.contains("PRIVATE"), "{error}");
    }

    #[test]
    fn a_malformed_trusted_key_names_its_signer() {
        let mut keys = BTreeMap::new();
        keys.insert("alice".to_owned(), "not-base64!".to_owned());
        assert_eq!(
            Trust::from_config(&keys).unwrap_err().to_string(),
            "trusted key `alice` is not a base64 ed25519 public key (32 bytes)"
        );
    }

    fn public(key: &SigningKey) -> String {
        public_key_text(&key.verifying_key())
    }

    #[test]
    fn the_trust_file_adds_signers_beside_the_config_and_keeps_what_was_there() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config/metnos/trusted_keys.toml");
        let (alice, bob) = (generate().unwrap(), generate().unwrap());
        let mut config = BTreeMap::new();
        config.insert("alice".to_owned(), public(&alice));

        // None yet: the config's keys only.
        let trust = Trust::load(&config, &path).unwrap();
        assert_eq!(trust.signer_of(&alice.verifying_key()), Some("alice"));
        assert_eq!(trust.signer_of(&bob.verifying_key()), None);

        trust_in_file(&path, "bob", &bob.verifying_key()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let trust = Trust::load(&config, &path).unwrap();
        assert_eq!(trust.signer_of(&alice.verifying_key()), Some("alice"));
        assert_eq!(trust.signer_of(&bob.verifying_key()), Some("bob"));

        // A person's own line and comment survive the next addition.
        let carol = generate().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            format!("{text}# my laptop\nalice = \"{}\"\n", public(&alice)),
        )
        .unwrap();
        trust_in_file(&path, "carol", &carol.verifying_key()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("# my laptop"), "{text}");
        let trust = Trust::load(&config, &path).unwrap();
        assert_eq!(trust.signer_of(&carol.verifying_key()), Some("carol"));
        assert_eq!(trust.signer_of(&alice.verifying_key()), Some("alice"));
    }

    #[test]
    fn a_trust_file_others_may_write_or_that_contradicts_the_config_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trusted_keys.toml");
        let (alice, mallory) = (generate().unwrap(), generate().unwrap());
        let mut config = BTreeMap::new();
        config.insert("alice".to_owned(), public(&alice));

        // Anyone in the group could add a key and have their executor run.
        trust_in_file(&path, "bob", &mallory.verifying_key()).unwrap();
        for open in [0o620, 0o602, 0o666] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(open)).unwrap();
            let e = Trust::load(&config, &path).unwrap_err().to_string();
            assert!(e.contains("group or others may write it"), "{e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
        }
        // Readable by others is not a risk (public keys): only writing is.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Trust::load(&config, &path).unwrap();

        // The same name with another key than the config's: which one is meant?
        trust_in_file(&path, "alice", &mallory.verifying_key()).unwrap();
        let e = Trust::load(&config, &path).unwrap_err().to_string();
        assert!(e.contains("`alice` has another key here"), "{e}");

        std::fs::write(&path, "alice = 3\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = Trust::load(&BTreeMap::new(), &path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected lines `name = \"base64 public key\"`"),
            "{e}"
        );
        std::fs::write(&path, "alice = \"c2hvcnQ=\"\n").unwrap();
        let e = Trust::load(&BTreeMap::new(), &path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`alice` is not a base64 ed25519 public key"),
            "{e}"
        );
    }

    #[test]
    fn a_trust_file_through_a_link_or_in_a_folder_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mallory = generate().unwrap();
        let real = dir.path().join("real.toml");
        trust_in_file(&real, "mallory", &mallory.verifying_key()).unwrap();
        let link = dir.path().join("trusted_keys.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = Trust::load(&BTreeMap::new(), &link)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symbolic link"), "{e}");

        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let path = open.join("trusted_keys.toml");
        trust_in_file(&path, "mallory", &mallory.verifying_key()).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Trust::load(&BTreeMap::new(), &path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("group or others may write its folder (mode 777)"),
            "{e}"
        );
        // Sticky, as /tmp: others may add files there, not replace this one.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Trust::load(&BTreeMap::new(), &path).unwrap();

        // Adding a key never writes through a link left at the temporary name.
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "mine\n").unwrap();
        let ours = dir.path().join("ours/trusted_keys.toml");
        std::fs::create_dir_all(ours.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&victim, ours.with_extension("toml.partial")).unwrap();
        trust_in_file(&ours, "owner", &mallory.verifying_key()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        Trust::load(&BTreeMap::new(), &ours).unwrap();
    }

    #[test]
    fn a_key_others_may_read_is_refused_as_ssh_refuses_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owner.key");
        write_key(&path, &generate().unwrap()).unwrap();
        for open in [0o640, 0o604, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(open)).unwrap();
            let e = read_key(&path).unwrap_err().to_string();
            assert!(e.contains("group or others may read or change it"), "{e}");
            assert!(!e.contains("PRIVATE"), "{e}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        read_key(&path).unwrap();
    }
}
