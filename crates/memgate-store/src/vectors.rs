//! Dense vectors for hybrid recall: stored in the same SQLite file, scoped
//! like every other row, written by a bounded indexer, searched from an
//! in-memory copy per scope.
//!
//! - Table `vectors`: one unit vector per (model, item), `item` being the
//!   recall-index rowid (turn `n`, memory `-n`), with the item's scope and,
//!   for memories, the version embedded (a revision is embedded again; a
//!   memory that stops being current loses its vector by a trigger).
//!   `vector_model` records the one key the file's vectors belong to: the
//!   model and the [`RECIPE`] of the text embedded ([`vector_key`]).
//! - Writing: [`crate::MemoryStore::index_vectors`] embeds up to `batch` rows that
//!   have no vector yet (turns in id order after the last one embedded, then
//!   active memories whose version has none) *outside* the write lock and
//!   stores them in one transaction. Capture never waits for an embedder;
//!   [`crate::LocalBackend`] runs this step in the background.
//! - Model change is explicit: when the configured key (model or recipe)
//!   differs from the file's, nothing is embedded and recall stays lexical (saying why) until
//!   [`crate::MemoryStore::reembed`] drops the old vectors and adopts the new model.
//! - Search: each scope's vectors are loaded once into memory as int8 codes
//!   ([`crate::quantized`]) and topped up from `seq` on every search; the
//!   query is compared with all of them, and the best [`RESCORE_FACTOR`] ×
//!   wanted are re-scored exactly from their stored float32 vectors (dot
//!   products of unit vectors: the cosine). Erasure deletes rows with
//!   [`erase_vectors`] and then drops the in-memory copies. A retired
//!   memory's code may stay in a copy, but with no stored vector to be
//!   re-scored from it is never returned.

use crate::error::db_error;
use crate::quantized::Quantized;
use memgate_core::{MemoryError, Result};
use memgate_embed::Embedder;
use memgate_recall::ranked::Among;
use memgate_recall::vectors::{
    turn_text, vector_key, RetrievalCounts, RetrievalStats, VectorProgress,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Nearest items best first with their cosine, and the cosine of each
/// other asked-for item that has a vector.
type Neighbours = (Vec<(i64, f32)>, HashMap<i64, f32>);

/// How the vectors of the file relate to the configured embedder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelState {
    /// No embedder configured: recall is lexical.
    Off,
    /// The file's vectors (if any) are of the configured model.
    Current,
    /// The file holds vectors of another model or recipe (keys as in
    /// [`vector_key`]); `reembed` adopts the configured one.
    Mismatch { stored: String, configured: String },
}

/// One scope's vectors in memory, as int8 codes ([`Quantized`]).
#[derive(Default)]
struct ScopeVectors {
    /// Every item's.
    codes: Quantized,
    /// The memories' again: a search among memories alone (the facts a new
    /// turn may change, a search of one memory kind) must not have a
    /// heavy user's turns crowd them out of the nearest. Memories are
    /// few beside turns, so the copy is small.
    memories: Quantized,
    /// Highest `seq` loaded.
    seen: i64,
}

impl ScopeVectors {
    /// The codes a search among `among` scans: memories alone when no turn
    /// competes. Among turns alone every item is scanned; the memories
    /// that could crowd turns are few, and the caller drops them.
    fn among(&self, among: Among<'_>) -> &Quantized {
        if among.admits_turns() {
            &self.codes
        } else {
            &self.memories
        }
    }
}

/// What a nearest-items search is asked for.
#[derive(Clone, Copy)]
pub(crate) struct Wanted<'a> {
    /// Items returned, at most.
    pub limit: usize,
    /// Items the sign prefilter keeps per int8 candidate (recall:
    /// [`PREFILTER_FACTOR`]; `usize::MAX`: every item is int8-scanned,
    /// the search before the prefilter; evaluations compare them).
    pub prefilter: usize,
    /// Which items compete.
    pub among: Among<'a>,
}

/// Candidates the int8 scan passes on per neighbour wanted; they are
/// re-scored exactly, so only an item ranked below this margin by its
/// quantised score could be missed (`quantized::tests`: none of the top 10
/// of 2,000 random unit vectors with four times as many candidates).
const RESCORE_FACTOR: usize = 4;

/// Items the 1-bit sign prefilter ([`crate::quantized`]) lets through to
/// the int8 scan, per candidate the int8 scan passes on (so 3,200 for a
/// recall of 10: 50 wanted × [`RESCORE_FACTOR`] × 16). Scopes with fewer
/// vectors skip the pass. Measured with `bench` at 100k (overlap@10 of the
/// dense top 10 with the exact ranking, 40 queries): ×16 1.000, ×8 0.997,
/// ×4 0.993, ×2 0.985; the scan takes 1.4 ms p50 at ×16 against 4.4 ms
/// without the pass. LoCoMo's
/// prefilter variants (`memgate eval locomo`) run it harder on real turns.
pub const PREFILTER_FACTOR: usize = 16;

/// The stored float32 vectors of the items `?1` (a JSON array, ascending)
/// of model `?2`: the list outermost, one lookup in `(item, model)` each.
const EXACT_VECTORS: &str = "SELECT v.item, v.vector FROM json_each(?1) AS w
     CROSS JOIN vectors AS v ON v.item = w.value AND v.model = ?2";

/// The in-memory copies, by scope.
#[derive(Default)]
pub struct VectorCache(Mutex<HashMap<i64, Arc<Mutex<ScopeVectors>>>>);

impl VectorCache {
    fn scope(&self, scope: i64) -> Arc<Mutex<ScopeVectors>> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(scope).or_default())
    }

    /// Forgets a scope's copy (after erasure or a model change).
    pub fn invalidate(&self, scope: Option<i64>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match scope {
            Some(s) => {
                map.remove(&s);
            }
            None => map.clear(),
        }
    }
}

/// The embedder of a store and what it knows about the file.
pub struct Vectorizer {
    pub embedder: Arc<dyn Embedder>,
    pub cache: VectorCache,
    /// Shared with the thread that embeds a recall's query.
    pub stats: Arc<RetrievalStats>,
    /// Held for one indexer step, so the background indexer and an explicit
    /// `memgate reembed` never embed the same pending rows twice.
    pub indexing: Mutex<()>,
    /// [`vector_key`] of the embedder's model, formatted once: every hybrid
    /// recall compares it with the file's.
    key: String,
}

impl Vectorizer {
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self {
            key: vector_key(embedder.model()),
            embedder,
            cache: VectorCache::default(),
            stats: Arc::default(),
            indexing: Mutex::default(),
        }
    }

    /// The key this store's vectors are written and searched under.
    pub fn key(&self) -> &str {
        &self.key
    }
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_blob(b: &[u8], out: &mut Vec<f32>) {
    out.extend(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
}

/// The key (model and recipe) the file's vectors belong to, if any.
pub fn stored_model(conn: &Connection) -> Result<Option<String>> {
    conn.query_row("SELECT model FROM vector_model WHERE id = 1", [], |r| {
        r.get(0)
    })
    .optional()
    .map_err(db_error)
}

/// Deletes every model's vectors of `items` (recall-index rowids: turn
/// `n`, memory `-n`). Erasure calls this in its transaction, then
/// [`crate::MemoryStore::forget_vector_copies`].
pub fn erase_vectors(conn: &Connection, items: &[i64]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached("DELETE FROM vectors WHERE item = ?1")
        .map_err(db_error)?;
    for item in items {
        stmt.execute([item]).map_err(db_error)?;
    }
    Ok(())
}

/// A row waiting for a vector: (item, scope, version, text).
pub(crate) type PendingRow = (i64, i64, i64, String);

/// Rows waiting for a vector.
type Pending = Vec<PendingRow>;

/// Up to `batch` rows without a vector of `model`: turns in id order after
/// the last one embedded, then active memories whose version has none.
pub(crate) fn pending(conn: &Connection, model: &str, batch: usize) -> Result<Pending> {
    let after: i64 = conn
        .query_row(
            "SELECT coalesce(max(item), 0) FROM vectors WHERE model = ?1 AND item > 0",
            [model],
            |r| r.get(0),
        )
        .map_err(db_error)?;
    let mut out: Pending = conn
        .prepare_cached(&format!(
            "SELECT t.id, t.scope_id, t.text, t.speaker,
                    (SELECT p.text FROM turns p WHERE p.scope_id = t.scope_id
                       AND p.thread = t.thread AND p.seq < t.seq ORDER BY p.seq DESC LIMIT 1),
                    t.occurred_at
             FROM turns t WHERE t.id > ?1 ORDER BY t.id LIMIT {batch}"
        ))
        .and_then(|mut s| {
            s.query_map([after], |r| {
                let (text, speaker, previous, occurred_at): (
                    String,
                    Option<String>,
                    Option<String>,
                    Option<String>,
                ) = (r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    0,
                    turn_text(
                        &text,
                        speaker.as_deref(),
                        occurred_at.as_deref(),
                        previous.as_deref(),
                    ),
                ))
            })?
            .collect()
        })
        .map_err(db_error)?;
    if out.len() < batch {
        let memories: Pending = conn
            .prepare_cached(&format!(
                "SELECT -m.id, m.scope_id, m.version, m.text FROM memories m
                 WHERE m.state = 'active' AND NOT EXISTS
                   (SELECT 1 FROM vectors v WHERE v.model = ?1 AND v.item = -m.id
                      AND v.version = m.version)
                 ORDER BY m.id LIMIT {batch}"
            ))
            .and_then(|mut s| {
                s.query_map([model], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(db_error)?;
        out.extend(memories.into_iter().take(batch - out.len()));
    }
    Ok(out)
}

/// A dot product written for auto-vectorisation (eight lanes).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

impl Vectorizer {
    /// How the file's vectors (of the key `stored`, if any) relate to this
    /// embedder.
    pub fn model_state(&self, stored: Option<String>) -> ModelState {
        let configured = self.key().to_owned();
        match stored {
            Some(stored) if stored != configured => ModelState::Mismatch { stored, configured },
            _ => ModelState::Current,
        }
    }

    /// Embeds the texts of `work`; an embedder failure, or a wrong number
    /// of vectors, is an error.
    pub(crate) fn embed_pending(&self, work: &[PendingRow]) -> Result<Vec<Vec<f32>>> {
        let texts: Vec<&str> = work.iter().map(|w| w.3.as_str()).collect();
        let vectors = self
            .embedder
            .embed(&texts)
            .map_err(|e| MemoryError::backend(format!("vector indexer: {e}")))?;
        if vectors.len() != work.len() {
            return Err(MemoryError::backend(
                "vector indexer: the embedder returned a wrong number of vectors",
            ));
        }
        Ok(vectors)
    }

    /// Counts of how recalls were answered.
    pub fn retrieval_counts(&self) -> RetrievalCounts {
        let stats = &self.stats;
        RetrievalCounts {
            hybrid: stats.hybrid.load(Ordering::Relaxed),
            embedder_failures: stats.embedder_failures.load(Ordering::Relaxed),
            vectors_written: stats.vectors_written.load(Ordering::Relaxed),
            query_embed_nanos: stats.query_embed_nanos.load(Ordering::Relaxed),
            dense_scan_nanos: stats.dense_scan_nanos.load(Ordering::Relaxed),
            dense_rescore_nanos: stats.dense_rescore_nanos.load(Ordering::Relaxed),
        }
    }

    /// The items of `scope` nearest to `query` (a unit vector of the
    /// current model) as `asked` says, best first, with their cosine
    /// similarity; and the similarity of each of `also` that has a vector.
    pub(crate) fn nearest_items(
        &self,
        conn: &Connection,
        scope: i64,
        query: &[f32],
        asked: Wanted<'_>,
        also: &[i64],
    ) -> Result<Neighbours> {
        let Wanted {
            limit,
            prefilter,
            among,
        } = asked;
        let model = self.key();
        let started = std::time::Instant::now();
        let shared = self.cache.scope(scope);
        let mut vectors = shared.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, item, vector FROM vectors
                 WHERE scope_id = ?1 AND model = ?2 AND seq > ?3 ORDER BY seq",
            )
            .map_err(db_error)?;
        let mut rows = stmt
            .query(params![scope, model, vectors.seen])
            .map_err(db_error)?;
        let mut buf = Vec::new();
        while let Some(row) = rows.next().map_err(db_error)? {
            let (seq, item): (i64, i64) =
                (row.get(0).map_err(db_error)?, row.get(1).map_err(db_error)?);
            buf.clear();
            from_blob(vector_blob(row.get_ref(2))?, &mut buf);
            vectors.codes.upsert(item, &buf);
            if item < 0 {
                vectors.memories.upsert(item, &buf);
            }
            vectors.seen = seq;
        }
        if vectors.codes.dims() != query.len() {
            return Ok(Default::default());
        }
        let wanted = limit * RESCORE_FACTOR;
        let candidates =
            vectors
                .among(among)
                .candidates(query, wanted, wanted.saturating_mul(prefilter));
        let wanted: HashSet<i64> = candidates
            .iter()
            .copied()
            .chain(also.iter().copied().filter(|i| vectors.codes.contains(*i)))
            .collect();
        drop(vectors);
        let scanned = std::time::Instant::now();
        self.stats
            .dense_scan_nanos
            .fetch_add((scanned - started).as_nanos() as u64, Ordering::Relaxed);
        // Exact cosines from the stored float32 vectors: one statement for
        // all of them, in item order (vectors are written in item order, so
        // neighbouring items share pages); one `query_row` each cost a
        // statement step per item.
        let mut items: Vec<i64> = wanted.into_iter().collect();
        items.sort_unstable();
        let list = serde_json::Value::from(items.as_slice()).to_string();
        let mut exact = conn.prepare_cached(EXACT_VECTORS).map_err(db_error)?;
        let mut rows = exact.query(params![list, model]).map_err(db_error)?;
        let mut cosine = HashMap::with_capacity(items.len());
        while let Some(row) = rows.next().map_err(db_error)? {
            buf.clear();
            from_blob(vector_blob(row.get_ref(1))?, &mut buf);
            if buf.len() == query.len() {
                cosine.insert(row.get::<_, i64>(0).map_err(db_error)?, dot(&buf, query));
            }
        }
        let mut nearest: Vec<(i64, f32)> = candidates
            .iter()
            .filter_map(|item| Some((*item, *cosine.get(item)?)))
            .collect();
        nearest.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        nearest.truncate(limit);
        let similarity = also
            .iter()
            .filter_map(|item| Some((*item, *cosine.get(item)?)))
            .collect();
        self.stats
            .dense_rescore_nanos
            .fetch_add(scanned.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok((nearest, similarity))
    }

    /// The `k` items of `scope` nearest to `query` by the exact cosine over
    /// every stored vector of the scope (no int8, no prefilter), best first:
    /// the reference the int8 scan and the sign prefilter are measured
    /// against (`memgate bench`, `memgate eval locomo`).
    pub(crate) fn exact_nearest(
        &self,
        conn: &Connection,
        scope: i64,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<i64>> {
        let mut stmt = conn
            .prepare_cached("SELECT item, vector FROM vectors WHERE scope_id = ?1 AND model = ?2")
            .map_err(db_error)?;
        let mut rows = stmt.query(params![scope, self.key()]).map_err(db_error)?;
        let (mut scored, mut buf) = (Vec::new(), Vec::new());
        while let Some(row) = rows.next().map_err(db_error)? {
            buf.clear();
            from_blob(vector_blob(row.get_ref(1))?, &mut buf);
            if buf.len() == query.len() {
                scored.push((row.get::<_, i64>(0).map_err(db_error)?, dot(&buf, query)));
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        Ok(scored.into_iter().take(k).map(|(item, _)| item).collect())
    }
}

/// Stores the `vectors` embedded for `work` under `model`, adopting
/// `model` as the file's when it has none; returns how many were written
/// (0: the file adopted another model meanwhile).
pub(crate) fn store_pending(
    tx: &Connection,
    model: &str,
    work: &[PendingRow],
    vectors: &[Vec<f32>],
) -> Result<usize> {
    let dims = vectors[0].len();
    // Re-checked under the write lock: a concurrent `reembed` wins.
    match stored_model(tx)? {
        Some(s) if s != model => return Ok(0),
        Some(_) => {}
        None => {
            tx.execute(
                "INSERT INTO vector_model (id, model, dims) VALUES (1, ?1, ?2)",
                params![model, dims as i64],
            )
            .map_err(db_error)?;
        }
    }
    let mut insert = tx
        .prepare_cached(
            "INSERT OR REPLACE INTO vectors (item, scope_id, model, version, vector)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(db_error)?;
    for ((item, scope, version, _), vector) in work.iter().zip(vectors) {
        insert
            .execute(params![item, scope, model, version, to_blob(vector)])
            .map_err(db_error)?;
    }
    Ok(work.len())
}

/// Drops every stored vector (of any model) and the file's model, so the
/// indexer embeds everything again; returns how many vectors were dropped.
pub(crate) fn drop_all(tx: &Connection) -> Result<usize> {
    let n = tx.execute("DELETE FROM vectors", []).map_err(db_error)?;
    tx.execute("DELETE FROM vector_model", [])
        .map_err(db_error)?;
    Ok(n)
}

/// What the indexer has done and has left, for the `configured` key (the
/// file's own when no embedder is configured).
pub(crate) fn progress(conn: &Connection, configured: Option<String>) -> Result<VectorProgress> {
    let stored = stored_model(conn)?;
    let counted = configured.clone().or(stored.clone());
    let count = |sql: &str| -> Result<u64> {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(db_error)
    };
    let total = count(
        "SELECT (SELECT count(*) FROM turns)
         + (SELECT count(*) FROM memories WHERE state = 'active')",
    )?;
    let embedded = match &counted {
        Some(m) if stored.as_deref() == Some(m.as_str()) => conn
            .query_row(
                "SELECT (SELECT count(*) FROM vectors WHERE model = ?1 AND item > 0)
                  + (SELECT count(*) FROM vectors v JOIN memories m ON v.item = -m.id
                     WHERE v.model = ?1 AND m.state = 'active' AND v.version = m.version)",
                [m],
                |r| r.get::<_, i64>(0),
            )
            .map_err(db_error)? as u64,
        _ => 0,
    };
    Ok(VectorProgress {
        model_mismatch: matches!((&configured, &stored), (Some(c), Some(s)) if c != s),
        model: configured.clone(),
        stored_model: stored.clone(),
        embedded,
        total,
    })
}

/// A stored vector's bytes; anything but a blob is corruption.
fn vector_blob(value: rusqlite::Result<rusqlite::types::ValueRef<'_>>) -> Result<&[u8]> {
    value
        .map_err(db_error)?
        .as_blob()
        .map_err(|e| MemoryError::Corruption(format!("local memory database: bad vector: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_and_dot_products_are_exact_enough() {
        let v: Vec<f32> = (0..19).map(|i| i as f32 / 7.0).collect();
        let mut back = Vec::new();
        from_blob(&to_blob(&v), &mut back);
        assert_eq!(back, v);
        let naive: f32 = v.iter().map(|x| x * x).sum();
        assert!((dot(&v, &v) - naive).abs() < 1e-4);
    }
}
