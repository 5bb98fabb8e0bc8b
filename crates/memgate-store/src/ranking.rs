//! Ranking: the one ordering that recall, search and the LoCoMo evaluation
//! share.
//!
//! 0. Query planning: each query term's document count in the scope is
//!    counted (and remembered until the scope is next written to,
//!    [`TermCounts`]); terms absent from the scope are dropped. When even
//!    the rarest term matches more than [`MAXSCORE_BUDGET`](memgate_recall::ranked::MAXSCORE_BUDGET) documents, the
//!    query carries no discriminating word: the two rarest terms are
//!    required together (`AND`) and the newest matching memories, then
//!    turns, are taken, without BM25.
//! 1. BM25 over every query term ([`RANK_FUNCTION`]'s: `body` weighted 1.0,
//!    `context` — speaker, date, memory kind — 0.5), the best
//!    [`candidate_pool`] found by MaxScore ([`memgate_recall::maxscore`]):
//!    the rarest terms' documents are scored in full (the common terms
//!    looked up at those documents only, through `memgate_bm25` with the
//!    counted frequencies), and rarer-to-commoner terms are added until no
//!    document outside can reach the pool — the exact BM25 top of every
//!    match — or until the walked postings would pass [`MAXSCORE_BUDGET`](memgate_recall::ranked::MAXSCORE_BUDGET)
//!    (then the pool is that of the walked terms' documents: near-exact,
//!    measured by `memgate bench`).
//! 2. Neighbour smoothing: the turns just before and after the best
//!    [`NEIGHBOURS_OF`] turns join the candidates, and every turn earns
//!    [`NEIGHBOUR_WEIGHT`] times the BM25 scores of its neighbours, because
//!    an answer is often a short reply whose words are in the question
//!    before it (BM25 rankings only; a newest-first list keeps its order).
//! 3. Explicit memories count [`MEMORY_WEIGHT`] times: the user asked for
//!    them to be kept.
//!
//! Until the cut only each candidate's place (thread, position) is read, in
//! one statement for all; full rows are read for the final `top_k`.
//!
//! Scores are comparable within one ranking only (a newest-first list gets
//! small descending scores by position). Document frequencies are
//! per scope (terms carry the scope tag); the total row count and average
//! length that BM25 also uses are those of the whole file.

use crate::bm25::{
    frequencies_blob, remembered_lengths, skipped_lengths, FUNCTION as BM25_FUNCTION,
};
use crate::error::db_error;
use crate::scope::write_generation;
use memgate_core::Result;
use memgate_recall::citation::{memory_citation, turn_citation};
use memgate_recall::maxscore::{essential_terms, idf, term_bound};
use memgate_recall::ranked::{
    candidate_pool, smooth_neighbours, Among, Origin, Placed, Ranked, MEMORY_WEIGHT, NEIGHBOURS_OF,
    TURN_KIND,
};
use memgate_recall::terms::{query_phrases, scope_tag};
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// FTS5's rank function: BM25 with per-column weights (body, context);
/// `memgate_bm25` computes exactly this with given document frequencies.
pub const RANK_FUNCTION: &str = "bm25(1.0, 0.5)";
/// Counting limit that counts everything: BM25 needs exact frequencies.
const EVERY_MATCH: usize = 1 << 40;
/// Most exact counts [`TermCounts`] keeps, over all scopes, before it
/// starts over (a few MB).
const MAX_EXACT_COUNTS: usize = 100_000;

/// Postings counts of query terms already read, so a recall does not count
/// again what an earlier recall of the scope counted.
///
/// - Exact counts, per scope, read in the scope's current write generation
///   ([`write_generation`]: it moves in the transaction of every write to
///   the scope, as for the cached first-turn block). A term's count depends
///   only on its scope's rows (terms carry the scope tag), so a count read
///   in the same generation is the one a fresh count would give: plans are
///   the same with the cache as without. A write drops the scope's counts.
///
/// One instance serves one postings budget.
#[derive(Debug, Default)]
pub struct TermCounts(Mutex<KnownCounts>);

#[derive(Debug, Default)]
struct KnownCounts {
    scopes: HashMap<i64, ScopeCounts>,
    /// Exact counts held over all scopes.
    exact: usize,
}

/// The exact counts of one scope in one write generation: MATCH
/// expression → (the limit it was counted to, the count).
#[derive(Debug)]
struct ScopeCounts {
    generation: i64,
    counts: HashMap<String, (usize, usize)>,
}

impl TermCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, KnownCounts> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The count of `expr` (to `limit`) in `scope` at `generation`, if read.
    fn exact(&self, scope: i64, generation: i64, expr: &str, limit: usize) -> Option<usize> {
        let known = self.lock();
        let scope = known.scopes.get(&scope)?;
        let &(counted_to, n) = scope.counts.get(expr)?;
        (scope.generation == generation && counted_to == limit).then_some(n)
    }

    /// Keeps a count read in `generation` of `scope`. A newer generation
    /// drops the scope's older counts; a count from an older snapshot (a
    /// reader that started before the last write) is not kept.
    fn insert_exact(&self, scope: i64, generation: i64, expr: &str, limit: usize, n: usize) {
        let mut known = self.lock();
        if known.exact >= MAX_EXACT_COUNTS {
            known.scopes.clear();
            known.exact = 0;
        }
        let KnownCounts { scopes, exact, .. } = &mut *known;
        let entry = scopes.entry(scope).or_insert_with(|| ScopeCounts {
            generation,
            counts: HashMap::new(),
        });
        if entry.generation > generation {
            return;
        }
        if entry.generation < generation {
            *exact -= entry.counts.len();
            entry.counts.clear();
            entry.generation = generation;
        }
        if entry.counts.insert(expr.to_owned(), (limit, n)).is_none() {
            *exact += 1;
        }
    }
}

/// What the rankings of one recall did and where their time went (the
/// bench's tail diagnostics). Recorded only inside [`profiled`], so a
/// ranking otherwise reads no clock.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankProfile {
    pub rankings: usize,
    /// Query terms (folded, distinct).
    pub terms: usize,
    /// Postings counts read from the index (not already known).
    pub counted: usize,
    /// Documents a BM25 plan scored: the postings MaxScore walked.
    pub plan_n: usize,
    /// Walked documents scored by a bound without their length read: they
    /// could not enter the pool.
    pub lengths_skipped: usize,
    /// Walked documents whose length was remembered from an earlier query,
    /// not read from the index.
    pub lengths_remembered: usize,
    /// BM25 rankings the budget stopped before MaxScore proved their pool
    /// exact (near-exact rankings).
    pub inexact: usize,
    /// Rankings whose terms were all common (newest first, no BM25).
    pub newest: usize,
    pub plan: Duration,
    pub candidates: Duration,
    pub places: Duration,
    pub neighbours: Duration,
    pub rows: Duration,
}

impl RankProfile {
    fn add(&mut self, other: &RankProfile) {
        self.rankings += other.rankings;
        self.terms += other.terms;
        self.counted += other.counted;
        self.plan_n += other.plan_n;
        self.lengths_skipped += other.lengths_skipped;
        self.lengths_remembered += other.lengths_remembered;
        self.inexact += other.inexact;
        self.newest += other.newest;
        self.plan += other.plan;
        self.candidates += other.candidates;
        self.places += other.places;
        self.neighbours += other.neighbours;
        self.rows += other.rows;
    }
}

thread_local! {
    static PROFILE: Cell<Option<RankProfile>> = const { Cell::new(None) };
}

/// Runs `work` with the rankings it does on this thread profiled.
pub fn profiled<T>(work: impl FnOnce() -> T) -> (T, RankProfile) {
    let outer = PROFILE.replace(Some(RankProfile::default()));
    let value = work();
    let profile = PROFILE.replace(outer).unwrap_or_default();
    (value, profile)
}

/// One ranking's [`RankProfile`], added to the thread's on drop; inert
/// (no clock read) unless the thread is [`profiled`].
struct Stopwatch {
    at: Option<Instant>,
    profile: RankProfile,
}

impl Stopwatch {
    fn start() -> Self {
        let on = PROFILE.get().is_some();
        Self {
            at: on.then(Instant::now),
            profile: RankProfile {
                rankings: 1,
                ..RankProfile::default()
            },
        }
    }

    /// Adds the time since the last lap to `phase`.
    fn lap(&mut self, phase: fn(&mut RankProfile) -> &mut Duration) {
        if let Some(at) = self.at {
            let now = Instant::now();
            *phase(&mut self.profile) += now - at;
            self.at = Some(now);
        }
    }
}

impl Drop for Stopwatch {
    fn drop(&mut self) {
        if self.at.is_some() {
            if let Some(mut total) = PROFILE.get() {
                total.add(&self.profile);
                PROFILE.set(Some(total));
            }
        }
    }
}

/// What the ranking asks FTS5 for.
#[derive(Debug, PartialEq)]
enum Plan {
    /// BM25 over the documents matching any of these terms (rarest first,
    /// with their document counts).
    Scored(Vec<(usize, String)>),
    /// Every query term is common: the newest documents containing the two
    /// rarest terms together (`AND`), without BM25 (whose document-frequency
    /// pass would walk each common term's whole posting list).
    Newest(String),
}

/// Which rows one candidate query returns, and in which order.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// Turns and memories by `memgate_bm25` with these frequencies (a blob).
    Scored(&'a [u8]),
    /// Turns, newest first.
    NewestTurns,
    /// Memories, newest first.
    NewestMemories,
}

/// Ranks `query` in `scope`, best first, at most `top_k` entries; only
/// `category` competes, before the cut.
pub fn rank(
    conn: &Connection,
    counts: &TermCounts,
    scope: i64,
    query: &str,
    top_k: usize,
    category: Among<'_>,
) -> Result<Vec<Ranked>> {
    // Among memories alone every term is walked: their rowids are the
    // negative ones, and `rowid < 0` bounds FTS5's walk to their postings.
    let budget = category.walk_budget();
    rank_within(conn, counts, budget, scope, query, top_k, category)
}

/// [`rank`] with another postings budget (the benchmark compares rankings
/// across budgets; `counts` must only ever be used with one budget).
pub(crate) fn rank_within(
    conn: &Connection,
    counts: &TermCounts,
    budget: usize,
    scope: i64,
    query: &str,
    top_k: usize,
    category: Among<'_>,
) -> Result<Vec<Ranked>> {
    let mut clock = Stopwatch::start();
    let phrases = query_phrases(&scope_tag(scope), query);
    let mut counter = Counter::new(conn, counts, scope);
    let plan = plan_query(&mut counter, budget, &phrases)?;
    clock.profile.terms = phrases.len();
    clock.profile.counted = counter.counted;
    clock.lap(|p| &mut p.plan);
    let Some(plan) = plan else {
        return Ok(Vec::new());
    };
    let pool = candidate_pool(top_k);
    let candidates = match &plan {
        Plan::Scored(terms) => {
            let (skipped, remembered) = (skipped_lengths(), remembered_lengths());
            let top = pruned_top(conn, scope, terms, budget, category, pool)?;
            clock.profile.lengths_skipped = (skipped_lengths() - skipped) as usize;
            clock.profile.lengths_remembered = (remembered_lengths() - remembered) as usize;
            clock.profile.plan_n = top.walked;
            clock.profile.inexact = usize::from(!top.exact);
            top.hits
        }
        Plan::Newest(expr) => {
            clock.profile.newest = 1;
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
    clock.lap(|p| &mut p.candidates);
    // FTS5 ranks are negated BM25 scores (lower is better).
    let mut ranked = placed(conn, scope, candidates)?;
    clock.lap(|p| &mut p.places);
    if let Plan::Scored(_) = plan {
        // Recency order has no scores for neighbours to share.
        add_neighbours(conn, scope, &mut ranked)?;
        smooth_neighbours(&mut ranked);
    }
    clock.lap(|p| &mut p.neighbours);
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    ranked.truncate(top_k);
    let out = loaded(conn, scope, ranked)?;
    clock.lap(|p| &mut p.rows);
    Ok(out)
}

/// A candidate before its text is read: its score and, for a turn, where
/// it sits (what neighbour smoothing needs). Only the final `top_k` are
/// read in full.
struct Candidate {
    /// Its recall-index rowid (turn `n`, memory `-n`).
    item: i64,
    score: f64,
    /// Thread and position of a turn; `None` for a memory.
    place: Option<(String, i64)>,
}

/// The candidates of `scope` among `hits` (rowid, FTS5 rank), in order,
/// with their places: one read for all turns, one for all memories.
/// Defence in depth: a row of another scope, or a memory no longer active,
/// is dropped.
fn placed(conn: &Connection, scope: i64, hits: Vec<(i64, f64)>) -> Result<Vec<Candidate>> {
    let turns: Vec<i64> = hits.iter().map(|h| h.0).filter(|&i| i > 0).collect();
    let memories: Vec<i64> = hits.iter().map(|h| -h.0).filter(|&m| m > 0).collect();
    let mut places: HashMap<i64, (String, i64)> = HashMap::with_capacity(turns.len());
    for_each_row(conn, PLACES_OF_TURNS, &turns, scope, |r| {
        places.insert(r.get(0)?, (r.get(1)?, r.get(2)?));
        Ok(())
    })?;
    let mut active = HashSet::with_capacity(memories.len());
    for_each_row(conn, ACTIVE_MEMORIES, &memories, scope, |r| {
        active.insert(r.get::<_, i64>(0)?);
        Ok(())
    })?;
    let mut out = Vec::with_capacity(hits.len());
    for (item, rank) in hits {
        let score = -rank;
        if item > 0 {
            if let Some(place) = places.remove(&item) {
                out.push(Candidate {
                    item,
                    score,
                    place: Some(place),
                });
            }
        } else if active.contains(&-item) {
            out.push(Candidate {
                item,
                score: score * MEMORY_WEIGHT,
                place: None,
            });
        }
    }
    Ok(out)
}

/// Runs `sql` over `ids` (bound as a JSON array, `?1`) of `scope` (`?2`),
/// handing each row to `row`; nothing to read when `ids` is empty.
fn for_each_row(
    conn: &Connection,
    sql: &str,
    ids: &[i64],
    scope: i64,
    mut row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids = serde_json::Value::from(ids).to_string();
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            let mut rows = s.query(params![ids, scope])?;
            while let Some(r) = rows.next()? {
                row(r)?;
            }
            Ok(())
        })
        .map_err(db_error)
}

/// The final entries of `ranked`, in its order, read in full: one read for
/// all turns, one for all memories (only the active ones are read).
fn loaded(conn: &Connection, scope: i64, ranked: Vec<Candidate>) -> Result<Vec<Ranked>> {
    let turns: Vec<i64> = ranked
        .iter()
        .filter(|c| c.place.is_some())
        .map(|c| c.item)
        .collect();
    let memories: Vec<i64> = ranked
        .iter()
        .filter(|c| c.place.is_none())
        .map(|c| -c.item)
        .collect();
    let mut rows: HashMap<i64, Ranked> = HashMap::with_capacity(ranked.len());
    for_each_row(conn, TURNS_IN_FULL, &turns, scope, |r| {
        rows.insert(r.get(0)?, turn_from_row(r, 0.0)?);
        Ok(())
    })?;
    for_each_row(conn, MEMORIES_IN_FULL, &memories, scope, |r| {
        rows.insert(-r.get::<_, i64>(0)?, memory_from_row(r, 0.0)?);
        Ok(())
    })?;
    Ok(ranked
        .into_iter()
        .filter_map(|c| {
            let mut entry = rows.remove(&c.item)?;
            entry.score = c.score;
            Some(entry)
        })
        .collect())
}

/// Thread and position of the turns `?1` (a JSON array of ids) of scope
/// `?2`. `CROSS JOIN` keeps the list the outer loop: one lookup per id
/// (planned the other way round, it walked every turn of the scope), in the
/// covering index `turns_places` rather than the table, whose rows (with
/// their texts) sit on a page each.
const PLACES_OF_TURNS: &str = "SELECT t.id, t.thread, t.seq FROM json_each(?1) AS w
     CROSS JOIN turns AS t INDEXED BY turns_places ON t.id = w.value WHERE t.scope_id = ?2";

/// The turns of scope `?2` at the places `?1` (a JSON array of
/// `[thread, seq]`): one index lookup per place, the list outermost.
const TURNS_AT_PLACES: &str = "SELECT t.id, t.thread, t.seq FROM json_each(?1) AS w
     CROSS JOIN turns AS t ON t.scope_id = ?2 AND t.thread = w.value ->> 0
                           AND t.seq = w.value ->> 1";

/// The columns of a ranked turn ([`turn_from_row`]), as a literal for
/// `concat!`.
macro_rules! turn_columns {
    () => {
        "t.id, t.thread, t.seq, t.message_id, t.role, t.speaker, t.occurred_at, t.text"
    };
}

/// The active memories of scope `?2` among `?1` (a JSON array of ids),
/// the list outermost (as [`PLACES_OF_TURNS`]).
const ACTIVE_MEMORIES: &str = "SELECT m.id FROM json_each(?1) AS w
     CROSS JOIN memories AS m ON m.id = w.value WHERE m.scope_id = ?2 AND m.state = 'active'";

/// The turns `?1` (a JSON array of ids) of scope `?2`, every column of a
/// ranked entry.
const TURNS_IN_FULL: &str = concat!(
    "SELECT ",
    turn_columns!(),
    " FROM json_each(?1) AS w CROSS JOIN turns AS t ON t.id = w.value WHERE t.scope_id = ?2"
);

/// The active memories `?1` (a JSON array of ids) of scope `?2`: id, kind,
/// text.
const MEMORIES_IN_FULL: &str = "SELECT m.id, m.kind, m.text FROM json_each(?1) AS w
     CROSS JOIN memories AS m ON m.id = w.value WHERE m.scope_id = ?2 AND m.state = 'active'";

/// The best `pool` (rowid, FTS5 rank) pairs of one candidate query.
fn candidates(
    conn: &Connection,
    scope: i64,
    expr: &str,
    rows: Rows,
    category: Among<'_>,
    pool: usize,
) -> Result<Vec<(i64, f64)>> {
    let score = match rows {
        // The pool lets the function skip rows that cannot enter it; the
        // removal count, read in this statement's snapshot, says which
        // remembered lengths hold in it.
        Rows::Scored(_) => format!(
            "{BM25_FUNCTION}(recall_index, ?2, {pool}, (SELECT n FROM index_removals WHERE id = 1))"
        ),
        Rows::NewestTurns | Rows::NewestMemories => "0.0".to_owned(),
    };
    let mut sql =
        format!("SELECT rowid, {score} AS s FROM recall_index WHERE recall_index MATCH ?1");
    let mut args: Vec<SqlValue> = vec![expr.to_owned().into()];
    if let Rows::Scored(dfs) = rows {
        args.push(dfs.to_vec().into());
    }
    match category {
        Among::All => {}
        Among::Turns => sql.push_str(" AND rowid > 0"),
        Among::Memories(None) => sql.push_str(" AND rowid < 0"),
        Among::Memories(Some(kind)) => {
            args.push(kind.to_owned().into());
            let k = args.len();
            args.push(scope.into());
            let s = args.len();
            sql.push_str(&format!(
                " AND rowid < 0 AND -rowid IN
                 (SELECT id FROM memories WHERE scope_id = ?{s} AND kind = ?{k})"
            ));
        }
    }
    let order = match rows {
        // Ties newest first, so a ranking is the same however it was found.
        Rows::Scored(_) => "s, rowid DESC",
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

/// Reads postings counts for one ranking, through the [`TermCounts`] of
/// its store.
struct Counter<'a> {
    conn: &'a Connection,
    known: &'a TermCounts,
    scope: i64,
    /// The scope's write generation in this snapshot, once needed.
    generation: Option<i64>,
    /// Counts read from the index (the rest were known).
    counted: usize,
}

impl<'a> Counter<'a> {
    fn new(conn: &'a Connection, known: &'a TermCounts, scope: i64) -> Self {
        Self {
            conn,
            known,
            scope,
            generation: None,
            counted: 0,
        }
    }

    /// [`bounded_count`] of `expr`, remembered for this generation of the
    /// scope.
    fn count(&mut self, expr: &str, limit: usize) -> Result<usize> {
        let generation = match self.generation {
            Some(g) => g,
            None => *self
                .generation
                .insert(write_generation(self.conn, self.scope)?),
        };
        if let Some(n) = self.known.exact(self.scope, generation, expr, limit) {
            return Ok(n);
        }
        let n = bounded_count(self.conn, expr, limit)?;
        self.counted += 1;
        self.known
            .insert_exact(self.scope, generation, expr, limit, n);
        Ok(n)
    }
}

/// The plan for `phrases` (see the module doc), or `None` when no query
/// term occurs in the scope.
fn plan_query(
    counter: &mut Counter<'_>,
    budget: usize,
    phrases: &[String],
) -> Result<Option<Plan>> {
    let mut counted = Vec::with_capacity(phrases.len());
    for phrase in phrases {
        let n = counter.count(phrase, EVERY_MATCH)?;
        if n > 0 {
            counted.push((n, phrase.clone()));
        }
    }
    if counted.is_empty() {
        return Ok(None);
    }
    // Stable: equally common terms keep their query order.
    counted.sort_by_key(|(n, _)| *n);
    if counted[0].0 <= budget {
        return Ok(Some(Plan::Scored(counted)));
    }
    // Every term is common: the newest documents with the two rarest terms
    // together, else with the rarest alone.
    if let [(_, first), (_, second), ..] = &counted[..] {
        let pair = format!("{first} AND {second}");
        if counter.count(&pair, 1)? > 0 {
            return Ok(Some(Plan::Newest(pair)));
        }
    }
    Ok(Some(Plan::Newest(counted[0].1.clone())))
}

/// The best BM25 candidates of a [`Plan::Scored`] and what finding them
/// took.
struct PrunedTop {
    /// (rowid, negated BM25), best first.
    hits: Vec<(i64, f64)>,
    /// Postings walked: the documents of the terms scored in full.
    walked: usize,
    /// Whether MaxScore proved `hits` the exact top of every match.
    exact: bool,
}

/// The best `pool` documents of `terms` (rarest first, with their counts)
/// by BM25 over every term, by MaxScore (module doc, step 1): the rarest
/// terms within the budget (at least one) are walked first; while a
/// document outside their matches could still reach the pool, the terms
/// MaxScore says are needed are walked too, as long as their postings stay
/// within `budget`.
fn pruned_top(
    conn: &Connection,
    scope: i64,
    terms: &[(usize, String)],
    budget: usize,
    category: Among<'_>,
    pool: usize,
) -> Result<PrunedTop> {
    let rows = index_rows(conn)?;
    let bounds: Vec<f64> = terms
        .iter()
        .map(|(n, _)| term_bound(idf(rows, *n as i64)))
        .collect();
    let postings = |e: usize| terms[..e].iter().map(|(n, _)| n).sum::<usize>();
    let within_budget = (1..=terms.len())
        .take_while(|&e| postings(e) <= budget)
        .last()
        .unwrap_or(1);
    let mut walked = within_budget.min(terms.len());
    loop {
        let (expr, dfs) = walk_expression(terms, walked);
        let hits = candidates(
            conn,
            scope,
            &expr,
            Rows::Scored(&frequencies_blob(&dfs)),
            category,
            pool,
        )?;
        // A document holding none of the walked terms scores below the sum
        // of the others' bounds: it cannot pass the pool's last score.
        let threshold = if hits.len() >= pool {
            -hits[pool - 1].1
        } else {
            0.0
        };
        let needed = essential_terms(&bounds, threshold);
        let exact = needed <= walked;
        let next = needed.min(within_budget.max(walked));
        if exact || next <= walked {
            return Ok(PrunedTop {
                hits,
                walked: postings(walked),
                exact,
            });
        }
        walked = next;
    }
}

/// The MATCH expression that walks the first `walked` of `terms` and looks
/// the others up at their documents, with each phrase's document count
/// (0 for a phrase repeated only to reach documents):
/// `(w1 OR w2) AND (w1 OR w2 OR o1 OR o2)`. FTS5 advances the second
/// group to each match of the first (seeking in the longer posting lists,
/// not reading them), and reports the instances of every phrase there.
fn walk_expression(terms: &[(usize, String)], walked: usize) -> (String, Vec<i64>) {
    let (walk, others) = terms.split_at(walked);
    let walk_expr: Vec<&str> = walk.iter().map(|(_, p)| p.as_str()).collect();
    let walk_expr = walk_expr.join(" OR ");
    let mut dfs: Vec<i64> = walk.iter().map(|(n, _)| *n as i64).collect();
    if others.is_empty() {
        return (walk_expr, dfs);
    }
    let other_expr: Vec<&str> = others.iter().map(|(_, p)| p.as_str()).collect();
    dfs.extend(std::iter::repeat_n(0, walked));
    dfs.extend(others.iter().map(|(n, _)| *n as i64));
    (
        format!(
            "({walk_expr}) AND ({walk_expr} OR {})",
            other_expr.join(" OR ")
        ),
        dfs,
    )
}

/// The recall index's row count, as BM25 weighs terms with it: the first
/// varint of FTS5's averages record (`%_data` row 1), kept exact on every
/// write.
fn index_rows(conn: &Connection) -> Result<i64> {
    let record: Option<Vec<u8>> = conn
        .prepare_cached("SELECT block FROM recall_index_data WHERE id = 1")
        .and_then(|mut s| s.query_row([], |r| r.get(0)).optional())
        .map_err(db_error)?;
    Ok(record.map_or(0, |r| sqlite_varint(&r)))
}

/// SQLite's varint (big-endian, seven bits a byte, the ninth byte whole).
fn sqlite_varint(bytes: &[u8]) -> i64 {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().take(9).enumerate() {
        if i == 8 {
            return ((v << 8) | u64::from(b)) as i64;
        }
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            break;
        }
    }
    v as i64
}

const TURN_COLUMNS: &str = turn_columns!();

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
        "SELECT {TURN_COLUMNS} FROM turns AS t WHERE t.id = ?1 AND t.scope_id = ?2"
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
        "SELECT {TURN_COLUMNS} FROM turns AS t WHERE t.scope_id = ?1 ORDER BY t.id DESC LIMIT {limit}"
    ))
    .and_then(|mut s| {
        s.query_map(params![scope], |r| turn_from_row(r, 0.0))?
            .collect()
    })
    .map_err(db_error)
}

/// Recall-index row `item` of `scope`, unscored, if it exists, is active
/// and `category` admits it.
pub(crate) fn load_item(
    conn: &Connection,
    scope: i64,
    item: i64,
    category: Among<'_>,
) -> Result<Option<Ranked>> {
    let entry = if item > 0 {
        if !category.admits_turns() {
            return Ok(None);
        }
        load_turn(conn, scope, item, 0.0)?
    } else {
        if !category.admits_memories() {
            return Ok(None);
        }
        load_memory(conn, scope, -item, 0.0)?
    };
    Ok(entry.filter(|r| category.admits(&r.kind)))
}

/// Turns adjacent to the best [`NEIGHBOURS_OF`] candidates join the
/// candidates (with no BM25 score of their own), so a reply that shares no
/// word with the query can still be found through the message it answers.
/// One read finds them all; they join in the order of the best turns
/// (the one before, then the one after).
fn add_neighbours(conn: &Connection, scope: i64, ranked: &mut Vec<Candidate>) -> Result<()> {
    let mut best: Vec<(f64, &str, i64)> = ranked
        .iter()
        .filter_map(|c| c.place.as_ref().map(|(t, s)| (c.score, t.as_str(), *s)))
        .collect();
    best.sort_by(|a, b| b.0.total_cmp(&a.0));
    best.truncate(NEIGHBOURS_OF);
    let mut present: HashSet<(&str, i64)> = ranked
        .iter()
        .filter_map(|c| c.place.as_ref().map(|(t, s)| (t.as_str(), *s)))
        .collect();
    let mut wanted: Vec<(String, i64)> = Vec::with_capacity(2 * best.len());
    for (_, thread, seq) in best {
        for near in [seq - 1, seq + 1] {
            if present.insert((thread, near)) {
                wanted.push((thread.to_owned(), near));
            }
        }
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let places = serde_json::Value::from(
        wanted
            .iter()
            .map(|(t, s)| serde_json::json!([t, s]))
            .collect::<Vec<_>>(),
    )
    .to_string();
    let mut found: HashMap<(String, i64), i64> = HashMap::with_capacity(wanted.len());
    conn.prepare_cached(TURNS_AT_PLACES)
        .and_then(|mut s| {
            let rows = s.query_map(params![places, scope], |r| {
                Ok(((r.get(1)?, r.get(2)?), r.get(0)?))
            })?;
            for row in rows {
                let (place, id) = row?;
                found.insert(place, id);
            }
            Ok(())
        })
        .map_err(db_error)?;
    for place in wanted {
        if let Some(&item) = found.get(&place) {
            ranked.push(Candidate {
                item,
                score: 0.0,
                place: Some(place),
            });
        }
    }
    Ok(())
}

fn load_memory(conn: &Connection, scope: i64, id: i64, score: f64) -> Result<Option<Ranked>> {
    conn.prepare_cached(
        "SELECT id, kind, text FROM memories WHERE id = ?1 AND scope_id = ?2 AND state = 'active'",
    )
    .and_then(|mut s| {
        s.query_row(params![id, scope], |r| memory_from_row(r, score))
            .optional()
    })
    .map_err(db_error)
}

/// A ranked memory from a row of (id, kind, text).
fn memory_from_row(r: &rusqlite::Row<'_>, score: f64) -> rusqlite::Result<Ranked> {
    Ok(Ranked {
        citation: memory_citation(r.get(0)?),
        kind: r.get(1)?,
        text: r.get(2)?,
        score,
        origin: Origin::Memory,
    })
}

impl Placed for Candidate {
    fn place(&self) -> Option<(&str, i64)> {
        self.place.as_ref().map(|(t, s)| (t.as_str(), *s))
    }
    fn score(&self) -> f64 {
        self.score
    }
    fn score_mut(&mut self) -> &mut f64 {
        &mut self.score
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{store_turns, Intake};
    use crate::config::LocalConfig;
    use crate::db::Db;
    use crate::forget::erase_target;
    use crate::scope::ScopeRow;
    use memgate_core::{Caller, CaptureReport, ForgetTarget, Message, Redactor};
    use memgate_recall::ranked::MAXSCORE_BUDGET;
    use memgate_recall::scope::ScopeKey;
    use memgate_testsupport::SplitMix;

    /// A fresh database file in `dir`, as the store opens it.
    fn open_db(dir: &tempfile::TempDir) -> Db {
        let config = LocalConfig::default();
        Db::open(dir.path().join("m.sqlite3"), config.busy_timeout).unwrap()
    }

    /// A fresh store with nothing in it yet, for user `u`: its directory
    /// (bound first, so it is removed after the database closes), the
    /// database, the user.
    fn empty_store() -> (tempfile::TempDir, Db, Caller) {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(&dir);
        (dir, db, Caller::new("u"))
    }

    /// The row id of `user`'s scope, which a capture has made.
    fn scope_of(conn: &Connection, user: &Caller) -> Result<i64> {
        Ok(ScopeKey::of(user)
            .find(conn)?
            .expect("the user's scope exists"))
    }

    /// Captures one turn per text into thread `thread` of `user`'s scope, as
    /// the store's capture does.
    fn capture_texts(db: &Db, user: &Caller, thread: &str, texts: &[&str]) {
        let messages: Vec<Message> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Message::human(*t).with_id(format!("{thread}-{i}")))
            .collect();
        let redactor = Redactor::shared_default();
        let intake = Intake {
            keep: None,
            redactor: &redactor,
        };
        let seen = std::cell::Cell::new(0);
        let captured_at = memgate_core::time::now_rfc3339();
        let turns = intake.turns(messages.iter().map(Ok), &captured_at, &seen);
        let key = ScopeKey::of(user);
        let mut report = CaptureReport::default();
        db.write(|tx, index| store_turns(tx, index, &key, thread, turns, &mut report))
            .unwrap();
    }

    /// The plan of `query` with `known` counts and a postings budget of 3,
    /// and how many counts it read from the index.
    fn plan_with(db: &Db, user: &Caller, known: &TermCounts, query: &str) -> (Option<Plan>, usize) {
        db.read(|conn| {
            let scope = scope_of(conn, user)?;
            let phrases = query_phrases(&scope_tag(scope), query);
            let mut counter = Counter::new(conn, known, scope);
            let plan = plan_query(&mut counter, 3, &phrases)?;
            Ok((plan, counter.counted))
        })
        .unwrap()
    }

    /// Known counts give the very plan fresh counts give: a repeated query
    /// counts nothing again, and a capture to the scope makes it count
    /// again (here a term crosses the budget of 3, which changes the plan).
    #[test]
    fn known_counts_give_the_plan_of_fresh_counts_until_the_scope_is_written() {
        let (_dir, db, user) = empty_store();
        capture_texts(
            &db,
            &user,
            "a",
            &["alpha beta", "alpha gamma", "alpha delta"],
        );
        let known = TermCounts::default();
        let query = "alpha";
        let (first, counted) = plan_with(&db, &user, &known, query);
        assert_eq!(counted, 1);
        assert!(
            matches!(&first, Some(Plan::Scored(t)) if t[0].0 == 3),
            "{first:?}"
        );
        let (again, counted) = plan_with(&db, &user, &known, query);
        assert_eq!(counted, 0, "the count was known");
        assert_eq!(again, first);
        assert_eq!(
            again,
            plan_with(&db, &user, &TermCounts::default(), query).0
        );

        capture_texts(&db, &user, "b", &["alpha epsilon"]);
        let (after, counted) = plan_with(&db, &user, &known, query);
        assert_eq!(counted, 1, "a write drops the scope's counts");
        assert!(matches!(after, Some(Plan::Newest(_))), "{after:?}");
        assert_eq!(
            after,
            plan_with(&db, &user, &TermCounts::default(), query).0
        );
    }

    /// A recall's ranking is the same with the store's known counts as
    /// with none, before and after a write to the scope.
    #[test]
    fn rankings_with_known_counts_equal_rankings_counted_afresh() {
        let (_dir, db, user) = empty_store();
        let texts: Vec<String> = (0..60)
            .map(|i| format!("word{} topic{} tomatoes", i % 13, i % 7))
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        capture_texts(&db, &user, "t", &texts);
        let ranked = |known: &TermCounts, budget: usize| {
            db.read(|conn| {
                let scope = scope_of(conn, &user)?;
                rank_within(
                    conn,
                    known,
                    budget,
                    scope,
                    "word3 topic2 tomatoes",
                    10,
                    Among::All,
                )
            })
            .unwrap()
        };
        for budget in [5, 20, MAXSCORE_BUDGET] {
            let known = TermCounts::default();
            let first = ranked(&known, budget);
            assert!(!first.is_empty());
            assert_eq!(ranked(&known, budget), first, "budget {budget}");
            capture_texts(&db, &user, &format!("more{budget}"), &["word3 topic2"; 4]);
            assert_eq!(
                ranked(&known, budget),
                ranked(&TermCounts::default(), budget),
                "budget {budget}, after a capture"
            );
        }
    }

    /// Counts are only handed out for the generation and limit they were
    /// read with; a count from an older snapshot never replaces newer ones.
    #[test]
    fn known_counts_hold_for_their_generation_and_limit_only() {
        let known = TermCounts::default();
        known.insert_exact(1, 5, "x", 601, 10);
        assert_eq!(known.exact(1, 5, "x", 601), Some(10));
        assert_eq!(known.exact(1, 5, "x", 2), None);
        assert_eq!(known.exact(1, 6, "x", 601), None);
        assert_eq!(known.exact(2, 5, "x", 601), None);
        known.insert_exact(1, 4, "x", 601, 3);
        assert_eq!(known.exact(1, 5, "x", 601), Some(10), "an older count");
        known.insert_exact(1, 6, "y", 601, 7);
        assert_eq!(known.exact(1, 5, "x", 601), None);
        assert_eq!(known.exact(1, 6, "y", 601), Some(7));
        assert_eq!(
            known.lock().exact,
            1,
            "the older generation's count dropped"
        );
    }

    /// Words of a generated scope: `w0` is the most common, frequencies
    /// falling off as 1 / (rank + 1) (a Zipf law, as in conversation).
    fn zipf_word(rng: &mut SplitMix, vocabulary: usize) -> String {
        let harmonic: f64 = (1..=vocabulary).map(|r| 1.0 / r as f64).sum();
        let mut target = rng.unit() * harmonic;
        for r in 0..vocabulary {
            target -= 1.0 / (r + 1) as f64;
            if target <= 0.0 {
                return format!("w{r}");
            }
        }
        format!("w{}", vocabulary - 1)
    }

    /// A scope of `turns` generated turns of 3–14 Zipf words each.
    fn generated_scope(db: &Db, user: &Caller, rng: &mut SplitMix, turns: usize) {
        let texts: Vec<String> = (0..turns)
            .map(|_| {
                let n = 3 + rng.below(12);
                (0..n)
                    .map(|_| zipf_word(rng, 400))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        for (i, chunk) in texts.chunks(100).enumerate() {
            let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
            capture_texts(db, user, &format!("t{i}"), &chunk);
        }
    }

    /// A fresh store holding user `u`'s scope of `turns` generated turns
    /// (seeded), as `empty_store` returns it.
    fn generated_store(seed: u64, turns: usize) -> (tempfile::TempDir, Db, Caller) {
        let (dir, db, user) = empty_store();
        generated_scope(&db, &user, &mut SplitMix::new(seed), turns);
        (dir, db, user)
    }

    /// `memgate_bm25`'s candidates for `expr`, scored with the counted
    /// frequencies `dfs`, the best `pool` of them.
    fn scored_candidates(
        conn: &Connection,
        scope: i64,
        expr: &str,
        dfs: &[i64],
        pool: usize,
    ) -> Result<Vec<(i64, f64)>> {
        candidates(
            conn,
            scope,
            expr,
            Rows::Scored(&frequencies_blob(dfs)),
            Among::All,
            pool,
        )
    }

    /// (rowid, score) of the best `pool` by FTS5's own `bm25()` over every
    /// match of `terms`: the reference ranking.
    fn fts5_top(conn: &Connection, terms: &[(usize, String)], pool: usize) -> Vec<(i64, f64)> {
        let expr: Vec<&str> = terms.iter().map(|(_, p)| p.as_str()).collect();
        conn.prepare(&format!(
            "SELECT rowid, rank FROM recall_index WHERE recall_index MATCH ?1
             AND rank MATCH '{RANK_FUNCTION}' ORDER BY rank, rowid DESC LIMIT {pool}"
        ))
        .and_then(|mut s| {
            s.query_map([expr.join(" OR ")], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .unwrap()
    }

    /// Same documents in the same order, scores equal but for rounding.
    fn assert_same_top(got: &[(i64, f64)], want: &[(i64, f64)], what: &str) {
        let ids = |t: &[(i64, f64)]| t.iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(ids(got), ids(want), "{what}");
        for (g, w) in got.iter().zip(want) {
            assert!((g.1 - w.1).abs() < 1e-9, "{what}: {g:?} against {w:?}");
        }
    }

    /// The scope's plan of `query`: its terms with their counts.
    fn scored_terms(conn: &Connection, scope: i64, query: &str) -> Option<Vec<(usize, String)>> {
        let known = TermCounts::default();
        let mut counter = Counter::new(conn, &known, scope);
        let phrases = query_phrases(&scope_tag(scope), query);
        match plan_query(&mut counter, usize::MAX, &phrases).unwrap() {
            Some(Plan::Scored(terms)) => Some(terms),
            _ => None,
        }
    }

    /// MaxScore's top equals the top of every match scored by FTS5's own
    /// `bm25()`, whenever it says it is exact, on generated scopes and
    /// queries (seeded); with no budget it always is. Some rankings must be
    /// proved exact while walking fewer postings than every match, or the
    /// pruning was never tried.
    #[test]
    fn pruned_top_equals_the_exhaustive_top_on_generated_scopes() {
        let mut rng = SplitMix::new(0x6d61_7873);
        let mut pruned_exact = 0;
        for round in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let db = open_db(&dir);
            let user = Caller::new(format!("u{round}"));
            // Another scope's rows change the index's row count, as in use.
            generated_scope(&db, &Caller::new("other"), &mut rng, 300);
            generated_scope(&db, &user, &mut rng, 2_000 + 1_000 * round);
            db.read(|conn| {
                let scope = scope_of(conn, &user)?;
                for q in 0..40 {
                    let n = 1 + rng.below(6);
                    let query: Vec<String> = (0..n).map(|_| zipf_word(&mut rng, 500)).collect();
                    let query = query.join(" ");
                    let Some(terms) = scored_terms(conn, scope, &query) else {
                        continue;
                    };
                    let every: usize = terms.iter().map(|t| t.0).sum();
                    for pool in [10, 50] {
                        let want = fts5_top(conn, &terms, pool);
                        let full = pruned_top(conn, scope, &terms, usize::MAX, Among::All, pool)?;
                        assert!(full.exact);
                        let what = format!("round {round}, query {q} {query:?}, pool {pool}");
                        assert_same_top(&full.hits, &want, &what);
                        for budget in [0, 200, 1_000] {
                            let top = pruned_top(conn, scope, &terms, budget, Among::All, pool)?;
                            if top.exact {
                                assert_same_top(
                                    &top.hits,
                                    &want,
                                    &format!("{what}, budget {budget}"),
                                );
                                if top.walked < every {
                                    pruned_exact += 1;
                                }
                            }
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
        }
        assert!(
            pruned_exact > 20,
            "only {pruned_exact} pruned rankings proved exact"
        );
    }

    /// `memgate_bm25` with the counted frequencies gives what FTS5's
    /// `bm25(1.0, 0.5)` gives, row by row, and counts nothing itself: a
    /// phrase given 0 adds nothing.
    #[test]
    fn memgate_bm25_is_fts5s_bm25_with_given_frequencies() {
        let (_dir, db, user) = generated_store(7, 500);
        db.read(|conn| {
            let scope = scope_of(conn, &user)?;
            let terms = scored_terms(conn, scope, "w1 w7 w40 w3").unwrap();
            let want = fts5_top(conn, &terms, 1_000);
            let (expr, dfs) = walk_expression(&terms, terms.len());
            let got = scored_candidates(conn, scope, &expr, &dfs, 1_000)?;
            assert_same_top(&got, &want, "every term walked");
            // The rarest walked, the others looked up: the same scores for
            // the rarest's documents.
            let (expr, dfs) = walk_expression(&terms, 1);
            let got = scored_candidates(conn, scope, &expr, &dfs, 1_000)?;
            assert_eq!(got.len(), terms[0].0);
            for (id, score) in &got {
                let w = want.iter().find(|w| w.0 == *id).unwrap();
                assert!((score - w.1).abs() < 1e-9, "{id}: {score} against {}", w.1);
            }
            let mut silent = dfs.clone();
            silent.iter_mut().for_each(|d| *d = 0);
            let got = scored_candidates(conn, scope, &expr, &silent, 5)?;
            assert!(got.iter().all(|h| h.1 == 0.0), "{got:?}");
            Ok(())
        })
        .unwrap();
    }

    /// Given the pool, `memgate_bm25` answers rows that cannot enter it
    /// with a bound, without reading their length, and the pool is still
    /// FTS5's own top by `bm25()`, scores included.
    #[test]
    fn memgate_bm25_skips_lengths_only_of_rows_outside_the_pool() {
        let (_dir, db, user) = generated_store(11, 2_000);
        db.read(|conn| {
            let scope = scope_of(conn, &user)?;
            for query in ["w1 w7 w40 w3", "w0 w2", "w120 w5 w9"] {
                let terms = scored_terms(conn, scope, query).unwrap();
                let (expr, dfs) = walk_expression(&terms, terms.len());
                for pool in [1, 10, 50] {
                    let before = skipped_lengths();
                    let got = scored_candidates(conn, scope, &expr, &dfs, pool)?;
                    let skipped = skipped_lengths() - before;
                    let what = format!("{query:?}, pool {pool}");
                    assert_same_top(&got, &fts5_top(conn, &terms, pool), &what);
                    assert!(skipped > 0, "{what}: no length lookup skipped");
                }
            }
            Ok(())
        })
        .unwrap();
    }

    /// `user`'s candidates for "zebra" by `memgate_bm25`, checked against
    /// FTS5's own `bm25()` in the same snapshot, and how many lengths the
    /// ranking took from the remembered ones.
    fn zebra_as_fts5_scores_it(conn: &Connection, user: &Caller) -> Result<(Vec<(i64, f64)>, u64)> {
        let scope = scope_of(conn, user)?;
        let terms = scored_terms(conn, scope, "zebra").unwrap();
        let (expr, dfs) = walk_expression(&terms, terms.len());
        let before = remembered_lengths();
        let got = scored_candidates(conn, scope, &expr, &dfs, 50)?;
        let remembered = remembered_lengths() - before;
        assert_same_top(&got, &fts5_top(conn, &terms, 50), "zebra");
        Ok((got, remembered))
    }

    /// A turn's length is taken from the ones remembered by an earlier
    /// query, and never from before a turn left the index: after a thread
    /// is forgotten its turn ids come back with other texts, and every
    /// score is still FTS5's own `bm25()`.
    #[test]
    fn remembered_lengths_hold_until_a_turn_leaves_the_index() {
        let (_dir, db, user) = empty_store();
        capture_texts(&db, &user, "a", &["zebra one", "zebra two words here"]);
        let long = "zebra and a great many other words besides it, to be long";
        capture_texts(&db, &user, "b", &[long, long]);
        let rank = |db: &Db| {
            db.read(|conn| zebra_as_fts5_scores_it(conn, &user))
                .unwrap()
        };
        let (first, remembered) = rank(&db);
        assert_eq!((first.len(), remembered), (4, 0));
        let (again, remembered) = rank(&db);
        assert_eq!((again, remembered), (first.clone(), 4));
        let newest: Vec<i64> = first.iter().map(|h| h.0).filter(|&id| id > 2).collect();
        assert_eq!(newest.len(), 2, "{first:?}");

        let key = ScopeKey::of(&user);
        db.write(|tx, index| erase_target(tx, index, &key, &ForgetTarget::Thread, None, Some("b")))
            .unwrap();
        capture_texts(&db, &user, "c", &["zebra", "zebra"]);
        let (after, remembered) = rank(&db);
        assert_eq!(remembered, 0, "no length from before the removal");
        let ids: Vec<i64> = after.iter().map(|h| h.0).collect();
        assert!(
            newest.iter().all(|id| ids.contains(id)),
            "ids not reused: {ids:?}"
        );
        let (_, remembered) = rank(&db);
        assert_eq!(remembered, 4);
    }

    /// Forgetting turns below a remaining turn's id (a retention sweep
    /// takes the oldest) keeps the remembered lengths: SQLite gives new
    /// turns ids above every remaining one, so those ids never come back.
    #[test]
    fn forgetting_older_turns_keeps_the_remembered_lengths() {
        let (_dir, db, user) = empty_store();
        capture_texts(&db, &user, "old", &["zebra one", "zebra two words here"]);
        capture_texts(
            &db,
            &user,
            "new",
            &["zebra three", "zebra and four more words"],
        );
        let rank = |db: &Db| {
            db.read(|conn| zebra_as_fts5_scores_it(conn, &user))
                .unwrap()
        };
        assert_eq!(rank(&db).1, 0);
        let key = ScopeKey::of(&user);
        db.write(|tx, index| {
            erase_target(tx, index, &key, &ForgetTarget::Thread, None, Some("old"))
        })
        .unwrap();
        capture_texts(&db, &user, "newer", &["zebra five is here"]);
        let (after, remembered) = rank(&db);
        let ids: Vec<i64> = after.iter().map(|h| h.0).collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|&id| id > 2), "an old id came back: {ids:?}");
        assert_eq!(remembered, 2, "the remaining turns' lengths were kept");
    }

    /// Readers ranking while a writer captures a thread and forgets it,
    /// again and again, its turns taking the same ids with other lengths
    /// each time: every ranking's scores are FTS5's own `bm25()` in that
    /// ranking's snapshot, and remembered lengths were used.
    #[test]
    fn remembered_lengths_hold_while_turn_ids_come_back_under_concurrent_reads() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let (_dir, db, user) = empty_store();
        capture_texts(&db, &user, "base", &["zebra one", "zebra two words here"]);
        let stop = AtomicBool::new(false);
        let (rankings, remembered) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let (_, used) = db
                            .read(|conn| zebra_as_fts5_scores_it(conn, &user))
                            .unwrap();
                        remembered.fetch_add(used, Ordering::Relaxed);
                        rankings.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            let key = ScopeKey::of(&user);
            for round in 0..60 {
                let text = format!("zebra{}", " word".repeat(round % 7 * 5));
                capture_texts(&db, &user, "t", &[&text, &text]);
                std::thread::sleep(std::time::Duration::from_millis(2));
                db.write(|tx, index| {
                    erase_target(tx, index, &key, &ForgetTarget::Thread, None, Some("t"))
                })
                .unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let (rankings, remembered) = (rankings.into_inner(), remembered.into_inner());
        assert!(
            rankings > 60,
            "only {rankings} rankings ran beside the writes"
        );
        assert!(remembered > 0, "no remembered length was used");
    }

    /// The lines of `sql`'s query plan (its two parameters bound).
    fn query_plan(conn: &Connection, sql: &str) -> Result<Vec<String>> {
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .and_then(|mut s| {
                s.query_map(params!["[]", 1], |r| r.get::<_, String>(3))?
                    .collect()
            })
            .map_err(db_error)
    }

    /// The batched reads of candidates look each one up by index; a plan
    /// that walks the scope's turns made a 100k-item recall take seconds.
    #[test]
    fn candidate_reads_are_index_lookups_not_scans_of_the_scope() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(&dir);
        db.read(|conn| {
            for sql in [ACTIVE_MEMORIES, TURNS_IN_FULL, MEMORIES_IN_FULL] {
                let plan = query_plan(conn, sql)?;
                assert!(plan[0].starts_with("SCAN w"), "{sql}: {plan:?}");
                assert!(
                    plan[1].contains("USING INTEGER PRIMARY KEY (rowid=?)"),
                    "{sql}: {plan:?}"
                );
            }
            for sql in [PLACES_OF_TURNS, TURNS_AT_PLACES] {
                let plan = query_plan(conn, sql)?;
                assert!(plan[0].starts_with("SCAN w"), "{sql}: {plan:?}");
                assert!(plan[1].starts_with("SEARCH t USING"), "{sql}: {plan:?}");
                assert!(!plan[1].contains("(scope_id=?)"), "{sql}: {plan:?}");
                // Thread and position come from an index, not the rows.
                assert!(plan[1].contains("COVERING INDEX"), "{sql}: {plan:?}");
            }
            Ok(())
        })
        .unwrap();
    }
}
