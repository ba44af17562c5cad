//! `web_fetch`: GET and POST against a real loopback server, errors, the network guard and
//! redirects.

use super::*;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};

async fn handle(
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let header = request
        .headers()
        .get("x-test")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let response = |status: u16, content_type: &str, body: Vec<u8>| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    Ok(match path.as_str() {
        "/latin" => response(200, "text/plain; charset=iso-8859-1", b"caf\xe9".to_vec()),
        "/echo" => response(
            200,
            "application/json",
            format!(
                "{{\"body\":\"{}\",\"header\":\"{header}\"}}",
                String::from_utf8_lossy(&body)
            )
            .into_bytes(),
        ),
        "/binary" => response(200, "image/png", vec![0x89, b'P', b'N', b'G', 0, 0]),
        "/big" => response(200, "text/plain", vec![b'x'; 3 * 1024 * 1024]),
        "/carry" => Response::builder()
            .status(307)
            .header("location", "http://127.0.0.1:9/sink")
            .body(Full::new(Bytes::new()))
            .unwrap(),
        "/same" => Response::builder()
            .status(307)
            .header("location", "/echo")
            .body(Full::new(Bytes::new()))
            .unwrap(),
        "/away" => Response::builder()
            .status(302)
            .header("location", "http://localhost:9/elsewhere")
            .body(Full::new(Bytes::new()))
            .unwrap(),
        "/metadata" => Response::builder()
            .status(302)
            .header("location", "http://169.254.169.254/latest/meta-data/")
            .body(Full::new(Bytes::new()))
            .unwrap(),
        p if p.starts_with("/loop/") => {
            let n: u32 = p[6..].parse().unwrap_or(0);
            Response::builder()
                .status(302)
                .header("location", format!("/loop/{}", n + 1))
                .body(Full::new(Bytes::new()))
                .unwrap()
        }
        _ => response(404, "text/plain", b"not here".to_vec()),
    })
}

/// A real HTTP server on loopback, on its own thread.
fn http_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
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
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, hyper::service::service_fn(handle))
                        .await;
                });
            }
        });
    });
    addr
}

#[tokio::test]
async fn web_fetch_gets_posts_and_decodes_text() {
    let (f, catalog) = setup();
    let addr = http_server();
    let o = f
        .run(
            &catalog,
            "web_fetch",
            json!({"url": format!("http://{addr}/latin")}),
        )
        .await;
    assert_eq!(content_text(&o), "café");
    assert_eq!(meta(&o, "status"), &json!(200));
    assert_eq!(meta(&o, "bytes"), &json!(4));
    assert_eq!(meta(&o, "encoding"), &json!("windows-1252"));
    let o = f
        .run(&catalog, "web_fetch", json!({"url": format!("http://{addr}/echo"), "method": "POST", "body": "hi", "headers": {"x-test": "yes"}}))
        .await;
    assert_eq!(content_text(&o), r#"{"body":"hi","header":"yes"}"#);
    // Third review of issue 38: `Host` sent the request to another site on a shared
    // address than the URL (and the card) named.
    for (name, value) in [("Host", "evil.example"), ("transfer-encoding", "chunked")] {
        let o = f
            .run(
                &catalog,
                "web_fetch",
                json!({"url": format!("http://{addr}/echo"), "headers": {name: value}}),
            )
            .await;
        assert!(
            error(&o).contains("the connection's, not the call's"),
            "{name}: {o:?}"
        );
    }
    let o = f
        .run(
            &catalog,
            "web_fetch",
            json!({"url": format!("http://{addr}/binary")}),
        )
        .await;
    assert_eq!(meta(&o, "encoding"), &json!("binary"));
    assert_eq!(content_text(&o), "(6 bytes of image/png, not text)");
    let o = f
        .run(
            &catalog,
            "web_fetch",
            json!({"url": format!("http://{addr}/big"), "max_bytes": 1000}),
        )
        .await;
    assert_eq!(content_text(&o).len(), 1000);
    assert_eq!(meta(&o, "truncated"), &json!(true));
}

#[tokio::test]
async fn web_fetch_reports_404_bad_urls_and_redirect_loops() {
    let (f, catalog) = setup();
    let addr = http_server();
    let o = f
        .run(
            &catalog,
            "web_fetch",
            json!({"url": format!("http://{addr}/missing")}),
        )
        .await;
    assert_eq!(
        error(&o),
        format!("HTTP 404 Not Found from http://{addr}/missing")
    );
    assert_eq!(meta(&o, "status"), &json!(404));
    let o = f
        .run(&catalog, "web_fetch", json!({"url": "not a url"}))
        .await;
    assert!(
        error(&o).contains("`not a url` is not an http(s) URL"),
        "{o:?}"
    );
    let o = f
        .run(&catalog, "web_fetch", json!({"url": "ftp://example.com/x"}))
        .await;
    assert!(error(&o).contains("is not an http(s) URL"), "{o:?}");
    let o = f
        .run(
            &catalog,
            "web_fetch",
            json!({"url": format!("http://{addr}/loop/0")}),
        )
        .await;
    assert!(error(&o).contains("more than 5 redirects"), "{o:?}");
    let o = f
        .run(
            &catalog,
            "web_fetch",
            json!({"url": format!("http://{addr}/x"), "method": "DELETE"}),
        )
        .await;
    assert!(error(&o).contains("do not match its schema"), "{o:?}");
}

#[tokio::test]
async fn web_fetch_reaches_this_machine_and_the_home_network_only_through_local_hosts() {
    let (f, catalog) = setup();
    let addr = http_server();
    let port = addr.port();
    // The shipped manifest's scope is `*`; the operator named no local host.
    let runner = metnos_executors::Runner {
        local_hosts: Vec::new(),
        ..f.runner()
    };
    let fetch = |url: String| {
        let runner = runner.clone();
        let catalog = &catalog;
        async move {
            runner
                .check_and_run(catalog, "web_fetch", &json!({ "url": url }))
                .await
        }
    };
    let loopback = "a loopback address (this machine); network executors reach such \
                    addresses only for hosts named in executors.local_hosts";
    let o = fetch(format!("http://127.0.0.1:{port}/latin")).await;
    assert_eq!(
        error(&o),
        format!(
            "fetching http://127.0.0.1:{port}/latin refused: `127.0.0.1` is 127.0.0.1, {loopback}"
        )
    );
    // The same address spelled otherwise: IPv4-mapped IPv6, a bare number.
    let o = fetch(format!("http://[::ffff:127.0.0.1]:{port}/latin")).await;
    assert!(
        error(&o).contains(&format!("is ::ffff:127.0.0.1, {loopback}")),
        "{o:?}"
    );
    let o = fetch(format!("http://2130706433:{port}/latin")).await;
    assert!(
        error(&o).contains(&format!("is 127.0.0.1, {loopback}")),
        "{o:?}"
    );
    // A name is judged by what it resolves to.
    let o = fetch(format!("http://localhost:{port}/latin")).await;
    assert!(
        error(&o).starts_with(&format!(
            "fetching http://localhost:{port}/latin refused: `localhost` is "
        )) && error(&o).ends_with(loopback),
        "{o:?}"
    );
    let o = fetch("http://169.254.169.254/latest/meta-data/".into()).await;
    assert!(
        error(&o).contains("`169.254.169.254` is 169.254.169.254, a link-local address"),
        "{o:?}"
    );
    let o = fetch("http://10.1.2.3/admin".into()).await;
    assert!(
        error(&o).contains("`10.1.2.3` is 10.1.2.3, a private-network address"),
        "{o:?}"
    );

    // Named, 127.0.0.1 is reached; a redirect from there to another local address is not.
    let runner = f.runner();
    let o = runner
        .check_and_run(
            &catalog,
            "web_fetch",
            &json!({"url": format!("http://127.0.0.1:{port}/latin")}),
        )
        .await;
    assert_eq!(content_text(&o), "café");
    let o = runner
        .check_and_run(
            &catalog,
            "web_fetch",
            &json!({"url": format!("http://127.0.0.1:{port}/metadata")}),
        )
        .await;
    assert!(
        error(&o).contains("refused: `169.254.169.254` is 169.254.169.254, a link-local address"),
        "{o:?}"
    );
    let o = runner
        .check_and_run(
            &catalog,
            "web_fetch",
            &json!({"url": format!("http://127.0.0.1:{port}/away")}),
        )
        .await;
    assert!(
        error(&o).contains("refused: `localhost` is ") && error(&o).ends_with(loopback),
        "{o:?}"
    );
}

/// Issue 19: a POST goes where it was asked to (the planner compared that host with where
/// its data came from), never on to another site by a 307.
#[test]
fn a_post_is_not_redirected_to_another_site() {
    let addr = http_server();
    let context = metnos_executors::ExecContext {
        local_hosts: vec!["127.0.0.1".into()],
        timeout_seconds: 10,
        ..Default::default()
    };
    let post = |path: &str| {
        metnos_executors::builtin::run(
            "web_fetch",
            &json!({"url": format!("http://{addr}{path}"), "method": "POST", "body": "salary: 1000"}),
            &context,
        )
    };
    let o = post("/carry");
    assert!(
        error(&o).contains("a POST is not redirected to another site (127.0.0.1:9)"),
        "{o:?}"
    );
    // On the same site it is followed.
    let o = post("/same");
    assert!(o.ok, "{o:?}");
    assert!(
        o.content
            .as_ref()
            .and_then(|c| c.as_str())
            .is_some_and(|c| c.contains("salary: 1000")),
        "{o:?}"
    );
}

#[test]
fn web_fetch_holds_every_redirect_to_the_allowed_hosts() {
    let addr = http_server();
    let context = metnos_executors::ExecContext {
        scope_hosts: vec!["127.0.0.1".into()],
        local_hosts: vec!["127.0.0.1".into()],
        timeout_seconds: 10,
        ..Default::default()
    };
    let run =
        |url: String| metnos_executors::builtin::run("web_fetch", &json!({"url": url}), &context);
    let o = run(format!("http://{addr}/away"));
    assert!(
        error(&o).contains("redirected to `localhost`, outside the allowed hosts"),
        "{o:?}"
    );
    let o = run("http://localhost:9/".into());
    assert!(
        error(&o).contains("host `localhost` is not among the allowed hosts"),
        "{o:?}"
    );
}
