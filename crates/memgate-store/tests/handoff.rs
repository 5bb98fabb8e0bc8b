//! Handoff/Continue on the local store: prepare → inspect → correct →
//! finalize in one thread, continue in another, acknowledge, commit only on
//! request; held handoffs are bound to their user, expire, and are never
//! memory until committed.

mod common;

use common::{alice, recall_of, TestStore};
use memgate_core::{
    Acknowledgement, Caller, CommitOutcome, HandoffContent, HandoffStage, MemoryBackend,
};
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
async fn a_handoff_goes_from_draft_to_a_committed_milestone_only_on_request() {
    let test = TestStore::new();
    let b = backend(&test);
    let sender = alice().with_thread("t-1");

    let draft = b
        .prepare_handoff(
            &sender,
            &content("finish the zephyr migration", "run it on prod"),
        )
        .await
        .unwrap();
    assert_eq!((draft.stage, draft.revision), (HandoffStage::Draft, 1));
    assert_eq!(draft.from_thread.as_deref(), Some("t-1"));

    let inspected = b.get_handoff(&sender, &draft.id).await.unwrap();
    assert_eq!(inspected, draft);
    let corrected = b
        .correct_handoff(
            &sender,
            &draft.id,
            &content("finish the zephyr migration", "run it on prod after review"),
        )
        .await
        .unwrap();
    assert_eq!(corrected.revision, 2);
    assert_eq!(corrected.content.next_action, "run it on prod after review");
    let prepared = b.finalize_handoff(&sender, &draft.id).await.unwrap();
    assert_eq!(prepared.stage, HandoffStage::Prepared);
    let err = b
        .correct_handoff(&sender, &draft.id, &content("x", "y"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");

    // A new thread of the same user continues from the prepared handoff.
    let receiver = alice().with_thread("t-2");
    let cont = b.continue_handoff(&receiver, &draft.id).await.unwrap();
    assert!(
        cont.block.contains("trust=\"untrusted_history\""),
        "{}",
        cont.block
    );
    assert!(cont
        .block
        .contains("Next action: run it on prod after review"));
    assert!(cont.block.contains("- waiting for the zephyr review"));

    // Prepared and continued, it is still not memory.
    let (recalled, facts) = memory_of(&b, &receiver).await;
    assert!(!recalled.contains("zephyr"), "{recalled}");
    assert!(facts.is_empty(), "{facts:?}");

    let acked = b
        .acknowledge_handoff(&receiver, &draft.id, &Acknowledgement::Accepted)
        .await
        .unwrap();
    assert_eq!(acked.stage, HandoffStage::Acknowledged);
    let (_, facts) = memory_of(&b, &receiver).await;
    assert!(facts.is_empty(), "acknowledged is not committed: {facts:?}");

    let outcome = b.commit_handoff(&receiver, &draft.id).await.unwrap();
    let CommitOutcome::Stored { citation } = &outcome else {
        panic!("{outcome:?}")
    };
    let (recalled, facts) = memory_of(&b, &receiver).await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(facts[0].starts_with("Handoff milestone: finish the zephyr migration"));
    assert!(recalled.contains("zephyr"), "{recalled}");
    // Committing again stores nothing new and names the same milestone.
    assert_eq!(
        b.commit_handoff(&receiver, &draft.id).await.unwrap(),
        outcome
    );
    assert_eq!(memory_of(&b, &receiver).await.1.len(), 1);
    let done = b.get_handoff(&receiver, &draft.id).await.unwrap();
    assert_eq!(done.stage, HandoffStage::Committed);
    assert_eq!(done.milestone.as_ref(), Some(citation));
}

#[tokio::test]
async fn another_user_cannot_read_continue_or_commit_a_handoff() {
    let test = TestStore::new();
    let b = backend(&test);
    let h = b
        .prepare_handoff(&alice(), &content("alice's task", "next"))
        .await
        .unwrap();
    b.finalize_handoff(&alice(), &h.id).await.unwrap();
    let bob = Caller::new("bob").with_thread("t-9");
    for err in [
        b.get_handoff(&bob, &h.id).await.unwrap_err(),
        b.continue_handoff(&bob, &h.id).await.unwrap_err(),
        b.acknowledge_handoff(&bob, &h.id, &Acknowledgement::Accepted)
            .await
            .unwrap_err(),
        b.commit_handoff(&bob, &h.id).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "not_found", "{err}");
    }
    // Bob's attempts changed nothing of alice's handoff and stored nothing.
    assert_eq!(
        b.get_handoff(&alice(), &h.id).await.unwrap().stage,
        HandoffStage::Prepared
    );
    assert!(memory_of(&b, &bob).await.1.is_empty());
    assert!(memory_of(&b, &alice()).await.1.is_empty());
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

#[tokio::test]
async fn a_draft_cannot_be_continued_or_committed_and_secrets_are_not_held() {
    let test = TestStore::new();
    let b = backend(&test);
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
    let h = b
        .prepare_handoff(
            &alice(),
            &content(&format!("rotate the key {key} on prod"), "next"),
        )
        .await
        .unwrap();
    assert!(
        !h.content.objective.contains(key),
        "{}",
        h.content.objective
    );
    let err = b.continue_handoff(&alice(), &h.id).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("conflict: handoff {} is draft; only a prepared or acknowledged handoff can be continued", h.id)
    );
    assert_eq!(
        b.commit_handoff(&alice(), &h.id).await.unwrap_err().code(),
        "conflict"
    );
    assert!(memory_of(&b, &alice()).await.1.is_empty());
}
