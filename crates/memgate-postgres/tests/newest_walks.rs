//! A query of common terms only takes the newest turns holding them, by
//! either walk ([`memgate_postgres::plan::Walk`]): the postings when the
//! matches are few next to the scope, a window of the newest turns when
//! they are everywhere. Both must return the newest matches, newest first,
//! as `local` does, also when a window walk finds too few of them.

mod common;

use memgate_core::{Caller, MemoryBackend, Message, SearchQuery};
use memgate_postgres::plan::{choose, Walk};

/// 20 000 turns: every one says "frequent", every ninth also "uncommon
/// seldom" (2 223 turns, over the 2 000 budget, so all are common), the
/// first 5 000 "older".
async fn filled() -> (memgate_postgres::PostgresBackend, Caller) {
    let dsn = common::dsn();
    let b = common::backend(&dsn, &common::unique_schema("walks"));
    let alice = Caller::new("alice").with_agent("coder");
    common::capture_numbered(&b, &alice, 200, 100, |n| {
        let mut text = format!("frequent filler number{n}");
        if n % 9 == 0 {
            text.push_str(" uncommon seldom");
        }
        if n < 5000 {
            text.push_str(" older");
        }
        // Threads are 100 long, so a thread's even messages are the user's.
        if n % 2 == 0 {
            Message::human(text)
        } else {
            Message::ai(text)
        }
    })
    .await;
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
    let walks = |counts: &[(usize, &str)]| choose(counts, 20_000).unwrap().newest_walks(pool);
    // "uncommon" and "seldom" (2 223 each of 20 000): together expected in
    // ~247 turns, so their postings are the fewer rows to read (they are
    // always together, so 2 223 match).
    assert_eq!(
        walks(&[(2223, "uncommon"), (2223, "seldom")]).unwrap().0,
        Walk::Postings
    );
    let hits = b.search(&alice, &top("uncommon seldom")).await.unwrap();
    assert_eq!(numbers(&hits), [19998, 19989, 19980, 19971, 19962]);
    // "frequent" (every turn): the newest turns are the fewer rows.
    assert!(matches!(
        walks(&[(20_000, "frequent")]).unwrap().0,
        Walk::Recent { .. }
    ));
    let hits = b.search(&alice, &top("frequent")).await.unwrap();
    assert_eq!(numbers(&hits), [19999, 19998, 19997, 19996, 19995]);
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_window_holding_too_few_matches_gives_way_to_the_postings() {
    let (b, alice) = filled().await;
    let pool = memgate_recall::ranked::candidate_pool(5);
    // "older frequent": 5 000 × 20 000 / 20 000 expected together, so the
    // plan walks the newest turns, which hold none of them.
    let plan = choose(&[(5000, "older"), (20_000, "frequent")], 20_000).unwrap();
    assert!(matches!(
        plan.newest_walks(pool).unwrap().0,
        Walk::Recent { rows } if rows < 15_000
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
    assert_eq!(numbers(&hits), [4999, 4998, 4997, 4996, 4995]);
}
