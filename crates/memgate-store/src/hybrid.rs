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

use crate::ranking::{candidate_pool, item_citation, load_item, rank, Ranked};
use crate::store::MemoryStore;
use crate::vectors::stored_model;
use memgate_core::Result;
use rusqlite::Connection;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How the lexical and the dense list are combined.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "fusion", rename_all = "snake_case")]
pub enum Fusion {
    /// `lexical / best lexical + lambda × scaled cosine` (module doc).
    Score { lambda: f64 },
    /// `1 / (RRF_K + lexical rank) + dense_weight / (RRF_K + dense rank)`.
    Rank { dense_weight: f64 },
}

impl std::fmt::Display for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Score { lambda } => write!(f, "score fusion, lambda {lambda}"),
            Self::Rank { dense_weight } => write!(f, "rank fusion, dense weight {dense_weight}"),
        }
    }
}

/// Reciprocal-rank constant (the usual 60: ranks beyond the first few
/// differ little).
pub const RRF_K: f64 = 60.0;

/// What hybrid recall uses. Chosen on the LoCoMo development split with
/// all-MiniLM-L6-v2 (turns embedded with their previous turn and speaker)
/// among the fusions `memgate eval locomo` compares ([`EVALUATED_FUSIONS`]),
/// by turn recall@10: 0.740 (lexical 0.674; rank fusion 0.717; lambda 0.25
/// 0.729, 1.0 0.738), session 0.899 (lexical 0.886); notes/recall.md.
pub const DEFAULT_FUSION: Fusion = Fusion::Score { lambda: 0.5 };

/// How many nearest items the dense side brings, as a multiple of the
/// lexical candidate pool ([`candidate_pool`]). With score fusion it also
/// sets the dense scale's floor (the last of the dense pool scores 0).
pub const DEFAULT_DENSE_POOL: usize = 1;

/// The variants the LoCoMo evaluation measures side by side, as (fusion,
/// dense pool multiple): one query embedding each question, so the
/// comparison costs one encoder pass.
pub const EVALUATED_FUSIONS: &[(Fusion, usize)] = &[
    (Fusion::Rank { dense_weight: 0.35 }, 1),
    (Fusion::Score { lambda: 0.25 }, 1),
    (Fusion::Score { lambda: 0.5 }, 1),
    (Fusion::Score { lambda: 1.0 }, 1),
    (Fusion::Score { lambda: 0.5 }, 2),
    (Fusion::Score { lambda: 0.5 }, 4),
    (Fusion::Score { lambda: 1.0 }, 4),
];

/// A query's vector, or `None` when recall stays lexical.
pub struct QueryVector(Option<Vec<f32>>);

impl MemoryStore {
    /// Embeds `query` for [`Self::ranked_in`], redacted first (an
    /// endpoint embedder is another service; stored text is redacted too,
    /// so nothing is lost); an embedder failure is counted and logged, and
    /// ranking stays lexical.
    pub fn query_vector(&self, query: &str) -> QueryVector {
        let Some(v) = &self.vectorizer else {
            return QueryVector(None);
        };
        let query = self.redactor.redact(query).text;
        let started = Instant::now();
        let embedded = v.embedder.embed(&[query.as_ref()]);
        v.stats
            .query_embed_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match embedded {
            Ok(mut vectors) if vectors.len() == 1 => QueryVector(vectors.pop()),
            Ok(_) => {
                v.stats.embedder_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("embedder returned no query vector; recall is lexical");
                QueryVector(None)
            }
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
        )
    }

    /// [`Self::ranked_in`] with the fusion and dense pool multiple given
    /// (the evaluation compares them).
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
        let (dense, similarity) =
            self.nearest_items(conn, scope, q, pool * dense_pool.max(1), &lexical_items)?;
        v.stats.hybrid.fetch_add(1, Ordering::Relaxed);
        let mut fused: HashMap<String, (f64, Ranked)> = HashMap::new();
        match fusion {
            Fusion::Rank { dense_weight } => {
                for (i, r) in lexical.into_iter().enumerate() {
                    let score = 1.0 / (RRF_K + (i + 1) as f64);
                    fused.insert(r.citation.clone(), (score, r));
                }
                for (i, (item, _)) in dense.iter().enumerate() {
                    let score = dense_weight / (RRF_K + (i + 1) as f64);
                    self.add_dense(conn, scope, category, &mut fused, *item, score, true)?;
                }
            }
            Fusion::Score { lambda } => {
                let best = lexical.first().map_or(0.0, |r| r.score);
                let n = lexical.len().max(1) as f64;
                // The dense scale: nearest 1, last of the pool 0.
                let top = dense.first().map_or(0.0, |d| f64::from(d.1));
                let floor = dense.last().map_or(0.0, |d| f64::from(d.1));
                let scaled = |cos: f32| {
                    if top > floor {
                        ((f64::from(cos) - floor) / (top - floor)).clamp(0.0, 1.0)
                    } else {
                        0.0
                    }
                };
                for (i, r) in lexical.into_iter().enumerate() {
                    // A newest-first list (all terms common) has no usable
                    // scores: its order counts instead.
                    let lex = if best > 0.0 {
                        (r.score / best).max(0.0)
                    } else {
                        1.0 - i as f64 / n
                    };
                    let cos = r.item().and_then(|item| similarity.get(&item).copied());
                    let score = lex + lambda * cos.map_or(0.0, scaled);
                    fused.insert(r.citation.clone(), (score, r));
                }
                for (item, cos) in &dense {
                    let score = lambda * scaled(*cos);
                    self.add_dense(conn, scope, category, &mut fused, *item, score, false)?;
                }
            }
        }
        let mut out: Vec<Ranked> = fused
            .into_values()
            .map(|(score, mut r)| {
                r.score = score;
                r
            })
            .collect();
        out.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.citation.cmp(&b.citation))
        });
        out.truncate(top_k);
        Ok(out)
    }

    /// Enters a dense hit with `score`, loading it if the lexical list
    /// missed it; a lexical hit gets `score` added when `add` (rank fusion;
    /// score fusion counted its cosine already).
    #[allow(clippy::too_many_arguments)]
    fn add_dense(
        &self,
        conn: &Connection,
        scope: i64,
        category: Option<&str>,
        fused: &mut HashMap<String, (f64, Ranked)>,
        item: i64,
        score: f64,
        add: bool,
    ) -> Result<()> {
        let citation = item_citation(item);
        match fused.get_mut(&citation) {
            Some(entry) => {
                if add {
                    entry.0 += score;
                }
            }
            None => {
                // Loaded with the same scope and state checks as lexical hits.
                if let Some(r) = load_item(conn, scope, item, category)? {
                    fused.insert(citation, (score, r));
                }
            }
        }
        Ok(())
    }
}
