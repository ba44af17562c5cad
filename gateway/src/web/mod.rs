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
//! text is escaped (maud, and [`html::Shown`] for text from outside); only the configured host is answered (no DNS
//! rebinding). What the page shows it reads through the services' RPCs, as the gateway:
//! keys only, as the logs keep them, and never a token of a person the gateway does not
//! speak for.
//!
//! Pages are rendered with maud: its markup is Rust that rustc checks, every value is
//! escaped unless said otherwise, and there are no template files to ship or keep in step.
//!
//! The folder:
//! - [`state`]: [`Web`], the services it reads ([`Upstream`]) and its settings;
//! - [`sessions`]: sign-in links, sessions and their CSRF tokens;
//! - [`owner`]: the signed-in owner, signing in and out, the error pages;
//! - [`html`]: the layout every page shares, rendered with maud, and the two languages;
//! - [`pages`]: one file per page;
//! - this file: the routes and the guard every request passes.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

pub mod html;
pub mod owner;
mod pages;
pub mod sessions;
pub mod state;

pub use owner::{Owner, failure};
pub use sessions::Sessions;
pub use state::{MAX_LIVE_FEEDS, Upstream, Web};

/// What every response says about itself: nothing but this origin's own script and style,
/// no framing, no referrer to another site (a sign-in link never leaks), nothing cached.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The page's routes.
pub fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/turns") }))
        .route("/login/{token}", get(owner::login_page))
        .route("/login", post(owner::login))
        .route("/logout", post(owner::logout))
        .route(
            "/static/app.css",
            get(|| async { static_file("text/css", html::CSS) }),
        )
        .route(
            "/static/app.js",
            get(|| async { static_file("text/javascript", html::JS) }),
        )
        .route("/turns", get(pages::turns::turns))
        .route("/turns/events", get(pages::turns::turn_events))
        .route("/approvals", get(pages::approvals::approvals))
        .route("/grants", get(pages::grants::grants))
        .route(
            "/grants/{id}/revoke",
            get(pages::grants::revoke_confirm).post(pages::grants::revoke),
        )
        .route("/verdicts", get(pages::verdicts::verdicts))
        .route("/telos", get(pages::telos::telos))
        .route("/memory", get(pages::memory::memory))
        .route("/tools", get(pages::tools::tools))
        .route("/record", get(pages::record::record))
        .route("/replay", get(pages::replay::replay))
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
