//! Facts over HTTP carry their provenance and a stored confidence (issue
//! 33: every fact read 0.5 whatever was sent, and a revision of confidence
//! alone answered 200 and changed nothing).

use memgate_store::{LocalBackend, LocalConfig};
use serde_json::json;
use std::sync::Arc;

mod api_support;
use api_support::{post, spawn};

#[tokio::test]
async fn confidence_is_stored_revised_alone_and_refused_out_of_range_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::open(dir.path().join("m.sqlite3"), LocalConfig::default()).unwrap();
    let base = spawn(Arc::new(backend)).await;
    let caller = json!({"user": "dana"});
    let (status, saved) = post(
        &base,
        "/v1/remember",
        json!({"caller": caller, "text": "Works on billing", "confidence": 0.9}),
    )
    .await;
    assert_eq!(status, 200, "{saved}");
    let id = saved["citation"].as_str().unwrap().to_owned();

    let (_, listed) = post(&base, "/v1/facts/list", json!({"caller": caller})).await;
    let fact = &listed["facts"][0];
    assert_eq!(fact["confidence"], 0.9);
    assert_eq!(fact["origin"], "explicit");
    assert_eq!(fact["changed_by"], "user");

    let (status, revised) = post(
        &base,
        "/v1/facts/revise",
        json!({"caller": caller, "id": id, "confidence": 0.3}),
    )
    .await;
    assert_eq!(status, 200, "{revised}");
    assert_eq!(
        (revised["version"].as_u64(), revised["confidence"].as_f64()),
        (Some(2), Some(0.3))
    );
    let (_, got) = post(&base, "/v1/facts/get", json!({"caller": caller, "id": id})).await;
    assert_eq!(got["confidence"], 0.3);

    for (path, body) in [
        (
            "/v1/remember",
            json!({"caller": caller, "text": "x", "confidence": 1.5}),
        ),
        (
            "/v1/facts/revise",
            json!({"caller": caller, "id": id, "confidence": -0.1}),
        ),
    ] {
        let (status, error) = post(&base, path, body).await;
        assert_eq!(status, 400, "{path}: {error}");
        assert!(error.to_string().contains("confidence"), "{path}: {error}");
    }
    let (_, got) = post(&base, "/v1/facts/get", json!({"caller": caller, "id": id})).await;
    assert_eq!(
        (got["version"].as_u64(), got["confidence"].as_f64()),
        (Some(2), Some(0.3))
    );
}
