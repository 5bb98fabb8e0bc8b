//! Ranking: the one ordering that recall, search and the LoCoMo evaluation
//! share.
//!
//! 0. Query planning bounds the work: each query term's document count in
//!    the scope is measured (counting stops at [`POSTINGS_BUDGET`]), terms
//!    absent from the scope are dropped, and the most common terms are left
//!    out while the rest already reach the budget (they carry the least BM25
//!    weight). When even the rarest term is over budget, the query carries
//!    no discriminating word: the two rarest terms are required together
//!    (`AND`) and the newest matching memories, then turns, are taken,
//!    without BM25. Small scopes are never pruned. Terms found over the budget
//!    are remembered ([`CommonTerms`]) and not counted again.
//! 1. FTS5 BM25 over the scope's terms ([`RANK_FUNCTION`]: `body` weighted
//!    1.0, `context` — speaker, date, memory kind — 0.5); the best
//!    [`candidate_pool`] rows are taken.
//! 2. Neighbour smoothing: the turns just before and after the best
//!    [`NEIGHBOURS_OF`] turns join the candidates, and every turn earns
//!    [`NEIGHBOUR_WEIGHT`] times the BM25 scores of its neighbours, because
//!    an answer is often a short reply whose words are in the question
//!    before it (BM25 rankings only; a newest-first list keeps its order).
//! 3. Explicit memories count [`MEMORY_WEIGHT`] times: the user asked for
//!    them to be kept.
//!
//! Scores are comparable within one ranking only (a newest-first list gets
//! small descending scores by position). Document frequencies are
//! per scope (terms carry the scope tag); the total row count and average
//! length that BM25 also uses are those of the whole file.

use crate::facts;
use crate::schema::db_error;
use crate::terms::{query_phrases, scope_tag};
use memgate_core::Result;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// FTS5's rank function: BM25 with per-column weights (body, context).
/// Passed with every query (`rank MATCH ?`), so it is code, not schema.
pub const RANK_FUNCTION: &str = "bm25(1.0, 0.5)";
/// Share of a neighbouring turn's score a turn inherits.
pub const NEIGHBOUR_WEIGHT: f64 = 0.25;
/// How many of the best turns bring their neighbours into the candidates.
pub const NEIGHBOURS_OF: usize = 10;
/// Boost of explicit memories over captured turns.
pub const MEMORY_WEIGHT: f64 = 1.5;

/// Most documents one ranking lets FTS5 score: bounds recall latency on
/// large scopes.
pub const POSTINGS_BUDGET: usize = 600;

/// Most terms [`CommonTerms`] remembers before it starts over.
const MAX_COMMON_TERMS: usize = 100_000;

/// Query terms already seen matching more than [`POSTINGS_BUDGET`]
/// documents of their scope, so they need not be counted again. A term only
/// becomes rarer when memories are retired, so the verdict is kept for the
/// life of the store (an approximation that only affects large scopes).
#[derive(Debug, Default)]
pub struct CommonTerms(Mutex<HashSet<String>>);

impl CommonTerms {
    fn contains(&self, phrase: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(phrase)
    }

    fn insert(&self, phrase: &str) {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if set.len() >= MAX_COMMON_TERMS {
            set.clear();
        }
        set.insert(phrase.to_owned());
    }
}

/// How many BM25 candidates to re-rank for a final list of `top_k`.
pub fn candidate_pool(top_k: usize) -> usize {
    (top_k * 5).max(50)
}

/// Where a ranked entry comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// An explicit memory (`mem_<id>`).
    Memory,
    /// A captured turn (`turn_<id>`).
    Turn {
        thread: String,
        seq: i64,
        message_id: Option<String>,
        role: String,
        speaker: Option<String>,
        occurred_at: Option<String>,
    },
}

/// One ranked entry of the caller's scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    pub citation: String,
    /// The memory kind, or `turn` for captured turns.
    pub kind: String,
    pub text: String,
    pub score: f64,
    pub origin: Origin,
}

impl Ranked {
    /// Its recall-index rowid (turn `n`, memory `-n`).
    pub fn item(&self) -> Option<i64> {
        match self.origin {
            Origin::Turn { .. } => self.citation.strip_prefix("turn_")?.parse().ok(),
            Origin::Memory => facts::parse_citation(&self.citation).map(|n| -n),
        }
    }
}

impl From<Ranked> for memgate_core::SearchHit {
    /// A search hit names where it came from: `memory` or `thread:<id>`.
    fn from(r: Ranked) -> Self {
        memgate_core::SearchHit {
            source: Some(match &r.origin {
                Origin::Memory => "memory".to_owned(),
                Origin::Turn { thread, .. } => format!("thread:{thread}"),
            }),
            id: r.citation,
            content: r.text,
            category: r.kind,
            score: Some(r.score),
        }
    }
}

/// The citation of captured turn `id`.
pub fn turn_citation(id: i64) -> String {
    format!("turn_{id}")
}

/// The category of captured turns in search hits and recall items.
pub const TURN_KIND: &str = "turn";

/// What the ranking asks FTS5 for.
#[derive(Debug, PartialEq)]
enum Plan {
    /// BM25 over the documents matching these (uncommon) terms, `OR`ed.
    Scored(String),
    /// Every query term is common: the newest documents containing the two
    /// rarest terms together (`AND`), without BM25 (whose document-frequency
    /// pass would walk each common term's whole posting list).
    Newest(String),
}

/// Which rows one candidate query returns, and in which order.
#[derive(Clone, Copy)]
enum Rows {
    /// Turns and memories by BM25.
    Scored,
    /// Turns, newest first.
    NewestTurns,
    /// Memories, newest first.
    NewestMemories,
}

/// Ranks `query` in `scope`, best first, at most `top_k` entries. With
/// `category`, only turns (`turn`) or memories of that kind compete, before
/// the cut.
pub fn rank(
    conn: &Connection,
    common: &CommonTerms,
    scope: i64,
    query: &str,
    top_k: usize,
    category: Option<&str>,
) -> Result<Vec<Ranked>> {
    let Some(plan) = plan_query(conn, common, &query_phrases(&scope_tag(scope), query))? else {
        return Ok(Vec::new());
    };
    let pool = candidate_pool(top_k);
    let mut candidates = match &plan {
        Plan::Scored(expr) => candidates(conn, scope, expr, Rows::Scored, category, pool)?,
        Plan::Newest(expr) => {
            // Memories first (the user asked for them), then turns; the
            // order becomes a small descending score.
            let mut c = candidates(conn, scope, expr, Rows::NewestMemories, category, pool)?;
            c.extend(candidates(
                conn,
                scope,
                expr,
                Rows::NewestTurns,
                category,
                pool,
            )?);
            c.truncate(pool);
            let n = c.len() as f64;
            for (i, (_, rank)) in c.iter_mut().enumerate() {
                *rank = -(n - i as f64) / n.max(1.0);
            }
            c
        }
    };
    let mut ranked = Vec::with_capacity(candidates.len());
    for (rowid, bm25_rank) in candidates.drain(..) {
        // FTS5 ranks are negated BM25 scores (lower is better).
        let score = -bm25_rank;
        let entry = if rowid > 0 {
            load_turn(conn, scope, rowid, score)?
        } else {
            load_memory(conn, scope, -rowid, score)?
        };
        // Defence in depth: a row of another scope is never returned.
        ranked.extend(entry);
    }
    if let Plan::Scored(_) = plan {
        // Recency order has no scores for neighbours to share.
        add_neighbours(conn, scope, &mut ranked)?;
        smooth_neighbours(&mut ranked);
    }
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    ranked.truncate(top_k);
    Ok(ranked)
}

/// The best `pool` (rowid, FTS5 rank) pairs of one candidate query.
fn candidates(
    conn: &Connection,
    scope: i64,
    expr: &str,
    rows: Rows,
    category: Option<&str>,
    pool: usize,
) -> Result<Vec<(i64, f64)>> {
    let score = match rows {
        Rows::Scored => "rank",
        Rows::NewestTurns | Rows::NewestMemories => "0.0",
    };
    let mut sql = format!("SELECT rowid, {score} FROM recall_index WHERE recall_index MATCH ?1");
    let mut args: Vec<SqlValue> = vec![expr.to_owned().into()];
    if let Rows::Scored = rows {
        // Written into the SQL, not bound: FTS5 plans with the rank
        // function, so a bound one re-prepared the statement on every call
        // (see [`bounded_count`]).
        sql.push_str(&format!(" AND rank MATCH '{RANK_FUNCTION}'"));
    }
    if let Some(kind) = category {
        args.push(kind.to_owned().into());
        let k = args.len();
        args.push(scope.into());
        let s = args.len();
        sql.push_str(&format!(
            " AND ((?{k} = 'turn' AND rowid > 0) OR (rowid < 0 AND -rowid IN
                 (SELECT id FROM memories WHERE scope_id = ?{s} AND kind = ?{k})))"
        ));
    }
    let order = match rows {
        Rows::Scored => "rank",
        Rows::NewestTurns => {
            sql.push_str(" AND rowid > 0");
            "rowid DESC"
        }
        Rows::NewestMemories => {
            sql.push_str(" AND rowid < 0");
            "rowid ASC" // memory n is rowid -n: the newest is the lowest
        }
    };
    // The limit is written into the SQL, not bound (see [`bounded_count`]).
    sql.push_str(&format!(" ORDER BY {order} LIMIT {pool}"));
    conn.prepare_cached(&sql)
        .and_then(|mut s| {
            s.query_map(params_from_iter(args), |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(db_error)
}

/// How many documents match `expr`, counting no further than `limit`.
///
/// The limit is part of the SQL text, not a bound parameter: SQLite hands a
/// LIMIT on a virtual table to its planner, and a statement whose plan saw
/// a bound value is re-prepared whenever its bindings are cleared, which
/// rusqlite's statement cache does on every return. Bound, it cost a full
/// re-prepare of each FTS5 query on every recall.
fn bounded_count(conn: &Connection, expr: &str, limit: usize) -> Result<usize> {
    conn.prepare_cached(&format!(
        "SELECT count(*) FROM
             (SELECT 1 FROM recall_index WHERE recall_index MATCH ?1 LIMIT {limit})"
    ))
    .and_then(|mut s| s.query_row(params![expr], |r| r.get::<_, i64>(0)))
    .map(|n| n as usize)
    .map_err(db_error)
}

/// The plan for `phrases` (see the module doc), or `None` when no query
/// term occurs in the scope.
fn plan_query(conn: &Connection, common: &CommonTerms, phrases: &[String]) -> Result<Option<Plan>> {
    let mut counted = Vec::with_capacity(phrases.len());
    for phrase in phrases {
        let n = if common.contains(phrase) {
            POSTINGS_BUDGET + 1
        } else {
            bounded_count(conn, phrase, POSTINGS_BUDGET + 1)?
        };
        if n > POSTINGS_BUDGET {
            common.insert(phrase);
        }
        if n > 0 {
            counted.push((n, phrase.as_str()));
        }
    }
    if counted.is_empty() {
        return Ok(None);
    }
    counted.sort_by_key(|(n, _)| *n);
    let mut kept = Vec::new();
    let mut total = 0;
    for (n, phrase) in &counted {
        if total + n > POSTINGS_BUDGET {
            break;
        }
        total += n;
        kept.push(*phrase);
    }
    if !kept.is_empty() {
        return Ok(Some(Plan::Scored(kept.join(" OR "))));
    }
    // Every term is common: the newest documents with the two rarest terms
    // together, else with the rarest alone.
    if let [(_, first), (_, second), ..] = counted[..] {
        let pair = format!("{first} AND {second}");
        if bounded_count(conn, &pair, 1)? > 0 {
            return Ok(Some(Plan::Newest(pair)));
        }
    }
    Ok(Some(Plan::Newest(counted[0].1.to_owned())))
}

const TURN_COLUMNS: &str = "id, thread, seq, message_id, role, speaker, occurred_at, text";

fn turn_from_row(r: &rusqlite::Row<'_>, score: f64) -> rusqlite::Result<Ranked> {
    Ok(Ranked {
        citation: turn_citation(r.get(0)?),
        kind: TURN_KIND.to_owned(),
        text: r.get(7)?,
        score,
        origin: Origin::Turn {
            thread: r.get(1)?,
            seq: r.get(2)?,
            message_id: r.get(3)?,
            role: r.get(4)?,
            speaker: r.get(5)?,
            occurred_at: r.get(6)?,
        },
    })
}

fn load_turn(conn: &Connection, scope: i64, id: i64, score: f64) -> Result<Option<Ranked>> {
    conn.prepare_cached(&format!(
        "SELECT {TURN_COLUMNS} FROM turns WHERE id = ?1 AND scope_id = ?2"
    ))
    .and_then(|mut s| {
        s.query_row(params![id, scope], |r| turn_from_row(r, score))
            .optional()
    })
    .map_err(db_error)
}

/// The newest `limit` turns of `scope`, newest first, unscored.
pub(crate) fn newest_turns(conn: &Connection, scope: i64, limit: usize) -> Result<Vec<Ranked>> {
    conn.prepare_cached(&format!(
        "SELECT {TURN_COLUMNS} FROM turns WHERE scope_id = ?1 ORDER BY id DESC LIMIT {limit}"
    ))
    .and_then(|mut s| {
        s.query_map(params![scope], |r| turn_from_row(r, 0.0))?
            .collect()
    })
    .map_err(db_error)
}

/// The citation of recall-index row `item` (turn `n`, memory `-n`).
pub(crate) fn item_citation(item: i64) -> String {
    if item > 0 {
        turn_citation(item)
    } else {
        facts::citation(-item)
    }
}

/// Recall-index row `item` of `scope`, unscored, if it exists, is active
/// and belongs to `category` (`turn` or a memory kind).
pub(crate) fn load_item(
    conn: &Connection,
    scope: i64,
    item: i64,
    category: Option<&str>,
) -> Result<Option<Ranked>> {
    let entry = if item > 0 {
        if category.is_some_and(|c| c != TURN_KIND) {
            return Ok(None);
        }
        load_turn(conn, scope, item, 0.0)?
    } else {
        load_memory(conn, scope, -item, 0.0)?
    };
    Ok(entry.filter(|r| category.is_none_or(|c| r.kind == c)))
}

/// The turn at position `seq` of `thread`, unscored.
fn load_turn_at(conn: &Connection, scope: i64, thread: &str, seq: i64) -> Result<Option<Ranked>> {
    conn.prepare_cached(&format!(
        "SELECT {TURN_COLUMNS} FROM turns WHERE scope_id = ?1 AND thread = ?2 AND seq = ?3"
    ))
    .and_then(|mut s| {
        s.query_row(params![scope, thread, seq], |r| turn_from_row(r, 0.0))
            .optional()
    })
    .map_err(db_error)
}

/// Turns adjacent to the best [`NEIGHBOURS_OF`] candidates join the
/// candidates (with no BM25 score of their own), so a reply that shares no
/// word with the query can still be found through the message it answers.
fn add_neighbours(conn: &Connection, scope: i64, ranked: &mut Vec<Ranked>) -> Result<()> {
    let mut best: Vec<(f64, String, i64)> = ranked
        .iter()
        .filter_map(|r| match &r.origin {
            Origin::Turn { thread, seq, .. } => Some((r.score, thread.clone(), *seq)),
            Origin::Memory => None,
        })
        .collect();
    best.sort_by(|a, b| b.0.total_cmp(&a.0));
    best.truncate(NEIGHBOURS_OF);
    let mut present: HashSet<(String, i64)> = ranked
        .iter()
        .filter_map(|r| match &r.origin {
            Origin::Turn { thread, seq, .. } => Some((thread.clone(), *seq)),
            Origin::Memory => None,
        })
        .collect();
    for (_, thread, seq) in best {
        for near in [seq - 1, seq + 1] {
            if present.insert((thread.clone(), near)) {
                ranked.extend(load_turn_at(conn, scope, &thread, near)?);
            }
        }
    }
    Ok(())
}

fn load_memory(conn: &Connection, scope: i64, id: i64, score: f64) -> Result<Option<Ranked>> {
    conn.prepare_cached(
        "SELECT kind, text FROM memories WHERE id = ?1 AND scope_id = ?2 AND state = 'active'",
    )
    .and_then(|mut s| {
        s.query_row(params![id, scope], |r| {
            Ok(Ranked {
                citation: facts::citation(id),
                kind: r.get(0)?,
                text: r.get(1)?,
                score: score * MEMORY_WEIGHT,
                origin: Origin::Memory,
            })
        })
        .optional()
    })
    .map_err(db_error)
}

/// Adds [`NEIGHBOUR_WEIGHT`] × the BM25 scores of each turn's candidate
/// neighbours (the turn before and after it in the same thread).
pub fn smooth_neighbours(ranked: &mut [Ranked]) {
    let base: HashMap<(&str, i64), f64> = ranked
        .iter()
        .filter_map(|r| match &r.origin {
            Origin::Turn { thread, seq, .. } => Some(((thread.as_str(), *seq), r.score)),
            Origin::Memory => None,
        })
        .collect();
    let bonus: Vec<f64> = ranked
        .iter()
        .map(|r| match &r.origin {
            Origin::Turn { thread, seq, .. } => {
                let near = |s: i64| base.get(&(thread.as_str(), s)).copied().unwrap_or(0.0);
                NEIGHBOUR_WEIGHT * (near(seq - 1) + near(seq + 1))
            }
            Origin::Memory => 0.0,
        })
        .collect();
    for (r, b) in ranked.iter_mut().zip(bonus) {
        r.score += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LocalConfig;
    use crate::store::MemoryStore;
    use memgate_core::{Caller, CaptureKind, CaptureRequest, Message};
    use rusqlite::StatementStatus;

    /// Each FTS5 query is prepared once per connection and then reused: a
    /// re-prepare on every call (what a bound LIMIT caused) doubles the
    /// planning work of a recall.
    #[test]
    fn fts5_queries_are_not_re_prepared_on_every_recall() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            MemoryStore::open(dir.path().join("m.sqlite3"), LocalConfig::default()).unwrap();
        let user = Caller::new("u");
        let messages = (0..200)
            .map(|i| {
                Message::human(format!("word{} topic{} tomatoes", i % 37, i % 11))
                    .with_id(format!("m{i}"))
            })
            .collect();
        let request = CaptureRequest {
            caller: user.clone().with_thread("t"),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        };
        store.capture(&request).unwrap();
        store
            .read(|conn| {
                let scope: i64 = conn
                    .query_row("SELECT id FROM scopes", [], |r| r.get(0))
                    .map_err(db_error)?;
                let common = CommonTerms::default();
                for i in 0..20 {
                    let query = format!("word{} topic{}", i % 37, i % 11);
                    assert!(!rank(conn, &common, scope, &query, 10, None)?.is_empty());
                }
                for sql in [
                    format!(
                        "SELECT count(*) FROM
             (SELECT 1 FROM recall_index WHERE recall_index MATCH ?1 LIMIT {})",
                        POSTINGS_BUDGET + 1
                    ),
                    format!(
                        "SELECT rowid, rank FROM recall_index WHERE recall_index MATCH ?1 \
                         AND rank MATCH '{RANK_FUNCTION}' ORDER BY rank LIMIT {}",
                        candidate_pool(10)
                    ),
                ] {
                    let statement = conn.prepare_cached(&sql).map_err(db_error)?;
                    let runs = statement.get_status(StatementStatus::Run);
                    assert!(runs >= 20, "{sql}: ran {runs} times");
                    assert!(
                        statement.get_status(StatementStatus::RePrepare) <= 1,
                        "{sql}"
                    );
                }
                Ok(())
            })
            .unwrap();
    }
}
