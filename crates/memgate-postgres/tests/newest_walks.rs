//! A query of common terms only takes the newest turns holding them, by
//! either walk ([`memgate_postgres::plan::Walk`]): the rarest term's postings
//! when they are few next to the scope, a window of the newest turns when
//! the term is everywhere. Both must return the newest matches, newest first.

mod common;

use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, SearchQuery};
use memgate_postgres::plan::Walk;

/// 4 000 turns: every one says "frequent", every sixth also "uncommon"
/// (667 turns, over the 600 budget, so both are common).
async fn filled() -> (memgate_postgres::PostgresBackend, Caller) {
    let dsn = common::dsn();
    let b = common::backend(&dsn, &common::unique_schema("walks"));
    let alice = Caller::new("alice").with_agent("coder");
    for thread in 0..40 {
        let messages = (0..100)
            .map(|i| {
                let n = thread * 100 + i;
                let text = if n % 6 == 0 {
                    format!("frequent uncommon words number{n}")
                } else {
                    format!("frequent filler number{n}")
                };
                let m = if i % 2 == 0 {
                    Message::human(text)
                } else {
                    Message::ai(text)
                };
                m.with_id(format!("m{n}"))
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
    (b, alice)
}

fn numbers(hits: &[memgate_core::SearchHit]) -> Vec<usize> {
    hits.iter()
        .map(|h| {
            let word = h
                .content
                .split(' ')
                .find(|w| w.starts_with("number"))
                .unwrap();
            word["number".len()..].parse().unwrap()
        })
        .collect()
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn both_walks_return_the_newest_matches_newest_first() {
    let (b, alice) = filled().await;
    let top = |q: &str| SearchQuery {
        top_k: 5,
        ..SearchQuery::new(q)
    };
    // "uncommon" (667 of 4 000): its postings are the fewer rows to read.
    let pool = memgate_store::ranking::candidate_pool(5);
    assert_eq!(Walk::for_newest(667, 4000, pool), Walk::Postings);
    let hits = b.search(&alice, &top("uncommon frequent")).await.unwrap();
    assert_eq!(numbers(&hits), [3996, 3990, 3984, 3978, 3972]);
    // "frequent" (every turn): the newest turns are the fewer rows.
    assert!(matches!(
        Walk::for_newest(4000, 4000, pool),
        Walk::Recent { .. }
    ));
    let hits = b.search(&alice, &top("frequent")).await.unwrap();
    assert_eq!(numbers(&hits), [3999, 3998, 3997, 3996, 3995]);
}
