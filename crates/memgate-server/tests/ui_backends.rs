//! The memory browser on the real remote and shared backends (testkit's
//! servers): PostgreSQL lists, shows and erases like `local`; OpenViking
//! shows its recall and health and a "not supported" panel with status 501
//! where it has no operation, never an empty look-alike.

use memgate_assembly::AssembledBackend;
use memgate_core::{BackendContext, MemoryBackend};
use memgate_openviking::OpenVikingBackend;
use memgate_postgres::{PostgresBackend, PostgresConfig};
use memgate_server::ServerState;
use memgate_testsupport::real;
use serde_json::json;
use std::sync::Arc;
use ui_common::{browse_alice, get, post, spawn};

mod ui_common;

async fn api(base: &str, path: &str, body: serde_json::Value) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn postgres_shows_facts_and_threads_and_erases_a_thread() {
    let config = PostgresConfig::for_dsn(&real::postgres_dsn())
        .unwrap()
        .with_schema(&real::unique_schema("ui"))
        .unwrap();
    let backend: Arc<dyn MemoryBackend> = Arc::new(PostgresBackend::new(config).unwrap());
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let alice = json!({"user": "alice", "agent": "helper"});
    api(
        &base,
        "/v1/remember",
        json!({"caller": alice, "text": "keeps bees on the roof"}),
    )
    .await;
    api(
        &base,
        "/v1/capture",
        json!({
            "caller": {"user": "alice", "agent": "helper", "thread": "pg-thread-1"},
            "messages": [{"type": "human", "content": "the hive count is 4, koala3307"}],
        }),
    )
    .await;

    let (cookie, csrf) = browse_alice(&base).await;
    let overview = get(&base, "/ui", Some(&cookie)).await;
    assert!(
        overview.body.contains("1 (user, agent) scopes"),
        "{}",
        overview.body
    );
    let facts = get(&base, "/ui/facts", Some(&cookie)).await;
    assert_eq!(facts.status, 200);
    assert!(
        facts.body.contains("keeps bees on the roof"),
        "{}",
        facts.body
    );
    let block = get(&base, "/ui/block", Some(&cookie)).await;
    assert!(block.body.contains("keeps bees"), "{}", block.body);
    let threads = get(&base, "/ui/threads", Some(&cookie)).await;
    assert!(threads.body.contains("pg-thread-1"), "{}", threads.body);
    let thread = get(&base, "/ui/threads/0", Some(&cookie)).await;
    assert!(thread.body.contains("koala3307"), "{}", thread.body);
    let confirm = get(&base, "/ui/threads/0/forget", Some(&cookie)).await;
    assert!(
        confirm.body.contains("pg-thread-1"),
        "the confirmation names it"
    );
    let erased = post(
        &base,
        "/ui/threads/0/forget",
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(erased.status, 200, "{}", erased.body);
    assert!(erased.body.contains("1 captured turns"), "{}", erased.body);
    let threads = get(&base, "/ui/threads", Some(&cookie)).await;
    assert!(!threads.body.contains("pg-thread-1"), "{}", threads.body);
    let export = api(&base, "/v1/export", json!({"caller": alice})).await;
    assert_eq!(export["turns"], json!([]));
}

#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn openviking_shows_recall_and_health_and_501_panels_for_the_rest() {
    let server = real::openviking();
    let [key] = real::env_vars(["MEMGATE_TEST_OPENVIKING_USER_KEY"]);
    let [owner] = real::env_vars(["MEMGATE_TEST_OPENVIKING_USER"]);
    assert_eq!(owner, "alice", "browse_alice browses testkit's first user");
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "base_url": server.url,
        "owner_user_id": owner,
        "startup_policy": "fail_fast",
        "timeout_seconds": 30,
        "failure_policy": {"read": "raise", "write": "raise"},
    });
    let context = BackendContext::new(dir.path()).with_env(Arc::new(move |name| {
        (name == "OPENVIKING_API_KEY").then(|| key.clone())
    }));
    let backend: Arc<dyn MemoryBackend> = Arc::new(
        OpenVikingBackend::from_backend_config(config.as_object().unwrap(), &context).unwrap(),
    );
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let (cookie, csrf) = browse_alice(&base).await;

    let overview = get(&base, "/ui", Some(&cookie)).await;
    assert!(
        overview
            .body
            .contains("Listing who this store holds memory for</b>: not supported"),
        "{}",
        overview.body
    );
    let health = get(&base, "/ui/health", Some(&cookie)).await;
    assert_eq!(health.status, 200);
    assert!(
        health.body.contains("openviking") && health.body.contains("ready"),
        "{}",
        health.body
    );
    let block = get(&base, "/ui/block", Some(&cookie)).await;
    assert_eq!(block.status, 200, "{}", block.body);
    assert!(block.body.contains("The no-query block"), "{}", block.body);
    for path in ["/ui/facts", "/ui/threads"] {
        let page = get(&base, path, Some(&cookie)).await;
        assert_eq!(page.status, 501, "{path}: {}", page.body);
        assert!(
            page.body
                .contains("not supported by the <b>openviking</b> backend"),
            "{path}: {}",
            page.body
        );
    }
    let erase = post(
        &base,
        "/ui/forget/user",
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(erase.status, 501, "{}", erase.body);
    assert!(erase.body.contains("not supported"), "{}", erase.body);
}
