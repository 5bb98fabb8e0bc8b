//! Hybrid recall: the lexical ranking fused with dense retrieval.
//!
//! With an embedder configured and the file's vectors of its model, a query
//! is embedded (redacted, on a thread of its own, started before any
//! connection is taken, so the lexical ranking runs on the recall's thread
//! meanwhile: on two cores the model's time hides the lexical ranking's) and
//! its nearest [`candidate_pool`] items of the scope join the lexical
//! candidates. Every
//! candidate then gets both scores and the two are added
//! ([`Fusion::Score`], the default): the lexical score divided by the best
//! lexical score of the query, plus `lambda` times the cosine similarity
//! scaled so the nearest item gets 1 and the last of the dense pool 0. Scores
//! carry how much better the best match is than the rest, which ranks alone
//! ([`Fusion::Rank`], reciprocal rank) throw away. The fused candidates are
//! then re-ordered ([`rerank_fused`] with [`Rerank::DEFAULT`]: the named
//! speaker, thread evidence, thread coverage) and cut to `top_k`.
//!
//! Anything else is the lexical ranking unchanged: no embedder, vectors of
//! another model or recipe (after a change, until `reembed`), or an embedder
//! that fails or misses its deadline — the last is counted
//! ([`crate::vectors::RetrievalCounts::embedder_failures`]) and logged, and
//! recall still answers.

use crate::fusion::{
    add_feedback_pass, add_thread_match, feedback_query, feedback_terms, fuse, rerank_fused,
    top_turn_similarity, unit_scaled, Rerank, SessionDense,
};
use crate::ranking::{
    candidate_pool, load_item, rank, term_documents, thread_matches, Placed, Ranked,
    POSTINGS_BUDGET,
};
use crate::store::MemoryStore;
use crate::vectors::{stored_model, RetrievalStats, PREFILTER_FACTOR};
use memgate_core::Result;
use memgate_embed::Embedder;
use rusqlite::Connection;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

pub use crate::fusion::{Fusion, DEFAULT_DENSE_POOL, DEFAULT_FUSION, EVALUATED_FUSIONS, RRF_K};

/// The dense side's nearest items, best first, with their cosine.
type DensePool = Vec<(i64, f32)>;

/// A query's vector, or `None` when recall stays lexical; possibly still
/// being embedded on its own thread until [`QueryVector::vector`] is asked.
pub struct QueryVector {
    vector: OnceLock<Option<Vec<f32>>>,
    embedding: Mutex<Option<JoinHandle<Option<Vec<f32>>>>>,
}

impl QueryVector {
    fn ready(vector: Option<Vec<f32>>) -> Self {
        Self {
            vector: OnceLock::from(vector),
            embedding: Mutex::new(None),
        }
    }

    /// The vector, waiting for its embedding if that is still running.
    pub(crate) fn vector(&self) -> Option<&[f32]> {
        self.vector
            .get_or_init(|| {
                let running = self
                    .embedding
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                // The thread catches the embedder's panics (`embed_counted`).
                running.and_then(|h| h.join().ok().flatten())
            })
            .as_deref()
    }

    /// False once it is known that there is no vector (no embedder, or it
    /// failed), without waiting for a running embedding.
    fn may_have_vector(&self) -> bool {
        self.vector.get().is_none_or(Option::is_some)
    }
}

/// Embeds `query` and counts the time, or the failure (logged, and the
/// recall stays lexical); an embedder that panics is a failure like any
/// other, on whichever thread it ran.
fn embed_counted(
    embedder: &dyn Embedder,
    stats: &RetrievalStats,
    query: &str,
    embed: impl FnOnce(&dyn Embedder, &str) -> memgate_embed::Result<Vec<f32>>,
) -> Option<Vec<f32>> {
    let started = Instant::now();
    let embedded =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| embed(embedder, query)))
            .unwrap_or_else(|_| {
                Err(memgate_embed::EmbedError::Failed(
                    "the embedder panicked".into(),
                ))
            });
    stats
        .query_embed_nanos
        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    match embedded {
        Ok(vector) => Some(vector),
        Err(e) => {
            stats.embedder_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "embedder failed; recall is lexical");
            None
        }
    }
}

impl MemoryStore {
    /// Starts embedding `query` for [`Self::ranked_in`] on a thread of its
    /// own, redacted first (an endpoint embedder is another service; stored
    /// text is redacted too, so nothing is lost); an embedder failure is
    /// counted and logged, and ranking stays lexical. Where no thread can
    /// be started, the query is embedded here.
    pub fn query_vector(&self, query: &str) -> QueryVector {
        let Some(v) = &self.vectorizer else {
            return QueryVector::ready(None);
        };
        let text = self.redactor.redact(query).text.into_owned();
        let job = {
            let (embedder, stats, text) =
                (Arc::clone(&v.embedder), Arc::clone(&v.stats), text.clone());
            move || embed_counted(embedder.as_ref(), &stats, &text, |e, q| e.embed_query(q))
        };
        match std::thread::Builder::new()
            .name("memgate-query-embed".into())
            .spawn(job)
        {
            Ok(running) => QueryVector {
                vector: OnceLock::new(),
                embedding: Mutex::new(Some(running)),
            },
            Err(_) => QueryVector::ready(embed_counted(
                v.embedder.as_ref(),
                &v.stats,
                &text,
                |e, q| e.embed_query(q),
            )),
        }
    }

    /// Evaluations: [`Self::query_vector`] by the embedder's full-precision
    /// query path ([`Embedder::embed_query_exact`], float32 for the local
    /// models), the reference a cheaper query path is measured against;
    /// embedded here.
    pub(crate) fn reference_query_vector(&self, query: &str) -> QueryVector {
        let Some(v) = &self.vectorizer else {
            return QueryVector::ready(None);
        };
        let text = self.redactor.redact(query).text;
        QueryVector::ready(embed_counted(
            v.embedder.as_ref(),
            &v.stats,
            &text,
            |e, q| e.embed_query_exact(q),
        ))
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
            Rerank::DEFAULT,
        )
    }

    /// [`Self::ranked_in`] with the fusion, dense pool multiple, sign
    /// prefilter factor ([`Self::nearest_items_with`]) and re-ordering
    /// ([`Rerank`]; recall: [`Rerank::DEFAULT`]) given (the evaluation
    /// compares them).
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
        rerank: Rerank,
    ) -> Result<Vec<Ranked>> {
        let lexical_only = || rank(conn, &self.common_terms, scope, query, top_k, category);
        let Some(v) = self
            .vectorizer
            .as_ref()
            .filter(|_| vector.may_have_vector())
        else {
            return lexical_only();
        };
        if stored_model(conn)?.is_some_and(|m| m != v.key()) {
            return lexical_only();
        }
        let pool = candidate_pool(top_k);
        // Ranked while the query may still be embedding on its own thread.
        let lexical = rank(conn, &self.common_terms, scope, query, pool, category)?;
        let Some(q) = vector.vector() else {
            // The embedder failed: exactly the lexical answer.
            return lexical_only();
        };
        let lexical_items: Vec<i64> = lexical.iter().filter_map(|r| r.item()).collect();
        let dense_limit = pool * dense_pool.max(1);
        let (hits, weight) = rerank.feedback;
        let (lexical_hits, lexical_terms, lexical_weight) = rerank.lexical_feedback;
        let mut again =
            (hits > 0 || lexical_hits > 0).then(|| (lexical.clone(), lexical_items.clone()));
        let fused_with = |query: &[f32], lexical, items: &[i64]| {
            self.fused_pool(
                conn,
                scope,
                query,
                lexical,
                items,
                (dense_limit, prefilter),
                fusion,
                category,
            )
        };
        let lexical_best = lexical
            .first()
            .filter(|_| rerank.lexical_feedback_from_both_sides)
            .map(|r| r.citation.clone());
        let (mut ranked, mut dense) = fused_with(q, lexical, &lexical_items)?;
        v.stats.hybrid.fetch_add(1, Ordering::Relaxed);
        if lexical_hits > 0 {
            let docs: Vec<(f64, &str)> = if rerank.lexical_feedback_from_both_sides {
                both_sides_best(&ranked, lexical_best.as_ref(), &dense)
            } else {
                ranked
                    .iter()
                    .take(lexical_hits)
                    .map(|r| (r.score, r.text.as_str()))
                    .collect()
            };
            let terms = feedback_terms(&docs, query, lexical_terms, POSTINGS_BUDGET, |t| {
                term_documents(conn, &self.common_terms, scope, t)
            })?;
            if let Some((lexical, _)) = again.take_if(|_| !terms.is_empty()) {
                let second = rank(
                    conn,
                    &self.common_terms,
                    scope,
                    &terms.join(" "),
                    pool,
                    category,
                )?;
                let lexical = add_feedback_pass(lexical, second, lexical_weight);
                let items: Vec<i64> = lexical.iter().filter_map(|r| r.item()).collect();
                (ranked, dense) = fused_with(q, lexical.clone(), &items)?;
                again = Some((lexical, items));
            }
        }
        if let Some((lexical, items)) = again.filter(|_| hits > 0) {
            let best: Vec<i64> = ranked.iter().filter_map(|r| r.item()).take(hits).collect();
            let vectors: Vec<Vec<f32>> = self
                .stored_vectors(conn, &best)?
                .into_iter()
                .map(|(_, v)| v)
                .collect();
            (ranked, dense) = fused_with(&feedback_query(q, &vectors, weight), lexical, &items)?;
        }
        if rerank.thread_match > 0.0 {
            let matches = thread_matches(conn, &self.common_terms, scope, query)?;
            add_thread_match(&mut ranked, &matches, rerank.thread_match);
        }
        let session_dense = if rerank.needs_session_dense() {
            let scores = match rerank.session_dense.0 {
                SessionDense::Centroid => {
                    let threads: std::collections::HashSet<&str> = ranked
                        .iter()
                        .filter_map(|r| r.place())
                        .map(|(t, _)| t)
                        .collect();
                    self.session_centroid_similarity(conn, scope, q, threads)?
                }
                SessionDense::TopTurns(k) => top_turn_similarity(&ranked, &dense, k),
            };
            Some(unit_scaled(&ranked, &scores))
        } else {
            None
        };
        if let Some(scaled) = session_dense.as_ref() {
            add_thread_match(&mut ranked, scaled, rerank.session_dense.1);
        }
        let gains = session_dense
            .as_ref()
            .filter(|_| rerank.coverage_by_session_dense);
        Ok(rerank_fused(ranked, query, &rerank, top_k, gains))
    }

    /// One dense pass with `q` (`limit` nearest, sign prefilter factor)
    /// fused with `lexical`: every candidate, best first, dense-only hits
    /// loaded with the same scope and state checks as lexical hits; and the
    /// dense pool (nearest first, with the cosine).
    #[allow(clippy::too_many_arguments)]
    fn fused_pool(
        &self,
        conn: &Connection,
        scope: i64,
        q: &[f32],
        lexical: Vec<Ranked>,
        lexical_items: &[i64],
        (limit, prefilter): (usize, usize),
        fusion: Fusion,
        category: Option<&str>,
    ) -> Result<(Vec<Ranked>, DensePool)> {
        let (dense, similarity) =
            self.nearest_items_with(conn, scope, q, limit, lexical_items, prefilter)?;
        let mut fused = fuse(lexical, &dense, &similarity, fusion);
        for (item, score) in std::mem::take(&mut fused.missing) {
            if let Some(r) = load_item(conn, scope, item, category)? {
                fused.add(score, r);
            }
        }
        Ok((fused.ranked(usize::MAX), dense))
    }
}

/// Lexical feedback's documents from both sides: the lexical list's best
/// hit, and the dense side's nearest item (found in the fused `ranked`)
/// when it is another turn, each weighted by its fused score, so the
/// terms of what the model found reach the lexical side even when the
/// words of the question led elsewhere.
fn both_sides_best<'a>(
    ranked: &'a [Ranked],
    lexical_best: Option<&String>,
    dense: &[(i64, f32)],
) -> Vec<(f64, &'a str)> {
    let lexical = lexical_best.and_then(|c| ranked.iter().find(|r| &r.citation == c));
    let nearest = dense
        .first()
        .and_then(|(item, _)| ranked.iter().find(|r| r.item() == Some(*item)))
        .filter(|r| lexical.is_none_or(|l| l.citation != r.citation));
    lexical
        .into_iter()
        .chain(nearest)
        .map(|r| (r.score, r.text.as_str()))
        .collect()
}
