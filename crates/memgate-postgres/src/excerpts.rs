//! Each turn's first-turn excerpt, kept with it (migration 11), so a block
//! reads the newest excerpts through a partial index instead of reading the
//! newest turns and excerpting them on every call — `local`'s design
//! (docs/design/first-turn-block.md), on the same
//! [`memgate_recall::salience::excerpt`].
//!
//! A capture computes its turns' excerpts in Rust and writes them in the
//! same insert ([`crate::capture`]), with the version of the rules they were
//! computed under ([`EXCERPT_RULES`], column `excerpt_rules`). Turns stored
//! before the columns existed, or under older rules, are computed again in
//! the background ([`spawn_backfill`]), oldest first, in batches. Until no
//! such turn is left (`memgate_meta.excerpt_rules` names the rules every
//! turn's excerpt follows), blocks are built the old way, from the newest
//! turns' text ([`crate::first_turn`]), so a block is never built from half
//! the excerpts. A process of an older version still running during a
//! rolling upgrade stores turns without an excerpt after that; every
//! process looks for those every [`MISSING_SWEEP_INTERVAL`] (an index of
//! exactly them, empty otherwise) and computes them.
//!
//! A batch locks its rows with `FOR NO KEY UPDATE SKIP LOCKED`: it never
//! waits for a row, so it can never be part of a deadlock with a forget or
//! a retention sweep deleting the same turns (those rows are skipped, and
//! gone when they commit), and it does not block a fact citing a turn (a
//! key-share lock). One process computes at a time (a transaction-level
//! advisory lock per batch); the others wait and then find nothing left.

use crate::config::PostgresConfig;
use crate::pool::query;
use crate::pool::{db_error, pool_error};
use deadpool_postgres::{GenericClient, Pool};
use memgate_core::{MemoryError, Result};
pub use memgate_recall::salience::EXCERPT_RULES;
use memgate_recall::salience::{excerpt, Excerpt, SpeakerNames};
use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

/// Turns computed per batch (one transaction): at ~16,000 turns/s
/// (BENCHMARKS.md) a batch holds its rows for some 60 ms.
pub const BACKFILL_BATCH: i64 = 1_000;
/// How long a process waits before trying again while another one computes.
const BUSY_RETRY: Duration = Duration::from_secs(1);
/// How often a process looks for turns stored without an excerpt (an index
/// probe when there are none), as often as the retention sweep.
pub const MISSING_SWEEP_INTERVAL: Duration = memgate_core::forget::RETENTION_SWEEP_INTERVAL;
/// The advisory lock of a batch (`MGEX` in ASCII).
const BACKFILL_LOCK: i64 = 0x4D47_4558;
/// The `memgate_meta` key naming the rules every stored excerpt follows.
const READY_KEY: &str = "excerpt_rules";

/// The excerpt columns of a set of turns, as statement parameters (arrays
/// in the turns' order; a turn without an excerpt has NULLs and `false`).
#[derive(Default)]
pub(crate) struct ExcerptColumns {
    pub text: Vec<Option<String>>,
    pub score: Vec<Option<f64>>,
    pub terms: Vec<Option<String>>,
    pub about: Vec<bool>,
}

impl ExcerptColumns {
    pub fn push(&mut self, e: Option<Excerpt>) {
        match e {
            Some(e) => {
                self.text.push(Some(e.text));
                self.score.push(Some(e.score));
                self.terms.push(Some(e.terms.join(" ")));
                self.about.push(e.about_speaker);
            }
            None => {
                self.text.push(None);
                self.score.push(None);
                self.terms.push(None);
                self.about.push(false);
            }
        }
    }
}

/// True when every stored turn's excerpt follows [`EXCERPT_RULES`]: the
/// marker says so, or no turn is left to compute (then the marker is set).
pub(crate) async fn settle(c: &impl GenericClient, config: &PostgresConfig) -> Result<bool> {
    if marked(c, config).await? {
        return Ok(true);
    }
    let stale = query(
        c,
        config,
        "SELECT EXISTS (SELECT 1 FROM turns WHERE excerpt_rules <> $1)",
        &[&EXCERPT_RULES],
    )
    .await?[0]
        .get::<_, bool>(0);
    if stale {
        return Ok(false);
    }
    mark(c, config).await?;
    Ok(true)
}

/// Whether `memgate_meta` says every excerpt follows [`EXCERPT_RULES`].
pub(crate) async fn marked(c: &impl GenericClient, config: &PostgresConfig) -> Result<bool> {
    let rows = query(
        c,
        config,
        "SELECT value FROM memgate_meta WHERE key = $1",
        &[&READY_KEY],
    )
    .await?;
    Ok(rows
        .first()
        .is_some_and(|r| r.get::<_, &str>(0) == EXCERPT_RULES.to_string()))
}

async fn mark(c: &impl GenericClient, config: &PostgresConfig) -> Result<()> {
    query(
        c,
        config,
        "INSERT INTO memgate_meta (key, value) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&READY_KEY, &EXCERPT_RULES.to_string()],
    )
    .await
    .map(|_| ())
}

/// Which turns a pass computes.
#[derive(Clone, Copy)]
enum Pass {
    /// Every turn whose excerpt does not follow [`EXCERPT_RULES`] (after an
    /// upgrade; a full walk by id, once), then the marker is set.
    Stale,
    /// Turns stored with no excerpt at all (`excerpt_rules = 0`, the
    /// `turns_never_excerpted` index): what a process of a version before
    /// the excerpt columns writes while a rolling upgrade replaces it.
    Missing,
}

/// What one batch did.
enum Batch {
    /// Computed the turns up to this id; more may follow.
    Computed { through: i64, turns: usize },
    /// Nothing left after the cursor (a [`Pass::Stale`] has set the marker).
    Done { turns: usize },
    /// Another process holds the batch lock.
    Busy,
}

/// One batch of `pass`: the excerpts of at most [`BACKFILL_BATCH`] of its
/// turns after `after`.
async fn backfill_batch(
    pool: &Pool,
    config: &PostgresConfig,
    pass: Pass,
    after: i64,
) -> Result<Batch> {
    let mut client = pool.get().await.map_err(|e| pool_error(config, e))?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_error(config, &e))?;
    let locked = query(
        &tx,
        config,
        "SELECT pg_try_advisory_xact_lock($1)",
        &[&BACKFILL_LOCK],
    )
    .await?[0]
        .get::<_, bool>(0);
    if !locked {
        return Ok(Batch::Busy);
    }
    let rows = match pass {
        // Another process may have finished the walk meanwhile (the marker
        // is already set: nothing to write).
        Pass::Stale if marked(&tx, config).await? => return Ok(Batch::Done { turns: 0 }),
        Pass::Stale => {
            query(
                &tx,
                config,
                "SELECT id, scope_id, speaker, text FROM turns
                 WHERE id > $1 AND excerpt_rules <> $2
                 ORDER BY id LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED",
                &[&after, &EXCERPT_RULES, &BACKFILL_BATCH],
            )
            .await?
        }
        Pass::Missing => {
            query(
                &tx,
                config,
                "SELECT id, scope_id, speaker, text FROM turns
                 WHERE id > $1 AND excerpt_rules = 0
                 ORDER BY id LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED",
                &[&after, &BACKFILL_BATCH],
            )
            .await?
        }
    };
    // A scope's speakers in this batch are its names (capture meets them
    // one by one; a batch holds a stretch of each conversation).
    let mut names: HashMap<i64, SpeakerNames> = HashMap::new();
    for r in &rows {
        names
            .entry(r.get(1))
            .or_default()
            .add(r.get::<_, Option<&str>>(2));
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut columns = ExcerptColumns::default();
    for r in &rows {
        ids.push(r.get::<_, i64>(0));
        let names = &names[&r.get::<_, i64>(1)];
        columns.push(excerpt(r.get(3), names.as_slice()));
    }
    if !ids.is_empty() {
        query(
            &tx,
            config,
            "UPDATE turns t SET excerpt = x.excerpt, excerpt_score = x.score,
                 excerpt_terms = x.terms, excerpt_about = x.about, excerpt_rules = $6
             FROM unnest($1::bigint[], $2::text[], $3::float8[], $4::text[], $5::bool[])
                  AS x(id, excerpt, score, terms, about)
             WHERE t.id = x.id",
            &[
                &ids,
                &columns.text,
                &columns.score,
                &columns.terms,
                &columns.about,
                &EXCERPT_RULES,
            ],
        )
        .await?;
    }
    let turns = ids.len();
    let batch = match ids.last() {
        Some(&through) if turns as i64 == BACKFILL_BATCH => Batch::Computed { through, turns },
        _ => {
            if matches!(pass, Pass::Stale) {
                mark(&tx, config).await?;
            }
            Batch::Done { turns }
        }
    };
    tx.commit().await.map_err(|e| db_error(config, &e))?;
    Ok(batch)
}

/// Runs `pass` to its end (waiting while another process computes) while
/// `go_on` holds; how many turns it computed.
async fn run_pass(
    pool: &Pool,
    config: &PostgresConfig,
    pass: Pass,
    go_on: &impl Fn() -> bool,
) -> Result<usize> {
    let mut after = 0;
    let mut computed = 0;
    while go_on() {
        match backfill_batch(pool, config, pass, after).await? {
            Batch::Computed { through, turns } => {
                after = through;
                computed += turns;
                if computed % 100_000 < turns {
                    tracing::info!(computed, "postgres first-turn excerpts: computing");
                }
            }
            Batch::Done { turns } => return Ok(computed + turns),
            Batch::Busy => tokio::time::sleep(BUSY_RETRY).await,
        }
    }
    Ok(computed)
}

/// Computes every stale excerpt, then every missing one, while `go_on`
/// holds; how many turns this call computed.
pub(crate) async fn backfill(
    pool: &Pool,
    config: &PostgresConfig,
    go_on: impl Fn() -> bool,
) -> Result<usize> {
    let stale = run_pass(pool, config, Pass::Stale, &go_on).await?;
    Ok(stale + run_pass(pool, config, Pass::Missing, &go_on).await?)
}

/// Runs [`backfill`] in the background now and every
/// [`MISSING_SWEEP_INTERVAL`] until the backend (`alive`) is dropped or the
/// pool closed; a failed batch is retried at the next round (the turns
/// already computed stay computed).
pub(crate) fn spawn_backfill(pool: Pool, config: PostgresConfig, alive: Weak<()>) {
    tokio::spawn(async move {
        let go_on = || !pool.is_closed() && alive.strong_count() > 0;
        while go_on() {
            match backfill(&pool, &config, go_on).await {
                Ok(computed) if computed > 0 => {
                    tracing::info!(computed, "postgres first-turn excerpts: computed");
                }
                Ok(_) => {}
                Err(MemoryError::Closed(_)) => return,
                Err(e) => tracing::warn!(error = %e, "postgres first-turn excerpts: batch failed"),
            }
            tokio::time::sleep(MISSING_SWEEP_INTERVAL).await;
        }
    });
}
