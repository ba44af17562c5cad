//! The spectator (issue 23): a web page where the owner watches every turn, verdict,
//! approval and grant live, revokes grants, checks the tamper-evident record and asks
//! what another level would have changed.
//!
//! Served by the gateway on `web.listen` (off unless `web.enabled`), plain HTTP meant for
//! loopback or a TLS proxy in front. Only the owner: `metnos web login` (the gateway's
//! `CreateWebLogin`, owner certificate) prints a one-time link that opens a session
//! ([`sessions`]); the cookie is `HttpOnly`, `SameSite=Strict`, `Secure` (and `__Host-`)
//! behind https. Every state-changing request carries the session's CSRF token and is
//! refused from another site; every response has a strict Content-Security-Policy; every
//! text is escaped ([`html::esc`]); only the configured host is answered (no DNS
//! rebinding). What the page shows it reads through the services' RPCs, as the gateway:
//! keys only, as the logs keep them, and never a token of a person the gateway does not
//! speak for.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use metnos_kit::client::TracedChannel;
use metnos_kit::config::WebConfig;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

pub mod html;
mod pages;
pub mod sessions;

pub use sessions::Sessions;

use html::{Lang, Nav, esc};

/// What every response says about itself: nothing but this origin's own script and style,
/// no framing, no referrer to another site (a sign-in link never leaks), nothing cached.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The services the page reads, as the gateway.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub planner: PlannerServiceClient<TracedChannel>,
    pub approval: ApprovalServiceClient<TracedChannel>,
    pub policy: PolicyServiceClient<TracedChannel>,
    pub vaglio: VaglioServiceClient<TracedChannel>,
}

/// The page's state.
#[derive(Debug)]
pub struct Web {
    pub sessions: Arc<Sessions>,
    pub upstream: Upstream,
    /// `web.lang`: `en`, `it`, or empty for the browser's.
    pub lang: String,
    /// Behind https: the cookie is `Secure` and `__Host-`.
    pub secure: bool,
    /// The `Host` values answered (lower case).
    pub hosts: Vec<String>,
    /// The origins a state-changing request may come from (`http://127.0.0.1:8780`, and
    /// on loopback `http://localhost:8780`).
    pub origins: Vec<String>,
    /// How often the live view asks the planner for changes.
    pub poll: Duration,
    /// Live views open at once (each polls the planner): a permit each.
    pub live_feeds: Arc<tokio::sync::Semaphore>,
    /// One walk of the chains at a time (the record page asks four services to walk theirs).
    pub walking: tokio::sync::Mutex<()>,
}

/// Live views open at once, every session together.
pub const MAX_LIVE_FEEDS: usize = 8;

impl Web {
    /// The page as configured, reading through `upstream`.
    pub fn new(config: &WebConfig, upstream: Upstream) -> Web {
        let origin = config.base_url();
        let authority = origin
            .split_once("://")
            .map_or(origin.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut hosts = vec![authority.clone()];
        // Loopback answers by name too (a browser may be given either).
        if config.public_url.is_empty() && config.listen.ip().is_loopback() {
            hosts.push(format!("localhost:{}", config.listen.port()));
        }
        let secure = origin.starts_with("https://");
        let scheme = if secure { "https" } else { "http" };
        let origins = hosts.iter().map(|h| format!("{scheme}://{h}")).collect();
        if !secure && !config.listen.ip().is_loopback() {
            tracing::warn!(
                listen = %config.listen,
                "the web page listens beyond loopback over plain HTTP: its sign-in links and session cookie cross the network in clear (put a TLS proxy in front and set web.public_url to its https address)"
            );
        }
        Web {
            sessions: Arc::new(Sessions::new(
                origin.clone(),
                i64::from(config.login_ttl_seconds.get()) * 1000,
                i64::from(config.session_hours.get()) * 3_600_000,
            )),
            upstream,
            lang: config.lang.clone(),
            secure,
            hosts,
            origins,
            poll: Duration::from_secs(1),
            live_feeds: Arc::new(tokio::sync::Semaphore::new(MAX_LIVE_FEEDS)),
            walking: tokio::sync::Mutex::new(()),
        }
    }

    fn cookie_name(&self) -> &'static str {
        if self.secure {
            "__Host-metnos"
        } else {
            "metnos"
        }
    }
}

/// The page's routes.
pub fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/turns") }))
        .route("/login/{token}", get(login_page))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route(
            "/static/app.css",
            get(|| async { static_file("text/css", html::CSS) }),
        )
        .route(
            "/static/app.js",
            get(|| async { static_file("text/javascript", html::JS) }),
        )
        .merge(pages::routes())
        .fallback(|owner: Owner| async move {
            let l = owner.lang;
            failure(
                StatusCode::NOT_FOUND,
                l,
                l.t("Not found", "Non trovato"),
                l.t("There is no such page.", "Questa pagina non esiste."),
            )
        })
        .layer(middleware::from_fn_with_state(Arc::clone(&web), guard))
        .with_state(web)
}

/// Serves the page on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, web: Arc<Web>) {
    if let Err(e) = axum::serve(listener, router(web)).await {
        tracing::error!(error = %e, "the web page stopped");
    }
}

fn static_file(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// Every request: answered only for the configured host; every response: the security
/// headers.
async fn guard(
    State(web): State<Arc<Web>>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    let mut response = if host.is_some_and(|h| web.hosts.contains(&h)) {
        next.run(request).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            "this host is not served here (web.public_url names the one that is)",
        )
            .into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // The origin alone, never a path (a sign-in link's): not `no-referrer`, with which a
        // browser sends `Origin: null` on the page's own forms.
        (header::REFERRER_POLICY, "strict-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        header::HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The signed-in owner of a request: their session and language. A request without a
/// valid session cookie is answered 401 with how to sign in.
#[derive(Debug, Clone)]
pub struct Owner {
    pub cookie: String,
    pub session: sessions::Session,
    pub lang: Lang,
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

fn lang_of(web: &Web, headers: &HeaderMap) -> Lang {
    let accept = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok());
    Lang::choose(&web.lang, accept)
}

impl FromRequestParts<Arc<Web>> for Owner {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, web: &Arc<Web>) -> Result<Owner, Response> {
        let lang = lang_of(web, &parts.headers);
        let signed_in = cookie(&parts.headers, web.cookie_name()).and_then(|c| {
            web.sessions
                .session(c, now_ms())
                .map(|session| (c.to_owned(), session))
        });
        match signed_in {
            Some((cookie, session)) => Ok(Owner {
                cookie,
                session,
                lang,
            }),
            None => Err(failure(
                StatusCode::UNAUTHORIZED,
                lang,
                lang.t("Sign in", "Accedi"),
                lang.t(
                    "This page is the owner's. Run `metnos web login` on the host and open the link it prints.",
                    "Questa pagina è del proprietario. Esegui `metnos web login` sul server e apri il link che stampa.",
                ),
            )),
        }
    }
}

impl Owner {
    /// A state-changing request is the owner's own: its form carries the session's CSRF
    /// token, and the browser does not say it came from another site. The refusal page
    /// otherwise.
    pub fn refuse_post(&self, web: &Web, headers: &HeaderMap, csrf: &str) -> Option<Response> {
        if from_this_page(web, headers) && sessions::same(csrf, &self.session.csrf) {
            return None;
        }
        Some(refused(self.lang))
    }
}

/// The browser does not say a request came from another site or origin (a browser that
/// says nothing is taken at the form token's word).
fn from_this_page(web: &Web, headers: &HeaderMap) -> bool {
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("same-origin");
    let origin_ok = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|o| web.origins.iter().any(|ok| o.eq_ignore_ascii_case(ok)));
    site == "same-origin" && origin_ok
}

fn refused(l: Lang) -> Response {
    failure(
        StatusCode::FORBIDDEN,
        l,
        l.t("Refused", "Rifiutato"),
        l.t(
            "This request did not come from this page (its form token is missing or wrong, or another site sent it). Nothing was changed.",
            "Questa richiesta non viene da questa pagina (il token del modulo manca o è sbagliato, o l'ha inviata un altro sito). Non è cambiato nulla.",
        ),
    )
}

/// An error page: `status`, a title and one sentence.
pub fn failure(status: StatusCode, l: Lang, title: &str, says: &str) -> Response {
    let body = format!(r#"<p class="notice">{}</p>"#, esc(says));
    (status, Html(html::page(l, Nav::None, title, None, &body))).into_response()
}

fn link_not_valid(l: Lang) -> Response {
    failure(
        StatusCode::FORBIDDEN,
        l,
        l.t("Link not valid", "Link non valido"),
        l.t(
            "This sign-in link was already used or has expired. Run `metnos web login` for a new one.",
            "Questo link di accesso è già stato usato o è scaduto. Esegui `metnos web login` per averne uno nuovo.",
        ),
    )
}

/// `GET /login/<token>`: a page with one button that signs in. Opening the link changes
/// nothing (a link preview, a mail scanner or a prefetch cannot use it up or take the
/// session); the button's POST does, once.
async fn login_page(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let l = lang_of(&web, &headers);
    if !web.sessions.waiting(&token, now_ms()) {
        return link_not_valid(l);
    }
    let body = format!(
        r#"<form method="post" action="/login"><input type="hidden" name="token" value="{}"><button type="submit" id="sign-in">{}</button></form>"#,
        esc(&token),
        esc(l.t("Sign in to Metnos", "Accedi a Metnos"))
    );
    Html(html::page(
        l,
        Nav::None,
        l.t("Sign in", "Accedi"),
        None,
        &body,
    ))
    .into_response()
}

#[derive(Debug, serde::Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

/// `POST /login`: a one-time link's token, from the sign-in page, opens a session. The
/// answer moves on to the turns (a same-origin redirect: the cookie goes with it).
async fn login(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let l = lang_of(&web, &headers);
    if !from_this_page(&web, &headers) {
        return refused(l);
    }
    let Some(opened) = web.sessions.redeem(&form.token, now_ms()) else {
        tracing::info!("a sign-in link was refused (unknown, used or expired)");
        return link_not_valid(l);
    };
    tracing::info!("the owner signed in to the web page");
    let secure = if web.secure { "; Secure" } else { "" };
    let set_cookie = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        web.cookie_name(),
        opened.cookie,
        web.sessions.session_seconds()
    );
    let mut response = Redirect::to("/turns").into_response();
    if let Ok(value) = HeaderValue::from_str(&set_cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// A state-changing form: the session's CSRF token.
#[derive(Debug, serde::Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`: ends the session.
async fn logout(
    State(web): State<Arc<Web>>,
    owner: Owner,
    headers: HeaderMap,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if let Some(refused) = owner.refuse_post(&web, &headers, &form.csrf) {
        return refused;
    }
    web.sessions.end(&owner.cookie);
    let mut response = Redirect::to("/turns").into_response();
    let expire = format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        web.cookie_name(),
        if web.secure { "; Secure" } else { "" }
    );
    if let Ok(value) = HeaderValue::from_str(&expire) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
