//! The memory browser on the real remote and shared backends (testkit's
//! servers): PostgreSQL lists, shows and erases like `local`; OpenViking
//! shows its recall and health and a "not supported" panel with status 501
//! where it has no operation, never an empty look-alike; PowerContext 1.4.x
//! likewise, read-only.

use memgate_assembly::AssembledBackend;
use memgate_core::{BackendContext, MemoryBackend};
use memgate_openviking::OpenVikingBackend;
use memgate_postgres::{PostgresBackend, PostgresConfig};
use memgate_server::ServerState;
use memgate_testsupport::http::api;
use memgate_testsupport::real;
use serde_json::json;
use std::sync::Arc;
use ui_common::{browse_alice, get, post, spawn};

mod ui_common;

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
        !health.body.contains("id=\"warm\""),
        "viewing runs no check"
    );
    let health = post(&base, "/ui/health", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert_eq!(health.status, 200);
    assert!(
        health.body.contains("openviking") && health.body.contains("start-up check: ready"),
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

/// PowerContext 1.4.x (recall and remember only): the block for a typed
/// query shows what was remembered, the start-up check runs on request, and
/// every page it has no operation for is a 501 "not supported" panel.
#[tokio::test]
#[ignore = "real server: PowerContext 1.4.x (testkit/up)"]
async fn powercontext_shows_recall_and_health_and_501_panels_for_the_rest() {
    use memgate_powercontext::settings::{
        ENV_BASE_URL, ENV_OWNER_USER_ID, ENV_SCOPE_ID, ENV_TOKEN,
    };
    use memgate_powercontext::PowerContextBackend;
    let server = real::powercontext("MEMGATE_TEST_PC14");
    let scope = server
        .scope_id
        .clone()
        .expect("testkit/up creates a Scope on PowerContext 1.4.x");
    let pairs = [
        (ENV_BASE_URL, server.url.clone()),
        (ENV_OWNER_USER_ID, "alice".to_owned()),
        (ENV_SCOPE_ID, scope),
        (ENV_TOKEN, server.token.clone()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let context = BackendContext::new(dir.path()).with_env(Arc::new(move |name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }));
    let backend: Arc<dyn MemoryBackend> = Arc::new(
        PowerContextBackend::from_backend_config(&serde_json::Map::new(), &context).unwrap(),
    );
    let marker = format!("tern{}", std::process::id());
    let text = format!("alice keeps the {marker} ledger in the blue binder");
    let saved = backend
        .remember(
            &memgate_core::Caller::new("alice"),
            &memgate_core::RememberRequest::new("fact", &text).unwrap(),
        )
        .await
        .unwrap();
    assert!(
        matches!(
            saved,
            memgate_core::RememberOutcome::Stored { .. }
                | memgate_core::RememberOutcome::AlreadyPresent { .. }
        ),
        "{saved:?}"
    );
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let first = get(&base, "/ui", None).await;
    let (cookie, csrf) = (first.cookie(), first.csrf());
    assert!(
        first
            .body
            .contains("Listing who this store holds memory for</b>: not supported by the <b>powercontext</b> backend"),
        "{}",
        first.body
    );
    let chosen = post(
        &base,
        "/ui/principal",
        Some(&cookie),
        &[("csrf", &csrf), ("user", "alice"), ("agent", "")],
        &[],
    )
    .await;
    assert_eq!(chosen.status, 303, "{}", chosen.body);

    let block = post(
        &base,
        "/ui/block",
        Some(&cookie),
        &[("csrf", &csrf), ("query", &format!("{marker} ledger"))],
        &[],
    )
    .await;
    assert_eq!(block.status, 200, "{}", block.body);
    assert!(block.body.contains(&marker), "{}", block.body);

    let health = post(&base, "/ui/health", Some(&cookie), &[("csrf", &csrf)], &[]).await;
    assert!(
        health.body.contains("powercontext") && health.body.contains("start-up check: ready"),
        "{}",
        health.body
    );
    for path in ["/ui/facts", "/ui/threads", "/ui/facts/mem_1"] {
        let page = get(&base, path, Some(&cookie)).await;
        assert_eq!(page.status, 501, "{path}: {}", page.body);
        assert!(
            page.body
                .contains("not supported by the <b>powercontext</b> backend"),
            "{path}: {}",
            page.body
        );
    }
    let search = post(
        &base,
        "/ui/search",
        Some(&cookie),
        &[("csrf", &csrf), ("query", &marker)],
        &[],
    )
    .await;
    assert_eq!(search.status, 501, "{}", search.body);
}
