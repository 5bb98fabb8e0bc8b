//! The approximate index of hybrid recall's dense side on PostgreSQL: one
//! pgvector HNSW index per embedding model and dimension, built in the
//! background, never on a write or a recall.
//!
//! - Shape: the `vectors.embedding` column has no fixed dimension (a model
//!   change must not need a table rewrite), and pgvector indexes only typed
//!   columns, so the index is on the expression `embedding::vector(D)`,
//!   partial on `model = '<key>'` ([`index_name`] names it after both). The
//!   nearest-items statement ([`crate::vectors`]) orders by the same
//!   expression with the model as a literal, so the planner can prove the
//!   partial predicate under `plan_cache_mode=force_generic_plan`.
//! - Honest: pgvector keeps the full vector in the graph, so each candidate's
//!   inner product is exact; the statement re-orders the candidates by it
//!   (iterative scans return them in relaxed order). Only which items are
//!   candidates is approximate, and `docs/design/hnsw.md` measures it.
//! - Building: `CREATE INDEX CONCURRENTLY` once the indexer has caught up
//!   ([`BUILD_WHEN_QUEUED_AT_MOST`]), on one connection without a statement
//!   timeout, under an advisory lock so one replica builds. Until the index
//!   is valid the nearest-items statement takes its exact branch
//!   ([`crate::vectors::hnsw_nearest_sql`]), as it does for a scope under
//!   `hnsw_min_items`. A build
//!   that died (an invalid index left behind) is dropped and started again;
//!   indexes of a model no longer stored are dropped.
//! - Progress: `pg_stat_progress_create_index`, shown by `doctor`.

use crate::backend::PostgresBackend;
use crate::config::{PostgresConfig, VectorIndex};
use crate::pool::{db_error, pool_error};
use crate::vectors::Vectors;
use deadpool_postgres::{GenericClient, Pool};
use memgate_core::{Diagnostic, MemoryError, Result};
use std::sync::Weak;
use std::time::Duration;

/// The first key of the builder's advisory lock (`MGHN`); the second is the
/// schema's hash, as for the vector indexer.
const BUILDER_LOCK: i32 = 0x4D47_484E;

/// The index is built once no more than this many items wait for a vector,
/// so a backfill is indexed in one bulk build rather than row by row.
pub const BUILD_WHEN_QUEUED_AT_MOST: i64 = 1_000;

/// How often the background builder looks whether an index is missing.
const BUILDER_PERIOD: Duration = Duration::from_secs(5);

/// Memory for one build: the graph of 1M 384-dim vectors fits; past it
/// pgvector goes on building, slower, on disk.
const BUILD_MEMORY: &str = "2GB";

/// The index of `key`'s vectors of `dims` dimensions (`key` is hashed:
/// index names are at most 63 bytes and models have any name).
pub fn index_name(key: &str, dims: i32) -> String {
    // FNV-1a: stable across processes and builds, unlike `DefaultHasher`.
    let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("vectors_hnsw_{dims}_{hash:08x}")
}

/// `text` as an SQL string literal (`standard_conforming_strings` is on
/// since PostgreSQL 9.1, so only quotes need doubling).
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Where the approximate index of the configured model stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexState {
    /// `vector_index: exact`: recall always scans.
    Off,
    /// No vector of the configured model is stored yet.
    NoVectors,
    /// Not built yet (waiting for the indexer to catch up): recall scans.
    Missing,
    /// `CREATE INDEX` runs: recall scans meanwhile.
    Building {
        phase: String,
        done: i64,
        total: i64,
    },
    /// Used by recall.
    Ready { bytes: i64 },
}

impl IndexState {
    /// `doctor`'s line.
    pub fn diagnostic(&self) -> Diagnostic {
        let text = match self {
            Self::Off => "exact scan (vector_index: exact)".to_owned(),
            Self::NoVectors => "hnsw: no vectors yet".to_owned(),
            Self::Missing => "hnsw: not built yet; recall scans exactly meanwhile".to_owned(),
            Self::Building { phase, done, total } => format!(
                "hnsw: building ({phase}, {done} of {total}); recall scans exactly meanwhile"
            ),
            Self::Ready { bytes } => format!("hnsw: ready ({:.1} MB)", *bytes as f64 / 1e6),
        };
        Diagnostic::ok("vector index", text)
    }
}

fn err(config: &PostgresConfig) -> impl Fn(tokio_postgres::Error) -> MemoryError + '_ {
    move |e| db_error(config, &e)
}

/// The stored model's dimension when the stored model is `key`.
pub(crate) async fn stored_dims(
    c: &impl GenericClient,
    config: &PostgresConfig,
    key: &str,
) -> Result<Option<i32>> {
    Ok(c.query_opt(
        "SELECT dims FROM vector_model WHERE id = 1 AND model = $1",
        &[&key],
    )
    .await
    .map_err(err(config))?
    .map(|r| r.get(0)))
}

/// The index's validity and size, if it exists in the schema.
async fn found(
    c: &impl GenericClient,
    config: &PostgresConfig,
    name: &str,
) -> Result<Option<(bool, i64)>> {
    Ok(c.query_opt(
        "SELECT i.indisvalid, pg_relation_size(c.oid) FROM pg_class c
         JOIN pg_index i ON i.indexrelid = c.oid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname = $2",
        &[&config.schema, &name],
    )
    .await
    .map_err(err(config))?
    .map(|r| (r.get(0), r.get(1))))
}

/// The state of `key`'s index.
pub(crate) async fn state(
    c: &impl GenericClient,
    config: &PostgresConfig,
    key: &str,
) -> Result<IndexState> {
    if config.vector_index == VectorIndex::Exact {
        return Ok(IndexState::Off);
    }
    let Some(dims) = stored_dims(c, config, key).await? else {
        return Ok(IndexState::NoVectors);
    };
    let name = index_name(key, dims);
    let progress = c
        .query_opt(
            // Tuples once their total is known, else blocks (pgvector's
            // loading phase counts blocks).
            "SELECT p.phase,
                    CASE WHEN p.tuples_total > 0 THEN p.tuples_done ELSE p.blocks_done END,
                    CASE WHEN p.tuples_total > 0 THEN p.tuples_total ELSE p.blocks_total END
             FROM pg_stat_progress_create_index p
             JOIN pg_class c ON c.oid = p.index_relid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&config.schema, &name],
        )
        .await
        .map_err(err(config))?;
    if let Some(p) = progress {
        return Ok(IndexState::Building {
            phase: p.get(0),
            done: p.get(1),
            total: p.get(2),
        });
    }
    Ok(match found(c, config, &name).await? {
        Some((true, bytes)) => IndexState::Ready { bytes },
        // An invalid index no one is building: a build that died.
        _ => IndexState::Missing,
    })
}

/// Builds `key`'s index if it is missing and the indexer has caught up;
/// returns true when this call built it. With `wait`, waits for another
/// replica's build instead of leaving it to that replica.
pub(crate) async fn build(
    pool: &Pool,
    config: &PostgresConfig,
    key: &str,
    wait: bool,
) -> Result<bool> {
    if config.vector_index == VectorIndex::Exact {
        return Ok(false);
    }
    let c = pool.get().await.map_err(|e| pool_error(config, e))?;
    let lock = if wait {
        "SELECT pg_advisory_lock($1, hashtext($2)), true"
    } else {
        "SELECT 1, pg_try_advisory_lock($1, hashtext($2))"
    };
    let held: bool = c
        .query_one(lock, &[&BUILDER_LOCK, &config.schema])
        .await
        .map_err(err(config))?
        .get(1);
    if !held {
        return Ok(false);
    }
    let result = locked_build(&c, config, key, wait).await;
    // Session settings and the lock must not outlive the build on a pooled
    // connection (a broken connection drops both with its session).
    let _ = c
        .batch_execute(&format!(
            "RESET maintenance_work_mem; SET statement_timeout = {};
             SELECT pg_advisory_unlock({BUILDER_LOCK}, hashtext({}))",
            config.statement_timeout.as_millis(),
            literal(&config.schema)
        ))
        .await;
    result
}

async fn locked_build(
    c: &deadpool_postgres::Object,
    config: &PostgresConfig,
    key: &str,
    any_queue: bool,
) -> Result<bool> {
    let Some(dims) = stored_dims(c, config, key).await? else {
        return Ok(false);
    };
    let queued: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM vector_queue LIMIT $1) q",
            &[&(BUILD_WHEN_QUEUED_AT_MOST + 1)],
        )
        .await
        .map_err(err(config))?
        .get(0);
    if queued > BUILD_WHEN_QUEUED_AT_MOST && !any_queue {
        return Ok(false);
    }
    let name = index_name(key, dims);
    let schema = &config.schema;
    // Indexes of models no longer stored serve nothing and slow writes.
    let stale = c
        .query(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind = 'i' AND c.relname LIKE 'vectors\\_hnsw\\_%'
               AND c.relname <> $2",
            &[schema, &name],
        )
        .await
        .map_err(err(config))?;
    for r in stale {
        let stale: String = r.get(0);
        c.batch_execute(&format!(
            "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{stale}"
        ))
        .await
        .map_err(err(config))?;
    }
    match found(c, config, &name).await? {
        Some((true, _)) => return Ok(false),
        Some((false, _)) => c
            .batch_execute(&format!(
                "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name}"
            ))
            .await
            .map_err(err(config))?,
        None => {}
    }
    tracing::info!(index = %name, "building the HNSW vector index");
    c.batch_execute(&format!(
        "SET statement_timeout = 0; SET maintenance_work_mem = '{BUILD_MEMORY}'"
    ))
    .await
    .map_err(err(config))?;
    // A statement of its own: in a batch it would run in a transaction.
    c.batch_execute(&format!(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {schema}.vectors
         USING hnsw ((embedding::public.vector({dims})) public.vector_ip_ops)
         WHERE model = {}",
        literal(key)
    ))
    .await
    .map_err(err(config))?;
    tracing::info!(index = %name, "the HNSW vector index is ready");
    Ok(true)
}

/// The background builder: looks every [`BUILDER_PERIOD`] whether the
/// configured model's index is missing and builds it; ends when the
/// backend is dropped or its pool closed.
pub(crate) fn spawn_builder(pool: Pool, config: PostgresConfig, vectors: Weak<Vectors>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(BUILDER_PERIOD).await;
            let Some(v) = vectors.upgrade() else { return };
            if pool.is_closed() {
                return;
            }
            let built = build(&pool, &config, v.key(), false).await;
            drop(v);
            match built {
                Ok(_) => {}
                Err(MemoryError::Closed(_)) => return,
                Err(e) => tracing::warn!(error = %e, "HNSW index build failed; retrying later"),
            }
        }
    });
}

impl PostgresBackend {
    /// Builds the approximate vector index now if it is missing, however
    /// many items still wait for a vector, waiting for another replica's
    /// build (tests, benchmarks); returns true when this call built it.
    pub async fn build_vector_index(&self) -> Result<bool> {
        let Some(v) = &self.vectors else {
            return Ok(false);
        };
        drop(self.client().await?);
        build(&self.pool, &self.config, v.key(), true).await
    }

    /// Where the approximate vector index stands (`doctor`).
    pub async fn vector_index_state(&self) -> Result<IndexState> {
        let Some(v) = &self.vectors else {
            return Ok(IndexState::Off);
        };
        let c = self.client().await?;
        state(&c, &self.config, v.key()).await
    }
}
