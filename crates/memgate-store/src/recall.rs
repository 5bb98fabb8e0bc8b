//! Recall and search over the caller's scope: the ranking laid out as the
//! block a host injects ([`memgate_recall::block`]).

use crate::facts::newest_active;
use crate::scope::ScopeRow;
use crate::store::MemoryStore;
use memgate_core::time::now_rfc3339;
use memgate_core::{Caller, MemoryError, Recall, RecallRequest, Result, SearchHit, SearchQuery};
use memgate_recall::block::{assemble, MAX_SEARCH_TOP_K};
use memgate_recall::ranked::{Origin, Ranked};
use memgate_recall::scope::ScopeKey;

impl MemoryStore {
    /// The caller's lexical ranking of `query` with `budget` postings scored
    /// at most (recall's is [`memgate_recall::ranked::POSTINGS_BUDGET`]) and
    /// `counts` kept for that budget: what the budget costs in quality is
    /// measured with it.
    pub fn ranked_within(
        &self,
        caller: &Caller,
        counts: &crate::ranking::TermCounts,
        budget: usize,
        query: &str,
        top_k: usize,
    ) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        self.read(|conn| match key.find(conn)? {
            Some(scope) => {
                crate::ranking::rank_within(conn, counts, budget, scope, query, top_k, None)
            }
            None => Ok(Vec::new()),
        })
    }

    /// The caller's turns and memories named by `citations` (`turn_<n>`,
    /// `mem_<n>`), in that order; one that is not the caller's, or no
    /// longer active, is left out.
    pub fn by_citation(&self, caller: &Caller, citations: &[String]) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        let items: Vec<i64> = citations
            .iter()
            .filter_map(|c| match c.strip_prefix("turn_") {
                Some(n) => n.parse().ok(),
                None => memgate_recall::citation::parse_memory_citation(c).map(|m| -m),
            })
            .collect();
        self.read(|conn| {
            let Some(scope) = key.find(conn)? else {
                return Ok(Vec::new());
            };
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.extend(crate::ranking::load_item(conn, scope, item, None)?);
            }
            Ok(out)
        })
    }

    /// The newest `limit` turns of the caller's scope, newest first,
    /// unscored: the baseline the first-turn block is measured against.
    pub fn newest_turns(&self, caller: &Caller, limit: usize) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        self.read(|conn| match key.find(conn)? {
            Some(scope) => crate::ranking::newest_turns(conn, scope, limit),
            None => Ok(Vec::new()),
        })
    }

    /// Ranked entries of the caller's scope for `query` (what recall and the
    /// LoCoMo evaluation both use).
    pub fn ranked(&self, caller: &Caller, query: &str, top_k: usize) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        let vector = self.query_vector(query);
        self.read(|conn| match key.find(conn)? {
            Some(scope) => self.ranked_in(conn, scope, query, &vector, top_k, None),
            None => Ok(Vec::new()),
        })
    }

    /// The bounded, cited block for the caller.
    ///
    /// With a query (or, when the caller gives none, a configured
    /// `injection_query`): the ranked items, then the newest
    /// `standing_memories` explicit memories not already among them, while
    /// the budget lasts. With neither: the [first-turn block](crate::first_turn),
    /// which opens with the same standing memories.
    pub fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        let asked = request
            .query
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty());
        let key = ScopeKey::of(&request.caller);
        let (top_k, standing) = (
            self.config.recall.recall_top_k,
            self.config.recall.standing_memories,
        );
        let Some(query) = asked.or(self.config.recall.injection_query.as_deref()) else {
            let today = now_rfc3339();
            let max_chars = self.config.recall.max_injection_chars;
            return self.read(|conn| match key.find(conn)? {
                Some(scope) => {
                    self.first_turn_blocks
                        .block(conn, scope, standing, max_chars, &today[..10])
                }
                None => Ok(Recall::empty()),
            });
        };
        let vector = self.query_vector(query);
        let ranked = self.read(|conn| {
            let Some(scope) = key.find(conn)? else {
                return Ok(Vec::new());
            };
            let mut ranked = self.ranked_in(conn, scope, query, &vector, top_k, None)?;
            for fact in newest_active(conn, scope, standing)? {
                if !ranked.iter().any(|r| r.citation == fact.id) {
                    ranked.push(Ranked {
                        citation: fact.id,
                        kind: fact.kind,
                        text: fact.text,
                        score: 0.0,
                        origin: Origin::Memory,
                    });
                }
            }
            Ok(ranked)
        })?;
        Ok(assemble(&ranked, self.config.recall.max_injection_chars))
    }

    /// How many first-turn blocks were served from the cache (unchanged
    /// scopes) since the store was opened.
    pub fn first_turn_cache_hits(&self) -> u64 {
        self.first_turn_blocks.hits()
    }

    /// Full-text search; `kind` (a memory kind, or `turn`) filters before
    /// the `top_k` cut.
    pub fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        if query.query.trim().is_empty() {
            return Err(MemoryError::invalid("query", "must not be blank"));
        }
        if query.top_k == 0 || query.top_k > MAX_SEARCH_TOP_K {
            return Err(MemoryError::invalid(
                "top_k",
                format!("must be between 1 and {MAX_SEARCH_TOP_K}"),
            ));
        }
        let kind = match query.kind.as_deref().map(str::trim) {
            Some("") => return Err(MemoryError::invalid("kind", "must not be blank")),
            other => other,
        };
        let key = ScopeKey::of(caller);
        let vector = self.query_vector(&query.query);
        let ranked = self.read(|conn| match key.find(conn)? {
            Some(scope) => self.ranked_in(conn, scope, &query.query, &vector, query.top_k, kind),
            None => Ok(Vec::new()),
        })?;
        Ok(ranked.into_iter().map(SearchHit::from).collect())
    }
}
