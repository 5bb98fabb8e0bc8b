//! Helpers for tests against the real PostgreSQL that `testkit/postgres-up`
//! starts (`MEMGATE_TEST_POSTGRES_DSN`). Each test works in a schema of its
//! own, so tests run in parallel on one database.
#![allow(dead_code)]

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
