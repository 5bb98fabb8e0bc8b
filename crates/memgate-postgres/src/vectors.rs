//! Dense vectors of hybrid recall on PostgreSQL (pgvector), `local`'s rules
//! ([`memgate_recall::vectors`]) with the database doing the bookkeeping.
//!
//! - Opt-in: only a backend with an embedder ([`PostgresBackend::with_embedder`],
//!   `backend_config.embedder`) applies the vector migration
//!   ([`crate::schema::migrate_with`]); without pgvector on the server that
//!   is a configuration error naming the setting.
//! - Storage: table `vectors`, one unit vector per turn or active memory,
//!   with its scope; erasure cascades from the turn, memory or scope row, so
//!   forget, import and retention need no code here. `vector_model` names
//!   the one model of the schema's vectors.
//! - Writing: triggers queue every new turn and every new or changed active
//!   memory (`vector_queue`), whichever replica writes. [`index_step`]
//!   takes up to a batch from the queue, embeds it outside any transaction
//!   (the embedder's thread, never the runtime's), and stores it in one
//!   transaction; a session advisory lock per schema lets one replica index
//!   at a time. [`PostgresBackend`] runs it in the background.
//! - Model change is explicit, as in `local`: vectors of another model keep
//!   recall lexical and the indexer idle until [`PostgresBackend::reembed`].
//! - Search: inner products (`<#>`, vectors are unit length: the cosine)
//!   of the scope's vectors, through the model's HNSW index once
//!   [`crate::hnsw`] has built it (candidates re-ordered by their exact
//!   inner product), else exact over every vector of the scope; the fusion
//!   is `local`'s own ([`memgate_recall::fusion`]).

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use crate::config::{PostgresConfig, VectorIndex};
use crate::pool::{db_error, pool_error};
use bytes::{BufMut, BytesMut};
use deadpool_postgres::{GenericClient, Pool};
use memgate_core::{MemoryError, Result};
use memgate_embed::Embedder;
use memgate_recall::ranked::Among;
use memgate_recall::vectors::{
    turn_text, vector_key, RetrievalCounts, RetrievalStats, VectorProgress,
};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// The first key of the indexer's advisory lock (`MGVE`); the second is the
/// schema's hash, so schemas of one database index independently.
const INDEXER_LOCK: i32 = 0x4D47_5645;

/// Rows the background indexer embeds per step.
pub const INDEXER_BATCH: usize = 32;
/// Pause when caught up (new turns wait at most this long for a vector).
const INDEXER_IDLE: Duration = Duration::from_millis(500);
/// Pause after a failure (embedder, database).
const INDEXER_BACKOFF: Duration = Duration::from_secs(5);

/// The embedder of a backend and what it counted.
pub struct Vectors {
    pub(crate) embedder: Arc<dyn Embedder>,
    /// The key vectors are written and searched under: the model and the
    /// embedding recipe, as `local` names them ([`vector_key`]; postgres
    /// embeds the same [`turn_text`]).
    key: String,
    pub(crate) stats: RetrievalStats,
    /// One indexer step at a time in this process (the background task and
    /// an explicit `reembed` or `index_all_vectors`).
    step: tokio::sync::Mutex<()>,
    /// The dimension of this model's stored vectors, once seen (a key names
    /// one model, so its dimension never changes).
    dims: std::sync::OnceLock<i32>,
}

impl Vectors {
    pub(crate) fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self {
            key: vector_key(embedder.model()),
            embedder,
            stats: RetrievalStats::default(),
            step: tokio::sync::Mutex::new(()),
            dims: std::sync::OnceLock::new(),
        }
    }

    /// The key this backend's vectors are stored and searched under.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

/// A query or item vector as a statement parameter, in pgvector's binary
/// form (dimensions, a reserved zero, then big-endian float4s).
#[derive(Debug)]
pub struct VectorParam<'a>(pub &'a [f32]);

impl ToSql for VectorParam<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let dims = i16::try_from(self.0.len())?;
        out.put_i16(dims);
        out.put_i16(0);
        for x in self.0 {
            out.put_f32(*x);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        ty.name() == "vector"
    }

    to_sql_checked!();
}

/// A queued item read for embedding.
struct Pending {
    turn: Option<i64>,
    memory: Option<(i64, i32)>,
    text: String,
}

fn err(config: &PostgresConfig) -> impl Fn(tokio_postgres::Error) -> MemoryError + '_ {
    move |e| db_error(config, &e)
}

/// The model the schema's vectors belong to, if any.
async fn stored_model(c: &impl GenericClient, config: &PostgresConfig) -> Result<Option<String>> {
    let row = c
        .query_opt("SELECT model FROM vector_model WHERE id = 1", &[])
        .await
        .map_err(err(config))?;
    Ok(row.map(|r| r.get(0)))
}

/// One indexer step: embeds up to `batch` queued items and stores them;
/// returns how many were written (0: caught up, another replica is
/// indexing and `wait` is false, or the schema's vectors are of another
/// model). An embedder failure is an error and writes nothing.
pub(crate) async fn index_step(
    pool: &Pool,
    config: &PostgresConfig,
    vectors: &Vectors,
    batch: usize,
    wait: bool,
) -> Result<usize> {
    let _step = vectors.step.lock().await;
    let mut c = pool.get().await.map_err(|e| pool_error(config, e))?;
    let lock = if wait {
        "SELECT pg_advisory_lock($1, hashtext($2)), true"
    } else {
        "SELECT 1, pg_try_advisory_lock($1, hashtext($2))"
    };
    let held: bool = c
        .query_one(lock, &[&INDEXER_LOCK, &config.schema])
        .await
        .map_err(err(config))?
        .get(1);
    if !held {
        return Ok(0);
    }
    let result = locked_step(&mut c, config, vectors, batch).await;
    // A session lock outlives the step unless released (a broken
    // connection releases it with the session).
    let _ = c
        .execute(
            "SELECT pg_advisory_unlock($1, hashtext($2))",
            &[&INDEXER_LOCK, &config.schema],
        )
        .await;
    result
}

async fn locked_step(
    c: &mut deadpool_postgres::Object,
    config: &PostgresConfig,
    vectors: &Vectors,
    batch: usize,
) -> Result<usize> {
    let model = vectors.key.clone();
    if stored_model(&*c, config).await?.is_some_and(|s| s != model) {
        return Ok(0);
    }
    let limit = batch.max(1) as i64;
    let rows = c
        .query(
            "SELECT q.turn_id, q.memory_id, m.version, coalesce(t.text, m.text), t.speaker,
                    (SELECT p.text FROM turns p WHERE p.scope_id = t.scope_id
                       AND p.thread = t.thread AND p.seq < t.seq ORDER BY p.seq DESC LIMIT 1),
                    t.occurred_at
             FROM vector_queue q
             LEFT JOIN turns t ON t.id = q.turn_id
             LEFT JOIN memories m ON m.id = q.memory_id
             ORDER BY q.id LIMIT $1",
            &[&limit],
        )
        .await
        .map_err(err(config))?;
    let work: Vec<Pending> = rows
        .iter()
        .map(|r| {
            let turn: Option<i64> = r.get(0);
            let text: String = r.get(3);
            Pending {
                turn,
                memory: r.get::<_, Option<i64>>(1).map(|id| (id, r.get(2))),
                text: match turn {
                    Some(_) => turn_text(&text, r.get(4), r.get(6), r.get(5)),
                    None => text,
                },
            }
        })
        .collect();
    if work.is_empty() {
        return Ok(0);
    }
    let embedder = Arc::clone(&vectors.embedder);
    let texts: Vec<String> = work.iter().map(|w| w.text.clone()).collect();
    let embedded = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        embedder.embed(&refs)
    })
    .await
    .map_err(|e| MemoryError::backend(format!("vector indexer: the embedder task failed: {e}")))?
    .map_err(|e| MemoryError::backend(format!("vector indexer: {e}")))?;
    if embedded.len() != work.len() {
        return Err(MemoryError::backend(
            "vector indexer: the embedder returned a wrong number of vectors",
        ));
    }
    let dims = embedded[0].len() as i32;
    let tx = c.transaction().await.map_err(err(config))?;
    // Re-checked in the transaction: a concurrent `reembed` wins.
    tx.execute(
        "INSERT INTO vector_model (id, model, dims) VALUES (1, $1, $2) ON CONFLICT DO NOTHING",
        &[&model, &dims],
    )
    .await
    .map_err(err(config))?;
    if stored_model(&tx, config).await?.as_deref() != Some(model.as_str()) {
        return Ok(0);
    }
    let memory_ids: Vec<i64> = work.iter().filter_map(|w| w.memory.map(|m| m.0)).collect();
    // A memory revised meanwhile waits for this transaction (or this one
    // for it, and then sees the new version and skips the stale vector).
    tx.execute(
        "SELECT 1 FROM memories WHERE id = ANY($1) FOR SHARE",
        &[&memory_ids],
    )
    .await
    .map_err(err(config))?;
    let turn_sql = tx
        .prepare(
            "WITH stored AS (
                 INSERT INTO vectors (scope_id, turn_id, model, embedding)
                 SELECT scope_id, id, $2, $3 FROM turns WHERE id = $1
                 ON CONFLICT (turn_id) DO UPDATE
                     SET model = excluded.model, embedding = excluded.embedding
                 RETURNING 1)
             DELETE FROM vector_queue WHERE turn_id = $1",
        )
        .await
        .map_err(err(config))?;
    let memory_sql = tx
        .prepare(
            "WITH current AS (
                 SELECT scope_id, id FROM memories
                 WHERE id = $1 AND version = $4 AND state = 'active'),
             stored AS (
                 INSERT INTO vectors (scope_id, memory_id, model, embedding)
                 SELECT scope_id, id, $2, $3 FROM current
                 ON CONFLICT (memory_id) DO UPDATE
                     SET model = excluded.model, embedding = excluded.embedding
                 RETURNING 1)
             DELETE FROM vector_queue WHERE memory_id = (SELECT id FROM current)",
        )
        .await
        .map_err(err(config))?;
    for (w, v) in work.iter().zip(&embedded) {
        let vector = VectorParam(v);
        match (w.turn, w.memory) {
            (Some(turn), _) => tx.execute(&turn_sql, &[&turn, &model, &vector]).await,
            (None, Some((memory, version))) => {
                tx.execute(&memory_sql, &[&memory, &model, &vector, &version])
                    .await
            }
            (None, None) => continue,
        }
        .map_err(err(config))?;
    }
    tx.commit().await.map_err(err(config))?;
    vectors
        .stats
        .vectors_written
        .fetch_add(work.len() as u64, Ordering::Relaxed);
    Ok(work.len())
}

/// The bounded background indexer: one task, one batch at a time, idle when
/// caught up, backing off after failures; it ends when the backend is
/// dropped or its pool closed.
pub(crate) fn spawn_indexer(pool: Pool, config: PostgresConfig, vectors: Weak<Vectors>) {
    tokio::spawn(async move {
        loop {
            let Some(v) = vectors.upgrade() else { return };
            let pause = match index_step(&pool, &config, &v, INDEXER_BATCH, false).await {
                Ok(0) => INDEXER_IDLE,
                Ok(_) => Duration::ZERO,
                Err(MemoryError::Closed(_)) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "postgres vector indexer step failed; retrying later");
                    INDEXER_BACKOFF
                }
            };
            drop(v);
            if pool.is_closed() {
                return;
            }
            tokio::time::sleep(pause).await;
        }
    });
}

/// The exact nearest-items statement (`$1`, `$2` the scope, `$3` the query
/// vector, `$4` the model, `$5` the limit), over every item's vector, or
/// over the memories' alone through `vectors_of_memories`.
pub fn exact_nearest_sql(memories_only: bool) -> String {
    exact_scan(if memories_only {
        " AND memory_id IS NOT NULL"
    } else {
        ""
    })
}

/// [`exact_nearest_sql`]'s statement with `filter` added to its `WHERE`.
fn exact_scan(filter: &str) -> String {
    format!(
        "SELECT coalesce(turn_id, -memory_id),
                (-(embedding OPERATOR(public.<#>) $3::public.vector))::float4
         FROM vectors WHERE scope_id = {SCOPE_ID} AND model = $4{filter}
         ORDER BY embedding OPERATOR(public.<#>) $3::public.vector,
                  coalesce(turn_id, -memory_id) DESC
         LIMIT $5"
    )
}

/// The nearest-items statement of an HNSW-indexed model: through the
/// index for a scope of at least `min_items` items (its `scope_docs`
/// count) once the index is valid, else the exact scan
/// ([`exact_nearest_sql`]). Both branches are in the one prepared
/// statement and the scope's size and the index's state pick one when it
/// runs (each is a one-time filter): under the pool's generic plans the
/// planner sees every scope at the table's average size, so in a table of
/// many small scopes it scanned a heavy scope's every vector exactly, and
/// in a table of one heavy scope it sent small ones through the graph.
/// While the index builds, the exact branch keeps the scope's btree (the
/// index's branch, which cannot use it, would scan the whole table).
///
/// The index's branch orders by the indexed expression and carries the
/// model as the partial index's literal (`$4` stays a parameter so both
/// shapes bind alike); `scope_id + 0` keeps the `(scope_id, model)` btree
/// from serving it. The index's `$5` candidates (an iterative scan returns
/// them in relaxed order) are re-ordered by their exact inner product; the
/// graph search's cost follows the candidates it keeps, so it keeps no
/// more than recall fuses (`docs/design/hnsw.md`). Parameters: `$1` user,
/// `$2` peer, `$3` query vector, `$4` model, `$5` limit.
pub fn hnsw_nearest_sql(model: &str, dims: i32, min_items: u64) -> String {
    let index = crate::hnsw::index_name(model, dims);
    let model = crate::hnsw::literal(model);
    let large = format!(
        "(coalesce((SELECT docs FROM scope_docs WHERE scope_id = {SCOPE_ID}) >= {min_items}, false)
          AND coalesce((SELECT indisvalid FROM pg_catalog.pg_index
                        WHERE indexrelid = pg_catalog.to_regclass('{index}')), false))"
    );
    let exact = exact_scan(&format!(" AND NOT {large}"));
    format!(
        "SELECT id, score FROM (
             (SELECT coalesce(turn_id, -memory_id) AS id,
                     (-(embedding OPERATOR(public.<#>) $3::public.vector))::float4 AS score
              FROM vectors WHERE scope_id + 0 = {SCOPE_ID} AND model = {model} AND model = $4
                AND {large}
              ORDER BY (embedding::public.vector({dims}))
                       OPERATOR(public.<#>) ($3::public.vector({dims}))
              LIMIT $5)
             UNION ALL
             ({exact})) candidates
         ORDER BY score DESC, id DESC
         LIMIT $5"
    )
}

impl PostgresBackend {
    /// Embeds `query` (redacted first, on the embedder's thread) when this
    /// backend has an embedder; a failure is counted and logged, and recall
    /// stays lexical.
    pub(crate) async fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        let v = self.vectors.as_ref()?;
        let query = self.redactor.redact(query).text.into_owned();
        let embedder = Arc::clone(&v.embedder);
        let started = Instant::now();
        let embedded = tokio::task::spawn_blocking(move || embedder.embed_query(&query)).await;
        v.stats
            .query_embed_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match embedded {
            Ok(Ok(vector)) => Some(vector),
            Ok(Err(e)) => {
                v.stats.embedder_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "embedder failed; recall is lexical");
                None
            }
            Err(e) => {
                v.stats.embedder_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "embedder task failed; recall is lexical");
                None
            }
        }
    }

    /// True when the schema's vectors are of this backend's model (or there
    /// are none yet): dense retrieval may join the ranking.
    pub(crate) async fn vectors_usable(&self, c: &impl GenericClient) -> Result<bool> {
        let Some(v) = &self.vectors else {
            return Ok(false);
        };
        Ok(stored_model(c, &self.config)
            .await?
            .is_none_or(|m| m == v.key))
    }

    /// The dimension of this backend's model's stored vectors, if any.
    async fn model_dims(&self, c: &impl GenericClient) -> Result<Option<i32>> {
        let Some(v) = &self.vectors else {
            return Ok(None);
        };
        if let Some(d) = v.dims.get() {
            return Ok(Some(*d));
        }
        let dims = crate::hnsw::stored_dims(c, &self.config, &v.key).await?;
        if let Some(d) = dims {
            let _ = v.dims.set(d);
        }
        Ok(dims)
    }

    /// The `limit` items of the caller's scope nearest to `query` among
    /// `among`, best first, with their cosine.
    ///
    /// Among memories alone the search is exact over the memories' vectors
    /// (`vectors_of_memories`): a heavy user's turns must not crowd the
    /// facts a new turn may change out of the nearest, and memories are
    /// few beside turns, so no approximate index is needed for them.
    /// Otherwise every item competes (among turns alone the few memories
    /// found are dropped by the caller's category check).
    pub(crate) async fn nearest_items(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        query: &[f32],
        limit: usize,
        among: Among<'_>,
    ) -> Result<Vec<(i64, f32)>> {
        let Some(v) = &self.vectors else {
            return Ok(Vec::new());
        };
        let model = v.key.as_str();
        let q = VectorParam(query);
        let limit = limit as i64;
        let sql = match (self.config.vector_index, among.admits_turns()) {
            (_, false) => exact_nearest_sql(true),
            (VectorIndex::Hnsw { min_items, .. }, true) => match self.model_dims(c).await? {
                Some(dims) => hnsw_nearest_sql(model, dims, min_items),
                None => exact_nearest_sql(false),
            },
            (VectorIndex::Exact, true) => exact_nearest_sql(false),
        };
        let params: [&(dyn ToSql + Sync); 5] = [&scope.user, &scope.peer, &q, &model, &limit];
        self.item_cosines(c, &sql, &params).await
    }

    /// The cosine to `query` of each of `items` (turn ids positive, memory
    /// ids negative) that has a vector of this backend's model.
    pub(crate) async fn similarity(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        query: &[f32],
        items: &[i64],
    ) -> Result<HashMap<i64, f32>> {
        let Some(v) = &self.vectors else {
            return Ok(HashMap::new());
        };
        if items.is_empty() {
            return Ok(HashMap::new());
        }
        let model = v.key.as_str();
        let q = VectorParam(query);
        let (turns, memories): (Vec<i64>, Vec<i64>) = items.iter().partition(|i| **i > 0);
        let memories: Vec<i64> = memories.into_iter().map(|i| -i).collect();
        let sql = format!(
            "SELECT coalesce(turn_id, -memory_id),
                    (-(embedding OPERATOR(public.<#>) $3::public.vector))::float4
             FROM vectors WHERE scope_id = {SCOPE_ID} AND model = $4
               AND (turn_id = ANY($5) OR memory_id = ANY($6))"
        );
        let params: [&(dyn ToSql + Sync); 6] =
            [&scope.user, &scope.peer, &q, &model, &turns, &memories];
        self.item_cosines(c, &sql, &params).await
    }

    /// Runs `sql`, whose rows are an item id (a turn's, or a memory's
    /// negated) and its cosine; vectors of another length (a foreign row)
    /// are never compared by the statements.
    async fn item_cosines<C: FromIterator<(i64, f32)>>(
        &self,
        c: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<C> {
        let rows = self.rows(c, sql, params).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Runs indexer steps until nothing is left (tests, benchmarks);
    /// returns the rows written. Waits for another replica's step.
    pub async fn index_all_vectors(&self, batch: usize) -> Result<usize> {
        let Some(v) = &self.vectors else {
            return Ok(0);
        };
        drop(self.client().await?);
        let mut total = 0;
        loop {
            match index_step(&self.pool, &self.config, v, batch, true).await? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    }

    /// Adopts the configured model: drops every stored vector (of any
    /// model) and queues every turn and active memory again, so the indexer
    /// embeds everything with the new model. Returns how many vectors were
    /// dropped. The explicit step a model change needs (`memgate reembed`).
    pub async fn reembed(&self) -> Result<usize> {
        let Some(v) = &self.vectors else {
            return Err(MemoryError::invalid(
                "backend_config.embedder",
                "must be configured to re-embed",
            ));
        };
        let _step = v.step.lock().await;
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.err(e))?;
        // Waits for a step of another replica to finish.
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&INDEXER_LOCK, &self.config.schema],
        )
        .await
        .map_err(|e| self.err(e))?;
        let dropped = tx
            .execute("DELETE FROM vectors", &[])
            .await
            .map_err(|e| self.err(e))?;
        tx.batch_execute(
            "DELETE FROM vector_model;
             INSERT INTO vector_queue (turn_id) SELECT id FROM turns ORDER BY id
             ON CONFLICT DO NOTHING;
             INSERT INTO vector_queue (memory_id)
             SELECT id FROM memories WHERE state = 'active' ORDER BY id ON CONFLICT DO NOTHING;",
        )
        .await
        .map_err(|e| self.err(e))?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(dropped as usize)
    }

    /// What the indexer has done and has left (`local`'s [`VectorProgress`],
    /// so `doctor` prints the same line).
    pub async fn vector_progress(&self) -> Result<VectorProgress> {
        let configured = self.vectors.as_ref().map(|v| v.key.clone());
        let c = self.client().await?;
        let has_vectors = crate::schema::vectors_version(&**c, &self.config).await? > 0;
        let total: i64 = self
            .row(
                &c,
                "SELECT (SELECT count(*) FROM turns)
                      + (SELECT count(*) FROM memories WHERE state = 'active')",
                &[],
            )
            .await?
            .get(0);
        let (stored, embedded) = if has_vectors {
            let stored = stored_model(&c, &self.config).await?;
            let counted = configured.clone().or(stored.clone());
            let embedded: i64 = match &counted {
                Some(m) if stored.as_deref() == Some(m.as_str()) => self
                    .row(&c, "SELECT count(*) FROM vectors WHERE model = $1", &[m])
                    .await?
                    .get(0),
                _ => 0,
            };
            (stored, embedded)
        } else {
            (None, 0)
        };
        Ok(VectorProgress {
            model_mismatch: matches!((&configured, &stored), (Some(c), Some(s)) if c != s),
            model: configured,
            stored_model: stored,
            embedded: embedded as u64,
            total: total as u64,
        })
    }

    /// Counts of how recalls were answered.
    pub fn retrieval_counts(&self) -> RetrievalCounts {
        self.vectors
            .as_ref()
            .map_or_else(RetrievalCounts::default, |v| RetrievalCounts {
                hybrid: v.stats.hybrid.load(Ordering::Relaxed),
                embedder_failures: v.stats.embedder_failures.load(Ordering::Relaxed),
                vectors_written: v.stats.vectors_written.load(Ordering::Relaxed),
                query_embed_nanos: v.stats.query_embed_nanos.load(Ordering::Relaxed),
                // The scan runs inside PostgreSQL (pgvector): no split here.
                ..RetrievalCounts::default()
            })
    }
}
