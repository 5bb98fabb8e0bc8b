//! Capture hooks: what each hook sends, when nothing is sent, that a slow
//! backend does not hold up the caller, and how errors surface.

mod common;

use common::{local_backend, FakeBackend, Spy};
use memgate_core::{Caller, CaptureKind, MemoryBackend, MemoryError, Message, RecallRequest};
use memgate_host::{CaptureHooks, CaptureOutcome, CaptureSkip, HostSettings, MemoryHost};
use std::sync::Arc;
use tokio::sync::Semaphore;

fn alice() -> Caller {
    Caller::new("alice").with_thread("thread-1")
}

fn transcript() -> Vec<Message> {
    vec![
        Message::human("Money amounts are integer cents.").with_id("h1"),
        Message::ai("Noted."),
        Message::human("Use pytest for backend tests.").with_id("h2"),
        Message::ai("Will do."),
        Message::human("Now add a refund calculation.").with_id("h3"),
    ]
}

#[tokio::test]
async fn after_turn_sends_the_full_snapshot() {
    let backend = Arc::new(FakeBackend::new(""));
    let hooks = CaptureHooks::new(backend.clone(), HostSettings::default());
    let snapshot = transcript();
    let outcome = hooks.after_turn(&alice(), &snapshot).wait().await;
    assert!(
        matches!(&outcome, CaptureOutcome::Captured(r) if r.stored == 5),
        "{outcome:?}"
    );
    let captures = backend.calls.captures();
    assert_eq!(captures.len(), 1);
    assert_eq!(captures[0].kind, CaptureKind::AfterTurn);
    assert_eq!(captures[0].messages, snapshot);
    assert_eq!(captures[0].caller, alice());
}

#[tokio::test]
async fn before_compaction_sends_only_the_head_being_removed() {
    let backend = Arc::new(FakeBackend::new(""));
    let hooks = CaptureHooks::new(backend.clone(), HostSettings::default());
    let mut all = transcript();
    let preserved = all.split_off(3);
    let head = all;
    let outcome = hooks.before_compaction(&alice(), head.clone()).wait().await;
    assert!(
        matches!(outcome, CaptureOutcome::Captured(_)),
        "{outcome:?}"
    );
    let captures = backend.calls.captures();
    assert_eq!(captures.len(), 1);
    assert_eq!(captures[0].kind, CaptureKind::BeforeCompaction);
    assert_eq!(captures[0].messages, head);
    for kept in &preserved {
        assert!(!captures[0].messages.contains(kept), "{kept:?} was sent");
    }
}

#[tokio::test]
async fn nothing_is_sent_when_disabled_without_a_thread_or_without_messages() {
    let backend = Arc::new(FakeBackend::new(""));
    let disabled = CaptureHooks::new(
        backend.clone(),
        HostSettings {
            enabled: false,
            ..HostSettings::default()
        },
    );
    let on = CaptureHooks::new(backend.clone(), HostSettings::default());
    let cases = [
        (
            disabled.after_turn(&alice(), &transcript()),
            CaptureSkip::Disabled,
        ),
        (
            disabled.before_compaction(&alice(), transcript()),
            CaptureSkip::Disabled,
        ),
        (
            on.after_turn(&Caller::new("alice"), &transcript()),
            CaptureSkip::NoThread,
        ),
        (
            on.after_turn(&Caller::new("alice").with_thread(""), &transcript()),
            CaptureSkip::NoThread,
        ),
        (on.after_turn(&alice(), &[]), CaptureSkip::NoMessages),
    ];
    for (handle, why) in cases {
        assert_eq!(handle.skipped(), Some(why));
        assert!(matches!(handle.wait().await, CaptureOutcome::Skipped(w) if w == why));
    }
    assert!(backend.calls.all().is_empty());
}

#[tokio::test]
async fn injection_disabled_still_captures() {
    let backend = Arc::new(FakeBackend::new(""));
    let hooks = CaptureHooks::new(
        backend.clone(),
        HostSettings {
            injection_enabled: false,
            ..HostSettings::default()
        },
    );
    let outcome = hooks.after_turn(&alice(), &transcript()).wait().await;
    assert!(matches!(outcome, CaptureOutcome::Captured(_)));
    assert_eq!(backend.calls.captures().len(), 1);
}

#[tokio::test]
async fn a_slow_backend_does_not_hold_up_the_caller() {
    // The fake's capture waits until the test releases it: the hook must
    // return before that, and the caller's task keeps running.
    let gate = Arc::new(Semaphore::new(0));
    let backend = Arc::new(FakeBackend::new("").holding_captures(gate.clone()));
    let hooks = CaptureHooks::new(backend.clone(), HostSettings::default());
    let handle = hooks.after_turn(&alice(), &transcript());
    tokio::task::yield_now().await;
    assert_eq!(backend.calls.captures().len(), 1, "the capture has started");
    assert!(!handle.is_finished(), "and is still held by the backend");
    gate.add_permits(1);
    assert!(matches!(handle.wait().await, CaptureOutcome::Captured(_)));
}

#[tokio::test]
async fn errors_surface_through_the_handle() {
    let backend = Arc::new(FakeBackend::new("").failing_captures(MemoryError::backend("HTTP 500")));
    let hooks = CaptureHooks::new(backend.clone(), HostSettings::default());
    let outcome = hooks.after_turn(&alice(), &transcript()).wait().await;
    assert!(
        matches!(&outcome, CaptureOutcome::Failed(e) if e.to_string() == "HTTP 500"),
        "{outcome:?}"
    );
}

#[test]
fn a_compaction_capture_failure_never_fails_compaction_even_off_runtime() {
    // A synchronous compaction step on a plain thread: the hook runs the
    // capture on the host's runtime and returns; the failure stays in the handle.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let backend =
        Arc::new(FakeBackend::new("").failing_captures(MemoryError::backend("disk full")));
    let hooks = CaptureHooks::new(backend.clone(), HostSettings::default())
        .with_runtime(runtime.handle().clone());
    let handle = std::thread::spawn(move || hooks.before_compaction(&alice(), transcript()))
        .join()
        .expect("the compaction step did not panic");
    let outcome = runtime.block_on(handle.wait());
    assert!(matches!(outcome, CaptureOutcome::Failed(_)), "{outcome:?}");
    assert_eq!(backend.calls.captures().len(), 1);
}

#[test]
fn without_any_runtime_the_hook_reports_instead_of_panicking() {
    let backend = Arc::new(FakeBackend::new(""));
    let hooks = CaptureHooks::new(backend.clone(), HostSettings::default());
    let handle = hooks.after_turn(&alice(), &transcript());
    assert!(handle.is_finished());
    let outcome = futures_lite_block_on(handle.wait());
    assert!(
        matches!(&outcome, CaptureOutcome::Failed(e) if e.to_string().contains("tokio runtime")),
        "{outcome:?}"
    );
    assert!(backend.calls.all().is_empty());
}

/// Polls a future that is already complete.
fn futures_lite_block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(fut)
}

#[tokio::test]
async fn the_local_store_keeps_a_captured_turn_once_and_never_the_injected_memory() {
    let (local, _dir) = local_backend();
    let backend = Arc::new(Spy::new(local));
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(backend.clone()),
        HostSettings::default(),
    );
    let caller = alice();
    let mut snapshot = vec![Message::human("The refund window is 30 days.").with_id("h1")];
    host.injector().prepare_turn(&caller, &mut snapshot).await;
    snapshot.push(Message::ai("Noted: 30 days."));

    let first = host.capture().after_turn(&caller, &snapshot).wait().await;
    let CaptureOutcome::Captured(first) = first else {
        panic!("{first:?}")
    };
    assert_eq!(first.stored, 2, "{first:?}");
    let again = host.capture().after_turn(&caller, &snapshot).wait().await;
    let CaptureOutcome::Captured(again) = again else {
        panic!("{again:?}")
    };
    assert_eq!(
        again.stored, 0,
        "the same snapshot twice stores nothing new"
    );

    let recall = backend
        .inner
        .recall(&RecallRequest {
            caller: Caller::new("alice"),
            query: Some("refund window".into()),
        })
        .await
        .unwrap();
    assert!(recall.text.contains("30 days"), "{}", recall.text);
    assert!(!recall.text.contains("<system-reminder>"));
}
