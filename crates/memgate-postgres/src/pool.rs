//! The connection pool and how driver failures become the contract's errors.
//!
//! deadpool keeps up to `pool_size` connections; each is opened with the
//! statement timeout and the memgate schema as its `search_path`, so the
//! server itself cancels a statement that overruns and every unqualified name
//! resolves inside memgate's own schema. Waiting for a free connection and
//! connecting are bounded by `connect_timeout_ms`.
//!
//! Error texts carry the server's message and SQLSTATE only: never the DSN,
//! never the password (scrubbed once more by [`PostgresConfig::redact`]), and
//! never the DETAIL line, which can quote user text.

use crate::config::{PostgresConfig, VectorIndex};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use memgate_core::{MemoryError, Result};
use std::sync::Arc;
use tokio_postgres::error::SqlState;

/// Builds the pool; no connection is opened until the first use.
pub(crate) fn build(config: &PostgresConfig) -> Result<Pool> {
    let mut connection = config.connection.clone();
    // Generic plans: every statement is prepared once per connection, and a
    // custom plan per call would re-plan the GIN lookups every time. No JIT:
    // at a million rows the estimates cross `jit_above_cost`, and compiling
    // took ~0.7 s of a statement that runs in ~1 ms (observed, PostgreSQL 15).
    // No parallel workers either: for a few hundred rows, starting them cost
    // more than the scan (a parallel bitmap heap scan of 1 200 turns: 59-122
    // ms, the same scan in the backend alone: 13-20 ms, on this 2-core box).
    // The HNSW search (crate::hnsw): `ef_search` candidates, and an
    // iterative scan, so a scope's filter still finds its nearest items
    // when other scopes' vectors crowd the first candidates.
    let hnsw = match config.vector_index {
        VectorIndex::Hnsw { ef_search, .. } => {
            format!(" -c hnsw.ef_search={ef_search} -c hnsw.iterative_scan=relaxed_order")
        }
        VectorIndex::Exact => String::new(),
    };
    connection.options(format!(
        "-c search_path={} -c statement_timeout={} -c plan_cache_mode=force_generic_plan \
         -c jit=off -c max_parallel_workers_per_gather=0{hnsw}",
        config.schema,
        config.statement_timeout.as_millis()
    ));
    connection.connect_timeout(config.connect_timeout);
    if connection.get_application_name().is_none() {
        connection.application_name("memgate");
    }
    let manager_config = ManagerConfig {
        // Fast: a broken connection is noticed by the statement that fails.
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = if config.tls {
        Manager::from_config(connection, tls_connector(config)?, manager_config)
    } else {
        Manager::from_config(connection, tokio_postgres::NoTls, manager_config)
    };
    Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(config.connect_timeout))
        .create_timeout(Some(config.connect_timeout))
        .recycle_timeout(Some(config.connect_timeout))
        .build()
        .map_err(|e| MemoryError::Config(format!("postgres connection pool: {e}")))
}

/// A second connection of `pool` when the pool has room for it right now
/// (an idle one, or a new one below `pool_size`), else `None`: it never
/// waits for a connection another caller holds, so a read that takes one
/// beside the connection it already holds cannot deadlock a full pool.
pub(crate) async fn spare(pool: &Pool) -> Option<deadpool_postgres::Object> {
    let timeouts = deadpool_postgres::Timeouts {
        wait: Some(std::time::Duration::ZERO),
        ..pool.timeouts()
    };
    pool.timeout_get(&timeouts).await.ok()
}

/// TLS with the public web roots, plus the roots in `tls_ca_file`.
fn tls_connector(config: &PostgresConfig) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = &config.tls_ca_file {
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(path).map_err(|e| {
            MemoryError::Config(format!(
                "backend_config.tls_ca_file {} is not a readable PEM file: {e}",
                path.display()
            ))
        })?;
        for cert in certs {
            let cert = cert.map_err(|e| {
                MemoryError::Config(format!(
                    "backend_config.tls_ca_file {} holds an unreadable certificate: {e}",
                    path.display()
                ))
            })?;
            roots.add(cert).map_err(|e| {
                MemoryError::Config(format!(
                    "backend_config.tls_ca_file {}: certificate refused: {e}",
                    path.display()
                ))
            })?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| MemoryError::Config(format!("postgres TLS setup: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
}

/// Runs `sql` as a statement prepared once per connection (a cached
/// statement saves the parse round trip on every later call); what
/// [`crate::PostgresBackend`]'s own reads use, and the erasure code that
/// also runs without a backend handle (the retention sweep).
pub(crate) async fn query(
    c: &impl deadpool_postgres::GenericClient,
    config: &PostgresConfig,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>> {
    let statement = c
        .prepare_cached(sql)
        .await
        .map_err(|e| db_error(config, &e))?;
    c.query(&statement, params)
        .await
        .map_err(|e| db_error(config, &e))
}

/// Maps a driver error: a cancelled statement is a deadline, a unique
/// violation a conflict, everything else a backend failure.
pub(crate) fn db_error(config: &PostgresConfig, err: &tokio_postgres::Error) -> MemoryError {
    let text = match err.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => err.to_string(),
    };
    let text = config.redact(&text);
    match err.code() {
        Some(c) if *c == SqlState::QUERY_CANCELED => {
            MemoryError::DeadlineExceeded(format!("postgres statement timeout: {text}"))
        }
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => {
            MemoryError::Conflict(format!("postgres: {text}"))
        }
        _ => MemoryError::Backend(format!("postgres: {text}")),
    }
}

/// Maps a pool failure (no free connection in time, cannot connect).
pub(crate) fn pool_error(config: &PostgresConfig, err: PoolError) -> MemoryError {
    match err {
        PoolError::Backend(e) => db_error(config, &e),
        PoolError::Timeout(_) => MemoryError::DeadlineExceeded(format!(
            "postgres: no connection within {} ms (pool of {})",
            config.connect_timeout.as_millis(),
            config.pool_size
        )),
        PoolError::Closed => MemoryError::Closed("postgres".to_owned()),
        other => MemoryError::Backend(config.redact(&format!("postgres pool: {other}"))),
    }
}
