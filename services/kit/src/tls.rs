//! Mutual TLS on every gRPC hop (DESIGN §4a). Each service and the person who runs the host
//! (the *owner*, through the CLI) has an identity: a certificate signed by the
//! installation's CA that names it as a SPIFFE ID, `spiffe://metnos/<name>`. Servers
//! require a client certificate and authorise each RPC by the identity it names
//! ([`crate::authz`]); clients check that the server is the service they meant to reach.
//!
//! The built-in PKI ([`init`]) keeps, under `tls.dir` (default `<data_dir>/pki`, 0700):
//! `ca.crt` and `ca.key` (the CA), and `<name>.crt` / `<name>.key` for each identity, every
//! file 0600. A mesh that issues SPIFFE certificates (SPIRE, Linkerd, Istio) can replace it:
//! `tls.ca_file`, `tls.cert_file` and `tls.key_file` name its bundle and this process's
//! certificate and key. Whichever issued them, a service certificate must name the service
//! by its SPIFFE ID (URI SAN) and by `<name>.metnos` (DNS SAN), which clients check.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use tonic::transport::{Certificate, ClientTlsConfig, Identity as TlsIdentity, ServerTlsConfig};

use crate::config::{Config, ServiceName};

/// The SPIFFE trust domain of an installation.
pub const TRUST_DOMAIN: &str = "metnos";

/// Who is calling, or being called: a service, or the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identity {
    Policy,
    Vaglio,
    Approval,
    Planner,
    Gateway,
    /// The person who runs the host, through the `metnos` command.
    Owner,
    /// The owner's spectator page, served in the gateway's process under an identity of its
    /// own: it reads keys-only records and may revoke a grant, never start a turn or speak
    /// for a person (a bug in a page must not carry the gateway's rights).
    Web,
}

impl Identity {
    pub const ALL: [Identity; 7] = [
        Identity::Policy,
        Identity::Vaglio,
        Identity::Approval,
        Identity::Planner,
        Identity::Gateway,
        Identity::Owner,
        Identity::Web,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Identity::Policy => "policy",
            Identity::Vaglio => "vaglio",
            Identity::Approval => "approval",
            Identity::Planner => "planner",
            Identity::Gateway => "gateway",
            Identity::Owner => "owner",
            Identity::Web => "web",
        }
    }

    /// A service's identity.
    pub fn of(service: ServiceName) -> Identity {
        match service {
            ServiceName::Policy => Identity::Policy,
            ServiceName::Vaglio => Identity::Vaglio,
            ServiceName::Approval => Identity::Approval,
            ServiceName::Planner => Identity::Planner,
            ServiceName::Gateway => Identity::Gateway,
        }
    }

    /// `spiffe://metnos/<name>`.
    pub fn spiffe_id(self) -> String {
        format!("spiffe://{TRUST_DOMAIN}/{}", self.name())
    }

    /// The DNS name its certificate carries and clients check: `<name>.metnos`.
    pub fn server_name(self) -> String {
        format!("{}.{TRUST_DOMAIN}", self.name())
    }

    /// The identity a SPIFFE ID names, if it is one of this trust domain's.
    pub fn from_spiffe_id(id: &str) -> Option<Identity> {
        let name = id.strip_prefix("spiffe://")?.strip_prefix(TRUST_DOMAIN)?;
        let name = name.strip_prefix('/')?;
        Identity::ALL.into_iter().find(|i| i.name() == name)
    }

    /// The channels whose people this identity speaks for: the gateway for the people it
    /// authenticated on Telegram, the owner for the local user (`cli`).
    pub fn channels(self) -> &'static [&'static str] {
        match self {
            Identity::Gateway => &["telegram"],
            Identity::Owner => &[metnos_core::principal::TERMINAL],
            _ => &[],
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong with certificates. Messages name files, never their content.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source} (run `metnos pki init` to create the certificates)")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a PEM certificate")]
    NotACertificate { path: PathBuf },
    #[error("{path} names {found}, not {expected} (a certificate of another identity?)")]
    WrongIdentity {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {message}")]
    Unusable { path: PathBuf, message: String },
}

/// A certificate that names no identity of this installation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("the certificate cannot be parsed")]
    Unparsable,
    #[error("the certificate names no SPIFFE ID")]
    NoSpiffeId,
    #[error("{0} is not an identity of this installation")]
    Foreign(String),
}

/// The SPIFFE IDs (URI SANs) a DER certificate names.
pub fn spiffe_ids(der: &[u8]) -> Result<Vec<String>, CertError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|_| CertError::Unparsable)?;
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Ok(Vec::new());
    };
    Ok(san
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) if uri.starts_with("spiffe://") => {
                Some((*uri).to_owned())
            }
            _ => None,
        })
        .collect())
}

/// The identity a DER certificate names.
pub fn identity_of(der: &[u8]) -> Result<Identity, CertError> {
    let ids = spiffe_ids(der)?;
    let Some(first) = ids.first() else {
        return Err(CertError::NoSpiffeId);
    };
    ids.iter()
        .find_map(|id| Identity::from_spiffe_id(id))
        .ok_or_else(|| CertError::Foreign(first.clone()))
}

/// Where the built-in PKI keeps one identity's files.
pub fn cert_path(dir: &Path, identity: Identity) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{}.crt", identity.name())),
        dir.join(format!("{}.key", identity.name())),
    )
}

/// The built-in CA's certificate and key.
pub fn ca_path(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("ca.crt"), dir.join("ca.key"))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Creates `dir` 0700 (and makes an existing one 0700).
pub fn private_dir(dir: &Path) -> Result<(), TlsError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let write_error = |source| TlsError::Write {
        path: dir.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(write_error)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(write_error)
}

/// Writes `bytes` to `path` 0600, replacing it atomically.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let write_error = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let partial = path.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(write_error)?;
    file.write_all(bytes).map_err(write_error)?;
    file.sync_all().map_err(write_error)?;
    std::fs::rename(&partial, path).map_err(write_error)
}

/// What [`init`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Created {
    pub ca: bool,
    pub identities: Vec<Identity>,
}

fn validity(params: &mut CertificateParams, years: i16) {
    let now = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::UTC);
    let yesterday = now.date().yesterday().unwrap_or(now.date());
    let date = |d: jiff::civil::Date, years: i16| {
        let year = d.year().saturating_add(years);
        // 29 February does not come back every year.
        rcgen::date_time_ymd(i32::from(year), d.month() as u8, d.day().min(28) as u8)
    };
    params.not_before = date(yesterday, 0);
    params.not_after = date(now.date(), years);
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Metnos");
    name.push(DnType::CommonName, "Metnos installation CA");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, 10);
    params
}

fn identity_params(identity: Identity) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Metnos");
    name.push(DnType::CommonName, identity.spiffe_id());
    params.distinguished_name = name;
    let ia5 = |text: String| text.try_into().map_err(TlsError::Generate);
    let mut sans = vec![
        SanType::URI(ia5(identity.spiffe_id())?),
        SanType::DnsName(ia5(identity.server_name())?),
    ];
    if identity != Identity::Owner {
        // So stock tools (grpcurl) reach a service by the name or address they dial.
        for dns in [
            "localhost".to_owned(),
            identity.name().to_owned(),
            format!("metnos-{}", identity.name()),
        ] {
            sans.push(SanType::DnsName(ia5(dns)?));
        }
        sans.push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        sans.push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
    }
    params.subject_alt_names = sans;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, 5);
    Ok(params)
}

/// Creates what is missing of the built-in PKI under `dir`: the CA, then a certificate
/// for each identity, signed by it. What exists is kept. `rotate`: a new CA and new
/// certificates for every identity, replacing the old ones (every service must restart).
pub fn init(dir: &Path, rotate: bool) -> Result<Created, TlsError> {
    private_dir(dir)?;
    let (ca_crt, ca_key) = ca_path(dir);
    let mut created = Created::default();
    let (issuer_pem, issuer_key) = if rotate || !ca_crt.exists() || !ca_key.exists() {
        let key = KeyPair::generate()?;
        let cert = ca_params().self_signed(&key)?;
        write_private(&ca_key, key.serialize_pem().as_bytes())?;
        write_private(&ca_crt, cert.pem().as_bytes())?;
        created.ca = true;
        (cert.pem(), key)
    } else {
        let pem = String::from_utf8_lossy(&read(&ca_crt)?).into_owned();
        let key_pem = String::from_utf8_lossy(&read(&ca_key)?).into_owned();
        let key = KeyPair::from_pem(&key_pem).map_err(|e| TlsError::Unusable {
            path: ca_key.clone(),
            message: e.to_string(),
        })?;
        (pem, key)
    };
    let issuer =
        Issuer::from_ca_cert_pem(&issuer_pem, &issuer_key).map_err(|e| TlsError::Unusable {
            path: ca_crt.clone(),
            message: e.to_string(),
        })?;
    for identity in Identity::ALL {
        let (crt, key_path) = cert_path(dir, identity);
        if !created.ca && crt.exists() && key_path.exists() {
            continue;
        }
        let key = KeyPair::generate()?;
        let cert = identity_params(identity)?.signed_by(&key, &issuer)?;
        write_private(&key_path, key.serialize_pem().as_bytes())?;
        write_private(&crt, cert.pem().as_bytes())?;
        created.identities.push(identity);
    }
    Ok(created)
}

/// One identity's TLS material, loaded and checked: the CA bundle, its certificate and
/// key. Debug never shows the key.
#[derive(Clone)]
pub struct Tls {
    pub identity: Identity,
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// When the first certificate in the PEM file `path` starts and stops being valid (Unix
/// seconds).
pub fn valid_between(path: &Path) -> Result<(i64, i64), TlsError> {
    let pem = read(path)?;
    let der = first_certificate(&pem, path)?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(|_| TlsError::NotACertificate {
            path: path.to_owned(),
        })?;
    let validity = cert.validity();
    Ok((
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    ))
}

/// The files an identity's TLS material is read from, as config says.
pub fn files(config: &Config, identity: Identity) -> (PathBuf, PathBuf, PathBuf) {
    let tls = &config.tls;
    let or = |path: &PathBuf, default: PathBuf| {
        if path.as_os_str().is_empty() {
            default
        } else {
            path.clone()
        }
    };
    let (crt, key) = cert_path(&tls.dir, identity);
    (
        or(&tls.ca_file, ca_path(&tls.dir).0),
        or(&tls.cert_file, crt),
        or(&tls.key_file, key),
    )
}

fn first_certificate(pem: &[u8], path: &Path) -> Result<Vec<u8>, TlsError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .next()
        .and_then(Result::ok)
        .map(|der| der.to_vec())
        .ok_or_else(|| TlsError::NotACertificate {
            path: path.to_owned(),
        })
}

impl Tls {
    /// Loads `identity`'s material as config says, checking that its certificate names
    /// that identity.
    pub fn load(config: &Config, identity: Identity) -> Result<Tls, TlsError> {
        let (ca_path, cert_path, key_path) = files(config, identity);
        let ca = read(&ca_path)?;
        first_certificate(&ca, &ca_path)?;
        let cert = read(&cert_path)?;
        let der = first_certificate(&cert, &cert_path)?;
        match identity_of(&der) {
            Ok(found) if found == identity => {}
            Ok(found) => {
                return Err(TlsError::WrongIdentity {
                    path: cert_path,
                    found: found.spiffe_id(),
                    expected: identity.spiffe_id(),
                });
            }
            Err(e) => {
                return Err(TlsError::WrongIdentity {
                    path: cert_path,
                    found: e.to_string(),
                    expected: identity.spiffe_id(),
                });
            }
        }
        let key = read(&key_path)?;
        Ok(Tls {
            identity,
            ca,
            cert,
            key,
        })
    }

    /// The server side: this identity's certificate, and client certificates checked
    /// against the CA. A client may connect without one — so health answers probes — but
    /// every other RPC then answers UNAUTHENTICATED ([`crate::authz`]); a certificate the
    /// CA did not sign fails the handshake.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(TlsIdentity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(true)
            .timeout(std::time::Duration::from_secs(10))
    }

    /// The client side, calling `server`: its certificate must be signed by the CA and name
    /// it (`<name>.metnos`); this identity's certificate is presented.
    pub fn client(&self, server: Identity) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(TlsIdentity::from_pem(&self.cert, &self.key))
            .domain_name(server.server_name())
            .assume_http2(true)
            .timeout(std::time::Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_spiffe_ids_of_the_metnos_trust_domain() {
        for identity in Identity::ALL {
            assert_eq!(
                Identity::from_spiffe_id(&identity.spiffe_id()),
                Some(identity)
            );
        }
        assert_eq!(Identity::Planner.spiffe_id(), "spiffe://metnos/planner");
        assert_eq!(Identity::from_spiffe_id("spiffe://other/planner"), None);
        assert_eq!(Identity::from_spiffe_id("spiffe://metnos/root"), None);
        assert_eq!(Identity::from_spiffe_id("spiffe://metnosx/planner"), None);
        assert_eq!(Identity::from_spiffe_id("https://metnos/planner"), None);
    }

    #[test]
    fn init_makes_a_private_pki_whose_certificates_name_their_identity() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let created = init(&pki, false).unwrap();
        assert!(created.ca);
        assert_eq!(created.identities, Identity::ALL);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&pki), 0o700);
        for entry in std::fs::read_dir(&pki).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        for identity in Identity::ALL {
            let pem = std::fs::read(cert_path(&pki, identity).0).unwrap();
            let der = first_certificate(&pem, Path::new("x")).unwrap();
            assert_eq!(identity_of(&der), Ok(identity));
        }
        // A second run keeps everything.
        let before = std::fs::read(cert_path(&pki, Identity::Owner).0).unwrap();
        assert_eq!(init(&pki, false).unwrap(), Created::default());
        assert_eq!(
            std::fs::read(cert_path(&pki, Identity::Owner).0).unwrap(),
            before
        );
        // A rotation replaces the CA and every certificate.
        let rotated = init(&pki, true).unwrap();
        assert!(rotated.ca && rotated.identities.len() == Identity::ALL.len());
        assert_ne!(
            std::fs::read(cert_path(&pki, Identity::Owner).0).unwrap(),
            before
        );
    }

    #[test]
    fn loading_checks_the_certificate_names_the_identity() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.tls.dir = dir.path().join("pki");
        init(&config.tls.dir, false).unwrap();
        assert!(Tls::load(&config, Identity::Gateway).is_ok());
        // The owner's certificate handed in as the planner's.
        config.tls.cert_file = cert_path(&config.tls.dir, Identity::Owner).0;
        let error = Tls::load(&config, Identity::Planner)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("spiffe://metnos/owner")
                && error.contains("not spiffe://metnos/planner"),
            "{error}"
        );
        config.tls.cert_file = PathBuf::new();
        config.tls.dir = dir.path().join("missing");
        let error = Tls::load(&config, Identity::Planner)
            .unwrap_err()
            .to_string();
        assert!(error.contains("metnos pki init"), "{error}");
        let debug = format!("{:?}", {
            config.tls.dir = dir.path().join("pki");
            Tls::load(&config, Identity::Owner).unwrap()
        });
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    }
}
