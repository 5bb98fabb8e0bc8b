#![allow(dead_code)]
//! Shared test helpers: backend construction with an injected environment,
//! and the skip/require rule for the real server.

pub mod fake;

use memgate_core::{BackendContext, Caller, CaptureKind, CaptureRequest, Message};
use memgate_openviking::OpenVikingBackend;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::Arc;

/// The USER key the tests configure (never expected in any output).
pub const USER_KEY: &str = "user-key-7f3a9c0d-secret";

/// A host context whose environment holds only `vars`.
pub fn context(storage: &Path, vars: &[(&str, &str)]) -> BackendContext {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    BackendContext::new(storage).with_env(Arc::new(move |name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }))
}

/// The base configuration of the original test suite (§7.1), against `url`.
pub fn base_config(url: &str, storage: &Path) -> Map<String, Value> {
    json!({
        "base_url": url,
        "storage_path": storage.to_str().unwrap(),
        "owner_user_id": "alice",
        "startup_policy": "warn",
        "timeout_seconds": 5,
        "retrieval": {"top_k": 4, "max_injection_chars": 1000,
                      "injection_query": "profile preferences and prior decisions"}
    })
    .as_object()
    .unwrap()
    .clone()
}

/// Builds a backend for `url` with the base config changed by `edit`.
pub fn backend_with(
    url: &str,
    storage: &Path,
    edit: impl FnOnce(&mut Map<String, Value>),
) -> OpenVikingBackend {
    let mut config = base_config(url, storage);
    edit(&mut config);
    OpenVikingBackend::from_backend_config(
        &config,
        &context(storage, &[("OPENVIKING_API_KEY", USER_KEY)]),
    )
    .expect("valid test config")
}

pub fn set(config: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        Some((outer, inner)) => {
            let entry = config.entry(outer.to_owned()).or_insert_with(|| json!({}));
            entry
                .as_object_mut()
                .unwrap()
                .insert(inner.to_owned(), value);
        }
        None => {
            config.insert(path.to_owned(), value);
        }
    }
}

pub fn human(id: &str, text: &str) -> Message {
    Message::human(text).with_id(id)
}

pub fn ai(id: &str, text: &str) -> Message {
    Message::ai(text).with_id(id)
}

/// A transcript of `n` alternating human/AI messages with ids `m0…`.
pub fn conversation(n: usize, tag: &str) -> Vec<Message> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                human(&format!("{tag}{i}"), &format!("{tag} question {i}"))
            } else {
                ai(&format!("{tag}{i}"), &format!("{tag} answer {i}"))
            }
        })
        .collect()
}

pub fn capture_request(caller: &Caller, messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone(),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

/// The real OpenViking server started by `testkit/up` (tests that use it
/// are `#[ignore]`d, so a plain `cargo test` shows them as ignored).
#[allow(unused_imports)] // each test binary uses its own part of `common`
pub use memgate_testsupport::real::{openviking as real_server, OpenViking as RealServer};
