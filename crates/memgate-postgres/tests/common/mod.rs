//! Helpers for tests against the real PostgreSQL that `testkit/postgres-up`
//! starts (`MEMGATE_TEST_POSTGRES_DSN`). Each test works in a schema of its
//! own, so tests run in parallel on one database.
#![allow(dead_code)]

use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message};
use memgate_postgres::{PostgresBackend, PostgresConfig};

/// The test cluster's DSN (tests that use it are `#[ignore]`d, so a plain
/// `cargo test` shows them as ignored).
pub use memgate_testsupport::real::postgres_dsn as dsn;

/// The pgvector cluster's DSN (`testkit/postgres-up --pgvector`).
pub fn pgvector_dsn() -> String {
    let [dsn] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_PGVECTOR_DSN"]);
    dsn
}

/// A schema name no other test (or earlier run) uses.
pub use memgate_testsupport::real::unique_schema;

pub fn config(dsn: &str, schema: &str) -> PostgresConfig {
    PostgresConfig::for_dsn(dsn)
        .unwrap()
        .with_schema(schema)
        .unwrap()
}

pub fn backend(dsn: &str, schema: &str) -> PostgresBackend {
    PostgresBackend::new(config(dsn, schema)).unwrap()
}

/// A plain client of the test cluster, for reading what a backend wrote.
pub async fn connect(dsn: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Captures `threads` threads of `per_thread` messages into `caller`'s
/// scope, thread `t{k}`; message `n` (numbered across threads from 0) is
/// `message(n)`, with id `m{n}`.
pub async fn capture_numbered(
    b: &PostgresBackend,
    caller: &Caller,
    threads: usize,
    per_thread: usize,
    message: impl Fn(usize) -> Message,
) {
    for thread in 0..threads {
        let messages = (0..per_thread)
            .map(|i| {
                let n = thread * per_thread + i;
                message(n).with_id(format!("m{n}"))
            })
            .collect();
        b.capture(&CaptureRequest {
            caller: caller.clone().with_thread(format!("t{thread}")),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
        .await
        .unwrap();
    }
}

/// Waits (at most 20 s) until a session of the server waits for a lock
/// in a statement whose text contains `text`.
pub async fn until_a_statement_waits_for_a_lock(watcher: &tokio_postgres::Client, text: &str) {
    let started = std::time::Instant::now();
    let pattern = format!("%{text}%");
    while watcher
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE $1",
            &[&pattern],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no statement with {text:?} ever waited for a lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
