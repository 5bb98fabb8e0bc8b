//! Lexical ranking on a real PostgreSQL is BM25 over every present query
//! term (`memgate_postgres::plan::Bm25`), the common ones scored at the
//! walked documents: a document holding the rare term *and* a common one
//! outranks those holding the rare term alone, even when it is the oldest,
//! and the rare term outweighs the common one.

mod common;

use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, SearchQuery};

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn every_present_term_is_scored_by_bm25_and_the_rare_one_weighs_most() {
    let dsn = common::dsn();
    let b = common::backend(&dsn, &common::unique_schema("bm25"));
    let alice = Caller::new("alice").with_agent("coder");
    // 2 000 turns of equal length: "quartz" in 10 (every 200th), "harbour"
    // in 647 of the first 650 (a common term: over the 600 postings a plan
    // once read, under the 2 000 it walks now); of the quartz turns only the
    // oldest (turn 0) holds both.
    for thread in 0..20 {
        let messages = (0..100)
            .map(|i| {
                let n = thread * 100 + i;
                let first = if n % 200 == 0 { "quartz" } else { "pebble" };
                let second = if n == 0 || (n < 650 && n % 200 != 0) {
                    "harbour"
                } else {
                    "meadow"
                };
                Message::human(format!("{first} {second} filler number{n}"))
                    .with_id(format!("m{n}"))
            })
            .collect();
        b.capture(&CaptureRequest {
            caller: alice.clone().with_thread(format!("t{thread}")),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
        .await
        .unwrap();
    }
    let hits = b
        .search(
            &alice,
            &SearchQuery {
                top_k: 12,
                ..SearchQuery::new("quartz harbour")
            },
        )
        .await
        .unwrap();
    let texts: Vec<&str> = hits.iter().map(|h| h.content.as_str()).collect();
    // Both terms: the oldest turn first. Then the other nine with the rare
    // term, before any turn with only the common one.
    assert_eq!(texts[0], "quartz harbour filler number0", "{texts:?}");
    assert!(
        texts[1..10].iter().all(|t| t.starts_with("quartz meadow")),
        "{texts:?}"
    );
    assert!(
        texts[10..].iter().all(|t| t.contains("harbour")),
        "{texts:?}"
    );
}
