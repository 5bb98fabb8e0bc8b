//! On a real PostgreSQL, a capture that keeps only the start of a long
//! message reports which one and how much, as `local` does
//! (`memgate_recall::turns::storable` makes the cut for both).

mod common;

use memgate_core::{Caller, CaptureCut, CaptureKind, CaptureRequest, MemoryBackend, Message};

const LIMIT: usize = 64 * 1024;

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn postgres_capture_reports_a_cut_message_once() {
    let dsn = common::dsn();
    let schema = common::unique_schema("cut");
    let backend = common::backend(&dsn, &schema);
    backend.migrate().await.unwrap();
    let request = CaptureRequest {
        caller: Caller::new("alice").with_thread("t1"),
        messages: vec![
            Message::system("you are helpful"),
            Message::human("the harbour office opens at nine"),
            Message::human("é".repeat(LIMIT)).with_id("pasted-log"),
        ],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    let first = backend.capture(&request).await.unwrap();
    assert_eq!((first.stored, first.filtered), (2, 1), "{first:?}");
    assert_eq!(
        first.cut,
        [CaptureCut {
            index: 2,
            message_id: Some("pasted-log".to_owned()),
            text_bytes: 2 * LIMIT,
            kept_bytes: LIMIT,
        }]
    );
    let again = backend.capture(&request).await.unwrap();
    assert_eq!((again.stored, again.already_known), (0, 2), "{again:?}");
    assert!(again.cut.is_empty(), "nothing new was cut: {again:?}");
    let export = backend.export(&Caller::new("alice")).await.unwrap();
    let lengths: Vec<usize> = export.turns.iter().map(|t| t.text.len()).collect();
    assert_eq!(lengths, [32, LIMIT], "what was stored is intact");
}
