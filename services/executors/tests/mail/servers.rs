//! Real mail and calendar servers for the tests, each in a temporary folder on loopback with
//! a test CA: Dovecot (IMAP, TLS from the first byte and STARTTLS), aiosmtpd (SMTP
//! submission, STARTTLS or implicit TLS, AUTH) and Radicale (CalDAV over TLS). `make
//! test` installs them (`METNOS_TEST_DOVECOT`, `METNOS_TEST_MAIL_PYTHON`).

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use metnos_core::accounts::{CalendarSource, MailAccount, Tls};

pub const USER: &str = "me@example.org";
pub const PASSWORD: &str = "correct horse battery staple";

fn tool(var: &str, what: &str) -> PathBuf {
    PathBuf::from(std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with `make test`, which installs {what}")
    }))
}

/// The workspace's root (`file!()` is relative to it).
fn workspace_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("Cargo.lock").exists() {
        assert!(
            dir.pop(),
            "no Cargo.lock above {}",
            env!("CARGO_MANIFEST_DIR")
        );
    }
    dir
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A test CA and a certificate for localhost and 127.0.0.1 signed by it.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::from_ca_cert_pem(&ca.pem(), &ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        ];
        let cert = params.signed_by(&key, &issuer).unwrap();
        let pki = Pki {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&pki.ca, ca.pem()).unwrap();
        std::fs::write(&pki.cert, cert.pem()).unwrap();
        std::fs::write(&pki.key, key.serialize_pem()).unwrap();
        pki
    }
}

/// A running child, killed when dropped.
pub struct Server {
    pub child: tokio::process::Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn wait_for_port(port: u16, child: &mut tokio::process::Child, log: &Path) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the server exited ({status}) before listening: {text}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing listens on 127.0.0.1:{port}");
}

/// Everything the tests reach: the servers, the account and calendar that name them, and
/// the folder where the SMTP server stores what it receives.
pub struct Mail {
    pub dir: tempfile::TempDir,
    pub pki: Pki,
    pub imaps: u16,
    pub imap: u16,
    pub maildir: PathBuf,
    pub password_file: PathBuf,
    pub sent: PathBuf,
    servers: Vec<Server>,
}

impl Mail {
    /// Dovecot with an empty inbox, and an SMTP submission server (STARTTLS).
    pub async fn start() -> Mail {
        let dir = tempfile::tempdir().unwrap();
        // Dovecot's unprivileged processes must reach its folders.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let pki = Pki::new(dir.path());
        let password_file = dir.path().join("password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sent = dir.path().join("sent");
        std::fs::create_dir(&sent).unwrap();
        let mut mail = Mail {
            maildir: dir.path().join("home").join(USER).join("Maildir"),
            imaps: free_port(),
            imap: free_port(),
            password_file,
            sent,
            pki,
            dir,
            servers: Vec::new(),
        };
        for sub in ["cur", "new", "tmp"] {
            std::fs::create_dir_all(mail.maildir.join(sub)).unwrap();
        }
        mail.start_dovecot().await;
        mail.start_smtp(false).await;
        mail
    }

    async fn start_dovecot(&mut self) {
        let d = self.dir.path();
        std::fs::write(d.join("users"), format!("{USER}:{{PLAIN}}{PASSWORD}\n")).unwrap();
        let conf = format!(
            "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n\
protocols = imap\nlisten = 127.0.0.1\nssl = required\nssl_cert = <{cert}\nssl_key = <{key}\n\
auth_mechanisms = plain login\nfirst_valid_uid = 1\n\
service imap-login {{\n  inet_listener imap {{\n    port = {imap}\n  }}\n  inet_listener imaps {{\n    port = {imaps}\n    ssl = yes\n  }}\n}}\n\
passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {d}/users\n}}\n\
userdb {{\n  driver = static\n  args = uid=nobody gid=nogroup home={d}/home/%u\n}}\n\
mail_location = maildir:~/Maildir\n",
            d = d.display(),
            cert = self.pki.cert.display(),
            key = self.pki.key.display(),
            imap = self.imap,
            imaps = self.imaps,
        );
        std::fs::write(d.join("dovecot.conf"), conf).unwrap();
        for p in [&self.pki.cert, &self.pki.key] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        self.give_maildir();
        let log = d.join("dovecot.out");
        let mut child = tokio::process::Command::new(tool("METNOS_TEST_DOVECOT", "dovecot-imapd"))
            .arg("-F")
            .arg("-c")
            .arg(d.join("dovecot.conf"))
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::File::create(d.join("dovecot.err")).unwrap(),
            ))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        wait_for_port(self.imaps, &mut child, &log).await;
        self.servers.push(Server {
            child,
            port: self.imaps,
        });
    }

    /// Hands the mail folder to the user Dovecot reads it as.
    fn give_maildir(&self) {
        let status = std::process::Command::new("chown")
            .args(["-R", "nobody:nogroup"])
            .arg(self.dir.path().join("home"))
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Starts an SMTP submission server (STARTTLS, or TLS from the first byte), returning
    /// its port.
    pub async fn start_smtp(&mut self, implicit: bool) -> u16 {
        let port = free_port();
        let log = self.dir.path().join(format!("smtp-{port}.log"));
        // Beside this file, whichever crate's tests include it.
        let script = Path::new(file!()).parent().unwrap().join("smtp_server.py");
        let script = if script.is_absolute() {
            script
        } else {
            workspace_root().join(script)
        };
        let mut command =
            tokio::process::Command::new(tool("METNOS_TEST_MAIL_PYTHON", "aiosmtpd and radicale"));
        command
            .arg(script)
            .arg(port.to_string())
            .arg(&self.pki.cert)
            .arg(&self.pki.key)
            .arg(USER)
            .arg(PASSWORD)
            .arg(self.sent.join(port.to_string()));
        std::fs::create_dir_all(self.sent.join(port.to_string())).unwrap();
        if implicit {
            command.arg("implicit");
        }
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        wait_for_port(port, &mut child, &log).await;
        self.servers.push(Server { child, port });
        port
    }

    /// What the SMTP servers logged (every command and reply).
    pub fn smtp_log(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("smtp-") {
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        text
    }

    pub fn smtp_port(&self) -> u16 {
        self.servers[1].port
    }

    /// Puts a message in the inbox (unread unless `seen`), as a delivery would.
    pub fn deliver(&self, n: usize, raw: &str, seen: bool) {
        let (sub, name) = if seen {
            ("cur", format!("{n}.M{n}.test:2,S"))
        } else {
            ("new", format!("{n}.M{n}.test"))
        };
        let path = self.maildir.join(sub).join(name);
        std::fs::write(&path, raw.replace('\n', "\r\n")).unwrap();
        self.give_maildir();
    }

    /// Puts a message in the inbox without handing the folder over (many at once: call
    /// [`Mail::give_maildir_now`] after the last).
    pub fn deliver_quietly(&self, n: usize, raw: &str, seen: bool) {
        let (sub, name) = if seen {
            ("cur", format!("{n}.M{n}.test:2,S"))
        } else {
            ("new", format!("{n}.M{n}.test"))
        };
        std::fs::write(self.maildir.join(sub).join(name), raw.replace('\n', "\r\n")).unwrap();
    }

    pub fn give_maildir_now(&self) {
        self.give_maildir();
    }

    /// The account as the config would name it: implicit TLS, STARTTLS submission.
    pub fn account(&self) -> MailAccount {
        MailAccount {
            imap_host: "127.0.0.1".into(),
            imap_port: self.imaps,
            imap_tls: Tls::Implicit,
            smtp_host: "127.0.0.1".into(),
            smtp_port: self.smtp_port(),
            smtp_tls: Tls::Starttls,
            user: USER.into(),
            password_file: self.password_file.clone(),
            ca_file: self.pki.ca.clone(),
            ..MailAccount::default()
        }
    }

    /// What the SMTP server received: each message's envelope and text, in order.
    pub fn received(&self) -> Vec<(serde_json::Value, String)> {
        let mut out = Vec::new();
        for server in &self.servers[1..] {
            self.received_by(server.port, &mut out);
        }
        out
    }

    fn received_by(&self, port: u16, out: &mut Vec<(serde_json::Value, String)>) {
        for n in 1.. {
            let base = self.sent.join(port.to_string()).join(n.to_string());
            let Ok(envelope) = std::fs::read_to_string(base.with_extension("json")) else {
                break;
            };
            let text = std::fs::read_to_string(base.with_extension("eml")).unwrap_or_default();
            out.push((serde_json::from_str(&envelope).unwrap(), text));
        }
    }
}

/// Radicale serving CalDAV over TLS with one user and one calendar, `me/cal/`.
pub struct Dav {
    pub dir: tempfile::TempDir,
    pub pki: Pki,
    pub port: u16,
    pub password_file: PathBuf,
    server: Server,
}

impl Dav {
    pub async fn start() -> Dav {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let pki = Pki::new(d);
        let port = free_port();
        std::fs::write(d.join("htpasswd"), format!("me:{PASSWORD}\n")).unwrap();
        let password_file = d.join("password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let conf = format!(
            "[server]\nhosts = 127.0.0.1:{port}\nssl = True\ncertificate = {cert}\nkey = {key}\n\
[auth]\ntype = htpasswd\nhtpasswd_filename = {d}/htpasswd\nhtpasswd_encryption = plain\n\
[storage]\nfilesystem_folder = {d}/collections\n[rights]\ntype = owner_only\n\
[logging]\nlevel = warning\n",
            cert = pki.cert.display(),
            key = pki.key.display(),
            d = d.display(),
        );
        std::fs::write(d.join("radicale.conf"), conf).unwrap();
        let log = d.join("radicale.log");
        let mut child =
            tokio::process::Command::new(tool("METNOS_TEST_MAIL_PYTHON", "aiosmtpd and radicale"))
                .args(["-m", "radicale", "--config"])
                .arg(d.join("radicale.conf"))
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(Stdio::from(
                    std::fs::File::create(d.join("radicale.err")).unwrap(),
                ))
                .kill_on_drop(true)
                .spawn()
                .unwrap();
        wait_for_port(port, &mut child, &log).await;
        let dav = Dav {
            dir,
            pki,
            port,
            password_file,
            server: Server { child, port },
        };
        let status = dav
            .client()
            .request(
                reqwest::Method::from_bytes(b"MKCALENDAR").unwrap(),
                dav.collection(),
            )
            .basic_auth("me", Some(PASSWORD))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 201, "MKCALENDAR");
        dav
    }

    pub fn collection(&self) -> String {
        format!("https://127.0.0.1:{}/me/cal/", self.port)
    }

    pub fn client(&self) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.pki.ca).unwrap()).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .no_proxy()
            .build()
            .unwrap()
    }

    /// Stores an iCalendar object as the person's other clients would.
    pub async fn put(&self, name: &str, ics: &str) {
        let status = self
            .client()
            .put(format!("{}{name}.ics", self.collection()))
            .basic_auth("me", Some(PASSWORD))
            .header("Content-Type", "text/calendar")
            .body(ics.replace('\n', "\r\n"))
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "PUT {name}: {status}");
    }

    pub fn source(&self) -> CalendarSource {
        CalendarSource {
            caldav_url: self.collection(),
            user: "me".into(),
            password_file: self.password_file.clone(),
            ca_file: self.pki.ca.clone(),
            ..CalendarSource::default()
        }
    }
}
