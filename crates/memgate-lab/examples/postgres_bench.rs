//! `postgres` against `local` in one run, on the same synthetic memory.
//!
//! ```text
//! cargo run --profile profiling -p memgate-lab --example postgres_bench -- [--sizes 10000,100000]
//!     [--recalls 2000] [--replicas 1,2,4] [--load 4000] [--clients 8]
//!     [--backends local,postgres] [--turns-per-capture 100] [--keep-schema]
//!     [--reuse-schema NAME]  (recall only, on a schema --keep-schema left; kept again)
//!     [--profile-slowest N]  (the N slowest recalls again, each one's statements)
//!     [--vectors DIMS]  (hybrid recall: every item gets a vector; postgres on
//!                        MEMGATE_TEST_PGVECTOR_DSN) [--exact-vectors]
//! ```
//!
//! Needs `MEMGATE_TEST_POSTGRES_DSN` (`testkit/postgres-up`). For each size,
//! both backends are filled with the same text (`memgate-store`'s Zipf
//! generator): captures of 100-turn snapshots (`--turns-per-capture`), one
//! thread each (one durable transaction per capture: a larger snapshot is
//! the fast fill for big sizes, through the same capture code and its
//! multi-row insert), plus one explicit memory per 100 items. Then
//! 200 untimed recalls and `--recalls` timed ones, each one call through the
//! `MemoryBackend` trait (ranking, block, and for postgres the round trips
//! to the loopback server). Then, postgres only, a bounded load: `--load`
//! recalls from `--clients` concurrent callers spread over 1, 2 and 4
//! replicas (backends with pools of their own, as separate processes would
//! have) — throughput in recalls/s. Each backend's ranking quality: the
//! share of the timed queries whose source turn (the captured sentence the
//! query's words were taken from) a search's top 10 holds. Figures are
//! printed, never asserted,
//! with the load average (`/proc/loadavg`) before and after each size. The
//! benchmark's schema is dropped at the end of each size (disk is limited).
//!
//! With `--vectors DIMS`, both backends get the same synthetic embedder
//! ([`RandomEmbedder`]: a unit vector of DIMS pseudo-random components
//! seeded by the text, no model), every item is embedded through each
//! backend's own indexer before the recalls, and every recall is hybrid:
//! postgres builds its HNSW index after the indexer (time and size printed)
//! unless `--exact-vectors` keeps the exact scan. Random vectors measure
//! cost, not quality: HNSW's quality on real text is `hnsw_quality`'s.

use memgate_core::{
    Caller, CaptureRequest, MemoryBackend, RecallRequest, RememberRequest, SearchQuery,
};
use memgate_lab::process::{drop_schema, load_average, percentile_ms};
use memgate_lab::synthetic::RandomEmbedder;
use memgate_lab::workload;
use memgate_postgres::{PostgresBackend, PostgresConfig, VectorIndex};
use memgate_store::{LocalBackend, LocalConfig, MemoryStore};
use memgate_testsupport::SplitMix;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Options {
    sizes: Vec<usize>,
    recalls: usize,
    replicas: Vec<usize>,
    load: usize,
    clients: usize,
    backends: Vec<String>,
    turns_per_capture: usize,
    /// Leave the last size's schema in place (to EXPLAIN against it; drop it after).
    keep_schema: bool,
    /// Recall against this kept schema (same size and seed) instead of filling one.
    reuse_schema: Option<String>,
    /// Run the slowest this many timed recalls again, one by one, and print
    /// each one's statements with their server times (postgres only).
    profile_slowest: usize,
    /// Hybrid recall with vectors of this length ([`RandomEmbedder`]).
    vectors: Option<usize>,
    /// postgres scans its vectors exactly instead of building the HNSW index.
    exact_vectors: bool,
}

fn options() -> Options {
    let mut o = Options {
        sizes: vec![10_000, 100_000],
        recalls: 2_000,
        replicas: vec![1, 2, 4],
        load: 4_000,
        clients: 8,
        backends: vec!["local".to_owned(), "postgres".to_owned()],
        turns_per_capture: 100,
        keep_schema: false,
        reuse_schema: None,
        profile_slowest: 0,
        vectors: None,
        exact_vectors: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = |v: &str| -> Vec<usize> { v.split(',').map(|n| n.parse().unwrap()).collect() };
    let mut args = args;
    if let Some(i) = args.iter().position(|a| a == "--keep-schema") {
        args.remove(i);
        o.keep_schema = true;
    }
    if let Some(i) = args.iter().position(|a| a == "--exact-vectors") {
        args.remove(i);
        o.exact_vectors = true;
    }
    for pair in args.chunks(2) {
        let value = pair.get(1).map(String::as_str).unwrap_or("");
        match pair[0].as_str() {
            "--sizes" => o.sizes = list(value),
            "--recalls" => o.recalls = value.parse().unwrap(),
            "--replicas" => o.replicas = list(value),
            "--load" => o.load = value.parse().unwrap(),
            "--clients" => o.clients = value.parse().unwrap(),
            "--backends" => o.backends = value.split(',').map(str::to_owned).collect(),
            "--turns-per-capture" => o.turns_per_capture = value.parse().unwrap(),
            "--reuse-schema" => o.reuse_schema = Some(value.to_owned()),
            "--profile-slowest" => o.profile_slowest = value.parse().unwrap(),
            "--vectors" => o.vectors = Some(value.parse().unwrap()),
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

/// The workload of one size, generated once and replayed on each backend.
struct Workload {
    captures: Vec<CaptureRequest>,
    memories: Vec<RememberRequest>,
    queries: Vec<Option<String>>,
    /// The captured sentence each query's words were taken from.
    sources: Vec<Option<String>>,
    user: Caller,
}

/// The same memory `memgate bench` measures for `seed` ([`workload::Workload`]),
/// with `200 + recalls` queries drawn after it.
fn workload(items: usize, recalls: usize, per_capture: usize, seed: u64) -> Workload {
    let mut rng = SplitMix::new(seed);
    let mut w = workload::Workload::new(&mut rng, items, 100, per_capture);
    let captures = std::iter::from_fn(|| w.next_capture(&mut rng)).collect();
    let memories = (0..w.memories)
        .map(|i| w.memory(&mut rng, i).unwrap())
        .collect();
    let (queries, sources) = (0..200 + recalls)
        .map(|_| match w.sourced_query(&mut rng) {
            Some((q, source)) => (Some(q), Some(source.to_owned())),
            None => (None, None),
        })
        .unzip();
    Workload {
        captures,
        memories,
        queries,
        sources,
        user: w.user.clone(),
    }
}

/// Whose indexer embeds every item between the fill and the recalls.
enum Index<'a> {
    None,
    Local(&'a MemoryStore),
    Postgres(&'a PostgresBackend),
}

impl Index<'_> {
    /// Runs the indexer until nothing is left (the background indexer
    /// embedded the rest during the fill); prints how long it took.
    async fn run(&self, name: &str) {
        let started = Instant::now();
        let written = match self {
            Index::None => return,
            Index::Local(store) => store.index_all_vectors(256).unwrap(),
            Index::Postgres(pg) => pg.index_all_vectors(256).await.unwrap(),
        };
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{name:<8} vectors: {written} left after the fill, indexed in {secs:.1}s ({:.0} items/s)",
            written as f64 / secs.max(1e-9)
        );
        if let Index::Postgres(pg) = self {
            // The HNSW index (the background builder would build it too,
            // once caught up): its build time and size.
            let started = Instant::now();
            pg.build_vector_index().await.unwrap();
            println!(
                "{name:<8} vector index built in {:.1}s: {:?}",
                started.elapsed().as_secs_f64(),
                pg.vector_index_state().await.unwrap()
            );
        }
    }
}

struct Figures {
    capture_turns_per_sec: f64,
    fill_secs: f64,
    recall_p50_ms: f64,
    recall_p99_ms: f64,
    /// p50 / p99 of the recalls with a query (the ranking), and of those
    /// without (the first-turn block, one recall in 20): the block reads
    /// and excerpts the newest turns, so the two bend differently with size.
    queried_ms: (f64, f64),
    block_ms: (f64, f64),
    mean_items: f64,
    /// Share of the timed queries whose source turn a search's top 10 holds.
    source_at_10: f64,
}

/// A statement's text, or for recall's turn statements which plan it serves.
const STATEMENT_LABEL: &str = "CASE
    WHEN query LIKE '%FROM turns%LIMIT $5%' THEN 'turns, newest first: window walk'
    WHEN query LIKE '%FROM turns%@>%' THEN 'turns, newest first: postings'
    WHEN query LIKE '%FROM turns%&&%' THEN 'turns, scored'
    ELSE regexp_replace(left(query, 70), '\\s+', ' ', 'g') END";

/// PostgreSQL's own view of the timed recalls, from `pg_stat_statements`
/// when the server preloads it: execution time inside the server, which a
/// wall-clock figure on a machine short of cores hides among the waits.
struct ServerStats {
    client: tokio_postgres::Client,
}

impl ServerStats {
    async fn connect(dsn: &str) -> Option<Self> {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(connection);
        let usable = client
            .batch_execute(
                "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; \
                 SELECT count(*) FROM pg_stat_statements",
            )
            .await;
        match usable {
            Ok(()) => Some(Self { client }),
            Err(e) => {
                println!("pg_stat_statements not available ({e}): no server-side figures");
                None
            }
        }
    }

    async fn reset(&self) {
        self.client
            .batch_execute("SELECT pg_stat_statements_reset()")
            .await
            .unwrap();
    }

    /// This database's statements since the last reset, costliest first:
    /// calls, total, mean and max execution time (ms), and the label.
    async fn statements(&self) -> Vec<tokio_postgres::Row> {
        self.client
            .query(
                &format!(
                    "SELECT calls, total_exec_time, mean_exec_time, max_exec_time, {STATEMENT_LABEL}
                     FROM pg_stat_statements
                     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                       AND query NOT LIKE '%pg_stat_statements%'
                     ORDER BY total_exec_time DESC"
                ),
                &[],
            )
            .await
            .unwrap()
    }

    /// Prints the statements of the one recall run since the last reset,
    /// costliest first: which plan it took, and where its time went.
    /// With the query's words' counts in `schema` (the plan's inputs).
    async fn print_one(&self, schema: &str, timed: Duration, again: Duration, query: &str) {
        let rows = self.statements().await;
        let counts: String = self
            .client
            .query_one(
                &format!(
                    "SELECT coalesce(string_agg(lexeme || '=' || docs, ' ' ORDER BY docs), '')
                     FROM {schema}.term_docs
                     WHERE scope_id = (SELECT min(id) FROM {schema}.scopes)
                       AND lexeme = ANY(tsvector_to_array(to_tsvector('english', $1)))"
                ),
                &[&query],
            )
            .await
            .unwrap()
            .get(0);
        let total: f64 = rows.iter().map(|r| r.get::<_, f64>(1)).sum();
        println!(
            "slow recall: {:.2} ms timed, {:.2} ms again, server {total:.2} ms: {query:?} ({counts})",
            timed.as_secs_f64() * 1000.0,
            again.as_secs_f64() * 1000.0
        );
        for r in rows.iter().take(4) {
            println!(
                "    calls={} total={:>8.3} ms  {}",
                r.get::<_, i64>(0),
                r.get::<_, f64>(1),
                r.get::<_, String>(4)
            );
        }
    }

    /// Prints the server's execution time per recall and the costliest statements.
    async fn print(&self, recalls: usize) {
        let rows = self.statements().await;
        let total: f64 = rows.iter().map(|r| r.get::<_, f64>(1)).sum();
        println!(
            "postgres server execution: {:.2} ms per recall (pg_stat_statements, {} statements)",
            total / recalls as f64,
            rows.iter().map(|r| r.get::<_, i64>(0)).sum::<i64>()
        );
        for r in rows.iter().take(6) {
            println!(
                "  calls={:<6} mean={:>7.3} ms  max={:>8.3} ms  {}",
                r.get::<_, i64>(0),
                r.get::<_, f64>(2),
                r.get::<_, f64>(3),
                r.get::<_, String>(4)
            );
        }
    }
}

async fn measure(
    backend: &dyn MemoryBackend,
    w: &Workload,
    server: Option<&ServerStats>,
    filled: bool,
    profile_slowest: usize,
    schema: &str,
    index: Index<'_>,
) -> Figures {
    let fill = Instant::now();
    let mut capture_time = Duration::ZERO;
    let mut turns = 0;
    for request in w.captures.iter().filter(|_| !filled) {
        let started = Instant::now();
        let report = backend.capture(request).await.unwrap();
        capture_time += started.elapsed();
        assert_eq!(report.stored, request.messages.len());
        turns += report.stored;
    }
    for m in w.memories.iter().filter(|_| !filled) {
        backend.remember(&w.user, m).await.unwrap();
    }
    let fill_secs = fill.elapsed().as_secs_f64();
    index
        .run(if schema.is_empty() {
            "local"
        } else {
            "postgres"
        })
        .await;
    let request = |q: &Option<String>| RecallRequest {
        caller: w.user.clone(),
        query: q.clone(),
    };
    for q in &w.queries[..200] {
        backend.recall(&request(q)).await.unwrap();
    }
    if let Some(s) = server {
        s.reset().await;
    }
    let mut latencies = Vec::new();
    let mut items = 0;
    for q in &w.queries[200..] {
        let started = Instant::now();
        let recall = backend.recall(&request(q)).await.unwrap();
        latencies.push(started.elapsed());
        items += recall.items.len();
    }
    if let Some(s) = server {
        s.print(latencies.len()).await;
        let mut slowest: Vec<(Duration, &Option<String>)> =
            latencies.iter().copied().zip(&w.queries[200..]).collect();
        slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
        for (timed, q) in slowest.into_iter().take(profile_slowest) {
            s.reset().await;
            let started = Instant::now();
            backend.recall(&request(q)).await.unwrap();
            let again = started.elapsed();
            s.print_one(schema, timed, again, q.as_deref().unwrap_or("<no query>"))
                .await;
        }
    }
    let split = |with_query: bool| {
        let mut part: Vec<Duration> = latencies
            .iter()
            .zip(&w.queries[200..])
            .filter(|(_, q)| q.is_some() == with_query)
            .map(|(l, _)| *l)
            .collect();
        part.sort_unstable();
        (percentile_ms(&part, 0.5), percentile_ms(&part, 0.99))
    };
    let (queried_ms, block_ms) = (split(true), split(false));
    latencies.sort_unstable();
    let source_at_10 = source_at_10(backend, w).await;
    Figures {
        capture_turns_per_sec: turns as f64 / capture_time.as_secs_f64(),
        fill_secs,
        recall_p50_ms: percentile_ms(&latencies, 0.5),
        recall_p99_ms: percentile_ms(&latencies, 0.99),
        queried_ms,
        block_ms,
        mean_items: items as f64 / latencies.len() as f64,
        source_at_10,
    }
}

/// Share of the timed queries with a source whose top 10 (a search: the
/// ranking without the block) holds that source turn, as `memgate bench`
/// reports for `local`'s ranking alone.
async fn source_at_10(backend: &dyn MemoryBackend, w: &Workload) -> f64 {
    let (mut asked, mut found) = (0usize, 0usize);
    for (query, source) in w.queries[200..].iter().zip(&w.sources[200..]) {
        let (Some(query), Some(source)) = (query, source) else {
            continue;
        };
        let mut search = SearchQuery::new(query.clone());
        search.top_k = 10;
        let hits = backend.search(&w.user, &search).await.unwrap();
        asked += 1;
        found += usize::from(hits.iter().any(|h| h.content == *source));
    }
    found as f64 / asked.max(1) as f64
}

/// `load` recalls from `clients` concurrent callers over `replicas`.
async fn throughput(
    replicas: &[Arc<PostgresBackend>],
    w: &Arc<Workload>,
    load: usize,
    clients: usize,
) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let backend = Arc::clone(&replicas[c % replicas.len()]);
        let w = Arc::clone(w);
        tasks.push(tokio::spawn(async move {
            for i in (c..load).step_by(clients) {
                let q = &w.queries[200 + i % (w.queries.len() - 200)];
                backend
                    .recall(&RecallRequest {
                        caller: w.user.clone(),
                        query: q.clone(),
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    load as f64 / started.elapsed().as_secs_f64()
}

fn print(name: &str, items: usize, f: &Figures) {
    println!(
        "{name:<8} items={items:<8} capture={:>8.0} turns/s  fill={:>6.1}s  recall p50={:>6.2} ms  p99={:>6.2} ms  items/recall={:.1}  source turn in top 10={:.3}",
        f.capture_turns_per_sec, f.fill_secs, f.recall_p50_ms, f.recall_p99_ms, f.mean_items, f.source_at_10
    );
    println!(
        "{name:<8} items={items:<8} with a query p50={:>6.2} ms  p99={:>6.2} ms;  no query (first-turn block) p50={:>6.2} ms  p99={:>6.2} ms",
        f.queried_ms.0, f.queried_ms.1, f.block_ms.0, f.block_ms.1
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let o = options();
    let dsn = if o.vectors.is_some() {
        std::env::var("MEMGATE_TEST_PGVECTOR_DSN")
            .expect("MEMGATE_TEST_PGVECTOR_DSN (run testkit/postgres-up --pgvector)")
    } else {
        std::env::var("MEMGATE_TEST_POSTGRES_DSN")
            .expect("MEMGATE_TEST_POSTGRES_DSN (run testkit/postgres-up)")
    };
    println!(
        "cores={} profile={}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for (i, &items) in o.sizes.iter().enumerate() {
        let w = Arc::new(workload(
            items,
            o.recalls,
            o.turns_per_capture,
            0x6d67_6174 + i as u64,
        ));
        println!("load average before {items}: {}", load_average());
        if o.backends.iter().any(|b| b == "local") {
            let dir = tempfile::tempdir().unwrap();
            let mut store =
                MemoryStore::open(dir.path().join("bench.sqlite3"), LocalConfig::default())
                    .unwrap();
            if let Some(dims) = o.vectors {
                store = store.with_embedder(RandomEmbedder::new(dims));
            }
            let local = LocalBackend::from_store(store);
            let index = match o.vectors {
                Some(_) => Index::Local(local.store()),
                None => Index::None,
            };
            let f = measure(&local, &w, None, false, 0, "", index).await;
            print("local", items, &f);
            if o.vectors.is_some() {
                println!(
                    "local    hybrid recalls: {}",
                    local.store().retrieval_counts().hybrid
                );
            }
            local.shutdown(Duration::from_secs(30)).await;
        }
        if o.backends.iter().any(|b| b == "postgres") {
            postgres(&dsn, &o, items, &w).await;
        }
        println!("load average after {items}: {}", load_average());
    }
}

/// The postgres figures of one size, in a schema of their own that is
/// dropped afterwards.
async fn postgres(dsn: &str, o: &Options, items: usize, w: &Arc<Workload>) {
    let schema = format!(
        "bench_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let schema = o.reuse_schema.clone().unwrap_or(schema);
    let config = || {
        let config = PostgresConfig::for_dsn(dsn)
            .unwrap()
            .with_schema(&schema)
            .unwrap();
        if o.exact_vectors {
            config.with_vector_index(VectorIndex::Exact)
        } else {
            config
        }
    };
    let backend = || {
        let b = PostgresBackend::new(config()).unwrap();
        match o.vectors {
            Some(dims) => b.with_embedder(RandomEmbedder::new(dims)),
            None => b,
        }
    };
    let pg = Arc::new(backend());
    let server = ServerStats::connect(dsn).await;
    let f = measure(
        &*pg,
        w,
        server.as_ref(),
        o.reuse_schema.is_some(),
        o.profile_slowest,
        &schema,
        match o.vectors {
            Some(_) => Index::Postgres(&pg),
            None => Index::None,
        },
    )
    .await;
    print("postgres", items, &f);
    if o.vectors.is_some() {
        println!("postgres hybrid recalls: {}", pg.retrieval_counts().hybrid);
    }
    let info = pg.doctor().await.unwrap();
    let mut replicas = vec![pg];
    for &n in &o.replicas {
        while replicas.len() < n {
            replicas.push(Arc::new(backend()));
        }
        let rps = throughput(&replicas[..n], w, o.load, o.clients).await;
        println!(
            "postgres items={items:<8} replicas={n} clients={} recalls={} throughput={rps:>7.0} recalls/s",
            o.clients, o.load
        );
    }
    println!(
        "postgres server {} schema {}",
        info.server_version, info.schema
    );
    for r in &replicas {
        r.shutdown(Duration::from_secs(30)).await;
    }
    // A reused schema stays too: it was kept to be measured again.
    if o.reuse_schema.is_some() || (o.keep_schema && Some(&items) == o.sizes.last()) {
        println!(
            "postgres schema {schema} kept (--keep-schema / --reuse-schema): \
             DROP SCHEMA {schema} CASCADE when done"
        );
        return;
    }
    drop_schema(dsn, &schema).await;
}
