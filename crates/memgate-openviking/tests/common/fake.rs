//! FAKE OpenViking: an in-process axum server on an ephemeral 127.0.0.1 port
//! that speaks the few routes the backend uses, records every request, and
//! injects the faults a real server will not produce on demand (failed or
//! blocked batches, failed commits, lost responses, 401/403/5xx, malformed
//! or oversized bodies). It is not OpenViking: tests that need real
//! behaviour use the real server (see `real_openviking.rs`).

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One request as the fake received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A scripted answer for the next call of one route.
#[derive(Clone, Debug)]
pub enum Reply {
    /// The normal answer.
    Normal,
    /// An error envelope with this HTTP status and code.
    Error(u16, &'static str),
    /// A non-JSON body with this status.
    Raw(u16, &'static str),
    /// The normal effect, but the answer comes only after this delay.
    Late(Duration),
    /// The normal answer, after the test calls `release()`.
    Blocked,
    /// A 200 with a body of this many bytes of JSON.
    Huge(usize),
    /// A 307 to this URL (another host, say), the same path appended.
    Redirect(String),
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    memories: Vec<Value>,
    contents: HashMap<String, String>,
    health: Value,
    plans: HashMap<&'static str, VecDeque<Reply>>,
    /// Messages each session received, in order.
    sessions: HashMap<String, Vec<Value>>,
    pending_tokens: HashMap<String, i64>,
    commits: HashMap<String, usize>,
}

/// The fake server; dropped with the test runtime.
#[derive(Clone)]
pub struct FakeOpenViking {
    pub url: String,
    state: Arc<Mutex<State>>,
    gate: Arc<Notify>,
    arrived: Arc<Notify>,
}

fn route_of(method: &Method, path: &str) -> &'static str {
    match (method.as_str(), path) {
        ("GET", "/health") => "health",
        ("POST", "/api/v1/search/find") => "find",
        ("POST", "/api/v1/search/search") => "search",
        ("GET", "/api/v1/content/read") => "read",
        ("POST", p) if p.ends_with("/messages/batch") => "batch",
        ("POST", p) if p.ends_with("/commit") => "commit",
        ("GET", p) if p.starts_with("/api/v1/sessions/") => "session",
        _ => "unknown",
    }
}

fn session_of(path: &str) -> String {
    path.trim_start_matches("/api/v1/sessions/")
        .split('/')
        .next()
        .unwrap_or("")
        .to_owned()
}

fn ok(result: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        json!({"status": "ok", "result": result, "error": null}).to_string(),
    )
        .into_response()
}

impl FakeOpenViking {
    pub async fn start() -> Self {
        let fake = FakeOpenViking {
            url: String::new(),
            state: Arc::new(Mutex::new(State {
                health: json!({"status": "ok", "healthy": true, "version": "0.5.2", "auth_mode": "api_key"}),
                ..State::default()
            })),
            gate: Arc::new(Notify::new()),
            arrived: Arc::new(Notify::new()),
        };
        let handler_fake = fake.clone();
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let fake = handler_fake.clone();
                async move { fake.handle(method, uri, headers, body).await }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeOpenViking {
            url: format!("http://{addr}"),
            ..fake
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Scripts the next answers of a route (`health`, `find`, `search`,
    /// `read`, `batch`, `commit`, `session`); later calls answer normally.
    pub fn plan(&self, route: &'static str, replies: impl IntoIterator<Item = Reply>) {
        self.state().plans.entry(route).or_default().extend(replies);
    }

    pub fn set_memories(&self, memories: Vec<Value>) {
        self.state().memories = memories;
    }

    pub fn set_content(&self, uri: &str, text: &str) {
        self.state()
            .contents
            .insert(uri.to_owned(), text.to_owned());
    }

    pub fn set_health(&self, body: Value) {
        self.state().health = body;
    }

    /// Lets one blocked call answer.
    pub fn release(&self) {
        self.gate.notify_one();
    }

    /// Waits until a blocked call has arrived.
    pub async fn wait_blocked(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.arrived.notified())
            .await
            .expect("the blocked call arrived");
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    pub fn requests_to(&self, route: &str) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|s| route_of(&s.method.parse().unwrap(), &s.path) == route)
            .collect()
    }

    pub fn clear_requests(&self) {
        self.state().seen.clear();
    }

    /// The texts of each batch's messages, one list per batch request.
    pub fn batches(&self) -> Vec<Vec<String>> {
        self.requests_to("batch")
            .iter()
            .map(|s| {
                s.body["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(payload_text)
                    .collect()
            })
            .collect()
    }

    pub fn session_messages(&self, session: &str) -> Vec<Value> {
        self.state()
            .sessions
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    pub fn commits(&self, session: &str) -> usize {
        self.state().commits.get(session).copied().unwrap_or(0)
    }

    async fn handle(self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        let path = uri.path().to_owned();
        let route = route_of(&method, &path);
        let seen = Seen {
            method: method.to_string(),
            path: path.clone(),
            query: uri.query().unwrap_or("").to_owned(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
                .collect(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let reply = {
            let mut state = self.state();
            state.seen.push(seen.clone());
            state
                .plans
                .get_mut(route)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Reply::Normal)
        };
        match reply {
            Reply::Normal => self.answer(route, &seen),
            Reply::Error(status, code) => (
                StatusCode::from_u16(status).unwrap(),
                json!({"status": "error", "result": null,
                       "error": {"code": code, "message": format!("fake {code} for key {}", seen.header("x-api-key").unwrap_or(""))}})
                    .to_string(),
            )
                .into_response(),
            Reply::Raw(status, text) => (StatusCode::from_u16(status).unwrap(), text).into_response(),
            Reply::Late(delay) => {
                let answer = self.answer(route, &seen);
                tokio::time::sleep(delay).await;
                answer
            }
            Reply::Blocked => {
                self.arrived.notify_one();
                self.gate.notified().await;
                self.answer(route, &seen)
            }
            Reply::Redirect(to) => (
                StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, format!("{to}{path}"))],
            )
                .into_response(),
            Reply::Huge(bytes) => {
                let big = format!("{{\"status\":\"ok\",\"result\":{{\"memories\":[],\"pad\":\"{}\"}}}}", "x".repeat(bytes));
                (StatusCode::OK, big).into_response()
            }
        }
    }

    fn answer(&self, route: &str, seen: &Seen) -> Response {
        let mut state = self.state();
        match route {
            "health" => (StatusCode::OK, state.health.to_string()).into_response(),
            "find" | "search" => ok(
                json!({"memories": state.memories, "resources": [], "skills": [], "total": state.memories.len()}),
            ),
            "read" => {
                let uri = seen
                    .query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("uri="))
                    .map(|u| {
                        u.replace("%3A", ":")
                            .replace("%2F", "/")
                            .replace("%7E", "~")
                    })
                    .unwrap_or_default();
                match state.contents.get(&uri) {
                    Some(text) => ok(json!(text)),
                    None => (
                        StatusCode::NOT_FOUND,
                        json!({"status": "error", "error": {"code": "NOT_FOUND", "message": "no such file"}}).to_string(),
                    )
                        .into_response(),
                }
            }
            "batch" => {
                let sid = session_of(&seen.path);
                let messages = seen.body["messages"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let added = messages.len();
                *state.pending_tokens.entry(sid.clone()).or_default() += 10 * added as i64;
                let stored = state.sessions.entry(sid.clone()).or_default();
                stored.extend(messages);
                let count = stored.len();
                ok(
                    json!({"session_id": sid, "message_count": count, "added": added, "pending_tokens": state.pending_tokens[&sid]}),
                )
            }
            "commit" => {
                let sid = session_of(&seen.path);
                *state.commits.entry(sid.clone()).or_default() += 1;
                state.pending_tokens.insert(sid.clone(), 0);
                ok(
                    json!({"session_id": sid, "status": "accepted", "task_id": "task-1", "archived": true}),
                )
            }
            "session" => {
                let sid = session_of(&seen.path);
                let total = state.sessions.get(&sid).map_or(0, Vec::len);
                match state.pending_tokens.get(&sid) {
                    // Like OpenViking 0.5: total_message_count counts committed messages too.
                    Some(tokens) => ok(json!({"session_id": sid, "pending_tokens": tokens, "message_count": 0, "total_message_count": total})),
                    None => (
                        StatusCode::NOT_FOUND,
                        json!({"status": "error", "error": {"code": "NOT_FOUND", "message": format!("Session {sid} not found")}}).to_string(),
                    )
                        .into_response(),
                }
            }
            _ => (
                StatusCode::NOT_FOUND,
                json!({"status": "error", "error": {"code": "NOT_FOUND", "message": "Not Found"}})
                    .to_string(),
            )
                .into_response(),
        }
    }
}

/// The text of a recorded payload: its text part, or `tool:<name>` for a
/// tool part.
pub fn payload_text(payload: &Value) -> String {
    let part = &payload["parts"][0];
    match part["type"].as_str() {
        Some("text") => part["text"].as_str().unwrap_or("").to_owned(),
        Some("tool") => format!("tool:{}", part["tool_name"].as_str().unwrap_or("")),
        _ => String::new(),
    }
}

/// A memory hit as OpenViking 0.5 returns it.
pub fn hit(uri: &str, level: i64, score: f64, abstract_text: &str) -> Value {
    json!({"context_type": "memory", "uri": uri, "level": level, "score": score, "abstract": abstract_text})
}

/// A server that accepts a connection, sends response headers, then drips
/// the body one byte at a time (never finishing in time).
pub async fn slow_drip_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..4096 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if socket.write_all(b" ").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}
