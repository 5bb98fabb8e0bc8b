//! The RFC's first workflow at the host boundary, on the real local store:
//! an explicit save in one thread, recall in a new thread's first turn, as
//! a hidden user-role message. (The same scenario through a model server
//! and `memgate chat` lives with the chat command.)

mod common;

use common::{clock, local_backend};
use memgate_core::message::RoleKind;
use memgate_core::{Caller, Message};
use memgate_host::{
    CaptureOutcome, HostSettings, InjectionOutcome, MemoryHost, MemoryStatus, SaveReport,
    ToolContext,
};
use serde_json::json;
use std::sync::Arc;

const CONVENTION: &str = "money amounts are integer cents; use pytest for backend tests";
/// What a model saves for "Remember this for the order service: …": one
/// self-contained statement, as the tool description asks.
const SAVED_STATEMENT: &str =
    "Order service conventions: money amounts are integer cents; use pytest for backend tests.";

#[tokio::test]
async fn a_saved_convention_is_recalled_in_a_new_thread_as_hidden_user_memory() {
    let (local, _dir) = local_backend();
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(Arc::new(local)),
        HostSettings::default(),
    )
    .with_clock(clock());

    // Thread A: the user asks to remember; the model calls the tool.
    let thread_a = Caller::new("alice").with_thread("thread-a");
    let mut a = vec![Message::human(format!(
        "Remember this for the order service: {CONVENTION}."
    ))
    .with_id("a1")];
    let first = host.injector().prepare_turn(&thread_a, &mut a).await;
    assert_eq!(first.memory(), Some(MemoryStatus::Nothing), "{first:?}");
    let result = host
        .tools()
        .dispatch(
            &ToolContext::new(thread_a.clone()),
            "memgate_remember",
            &json!({"text": SAVED_STATEMENT, "kind": "preference"}),
        )
        .await
        .expect("remember is offered");
    let SaveReport::Stored(citation) = SaveReport::from_result(&result) else {
        panic!("{result:?}")
    };
    // The reply does not repeat the citation: only the recalled entry can carry it.
    a.push(Message::ai("Saved."));
    let captured = host.capture().after_turn(&thread_a, &a).wait().await;
    assert!(
        matches!(captured, CaptureOutcome::Captured(_)),
        "{captured:?}"
    );

    // Thread B: a new conversation; its first turn recalls the convention.
    let thread_b = Caller::new("alice").with_thread("thread-b");
    let mut b = vec![
        Message::system("You are a coding agent."),
        Message::human("Add a refund calculation to the order service, following its conventions.")
            .with_id("b1"),
    ];
    let outcome = host.injector().prepare_turn(&thread_b, &mut b).await;
    assert!(
        matches!(
            outcome,
            InjectionOutcome::Injected {
                memory: MemoryStatus::Recalled { .. },
                ..
            }
        ),
        "{outcome:?}"
    );
    let memory = b
        .iter()
        .find(|m| m.id.as_deref() == Some("b1__memory"))
        .expect("a memory message");
    assert_eq!(memory.role.kind(), RoleKind::Human);
    assert!(memory.is_hidden());
    assert!(memory.text().starts_with("<memory>\n"));
    assert!(memory.text().contains(CONVENTION), "{}", memory.text());
    assert!(
        memory.text().contains(citation.as_str()),
        "the saved entry itself is recalled, with its citation: {}",
        memory.text()
    );
    for m in b.iter().filter(|m| m.role.kind() == RoleKind::System) {
        assert!(!m.text().contains("integer cents"), "{m:?}");
    }

    // Another user's new thread sees none of it.
    let mut other = vec![Message::human("Add a refund calculation.").with_id("c1")];
    let outcome = host
        .injector()
        .prepare_turn(&Caller::new("bob").with_thread("thread-c"), &mut other)
        .await;
    assert_eq!(outcome.memory(), Some(MemoryStatus::Nothing), "{outcome:?}");
}

#[tokio::test]
async fn an_explicit_memory_is_recalled_even_without_shared_words() {
    // Only the explicit save, no captured turn: the refund request shares
    // no word with the convention, so only the store's rule that a user's
    // explicit memories are always recalled (matched ones first) finds it.
    let (local, _dir) = local_backend();
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(Arc::new(local)),
        HostSettings::default(),
    )
    .with_clock(clock());
    let ctx = ToolContext::new(Caller::new("alice").with_thread("thread-a"));
    let result = host
        .tools()
        .dispatch(&ctx, "remember", &json!({"text": CONVENTION}))
        .await
        .unwrap();
    assert!(matches!(
        SaveReport::from_result(&result),
        SaveReport::Stored(_)
    ));

    let mut b = vec![Message::human(
        "Add a refund calculation to the order service, following its conventions.",
    )
    .with_id("b1")];
    let outcome = host
        .injector()
        .prepare_turn(&Caller::new("alice").with_thread("thread-b"), &mut b)
        .await;
    assert!(
        matches!(outcome.memory(), Some(MemoryStatus::Recalled { .. })),
        "the local store did not recall the user's explicit memory for the refund query: {outcome:?}"
    );
    assert!(b[1].text().contains(CONVENTION));
}
