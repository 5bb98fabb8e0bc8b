//! FAKE PowerContext server (axum on an ephemeral loopback port) for the
//! faults a real server will not produce on demand: slow-drip bodies,
//! hanging headers, answers lost after a commit, malformed or oversized
//! JSON, 401/403/5xx. It records every request (method, path, Authorization
//! header, JSON body) and the peak number of requests in flight.
//!
//! It is not PowerContext: each test scripts its answers with a responder.

#![allow(dead_code)]

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

/// How the fake answers one request.
pub enum FakeReply {
    Json(u16, Value),
    /// Arbitrary bytes, labelled as JSON.
    Raw(u16, Vec<u8>),
    /// Headers at once, then `chunk` every `every`, forever (Content-Length
    /// promises more than will ever arrive in time).
    SlowDrip {
        chunk: Vec<u8>,
        every: Duration,
    },
    /// Never answers.
    Hang,
    /// Headers and part of the body, then the connection breaks.
    CutBody {
        status: u16,
        partial: Vec<u8>,
    },
    /// Answers after a pause.
    Delay(Duration, Box<FakeReply>),
}

pub type Responder = Arc<dyn Fn(&Seen) -> FakeReply + Send + Sync>;

pub struct FakeState {
    pub seen: Mutex<Vec<Seen>>,
    responder: Responder,
    in_flight: AtomicUsize,
    pub peak_in_flight: AtomicUsize,
}

pub struct Fake {
    pub base_url: String,
    pub state: Arc<FakeState>,
}

impl Fake {
    /// Starts the fake on 127.0.0.1:0 in the current runtime.
    pub async fn start(responder: impl Fn(&Seen) -> FakeReply + Send + Sync + 'static) -> Fake {
        let state = Arc::new(FakeState {
            seen: Mutex::new(Vec::new()),
            responder: Arc::new(responder),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Fake {
            base_url: format!("http://{addr}"),
            state,
        }
    }

    /// Requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn total(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    /// Requests seen on one path.
    pub fn count(&self, path: &str) -> usize {
        self.seen().iter().filter(|s| s.path == path).count()
    }

    pub fn bodies(&self, path: &str) -> Vec<Value> {
        self.seen()
            .into_iter()
            .filter(|s| s.path == path)
            .map(|s| s.body)
            .collect()
    }

    pub fn peak_in_flight(&self) -> usize {
        self.state.peak_in_flight.load(Ordering::SeqCst)
    }
}

async fn handle(
    State(state): State<Arc<FakeState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let seen = Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    state.seen.lock().unwrap().push(seen.clone());
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    let reply = (state.responder)(&seen);
    let response = render(reply).await;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

fn json_response(status: u16, body: Body, content_length: Option<usize>) -> Response {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json");
    if let Some(n) = content_length {
        builder = builder.header("content-length", n.to_string());
    }
    builder.body(body).unwrap()
}

async fn render(reply: FakeReply) -> Response {
    match reply {
        FakeReply::Json(status, value) => {
            json_response(status, Body::from(value.to_string()), None)
        }
        FakeReply::Raw(status, bytes) => json_response(status, Body::from(bytes), None),
        FakeReply::SlowDrip { chunk, every } => {
            let stream = futures_util::stream::unfold(chunk, move |chunk| async move {
                tokio::time::sleep(every).await;
                Some((Ok::<_, std::io::Error>(Bytes::from(chunk.clone())), chunk))
            });
            // Promises 64 KiB (under every response cap), delivers far slower.
            json_response(200, Body::from_stream(stream), Some(64 * 1024))
        }
        FakeReply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json_response(500, Body::empty(), None)
        }
        FakeReply::CutBody { status, partial } => {
            let len = partial.len() * 4 + 16;
            let stream = futures_util::stream::iter(vec![
                Ok(Bytes::from(partial)),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "fake: connection lost after commit",
                )),
            ]);
            json_response(status, Body::from_stream(stream), Some(len))
        }
        FakeReply::Delay(pause, inner) => {
            tokio::time::sleep(pause).await;
            Box::pin(render(*inner)).await
        }
    }
}

/// A `/v1/server-info` answer of a 1.4.x server.
pub fn server_info_current() -> FakeReply {
    FakeReply::Json(
        200,
        json!({"product": "powercontext", "package_version": "1.4.1",
               "api_contract_version": {"major": 1, "minor": 4}}),
    )
}

/// The 0.0.2 probe answers: no server-info, capabilities with the v1 context.
pub fn snapshot_probe(path: &str) -> Option<FakeReply> {
    match path {
        "/v1/server-info" => Some(FakeReply::Json(404, json!({"detail": "Not Found"}))),
        "/v1/capabilities" => Some(FakeReply::Json(
            200,
            json!({"search_modes": ["auto", "fts"],
                   "context_versions": ["powercontext.prepared-context.v1"]}),
        )),
        _ => None,
    }
}

/// A well-formed prepare answer.
pub fn prepared_ready(content: &str) -> FakeReply {
    FakeReply::Json(
        200,
        json!({"schema": "powercontext.prepared-context.v1", "status": "ready",
               "content": content, "content_bytes": content.len()}),
    )
}

pub fn prepared_empty() -> FakeReply {
    FakeReply::Json(
        200,
        json!({"schema": "powercontext.prepared-context.v1", "status": "empty",
               "content": null, "content_bytes": 0}),
    )
}

/// A 1.4.x remember answer for a new record.
pub fn atomic_stored(artifact_id: &str, kind: &str, text: &str) -> Value {
    json!({"changed": true, "records": [atomic_record(artifact_id, kind, text)]})
}

pub fn atomic_record(artifact_id: &str, kind: &str, text: &str) -> Value {
    json!({"artifact": {"family": "atomic-memory", "artifact_id": artifact_id, "revision": 1},
           "kind": kind, "text": text, "state": "active", "state_version": 0,
           "merged_into_id": null})
}

pub fn error_body(code: &str) -> Value {
    json!({"error": {"code": code, "message": "fake error", "details": null}})
}
