//! A capture that keeps only the start of a long message says so: over HTTP
//! on the real embedded store, the answer's `cut` names the message (its
//! position and id) and how much was kept, the OpenAPI document describes
//! the field, and a second capture of the same transcript reports no cut
//! again (nothing new was cut) while the first capture's turns stay intact.

use memgate_core::{Caller, MemoryBackend};
use memgate_store::{LocalBackend, LocalConfig};
use serde_json::{json, Value};
use std::sync::Arc;

mod api_support;
use api_support::{post, spawn};

const LONG_BYTES: usize = 1_000_000;
/// The documented limit of a stored turn (`memgate_recall::turns`).
const MAX_TURN_TEXT_BYTES: usize = 64 * 1024;

fn transcript() -> Value {
    json!([
        {"type": "human", "content": "the harbour office opens at nine", "id": "h1"},
        {"type": "human", "content": "x".repeat(LONG_BYTES), "id": "pasted-log"},
        {"type": "ai", "content": "noted", "id": "a1"},
    ])
}

#[tokio::test]
async fn http_capture_reports_which_message_was_cut_and_how_much_was_kept() {
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap(),
    );
    let backend: Arc<dyn MemoryBackend> = local.clone();
    let base = spawn(backend.clone()).await;
    let caller = json!({"user": "alice", "thread": "t1"});
    let body = json!({"caller": caller, "messages": transcript()});

    let (status, report) = post(&base, "/v1/capture", body.clone()).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["stored"], 3, "{report}");
    assert_eq!(
        report["cut"],
        json!([{
            "index": 1,
            "message_id": "pasted-log",
            "text_bytes": LONG_BYTES,
            "kept_bytes": MAX_TURN_TEXT_BYTES,
        }]),
        "{report}"
    );

    // The same transcript again stores nothing, so it cuts nothing.
    let (status, again) = post(&base, "/v1/capture", body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["stored"].clone(), again["already_known"].clone()),
        (json!(0), json!(3))
    );
    assert!(again.get("cut").is_none(), "{again}");

    let export = backend.export(&Caller::new("alice")).await.unwrap();
    let lengths: Vec<usize> = export.turns.iter().map(|t| t.text.len()).collect();
    assert_eq!(
        lengths,
        [32, MAX_TURN_TEXT_BYTES, 5],
        "what was stored is intact"
    );
}

#[tokio::test]
async fn the_openapi_document_describes_the_capture_cut() {
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn MemoryBackend> = Arc::new(
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap(),
    );
    let base = spawn(backend).await;
    let doc: Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let schemas = &doc["components"]["schemas"];
    let cut = &schemas["CaptureReport"]["properties"]["cut"];
    assert_eq!(cut["type"], "array", "{cut}");
    let item = &schemas["CaptureCut"];
    for field in ["index", "text_bytes", "kept_bytes"] {
        assert!(
            item["required"].as_array().unwrap().contains(&json!(field)),
            "{item}"
        );
    }
}
