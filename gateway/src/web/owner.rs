//! Who may see the page: the signed-in owner ([`Owner`]), the sign-in link's page and its
//! POST, signing out; a state-changing request checked to come from this page; the error
//! pages.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use metnos_kit::time::now_ms;

use super::html::{self, Lang, Nav, Shown};
use super::sessions;
use super::state::Web;

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

pub fn lang_of(web: &Web, headers: &HeaderMap) -> Lang {
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
    let body = html! { p.notice { (Shown(says)) } };
    let page = html::page(l, Nav::None, title, None, body);
    (status, Html(page.into_string())).into_response()
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
pub async fn login_page(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let l = lang_of(&web, &headers);
    if !web.sessions.waiting(&token, now_ms()) {
        return link_not_valid(l);
    }
    let body = html! {
        form method="post" action="/login" {
            input type="hidden" name="token" value=(Shown(&token));
            button type="submit" id="sign-in" { (l.t("Sign in to Metnos", "Accedi a Metnos")) }
        }
    };
    let page = html::page(l, Nav::None, l.t("Sign in", "Accedi"), None, body);
    Html(page.into_string()).into_response()
}

#[derive(Debug, serde::Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    pub token: String,
}

/// `POST /login`: a one-time link's token, from the sign-in page, opens a session. The
/// answer moves on to the turns (a same-origin redirect: the cookie goes with it).
pub async fn login(
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
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// `POST /logout`: ends the session.
pub async fn logout(
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
