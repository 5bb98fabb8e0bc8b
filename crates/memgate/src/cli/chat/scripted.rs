//! Test support for the chat modules: `testkit/scripted_model.py` (a real
//! HTTP server speaking the OpenAI protocol, logging every request body),
//! a client and a session for it, and the RFC scenario's texts.

use super::openai::{Endpoint, ModelClient};
use super::turn::ChatSession;
use super::ChatArgs;
use crate::cli::error::Result;
use memgate_core::{BackendContext, Caller, MemoryBackend};
use memgate_host::{HostSettings, MemoryHost};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub(super) const CONVENTION: &str = "money amounts are integer cents; use pytest for backend tests";
/// What the scripted model saves: one self-contained statement, as the
/// tool description asks, so it names what the convention is for.
pub(super) const SAVED_STATEMENT: &str =
    "Order service conventions: money amounts are integer cents; use pytest for backend tests.";
pub(super) const SAVE_REQUEST: &str =
    "Remember this for the order service: money amounts are integer cents; use pytest for backend tests.";
pub(super) const REFUND_REQUEST: &str =
    "Add a refund calculation to the order service, following its conventions.";

pub(super) use memgate_testsupport::scripted_model::ScriptedModel;

/// `memgate chat`'s options with an endpoint and its defaults otherwise.
pub(super) fn args(base_url: Option<&str>, model: Option<&str>) -> ChatArgs {
    ChatArgs {
        base_url: base_url.map(str::to_owned),
        model: model.map(str::to_owned),
        thread: None,
        recall_timeout: 5.0,
        model_timeout: 120.0,
        no_stream: false,
        system: None,
    }
}

/// A client for `model`, its endpoint resolved as `memgate chat` does.
pub(super) fn client(model: &ScriptedModel, stream: bool, key: Option<&str>) -> ModelClient {
    let endpoint = Endpoint::resolve(&args(Some(&model.url), Some("scripted")), |_| {
        key.map(str::to_owned)
    })
    .unwrap();
    ModelClient::new(endpoint, stream, Duration::from_secs(30)).unwrap()
}

pub(super) fn session(
    backend: Arc<dyn MemoryBackend>,
    user: &str,
    model: ModelClient,
) -> ChatSession {
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(backend),
        HostSettings::default(),
    );
    ChatSession::new(host, model, Caller::new(user), None, None)
}

pub(super) async fn turn(session: &mut ChatSession, input: &str) -> Result<String> {
    let mut out = Vec::new();
    let result = session.turn(input, &mut out).await;
    let text = String::from_utf8(out).unwrap();
    result.map(|()| text)
}

pub(super) fn local() -> (Arc<dyn MemoryBackend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let backend = memgate_store::LocalBackend::from_backend_config(
        &serde_json::Map::new(),
        &BackendContext::new(dir.path()),
    )
    .unwrap();
    (Arc::new(backend), dir)
}

pub(super) fn rfc_script() -> Value {
    json!([
        {"when": {"last_role": "tool"},
         "reply": {"content": "The memory tool answered: {{tool_result}}"}},
        {"when": {"user_contains": "remember this"},
         "reply": {"tool_calls": [{"name": "memgate_remember",
                                   "arguments": {"text": SAVED_STATEMENT, "kind": "preference"}}]}},
        {"when": {"user_contains": "refund"},
         "reply": {"content": "Refunds will be computed in integer cents, with pytest tests."}}
    ])
}
