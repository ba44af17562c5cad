//! The spectator page (issue 23), against a running stack: over real HTTP, who may see
//! it and what a request from elsewhere can change; in headless Chromium (Debian's
//! `chromium` and `chromium-driver`, started by `scripts/with-test-services.sh`), signing
//! in through a one-time link, a turn appearing live, a grant revoked, and the refusals.
//! Screenshots of each page are kept in `target/web-screenshots/`.

mod common;

use std::time::Duration;

use common::{Sandbox, Up, free_port};
use metnos_llm::fake::{FakeLlm, Reply};
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde_json::json;

const TELOS: &str = "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: owner
previous_hash: genesis
---
# My ultimate ends
## t.tempo — Free my time from repetitive chores
weight: 0.6
activation_threshold: 0.3
notes: if something frees at least 30 minutes a week, consider proposing it.
## t.ordine — Keep the order of my digital data
weight: 0.4
activation_threshold: 0.4
notes: small incremental tidying.
";

struct Page {
    sandbox: Sandbox,
    up: Up,
    llm: FakeLlm,
    /// `http://127.0.0.1:<port>`
    base: String,
}

impl Page {
    async fn start() -> Page {
        Page::start_with(&[]).await
    }

    /// With `metnos <admit>` run before `metnos up` (an MCP server admitted).
    async fn start_with(admit: &[&str]) -> Page {
        let llm = FakeLlm::start().await;
        let mut sandbox = Sandbox::new();
        let port = free_port();
        if admit.is_empty() {
            sandbox.with_builtins();
        } else {
            sandbox.with_owner_builtins();
        }
        sandbox
            .with_fake_llm(llm.url())
            .set("METNOS_WEB__ENABLED", "true")
            .set("METNOS_WEB__LISTEN", &format!("127.0.0.1:{port}"));
        if !admit.is_empty() {
            let (code, out, err) = sandbox.run(admit).await;
            assert_eq!(code, 0, "{out}\n{err}");
        }
        let up = sandbox.up().await;
        Page {
            sandbox,
            up,
            llm,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// `metnos web login`: the one-time link.
    async fn link(&self) -> String {
        let (code, out, err) = self.sandbox.run(&["web", "login"]).await;
        assert_eq!(code, 0, "metnos web login: {err}");
        assert!(err.contains("works once"), "{err}");
        let url = out.trim().to_owned();
        assert!(url.starts_with(&format!("{}/login/", self.base)), "{url}");
        url
    }

    /// Signs in over HTTP (the link's page, then its button): the session cookie.
    async fn sign_in(&self, http: &reqwest::Client) -> String {
        let link = self.link().await;
        let token = link.rsplit('/').next().unwrap();
        let signed = http
            .post(format!("{}/login", self.base))
            .header("origin", &self.base)
            .form(&[("token", token)])
            .send()
            .await
            .unwrap();
        assert_eq!(signed.status(), 303);
        session_cookie(signed.headers()).0
    }

    /// A grant for a Telegram person; its id.
    async fn grant(&self, pattern: &str) -> String {
        let (code, out, err) = self
            .sandbox
            .run(&[
                "grants",
                "add",
                "--channel",
                "telegram",
                "--sender",
                "42",
                "fs:write",
                pattern,
            ])
            .await;
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["id"]
            .as_i64()
            .unwrap()
            .to_string()
    }

    /// Whether grant `id` is still active, as `metnos grants list` says.
    async fn active(&self, id: &str) -> bool {
        let (code, out, err) = self.sandbox.run(&["grants", "list"]).await;
        assert_eq!(code, 0, "{err}");
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|g| g["id"].as_i64().map(|i| i.to_string()).as_deref() == Some(id))
    }

    /// One turn through `metnos ask`: `time_now` with `args`, then an answer.
    async fn turn(&self, args: serde_json::Value) {
        self.llm
            .push(Reply::ToolCalls(vec![("time_now".to_owned(), args)]));
        self.llm.push(Reply::Text("noon".into()));
        let (code, _, err) = self
            .sandbox
            .run(&["ask", "--language", "en", "what time is it?"])
            .await;
        assert_eq!(code, 0, "{err}");
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// The session cookie a sign-in set (`metnos=<value>`), and the whole header.
fn session_cookie(headers: &HeaderMap) -> (String, String) {
    let set = headers
        .get(header::SET_COOKIE)
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .to_owned();
    (set.split(';').next().unwrap().to_owned(), set)
}

fn csrf_of(html: &str) -> String {
    let at = html.find(r#"name="csrf" value=""#).expect("a CSRF field") + 19;
    html[at..].split('"').next().unwrap().to_owned()
}

fn with_cookie(cookie: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::COOKIE, HeaderValue::from_str(cookie).unwrap());
    h
}

/// Over real HTTP: the page is the owner's alone (a link works once, the cookie is
/// HttpOnly and SameSite=Strict, no cookie no page), only the configured host is
/// answered, a revocation needs this page's CSRF token and is refused from another site,
/// signing out ends the session, and text a model chose is shown, never run.
#[tokio::test]
async fn only_the_owner_sees_the_page_and_nothing_from_elsewhere_changes_a_thing() {
    let page = Page::start().await;
    let http = http();
    let get = |path: &str, cookie: Option<&str>| {
        let mut r = http.get(format!("{}{path}", page.base));
        if let Some(c) = cookie {
            r = r.headers(with_cookie(c));
        }
        r.send()
    };

    // No cookie: nothing but how to sign in, with the security headers.
    let anonymous = get("/turns", None).await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let csp = anonymous.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(anonymous.headers()["x-frame-options"], "DENY");
    assert_eq!(anonymous.headers()["referrer-policy"], "strict-origin");
    assert!(anonymous.text().await.unwrap().contains("metnos web login"));
    for path in [
        "/grants",
        "/approvals",
        "/verdicts",
        "/telos",
        "/memory",
        "/tools",
        "/record",
        "/replay",
        "/turns/events",
    ] {
        assert_eq!(get(path, None).await.unwrap().status(), 401, "{path}");
    }
    assert_eq!(
        get("/turns", Some("metnos=forged")).await.unwrap().status(),
        401
    );

    // Opening the link uses nothing up (a link preview cannot take the session); its
    // page's button signs in, once.
    let link = page.link().await;
    let token = link.rsplit('/').next().unwrap().to_owned();
    for _ in 0..2 {
        let opened = http.get(&link).send().await.unwrap();
        assert_eq!(opened.status(), 200);
        assert!(opened.headers().get(header::SET_COOKIE).is_none());
        assert!(opened.text().await.unwrap().contains(r#"id="sign-in""#));
    }
    let sign_in = |token: String, origin: &'static str| {
        http.post(format!("{}/login", page.base))
            .header("origin", origin)
            .form(&[("token", token)])
            .send()
    };
    // From another site, the right token signs nobody in (and is not used up).
    let elsewhere = sign_in(token.clone(), "http://attacker.example")
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 403);
    assert!(elsewhere.headers().get(header::SET_COOKIE).is_none());
    let origin: &'static str = Box::leak(page.base.clone().into_boxed_str());
    let signed = sign_in(token.clone(), origin).await.unwrap();
    assert_eq!(signed.status(), 303);
    assert_eq!(signed.headers()[header::LOCATION], "/turns");
    let (cookie, set) = session_cookie(signed.headers());
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains("Secure"), "plain loopback HTTP: {set}");
    assert!(cookie.starts_with("metnos="), "{cookie}");
    let again = http.get(&link).send().await.unwrap();
    assert_eq!(again.status(), 403, "a replayed link");
    assert!(again.text().await.unwrap().contains("already used"));
    let replayed = sign_in(token, origin).await.unwrap();
    assert_eq!(replayed.status(), 403, "a replayed token");
    assert!(replayed.headers().get(header::SET_COOKIE).is_none());
    assert_eq!(get("/turns", Some(&cookie)).await.unwrap().status(), 200);
    let italian = http
        .get(format!("{}/grants", page.base))
        .headers(with_cookie(&cookie))
        .header(header::ACCEPT_LANGUAGE, "it-IT,it;q=0.9,en;q=0.5")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        italian.contains(r#"<html lang="it">"#) && italian.contains("Permessi"),
        "{italian}"
    );

    // Another host name (DNS rebinding to loopback) is not answered, cookie or not.
    let rebound = http
        .get(format!("{}/grants", page.base))
        .headers(with_cookie(&cookie))
        .header(header::HOST, "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);

    // A model's tool call with a key made to be markup: a key the executor's schema does
    // not name is kept as `?1`, never its text (issue 38).
    page.turn(json!({"timezone": "UTC", "<img src=x onerror=alert(1)>": 1}))
        .await;
    let turns = get("/turns", Some(&cookie))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(turns.contains("time_now"), "{turns}");
    assert!(!turns.contains("img src"), "{turns}");
    assert!(
        turns.contains("timezone") && turns.contains("?1"),
        "{turns}"
    );

    // Revoking: the confirm page's form, and only it.
    let id = page.grant("~/inv/*").await;
    let grants = get("/grants", Some(&cookie))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(grants.contains(&format!("/grants/{id}/revoke")), "{grants}");
    let confirm = get(&format!("/grants/{id}/revoke"), Some(&cookie))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(confirm.contains("~/inv/*"), "{confirm}");
    let csrf = csrf_of(&confirm);
    let post = |form: Vec<(&'static str, String)>,
                extra: Vec<(&'static str, &'static str)>,
                cookie: Option<String>| {
        let mut r = http
            .post(format!("{}/grants/{id}/revoke", page.base))
            .form(&form);
        if let Some(c) = cookie {
            r = r.headers(with_cookie(&c));
        }
        for (k, v) in extra {
            r = r.header(k, v);
        }
        r.send()
    };
    let no_token = post(vec![], vec![], Some(cookie.clone())).await.unwrap();
    assert_eq!(no_token.status(), 403);
    let wrong = post(vec![("csrf", "0".repeat(64))], vec![], Some(cookie.clone()))
        .await
        .unwrap();
    assert_eq!(wrong.status(), 403);
    let no_cookie = post(vec![("csrf", csrf.clone())], vec![], None)
        .await
        .unwrap();
    assert_eq!(no_cookie.status(), 401);
    // Even with the right token (a leaked one), another site cannot revoke.
    let cross_site = post(
        vec![("csrf", csrf.clone())],
        vec![
            ("sec-fetch-site", "same-site"),
            ("origin", "http://127.0.0.1:1"),
        ],
        Some(cookie.clone()),
    )
    .await
    .unwrap();
    assert_eq!(cross_site.status(), 403);
    let other_origin = post(
        vec![("csrf", csrf.clone())],
        vec![("origin", "http://attacker.example")],
        Some(cookie.clone()),
    )
    .await
    .unwrap();
    assert_eq!(other_origin.status(), 403);
    assert!(
        page.active(&id).await,
        "no refused request revoked the grant"
    );
    let revoked = post(
        vec![("csrf", csrf.clone())],
        vec![("sec-fetch-site", "same-origin"), ("origin", origin)],
        Some(cookie.clone()),
    )
    .await
    .unwrap();
    assert_eq!(revoked.status(), 303);
    assert_eq!(
        revoked.headers()[header::LOCATION],
        format!("/grants?revoked={id}").as_str()
    );
    assert!(!page.active(&id).await, "the grant is revoked");

    // The record's chains are shown intact.
    let record = get("/record", Some(&cookie))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(record.matches("k-intact").count(), 4, "{record}");

    // Signing out ends the session: the cookie opens nothing any more.
    let out = http
        .post(format!("{}/logout", page.base))
        .headers(with_cookie(&cookie))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert_eq!(get("/turns", Some(&cookie)).await.unwrap().status(), 401);
}

/// Behind a TLS proxy (`web.public_url` https): the links name the public address, the
/// cookie is `Secure` with the `__Host-` prefix, and a form must come from the https origin.
/// (The proxy is left out: the gateway speaks plain HTTP to it, as here.)
#[tokio::test]
async fn behind_https_the_cookie_is_secure_and_only_the_public_origin_may_post() {
    let mut sandbox = Sandbox::new();
    let port = free_port();
    sandbox
        .set("METNOS_WEB__ENABLED", "true")
        .set("METNOS_WEB__LISTEN", &format!("127.0.0.1:{port}"))
        .set(
            "METNOS_WEB__PUBLIC_URL",
            &format!("https://127.0.0.1:{port}/"),
        );
    let _up = sandbox.up().await;
    let (code, link, err) = sandbox.run(&["web", "login"]).await;
    assert_eq!(code, 0, "{err}");
    let public = format!("https://127.0.0.1:{port}");
    assert!(
        link.trim().starts_with(&format!("{public}/login/")),
        "{link}"
    );
    let token = link.trim().rsplit('/').next().unwrap().to_owned();
    let http = http();
    let post = |origin: String| {
        http.post(format!("http://127.0.0.1:{port}/login"))
            .header("origin", origin)
            .form(&[("token", token.clone())])
            .send()
    };
    // The plain-HTTP origin is not the page's.
    let plain = post(format!("http://127.0.0.1:{port}")).await.unwrap();
    assert_eq!(plain.status(), 403);
    let signed = post(public).await.unwrap();
    assert_eq!(signed.status(), 303);
    let (cookie, set) = session_cookie(signed.headers());
    assert!(cookie.starts_with("__Host-metnos="), "{cookie}");
    for part in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains("Domain"), "{set}");
    let page = http
        .get(format!("http://127.0.0.1:{port}/grants"))
        .headers(with_cookie(&cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
}

/// A stack without the page: `metnos web login` says how to turn it on.
#[tokio::test]
async fn web_login_on_a_stack_without_the_page_says_how_to_turn_it_on() {
    let sandbox = Sandbox::new();
    let _up = sandbox.up().await;
    let (code, out, err) = sandbox.run(&["web", "login"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("web.enabled"), "{err}");
}

// ---------------------------------------------------------------------------------------
// In a real browser.

/// chromedriver on a free loopback port, ended with the test.
struct Driver {
    child: tokio::process::Child,
    url: String,
    _profile: tempfile::TempDir,
}

impl Driver {
    async fn start() -> (Driver, fantoccini::Client) {
        let program = std::env::var("METNOS_TEST_CHROMEDRIVER").expect(
            "METNOS_TEST_CHROMEDRIVER is not set: run the tests through scripts/with-test-services.sh, which installs chromium and chromium-driver",
        );
        let port = free_port();
        let child = tokio::process::Command::new(program)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,900", "--no-first-run", "--disable-extensions",
                format!("--user-data-dir={}", profile.path().display()),
            ]}),
        );
        let mut last = None;
        for _ in 0..100 {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match fantoccini::ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return (
                        Driver {
                            child,
                            url,
                            _profile: profile,
                        },
                        client,
                    );
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not start a session: {last:?}");
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = &self.url;
    }
}

async fn screenshot(browser: &fantoccini::Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Clicks the element `locator` finds.
async fn click(browser: &fantoccini::Client, locator: fantoccini::Locator<'_>) {
    browser.find(locator).await.unwrap().click().await.unwrap();
}

/// Waits (10 s at most) for the element `locator` finds; `what` says what it shows.
async fn wait_for(browser: &fantoccini::Client, locator: fantoccini::Locator<'_>, what: &str) {
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(locator)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

async fn text_of(browser: &fantoccini::Client) -> String {
    browser
        .find(fantoccini::Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Headless Chromium signs in through a one-time link, watches a turn appear without a
/// reload, revokes a grant through the confirm step, and is refused without the cookie,
/// with the link used again and on a cross-site POST; a screenshot of each page is kept.
#[tokio::test]
async fn in_a_browser_the_owner_signs_in_watches_a_turn_live_and_revokes_a_grant() {
    let page = Page::start().await;
    let (_driver, browser) = Driver::start().await;
    let id = page.grant("~/invoices/*").await;
    page.turn(json!({"timezone": "UTC"})).await;
    page.sandbox.sign_telos(TELOS).await;

    // Without the cookie: the sign-in notice.
    browser.goto(&format!("{}/turns", page.base)).await.unwrap();
    assert!(text_of(&browser).await.contains("metnos web login"));
    screenshot(&browser, "01-signed-out").await;

    // The link's page signs in with its button and moves on to the turns.
    let link = page.link().await;
    browser.goto(&link).await.unwrap();
    screenshot(&browser, "02-sign-in").await;
    click(&browser, fantoccini::Locator::Id("sign-in")).await;
    wait_for(
        &browser,
        fantoccini::Locator::Css("section#turns"),
        "the turns page after signing in",
    )
    .await;
    assert!(text_of(&browser).await.contains("time_now"));
    screenshot(&browser, "03-turns").await;

    // A turn run now appears without a reload: a mark left on the page survives it.
    browser
        .execute("window.metnosMark = 'still here'; return true;", vec![])
        .await
        .unwrap();
    let before = browser
        .find_all(fantoccini::Locator::Css("article.turn"))
        .await
        .unwrap()
        .len();
    page.turn(json!({"timezone": "Europe/Rome"})).await;
    let mut live = false;
    for _ in 0..100 {
        let now = browser
            .find_all(fantoccini::Locator::Css("article.turn"))
            .await
            .unwrap()
            .len();
        if now > before {
            live = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(live, "the new turn never appeared ({before} turns shown)");
    let mark = browser
        .execute("return window.metnosMark || null;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!("still here"), "the page was reloaded");
    screenshot(&browser, "04-turn-live").await;

    // Every page opens; a screenshot of each.
    for (path, name, says) in [
        ("/approvals", "05-approvals", "Decided"),
        ("/grants", "06-grants", "~/invoices/*"),
        ("/verdicts", "07-verdicts", "time_now"),
        ("/telos", "08-telos", "Free my time from repetitive chores"),
        ("/record", "09-record", "intact"),
        (
            "/replay?level=ReadOnly&days=1",
            "10-replay",
            "policy questions",
        ),
    ] {
        browser.goto(&format!("{}{path}", page.base)).await.unwrap();
        let text = text_of(&browser).await;
        assert!(text.contains(says), "{path} does not say {says}: {text}");
        screenshot(&browser, name).await;
    }

    // On a phone: nothing wider than the screen, and in Italian for an Italian browser
    // (the server's choice from Accept-Language is checked over HTTP).
    browser.set_window_size(390, 844).await.unwrap();
    browser.goto(&format!("{}/turns", page.base)).await.unwrap();
    let fits = browser
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fits, json!(true), "the turns page is wider than a phone");
    screenshot(&browser, "15-turns-phone").await;
    browser.set_window_size(1100, 900).await.unwrap();

    // A cross-site POST: a page on another origin submits the revocation (with the real
    // form token, as if it had leaked); the browser says where it came from, and the
    // grant stays.
    browser
        .goto(&format!("{}/grants/{id}/revoke", page.base))
        .await
        .unwrap();
    let csrf = csrf_of(&browser.source().await.unwrap());
    let target = format!("{}/grants/{id}/revoke", page.base);
    let attacker = common::serve_http(move |_request| {
        let body = format!(
            r#"<!doctype html><form id="f" method="post" action="{target}"><input type="hidden" name="csrf" value="{csrf}"></form><script>document.getElementById('f').submit()</script>"#
        );
        async move {
            Ok(hyper::Response::builder()
                .header("content-type", "text/html")
                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .unwrap())
        }
    });
    browser.goto(&format!("http://{attacker}/")).await.unwrap();
    let mut refused = String::new();
    for _ in 0..50 {
        refused = text_of(&browser).await;
        if refused.contains("Nothing was changed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused.contains("Nothing was changed"), "{refused}");
    screenshot(&browser, "11-cross-site-refused").await;
    assert!(
        page.active(&id).await,
        "a cross-site POST revoked the grant"
    );

    // Revoking through the confirm step.
    browser
        .goto(&format!("{}/grants", page.base))
        .await
        .unwrap();
    let revoke_link = format!("a[href='/grants/{id}/revoke']");
    click(&browser, fantoccini::Locator::Css(&revoke_link)).await;
    screenshot(&browser, "12-revoke-confirm").await;
    click(&browser, fantoccini::Locator::Id("confirm-revoke")).await;
    wait_for(
        &browser,
        fantoccini::Locator::Id("revoked"),
        "the grants page says the grant was revoked",
    )
    .await;
    screenshot(&browser, "13-revoked").await;
    assert!(!page.active(&id).await, "the grant is revoked");

    // The link again: refused.
    browser.goto(&link).await.unwrap();
    assert!(text_of(&browser).await.contains("already used"));
    screenshot(&browser, "14-link-used").await;
    browser.close().await.unwrap();
}

/// Reads Server-Sent Events from `response` until one `turn` event's data satisfies
/// `wanted` (10 s at most): that data.
async fn next_turn_event(
    response: &mut reqwest::Response,
    buffer: &mut String,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let is_turn = event.lines().any(|l| l == "event: turn");
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .collect();
            let data = data.join("\n");
            if is_turn && wanted(&data) {
                return data;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .expect("no such turn event within 10 s")
            .unwrap()
            .expect("the event stream ended");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// The live feed follows a turn through its card: waiting on the owner's answer (the
/// request named as the decisions journal names it, never its token), then approved and
/// finished; signing out ends the feed.
#[tokio::test]
async fn the_live_feed_shows_a_turn_waiting_on_its_card_then_its_decision() {
    use tokio::io::AsyncWriteExt;
    let page = Page::start().await;
    let http = http();
    let cookie = page.sign_in(&http).await;
    let turns = http
        .get(format!("{}/turns", page.base))
        .headers(with_cookie(&cookie))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = csrf_of(&turns);
    let events = turns
        .split(r#"data-events=""#)
        .nth(1)
        .expect("today's turns follow the live feed")
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let mut feed = http
        .get(format!("{}{events}", page.base))
        .headers(with_cookie(&cookie))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(feed.status(), 200);
    assert_eq!(feed.headers()[header::CONTENT_TYPE], "text/event-stream");

    std::fs::create_dir_all(page.sandbox.dir.path().join("notes")).unwrap();
    page.llm.push(Reply::ToolCalls(vec![(
        "fs_write".to_owned(),
        json!({"path": "~/notes/a.txt", "content": "secret words"}),
    )]));
    page.llm.push(Reply::Text("written".into()));
    let mut ask = page
        .sandbox
        .metnos()
        .args(["ask", "--language", "en", "write a to ~/notes/a.txt"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut buffer = String::new();
    let waiting = next_turn_event(&mut feed, &mut buffer, |d| d.contains("awaiting")).await;
    assert!(
        waiting.contains("fs_write") && waiting.contains("approval_required"),
        "{waiting}"
    );
    assert!(
        !waiting.contains("secret words"),
        "an argument value: {waiting}"
    );
    // The request's name is 16 hex digits, never the token the turn waits on.
    let approvals = http
        .get(format!("{}/approvals", page.base))
        .headers(with_cookie(&cookie))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(approvals.contains("fs_write"), "{approvals}");
    let (_, listed, _) = page.sandbox.run(&["approvals", "list"]).await;
    let token = serde_json::from_str::<serde_json::Value>(listed.lines().next().unwrap()).unwrap()
        ["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let name = &metnos_kit::chain::hash(&token)[..16];
    assert!(
        waiting.contains(name) && approvals.contains(name),
        "{waiting}"
    );
    assert!(!waiting.contains(&token) && !approvals.contains(&token));

    let mut stdin = ask.stdin.take().unwrap();
    stdin.write_all(b"y\n").await.unwrap();
    drop(stdin);
    let finished = next_turn_event(&mut feed, &mut buffer, |d| d.contains("k-answer")).await;
    assert!(!finished.contains(&token), "{finished}");

    // What the page reads under its own identity: never the token, in any of its forms,
    // and never a standing order's words.
    use metnos_kit::tls::Identity;
    use metnos_proto::approval::v1 as approval;
    use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
    use metnos_proto::planner::v1 as planner;
    use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
    let mut as_page = PlannerServiceClient::new(page.up.channel_as("planner", Identity::Web));
    let day = as_page
        .list_turns(planner::ListTurnsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .records_json
        .join("\n");
    assert!(day.contains(name) && !day.contains(&token), "{day}");
    // The gateway's own certificate reads no turn: the page's rights are the page's.
    let refused = PlannerServiceClient::new(page.up.channel_as("planner", Identity::Gateway))
        .list_turns(planner::ListTurnsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let requests = ApprovalServiceClient::new(page.up.channel_as("approval", Identity::Web))
        .list_pending(approval::ListPendingRequest {
            include_resolved: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let requests = format!("{requests:?}");
    assert!(requests.contains("fs_write"), "{requests}");
    for secret in [token.as_str(), "secret words", "notes/a.txt"] {
        assert!(!requests.contains(secret), "{secret}: {requests}");
    }
    use metnos_proto::vaglio::v1 as vaglio;
    use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
    let verdicts = |who| {
        let mut client = VaglioServiceClient::new(page.up.channel_as("vaglio", who));
        async move {
            format!(
                "{:?}",
                client
                    .list_verdicts(vaglio::ListVerdictsRequest::default())
                    .await
                    .unwrap()
                    .into_inner()
            )
        }
    };
    assert!(verdicts(Identity::Owner).await.contains("write a to"));
    let seen = verdicts(Identity::Web).await;
    assert!(
        seen.contains("fs_write") && !seen.contains("write a to"),
        "{seen}"
    );
    let (code, _, err) = page
        .sandbox
        .run(&[
            "schedules",
            "add",
            "daily@08:00",
            "summarise my secret plan",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    let schedules = |who| {
        let mut client = PlannerServiceClient::new(page.up.channel_as("planner", who));
        async move {
            format!(
                "{:?}",
                client
                    .list_schedules(planner::ListSchedulesRequest::default())
                    .await
                    .unwrap()
                    .into_inner()
            )
        }
    };
    assert!(schedules(Identity::Owner).await.contains("secret plan"));
    assert!(!schedules(Identity::Web).await.contains("secret plan"));
    assert!(
        finished.contains("fs_write") && finished.contains("k-approved"),
        "{finished}"
    );
    assert!(ask.wait().await.unwrap().success());

    // Signed out: the feed says so and ends.
    let out = http
        .post(format!("{}/logout", page.base))
        .headers(with_cookie(&cookie))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, feed.chunk()).await {
            Ok(Ok(Some(chunk))) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => panic!("the feed went on after signing out: {buffer}"),
        }
        if buffer.contains("event: end") {
            break;
        }
    }
    assert!(buffer.contains("event: end"), "{buffer}");
}

/// Issue 40: the memory page counts a person's entries and shows each one's id, dates and
/// sources, never its words (the planner does not send them to the page's identity).
#[tokio::test]
async fn the_memory_page_counts_entries_and_shows_sources_never_words() {
    let page = Page::start().await;
    page.llm.push(Reply::ToolCalls(vec![(
        "memory_save".into(),
        json!({"text": "Locker code 4417"}),
    )]));
    page.llm.push(Reply::Text("Noted.".into()));
    let (code, _, err) = page
        .sandbox
        .run(&["ask", "--language", "en", "remember: locker code 4417"])
        .await;
    assert_eq!(code, 0, "{err}");
    let http = http();
    let cookie = page.sign_in(&http).await;
    let me = metnos::ask_cli::cli_principal();
    let shown = http
        .get(format!("{}/memory?person=cli:{}", page.base, me.sender_id))
        .headers(with_cookie(&cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), 200);
    let body = shown.text().await.unwrap();
    assert!(body.contains("1 entries, 0 from the world"), "{body}");
    assert!(
        body.contains("their own words") && body.contains("m-"),
        "{body}"
    );
    assert!(!body.contains("4417") && !body.contains("Locker"), "{body}");
    let nobody = http
        .get(format!("{}/memory?person=telegram:999", page.base))
        .headers(with_cookie(&cookie))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(nobody.contains("0 entries, 0 from the world"), "{nobody}");
}

/// Issue 46: the tools page shows the mnestome's strongest passages, names only.
#[tokio::test]
async fn the_tools_page_shows_the_passages_piping_taught() {
    let page = Page::start().await;
    let http = http();
    let cookie = page.sign_in(&http).await;
    let get = || async {
        http.get(format!("{}/tools", page.base))
            .headers(with_cookie(&cookie))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let body = get().await;
    assert!(body.contains("No step has yet been fed"), "{body}");
    page.llm.push(Reply::ToolCalls(vec![(
        "time_now".into(),
        json!({"timezone": "Asia/Tokyo"}),
    )]));
    page.llm.push(Reply::ToolCalls(vec![(
        "time_now".into(),
        json!({"timezone": "{{step1.timezone}}"}),
    )]));
    page.llm.push(Reply::Text("It is noon in Tokyo.".into()));
    let (code, _, err) = page
        .sandbox
        .run(&["ask", "--language", "en", "what time is it in Tokyo?"])
        .await;
    assert_eq!(code, 0, "{err}");
    let body = get().await;
    assert!(body.contains("1 passages"), "{body}");
    assert!(
        body.contains("time_now.metadata.timezone") && body.contains("time_now(timezone)"),
        "{body}"
    );
    assert!(!body.contains("Tokyo"), "names only: {body}");
}

/// Issue 43: the tools page lists each admitted MCP server's tools with their pins, and the
/// server's standing once the planner started it.
#[tokio::test]
async fn the_tools_page_lists_mcp_servers_and_their_pins() {
    let time = std::env::var("METNOS_TEST_MCP_TIME").expect(
        "METNOS_TEST_MCP_TIME is not set: run the tests with `make test`, which installs mcp-server-time",
    );
    let page = Page::start_with(&[
        "mcp",
        "add",
        "time",
        "--tools",
        "get_current_time",
        "--capability",
        "get_current_time=time:read",
        "--",
        &time,
    ])
    .await;
    let http = http();
    let cookie = page.sign_in(&http).await;
    let get = || async {
        http.get(format!("{}/tools", page.base))
            .headers(with_cookie(&cookie))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let body = get().await;
    assert!(body.contains("MCP time"), "{body}");
    assert!(
        body.contains("time__get_current_time") && body.contains("time:read"),
        "{body}"
    );
    assert!(body.contains("not started yet"), "{body}");
    let (code, out, _) = page.sandbox.run(&["mcp", "list"]).await;
    assert_eq!(code, 0);
    let pin_head = out.split("pin ").nth(1).unwrap().trim().to_owned();
    assert!(body.contains(&pin_head), "{pin_head}: {body}");
    // A call starts it: connected.
    page.llm.push(Reply::ToolCalls(vec![(
        "time__get_current_time".to_owned(),
        json!({"timezone": "Asia/Tokyo"}),
    )]));
    page.llm.push(Reply::Text("noon in Tokyo".into()));
    let (code, _, err) = page
        .sandbox
        .run(&["ask", "--language", "en", "what time is it in Tokyo?"])
        .await;
    assert_eq!(code, 0, "{err}");
    let body = get().await;
    assert!(body.contains("connected"), "{body}");
    // `metnos status` says so too.
    let (_, out, _) = page.sandbox.run(&["status"]).await;
    assert!(
        out.contains("mcp:time") && out.contains("CONNECTED"),
        "{out}"
    );
}
