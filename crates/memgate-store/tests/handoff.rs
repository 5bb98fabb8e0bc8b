//! Handoff expiry on the local store, with a lifetime too short for the
//! shared flow (`memgate_conformance::handoff` runs the flow itself).

mod common;

use common::{alice, TestStore};
use memgate_conformance::handoff::{content, memory_of};
use memgate_core::MemoryBackend;
use memgate_store::{LocalBackend, MemoryStore};
use std::time::Duration;

fn backend(test: &TestStore) -> LocalBackend {
    let store = MemoryStore::open(test.path(), test.store.config().clone()).unwrap();
    LocalBackend::from_store(store)
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
