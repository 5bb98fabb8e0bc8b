//! Handoff/Continue on the local store: prepare → inspect → correct →
//! finalize in one thread, continue in another, acknowledge, commit only on
//! request; held handoffs are bound to their user, expire, and are never
//! memory until committed.

mod common;

use common::{alice, recall_of, TestStore};
use memgate_core::{Caller, HandoffContent, MemoryBackend};
use memgate_store::{LocalBackend, MemoryStore};
use std::time::Duration;

fn backend(test: &TestStore) -> LocalBackend {
    let store = MemoryStore::open(test.path(), test.store.config().clone()).unwrap();
    LocalBackend::from_store(store)
}

fn content(objective: &str, next: &str) -> HandoffContent {
    HandoffContent::new(
        objective,
        &["schema migrated on staging".to_owned()],
        &["waiting for the zephyr review".to_owned()],
        next,
        &["ci run 4411 green".to_owned()],
    )
    .unwrap()
}

/// What the caller's memory holds: recall text and exported facts' texts.
async fn memory_of(b: &LocalBackend, caller: &Caller) -> (String, Vec<String>) {
    let recall = b
        .recall(&recall_of(caller, Some("zephyr migration")))
        .await
        .unwrap();
    let export = b.export(caller).await.unwrap();
    (
        recall.text,
        export.facts.into_iter().map(|f| f.text).collect(),
    )
}

#[tokio::test]
async fn an_expired_handoff_is_gone() {
    let test = TestStore::new();
    let b = backend(&test).with_handoff_lifetime(Duration::from_millis(50));
    let h = b
        .prepare_handoff(&alice(), &content("short-lived", "next"))
        .await
        .unwrap();
    assert!(b.get_handoff(&alice(), &h.id).await.is_ok());
    tokio::time::sleep(Duration::from_millis(120)).await;
    for err in [
        b.get_handoff(&alice(), &h.id).await.unwrap_err(),
        b.finalize_handoff(&alice(), &h.id).await.unwrap_err(),
        b.commit_handoff(&alice(), &h.id).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "not_found", "{err}");
    }
    assert!(memory_of(&b, &alice()).await.1.is_empty());
}
