//! Read replicas: recall and search read from a PostgreSQL hot standby
//! (PostgreSQL's own streaming replication) while every write goes to the
//! primary.
//!
//! - **Read-your-writes, across processes.** Every write that recall or
//!   search can see (capture, remember, a fact's change, forget, import,
//!   distillation: whatever changes `turns` or `memories`) sets its scope's
//!   `write_mark` to the next value of one sequence, in the write's own
//!   transaction (a trigger, [`crate::schema`]'s migration 9). A read bound
//!   for the replica first reads the scope's mark on the primary (a point
//!   query), then reads the replica once the replica shows that mark or a
//!   later one, waiting up to `replica_wait_ms`, else reads the primary on
//!   the connection it already holds (`waited_out`). So a capture
//!   through one `memgate serve` process and a recall through another one
//!   straight after never reads a replica that has not replayed it, and no
//!   client token is needed. The mark is drawn under the scope row's lock,
//!   so a scope's marks grow in commit order, also across a forget that
//!   deletes the row and a later write that creates it again.
//! - **Lag.** A probe, at most once a second and started by a read, reads
//!   the primary's position and times how long the replica takes to replay
//!   it. Past `replica_max_lag_ms`, or unreachable, the replica is dropped
//!   from reads (counted); the next probe that finds it caught up brings it
//!   back. A new replica is used only after its first probe.
//! - **Faults.** A read that fails on the replica is counted, drops it, and
//!   is run again on the primary: a replica going away costs no failed read.

use crate::backend::Scope;
use crate::config::{PostgresConfig, ReplicaConfig};
use crate::pool;
use deadpool_postgres::{Object, Pool};
use memgate_core::{Figure, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::types::PgLsn;

/// How often a probe measures the replica's lag.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often a waiting read (or a probe) asks the replica what it replayed.
const POLL_EVERY: Duration = Duration::from_millis(2);
/// The replica's replayed position; on a server that is not a standby
/// (a replica DSN naming a primary), its own position.
const REPLAYED: &str = "SELECT coalesce(pg_last_wal_replay_lsn(), pg_current_wal_lsn())";
/// A scope's write mark; no row: never written, or erased.
const WRITE_MARK: &str = "SELECT write_mark FROM scopes WHERE user_id = $1 AND peer = $2";

/// One read replica: its pool, its bounds, its health and its counts.
pub(crate) struct Replica {
    config: PostgresConfig,
    pool: Pool,
    max_lag: Duration,
    wait: Duration,
    state: Mutex<Health>,
    probing: AtomicBool,
    counts: Counts,
}

struct Health {
    up: bool,
    /// Set by the first probe that found the replica caught up.
    ever_up: bool,
    next_probe: Instant,
    lag: Option<Duration>,
}

#[derive(Default)]
struct Counts {
    replica_reads: AtomicU64,
    primary_reads: AtomicU64,
    waited_out: AtomicU64,
    failed_reads: AtomicU64,
    dropped: AtomicU64,
    restored: AtomicU64,
}

/// What `doctor` and the tests see of a replica (no DSN, no secrets).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct ReplicaState {
    /// True while reads may go to the replica.
    pub up: bool,
    /// The last probe's lag in milliseconds, if it caught up.
    pub lag_ms: Option<f64>,
    /// Reads served by the replica.
    pub replica_reads: u64,
    /// Reads sent to the primary while a replica is configured.
    pub primary_reads: u64,
    /// Of those, reads whose scope's last write (by any process) the replica
    /// had not replayed in time.
    pub waited_out: u64,
    /// Reads that failed on the replica and were run again on the primary.
    pub failed_reads: u64,
    /// Times the replica was dropped from reads (lagging or unreachable).
    pub dropped: u64,
    /// Times a dropped replica was taken back.
    pub restored: u64,
}

impl ReplicaState {
    /// The state as `/metrics` figures (fixed names, no user text).
    pub fn figures(&self) -> Vec<Figure> {
        let name = |n: &str| format!("memgate_postgres_replica_{n}");
        vec![
            Figure::gauge(name("up"), "1 while recall and search may read from the replica", u64::from(self.up)),
            Figure::counter(name("reads_total"), "reads served by the replica", self.replica_reads),
            Figure::counter(name("primary_reads_total"), "reads sent to the primary while a replica is configured", self.primary_reads),
            Figure::counter(name("waited_out_total"), "reads sent to the primary because the replica had not replayed the scope's last write in time", self.waited_out),
            Figure::counter(name("failed_reads_total"), "reads that failed on the replica and ran again on the primary", self.failed_reads),
            Figure::counter(name("dropped_total"), "times the replica was dropped from reads (lagging or unreachable)", self.dropped),
            Figure::counter(name("restored_total"), "times a dropped replica was taken back", self.restored),
        ]
    }
}

impl Replica {
    pub(crate) fn new(settings: &ReplicaConfig) -> Result<Self> {
        Ok(Self {
            pool: pool::build(&settings.connection)?,
            config: (*settings.connection).clone(),
            max_lag: settings.max_lag,
            wait: settings.wait,
            state: Mutex::new(Health {
                up: false,
                ever_up: false,
                next_probe: Instant::now(),
                lag: None,
            }),
            probing: AtomicBool::new(false),
            counts: Counts::default(),
        })
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn state(&self) -> ReplicaState {
        let h = self.health();
        let c = &self.counts;
        ReplicaState {
            up: h.up,
            lag_ms: h.lag.map(|l| l.as_secs_f64() * 1000.0),
            replica_reads: c.replica_reads.load(Ordering::Relaxed),
            primary_reads: c.primary_reads.load(Ordering::Relaxed),
            waited_out: c.waited_out.load(Ordering::Relaxed),
            failed_reads: c.failed_reads.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            restored: c.restored.load(Ordering::Relaxed),
        }
    }

    /// A replica connection that may serve `scope`'s read now, or `None`
    /// when the read must go to the primary (counted). `primary` is a
    /// connection to the primary, where the scope's write mark is read.
    pub(crate) async fn reader(&self, scope: &Scope, primary: &Object) -> Option<Object> {
        if !self.health().up {
            return self.to_primary();
        }
        // The primary failing here fails the read there too, with its error.
        let Ok(written) = write_mark(primary, scope).await else {
            return self.to_primary();
        };
        let client = match self.pool.get().await {
            Ok(c) => c,
            Err(e) => {
                self.drop_from_reads(&format!("no connection: {e}"));
                return self.to_primary();
            }
        };
        let started = Instant::now();
        loop {
            match write_mark(&client, scope).await {
                Ok(shown) if replayed_mark(written, shown) => break,
                Ok(_) if started.elapsed() < self.wait => tokio::time::sleep(POLL_EVERY).await,
                Ok(_) => {
                    self.counts.waited_out.fetch_add(1, Ordering::Relaxed);
                    return self.to_primary();
                }
                Err(e) => {
                    self.drop_from_reads(&e.to_string());
                    return self.to_primary();
                }
            }
        }
        self.counts.replica_reads.fetch_add(1, Ordering::Relaxed);
        Some(client)
    }

    /// A second replica connection beside one [`Self::reader`] placed, when
    /// the pool has one to spare now.
    pub(crate) async fn spare(&self) -> Option<Object> {
        pool::spare(&self.pool).await
    }

    fn to_primary(&self) -> Option<Object> {
        self.counts.primary_reads.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// A read failed on the replica: it is dropped, and the read goes to the primary.
    pub(crate) fn read_failed(&self, error: &memgate_core::MemoryError) {
        self.counts.failed_reads.fetch_add(1, Ordering::Relaxed);
        self.counts.primary_reads.fetch_add(1, Ordering::Relaxed);
        self.drop_from_reads(&error.to_string());
    }

    fn drop_from_reads(&self, why: &str) {
        let mut h = self.health();
        if h.up {
            h.up = false;
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(reason = %self.config.redact(why), "read replica dropped from reads");
        }
    }

    /// Starts a lag probe when one is due and none runs.
    pub(crate) fn probe_if_due(self: &Arc<Self>, primary: &Pool) {
        if Instant::now() < self.health().next_probe || self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.health().next_probe = Instant::now() + PROBE_EVERY;
        let replica = Arc::clone(self);
        let primary = primary.clone();
        tokio::spawn(async move {
            replica.probe(&primary).await;
            replica.probing.store(false, Ordering::Release);
        });
    }

    /// Times how long the replica takes to replay the primary's position.
    pub(crate) async fn probe(&self, primary: &Pool) {
        // The primary unreachable is not the replica's fault: no verdict.
        let Ok(target) = primary_position(primary).await else {
            return;
        };
        let started = Instant::now();
        let client = match self.pool.get().await {
            Ok(c) => c,
            Err(e) => return self.drop_from_reads(&format!("no connection: {e}")),
        };
        loop {
            match replayed(&client).await {
                Ok(at) if at >= target => {
                    let mut h = self.health();
                    h.lag = Some(started.elapsed());
                    if !h.up {
                        h.up = true;
                        if std::mem::replace(&mut h.ever_up, true) {
                            self.counts.restored.fetch_add(1, Ordering::Relaxed);
                        }
                        tracing::info!("read replica used for reads");
                    }
                    return;
                }
                Ok(_) if started.elapsed() < self.max_lag => tokio::time::sleep(POLL_EVERY).await,
                Ok(_) => return self.drop_from_reads("lag past replica_max_lag_ms"),
                Err(e) => return self.drop_from_reads(&e.to_string()),
            }
        }
    }
}

/// The primary's current WAL position: every write committed before is at
/// or before it.
async fn primary_position(primary: &Pool) -> std::result::Result<u64, ()> {
    let client = primary.get().await.map_err(|_| ())?;
    let row = client
        .query_one("SELECT pg_current_wal_lsn()", &[])
        .await
        .map_err(|_| ())?;
    Ok(u64::from(row.get::<_, PgLsn>(0)))
}

/// `scope`'s write mark as `client`'s server shows it.
async fn write_mark(
    client: &Object,
    scope: &Scope,
) -> std::result::Result<Option<i64>, tokio_postgres::Error> {
    let statement = client.prepare_cached(WRITE_MARK).await?;
    let row = client
        .query_opt(&statement, &[&scope.user, &scope.peer])
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Whether a replica showing the mark `shown` has replayed the primary's
/// `written` (`None`: no scope row).
fn replayed_mark(written: Option<i64>, shown: Option<i64>) -> bool {
    match (written, shown) {
        // Never written, or erased on both.
        (None, None) => true,
        (Some(written), Some(shown)) => shown >= written,
        // Created and not replayed yet, or erased and not replayed yet.
        _ => false,
    }
}

async fn replayed(client: &Object) -> std::result::Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(REPLAYED).await?;
    let row = client.query_one(&statement, &[]).await?;
    Ok(u64::from(row.get::<_, PgLsn>(0)))
}

#[cfg(test)]
mod tests {
    use super::replayed_mark;

    #[test]
    fn a_replica_serves_a_scope_once_it_shows_the_primarys_write_mark() {
        // Never written anywhere.
        assert!(replayed_mark(None, None));
        // The replica has replayed the last write, or a later one.
        assert!(replayed_mark(Some(7), Some(7)));
        assert!(replayed_mark(Some(7), Some(9)));
        // Behind the last write.
        assert!(!replayed_mark(Some(7), Some(6)));
        // The scope created on the primary, not yet on the replica.
        assert!(!replayed_mark(Some(1), None));
        // Erased on the primary, the replica still holding it.
        assert!(!replayed_mark(None, Some(7)));
    }
}
