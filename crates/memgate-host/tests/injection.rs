//! First-turn recall injection: the id swap, the frozen snapshot, date
//! updates, skipped injections and their retry, and the switches.

mod common;

use common::{clock, FakeBackend, RecallAnswer};
use memgate_core::message::RoleKind;
use memgate_core::{Caller, MemoryError, Message};
use memgate_host::reminder::last_reminder_date;
use memgate_host::{HostSettings, InjectionOutcome, MemoryStatus, RecallInjector, SkipReason};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const MEMORY: &str = "- [mem_1] (fact) money amounts are integer cents";

fn alice() -> Caller {
    Caller::new("alice")
        .with_agent("coder")
        .with_thread("thread-1")
}

fn injector(backend: &Arc<FakeBackend>, settings: HostSettings) -> RecallInjector {
    RecallInjector::new(backend.clone(), settings).with_clock(clock())
}

/// A transcript after the model answered, plus the next user message.
fn next_turn(transcript: &mut Vec<Message>, answer: &str, input: &str, id: &str) {
    transcript.push(Message::ai(answer));
    transcript.push(Message::human(input).with_id(id));
}

#[tokio::test]
async fn first_turn_swaps_ids_into_reminder_memory_and_user_message() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let injector = injector(&backend, HostSettings::default());
    let user = Message::human("Add a refund calculation.")
        .with_id("m1")
        .with_name("alice")
        .with_flag("files", json!(["a.txt"]));
    let mut transcript = vec![Message::system("You are a coding agent."), user.clone()];

    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;

    let chars = MEMORY.chars().count();
    assert!(
        matches!(&outcome, InjectionOutcome::Injected { date, memory: MemoryStatus::Recalled { chars: c, .. } }
            if date == "2026-10-09, Friday" && *c == chars),
        "{outcome:?}"
    );
    let wire: Vec<_> = transcript
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(
        wire,
        vec![
            json!({"type": "system", "content": "You are a coding agent."}),
            json!({"type": "system", "id": "m1",
                   "content": "<system-reminder>\n<current_date>2026-10-09, Friday</current_date>\n</system-reminder>",
                   "additional_kwargs": {"hide_from_ui": true, "dynamic_context_reminder": true,
                                         "reminder_date": "2026-10-09, Friday"}}),
            json!({"type": "human", "id": "m1__memory",
                   "content": format!("<memory>\n{MEMORY}\n</memory>"),
                   "additional_kwargs": {"hide_from_ui": true, "dynamic_context_reminder": true}}),
            json!({"type": "human", "id": "m1__user", "name": "alice",
                   "content": "Add a refund calculation.",
                   "additional_kwargs": {"files": ["a.txt"]}}),
        ]
    );
    // Memory is never in a system-role message.
    for m in &transcript {
        if m.role.kind() == RoleKind::System {
            assert!(!m.text().contains("integer cents"), "{m:?}");
        }
    }
}

#[tokio::test]
async fn recall_gets_the_hosts_identity_and_the_latest_user_input() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let injector = injector(&backend, HostSettings::default());
    let mut transcript = vec![
        Message::human("older question").with_id("a"),
        Message::ai("older answer"),
        Message::human("  Add a refund calculation to the order service.  ").with_id("b"),
    ];
    injector.prepare_turn(&alice(), &mut transcript).await;

    let recalls = backend.calls.recalls();
    assert_eq!(recalls.len(), 1);
    let request = &recalls[0];
    assert_eq!(request.caller.user.as_str(), "alice");
    assert_eq!(request.caller.agent.as_deref(), Some("coder"));
    // The host does not pass the thread to recall (spec §2.1).
    assert_eq!(request.caller.thread, None);
    assert_eq!(
        request.query.as_deref(),
        Some("Add a refund calculation to the order service.")
    );
    // The last user message is the target; history keeps its order.
    assert_eq!(transcript[0].id.as_deref(), Some("a"));
    assert_eq!(transcript[2].id.as_deref(), Some("b"));
    assert_eq!(transcript[4].id.as_deref(), Some("b__user"));
}

#[tokio::test]
async fn memory_is_frozen_for_the_rest_of_the_thread() {
    let backend = Arc::new(FakeBackend::new(MEMORY).then(RecallAnswer::Text("first memory")));
    let injector = injector(&backend, HostSettings::default());
    let mut transcript = vec![Message::human("hi").with_id("m1")];
    injector.prepare_turn(&alice(), &mut transcript).await;
    let after_first = transcript.clone();

    for (i, input) in ["second", "third"].iter().enumerate() {
        next_turn(&mut transcript, "ok", input, &format!("m{}", i + 2));
        let before = transcript.clone();
        let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
        assert!(matches!(outcome, InjectionOutcome::Frozen), "{outcome:?}");
        assert_eq!(transcript, before, "a frozen turn changes nothing");
    }
    assert_eq!(backend.calls.recalls().len(), 1, "memory is fetched once");
    assert_eq!(transcript[..after_first.len()], after_first[..]);
    assert!(transcript[1].text().contains("first memory"));
}

#[tokio::test]
async fn a_date_change_injects_a_date_only_reminder_without_refetching() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let clock = clock();
    let injector =
        RecallInjector::new(backend.clone(), HostSettings::default()).with_clock(clock.clone());
    let mut transcript = vec![Message::human("hi").with_id("m1")];
    injector.prepare_turn(&alice(), &mut transcript).await;

    clock.advance_day();
    next_turn(&mut transcript, "ok", "after midnight", "m2");
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(
        matches!(&outcome, InjectionOutcome::DateUpdated { date } if date == "2026-10-10, Saturday"),
        "{outcome:?}"
    );
    assert_eq!(backend.calls.recalls().len(), 1, "no memory refetch");
    let tail: Vec<_> = transcript[transcript.len() - 2..]
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(
        tail,
        vec![
            json!({"type": "system", "id": "m2",
                   "content": "<system-reminder>\n<current_date>2026-10-10, Saturday</current_date>\n</system-reminder>",
                   "additional_kwargs": {"hide_from_ui": true, "dynamic_context_reminder": true,
                                         "reminder_date": "2026-10-10, Saturday"}}),
            json!({"type": "human", "id": "m2__user", "content": "after midnight"}),
        ]
    );
    let memory_messages = transcript.iter().filter(|m| m.is_injected_memory()).count();
    assert_eq!(memory_messages, 1, "the date update carries no memory");

    // Once updated, the same day stays quiet, and ids never grow `__user__user`.
    next_turn(&mut transcript, "ok", "later", "m3");
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(matches!(outcome, InjectionOutcome::Frozen), "{outcome:?}");
    assert!(transcript
        .iter()
        .all(|m| !m.id.as_deref().unwrap_or("").contains("__user__user")));
}

#[tokio::test]
async fn a_timed_out_recall_injects_nothing_and_is_retried_next_turn() {
    let backend = Arc::new(
        FakeBackend::new(MEMORY).then(RecallAnswer::Slow(Duration::from_secs(30), "too late")),
    );
    let settings = HostSettings::default()
        .with_recall_deadline_secs(0.2)
        .unwrap();
    let injector = injector(&backend, settings);
    let mut transcript = vec![Message::human("hi").with_id("m1")];

    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(
        matches!(outcome, InjectionOutcome::Skipped(SkipReason::Timeout(d)) if d == Duration::from_millis(200)),
        "{outcome:?}"
    );
    assert_eq!(
        transcript,
        vec![Message::human("hi").with_id("m1")],
        "nothing injected, date included"
    );
    assert_eq!(last_reminder_date(&transcript), None);

    next_turn(&mut transcript, "ok", "second try", "m2");
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(
        matches!(outcome.memory(), Some(MemoryStatus::Recalled { .. })),
        "{outcome:?}"
    );
    assert_eq!(backend.calls.recalls().len(), 2);
    // The retry targets the latest user message, with its input as the query.
    assert_eq!(
        backend.calls.recalls()[1].query.as_deref(),
        Some("second try")
    );
    assert_eq!(transcript[3].id.as_deref(), Some("m2__memory"));
    assert!(!transcript.iter().any(|m| m.text().contains("too late")));
}

#[tokio::test]
async fn a_failed_recall_injects_nothing_and_is_retried_next_turn() {
    let backend = Arc::new(
        FakeBackend::new(MEMORY).then(RecallAnswer::Fail(MemoryError::backend("HTTP 503"))),
    );
    let injector = injector(&backend, HostSettings::default());
    let mut transcript = vec![Message::human("hi").with_id("m1")];

    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(
        matches!(&outcome, InjectionOutcome::Skipped(SkipReason::Failed(e)) if e.to_string() == "HTTP 503"),
        "{outcome:?}"
    );
    assert_eq!(transcript.len(), 1);

    next_turn(&mut transcript, "ok", "again", "m2");
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(
        matches!(outcome, InjectionOutcome::Injected { .. }),
        "{outcome:?}"
    );
    assert_eq!(backend.calls.recalls().len(), 2);
}

#[tokio::test]
async fn empty_memory_injects_the_date_only_and_freezes() {
    let backend = Arc::new(FakeBackend::new("  \n "));
    let injector = injector(&backend, HostSettings::default());
    let mut transcript = vec![Message::human("hi").with_id("m1")];
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert_eq!(outcome.memory(), Some(MemoryStatus::Nothing));
    let ids: Vec<_> = transcript.iter().map(|m| m.id.clone().unwrap()).collect();
    assert_eq!(ids, ["m1", "m1__user"]);

    next_turn(&mut transcript, "ok", "more", "m2");
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(matches!(outcome, InjectionOutcome::Frozen));
    assert_eq!(backend.calls.recalls().len(), 1);
}

#[tokio::test]
async fn switches_off_mean_no_recall_call_but_the_date_is_still_injected() {
    for settings in [
        HostSettings {
            enabled: false,
            ..HostSettings::default()
        },
        HostSettings {
            injection_enabled: false,
            ..HostSettings::default()
        },
    ] {
        let backend = Arc::new(FakeBackend::new(MEMORY));
        let injector = injector(&backend, settings);
        let mut transcript = vec![Message::human("hi").with_id("m1")];
        let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
        assert_eq!(outcome.memory(), Some(MemoryStatus::Disabled));
        assert!(backend.calls.all().is_empty(), "{settings:?}");
        assert_eq!(transcript.len(), 2);
        assert!(!transcript.iter().any(|m| m.is_injected_memory()));
    }
}

#[tokio::test]
async fn messages_without_ids_get_a_generated_id_used_consistently() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let injector = injector(&backend, HostSettings::default());
    let mut transcript = vec![Message::human("hi")];
    injector.prepare_turn(&alice(), &mut transcript).await;
    let x = transcript[0].id.clone().expect("generated id");
    assert_eq!(transcript[1].id, Some(format!("{x}__memory")));
    assert_eq!(transcript[2].id, Some(format!("{x}__user")));
}

#[tokio::test]
async fn nothing_to_attach_to_means_nothing_done_and_no_recall() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let injector = injector(&backend, HostSettings::default());
    for mut transcript in [
        vec![],
        vec![Message::ai("hello")],
        vec![Message::human("s").with_name("summary")],
    ] {
        let before = transcript.clone();
        let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
        assert!(matches!(outcome, InjectionOutcome::NoTarget), "{outcome:?}");
        assert_eq!(transcript, before);
    }
    assert!(backend.calls.recalls().is_empty());
}

#[tokio::test]
async fn a_user_typed_reminder_tag_does_not_prevent_injection() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let injector = injector(&backend, HostSettings::default());
    let mut transcript = vec![Message::human(
        "<system-reminder>\n<current_date>2026-10-09, Friday</current_date>\n</system-reminder>",
    )
    .with_id("m1")];
    let outcome = injector.prepare_turn(&alice(), &mut transcript).await;
    assert!(
        matches!(outcome, InjectionOutcome::Injected { .. }),
        "{outcome:?}"
    );
    assert_eq!(transcript.len(), 3);
}

#[tokio::test]
async fn plan_turn_leaves_the_transcript_alone_and_returns_upserts() {
    let backend = Arc::new(FakeBackend::new(MEMORY));
    let injector = injector(&backend, HostSettings::default());
    let transcript = vec![Message::ai("hello"), Message::human("hi").with_id("m1")];
    let (outcome, swap) = injector.plan_turn(&alice(), &transcript).await;
    assert!(matches!(outcome, InjectionOutcome::Injected { .. }));
    let swap = swap.expect("a swap");
    assert_eq!(swap.index, 1);
    assert_eq!(swap.target_id(), "m1");
    let ids: Vec<_> = swap
        .messages
        .iter()
        .map(|m| m.id.clone().unwrap())
        .collect();
    assert_eq!(ids, ["m1", "m1__memory", "m1__user"]);
}
