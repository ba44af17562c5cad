//! Who may see the spectator page: one-time sign-in links (`metnos web login`) exchanged for
//! a session cookie. Only hashes of links and sessions are kept, in memory: a restart of
//! the gateway signs everyone out, and nothing on disk opens a session.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// Sign-in links waiting at once; a new one past this drops the oldest.
const MAX_LINKS: usize = 8;
/// Sessions open at once; a new one past this ends the oldest.
const MAX_SESSIONS: usize = 16;

/// One open session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// What every state-changing form must carry back.
    pub csrf: String,
    pub expires_ms: i64,
}

/// A new session: the cookie's value (given out once, kept only as its hash) and the
/// session.
#[derive(Debug, Clone)]
pub struct Opened {
    pub cookie: String,
    pub session: Session,
}

#[derive(Debug, Default)]
struct Inner {
    /// hash of a link's token → when it expires.
    links: HashMap<String, i64>,
    /// hash of a cookie → its session.
    sessions: HashMap<String, Session>,
}

/// The spectator's sign-ins.
#[derive(Debug)]
pub struct Sessions {
    base_url: String,
    link_ttl_ms: i64,
    session_ttl_ms: i64,
    inner: Mutex<Inner>,
}

fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Compares two strings in time that does not depend on where they differ.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

impl Sessions {
    pub fn new(base_url: String, link_ttl_ms: i64, session_ttl_ms: i64) -> Sessions {
        Sessions {
            base_url,
            link_ttl_ms,
            session_ttl_ms,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new one-time sign-in link and when it expires.
    pub fn new_login(&self, now_ms: i64) -> (String, i64) {
        let token = metnos_kit::random::hex(32);
        let expires = now_ms + self.link_ttl_ms;
        let mut inner = self.inner();
        inner.links.retain(|_, until| *until > now_ms);
        while inner.links.len() >= MAX_LINKS {
            let oldest = inner
                .links
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(k, _)| k.clone());
            inner.links.remove(&oldest.unwrap_or_default());
        }
        inner.links.insert(digest(&token), expires);
        (format!("{}/login/{token}", self.base_url), expires)
    }

    /// Whether a link's token may still be used (nothing is used up).
    pub fn waiting(&self, token: &str, now_ms: i64) -> bool {
        self.inner()
            .links
            .get(&digest(token))
            .is_some_and(|until| *until > now_ms)
    }

    /// Uses a link's token, once: the session it opens, or `None` for a token unknown,
    /// used or expired.
    pub fn redeem(&self, token: &str, now_ms: i64) -> Option<Opened> {
        let mut inner = self.inner();
        let until = inner.links.remove(&digest(token))?;
        if until <= now_ms {
            return None;
        }
        inner.sessions.retain(|_, s| s.expires_ms > now_ms);
        while inner.sessions.len() >= MAX_SESSIONS {
            let oldest = inner
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.expires_ms)
                .map(|(k, _)| k.clone());
            inner.sessions.remove(&oldest.unwrap_or_default());
        }
        let cookie = metnos_kit::random::hex(32);
        let session = Session {
            csrf: metnos_kit::random::hex(32),
            expires_ms: now_ms + self.session_ttl_ms,
        };
        inner.sessions.insert(digest(&cookie), session.clone());
        Some(Opened { cookie, session })
    }

    /// The session a cookie holds, while it lasts.
    pub fn session(&self, cookie: &str, now_ms: i64) -> Option<Session> {
        let inner = self.inner();
        inner
            .sessions
            .get(&digest(cookie))
            .filter(|s| s.expires_ms > now_ms)
            .cloned()
    }

    /// Ends the session a cookie holds.
    pub fn end(&self, cookie: &str) {
        self.inner().sessions.remove(&digest(cookie));
    }

    /// How long a session lasts, in seconds (the cookie's Max-Age).
    pub fn session_seconds(&self) -> i64 {
        self.session_ttl_ms / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_of(url: &str) -> &str {
        url.rsplit('/').next().unwrap()
    }

    #[test]
    fn a_link_opens_one_session_once_and_only_before_it_expires() {
        let s = Sessions::new("http://127.0.0.1:8780".into(), 300_000, 3_600_000);
        let (url, expires) = s.new_login(1_000);
        assert!(url.starts_with("http://127.0.0.1:8780/login/"), "{url}");
        assert_eq!(expires, 301_000);
        assert!(
            s.waiting(token_of(&url), 2_000),
            "opening the link uses nothing up"
        );
        let opened = s
            .redeem(token_of(&url), 2_000)
            .expect("a fresh link signs in");
        assert!(s.redeem(token_of(&url), 2_001).is_none(), "used twice");
        assert!(!s.waiting(token_of(&url), 2_001));
        assert_eq!(
            s.session(&opened.cookie, 3_000),
            Some(opened.session.clone())
        );
        assert!(s.session(&opened.cookie, 3_602_000).is_none(), "expired");
        assert!(s.session("forged", 3_000).is_none());

        let (late, _) = s.new_login(10_000);
        assert!(s.redeem(token_of(&late), 310_000).is_none(), "too late");
        let (other, _) = s.new_login(10_000);
        let second = s.redeem(token_of(&other), 11_000).unwrap();
        assert_ne!(second.cookie, opened.cookie);
        assert_ne!(second.session.csrf, opened.session.csrf);
        s.end(&second.cookie);
        assert!(s.session(&second.cookie, 12_000).is_none(), "signed out");
    }

    #[test]
    fn links_and_sessions_are_bounded() {
        let s = Sessions::new(String::new(), 300_000, 3_600_000);
        let first = s.new_login(0).0;
        for i in 0..MAX_LINKS {
            s.new_login(1 + i as i64);
        }
        assert!(
            s.redeem(token_of(&first), 100).is_none(),
            "the oldest link went"
        );
        let cookies: Vec<_> = (0..=MAX_SESSIONS)
            .map(|i| {
                let (url, _) = s.new_login(1_000 + i as i64);
                s.redeem(token_of(&url), 1_000 + i as i64).unwrap().cookie
            })
            .collect();
        assert!(
            s.session(&cookies[0], 5_000).is_none(),
            "the oldest session ended"
        );
        assert!(s.session(&cookies[MAX_SESSIONS], 5_000).is_some());
    }

    #[test]
    fn same_compares_whole_strings() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert!(!same("", "a"));
    }
}
