//! Browser sessions of the memory browser: an opaque id in an `HttpOnly`,
//! `SameSite=Strict` cookie, everything else (sign-in, the CSRF token, the
//! chosen principal, the thread handles) kept on the server, so no identity
//! or memory text travels in a URL.

use axum::http::{header, HeaderMap};
use memgate_core::Caller;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "memgate_ui";

/// A session unused this long is dropped (the user signs in again).
const IDLE_LIMIT: Duration = Duration::from_secs(8 * 3600);

/// At most this many sessions are kept; the least recently used goes first,
/// so a client minting sessions cannot grow the server's memory.
const MAX_SESSIONS: usize = 1024;

/// The principal a session browses: a user and, optionally, one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub user: String,
    pub agent: Option<String>,
}

impl Principal {
    /// The caller every operation of this session runs as.
    pub fn caller(&self) -> Caller {
        let caller = Caller::new(self.user.as_str());
        match &self.agent {
            Some(agent) => caller.with_agent(agent.as_str()),
            None => caller,
        }
    }
}

/// What the server keeps for one browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// Proves a form was rendered by this server for this session.
    pub csrf: String,
    /// True once the bearer token was presented (or when none is set).
    pub signed_in: bool,
    pub principal: Option<Principal>,
    /// Thread ids this session was shown; pages link to their index.
    pub threads: Vec<String>,
    last_seen: Instant,
}

/// At most this many thread handles per session; past it the list starts
/// again (older links then say "open it from the threads page").
const MAX_THREAD_HANDLES: usize = 10_000;

impl Session {
    /// The handle that links to thread `name`, made when missing.
    pub fn thread_handle(&mut self, name: &str) -> usize {
        if let Some(n) = self.threads.iter().position(|t| t == name) {
            return n;
        }
        if self.threads.len() >= MAX_THREAD_HANDLES {
            self.threads.clear();
        }
        self.threads.push(name.to_owned());
        self.threads.len() - 1
    }
}

/// Every live session, by id.
#[derive(Default)]
pub struct Sessions {
    live: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// The session named by the request's cookie, if it is live.
    pub fn find(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = cookie_value(headers)?;
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let session = live.get_mut(&id)?;
        if session.last_seen.elapsed() > IDLE_LIMIT {
            live.remove(&id);
            return None;
        }
        session.last_seen = Instant::now();
        let session = session.clone();
        Some((id, session))
    }

    /// Starts a session; returns its id.
    pub fn start(&self, signed_in: bool) -> (String, Session) {
        let id = random_token();
        let session = Session {
            csrf: random_token(),
            signed_in,
            principal: None,
            threads: Vec::new(),
            last_seen: Instant::now(),
        };
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, s| s.last_seen.elapsed() <= IDLE_LIMIT);
        while live.len() >= MAX_SESSIONS {
            let oldest = live
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => live.remove(&k),
                None => break,
            };
        }
        live.insert(id.clone(), session.clone());
        (id, session)
    }

    /// Changes a live session (no-op when it has gone).
    pub fn update(&self, id: &str, change: impl FnOnce(&mut Session)) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(session) = live.get_mut(id) {
            change(session);
        }
    }

    pub fn end(&self, id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.remove(id);
    }
}

/// The `Set-Cookie` value that hands a browser its session id; `secure`
/// when the server is reached over TLS, so the browser never sends it in
/// clear.
pub fn set_cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict{secure}")
}

/// The `Set-Cookie` value that ends a browser's session.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// 32 random bytes, hex: unguessable session ids and CSRF tokens.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).expect("the operating system's random source failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Constant-time comparison of a presented token with the expected one.
pub fn same_token(expected: &str, presented: &str) -> bool {
    let (a, b) = (expected.as_bytes(), presented.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_session_is_found_by_its_cookie_only() {
        let sessions = Sessions::default();
        let (id, started) = sessions.start(false);
        assert_eq!(id.len(), 64);
        assert_ne!(id, started.csrf);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {COOKIE}={id}")).unwrap(),
        );
        let (found, session) = sessions.find(&headers).unwrap();
        assert_eq!(found, id);
        assert_eq!(session.csrf, started.csrf);
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("memgate_ui=forged"),
        );
        assert!(sessions.find(&headers).is_none());
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.start(false);
        }
        assert_eq!(sessions.live.lock().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", ""));
    }
}
