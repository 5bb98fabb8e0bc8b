//! The memory browser's long lists on the local store: facts newest first
//! and both facts and threads a page of 100 at a time.

use memgate_assembly::AssembledBackend;
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, RememberRequest};
use memgate_server::ServerState;
use memgate_store::{LocalBackend, LocalConfig};
use std::sync::Arc;
use ui_common::{browse_alice, get, spawn};

mod ui_common;

#[tokio::test]
async fn long_lists_come_a_page_at_a_time_newest_facts_first() {
    let dir = tempfile::tempdir().unwrap();
    let local =
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap();
    let alice = Caller::new("alice").with_agent("helper");
    for i in 0..150 {
        let fact = RememberRequest::new("fact", &format!("numbered note {i:03}")).unwrap();
        local.remember(&alice, &fact).await.unwrap();
    }
    for t in 0..120 {
        local
            .capture(&CaptureRequest {
                caller: alice.clone().with_thread(format!("thread-{t:03}")),
                messages: vec![Message::human(format!("turn of thread {t}"))],
                kind: CaptureKind::AfterTurn,
                trace_id: None,
            })
            .await
            .unwrap();
    }
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let (cookie, _) = browse_alice(&base).await;

    let first = get(&base, "/ui/facts", Some(&cookie)).await.body;
    assert_eq!(first.matches("<article class=\"fact\"").count(), 100);
    assert!(first.contains("page 1 of 2"));
    let newest = first.find("numbered note 149").unwrap();
    assert!(newest < first.find("numbered note 148").unwrap());
    assert!(!first.contains("numbered note 049"));
    let second = get(&base, "/ui/facts?page=1", Some(&cookie)).await.body;
    assert_eq!(second.matches("<article class=\"fact\"").count(), 50);
    assert!(second.contains("numbered note 000") && second.contains("page 2 of 2"));

    let threads = get(&base, "/ui/threads", Some(&cookie)).await.body;
    assert!(threads.contains("120 captured threads") && threads.contains("page 1 of 2"));
    assert!(threads.contains("thread-099") && !threads.contains("thread-100"));
    let rest = get(&base, "/ui/threads?page=1", Some(&cookie)).await.body;
    assert!(
        rest.contains("href=\"/ui/threads/119\""),
        "handles index the whole list"
    );
    assert!(!rest.contains("thread-099"));
    let last = get(&base, "/ui/threads/119", Some(&cookie)).await.body;
    assert!(last.contains("turn of thread 119"));
}
