//! Servers that are not what they should be: an ICS file over HTTP with a redirect to
//! another host that records whether credentials came with it, an IMAP server that never
//! greets, and one that announces a message far larger than it said.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use metnos_core::accounts::{Accounts, CalendarSource};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::common::{Fixture, error};
use super::servers::{Mail, Pki};
use super::{call, content, runner, with_mail};

const HOLIDAYS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\n\
BEGIN:VEVENT\r\nUID:h1\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20261225\r\nSUMMARY:Christmas\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:h2\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=YEARLY\r\nSUMMARY:New Year\r\nEND:VEVENT\r\n\
END:VCALENDAR\r\n";

/// A plain HTTP server on `ip`: `/holidays.ics`, `/moved` (a redirect to `to`), and a
/// record of every Authorization header it was sent.
fn http_server(ip: [u8; 4], to: Option<SocketAddr>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::from(ip), 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let record = record.clone();
                tokio::spawn(async move {
                    let handle = move |request: Request<hyper::body::Incoming>| {
                        let record = record.clone();
                        async move {
                            let auth = request
                                .headers()
                                .get("authorization")
                                .map(|v| v.to_str().unwrap_or("?").to_owned());
                            record.lock().unwrap().push(auth.unwrap_or_default());
                            let response = match (request.uri().path(), to) {
                                ("/moved/", Some(to)) => Response::builder()
                                    .status(301)
                                    .header("location", format!("http://{to}/holidays.ics"))
                                    .body(Full::new(Bytes::new())),
                                _ => Response::builder()
                                    .header("content-type", "text/calendar")
                                    .body(Full::new(Bytes::from(HOLIDAYS))),
                            };
                            Ok::<_, std::convert::Infallible>(response.unwrap())
                        }
                    };
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, hyper::service::service_fn(handle))
                        .await;
                });
            }
        });
    });
    (addr, seen)
}

#[tokio::test]
async fn an_ics_file_is_read_and_a_redirect_elsewhere_is_not_followed_with_credentials() {
    let (elsewhere, reached) = http_server([127, 0, 0, 2], None);
    let (home, _) = http_server([127, 0, 0, 1], Some(elsewhere));
    let fixture = Fixture::with_builtins();
    let catalog = fixture.load();
    let mut accounts = Accounts::default();
    accounts.calendar.insert(
        "holidays".into(),
        CalendarSource {
            ics_url: format!("http://{home}/holidays.ics"),
            ..CalendarSource::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("pw");
    std::fs::write(&password_file, "hunter2\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    accounts.calendar.insert(
        "moved".into(),
        CalendarSource {
            caldav_url: format!("http://{home}/moved/"),
            user: "me".into(),
            password_file,
            ..CalendarSource::default()
        },
    );
    let runner = runner(&fixture, accounts);
    let listed = call(
        &runner,
        &catalog,
        "calendar_list",
        json!({"source": "holidays", "from": "2026-12-20", "to": "2027-01-05"}),
    )
    .await;
    let events: Vec<(&str, &str)> = content(&listed)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["title"].as_str().unwrap(), e["start"].as_str().unwrap()))
        .collect();
    assert_eq!(
        events,
        [("Christmas", "2026-12-25"), ("New Year", "2027-01-01")]
    );

    let refused = call(
        &runner,
        &catalog,
        "calendar_list",
        json!({"source": "moved"}),
    )
    .await;
    let text = error(&refused);
    assert!(text.contains("not followed"), "{text}");
    assert!(
        text.contains("127.0.0.2"),
        "the new address is named: {text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        reached.lock().unwrap().is_empty(),
        "the other host was reached"
    );
    let added = call(
        &runner,
        &catalog,
        "calendar_add",
        json!({"source": "holidays", "title": "x", "start": "2026-12-01T10:00", "end": "2026-12-01T11:00"}),
    )
    .await;
    assert!(error(&added).contains("ICS file"), "{added:?}");
}

/// A TLS server on loopback that greets (or not) and answers IMAP as `script` says.
async fn fake_imap(pki: &Pki, greet: bool, lie: bool) -> u16 {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(&pki.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&pki.key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                if !greet {
                    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
                    return;
                }
                let _ = tls.write_all(b"* OK ready\r\n").await;
                let mut buf = vec![0u8; 4096];
                let mut pending = String::new();
                while let Ok(n) = tls.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                    let Some(end) = pending.find("\r\n") else {
                        continue;
                    };
                    let line: String = pending.drain(..end + 2).collect();
                    let tag = line.split(' ').next().unwrap_or("*").to_owned();
                    if line.contains("FETCH") && lie {
                        // Says 40 bytes, then sends a literal of 300 MB.
                        let _ = tls
                            .write_all(b"* 1 FETCH (UID 1 RFC822.SIZE 40 BODY[]<0> {300000000}\r\n")
                            .await;
                        let chunk = vec![b'A'; 64 * 1024];
                        while tls.write_all(&chunk).await.is_ok() {}
                        return;
                    }
                    let reply = if line.contains("SEARCH") {
                        format!("* SEARCH 1\r\n{tag} OK done\r\n")
                    } else {
                        format!("{tag} OK done\r\n")
                    };
                    let _ = tls.write_all(reply.as_bytes()).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn an_imap_server_that_hangs_or_lies_about_sizes_is_named_and_bounded() {
    let mail = Mail::start().await;
    let fixture = Fixture::with_builtins();
    // The mail built-ins' time, shortened for the test (the manifest is signed again).
    let manifest = fixture
        .catalog_dir()
        .join("mail_read")
        .join("manifest.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("timeout_seconds = 30", "timeout_seconds = 4"),
    )
    .unwrap();
    fixture.sign();
    let catalog = fixture.load();
    for (greet, expected) in [
        (false, "no answer within 3 s"),
        (true, "more than this call may read"),
    ] {
        let mut account = mail.account();
        account.imap_port = fake_imap(&mail.pki, greet, true).await;
        let mut accounts = Accounts::default();
        accounts.mail.insert("home".into(), account);
        let started = std::time::Instant::now();
        let read = call(
            &runner(&fixture, accounts),
            &catalog,
            "mail_read",
            json!({"account": "home", "id": 1, "max_bytes": 1000}),
        )
        .await;
        let text = error(&read);
        assert!(text.contains(expected), "{text}");
        assert!(started.elapsed().as_secs() < 10);
    }
    // And the real server still answers.
    let ok = call(
        &runner(&fixture, with_mail(&mail)),
        &catalog,
        "mail_search",
        json!({"account": "home"}),
    )
    .await;
    assert!(ok.ok, "{ok:?}");
}
