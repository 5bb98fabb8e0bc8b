//! Handoffs on `postgres` beyond the shared suite: the lifetime key and the
//! expiry, decided by the database's clock.

mod common;

use memgate_core::{Caller, HandoffContent, MemoryBackend};
use memgate_postgres::{PostgresBackend, PostgresConfig};
use serde_json::{json, Map, Value};
use std::time::Duration;

fn settings(extra: Value) -> Map<String, Value> {
    let mut config = json!({"dsn": "postgres://memgate@127.0.0.1:5432/memgate"});
    config
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    config.as_object().unwrap().clone()
}

#[test]
fn the_handoff_lifetime_key_is_validated_by_name() {
    let ctx = memgate_core::BackendContext::new(std::env::temp_dir());
    let ok = PostgresConfig::from_backend_config(
        &settings(json!({"handoff_lifetime_secs": 3600})),
        &ctx,
    )
    .unwrap();
    assert_eq!(ok.handoff_lifetime, Duration::from_secs(3600));
    let default = PostgresConfig::from_backend_config(&settings(json!({})), &ctx).unwrap();
    assert_eq!(default.handoff_lifetime, Duration::from_secs(24 * 60 * 60));
    for bad in [json!(59), json!(2_592_001), json!("1h"), json!(-5)] {
        let e = PostgresConfig::from_backend_config(
            &settings(json!({ "handoff_lifetime_secs": bad })),
            &ctx,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "backend_config.handoff_lifetime_secs must be an integer between 60 and 2592000",
            "{bad}"
        );
    }
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn an_expired_handoff_is_gone_on_postgres() {
    let mut config = common::config(&common::dsn(), &common::unique_schema("hof"));
    config.handoff_lifetime = Duration::from_millis(300);
    let b = PostgresBackend::new(config).unwrap();
    let alice = Caller::new("alice");
    let content = HandoffContent::new("short-lived", &[], &[], "next", &[]).unwrap();
    let h = b.prepare_handoff(&alice, &content).await.unwrap();
    assert!(b.get_handoff(&alice, &h.id).await.is_ok());
    tokio::time::sleep(Duration::from_millis(600)).await;
    for err in [
        b.get_handoff(&alice, &h.id).await.unwrap_err(),
        b.finalize_handoff(&alice, &h.id).await.unwrap_err(),
        b.commit_handoff(&alice, &h.id).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "not_found", "{err}");
    }
    assert!(b.export(&alice).await.unwrap().facts.is_empty());
    // The next prepare deletes expired rows: none is left behind.
    b.prepare_handoff(&alice, &content).await.unwrap();
    let client = common::connect(&common::dsn()).await;
    let left: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {}.handoffs", b.config().schema),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 1);
}
