//! The erasure routes over a real listener: the local store erases a fact,
//! a thread and a scope (isolation holds: bob's identical text stays); a
//! backend that cannot erase answers 501, never a look-alike success.

use memgate_core::noop::NoopBackend;
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message};
use memgate_store::{LocalBackend, LocalConfig};
use serde_json::json;
use std::sync::Arc;

mod api_support;
use api_support::{post, spawn};

fn said(user: &str, thread: &str, text: &str) -> CaptureRequest {
    CaptureRequest {
        caller: Caller::new(user).with_thread(thread),
        messages: vec![Message::human(text)],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

#[tokio::test]
async fn forget_routes_erase_at_each_level_in_the_callers_scope_only() {
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap(),
    );
    let backend: Arc<dyn MemoryBackend> = local.clone();
    for (user, thread) in [("alice", "t1"), ("alice", "t2"), ("bob", "t1")] {
        backend
            .capture(&said(user, thread, "the same words about the harbour"))
            .await
            .unwrap();
    }
    let base = spawn(backend).await;

    let (status, body) = post(
        &base,
        "/v1/remember",
        json!({"caller": {"user": "alice"}, "text": "alice likes sailing"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let id = body["citation"].as_str().unwrap().to_owned();
    let (status, body) = post(
        &base,
        "/v1/forget/fact",
        json!({"caller": {"user": "bob"}, "id": id}),
    )
    .await;
    assert_eq!(status, 404, "bob cannot erase alice's fact: {body}");
    let (status, body) = post(
        &base,
        "/v1/forget/fact",
        json!({"caller": {"user": "alice"}, "id": id}),
    )
    .await;
    assert_eq!(
        (status, body.clone()),
        (200, json!({"facts": 1, "versions": 1, "turns": 0})),
        "{body}"
    );

    let (status, body) = post(
        &base,
        "/v1/forget/thread",
        json!({"caller": {"user": "alice"}}),
    )
    .await;
    assert_eq!(status, 400, "a thread is required: {body}");
    let (status, body) = post(
        &base,
        "/v1/forget/thread",
        json!({"caller": {"user": "alice", "thread": "t1"}}),
    )
    .await;
    assert_eq!((status, body["turns"].clone()), (200, json!(1)), "{body}");
    let alice = local.export(&Caller::new("alice")).await.unwrap();
    assert_eq!(alice.turns.len(), 1);
    assert_eq!(alice.turns[0].thread, "t2");

    let (status, body) = post(
        &base,
        "/v1/forget/scope",
        json!({"caller": {"user": "alice"}}),
    )
    .await;
    assert_eq!((status, body["turns"].clone()), (200, json!(1)), "{body}");
    assert!(local
        .export(&Caller::new("alice"))
        .await
        .unwrap()
        .turns
        .is_empty());
    let bob = local.export(&Caller::new("bob")).await.unwrap();
    assert_eq!(bob.turns.len(), 1, "bob's identical text stays");

    backend_capture(&local, "bob", "t2").await;
    let (status, body) = post(&base, "/v1/forget/user", json!({"caller": {"user": "bob"}})).await;
    assert_eq!((status, body["turns"].clone()), (200, json!(2)), "{body}");
}

async fn backend_capture(local: &LocalBackend, user: &str, thread: &str) {
    let caller = Caller::new(user).with_agent("other-agent");
    let mut request = said(user, thread, "an agent's own words");
    request.caller = caller.with_thread(thread);
    local.capture(&request).await.unwrap();
}

#[tokio::test]
async fn a_backend_that_cannot_erase_answers_501() {
    let base = spawn(Arc::new(NoopBackend)).await;
    for (path, body) in [
        (
            "/v1/forget/fact",
            json!({"caller": {"user": "alice"}, "id": "mem_1"}),
        ),
        (
            "/v1/forget/thread",
            json!({"caller": {"user": "alice", "thread": "t"}}),
        ),
        ("/v1/forget/scope", json!({"caller": {"user": "alice"}})),
        ("/v1/forget/user", json!({"caller": {"user": "alice"}})),
    ] {
        let (status, answer) = post(&base, path, body).await;
        assert_eq!(status, 501, "{path}: {answer}");
    }
}
