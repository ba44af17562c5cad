//! `[tls]`: where the certificates of mutual TLS are (see `crate::tls`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where each identity's certificate and key, and the CA that signed them, are.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The built-in PKI: `ca.crt`, `<identity>.crt`, `<identity>.key`. Empty:
    /// `<data_dir>/pki`.
    pub dir: PathBuf,
    /// A CA bundle to trust instead of `<dir>/ca.crt` (a mesh's, e.g. SPIRE's).
    pub ca_file: PathBuf,
    /// This process's certificate and key instead of `<dir>/<identity>.crt` / `.key`.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}
