//! Handoff/Continue: prepare → inspect → correct → finalize in one thread,
//! continue in another, acknowledge, commit only on request; a handoff is
//! bound to its user and is never memory until committed. Expiry needs a
//! lifetime the suite cannot set, so each store tests it on its own.

use crate::behaviour::{alice, recall_of};
use crate::Subject;
use memgate_core::{
    Acknowledgement, Caller, CommitOutcome, ForgetTarget, HandoffContent, HandoffStage,
    MemoryBackend,
};

/// A handoff's content naming `objective` and `next` (the rest fixed).
pub fn content(objective: &str, next: &str) -> HandoffContent {
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
pub async fn memory_of(b: &dyn MemoryBackend, caller: &Caller) -> (String, Vec<String>) {
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

pub async fn a_handoff_goes_from_draft_to_a_committed_milestone_only_on_request(s: &impl Subject) {
    let storage = s.fresh().await;
    let b = &*storage.backend;
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
    let (recalled, facts) = memory_of(b, &receiver).await;
    assert!(!recalled.contains("zephyr"), "{recalled}");
    assert!(facts.is_empty(), "{facts:?}");

    let acked = b
        .acknowledge_handoff(&receiver, &draft.id, &Acknowledgement::Accepted)
        .await
        .unwrap();
    assert_eq!(acked.stage, HandoffStage::Acknowledged);
    let (_, facts) = memory_of(b, &receiver).await;
    assert!(facts.is_empty(), "acknowledged is not committed: {facts:?}");

    let outcome = b.commit_handoff(&receiver, &draft.id).await.unwrap();
    let CommitOutcome::Stored { citation } = &outcome else {
        panic!("{outcome:?}")
    };
    let (recalled, facts) = memory_of(b, &receiver).await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(facts[0].starts_with("Handoff milestone: finish the zephyr migration"));
    assert!(recalled.contains("zephyr"), "{recalled}");
    // Committing again stores nothing new and names the same milestone.
    assert_eq!(
        b.commit_handoff(&receiver, &draft.id).await.unwrap(),
        outcome
    );
    assert_eq!(memory_of(b, &receiver).await.1.len(), 1);
    let done = b.get_handoff(&receiver, &draft.id).await.unwrap();
    assert_eq!(done.stage, HandoffStage::Committed);
    assert_eq!(done.milestone.as_ref(), Some(citation));
}

pub async fn another_user_cannot_read_continue_or_commit_a_handoff(s: &impl Subject) {
    let storage = s.fresh().await;
    let b = &*storage.backend;
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
    assert!(memory_of(b, &bob).await.1.is_empty());
    assert!(memory_of(b, &alice()).await.1.is_empty());
}

pub async fn a_draft_cannot_be_continued_or_committed_and_secrets_are_not_held(s: &impl Subject) {
    let storage = s.fresh().await;
    let b = &*storage.backend;
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
    assert!(memory_of(b, &alice()).await.1.is_empty());
}

/// A handoff prepared through one handle is continued and committed through
/// another (a second replica, or a restarted process where it is kept).
pub async fn a_handoff_is_continued_through_another_handle(s: &impl Subject) {
    let storage = s.fresh().await;
    let b = &*storage.backend;
    let h = b
        .prepare_handoff(
            &alice().with_thread("t-1"),
            &content("zephyr cutover", "flip dns"),
        )
        .await
        .unwrap();
    b.finalize_handoff(&alice(), &h.id).await.unwrap();
    let other = storage.another_handle().await;
    let receiver = alice().with_thread("t-2");
    let cont = other.continue_handoff(&receiver, &h.id).await.unwrap();
    assert!(
        cont.block.contains("Next action: flip dns"),
        "{}",
        cont.block
    );
    other
        .acknowledge_handoff(&receiver, &h.id, &Acknowledgement::Accepted)
        .await
        .unwrap();
    let outcome = other.commit_handoff(&receiver, &h.id).await.unwrap();
    assert!(
        matches!(outcome, CommitOutcome::Stored { .. }),
        "{outcome:?}"
    );
    // The first handle sees the commit: it names the same milestone.
    assert_eq!(b.commit_handoff(&receiver, &h.id).await.unwrap(), outcome);
    assert_eq!(memory_of(b, &receiver).await.1.len(), 1);
}

/// Forgetting a user drops the handoffs they hold: a handoff carries their
/// task. Another user's stays.
pub async fn forgetting_a_user_drops_their_handoffs(s: &impl Subject) {
    let storage = s.fresh().await;
    let b = &*storage.backend;
    let bob = Caller::new("bob");
    let mine = b
        .prepare_handoff(&alice(), &content("alice's cutover", "flip dns"))
        .await
        .unwrap();
    let his = b
        .prepare_handoff(&bob, &content("bob's cutover", "flip dns"))
        .await
        .unwrap();
    b.forget(&alice(), &ForgetTarget::User).await.unwrap();
    let err = b.get_handoff(&alice(), &mine.id).await.unwrap_err();
    assert_eq!(err.code(), "not_found", "{err}");
    assert_eq!(b.get_handoff(&bob, &his.id).await.unwrap(), his);
}
