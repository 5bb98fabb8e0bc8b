//! The retention sweep on PostgreSQL (`backend_config.max_turn_age_days`):
//! captured turns older than the maximum age are erased, and with them the
//! distilled facts resting only on them, with their history — `local`'s
//! semantics (`memgate-store::forget`), its batch sizes and its interval
//! ([`memgate_core::forget`]).
//!
//! Each batch is one transaction: the oldest expired turns, their threads'
//! capture locks (taken in one order, before any row is touched, so a
//! capture or a thread's forget never interleaves with it and two sweeps
//! never deadlock), then the deletes. Every replica sharing the database
//! sweeps on its own; a second sweep over the same turns finds them gone.
//! What erasure guarantees on PostgreSQL is in [`crate::forget`].

use crate::backend::PostgresBackend;
use crate::config::PostgresConfig;
use crate::forget::erase_bare_distilled;
use crate::pool::query;
use crate::pool::{db_error, pool_error};
use deadpool_postgres::Pool;
use memgate_core::forget::{
    retention_cutoff, RETENTION_SWEEP_INTERVAL, SWEEP_BATCH, SWEEP_MAX_BATCHES,
};
use memgate_core::{MemoryError, Result};
use std::sync::Weak;
use std::time::{Duration, SystemTime};

/// One sweep: erases turns captured before `now` minus `age`, at most
/// [`SWEEP_MAX_BATCHES`] batches of [`SWEEP_BATCH`]; how many were erased.
async fn sweep(
    pool: &Pool,
    config: &PostgresConfig,
    now: SystemTime,
    age: Duration,
) -> Result<usize> {
    let before = retention_cutoff(now, age);
    let mut erased = 0;
    for _ in 0..SWEEP_MAX_BATCHES {
        let (seen, gone) = sweep_batch(pool, config, &before).await?;
        erased += gone;
        if seen < SWEEP_BATCH {
            break;
        }
    }
    if erased > 0 {
        tracing::info!(erased, "postgres retention sweep");
    }
    Ok(erased)
}

/// One batch: (expired turns found, turns erased).
async fn sweep_batch(pool: &Pool, config: &PostgresConfig, before: &str) -> Result<(usize, usize)> {
    let mut client = pool.get().await.map_err(|e| pool_error(config, e))?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_error(config, &e))?;
    let expired: Vec<i64> = query(
        &tx,
        config,
        "SELECT id FROM turns WHERE captured_at < $1 ORDER BY id LIMIT $2",
        &[&before, &(SWEEP_BATCH as i64)],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    if expired.is_empty() {
        return Ok((0, 0));
    }
    query(
        &tx,
        config,
        "SELECT pg_advisory_xact_lock(hashtext('memgate-turns:' || scope_id::text), hashtext(thread))
         FROM (SELECT DISTINCT scope_id, thread FROM turns WHERE id = ANY($1)
               ORDER BY scope_id, thread) threads",
        &[&expired],
    )
    .await?;
    let touched: Vec<i64> = query(
        &tx,
        config,
        "DELETE FROM memory_sources WHERE turn_id = ANY($1) RETURNING memory_id",
        &[&expired],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    erase_bare_distilled(&tx, config, &touched).await?;
    let gone = query(
        &tx,
        config,
        "WITH gone AS (DELETE FROM turns WHERE id = ANY($1) RETURNING 1) SELECT count(*) FROM gone",
        &[&expired],
    )
    .await?[0]
        .get::<_, i64>(0);
    tx.commit().await.map_err(|e| db_error(config, &e))?;
    Ok((expired.len(), gone as usize))
}

/// Sweeps now and then every [`RETENTION_SWEEP_INTERVAL`] until the
/// backend (`alive`) is dropped or its pool closed.
pub(crate) fn spawn_sweeper(pool: Pool, config: PostgresConfig, age: Duration, alive: Weak<()>) {
    tokio::spawn(async move {
        loop {
            if pool.is_closed() || alive.strong_count() == 0 {
                return;
            }
            match sweep(&pool, &config, SystemTime::now(), age).await {
                Ok(_) => {}
                Err(MemoryError::Closed(_)) => return,
                Err(e) => tracing::warn!(error = %e, "postgres retention sweep failed"),
            }
            tokio::time::sleep(RETENTION_SWEEP_INTERVAL).await;
        }
    });
}

impl PostgresBackend {
    /// One retention sweep as of `now` (the background sweep runs it every
    /// [`RETENTION_SWEEP_INTERVAL`]); how many turns were erased. Nothing
    /// to do when no maximum age is configured.
    pub async fn sweep_expired_turns(&self, now: SystemTime) -> Result<usize> {
        let Some(age) = self.config.max_turn_age else {
            return Ok(0);
        };
        drop(self.client().await?);
        sweep(&self.pool, &self.config, now, age).await
    }
}
