//! `/metrics` carries the backend's own figures after the request metrics:
//! an OpenViking backend with its outbox on shows the queue; with it off,
//! nothing. The OpenViking "server" here is a loopback port nothing listens
//! on (a server that is down), so every capture is queued.

use memgate_assembly::AssembledBackend;
use memgate_core::{BackendContext, MemoryBackend};
use memgate_openviking::OpenVikingBackend;
use memgate_server::{router, ServerState};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const USER_KEY: &str = "ov-user-key-5d1e-secret";

async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

fn openviking(url: &str, storage: &Path, outbox: bool) -> Arc<OpenVikingBackend> {
    let config = json!({
        "base_url": url,
        "storage_path": storage.to_str().unwrap(),
        "owner_user_id": "alice",
        "startup_policy": "warn",
        "timeout_seconds": 1,
        "failure_policy": {"write": "raise"},
        "outbox": {"enabled": outbox, "max_entries": 1},
    });
    let context = BackendContext::new(storage).with_env(Arc::new(|name| {
        (name == "OPENVIKING_API_KEY").then(|| USER_KEY.to_owned())
    }));
    Arc::new(OpenVikingBackend::from_backend_config(config.as_object().unwrap(), &context).unwrap())
}

async fn serve(backend: Arc<OpenVikingBackend>) -> String {
    let state = ServerState::new(AssembledBackend::with_defaults(backend));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    format!("http://{addr}")
}

async fn capture(base: &str, thread: &str) -> u16 {
    let body = json!({
        "caller": {"user": "alice", "agent": "research", "thread": thread},
        "messages": [
            {"type": "human", "content": "private-diary-line", "id": "h1"},
            {"type": "ai", "content": "noted", "id": "a1"}
        ]
    });
    reqwest::Client::new()
        .post(format!("{base}/v1/capture"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn metrics(base: &str) -> String {
    reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_show_the_outbox_figures_when_it_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let backend = openviking(&dead_url().await, dir.path(), true);
    let base = serve(backend.clone()).await;
    assert_eq!(capture(&base, "t1").await, 200, "queued and acknowledged");
    // The outbox holds one entry (max_entries 1): the next is refused.
    assert_ne!(capture(&base, "t2").await, 200, "a full outbox refuses");
    let text = metrics(&base).await;
    let requests = text
        .find("memgate_requests_total")
        .expect("request metrics");
    let depth = text
        .find("memgate_outbox_depth 1\n")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        requests < depth,
        "figures follow the request metrics: {text}"
    );
    for line in [
        "# TYPE memgate_outbox_depth gauge\n",
        "memgate_outbox_oldest_age_seconds ",
        "memgate_outbox_deliveries_total 0\n",
        "memgate_outbox_retries_total ",
        "memgate_outbox_dropped_total 1\n",
    ] {
        assert!(text.contains(line), "{line:?} missing in {text}");
    }
    for secret in [USER_KEY, "private-diary-line", "t1", "alice"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
    // The same figures `doctor` prints, straight from the backend.
    let names: Vec<String> = backend.figures().into_iter().map(|f| f.name).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    backend.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn metrics_show_no_outbox_figures_when_it_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let backend = openviking(&dead_url().await, dir.path(), false);
    let base = serve(backend.clone()).await;
    capture(&base, "t1").await;
    let text = metrics(&base).await;
    assert!(text.contains("memgate_requests_total"), "{text}");
    assert!(!text.contains("memgate_outbox"), "{text}");
    assert!(backend.figures().is_empty());
    backend.shutdown(Duration::from_secs(2)).await;
}
