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
//! ([`memgate_recall::vectors::RetrievalCounts::embedder_failures`]) and logged, and
//! recall still answers.

use crate::facts::fact_sources;
use crate::ranking::{load_item, rank, TermCounts};
use crate::vectors::{stored_model, Vectorizer, Wanted, PREFILTER_FACTOR};
use memgate_core::{Redactor, Result};
use memgate_embed::Embedder;
use memgate_recall::fusion::{fuse, Fusion, DEFAULT_DENSE_POOL, DEFAULT_FUSION};
use memgate_recall::ranked::{
    candidate_pool, cite_sources, first_depth, fold_restated, refill_depth, Among, Ranked,
};
use memgate_recall::rerank::{rerank_fused, Rerank};
use memgate_recall::vectors::RetrievalStats;
use rusqlite::Connection;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

/// What one ranking is asked for.
#[derive(Clone, Copy)]
struct Asked<'a> {
    query: &'a str,
    vector: &'a QueryVector,
    top_k: usize,
    /// What competes.
    category: Among<'a>,
}

/// How a hybrid ranking is made. Recall uses [`Ranking::DEFAULT`]; the
/// evaluation (`memgate eval locomo`) compares others through
/// [`crate::MemoryStore::ranked_with`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranking {
    /// How the lexical and the dense list are combined.
    pub fusion: Fusion,
    /// The dense pool, as a multiple of the lexical candidate pool.
    pub dense_pool: usize,
    /// Items the sign prefilter lets through per int8 candidate.
    pub prefilter: usize,
    /// How the fused pool is re-ordered.
    pub rerank: Rerank,
}

impl Ranking {
    /// What recall uses.
    pub const DEFAULT: Self = Self {
        fusion: DEFAULT_FUSION,
        dense_pool: DEFAULT_DENSE_POOL,
        prefilter: PREFILTER_FACTOR,
        rerank: Rerank::DEFAULT,
    };
}

/// A query's vector, or `None` when recall stays lexical; possibly still
/// being embedded on its own thread until [`QueryVector::vector`] is asked.
pub struct QueryVector {
    vector: OnceLock<Option<Vec<f32>>>,
    embedding: Mutex<Option<JoinHandle<Option<Vec<f32>>>>>,
}

impl QueryVector {
    /// No vector: the ranking stays lexical.
    pub fn lexical() -> Self {
        Self::ready(None)
    }

    fn ready(vector: Option<Vec<f32>>) -> Self {
        Self {
            vector: OnceLock::from(vector),
            embedding: Mutex::new(None),
        }
    }

    /// The vector, waiting for its embedding if that is still running.
    pub fn vector(&self) -> Option<&[f32]> {
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

/// Starts embedding `query` for a ranking on a thread of its own, redacted
/// first with `redactor` (an endpoint embedder is another service; stored
/// text is redacted too, so nothing is lost); an embedder failure is
/// counted and logged, and ranking stays lexical. Where no thread can be
/// started, the query is embedded here. No `vectorizer`: lexical.
pub(crate) fn query_vector(
    vectorizer: Option<&Vectorizer>,
    redactor: &Redactor,
    query: &str,
) -> QueryVector {
    let Some(v) = vectorizer else {
        return QueryVector::ready(None);
    };
    let text = redactor.redact(query).text.into_owned();
    let job = {
        let (embedder, stats, text) = (Arc::clone(&v.embedder), Arc::clone(&v.stats), text.clone());
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

/// [`query_vector`] by the embedder's full-precision query path
/// ([`Embedder::embed_query_exact`], float32 for the local models): the
/// reference the cheaper query path recall uses is measured against;
/// embedded here.
pub(crate) fn reference_query_vector(
    vectorizer: Option<&Vectorizer>,
    redactor: &Redactor,
    query: &str,
) -> QueryVector {
    let Some(v) = vectorizer else {
        return QueryVector::ready(None);
    };
    let text = redactor.redact(query).text;
    QueryVector::ready(embed_counted(
        v.embedder.as_ref(),
        &v.stats,
        &text,
        |e, q| e.embed_query_exact(q),
    ))
}

/// What a ranking reads besides the connection: the store's known
/// postings counts and its embedder, if one is configured.
#[derive(Clone, Copy)]
pub(crate) struct Ranker<'a> {
    pub counts: &'a TermCounts,
    pub vectorizer: Option<&'a Vectorizer>,
    /// The store distils facts, so rankings read deeper ([`first_depth`]).
    pub distils: bool,
}

impl Ranker<'_> {
    /// The ranking of `query` in `scope` as a reader is shown it: hybrid
    /// ([`Ranking::DEFAULT`]) when `vector` is usable, else lexical (see
    /// the module doc), without the lines that repeat a line above them.
    pub fn ranked_in(
        &self,
        conn: &Connection,
        scope: i64,
        query: &str,
        vector: &QueryVector,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let asked = Asked {
            query,
            vector,
            top_k,
            category,
        };
        self.fused_in(conn, scope, &asked, &Ranking::DEFAULT)
    }

    /// [`Self::ranked_in`] with every match kept, a fact under its source
    /// turn too: what the search for the facts a new turn may change reads.
    pub fn every_match_in(
        &self,
        conn: &Connection,
        scope: i64,
        query: &str,
        vector: &QueryVector,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let asked = Asked {
            query,
            vector,
            top_k,
            category,
        };
        self.fused_once(conn, scope, &asked, &Ranking::DEFAULT)
    }

    /// The ranking of `query` in `scope` made as `ranking` says, at most
    /// `top_k`, every kind competing.
    pub fn ranked_with(
        &self,
        conn: &Connection,
        scope: i64,
        query: &str,
        vector: &QueryVector,
        top_k: usize,
        ranking: &Ranking,
    ) -> Result<Vec<Ranked>> {
        let asked = Asked {
            query,
            vector,
            top_k,
            category: Among::All,
        };
        self.fused_in(conn, scope, &asked, ranking)
    }

    /// [`Self::ranked_in`] made as `ranking` says, without the lines that
    /// repeat a line above them ([`fold_restated`]), their places filled
    /// from deeper in the ranking; a distilled fact's line names its
    /// sources ([`cite_sources`], from the same read).
    fn fused_in(
        &self,
        conn: &Connection,
        scope: i64,
        asked: &Asked<'_>,
        ranking: &Ranking,
    ) -> Result<Vec<Ranked>> {
        let depth = first_depth(asked.top_k, self.distils);
        let mut ranked = self.fused_once(
            conn,
            scope,
            &Asked {
                top_k: depth,
                ..*asked
            },
            ranking,
        )?;
        let found = ranked.len();
        let mut sources = fact_sources(conn, &ranked)?;
        fold_restated(&mut ranked, &sources);
        if let Some(top_k) = refill_depth(asked.top_k, depth, found, ranked.len()) {
            ranked = self.fused_once(conn, scope, &Asked { top_k, ..*asked }, ranking)?;
            sources = fact_sources(conn, &ranked)?;
            fold_restated(&mut ranked, &sources);
        }
        ranked.truncate(asked.top_k);
        cite_sources(&mut ranked, &sources);
        Ok(ranked)
    }

    fn fused_once(
        &self,
        conn: &Connection,
        scope: i64,
        asked: &Asked<'_>,
        ranking: &Ranking,
    ) -> Result<Vec<Ranked>> {
        let Asked {
            query,
            vector,
            top_k,
            category,
        } = *asked;
        let lexical_only = || rank(conn, self.counts, scope, query, top_k, category);
        let Some(v) = self.vectorizer.filter(|_| vector.may_have_vector()) else {
            return lexical_only();
        };
        if stored_model(conn)?.is_some_and(|m| m != v.key()) {
            return lexical_only();
        }
        let pool = candidate_pool(top_k);
        // Ranked while the query may still be embedding on its own thread.
        let lexical = rank(conn, self.counts, scope, query, pool, category)?;
        let Some(q) = vector.vector() else {
            // The embedder failed: exactly the lexical answer.
            return lexical_only();
        };
        let lexical_items: Vec<i64> = lexical.iter().filter_map(|r| r.item()).collect();
        let dense_limit = pool * ranking.dense_pool.max(1);
        let wanted = Wanted {
            limit: dense_limit,
            prefilter: ranking.prefilter,
            among: category,
        };
        let (dense, similarity) = v.nearest_items(conn, scope, q, wanted, &lexical_items)?;
        let mut fused = fuse(lexical, &dense, &similarity, ranking.fusion);
        for (item, score) in std::mem::take(&mut fused.missing) {
            if let Some(r) = load_item(conn, scope, item, category)? {
                fused.add(score, r);
            }
        }
        v.stats.hybrid.fetch_add(1, Ordering::Relaxed);
        Ok(rerank_fused(
            fused.ranked(usize::MAX),
            query,
            &ranking.rerank,
            top_k,
        ))
    }
}
