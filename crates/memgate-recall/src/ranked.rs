//! What a ranking is made of, in both stores: a ranked entry and where it
//! comes from, the size of the candidate pool, and neighbour smoothing.
//!
//! Items of the recall index are numbered the way both stores number them:
//! turn `n` is item `n`, explicit memory `n` is item `-n`.

use crate::citation::parse_memory_citation;
use std::collections::{HashMap, HashSet};

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

/// Which items compete in a ranking, before its cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Among<'a> {
    /// Turns and memories: recall, and a search without `kind`.
    All,
    /// Captured turns only: a search for `kind` `turn`.
    Turns,
    /// Memories only, of one kind when given: a search for a memory kind,
    /// and the facts a job's turns may change (a scope's turns, the job's
    /// own among them, would otherwise crowd them out of the pool).
    Memories(Option<&'a str>),
}

impl<'a> Among<'a> {
    /// What a search's `kind` filter lets compete.
    pub fn of_kind(kind: Option<&'a str>) -> Self {
        match kind {
            None => Self::All,
            Some(TURN_KIND) => Self::Turns,
            Some(kind) => Self::Memories(Some(kind)),
        }
    }

    /// Most postings a lexical ranking among these walks:
    /// [`MAXSCORE_BUDGET`] where turns compete, and every term among
    /// memories alone, whose postings are few, and where counts that are
    /// mostly turns' must not pick the terms that find them.
    pub fn walk_budget(self) -> usize {
        match self.admits_turns() {
            true => MAXSCORE_BUDGET,
            false => usize::MAX,
        }
    }

    pub fn admits_turns(self) -> bool {
        matches!(self, Self::All | Self::Turns)
    }

    pub fn admits_memories(self) -> bool {
        !matches!(self, Self::Turns)
    }

    /// The one memory kind allowed, if only one is.
    pub fn memory_kind(self) -> Option<&'a str> {
        match self {
            Self::Memories(kind) => kind,
            _ => None,
        }
    }

    /// Whether an entry of category `kind` (`turn`, or a memory's kind)
    /// competes.
    pub fn admits(self, kind: &str) -> bool {
        match self {
            Self::All => true,
            Self::Turns => kind == TURN_KIND,
            Self::Memories(None) => kind != TURN_KIND,
            Self::Memories(Some(k)) => kind == k,
        }
    }
}

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

/// Leaves out each entry that shows nothing the entries above it do not:
/// a turn a higher distilled fact rests on, and a distilled fact whose
/// source turns are all shown above. Either way the line repeats one above
/// it and takes the place of one that adds something. `sources` maps a
/// fact's memory id to the turns (ids) it rests on; an explicit memory
/// rests on none and always stays. Returns how many were left out.
pub fn fold_restated(ranked: &mut Vec<Ranked>, sources: &HashMap<i64, Vec<i64>>) -> usize {
    let before = ranked.len();
    let mut shown: HashSet<i64> = HashSet::new();
    ranked.retain(|r| {
        let reaches: Vec<i64> = match (&r.origin, r.item()) {
            (Origin::Turn { .. }, Some(turn)) => vec![turn],
            (Origin::Memory, Some(memory)) => sources.get(&-memory).cloned().unwrap_or_default(),
            _ => Vec::new(),
        };
        let fresh = reaches.is_empty() || reaches.iter().any(|t| !shown.contains(t));
        shown.extend(reaches.iter().copied());
        fresh
    });
    before - ranked.len()
}

/// Names the turns each distilled fact in `ranked` rests on at the end of
/// its line (`… (from turn_3, turn_4)`), so a reader can check it against
/// what was said; `sources` as in [`fold_restated`].
pub fn cite_sources(ranked: &mut [Ranked], sources: &HashMap<i64, Vec<i64>>) {
    for item in ranked.iter_mut().filter(|r| r.origin == Origin::Memory) {
        if let Some(turns) = parse_memory_citation(&item.citation).and_then(|id| sources.get(&id)) {
            item.text = crate::citation::cited_from(&item.text, turns);
        }
    }
}

/// How deep a ranking asked for `top_k` reads first: a store that distils
/// facts reads twice as deep, so the places of the lines [`fold_restated`]
/// leaves out are filled from the same ranking (a second ranking costs
/// about as much again; reading deeper, a quarter more).
pub fn first_depth(top_k: usize, distils: bool) -> usize {
    if distils {
        top_k * 2
    } else {
        top_k
    }
}

/// How deep to rank again when a ranking read to `depth` found `found`
/// entries and [`fold_restated`] left `kept` of them, fewer than `top_k`:
/// `None` when nothing was left out or the ranking was not full (nothing
/// more to find).
pub fn refill_depth(top_k: usize, depth: usize, found: usize, kept: usize) -> Option<usize> {
    (kept < top_k && kept < found && found >= depth).then(|| depth * 2)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_kind_names_what_competes() {
        assert_eq!(Among::of_kind(None), Among::All);
        assert_eq!(Among::of_kind(Some(TURN_KIND)), Among::Turns);
        assert_eq!(Among::of_kind(Some("fact")), Among::Memories(Some("fact")));
        let every_memory = Among::Memories(None);
        assert!(!every_memory.admits_turns() && every_memory.admits_memories());
        assert!(every_memory.admits("fact") && every_memory.admits("preference"));
        assert!(!every_memory.admits(TURN_KIND));
        assert!(!Among::Memories(Some("fact")).admits("preference"));
        assert!(Among::Turns.admits(TURN_KIND) && !Among::Turns.admits_memories());
        assert!(Among::All.admits(TURN_KIND) && Among::All.admits("fact"));
    }

    fn turn(n: i64) -> Ranked {
        Ranked {
            citation: format!("turn_{n}"),
            kind: TURN_KIND.to_owned(),
            text: format!("turn {n}"),
            score: 1.0,
            origin: Origin::Turn {
                thread: "t".to_owned(),
                seq: n,
                message_id: None,
                role: "user".to_owned(),
                speaker: None,
                occurred_at: None,
            },
        }
    }

    fn memory(n: i64) -> Ranked {
        Ranked {
            citation: format!("mem_{n}"),
            kind: "fact".to_owned(),
            text: format!("memory {n}"),
            score: 1.0,
            origin: Origin::Memory,
        }
    }

    fn citations(ranked: &[Ranked]) -> Vec<&str> {
        ranked.iter().map(|r| r.citation.as_str()).collect()
    }

    #[test]
    fn a_line_that_repeats_the_lines_above_it_is_left_out() {
        // mem_1 rests on turn 3; mem_2 on turns 4 and 5; mem_3 on turn 6;
        // mem_4 is explicit (no sources).
        let sources = HashMap::from([(1, vec![3]), (2, vec![4, 5]), (3, vec![6])]);
        let mut ranked = vec![
            memory(1), // reaches turn 3
            turn(3),   // shown through mem_1: out
            turn(4),
            memory(2), // turn 5 is new: stays
            turn(5),   // shown through mem_2: out
            turn(6),
            memory(3), // its only source is shown above: out
            memory(4), // explicit: stays
            turn(7),
        ];
        assert_eq!(fold_restated(&mut ranked, &sources), 3);
        assert_eq!(
            citations(&ranked),
            ["mem_1", "turn_4", "mem_2", "turn_6", "mem_4", "turn_7"]
        );
    }

    #[test]
    fn a_distilled_facts_line_names_its_sources_and_nothing_else_changes() {
        let sources = HashMap::from([(1, vec![3, 4])]);
        let mut ranked = vec![memory(1), memory(2), turn(3)];
        cite_sources(&mut ranked, &sources);
        let texts: Vec<&str> = ranked.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(
            texts,
            ["memory 1 (from turn_3, turn_4)", "memory 2", "turn 3"]
        );
    }

    #[test]
    fn a_ranking_without_distilled_facts_is_unchanged() {
        let mut ranked = vec![turn(1), memory(2), turn(2)];
        assert_eq!(fold_restated(&mut ranked, &HashMap::new()), 0);
        assert_eq!(citations(&ranked), ["turn_1", "mem_2", "turn_2"]);
    }

    #[test]
    fn a_full_ranking_left_short_by_the_fold_is_ranked_again_deeper() {
        assert_eq!(first_depth(10, false), 10);
        assert_eq!(first_depth(10, true), 20);
        assert_eq!(refill_depth(10, 10, 10, 8), Some(20));
        assert_eq!(refill_depth(10, 20, 20, 12), None, "enough left");
        assert_eq!(refill_depth(10, 20, 20, 9), Some(40));
        assert_eq!(
            refill_depth(10, 10, 7, 5),
            None,
            "not full: nothing more to find"
        );
        assert_eq!(refill_depth(10, 10, 10, 10), None);
    }
}
