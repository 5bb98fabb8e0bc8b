//! `term_docs` (schema migration 2) and `scope_docs` (migration 8) on a real
//! PostgreSQL: the per-scope document count of each lexeme that recall
//! planning reads, and each scope's document and length totals BM25 reads.
//! They must equal a recount of the stored rows after every kind of write,
//! keep no word of erased text, survive concurrent captures of one scope,
//! and be built in place when a version-1 schema is upgraded.

mod common;

use common::connect;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, FactPatch, ForgetTarget, MemoryBackend, Message,
    RecallRequest, RememberOutcome, RememberRequest,
};
use std::sync::Arc;

/// Rows where `term_docs` or `scope_docs` and a recount of turns + active
/// memories differ (0 when exact), and how many lexeme counts there are.
async fn drift(dsn: &str, schema: &str) -> (i64, i64) {
    let client = connect(dsn).await;
    let totals = format!(
        "SELECT scope_id, count(*) AS docs, sum(length(search)) AS lexemes
         FROM (SELECT scope_id, search FROM {schema}.turns
               UNION ALL
               SELECT scope_id, search FROM {schema}.memories WHERE state = 'active') r
         GROUP BY 1"
    );
    let kept = format!("SELECT scope_id, docs, lexemes FROM {schema}.scope_docs");
    let totals_differ: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM (({kept} EXCEPT {totals}) UNION ALL ({totals} EXCEPT {kept})) d"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let recount = format!(
        "SELECT scope_id, lexeme, count(*) AS docs
         FROM (SELECT scope_id, search FROM {schema}.turns
               UNION ALL
               SELECT scope_id, search FROM {schema}.memories WHERE state = 'active') r,
              unnest(tsvector_to_array(search)) AS lexeme
         GROUP BY 1, 2"
    );
    let stored = format!("SELECT scope_id, lexeme, docs FROM {schema}.term_docs");
    let row = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM (({stored} EXCEPT {recount})
                                               UNION ALL ({recount} EXCEPT {stored})) d),
                        (SELECT count(*) FROM {schema}.term_docs)"
            ),
            &[],
        )
        .await
        .unwrap();
    (row.get::<_, i64>(0) + totals_differ, row.get(1))
}

async fn lexeme_count(dsn: &str, schema: &str, lexeme: &str) -> i64 {
    connect(dsn)
        .await
        .query_one(
            &format!("SELECT count(*) FROM {schema}.term_docs WHERE lexeme = $1"),
            &[&lexeme],
        )
        .await
        .unwrap()
        .get(0)
}

fn capture(caller: &Caller, thread: &str, texts: &[&str]) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone().with_thread(thread),
        messages: texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let m = if i % 2 == 0 {
                    Message::human(*t)
                } else {
                    Message::ai(*t)
                };
                m.with_id(format!("{thread}-{i}"))
            })
            .collect(),
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

async fn remember(b: &dyn MemoryBackend, caller: &Caller, text: &str) -> String {
    match b
        .remember(caller, &RememberRequest::new("fact", text).unwrap())
        .await
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("expected stored, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn counts_equal_a_recount_after_every_kind_of_write() {
    let dsn = common::dsn();
    let schema = common::unique_schema("docs");
    let b = common::backend(&dsn, &schema);
    let alice = Caller::new("alice").with_agent("coder");
    let bob = Caller::new("bob").with_agent("coder");
    let exact = |label: &'static str| {
        let (dsn, schema) = (dsn.clone(), schema.clone());
        async move {
            let (differ, counts) = drift(&dsn, &schema).await;
            assert_eq!(differ, 0, "term_docs drifted after {label}");
            counts
        }
    };
    b.capture(&capture(
        &alice,
        "t1",
        &["my editor is emacs", "noted, emacs with evil mode"],
    ))
    .await
    .unwrap();
    b.capture(&capture(&alice, "t2", &["the kettle whistles", "zanzibar"]))
        .await
        .unwrap();
    b.capture(&capture(&bob, "t1", &["bob likes zanzibar too"]))
        .await
        .unwrap();
    assert!(exact("capture").await > 0);
    // Capturing the same snapshot again stores nothing and counts nothing.
    b.capture(&capture(&alice, "t2", &["the kettle whistles", "zanzibar"]))
        .await
        .unwrap();
    exact("a repeated capture").await;
    let shell = remember(&b, &alice, "my shell is fish").await;
    let editor = remember(&b, &alice, "my editor is helix").await;
    b.remember(
        &alice,
        &RememberRequest::new("fact", "my shell is fish").unwrap(),
    )
    .await
    .unwrap();
    exact("remember").await;
    b.revise_fact(
        &alice,
        &shell,
        &FactPatch {
            kind: None,
            text: Some("my shell is nushell".into()),
            confidence: None,
        },
    )
    .await
    .unwrap();
    exact("revise").await;
    assert_eq!(lexeme_count(&dsn, &schema, "fish").await, 0, "revised away");
    b.retire_fact(&alice, &editor).await.unwrap();
    exact("retire").await;
    assert_eq!(lexeme_count(&dsn, &schema, "helix").await, 0, "retired");
    let export = b.export(&alice).await.unwrap();
    let carol = Caller::new("carol").with_agent("coder");
    b.import(&carol, &export).await.unwrap();
    exact("import").await;
    b.forget(&alice.clone().with_thread("t2"), &ForgetTarget::Thread)
        .await
        .unwrap();
    exact("forget thread").await;
    // bob's zanzibar is still counted, alice's is gone.
    assert_eq!(
        lexeme_count(&dsn, &schema, "kettl").await,
        1,
        "carol's copy"
    );
    b.forget(&alice, &ForgetTarget::Fact { id: shell })
        .await
        .unwrap();
    exact("forget fact").await;
    b.forget(&carol, &ForgetTarget::Scope).await.unwrap();
    b.forget(&alice, &ForgetTarget::Scope).await.unwrap();
    exact("forget scope").await;
    // No word of an erased scope stays behind; bob's remain.
    assert_eq!(lexeme_count(&dsn, &schema, "kettl").await, 0);
    assert_eq!(lexeme_count(&dsn, &schema, "emac").await, 0);
    assert_eq!(lexeme_count(&dsn, &schema, "zanzibar").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn concurrent_captures_of_one_scope_from_two_replicas_count_exactly() {
    let dsn = common::dsn();
    let schema = common::unique_schema("docs_race");
    let replicas = [
        Arc::new(common::backend(&dsn, &schema)),
        Arc::new(common::backend(&dsn, &schema)),
    ];
    replicas[0].migrate().await.unwrap();
    let alice = Caller::new("alice").with_agent("coder");
    let mut tasks = Vec::new();
    // 16 threads share most words, so their count rows are contended; the
    // counts are upserted in key order, so no two captures deadlock.
    for t in 0..16 {
        let b = Arc::clone(&replicas[t % 2]);
        let alice = alice.clone();
        tasks.push(tokio::spawn(async move {
            let texts: Vec<String> = (0..20)
                .map(|i| format!("shared words alpha beta gamma delta turn{i} thread{t}"))
                .collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            b.capture(&capture(&alice, &format!("t{t}"), &texts))
                .await
                .unwrap()
                .stored
        }));
    }
    let mut stored = 0;
    for t in tasks {
        stored += t.await.unwrap();
    }
    assert_eq!(stored, 16 * 20);
    let (differ, _) = drift(&dsn, &schema).await;
    assert_eq!(differ, 0);
    let alpha: i64 = connect(&dsn)
        .await
        .query_one(
            &format!("SELECT docs FROM {schema}.term_docs WHERE lexeme = 'alpha'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(alpha, 16 * 20);
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_version_1_schema_is_counted_in_place_on_upgrade() {
    let dsn = common::dsn();
    let schema = common::unique_schema("docs_upgrade");
    let config = common::config(&dsn, &schema);
    let mut client = connect(&dsn).await;
    assert_eq!(
        memgate_postgres::schema::migrate(&mut client, &config, 1)
            .await
            .unwrap(),
        0
    );
    // Rows as version-1 memgate wrote them (no term_docs, no triggers).
    client
        .batch_execute(&format!(
            "SET search_path = {schema};
             INSERT INTO scopes (user_id, peer) VALUES ('alice', 'coder');
             INSERT INTO turns (scope_id, thread, seq, signature, role, text, captured_at, search)
             SELECT 1, 'old', g, 'sig' || g, 'human', 'filler words ' || g, 'x',
                    setweight(to_tsvector('english', 'filler words ' || g), 'A')
             FROM generate_series(1, 700) g;
             INSERT INTO turns (scope_id, thread, seq, signature, role, text, captured_at, search)
             VALUES (1, 'old', 701, 'sig701', 'human', 'the quokka filler', 'x',
                     setweight(to_tsvector('english', 'quokka filler'), 'A'));
             INSERT INTO memories (scope_id, kind, text, state, version, created_at, updated_at, search)
             VALUES (1, 'fact', 'retired quokka', 'retired', 2, 'x', 'x',
                     setweight(to_tsvector('english', 'retired quokka'), 'A'));
             RESET search_path;"
        ))
        .await
        .unwrap();
    let b = common::backend(&dsn, &schema);
    assert_eq!(b.migrate().await.unwrap(), 1, "found version 1");
    assert_eq!(
        b.doctor().await.unwrap().schema_version,
        memgate_postgres::SCHEMA_VERSION
    );
    let (differ, counts) = drift(&dsn, &schema).await;
    assert_eq!(differ, 0);
    assert!(counts > 700, "{counts}");
    assert_eq!(
        lexeme_count(&dsn, &schema, "retir").await,
        0,
        "retired: not counted"
    );
    // Planning reads the new counts: "filler" (701 turns) is common, "quokka"
    // rare, so the quokka turn ranks first.
    let recall = b
        .recall(&RecallRequest {
            caller: Caller::new("alice").with_agent("coder"),
            query: Some("filler quokka".into()),
        })
        .await
        .unwrap();
    assert!(
        recall
            .items
            .first()
            .is_some_and(|i| i.text.contains("quokka")),
        "{:?}",
        recall.items
    );
    // New writes are counted by the triggers the upgrade installed.
    b.capture(&capture(
        &Caller::new("alice").with_agent("coder"),
        "new",
        &["quokka again"],
    ))
    .await
    .unwrap();
    assert_eq!(drift(&dsn, &schema).await.0, 0);
}
