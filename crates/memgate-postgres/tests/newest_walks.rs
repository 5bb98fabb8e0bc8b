//! A query of common terms only takes the newest turns holding them, by
//! either walk ([`memgate_postgres::plan::Walk`]): the postings when the
//! matches are few next to the scope, a window of the newest turns when
//! they are everywhere. Both must return the newest matches, newest first,
//! as `local` does, also when a window walk finds too few of them.

mod common;

use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, SearchQuery};
use memgate_postgres::plan::{choose, Walk};

/// 4 000 turns: every one says "frequent", every sixth also "uncommon
/// seldom" (667 turns, over the 600 budget, so all are common), the first
/// 1 000 "older".
async fn filled() -> (memgate_postgres::PostgresBackend, Caller) {
    let dsn = common::dsn();
    let b = common::backend(&dsn, &common::unique_schema("walks"));
    let alice = Caller::new("alice").with_agent("coder");
    for thread in 0..40 {
        let messages = (0..100)
            .map(|i| {
                let n = thread * 100 + i;
                let mut text = format!("frequent filler number{n}");
                if n % 6 == 0 {
                    text.push_str(" uncommon seldom");
                }
                if n < 1000 {
                    text.push_str(" older");
                }
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
    let pool = memgate_recall::ranked::candidate_pool(5);
    let walks = |counts: &[(usize, &str)]| choose(counts, 4000).unwrap().newest_walks(pool);
    // "uncommon" and "seldom" (667 each of 4 000): together expected in
    // ~111 turns, so their postings are the fewer rows to read (they are
    // always together, so 667 match).
    assert_eq!(
        walks(&[(667, "uncommon"), (667, "seldom")]).unwrap().0,
        Walk::Postings
    );
    let hits = b.search(&alice, &top("uncommon seldom")).await.unwrap();
    assert_eq!(numbers(&hits), [3996, 3990, 3984, 3978, 3972]);
    // "frequent" (every turn): the newest turns are the fewer rows.
    assert!(matches!(
        walks(&[(4000, "frequent")]).unwrap().0,
        Walk::Recent { .. }
    ));
    let hits = b.search(&alice, &top("frequent")).await.unwrap();
    assert_eq!(numbers(&hits), [3999, 3998, 3997, 3996, 3995]);
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_window_holding_too_few_matches_gives_way_to_the_postings() {
    let (b, alice) = filled().await;
    let pool = memgate_recall::ranked::candidate_pool(5);
    // "older frequent": 1 000 × 4 000 / 4 000 expected together, so the
    // plan walks the newest turns, which hold none of them.
    let plan = choose(&[(1000, "older"), (4000, "frequent")], 4000).unwrap();
    assert!(matches!(
        plan.newest_walks(pool).unwrap().0,
        Walk::Recent { rows } if rows < 3000
    ));
    let hits = b
        .search(
            &alice,
            &SearchQuery {
                top_k: 5,
                ..SearchQuery::new("older frequent")
            },
        )
        .await
        .unwrap();
    assert_eq!(numbers(&hits), [999, 998, 997, 996, 995]);
}
