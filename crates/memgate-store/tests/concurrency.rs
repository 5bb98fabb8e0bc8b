//! Concurrent writers: no lost writes and no SQLITE_BUSY surfacing, within
//! one store, across two stores on one file (two processes' worth of
//! connections), and through the async backend.

mod common;

use common::{capture, TestStore};
use memgate_core::{
    Caller, MemoryBackend, Message, RecallRequest, RememberOutcome, RememberRequest,
};
use memgate_store::{LocalBackend, LocalConfig, MemoryStore};
use std::sync::Arc;

const WRITERS: usize = 8;
const EACH: usize = 40;

/// Remembers and captures from one writer; returns the stored citations.
fn write_load(store: &MemoryStore, writer: usize) -> Vec<String> {
    let caller = Caller::new("shared").with_agent("agent");
    let mut stored = Vec::new();
    for i in 0..EACH {
        let outcome = store
            .remember(
                &caller,
                &RememberRequest::new("fact", &format!("writer {writer} fact {i}")).unwrap(),
            )
            .unwrap();
        match outcome {
            RememberOutcome::Stored { citation } => stored.push(citation.0),
            other => panic!("{other:?}"),
        }
        let msgs = vec![
            Message::human(format!("writer {writer} says {i}")),
            Message::ai(format!("writer {writer} hears {i}")),
        ];
        let r = store
            .capture(&capture(&caller, &format!("thread-{writer}"), msgs))
            .unwrap();
        assert_eq!(r.stored, 2);
        // Readers run alongside the writers.
        store
            .recall(&RecallRequest {
                caller: caller.clone(),
                query: Some(format!("writer {writer}")),
            })
            .unwrap();
    }
    stored
}

fn assert_everything_stored(store: &MemoryStore, citations: &[String]) {
    let caller = Caller::new("shared").with_agent("agent");
    let facts = store.list_facts(&caller, false).unwrap();
    assert_eq!(facts.len(), WRITERS * EACH);
    let mut ids: Vec<_> = citations.to_vec();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), WRITERS * EACH, "citations are unique");
    assert_eq!(
        store.export(&caller).unwrap().turns.len(),
        WRITERS * EACH * 2
    );
}

#[test]
fn threads_sharing_one_store_lose_nothing() {
    let t = TestStore::new();
    let store = Arc::new(t.store);
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || write_load(&store, w))
        })
        .collect();
    let citations: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_everything_stored(&store, &citations);
}

#[test]
fn two_stores_on_one_file_wait_for_each_other_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.sqlite3");
    let first = Arc::new(MemoryStore::open(&path, LocalConfig::default()).unwrap());
    let second = Arc::new(MemoryStore::open(&path, LocalConfig::default()).unwrap());
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(if w % 2 == 0 { &first } else { &second });
            std::thread::spawn(move || write_load(&store, w))
        })
        .collect();
    let citations: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_everything_stored(&first, &citations);
    assert_everything_stored(&second, &citations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_tasks_writing_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::open(dir.path().join("m.sqlite3"), LocalConfig::default()).unwrap();
    let caller = Caller::new("shared").with_agent("agent");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let backend = backend.clone();
        let caller = caller.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..EACH {
                let r = RememberRequest::new("fact", &format!("task {w} fact {i}")).unwrap();
                match backend.remember(&caller, &r).await.unwrap() {
                    RememberOutcome::Stored { citation } => ids.push(citation.0),
                    other => panic!("{other:?}"),
                }
                let msgs = vec![Message::human(format!("task {w} line {i}"))];
                backend
                    .capture(&capture(&caller, &format!("t{w}"), msgs))
                    .await
                    .unwrap();
            }
            ids
        }));
    }
    let mut citations = Vec::new();
    for t in tasks {
        citations.extend(t.await.unwrap());
    }
    assert_eq!(citations.len(), WRITERS * EACH);
    assert_eq!(
        backend.list_facts(&caller, false).await.unwrap().len(),
        WRITERS * EACH
    );
    assert_eq!(
        backend.export(&caller).await.unwrap().turns.len(),
        WRITERS * EACH
    );
}
