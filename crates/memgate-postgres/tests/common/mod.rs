//! Helpers for tests against the real PostgreSQL that `testkit/postgres-up`
//! starts (`MEMGATE_TEST_POSTGRES_DSN`). Each test works in a schema of its
//! own, so tests run in parallel on one database.
#![allow(dead_code)]

use memgate_postgres::{PostgresBackend, PostgresConfig};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The test cluster's DSN (tests that use it are `#[ignore]`d, so a plain
/// `cargo test` shows them as ignored).
pub use memgate_testsupport::real::postgres_dsn as dsn;

/// The pgvector cluster's DSN (`testkit/postgres-up --pgvector`).
pub fn pgvector_dsn() -> String {
    let [dsn] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_PGVECTOR_DSN"]);
    dsn
}

/// A schema name no other test (or earlier run) uses.
pub fn unique_schema(label: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000_000;
    format!(
        "t_{label}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn config(dsn: &str, schema: &str) -> PostgresConfig {
    PostgresConfig::for_dsn(dsn)
        .unwrap()
        .with_schema(schema)
        .unwrap()
}

pub fn backend(dsn: &str, schema: &str) -> PostgresBackend {
    PostgresBackend::new(config(dsn, schema)).unwrap()
}
