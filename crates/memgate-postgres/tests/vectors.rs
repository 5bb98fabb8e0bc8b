//! Hybrid recall's vectors on a real PostgreSQL with pgvector
//! (`MEMGATE_TEST_PGVECTOR_DSN`, `testkit/postgres-up --pgvector`), and the
//! refusal on one without it (`MEMGATE_TEST_POSTGRES_DSN`, Debian's, which
//! has no pgvector package): what the database holds after each write and
//! erasure, replicas indexing at once, the background indexer, `doctor`.
//! The hybrid ranking itself is in the conformance suite (both backends).

mod common;

use common::connect;
use memgate_conformance::hybrid::ConceptEmbedder;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, ForgetTarget, MemoryBackend, MemoryError, Message,
    RememberRequest,
};
use memgate_postgres::PostgresBackend;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn count(dsn: &str, sql: &str) -> i64 {
    connect(dsn).await.query_one(sql, &[]).await.unwrap().get(0)
}

fn hybrid(dsn: &str, schema: &str) -> PostgresBackend {
    common::backend(dsn, schema).with_embedder(ConceptEmbedder::new("concepts/5"))
}

fn turns(caller: &Caller, thread: &str, texts: &[String]) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone().with_thread(thread),
        messages: texts.iter().map(|t| Message::human(t.clone())).collect(),
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL without pgvector (testkit/postgres-up)"]
async fn an_embedder_without_pgvector_is_a_config_error_naming_the_setting() {
    let dsn = common::dsn();
    let schema = common::unique_schema("nopgv");
    let b = hybrid(&dsn, &schema);
    let e = b.warm().await.unwrap_err();
    assert!(matches!(e, MemoryError::Config(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("backend_config.embedder") && text.contains("pgvector"),
        "{text}"
    );
    // Nothing was changed: the migration rolled back as a whole.
    let exists = count(
        &dsn,
        &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'"),
    )
    .await;
    assert_eq!(exists, 0);
    // Without the embedder the same schema is full-text memory as before.
    let plain = common::backend(&dsn, &schema);
    plain.warm().await.unwrap();
    let caller = Caller::new("alice");
    plain
        .remember(&caller, &RememberRequest::new("fact", "Likes tea").unwrap())
        .await
        .unwrap();
    assert!(!plain.doctor().await.unwrap().hybrid_vectors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn erasure_leaves_no_vector_and_no_queued_item_behind() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pgverase");
    let b = hybrid(&dsn, &schema);
    let (alice, bob) = (Caller::new("alice"), Caller::new("bob"));
    let texts: Vec<String> = (0..5).map(|i| format!("my kitten number {i}")).collect();
    for caller in [&alice, &bob] {
        b.capture(&turns(caller, "t", &texts)).await.unwrap();
        b.remember(
            caller,
            &RememberRequest::new("fact", "Drives a car").unwrap(),
        )
        .await
        .unwrap();
    }
    b.index_all_vectors(4).await.unwrap();
    let vectors = format!("SELECT count(*) FROM {schema}.vectors");
    let queued = format!("SELECT count(*) FROM {schema}.vector_queue");
    assert_eq!(count(&dsn, &vectors).await, 12);
    assert_eq!(count(&dsn, &queued).await, 0);
    // Every vector carries the scope of its item.
    let misplaced = count(
        &dsn,
        &format!(
            "SELECT count(*) FROM {schema}.vectors v
             LEFT JOIN {schema}.turns t ON t.id = v.turn_id
             LEFT JOIN {schema}.memories m ON m.id = v.memory_id
             WHERE v.scope_id <> coalesce(t.scope_id, m.scope_id)"
        ),
    )
    .await;
    assert_eq!(misplaced, 0);
    // Captured but not yet embedded, then erased: the queue forgets it too.
    b.capture(&turns(&alice, "t2", &["a pet cat".to_owned()]))
        .await
        .unwrap();
    b.forget(&alice, &ForgetTarget::Scope).await.unwrap();
    assert_eq!(count(&dsn, &vectors).await, 6);
    assert_eq!(count(&dsn, &queued).await, 0);
    b.forget(&bob, &ForgetTarget::User).await.unwrap();
    assert_eq!(count(&dsn, &vectors).await, 0);
    let p = b.vector_progress().await.unwrap();
    assert_eq!((p.embedded, p.total), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn replicas_capturing_and_indexing_at_once_embed_each_item_once() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pgvrep");
    let replicas: Vec<Arc<PostgresBackend>> =
        (0..2).map(|_| Arc::new(hybrid(&dsn, &schema))).collect();
    // Both migrate at once (the vector step too) under the advisory lock.
    let (a, b) = tokio::join!(replicas[0].migrate(), replicas[1].migrate());
    a.unwrap();
    b.unwrap();
    let mut tasks = Vec::new();
    for (i, r) in replicas.iter().enumerate() {
        for t in 0..4 {
            let r = Arc::clone(r);
            tasks.push(tokio::spawn(async move {
                let texts: Vec<String> = (0..25)
                    .map(|n| format!("replica {i} thread {t} pet {n}"))
                    .collect();
                r.capture(&turns(&Caller::new("alice"), &format!("r{i}t{t}"), &texts))
                    .await
                    .unwrap();
                r.index_all_vectors(8).await.unwrap()
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (x, y) = tokio::join!(
        replicas[0].index_all_vectors(8),
        replicas[1].index_all_vectors(8)
    );
    x.unwrap();
    y.unwrap();
    assert_eq!(
        count(&dsn, &format!("SELECT count(*) FROM {schema}.vectors")).await,
        200
    );
    assert_eq!(
        count(&dsn, &format!("SELECT count(*) FROM {schema}.vector_queue")).await,
        0
    );
    let lines = replicas[1].diagnose().await;
    let vectors = lines
        .iter()
        .find(|d| d.check == "vectors")
        .expect("a vectors line");
    assert!(
        vectors
            .detail
            .contains("200 / 200 items embedded with concepts/5"),
        "{vectors:?}"
    );
    assert!(replicas[1].doctor().await.unwrap().hybrid_vectors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn the_background_indexer_catches_up_by_itself() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pgvbg");
    let b = hybrid(&dsn, &schema);
    let texts: Vec<String> = (0..40).map(|n| format!("kitten fact {n}")).collect();
    b.capture(&turns(&Caller::new("alice"), "t", &texts))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // The counter is bumped after the batch's commit, so a reader can see the
    // rows a moment before the count: wait for both, under one deadline.
    loop {
        let p = b.vector_progress().await.unwrap();
        let written = b.retrieval_counts().vectors_written;
        if p.embedded == 40 && written >= 40 {
            assert_eq!(p.total, 40);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "indexer stuck at {p:?}, {written} vectors counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
