//! Hybrid recall: the lexical ranking fused with dense retrieval.
//!
//! With an embedder configured and the file's vectors of its model, a query
//! is embedded (redacted, before any connection is taken) and its nearest
//! [`candidate_pool`] items of the scope join the lexical candidates. Every
//! candidate then gets both scores and the two are added
//! ([`Fusion::Score`], the default): the lexical score divided by the best
//! lexical score of the query, plus `lambda` times the cosine similarity
//! scaled so the nearest item gets 1 and the last of the dense pool 0. Scores
//! carry how much better the best match is than the rest, which ranks alone
//! ([`Fusion::Rank`], reciprocal rank) throw away.
//!
//! Anything else is the lexical ranking unchanged: no embedder, vectors of
//! another model or recipe (after a change, until `reembed`), or an embedder
//! that fails or misses its deadline — the last is counted
//! ([`crate::vectors::RetrievalCounts::embedder_failures`]) and logged, and
//! recall still answers.

use crate::fusion::{diversify_threads, fuse};
use crate::ranking::{candidate_pool, load_item, rank, Ranked};
use crate::store::MemoryStore;
use crate::vectors::{stored_model, PREFILTER_FACTOR};
use memgate_core::Result;
use memgate_embed::Embedder;
use rusqlite::Connection;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub use crate::fusion::{Fusion, DEFAULT_DENSE_POOL, DEFAULT_FUSION, EVALUATED_FUSIONS, RRF_K};

/// A query's vector, or `None` when recall stays lexical.
pub struct QueryVector(Option<Vec<f32>>);

impl QueryVector {
    pub(crate) fn vector(&self) -> Option<&[f32]> {
        self.0.as_deref()
    }
}

impl MemoryStore {
    /// Embeds `query` for [`Self::ranked_in`], redacted first (an
    /// endpoint embedder is another service; stored text is redacted too,
    /// so nothing is lost); an embedder failure is counted and logged, and
    /// ranking stays lexical.
    pub fn query_vector(&self, query: &str) -> QueryVector {
        self.vector_of(query, |e, q| e.embed_query(q))
    }

    /// Evaluations: [`Self::query_vector`] by the embedder's document path
    /// ([`Embedder::embed`], float32 for the local model), the reference
    /// a cheaper query path is measured against.
    pub(crate) fn reference_query_vector(&self, query: &str) -> QueryVector {
        self.vector_of(query, |e, q| {
            let mut v = e.embed(&[q])?;
            v.pop().filter(|_| v.is_empty()).ok_or_else(|| {
                memgate_embed::EmbedError::Failed("the embedder returned no query vector".into())
            })
        })
    }

    fn vector_of(
        &self,
        query: &str,
        embed: impl FnOnce(&dyn Embedder, &str) -> memgate_embed::Result<Vec<f32>>,
    ) -> QueryVector {
        let Some(v) = &self.vectorizer else {
            return QueryVector(None);
        };
        let query = self.redactor.redact(query).text;
        let started = Instant::now();
        let embedded = embed(v.embedder.as_ref(), query.as_ref());
        v.stats
            .query_embed_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match embedded {
            Ok(vector) => QueryVector(Some(vector)),
            Err(e) => {
                v.stats.embedder_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "embedder failed; recall is lexical");
                QueryVector(None)
            }
        }
    }

    /// The ranking of `query` in `scope`: hybrid ([`DEFAULT_FUSION`]) when
    /// `vector` is usable, else lexical (see the module doc).
    pub(crate) fn ranked_in(
        &self,
        conn: &Connection,
        scope: i64,
        query: &str,
        vector: &QueryVector,
        top_k: usize,
        category: Option<&str>,
    ) -> Result<Vec<Ranked>> {
        self.fused_in(
            conn,
            scope,
            query,
            vector,
            top_k,
            category,
            DEFAULT_FUSION,
            DEFAULT_DENSE_POOL,
            PREFILTER_FACTOR,
            0.0,
        )
    }

    /// [`Self::ranked_in`] with the fusion, dense pool multiple, sign
    /// prefilter factor ([`Self::nearest_items_with`]) and thread
    /// diversity weight ([`crate::fusion::diversify_threads`]; 0: off)
    /// given (the evaluation compares them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fused_in(
        &self,
        conn: &Connection,
        scope: i64,
        query: &str,
        vector: &QueryVector,
        top_k: usize,
        category: Option<&str>,
        fusion: Fusion,
        dense_pool: usize,
        prefilter: usize,
        thread_weight: f64,
    ) -> Result<Vec<Ranked>> {
        let (Some(q), Some(v)) = (&vector.0, &self.vectorizer) else {
            return rank(conn, &self.common_terms, scope, query, top_k, category);
        };
        if stored_model(conn)?.is_some_and(|m| m != v.key()) {
            return rank(conn, &self.common_terms, scope, query, top_k, category);
        }
        let pool = candidate_pool(top_k);
        let lexical = rank(conn, &self.common_terms, scope, query, pool, category)?;
        let lexical_items: Vec<i64> = lexical.iter().filter_map(|r| r.item()).collect();
        let (dense, similarity) = self.nearest_items_with(
            conn,
            scope,
            q,
            pool * dense_pool.max(1),
            &lexical_items,
            prefilter,
        )?;
        v.stats.hybrid.fetch_add(1, Ordering::Relaxed);
        let mut fused = fuse(lexical, &dense, &similarity, fusion);
        for (item, score) in std::mem::take(&mut fused.missing) {
            // Loaded with the same scope and state checks as lexical hits.
            if let Some(r) = load_item(conn, scope, item, category)? {
                fused.add(score, r);
            }
        }
        if thread_weight > 0.0 {
            return Ok(diversify_threads(
                fused.ranked(usize::MAX),
                thread_weight,
                top_k,
            ));
        }
        Ok(fused.ranked(top_k))
    }
}
