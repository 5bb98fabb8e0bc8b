//! Capture: each new turn stored once, filters, thread rule, durability.

mod common;

use common::{alice, capture, recall_of, TestStore};
use memgate_core::capture::host_default_keep_hidden;
use memgate_core::{CaptureKind, CaptureReport, KeepHiddenHook, Message, ToolCall};
use memgate_store::{LocalConfig, MemoryStore, Streamed};
use serde_json::json;
use std::sync::Arc;

fn turns(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Message::human(format!("question {i} about gardening tomatoes"))
                    .with_id(format!("h{i}"))
            } else {
                Message::ai(format!("answer {i} about watering tomatoes")).with_id(format!("a{i}"))
            }
        })
        .collect()
}

fn report(stored: usize, already_known: usize, filtered: usize) -> CaptureReport {
    CaptureReport {
        stored,
        already_known,
        filtered,
        cut: Vec::new(),
    }
}

fn exported_texts(t: &TestStore) -> Vec<String> {
    t.store
        .export(&alice())
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.text)
        .collect()
}

#[test]
fn replays_and_longer_snapshots_store_only_what_is_new() {
    let t = TestStore::new();
    let all = turns(6);
    let first = t
        .store
        .capture(&capture(&alice(), "t1", all[..4].to_vec()))
        .unwrap();
    assert_eq!(first, report(4, 0, 0));
    let replay = t
        .store
        .capture(&capture(&alice(), "t1", all[..4].to_vec()))
        .unwrap();
    assert_eq!(replay, report(0, 4, 0));
    let longer = t
        .store
        .capture(&capture(&alice(), "t1", all.clone()))
        .unwrap();
    assert_eq!(longer, report(2, 4, 0));
    // A compaction head of already stored turns adds nothing.
    let mut head = capture(&alice(), "t1", all[..3].to_vec());
    head.kind = CaptureKind::BeforeCompaction;
    assert_eq!(t.store.capture(&head).unwrap(), report(0, 3, 0));
    assert_eq!(exported_texts(&t).len(), 6);
    // The same messages in another thread are that thread's own turns.
    let other = t
        .store
        .capture(&capture(&alice(), "t2", all[..2].to_vec()))
        .unwrap();
    assert_eq!(other, report(2, 0, 0));
}

#[test]
fn an_edited_message_is_a_new_turn() {
    let t = TestStore::new();
    t.store
        .capture(&capture(
            &alice(),
            "t",
            vec![Message::human("I like tea").with_id("m1")],
        ))
        .unwrap();
    let edited = t
        .store
        .capture(&capture(
            &alice(),
            "t",
            vec![Message::human("I like coffee").with_id("m1")],
        ))
        .unwrap();
    assert_eq!(edited, report(1, 0, 0));
}

#[test]
fn plumbing_system_summaries_hidden_and_injected_messages_are_filtered() {
    let t = TestStore::new();
    let messages = vec![
        Message::system("You are a helpful agent."),
        Message::human("<system-reminder>today</system-reminder>").with_flag("hide_from_ui", true),
        Message::human("<memory>old memory</memory>")
            .with_id("x__memory")
            .with_flag("hide_from_ui", true)
            .with_flag("dynamic_context_reminder", true),
        Message::human("Where is my invoice?").with_id("x__user"),
        Message::ai("").with_tool_calls(vec![ToolCall::new(
            "search",
            json!({"q": "invoice"}),
            Some("c1".into()),
        )]),
        Message::tool("invoice #42 found", "c1"),
        Message::ai("Your invoice #42 is in the archive."),
        Message::ai("Summary of earlier talk").with_name("summary"),
    ];
    let r = t.store.capture(&capture(&alice(), "t", messages)).unwrap();
    assert_eq!(r, report(2, 0, 6));
    assert_eq!(
        exported_texts(&t),
        [
            "Where is my invoice?",
            "Your invoice #42 is in the archive."
        ]
    );
}

#[test]
fn the_hosts_keep_hook_decides_on_hidden_messages_but_never_on_injected_memory() {
    let dir = tempfile::tempdir().unwrap();
    let hook: KeepHiddenHook = Arc::new(host_default_keep_hidden);
    let store = MemoryStore::open(dir.path().join("m.sqlite3"), LocalConfig::default())
        .unwrap()
        .with_keep_hidden(Some(hook));
    let answer = json!({"version": 1, "kind": "human_input_response", "source": "ui",
                        "request_id": "r1", "value": "blue", "response_kind": "text"});
    let messages = vec![
        Message::human("blue")
            .with_flag("hide_from_ui", true)
            .with_flag("human_input_response", answer.clone()),
        Message::human("<memory>x</memory>")
            .with_id("y__memory")
            .with_flag("hide_from_ui", true)
            .with_flag("human_input_response", answer),
        Message::human("other hidden").with_flag("hide_from_ui", true),
    ];
    let r = store.capture(&capture(&alice(), "t", messages)).unwrap();
    assert_eq!(r, report(1, 0, 2));
    let kept: Vec<_> = store
        .export(&alice())
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.text)
        .collect();
    assert_eq!(kept, ["blue"]);
}

#[test]
fn a_capture_needs_a_thread() {
    let t = TestStore::new();
    for caller in [alice(), alice().with_thread("")] {
        let request = memgate_core::CaptureRequest {
            caller,
            messages: turns(2),
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        };
        let err = t.store.capture(&request).unwrap_err();
        assert!(err.to_string().contains("thread"), "{err}");
    }
    assert!(exported_texts(&t).is_empty());
}

#[test]
fn captured_turns_are_durable_and_recalled_with_speaker_and_date() {
    let t = TestStore::new();
    let m = Message::human("We adopted a beagle named Biscuit")
        .with_id("d1")
        .with_name("Caroline")
        .with_flag("timestamp", "2023-05-08");
    t.store.capture(&capture(&alice(), "t", vec![m])).unwrap();
    let t = t.reopen();
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("what is the dog called?")))
        .unwrap();
    assert_eq!(recall.items.len(), 0, "no topic word in common");
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("beagle")))
        .unwrap();
    assert_eq!(recall.items.len(), 1);
    assert!(
        recall
            .text
            .contains("(2023-05-08, Caroline) We adopted a beagle named Biscuit"),
        "{}",
        recall.text
    );
    // The speaker is searchable context too.
    let by_speaker = t
        .store
        .recall(&recall_of(&alice(), Some("Caroline")))
        .unwrap();
    assert_eq!(by_speaker.items.len(), 1);
}

#[test]
fn an_empty_capture_still_names_what_it_filtered() {
    let t = TestStore::new();
    let r = t
        .store
        .capture(&capture(
            &alice(),
            "t",
            vec![Message::system("x"), Message::human("  ")],
        ))
        .unwrap();
    assert_eq!(r, report(0, 0, 2));
}

/// Sends `messages` over a channel as a host converting them would, then
/// `last` (normally `End`), and runs the streamed capture.
fn streamed(
    t: &TestStore,
    thread: &str,
    messages: Vec<Message>,
    last: Option<Streamed>,
) -> memgate_core::Result<CaptureReport> {
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        // A store that refuses early hangs up; the sender just stops.
        for batch in messages.chunks(2) {
            if tx.send(Streamed::Messages(batch.to_vec())).is_err() {
                return;
            }
        }
        if let Some(last) = last {
            let _ = tx.send(last);
        }
    });
    let report = t
        .store
        .capture_streamed(&alice().with_thread(thread), None, rx);
    sender.join().unwrap();
    report
}

#[test]
fn a_streamed_capture_stores_what_the_whole_capture_stores() {
    let t = TestStore::new();
    let mut all = turns(6);
    all.insert(2, Message::system("You are a helpful agent."));
    let first = streamed(&t, "t1", all[..5].to_vec(), Some(Streamed::End)).unwrap();
    assert_eq!(first, report(4, 0, 1));
    // The whole-transcript capture sees the streamed turns as known.
    let whole = t
        .store
        .capture(&capture(&alice(), "t1", all.clone()))
        .unwrap();
    assert_eq!(whole, report(2, 4, 1));
    let again = streamed(&t, "t1", all.clone(), Some(Streamed::End)).unwrap();
    assert_eq!(again, report(0, 6, 1));
    assert_eq!(exported_texts(&t).len(), 6);
}

#[test]
fn a_streamed_capture_that_fails_or_stops_early_stores_nothing() {
    let t = TestStore::new();
    let failed = streamed(
        &t,
        "t1",
        turns(4),
        Some(Streamed::Failed(memgate_core::MemoryError::invalid(
            "messages[4]",
            "must be a message",
        ))),
    )
    .unwrap_err();
    assert_eq!(failed.code(), "invalid_input");
    assert!(failed.to_string().contains("messages[4]"), "{failed}");
    let cut = streamed(&t, "t1", turns(4), None).unwrap_err();
    assert!(cut.to_string().contains("stopped before its end"), "{cut}");
    assert!(exported_texts(&t).is_empty());
    // The same transcript, sent whole, is then stored in full.
    let done = streamed(&t, "t1", turns(4), Some(Streamed::End)).unwrap();
    assert_eq!(done, report(4, 0, 0));
}

#[test]
fn a_streamed_capture_needs_a_thread_and_an_open_store() {
    let t = TestStore::new();
    let (_tx, rx) = std::sync::mpsc::channel();
    let err = t.store.capture_streamed(&alice(), None, rx).unwrap_err();
    assert_eq!(err.code(), "invalid_input");
    t.store.close().unwrap();
    let err = streamed(&t, "t1", turns(2), Some(Streamed::End)).unwrap_err();
    assert_eq!(err.code(), "closed");
}
