//! The memory browser's long lists on the local store: facts newest first
//! and both facts and threads a page of 100 at a time.

use memgate_assembly::AssembledBackend;
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, RememberRequest};
use memgate_server::ServerState;
use memgate_store::{LocalBackend, LocalConfig};
use std::sync::Arc;
use ui_common::{browse_alice, get, spawn, store_with_a_distilled_fact};

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

/// A distilled fact's cited turns are one click from the fact: the sources
/// page shows them and links each to its place in its thread, on the
/// right page of a long thread. The store distils for real; only the
/// model's answer is given here, as the operations it would propose.
#[tokio::test]
async fn a_distilled_fact_opens_the_turns_it_rests_on() {
    let dir = tempfile::tempdir().unwrap();
    let (local, cited) = store_with_a_distilled_fact(
        dir.path(),
        "long-thread",
        "long thread turn",
        150,
        &[3, 140],
        "alice is planning a long trip",
    )
    .await;
    let (early, late) = (&cited[0], &cited[1]);
    let alice = Caller::new("alice").with_agent("helper");
    let fact = local.list_facts(&alice, false).await.unwrap().remove(0);
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let (cookie, _) = browse_alice(&base).await;

    let page = get(&base, &format!("/ui/facts/{}", fact.id), Some(&cookie)).await;
    let sources_link = format!("href=\"/ui/facts/{}/sources\"", fact.id);
    assert!(page.body.contains(&sources_link), "{}", page.body);
    let sources = get(
        &base,
        &format!("/ui/facts/{}/sources", fact.id),
        Some(&cookie),
    )
    .await;
    assert_eq!(sources.status, 200, "{}", sources.body);
    assert!(sources.body.contains("long thread turn 003"));
    assert!(sources.body.contains("long thread turn 140"));
    assert!(
        !sources.body.contains("long thread turn 004"),
        "only the cited turns"
    );
    assert!(sources.body.contains(&format!("?page=0#{early}\"")));
    let on_page_two = format!("/ui/threads/0?page=1#{late}");
    assert!(sources.body.contains(&on_page_two), "{}", sources.body);
    let thread = get(&base, "/ui/threads/0?page=1", Some(&cookie)).await.body;
    assert!(thread.contains(&format!("id=\"{late}\"")));
    assert!(thread.contains("long thread turn 140") && thread.contains("page 2 of 2"));
}

/// A revised and retired fact lists all three versions, newest first, with
/// who made each and what it changed.
#[tokio::test]
async fn a_fact_page_lists_every_version_with_who_and_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let local =
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap();
    let alice = Caller::new("alice").with_agent("helper");
    local
        .remember(
            &alice,
            &RememberRequest::new("fact", "my editor is emacs").unwrap(),
        )
        .await
        .unwrap();
    let id = local.list_facts(&alice, false).await.unwrap().remove(0).id;
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let (cookie, csrf) = browse_alice(&base).await;
    let revised = ui_common::post(
        &base,
        &format!("/ui/facts/{id}/revise"),
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("kind", "tool"),
            ("text", "my editor is helix"),
        ],
        &[],
    )
    .await;
    assert!(revised.status < 400, "{}", revised.body);
    ui_common::post(
        &base,
        &format!("/ui/facts/{id}/retire"),
        Some(&cookie),
        &[("csrf", &csrf)],
        &[],
    )
    .await;
    let page = get(&base, &format!("/ui/facts/{id}"), Some(&cookie))
        .await
        .body;
    let versions: Vec<&str> = page
        .split("<li class=\"version\" data-version=")
        .skip(1)
        .collect();
    assert_eq!(versions.len(), 3, "{page}");
    assert!(versions[0].contains("retired") && versions[0].contains(">user<"));
    assert!(versions[1].contains("text, kind") && versions[1].contains("my editor is helix"));
    assert!(versions[2].contains("saved") && versions[2].contains("my editor is emacs"));
}
