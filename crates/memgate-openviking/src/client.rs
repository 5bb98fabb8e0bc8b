//! The HTTP calls memgate makes to an OpenViking server, and nothing else.
//!
//! - **Identity on the wire.** Every request carries the USER key as
//!   `X-API-Key`; requests made on behalf of a peer also carry
//!   `X-OpenViking-Actor-Peer`. No trusted-mode header (`X-OpenViking-Account`,
//!   `-User`, `-Role`), no `Authorization`, no ambient configuration
//!   (`ovcli.conf`, `OPENVIKING_*`, proxy variables) is ever used. A
//!   redirect is answered as an error and never followed (as the official
//!   SDK's client does): the key goes only to `base_url`.
//! - **Deadline.** Each request has one total deadline (`timeout_seconds`)
//!   covering connect, headers and the whole body: reqwest's own timeout,
//!   and a `tokio::time::timeout` around the complete exchange.
//! - **Retry.** Reads (`/health`, find, search, content read, get session)
//!   are retried once after a transport failure, a missed deadline, the
//!   server codes `UNAVAILABLE`/`DEADLINE_EXCEEDED`, or a bare 502/503/504.
//!   Writes (message batches, commits) are never retried: the capture cursor
//!   decides what is sent again.
//! - **Envelope.** `{"status":"ok","result":…}` yields `result`;
//!   `{"status":"error","error":{"code","message"}}` (or any non-2xx) is an
//!   error carrying the code. A read whose body is not JSON, or larger than
//!   [`MAX_RESPONSE_BYTES`], is an error; a write answered 2xx counts as done
//!   whatever its body (the server accepted it).

use crate::config::ApiKey;
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Value};
use std::fmt;
use std::time::Duration;

/// The USER key header.
pub const API_KEY_HEADER: &str = "X-API-Key";
/// The per-request peer view header.
pub const ACTOR_PEER_HEADER: &str = "X-OpenViking-Actor-Peer";
/// Largest response body memgate reads (recall results are a few KiB).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Longest server error message kept in an error.
const MAX_SERVER_MESSAGE_CHARS: usize = 300;

/// A failed call. Its `Display` never contains the API key.
#[derive(Debug)]
pub enum WireError {
    /// The connection failed or broke.
    Transport { call: &'static str, detail: String },
    /// The total deadline passed.
    Deadline { call: &'static str, after: Duration },
    /// The server answered with an error.
    Server {
        call: &'static str,
        status: u16,
        code: Option<String>,
        message: String,
    },
    /// The answer could not be read.
    Malformed { call: &'static str, detail: String },
}

impl WireError {
    /// True for failures worth one more try of a read.
    pub fn is_recoverable(&self) -> bool {
        match self {
            WireError::Transport { .. } | WireError::Deadline { .. } => true,
            WireError::Server { status, code, .. } => match code.as_deref() {
                Some(code) => code == "UNAVAILABLE" || code == "DEADLINE_EXCEEDED",
                None => matches!(status, 502..=504),
            },
            WireError::Malformed { .. } => false,
        }
    }

    /// The server's error code, when it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            WireError::Server { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, WireError::Server { status: 404, .. }) || self.code() == Some("NOT_FOUND")
    }

    /// The contract's error: a missed deadline stays a deadline, everything
    /// else is a backend failure.
    pub fn into_memory_error(self) -> memgate_core::MemoryError {
        match self {
            WireError::Deadline { .. } => {
                memgate_core::MemoryError::DeadlineExceeded(self.to_string())
            }
            _ => memgate_core::MemoryError::Backend(self.to_string()),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Transport { call, detail } => {
                write!(f, "OpenViking {call} failed: transport error: {detail}")
            }
            WireError::Deadline { call, after } => write!(
                f,
                "OpenViking {call} did not finish within {:.3}s",
                after.as_secs_f64()
            ),
            WireError::Server {
                call,
                status,
                code,
                message,
            } => {
                write!(f, "OpenViking {call} failed: HTTP {status}")?;
                if let Some(code) = code {
                    write!(f, " {code}")?;
                }
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            WireError::Malformed { call, detail } => {
                write!(f, "OpenViking {call} failed: malformed response: {detail}")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// Whether a call may be repeated, and how strictly its answer is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

/// One prepared request.
struct Call<'a> {
    name: &'static str,
    kind: Kind,
    method: Method,
    path: String,
    query: &'a [(&'a str, &'a str)],
    /// Shared, so an attempt sends it without copying it.
    body: Option<Bytes>,
    peer: Option<&'a str>,
    /// Return the whole JSON body instead of the envelope's `result`.
    whole_body: bool,
}

/// The HTTP client of one backend instance.
#[derive(Clone)]
pub struct OpenVikingClient {
    http: reqwest::Client,
    base_url: String,
    /// `base_url` parsed once: a request's URL is this with its path set,
    /// not the whole URL parsed again (host checks included) per request.
    base: Url,
    timeout: Duration,
    api_key: ApiKey,
}

impl fmt::Debug for OpenVikingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenVikingClient")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl OpenVikingClient {
    /// Builds the client; makes no network call.
    pub fn new(base_url: &str, api_key: &ApiKey, timeout: Duration) -> Result<Self, String> {
        let mut key = HeaderValue::from_str(api_key.expose()).map_err(|_| {
            "the OpenViking USER API key contains characters not allowed in an HTTP header"
                .to_owned()
        })?;
        key.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(API_KEY_HEADER, key);
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(timeout)
            .connect_timeout(timeout)
            .no_proxy()
            // A redirect is an error, never followed: reqwest would carry
            // the key header to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("memgate-openviking/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("could not build the OpenViking HTTP client: {e}"))?;
        let base =
            Url::parse(base_url).map_err(|_| "the OpenViking base_url is not a URL".to_owned())?;
        Ok(Self {
            http,
            base_url: base_url.to_owned(),
            base,
            timeout,
            api_key: api_key.clone(),
        })
    }

    /// `GET /health`: the whole body (`status`, `version`, …).
    pub async fn health(&self) -> Result<Value, WireError> {
        self.send(Call {
            name: "health check",
            kind: Kind::Read,
            method: Method::GET,
            path: "/health".into(),
            query: &[],
            body: None,
            peer: None,
            whole_body: true,
        })
        .await
    }

    /// `POST /api/v1/search/find` (or `/search/search` when the body names a
    /// session) under the peer's view.
    pub async fn retrieve(
        &self,
        peer: &str,
        session_bound: bool,
        body: &Value,
    ) -> Result<Value, WireError> {
        let (name, path) = if session_bound {
            ("search", "/api/v1/search/search")
        } else {
            ("find", "/api/v1/search/find")
        };
        self.send(Call {
            name,
            kind: Kind::Read,
            method: Method::POST,
            path: path.into(),
            query: &[],
            body: Some(body.to_string().into()),
            peer: Some(peer),
            whole_body: false,
        })
        .await
    }

    /// `GET /api/v1/content/read?uri=…&offset=0&limit=-1`.
    pub async fn read_content(&self, peer: &str, uri: &str) -> Result<Value, WireError> {
        self.send(Call {
            name: "content read",
            kind: Kind::Read,
            method: Method::GET,
            path: "/api/v1/content/read".into(),
            query: &[("uri", uri), ("offset", "0"), ("limit", "-1")],
            body: None,
            peer: Some(peer),
            whole_body: false,
        })
        .await
    }

    /// `GET /api/v1/sessions/{id}` (never auto-creating it).
    pub async fn get_session(&self, peer: &str, session_id: &str) -> Result<Value, WireError> {
        self.send(Call {
            name: "get session",
            kind: Kind::Read,
            method: Method::GET,
            path: format!("/api/v1/sessions/{}", encode_segment(session_id)),
            query: &[],
            body: None,
            peer: Some(peer),
            whole_body: false,
        })
        .await
    }

    /// `POST /api/v1/sessions/{id}/messages/batch` with `messages`, the
    /// comma-separated JSON of at most 100 messages (a
    /// [`Batch`](crate::recorder::Batch) of a capture or of the outbox).
    pub async fn add_messages(
        &self,
        peer: &str,
        session_id: &str,
        messages: &str,
    ) -> Result<Value, WireError> {
        const OPEN: &str = "{\"messages\":[";
        let mut body = Vec::with_capacity(OPEN.len() + messages.len() + 2);
        body.extend_from_slice(OPEN.as_bytes());
        body.extend_from_slice(messages.as_bytes());
        body.extend_from_slice(b"]}");
        self.send(Call {
            name: "message batch",
            kind: Kind::Write,
            method: Method::POST,
            path: format!(
                "/api/v1/sessions/{}/messages/batch",
                encode_segment(session_id)
            ),
            query: &[],
            body: Some(body.into()),
            peer: Some(peer),
            whole_body: false,
        })
        .await
    }

    /// `POST /api/v1/sessions/{id}/commit` with `{"keep_recent_count":0}`.
    pub async fn commit(&self, peer: &str, session_id: &str) -> Result<Value, WireError> {
        let body = json!({ "keep_recent_count": 0 }).to_string().into();
        self.send(Call {
            name: "commit",
            kind: Kind::Write,
            method: Method::POST,
            path: format!("/api/v1/sessions/{}/commit", encode_segment(session_id)),
            query: &[],
            body: Some(body),
            peer: Some(peer),
            whole_body: false,
        })
        .await
    }

    async fn send(&self, call: Call<'_>) -> Result<Value, WireError> {
        let attempts = if call.kind == Kind::Read { 2 } else { 1 };
        let mut attempt = 1;
        loop {
            match self.send_once(&call).await {
                Err(e) if attempt < attempts && e.is_recoverable() => {
                    tracing::warn!(error = %e, "OpenViking {} failed; retrying once", call.name);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn send_once(&self, call: &Call<'_>) -> Result<Value, WireError> {
        match tokio::time::timeout(self.timeout, self.exchange(call)).await {
            Ok(result) => result,
            Err(_) => Err(WireError::Deadline {
                call: call.name,
                after: self.timeout,
            }),
        }
    }

    async fn exchange(&self, call: &Call<'_>) -> Result<Value, WireError> {
        let mut request = match self.url(&call.path) {
            Some(url) => self.http.request(call.method.clone(), url),
            None => {
                let url = format!("{}{}", self.base_url, call.path);
                self.http.request(call.method.clone(), &url)
            }
        };
        if !call.query.is_empty() {
            request = request.query(call.query);
        }
        if let Some(peer) = call.peer {
            request = request.header(ACTOR_PEER_HEADER, peer);
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let mut response = request.send().await.map_err(|e| self.transport(call, e))?;
        let status = response.status();
        if response
            .content_length()
            .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large(call));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport(call, e))?
        {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large(call));
            }
            bytes.extend_from_slice(&chunk);
        }
        self.interpret(call, status, &bytes)
    }

    /// `base_url` followed by `path` (already percent-encoded): the parsed
    /// base with its path extended, the same URL as parsing the two joined.
    /// `None` for a base with a query or fragment: the caller joins the
    /// text and reqwest parses it, as for any other URL.
    fn url(&self, path: &str) -> Option<Url> {
        if self.base.query().is_some() || self.base.fragment().is_some() {
            return None;
        }
        let mut url = self.base.clone();
        let joined = format!("{}{}", url.path().trim_end_matches('/'), path);
        url.set_path(&joined);
        Some(url)
    }

    fn interpret(
        &self,
        call: &Call<'_>,
        status: StatusCode,
        bytes: &[u8],
    ) -> Result<Value, WireError> {
        let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
        let envelope_error = parsed
            .as_ref()
            .filter(|v| v.get("status").and_then(Value::as_str) == Some("error"));
        if !status.is_success() || envelope_error.is_some() {
            let error = envelope_error
                .or(parsed.as_ref())
                .and_then(|v| v.get("error"))
                .filter(|e| e.is_object());
            let code = error
                .and_then(|e| e.get("code"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let message = error
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(|m| self.scrub(m))
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
            return Err(WireError::Server {
                call: call.name,
                status: status.as_u16(),
                code,
                message,
            });
        }
        match parsed {
            Some(body) if call.whole_body => Ok(body),
            Some(Value::Object(mut body)) => Ok(body.remove("result").unwrap_or(Value::Null)),
            Some(_) | None if call.kind == Kind::Write => Ok(Value::Null),
            Some(other) => Err(WireError::Malformed {
                call: call.name,
                detail: format!("expected a JSON object, got {}", json_kind(&other)),
            }),
            None => Err(WireError::Malformed {
                call: call.name,
                detail: "the body is not JSON".into(),
            }),
        }
    }

    fn transport(&self, call: &Call<'_>, err: reqwest::Error) -> WireError {
        if err.is_timeout() {
            return WireError::Deadline {
                call: call.name,
                after: self.timeout,
            };
        }
        let err = err.without_url();
        let mut detail = err.to_string();
        let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(&err);
        while let Some(c) = cause {
            detail.push_str(": ");
            detail.push_str(&c.to_string());
            cause = c.source();
        }
        WireError::Transport {
            call: call.name,
            detail: self.scrub(&detail),
        }
    }

    /// Server text, shortened, with the key removed should it ever appear.
    fn scrub(&self, text: &str) -> String {
        // Scrubbed before shortening, so a cut never leaves part of the key.
        let scrubbed = self.api_key.scrub(text);
        scrubbed.chars().take(MAX_SERVER_MESSAGE_CHARS).collect()
    }
}

fn too_large(call: &Call<'_>) -> WireError {
    WireError::Malformed {
        call: call.name,
        detail: format!("the body exceeds {MAX_RESPONSE_BYTES} bytes"),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("df_0a9"), "df_0a9");
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("é"), "%C3%A9");
    }

    #[test]
    fn request_urls_equal_the_joined_text_parsed() {
        let key = ApiKey::new("k".to_owned());
        for base in [
            "http://127.0.0.1:1933",
            "https://Any-Host.example/prefix",
            "http://openviking:1933/a/b",
            "http://localhost",
        ] {
            let client = OpenVikingClient::new(base, &key, Duration::from_secs(1)).unwrap();
            for path in [
                "/health".to_owned(),
                format!("/api/v1/sessions/{}", encode_segment("df_0a9")),
                format!(
                    "/api/v1/sessions/{}/messages/batch",
                    encode_segment("a b/é%")
                ),
                "/api/v1/search/find".to_owned(),
            ] {
                let expected = Url::parse(&format!("{base}{path}")).unwrap();
                assert_eq!(client.url(&path), Some(expected), "{base} + {path}");
            }
        }
        let queried =
            OpenVikingClient::new("https://h.example/p?x=1", &key, Duration::from_secs(1));
        assert_eq!(queried.unwrap().url("/health"), None);
    }

    #[test]
    fn recoverable_errors() {
        let server = |status, code: Option<&str>| WireError::Server {
            call: "find",
            status,
            code: code.map(str::to_owned),
            message: String::new(),
        };
        assert!(server(503, Some("UNAVAILABLE")).is_recoverable());
        assert!(server(504, Some("DEADLINE_EXCEEDED")).is_recoverable());
        assert!(server(503, None).is_recoverable());
        assert!(!server(500, Some("INTERNAL")).is_recoverable());
        assert!(!server(401, Some("UNAUTHENTICATED")).is_recoverable());
        assert!(!server(503, Some("MODEL_UNAVAILABLE")).is_recoverable());
        assert!(server(404, None).is_not_found());
        assert_eq!(
            server(401, Some("UNAUTHENTICATED")).to_string(),
            "OpenViking find failed: HTTP 401 UNAUTHENTICATED"
        );
    }
}
