//! Helpers for tests against the real PostgreSQL that `testkit/postgres-up`
//! starts (`MEMGATE_TEST_POSTGRES_DSN`). Each test works in a schema of its
//! own, so tests run in parallel on one database.
#![allow(dead_code)]

use memgate_postgres::{PostgresBackend, PostgresConfig};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The test cluster's DSN; `None` (after saying so) when it is not running,
/// which fails the test when `MEMGATE_REQUIRE_REAL_SERVERS=1`.
pub fn dsn() -> Option<String> {
    match std::env::var("MEMGATE_TEST_POSTGRES_DSN") {
        Ok(dsn) if !dsn.is_empty() => Some(dsn),
        _ => {
            assert!(
                std::env::var("MEMGATE_REQUIRE_REAL_SERVERS").as_deref() != Ok("1"),
                "MEMGATE_TEST_POSTGRES_DSN is not set but MEMGATE_REQUIRE_REAL_SERVERS=1 \
                 (run testkit/postgres-up and source testkit/.run/env)"
            );
            eprintln!(
                "skipped: no PostgreSQL (MEMGATE_TEST_POSTGRES_DSN unset; run testkit/postgres-up)"
            );
            None
        }
    }
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
