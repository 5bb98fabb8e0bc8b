//! Recall and search over the caller's scope: the ranking laid out as the
//! block a host injects ([`memgate_recall::block`]).
//!
//! With a query (or, when the caller gives none, a configured
//! `injection_query`): the ranked items, then the newest
//! `standing_memories` explicit memories not already among them, while
//! the budget lasts. With neither: the [first-turn block](crate::first_turn),
//! which opens with the same standing memories.

use crate::facts::{fact_sources, newest_active};
use crate::hybrid::{QueryVector, Ranker};
use crate::ranking::load_item;
use memgate_core::{MemoryError, RecallRequest, Result, SearchQuery};
use memgate_recall::block::MAX_SEARCH_TOP_K;
use memgate_recall::citation::parse_memory_citation;
use memgate_recall::ranked::{add_standing, cite_sources, Among, Ranked};
use memgate_recall::settings::RecallSettings;
use rusqlite::Connection;

/// What a recall ranks for: the caller's query, else the configured
/// `injection_query`; `None` asks for the first-turn block.
pub(crate) fn query_of<'a>(
    request: &'a RecallRequest,
    settings: &'a RecallSettings,
) -> Option<&'a str> {
    let asked = request
        .query
        .as_deref()
        .map(str::trim)
        .filter(|q| !q.is_empty());
    asked.or(settings.injection_query.as_deref())
}

/// The ranking of `query` in `scope` for recall: the best `recall_top_k`,
/// then the newest `standing_memories` explicit memories not already among
/// them (unscored).
pub(crate) fn ranked_with_standing(
    conn: &Connection,
    ranker: &Ranker<'_>,
    scope: i64,
    query: &str,
    vector: &QueryVector,
    settings: &RecallSettings,
) -> Result<Vec<Ranked>> {
    let mut ranked = ranker.ranked_in(
        conn,
        scope,
        query,
        vector,
        settings.recall_top_k,
        Among::All,
    )?;
    let ranked_len = ranked.len();
    add_standing(
        &mut ranked,
        newest_active(conn, scope, settings.standing_memories)?,
    );
    // The ranking's own facts already name their sources.
    let standing = &mut ranked[ranked_len..];
    let sources = fact_sources(conn, standing)?;
    cite_sources(standing, &sources);
    Ok(ranked)
}

/// The kind a search is filtered by, once the search is known to be valid
/// (a query that is not blank, `top_k` within bounds, a kind that is not
/// blank).
pub(crate) fn search_kind(query: &SearchQuery) -> Result<Option<&str>> {
    if query.query.trim().is_empty() {
        return Err(MemoryError::invalid("query", "must not be blank"));
    }
    if query.top_k == 0 || query.top_k > MAX_SEARCH_TOP_K {
        return Err(MemoryError::invalid(
            "top_k",
            format!("must be between 1 and {MAX_SEARCH_TOP_K}"),
        ));
    }
    match query.kind.as_deref().map(str::trim) {
        Some("") => Err(MemoryError::invalid("kind", "must not be blank")),
        other => Ok(other),
    }
}

/// The recall-index items named by `citations` (`turn_<n>`: `n`,
/// `mem_<n>`: `-n`); what is neither is left out.
pub(crate) fn cited_items(citations: &[String]) -> Vec<i64> {
    citations
        .iter()
        .filter_map(|c| match c.strip_prefix("turn_") {
            Some(n) => n.parse().ok(),
            None => parse_memory_citation(c).map(|m| -m),
        })
        .collect()
}

/// The `items` of `scope`, in that order; one that is not the scope's, or no
/// longer active, is left out.
pub(crate) fn load_items(conn: &Connection, scope: i64, items: &[i64]) -> Result<Vec<Ranked>> {
    let mut out = Vec::with_capacity(items.len());
    for &item in items {
        out.extend(load_item(conn, scope, item, Among::All)?);
    }
    Ok(out)
}
