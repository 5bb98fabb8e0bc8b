//! The retention sweep on a real PostgreSQL (`backend_config.max_turn_age_days`,
//! `memgate_postgres::retention`): `local`'s semantics — captured turns
//! older than the maximum age are erased in bounded batches, with the
//! distilled facts resting only on them and their history; a fact that
//! also rests on a kept turn loses the expired source and stays; explicit
//! facts stay. Ignored without `testkit/postgres-up`.

mod common;

use memgate_core::distill::{DistillQueue, Operation, ProposedFact, QueueLimits};
use memgate_core::facts::ExportedTurn;
use memgate_core::forget::SWEEP_BATCH;
use memgate_core::{
    BackendContext, Caller, CaptureKind, CaptureRequest, MemoryBackend, MemoryExport, Message,
    RememberRequest,
};
use memgate_postgres::{PostgresBackend, PostgresConfig};
use serde_json::json;
use std::time::{Duration, Instant, SystemTime};

const LIMITS: QueueLimits = QueueLimits {
    max_turns_per_job: 32,
    max_queued_jobs: 100,
    lease: Duration::from_secs(300),
};

fn dana(thread: &str) -> Caller {
    Caller::new("dana").with_thread(thread)
}

fn aged(dsn: &str, schema: &str) -> PostgresConfig {
    let mut config = common::config(dsn, schema);
    config.max_turn_age = Some(Duration::from_secs(86_400 * 30));
    config
}

/// Turns of `thread` captured in 2020 (an import keeps `captured_at`).
fn old_turns(thread: &str, texts: &[String]) -> MemoryExport {
    let turns = texts
        .iter()
        .map(|text| ExportedTurn {
            thread: thread.into(),
            role: "human".into(),
            text: text.clone(),
            signature: format!("{:064x}", fxhash(thread, text)),
            captured_at: Some("2020-01-01T00:00:00.000Z".into()),
        })
        .collect();
    MemoryExport::new(Vec::new(), turns)
}

/// A stable signature per (thread, text) for the import.
fn fxhash(thread: &str, text: &str) -> u128 {
    let mut h: u128 = 0xcbf2_9ce4_8422_2325;
    for b in thread.bytes().chain([0]).chain(text.bytes()) {
        h = (h ^ u128::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

async fn capture(backend: &PostgresBackend, thread: &str, text: &str) {
    let request = CaptureRequest {
        caller: dana(thread),
        messages: vec![Message::human(text)],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    backend.capture(&request).await.unwrap();
}

fn proposal(text: &str, sources: &[&str]) -> ProposedFact {
    ProposedFact {
        kind: "fact".into(),
        text: text.into(),
        confidence: 0.8,
        sources: sources.iter().map(|s| (*s).to_owned()).collect(),
    }
}

async fn turn_texts(backend: &PostgresBackend) -> Vec<String> {
    let mut texts: Vec<String> = backend
        .export(&dana("x"))
        .await
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.text)
        .collect();
    texts.sort();
    texts
}

#[tokio::test]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn the_sweep_erases_expired_turns_in_batches_with_the_facts_resting_only_on_them() {
    let dsn = common::dsn();
    let schema = common::unique_schema("retention");
    let backend = PostgresBackend::new(aged(&dsn, &schema))
        .unwrap()
        .with_distill(LIMITS);
    // Two turns said in 2020, distilled with a third said now.
    let march = ["I keep bees.", "The bees live on the roof."].map(String::from);
    backend
        .import(&dana("march"), &old_turns("march", &march))
        .await
        .unwrap();
    assert_eq!(backend.queue_backfill().await.unwrap(), 1);
    capture(&backend, "march", "They make honey.").await;
    let job = backend.next_jobs(1, &[]).await.unwrap().remove(0);
    assert_eq!(job.turns.len(), 3, "{job:?}");
    let ops = [
        Operation::Add(proposal("Dana keeps bees", &["turn_1"])),
        Operation::Add(proposal(
            "Dana's bees make honey on the roof",
            &["turn_2", "turn_3"],
        )),
    ];
    assert_eq!(backend.apply(&job, &ops).await.unwrap().added, 2);
    // The old-only fact gets a second version: superseded by one resting
    // on a turn said now.
    capture(&backend, "march", "We now keep two hives.").await;
    let job = backend.next_jobs(1, &[]).await.unwrap().remove(0);
    let supersede = Operation::Supersede {
        fact: "mem_1".into(),
        by: proposal("Dana keeps two hives of bees", &["turn_4"]),
    };
    assert_eq!(
        backend.apply(&job, &[supersede]).await.unwrap().superseded,
        1
    );
    let explicit = RememberRequest::new("fact", "Dana likes honey").unwrap();
    backend.remember(&dana("x"), &explicit).await.unwrap();
    assert_eq!(
        backend
            .fact_history(&dana("x"), "mem_1")
            .await
            .unwrap()
            .len(),
        2
    );
    // More expired turns than one batch holds.
    let ancient: Vec<String> = (0..SWEEP_BATCH + 7)
        .map(|i| format!("an old turn {i} about bilby9904"))
        .collect();
    backend
        .import(&dana("ancient"), &old_turns("ancient", &ancient))
        .await
        .unwrap();

    let erased = backend
        .sweep_expired_turns(SystemTime::now())
        .await
        .unwrap();
    assert_eq!(erased, 2 + SWEEP_BATCH + 7);
    assert_eq!(
        turn_texts(&backend).await,
        ["They make honey.", "We now keep two hives."]
    );
    // The fact resting only on an expired turn is gone with its history;
    // the one also resting on a kept turn stays with that source; the
    // successor and the explicit fact stay.
    let facts = backend.list_facts(&dana("x"), true).await.unwrap();
    let mut texts: Vec<&str> = facts.iter().map(|f| f.text.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(
        texts,
        [
            "Dana keeps two hives of bees",
            "Dana likes honey",
            "Dana's bees make honey on the roof"
        ]
    );
    assert!(backend.get_fact(&dana("x"), "mem_1").await.is_err());
    assert!(backend
        .fact_history(&dana("x"), "mem_1")
        .await
        .map_or(true, |h| h.is_empty()));
    let honey = facts.iter().find(|f| f.text.contains("roof")).unwrap();
    assert_eq!(honey.sources, ["turn_3"]);
    let hives = facts.iter().find(|f| f.text.contains("hives")).unwrap();
    assert!(hives.is_current());
    let client = common::connect(&dsn).await;
    let words: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {schema}.term_docs WHERE lexeme = 'bilby9904'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(words, 0, "the recall index keeps no word of an erased turn");
    // Nothing left to sweep.
    assert_eq!(
        backend
            .sweep_expired_turns(SystemTime::now())
            .await
            .unwrap(),
        0
    );

    // Without a maximum age nothing is swept.
    let keep = common::backend(&dsn, &schema);
    keep.import(&dana("old"), &old_turns("old", &["kept".to_owned()]))
        .await
        .unwrap();
    assert_eq!(
        keep.sweep_expired_turns(SystemTime::now()).await.unwrap(),
        0
    );
    assert!(turn_texts(&keep).await.contains(&"kept".to_owned()));
}

#[tokio::test]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn a_backend_with_a_maximum_turn_age_sweeps_in_the_background() {
    let dsn = common::dsn();
    let schema = common::unique_schema("retention_bg");
    let plain = common::backend(&dsn, &schema);
    plain
        .import(&dana("old"), &old_turns("old", &["an old turn".to_owned()]))
        .await
        .unwrap();
    capture(&plain, "fresh", "a fresh turn").await;
    assert_eq!(turn_texts(&plain).await.len(), 2);

    let dir = tempfile::tempdir().unwrap();
    let config = json!({"dsn": dsn, "schema": schema, "max_turn_age_days": 30});
    let aged = PostgresBackend::from_backend_config(
        config.as_object().unwrap(),
        &BackendContext::new(dir.path()),
    )
    .unwrap();
    // Its first use starts the sweep (after the migration check).
    aged.warm().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while turn_texts(&plain).await.len() > 1 {
        assert!(
            Instant::now() < deadline,
            "the background sweep did not run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(turn_texts(&plain).await, ["a fresh turn"]);
}
