//! The handoff routes over a real listener on the local store: the whole
//! flow, bad input named by field and rule, another user answered 404, a
//! step at the wrong stage 409, a backend without handoffs 501; and the
//! same flow through the HTTP client (what `memgate --url` uses). The
//! OpenAPI document lists every handoff route.

use memgate_core::noop::NoopBackend;
use memgate_core::{
    Acknowledgement, Caller, CommitOutcome, HandoffContent, HandoffStage, MemoryBackend,
};
use memgate_store::{LocalBackend, LocalConfig};
use serde_json::json;
use std::sync::Arc;

mod api_support;
use api_support::{post, spawn};

fn local(dir: &tempfile::TempDir) -> Arc<dyn MemoryBackend> {
    Arc::new(
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap(),
    )
}

#[tokio::test]
async fn the_handoff_routes_run_the_flow_and_refuse_what_they_must() {
    let dir = tempfile::tempdir().unwrap();
    let base = spawn(local(&dir)).await;
    let alice = json!({"user": "alice", "thread": "t-1"});
    let content = json!({
        "objective": "publish the release notes",
        "progress": ["draft written"],
        "next_action": "get sign-off",
    });

    let (status, body) = post(
        &base,
        "/v1/handoff/prepare",
        json!({"caller": alice, "content": {"objective": " ", "next_action": "x"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "objective", "{body}");

    let (status, draft) = post(
        &base,
        "/v1/handoff/prepare",
        json!({"caller": alice, "content": content}),
    )
    .await;
    assert_eq!(status, 200, "{draft}");
    assert_eq!(draft["stage"], "draft");
    let id = draft["id"].as_str().unwrap().to_owned();

    let (status, body) = post(
        &base,
        "/v1/handoff/get",
        json!({"caller": {"user": "bob"}, "id": id}),
    )
    .await;
    assert_eq!(status, 404, "bob cannot read alice's handoff: {body}");

    let (status, body) = post(
        &base,
        "/v1/handoff/continue",
        json!({"caller": alice, "id": id}),
    )
    .await;
    assert_eq!(status, 409, "a draft is not continued: {body}");

    let (status, body) = post(
        &base,
        "/v1/handoff/finalize",
        json!({"caller": alice, "id": id}),
    )
    .await;
    assert_eq!(
        (status, body["stage"].as_str()),
        (200, Some("prepared")),
        "{body}"
    );

    let receiver = json!({"user": "alice", "thread": "t-2"});
    let (status, cont) = post(
        &base,
        "/v1/handoff/continue",
        json!({"caller": receiver, "id": id}),
    )
    .await;
    assert_eq!(status, 200, "{cont}");
    assert!(cont["block"]
        .as_str()
        .unwrap()
        .contains("trust=\"untrusted_history\""));

    let (status, body) = post(
        &base,
        "/v1/handoff/acknowledge",
        json!({"caller": receiver, "id": id, "acknowledgement": {"decision": "declined"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "message", "{body}");
    let (status, body) = post(
        &base,
        "/v1/handoff/acknowledge",
        json!({"caller": receiver, "id": id, "acknowledgement": {"decision": "accepted"}}),
    )
    .await;
    assert_eq!(
        (status, body["stage"].as_str()),
        (200, Some("acknowledged")),
        "{body}"
    );

    let (status, facts) = post(&base, "/v1/facts/list", json!({"caller": receiver})).await;
    assert_eq!(status, 200);
    assert_eq!(facts["facts"], json!([]), "not memory before the commit");
    let (status, body) = post(
        &base,
        "/v1/handoff/commit",
        json!({"caller": receiver, "id": id}),
    )
    .await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (200, Some("stored")),
        "{body}"
    );
    let (_, facts) = post(&base, "/v1/facts/list", json!({"caller": receiver})).await;
    assert_eq!(facts["facts"].as_array().unwrap().len(), 1, "{facts}");
}

#[tokio::test]
async fn a_backend_without_handoffs_answers_501() {
    let base = spawn(Arc::new(NoopBackend)).await;
    let (status, body) = post(
        &base,
        "/v1/handoff/prepare",
        json!({"caller": {"user": "alice"}, "content": {"objective": "o", "next_action": "n"}}),
    )
    .await;
    assert_eq!(status, 501, "{body}");
    assert_eq!(body["error"]["operation"], "handoff_prepare", "{body}");
}

#[tokio::test]
async fn the_http_client_runs_the_same_flow() {
    let dir = tempfile::tempdir().unwrap();
    let base = spawn(local(&dir)).await;
    let client = memgate_server::client::HttpBackend::connect(
        &base,
        None,
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
    let alice = Caller::new("alice").with_thread("t-1");
    let content = HandoffContent::new("o", &[], &[], "n", &[]).unwrap();
    let h = client.prepare_handoff(&alice, &content).await.unwrap();
    let h = client.finalize_handoff(&alice, &h.id).await.unwrap();
    assert_eq!(h.stage, HandoffStage::Prepared);
    let next = Caller::new("alice").with_thread("t-2");
    client.continue_handoff(&next, &h.id).await.unwrap();
    client
        .acknowledge_handoff(&next, &h.id, &Acknowledgement::Accepted)
        .await
        .unwrap();
    let outcome = client.commit_handoff(&next, &h.id).await.unwrap();
    assert!(
        matches!(outcome, CommitOutcome::Stored { .. }),
        "{outcome:?}"
    );
    let err = client
        .get_handoff(&Caller::new("bob"), &h.id)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
}

#[test]
fn the_openapi_document_lists_every_handoff_route() {
    let doc = memgate_server::openapi::document();
    for step in [
        "prepare",
        "get",
        "correct",
        "finalize",
        "continue",
        "acknowledge",
        "commit",
    ] {
        let path = format!("/v1/handoff/{step}");
        assert!(
            doc["paths"][&path]["post"]["requestBody"].is_object(),
            "{path}"
        );
    }
}
