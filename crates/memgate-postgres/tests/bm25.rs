//! Lexical ranking on a real PostgreSQL is BM25 over every present query
//! term (`memgate_postgres::plan::Bm25`), the common ones scored at the
//! walked documents: a document holding the rare term *and* a common one
//! outranks those holding the rare term alone, even when it is the oldest,
//! and the rare term outweighs the common one.

mod common;

use memgate_core::{Caller, MemoryBackend, Message, SearchQuery};

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
    common::capture_numbered(&b, &alice, 20, 100, |n| {
        let first = if n % 200 == 0 { "quartz" } else { "pebble" };
        let second = if n == 0 || (n < 650 && n % 200 != 0) {
            "harbour"
        } else {
            "meadow"
        };
        Message::human(format!("{first} {second} filler number{n}"))
    })
    .await;
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

/// The score statement (`Bm25::score_sql`) is BM25 as documented: per
/// present lexeme `idf × tf × (k1 + 1) / (tf + k1 × (1 - b + b × len /
/// avg))`, `tf` 1.0 in the body and 0.5 in the context only, nothing for an
/// absent lexeme; computed here in Rust for a body "harbour stones" with
/// context "quartz" (3 lexemes), against PostgreSQL's answer.
#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn the_score_statement_weighs_body_and_context_lexemes_as_bm25() {
    use memgate_postgres::plan::Bm25;
    let client = common::connect(&common::dsn()).await;
    let bm25 = Bm25::new(
        &[(3, "harbour"), (50, "quartz"), (400, "meadow")],
        1000,
        12_000,
    );
    // $1-$4 stand for the recall statement's scope, query and pool.
    let sql = format!(
        "SELECT {}::float8, $1::text, $2::text, $3::text, $4::int8
         FROM (SELECT {} AS search) m",
        bm25.score_sql(),
        memgate_postgres::terms::search_vector("'harbour stones'", "'quartz'")
    );
    let got: f64 = client
        .query_one(
            &sql,
            &[
                &"",
                &"",
                &"",
                &0i64,
                &bm25.lexemes,
                &bm25.idf,
                &bm25.avg_len,
            ],
        )
        .await
        .unwrap()
        .get(0);
    let norm = 1.2 * (0.25 + 0.75 * 3.0 / bm25.avg_len);
    let part = |idf: f64, tf: f64| idf * tf * 2.2 / (tf + norm);
    let want = part(bm25.idf[0], 1.0) + part(bm25.idf[1], 0.5);
    assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
}
