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
use memgate_embed::Embedder;
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

/// Distinct unit vectors seeded by the text (no ties, unlike the concept
/// embedder, so the nearest items are one list whichever way they are found).
struct SeededEmbedder;

impl Embedder for SeededEmbedder {
    fn model(&self) -> &str {
        "seeded/32"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memgate_embed::EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut state = t.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                let mut v: Vec<f32> = (0..32)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state % 2001) as f32 / 1000.0 - 1.0
                    })
                    .collect();
                memgate_embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

/// The plan of nearest-items statement `sql` as it ran for `user`'s scope
/// and [`SeededEmbedder`]'s vector of `query` (`EXPLAIN ANALYZE`: a branch
/// that did not run says "never executed"), with scans priced out (and
/// `more` settings): small tables are cheaper to scan, so the planner
/// rightly scans them, and a test of which index serves a statement must
/// take that choice away (under generic plans, as memgate runs them).
async fn seeded_plan(
    dsn: &str,
    schema: &str,
    sql: &str,
    user: &str,
    query: &str,
    more: &str,
) -> Vec<String> {
    let c = connect(dsn).await;
    c.batch_execute(&format!(
        "SET search_path = {schema}; SET plan_cache_mode = force_generic_plan;
         SET enable_seqscan = off; SET enable_bitmapscan = off{more}"
    ))
    .await
    .unwrap();
    let statement = c
        .prepare(&format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}"
        ))
        .await
        .unwrap();
    let query = SeededEmbedder.embed(&[query]).unwrap().remove(0);
    let peer: String = c
        .query_one("SELECT peer FROM scopes WHERE user_id = $1", &[&user])
        .await
        .unwrap()
        .get(0);
    let key = memgate_recall::vectors::vector_key("seeded/32");
    c.query(
        &statement,
        &[
            &user,
            &peer,
            &memgate_postgres::vectors::VectorParam(&query),
            &key,
            &50_i64,
        ],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Whether a node of the plan naming `node` ran (`None`: no such node).
fn ran(plan: &[String], node: &str) -> Option<bool> {
    let mut nodes = plan.iter().filter(|l| l.contains(node)).peekable();
    nodes.peek()?;
    Some(nodes.any(|l| !l.contains("never executed")))
}

/// The HNSW index of [`SeededEmbedder`]'s vectors.
fn seeded_index() -> String {
    memgate_postgres::hnsw::index_name(&memgate_recall::vectors::vector_key("seeded/32"), 32)
}

fn vector_index_line(lines: &[memgate_core::Diagnostic]) -> String {
    lines
        .iter()
        .find(|d| d.check == "vector index")
        .map(|d| d.detail.clone())
        .expect("a vector index line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn the_hnsw_index_is_built_once_serves_the_nearest_statement_and_recall_matches_exact() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pghnsw");
    // A scope of 400 items goes through the index from 100 on.
    let approximate = PostgresBackend::new(common::config(&dsn, &schema).with_vector_index(
        memgate_postgres::VectorIndex::Hnsw {
            ef_search: 50,
            min_items: 100,
        },
    ))
    .unwrap()
    .with_embedder(Arc::new(SeededEmbedder));
    let exact = PostgresBackend::new(
        common::config(&dsn, &schema).with_vector_index(memgate_postgres::VectorIndex::Exact),
    )
    .unwrap()
    .with_embedder(Arc::new(SeededEmbedder));
    let alice = Caller::new("alice");
    let texts: Vec<String> = (0..400)
        .map(|n| format!("note number {n} about pets"))
        .collect();
    approximate
        .capture(&turns(&alice, "t", &texts))
        .await
        .unwrap();
    // Another scope's vectors share the index and must never be recalled.
    let bob = Caller::new("bob");
    approximate
        .capture(&turns(&bob, "t", &texts))
        .await
        .unwrap();
    approximate.index_all_vectors(64).await.unwrap();
    let before = vector_index_line(&approximate.diagnose().await);
    assert!(before.contains("not built yet"), "{before}");
    assert!(vector_index_line(&exact.diagnose().await).contains("vector_index: exact"));

    assert!(approximate.build_vector_index().await.unwrap());
    assert!(
        !approximate.build_vector_index().await.unwrap(),
        "built twice"
    );
    let name = seeded_index();
    let definition: String = connect(&dsn)
        .await
        .query_one(
            "SELECT pg_get_indexdef(c.oid) || ' valid=' || i.indisvalid FROM pg_class c
             JOIN pg_index i ON i.indexrelid = c.oid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        definition.contains("USING hnsw")
            && definition.contains("vector(32)")
            && definition.contains("valid=true"),
        "{definition}"
    );
    let ready = vector_index_line(&approximate.diagnose().await);
    assert!(ready.contains("hnsw: ready"), "{ready}");

    for query in ["note number 7", "pets of note 123", "number 399"] {
        let request = memgate_core::RecallRequest {
            caller: alice.clone(),
            query: Some(query.to_owned()),
        };
        let (a, e) = (
            approximate.recall(&request).await.unwrap(),
            exact.recall(&request).await.unwrap(),
        );
        assert!(!a.items.is_empty());
        assert_eq!(a.items, e.items, "{query}");
        assert!(!a.text.contains("bob"));
    }
    // The statement must be one the index serves (its expression and
    // partial predicate).
    let key = memgate_recall::vectors::vector_key("seeded/32");
    let sql = memgate_postgres::vectors::hnsw_nearest_sql(&key, 32, 100);
    let plan = seeded_plan(&dsn, &schema, &sql, "alice", "note number 7", "").await;
    assert_eq!(
        ran(&plan, &format!("Index Scan using {name}")),
        Some(true),
        "{plan:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn the_background_builder_builds_the_hnsw_index_and_rebuilds_a_dead_build() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pghnswbg");
    let b = common::backend(&dsn, &schema).with_embedder(Arc::new(SeededEmbedder));
    let texts: Vec<String> = (0..50).map(|n| format!("line {n}")).collect();
    b.capture(&turns(&Caller::new("alice"), "t", &texts))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = b.vector_index_state().await.unwrap();
        if matches!(state, memgate_postgres::hnsw::IndexState::Ready { .. }) {
            break;
        }
        assert!(Instant::now() < deadline, "never built: {state:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A build that died leaves an invalid index (marked so here, as a
    // cancelled CREATE INDEX CONCURRENTLY would): dropped and built again.
    let name = seeded_index();
    connect(&dsn)
        .await
        .execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)",
            &[&format!("{schema}.{name}")],
        )
        .await
        .unwrap();
    assert_eq!(
        b.vector_index_state().await.unwrap(),
        memgate_postgres::hnsw::IndexState::Missing
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = b.vector_index_state().await.unwrap();
        if matches!(state, memgate_postgres::hnsw::IndexState::Ready { .. }) {
            break;
        }
        assert!(Instant::now() < deadline, "never rebuilt: {state:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A hybrid search's backend with `pool_size` connections.
fn seeded_with_pool(dsn: &str, schema: &str, pool_size: usize) -> PostgresBackend {
    let mut config = common::config(dsn, schema);
    config.pool_size = pool_size;
    PostgresBackend::new(config)
        .unwrap()
        .with_embedder(Arc::new(SeededEmbedder))
}

/// Tests that look in `pg_stat_activity` for their own search's
/// statements take turns: another test's search would look like theirs.
static ACTIVITY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Searches `query` in `alice`'s scope while a session on the primary
/// (`dsn`) holds `term_docs` (the full text's first statement reads it; a
/// standby replays the lock): true when the nearest-items statement ran to
/// the end on the server the search reads (`reads`, the primary or its
/// standby) within `within` meanwhile, i.e. on a second connection beside
/// the blocked full text.
async fn nearest_ran_beside_blocked_full_text(
    dsn: &str,
    reads: &str,
    schema: &str,
    backend: &Arc<PostgresBackend>,
    query: &str,
    within: Duration,
) -> bool {
    let mut locker = connect(dsn).await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "LOCK TABLE {schema}.term_docs IN ACCESS EXCLUSIVE MODE"
    ))
    .await
    .unwrap();
    let locked_at: std::time::SystemTime = tx
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    let watcher = connect(reads).await;
    // A standby holds the lock once it has replayed it.
    let held = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND granted
         AND mode = 'AccessExclusiveLock' AND relation = '{schema}.term_docs'::regclass"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while watcher
        .query_one(&held, &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the lock never reached {reads:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let search = tokio::spawn({
        let backend = Arc::clone(backend);
        let query = memgate_core::SearchQuery::new(query);
        async move { backend.search(&Caller::new("alice"), &query).await }
    });
    common::until_a_statement_waits_for_a_lock(&watcher, "term_docs").await;
    // The nearest-items statement is pipelined behind the blocked one on a
    // single connection; on a second one it finishes while the full text
    // still waits on the first. Looked for until it shows or `within` has
    // passed (a loaded machine may take a while).
    let started = Instant::now();
    let mut finished = false;
    while !finished && started.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ended: i64 = watcher
            .query_one(
                &format!(
                    "SELECT count(*) FROM pg_stat_activity n, pg_stat_activity w
                     WHERE n.state = 'idle' AND n.query LIKE '%OPERATOR(public.<#>)%'
                       AND n.query LIKE '%LIMIT%' AND n.state_change >= $1
                       AND w.pid <> n.pid AND w.pid IN (
                           SELECT pid FROM pg_locks WHERE NOT granted
                           AND relation = '{schema}.term_docs'::regclass)"
                ),
                &[&locked_at],
            )
            .await
            .unwrap()
            .get(0);
        finished = ended > 0;
    }
    tx.rollback().await.unwrap();
    let hits = search.await.unwrap().unwrap();
    assert!(!hits.is_empty(), "{query}");
    finished
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn the_nearest_items_search_runs_beside_the_full_text_only_on_a_spare_connection() {
    let _turn = ACTIVITY.lock().await;
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pgbeside");
    let alice = Caller::new("alice");
    let texts: Vec<String> = (0..300)
        .map(|n| format!("note number {n} about pets and plans"))
        .collect();
    let beside = Arc::new(seeded_with_pool(&dsn, &schema, 4));
    beside.capture(&turns(&alice, "t", &texts)).await.unwrap();
    beside.index_all_vectors(64).await.unwrap();
    // One connection: nothing to spare, the search runs after the full text.
    let single = Arc::new(seeded_with_pool(&dsn, &schema, 1));
    for query in ["note number 7", "pets of note 123", "plans 299"] {
        let search = memgate_core::SearchQuery::new(query);
        let (b, s) = (
            beside.search(&alice, &search).await.unwrap(),
            single.search(&alice, &search).await.unwrap(),
        );
        assert!(!b.is_empty(), "{query}");
        assert_eq!(b, s, "{query}: the same ranking either way");
    }
    assert!(
        nearest_ran_beside_blocked_full_text(
            &dsn,
            &dsn,
            &schema,
            &beside,
            "note number 42",
            Duration::from_secs(20)
        )
        .await,
        "with connections to spare, the nearest items are searched beside the full text"
    );
    assert!(
        !nearest_ran_beside_blocked_full_text(
            &dsn,
            &dsn,
            &schema,
            &single,
            "note number 43",
            Duration::from_secs(1)
        )
        .await,
        "a pool of one never takes a second connection"
    );
    // A full pool: every connection held by a search; none may wait for
    // another's spare, so all of them finish.
    let all = (0..8).map(|i| {
        let (backend, alice) = (Arc::clone(&beside), alice.clone());
        let query = memgate_core::SearchQuery::new(format!("note number {i}"));
        tokio::spawn(async move { backend.search(&alice, &query).await })
    });
    for search in all {
        tokio::time::timeout(Duration::from_secs(30), search)
            .await
            .expect("a search waited for a connection it can never get")
            .unwrap()
            .unwrap();
    }
}

/// A hybrid backend of `schema` on the pgvector cluster that reads from
/// its hot standby (`testkit/postgres-up --pgvector --replica`).
fn seeded_on_standby(schema: &str) -> PostgresBackend {
    let [standby] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_PGVECTOR_REPLICA_DSN"]);
    let config = serde_json::json!({
        "dsn": common::pgvector_dsn(),
        "replica_dsn": standby,
        "replica_max_lag_ms": 5000,
        "replica_wait_ms": 2000,
        "pool_size": 4,
    });
    let settings = memgate_postgres::PostgresConfig::from_backend_config(
        config.as_object().unwrap(),
        &memgate_core::BackendContext::new("/x"),
    )
    .unwrap()
    .with_schema(schema)
    .unwrap();
    PostgresBackend::new(settings)
        .unwrap()
        .with_embedder(Arc::new(SeededEmbedder))
}

/// Hybrid recall read from a standby: it ranks as the primary does, and
/// its nearest-items statement runs on a second standby connection beside
/// the full text (`Replica::spare`), as on the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL with pgvector and its hot standby (testkit/postgres-up --pgvector --replica)"]
async fn hybrid_search_on_a_standby_ranks_as_the_primary_and_searches_beside_the_full_text() {
    let _turn = ACTIVITY.lock().await;
    let dsn = common::pgvector_dsn();
    let [standby_dsn] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_PGVECTOR_REPLICA_DSN"]);
    let schema = common::unique_schema("pgstandby");
    let alice = Caller::new("alice");
    let texts: Vec<String> = (0..300)
        .map(|n| format!("note number {n} about pets and plans"))
        .collect();
    let primary = seeded_with_pool(&dsn, &schema, 4);
    primary.capture(&turns(&alice, "t", &texts)).await.unwrap();
    primary.index_all_vectors(64).await.unwrap();
    let standby = Arc::new(seeded_on_standby(&schema));
    let reads = || standby.replica_state().unwrap().replica_reads;
    // The standby is taken into reads once probed and caught up.
    let deadline = Instant::now() + Duration::from_secs(30);
    while reads() == 0 {
        assert!(Instant::now() < deadline, "the standby never served a read");
        standby
            .search(&alice, &memgate_core::SearchQuery::new("note number 1"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for query in ["note number 7", "pets of note 123", "plans 299"] {
        let before = reads();
        let search = memgate_core::SearchQuery::new(query);
        let (on_standby, on_primary) = (
            standby.search(&alice, &search).await.unwrap(),
            primary.search(&alice, &search).await.unwrap(),
        );
        assert!(!on_standby.is_empty(), "{query}");
        assert_eq!(
            on_standby, on_primary,
            "{query}: the same ranking on the standby"
        );
        assert_eq!(reads(), before + 1, "{query} was read from the standby");
    }
    assert!(
        nearest_ran_beside_blocked_full_text(
            &dsn,
            &standby_dsn,
            &schema,
            &standby,
            "note number 42",
            Duration::from_secs(20)
        )
        .await,
        "the standby's nearest items are searched beside its full text"
    );
}

/// A search among memories alone (the facts a new turn may change, a
/// search of one memory kind) is exact over the memories' vectors, read
/// through their own partial index rather than every turn's of the scope:
/// a heavy user's scope holds far more turns than memories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn a_search_among_memories_reads_their_vectors_alone() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pgmemvec");
    let b = common::backend(&dsn, &schema).with_embedder(Arc::new(SeededEmbedder));
    let alice = Caller::new("alice");
    let texts: Vec<String> = (0..400)
        .map(|n| format!("note number {n} about pets"))
        .collect();
    b.capture(&turns(&alice, "t", &texts)).await.unwrap();
    for n in 0..3 {
        let request = RememberRequest::new("fact", &format!("Alice keeps pet number {n}")).unwrap();
        b.remember(&alice, &request).await.unwrap();
    }
    b.index_all_vectors(64).await.unwrap();
    let mut query = memgate_core::SearchQuery::new("pets");
    query.kind = Some("fact".to_owned());
    let hits = b.search(&alice, &query).await.unwrap();
    assert_eq!(hits.len(), 3, "{hits:?}");

    let sql = memgate_postgres::vectors::exact_nearest_sql(true);
    let plan = seeded_plan(&dsn, &schema, &sql, "alice", "pets", "").await;
    assert_eq!(
        ran(&plan, "Index Scan using vectors_of_memories"),
        Some(true),
        "{plan:#?}"
    );
}

/// One statement serves a heavy scope through the index and a small one
/// exactly, in the same table: the scope's size picks the branch when the
/// statement runs. A generic plan (memgate's) sees every scope at the
/// table's average size, so with many small scopes beside it a heavy
/// user's every vector was compared with the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
async fn a_heavy_scope_is_searched_through_the_index_and_a_small_one_exactly() {
    let dsn = common::pgvector_dsn();
    let schema = common::unique_schema("pgtenants");
    let min_items = 300;
    let b = PostgresBackend::new(common::config(&dsn, &schema).with_vector_index(
        memgate_postgres::VectorIndex::Hnsw {
            ef_search: 50,
            min_items,
        },
    ))
    .unwrap()
    .with_embedder(Arc::new(SeededEmbedder));
    let texts = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("note number {i} about pets"))
            .collect()
    };
    b.capture(&turns(&Caller::new("alice"), "t", &texts(400)))
        .await
        .unwrap();
    for user in 0..20 {
        let caller = Caller::new(format!("light{user}"));
        b.capture(&turns(&caller, "t", &texts(20))).await.unwrap();
    }
    b.index_all_vectors(256).await.unwrap();
    let key = memgate_recall::vectors::vector_key("seeded/32");
    let sql = memgate_postgres::vectors::hnsw_nearest_sql(&key, 32, min_items);
    let index = format!("Index Scan using {}", seeded_index());
    // Before the index is built, the heavy scope is scanned exactly through
    // its btree, not through a scan of the whole table.
    let before = seeded_plan(&dsn, &schema, &sql, "alice", "note number 7", "").await;
    assert_eq!(
        ran(&before, "Index Scan using vectors_by_scope"),
        Some(true),
        "{before:#?}"
    );
    assert!(
        !before
            .iter()
            .any(|l| l.contains("Seq Scan on vectors") && !l.contains("never executed")),
        "{before:#?}"
    );
    assert!(b.build_vector_index().await.unwrap());
    let heavy = seeded_plan(&dsn, &schema, &sql, "alice", "note number 7", "").await;
    assert_eq!(ran(&heavy, &index), Some(true), "{heavy:#?}");
    assert_eq!(
        ran(&heavy, "Index Scan using vectors_by_scope"),
        Some(false),
        "{heavy:#?}"
    );
    let light = seeded_plan(&dsn, &schema, &sql, "light3", "note number 7", "").await;
    assert_eq!(ran(&light, &index), Some(false), "{light:#?}");
    assert_eq!(
        ran(&light, "Index Scan using vectors_by_scope"),
        Some(true),
        "{light:#?}"
    );
    // Both answer with their own scope's nearest items.
    for user in ["alice", "light3"] {
        let hits = b
            .search(
                &Caller::new(user),
                &memgate_core::SearchQuery::new("note number 7"),
            )
            .await
            .unwrap();
        assert!(!hits.is_empty(), "{user}");
    }
}
