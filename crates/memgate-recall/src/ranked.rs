//! What a ranking is made of, in both stores: a ranked entry and where it
//! comes from, the size of the candidate pool, and neighbour smoothing.
//!
//! Items of the recall index are numbered the way both stores number them:
//! turn `n` is item `n`, explicit memory `n` is item `-n`.

use crate::citation::parse_memory_citation;
use std::collections::HashMap;

/// Share of a neighbouring turn's score a turn inherits.
pub const NEIGHBOUR_WEIGHT: f64 = 0.25;
/// How many of the best turns bring their neighbours into the candidates.
pub const NEIGHBOURS_OF: usize = 10;
/// Boost of explicit memories over captured turns.
pub const MEMORY_WEIGHT: f64 = 1.5;

/// Most documents one `postgres` ranking lets `ts_rank` score: bounds
/// recall latency on large scopes.
pub const POSTINGS_BUDGET: usize = 600;

/// Most postings one `local` BM25 ranking walks ([`crate::maxscore`]):
/// bounds recall latency on large scopes. Past it the top is that of the
/// walked terms' documents, every term scored (near-exact). At 100k items
/// 2,000 keeps the source-turn rate of BM25 over every match
/// (docs/design/lexical-pruning.md).
pub const MAXSCORE_BUDGET: usize = 2_000;

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
            Origin::Memory => parse_memory_citation(&self.citation).map(|n| -n),
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

/// The category of captured turns in search hits and recall items.
pub const TURN_KIND: &str = "turn";

/// What neighbour smoothing needs of a ranked entry: its place (thread and
/// position, turns only) and its score.
pub trait Placed {
    fn place(&self) -> Option<(&str, i64)>;
    fn score(&self) -> f64;
    fn score_mut(&mut self) -> &mut f64;
}

impl Placed for Ranked {
    fn place(&self) -> Option<(&str, i64)> {
        match &self.origin {
            Origin::Turn { thread, seq, .. } => Some((thread.as_str(), *seq)),
            Origin::Memory => None,
        }
    }
    fn score(&self) -> f64 {
        self.score
    }
    fn score_mut(&mut self) -> &mut f64 {
        &mut self.score
    }
}

/// Adds [`NEIGHBOUR_WEIGHT`] × the BM25 scores of each turn's candidate
/// neighbours (the turn before and after it in the same thread).
pub fn smooth_neighbours<T: Placed>(ranked: &mut [T]) {
    let base: HashMap<(&str, i64), f64> = ranked
        .iter()
        .filter_map(|r| r.place().map(|p| (p, r.score())))
        .collect();
    let bonus: Vec<f64> = ranked
        .iter()
        .map(|r| match r.place() {
            Some((thread, seq)) => {
                let near = |s: i64| base.get(&(thread, s)).copied().unwrap_or(0.0);
                NEIGHBOUR_WEIGHT * (near(seq - 1) + near(seq + 1))
            }
            None => 0.0,
        })
        .collect();
    for (r, b) in ranked.iter_mut().zip(bonus) {
        *r.score_mut() += b;
    }
}

/// Appends the standing explicit memories (newest first) that `ranked`
/// does not already hold, after the ranked items and unscored: the user
/// asked for them to be kept, and a request rarely repeats their words.
pub fn add_standing(
    ranked: &mut Vec<Ranked>,
    standing: impl IntoIterator<Item = memgate_core::Fact>,
) {
    for fact in standing {
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
}
