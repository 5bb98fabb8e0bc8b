//! The first-turn block: what a new conversation starts with when the host
//! gives no query (DeerFlow's `get_context` at the start of every thread).
//!
//! No query means no words to match, so the block is chosen by rules that
//! need no model and can be explained line by line:
//! 1. Explicit memories first: the newest `standing_memories` of them,
//!    whole, while the budget lasts (the user asked for them to be kept).
//! 2. Then excerpts of captured turns, from the newest [`MAX_CANDIDATES`]
//!    turns of the scope that have one. Each turn's
//!    [`salience`](memgate_recall::salience) excerpt keeps its statements about the
//!    speaker and the people, places, plans, dates and decisions in it, and
//!    drops pleasantries; a turn with nothing of that kind never enters.
//!    Excerpts are computed once, when the turn is stored
//!    ([`cache_excerpt`]; turns never change), so a block is one indexed
//!    read plus the pick. Turns are picked greedily by
//!    `score / line length^`[`LENGTH_EXPONENT`] (value per character of
//!    budget, short lines not favoured outright), times
//!    - [`AI_FACTOR`] for assistant turns (statements about the user come
//!      from the user),
//!    - [`THREAD_DECAY`]`^k` where `k` turns of the same thread are already
//!      in (diversity across threads),
//!    - `1 - `[`RECENCY_SPAN`]` × age` where age is the thread's rank from
//!      newest (0) to oldest (1) (recency, without starving old threads),
//!    - `1 - `[`NOVELTY_SPAN`]` × seen` where seen is the share of the turn's
//!      content words already in the block (no repeats).
//!
//!    Ties go to the newer turn; a pick must fit what is left of the budget.
//! 3. The block says what today is, then lists the memories and the chosen
//!    turns grouped by conversation (newest conversation first, turns in
//!    their order), each conversation headed by when it happened, each line
//!    cited (`[mem_3]`, `[turn_12]`).
//!
//! Each item's score in the result is the salience it was chosen with.
//!
//! A block depends only on the scope's turns and memories, the date and the
//! settings, so the store keeps the last block of each scope
//! ([`BlockCache`]) with the scope's write generation (bumped by every write
//! to the scope, in its transaction: [`crate::schema`]) and hands it out
//! again until the scope changes or the day turns.

use crate::error::db_error;
use crate::facts::newest_active;
use crate::scope::write_generation;
use memgate_core::budget::{char_len, CharBudget};
use memgate_core::{Citation, Fact, Recall, RecalledItem, Result};
use memgate_recall::block::RECALL_HEADER;
use memgate_recall::citation::turn_citation;
use memgate_recall::salience::{excerpt, SpeakerNames};
use rusqlite::{params, Connection};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most recent turns with an excerpt a block considers (bounds the rows
/// read and the pick on a large scope: a 12,000-character block holds
/// about 90 excerpts; LoCoMo conversations have at most 680 turns in all).
pub const MAX_CANDIDATES: usize = 500;
/// How strongly a longer line must earn its budget.
pub const LENGTH_EXPONENT: f64 = 0.75;
/// Weight of an assistant turn relative to a user turn.
pub const AI_FACTOR: f64 = 0.8;
/// Each further pick from the same conversation is worth this much less.
pub const THREAD_DECAY: f64 = 0.8;
/// How much less the oldest conversation's turns are worth than the newest's.
pub const RECENCY_SPAN: f64 = 0.25;
/// How much less a turn whose words are all already in the block is worth.
pub const NOVELTY_SPAN: f64 = 0.6;

/// A captured turn that may enter the block.
struct Candidate {
    id: i64,
    thread: usize,
    seq: i64,
    /// Who said it, as the line names them.
    who: String,
    /// Characters of its line (see [`Candidate::line`]), which is only
    /// written out for the turns picked.
    chars: usize,
    /// The excerpt as cached at capture.
    text: String,
    score: f64,
    /// The excerpt's content words, hashed (for novelty).
    terms: Vec<u64>,
    /// Value before the diversity factors.
    base: f64,
}

impl Candidate {
    /// Its line in the block.
    fn line(&self) -> String {
        let line = format!(
            "- [{}] {}: {}",
            turn_citation(self.id),
            self.who,
            self.text.replace('\n', " ")
        );
        debug_assert_eq!(char_len(&line), self.chars, "{line}");
        line
    }
}

/// Decimal digits of a turn id (ids are positive).
fn digits(id: i64) -> usize {
    id.max(1).ilog10() as usize + 1
}

/// One conversation the candidates come from.
struct Thread {
    /// The heading line (`Conversation of <when>:`).
    heading: String,
    /// 0 for the newest conversation, 1 for the oldest.
    age: f64,
    /// Newest turn id (orders the conversations in the block).
    newest: i64,
}

/// Room the block must keep for items to carry the date line at all.
const MIN_ROOM_AFTER_FRAMING: usize = 200;

/// The block's framing line: what "now" is for the notes below.
fn today_line(today: &str) -> String {
    format!("Today is {today}; the notes below are dated when they were said.")
}

const MEMORIES_HEADING: &str = "Saved memories:";
const TURNS_HEADING: &str = "From earlier conversations:";

/// The calendar date part of an RFC 3339 timestamp.
fn date_of(timestamp: &str) -> &str {
    timestamp.get(..10).unwrap_or(timestamp)
}

fn memory_line(fact: &Fact) -> String {
    format!(
        "- [{}] ({}) {}",
        fact.id,
        fact.kind,
        fact.text.replace('\n', "\n  ")
    )
}

/// Stores the excerpt of turn `id` (nothing when it has none): what the
/// first-turn block reads instead of scoring every turn on every call.
pub(crate) fn cache_excerpt(
    conn: &Connection,
    id: i64,
    text: &str,
    names: &SpeakerNames,
) -> Result<()> {
    let Some(e) = excerpt(text, names.as_slice()) else {
        return Ok(());
    };
    conn.prepare_cached(
        "UPDATE turns SET excerpt = ?2, excerpt_score = ?3, excerpt_terms = ?4 WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![id, e.text, e.score, e.terms.join(" ")]))
    .map_err(db_error)?;
    Ok(())
}

/// Caches the excerpts of every turn already in the file (the migration
/// that adds the cache), with each scope's speakers as names.
pub(crate) fn cache_all_excerpts(conn: &Connection) -> Result<()> {
    let mut names: HashMap<i64, SpeakerNames> = HashMap::new();
    conn.prepare("SELECT DISTINCT scope_id, speaker FROM turns WHERE speaker IS NOT NULL")
        .and_then(|mut s| {
            let mut rows = s.query([])?;
            while let Some(r) = rows.next()? {
                let speaker: String = r.get(1)?;
                names.entry(r.get(0)?).or_default().add(Some(&speaker));
            }
            Ok(())
        })
        .map_err(db_error)?;
    let turns: Vec<(i64, i64, String)> = conn
        .prepare("SELECT id, scope_id, text FROM turns")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .map_err(db_error)?;
    let none = SpeakerNames::default();
    for (id, scope, text) in turns {
        cache_excerpt(conn, id, &text, names.get(&scope).unwrap_or(&none))?;
    }
    Ok(())
}

/// A content word's key for the novelty share (FNV-1a: fast, and a
/// collision only makes one word count as seen).
fn term_key(term: &str) -> u64 {
    term.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The newest `MAX_CANDIDATES` turns of `scope` with an excerpt, valued.
fn candidates(conn: &Connection, scope: i64) -> Result<(Vec<Candidate>, Vec<Thread>)> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT id, thread, seq, role, speaker, occurred_at, captured_at,
                    excerpt, excerpt_score, excerpt_terms
             FROM turns WHERE scope_id = ?1 AND excerpt IS NOT NULL
             ORDER BY id DESC LIMIT {MAX_CANDIDATES}"
        ))
        .map_err(db_error)?;
    let mut rows = stmt.query(params![scope]).map_err(db_error)?;
    // Conversations, newest first; each dated by its earliest candidate.
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut threads: Vec<(i64, i64, String)> = Vec::new(); // newest id, earliest seq, when
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(db_error)? {
        let mut read = || -> rusqlite::Result<Candidate> {
            let id: i64 = r.get(0)?;
            let seq: i64 = r.get(2)?;
            let when = match r.get_ref(5)?.as_str_or_null()? {
                Some(at) => at.to_owned(),
                None => date_of(r.get_ref(6)?.as_str()?).to_owned(),
            };
            let thread = r.get_ref(1)?.as_str()?;
            let t = match index.get(thread) {
                Some(&t) => t,
                None => {
                    threads.push((id, seq, when.clone()));
                    index.insert(thread.to_owned(), threads.len() - 1);
                    threads.len() - 1
                }
            };
            if seq < threads[t].1 {
                threads[t] = (threads[t].0, seq, when);
            }
            let ai = r.get_ref(3)?.as_str()? == "ai";
            let who = match r.get_ref(4)?.as_str_or_null()? {
                Some(s) => s,
                None if ai => "assistant",
                None => "user",
            };
            let text: String = r.get(7)?;
            let score: f64 = r.get(8)?;
            // `- [turn_<id>] <who>: <text>`, newlines becoming spaces.
            let chars = "- [turn_] : ".len() + digits(id) + char_len(who) + char_len(&text);
            let role_factor = if ai { AI_FACTOR } else { 1.0 };
            let base = score * role_factor / (chars as f64).powf(LENGTH_EXPONENT);
            let terms = r
                .get_ref(9)?
                .as_str_or_null()?
                .unwrap_or_default()
                .split(' ')
                .filter(|t| !t.is_empty())
                .map(term_key)
                .collect();
            Ok(Candidate {
                id,
                thread: t,
                seq,
                who: who.to_owned(),
                chars,
                text,
                score,
                terms,
                base,
            })
        };
        out.push(read().map_err(db_error)?);
    }
    let last = threads.len().saturating_sub(1).max(1) as f64;
    let threads = threads
        .iter()
        .enumerate()
        .map(|(i, (newest, _, when))| Thread {
            heading: format!("Conversation of {when}:"),
            age: i as f64 / last,
            newest: *newest,
        })
        .collect();
    Ok((out, threads))
}

/// Term keys are hashes already: the set uses them as they are.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// The content words already in the block.
type Seen = HashSet<u64, std::hash::BuildHasherDefault<KeyHasher>>;

/// A candidate's value when last computed: values only fall as picks are
/// made (the decay and the seen share grow), so a stale value is an upper
/// bound and the greedy pick can be lazy.
struct Bound {
    value: f64,
    id: i64,
    index: usize,
}

impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Bound {}
impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bound {
    /// Higher value first; ties go to the newer turn.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value
            .total_cmp(&other.value)
            .then(self.id.cmp(&other.id))
    }
}

/// Picks candidates greedily (see the module doc) within `budget`
/// characters, the headings of opened conversations included. Returns the
/// indexes picked, in pick order.
fn pick(candidates: &[Candidate], threads: &[Thread], budget: &mut CharBudget) -> Vec<usize> {
    let mut per_thread = vec![0i32; threads.len()];
    let mut seen: Seen = HashSet::default();
    let value = |c: &Candidate, per_thread: &[i32], seen: &Seen| {
        let terms = &c.terms;
        let repeated = terms.iter().filter(|t| seen.contains(t)).count();
        let seen_share = if terms.is_empty() {
            0.0
        } else {
            repeated as f64 / terms.len() as f64
        };
        c.base
            * THREAD_DECAY.powi(per_thread[c.thread])
            * (1.0 - RECENCY_SPAN * threads[c.thread].age)
            * (1.0 - NOVELTY_SPAN * seen_share)
    };
    let mut heap: BinaryHeap<Bound> = candidates
        .iter()
        .enumerate()
        .map(|(index, c)| Bound {
            value: value(c, &per_thread, &seen),
            id: c.id,
            index,
        })
        .collect();
    let mut picked = Vec::new();
    while let Some(top) = heap.pop() {
        let c = &candidates[top.index];
        let heading = if per_thread[c.thread] == 0 {
            char_len(&threads[c.thread].heading) + 1
        } else {
            0
        };
        let cost = c.chars + 1 + heading;
        if cost > budget.remaining() {
            continue; // the budget only shrinks
        }
        let now = value(c, &per_thread, &seen);
        if heap.peek().is_some_and(|next| now < next.value) {
            heap.push(Bound { value: now, ..top });
            continue;
        }
        budget.try_take(cost);
        per_thread[c.thread] += 1;
        seen.extend(c.terms.iter().copied());
        picked.push(top.index);
    }
    picked
}

/// The first-turn block of `scope` within `max_chars` (see the module doc).
pub fn first_turn_block(
    conn: &Connection,
    scope: i64,
    standing: usize,
    max_chars: usize,
    today: &str,
) -> Result<Recall> {
    let mut budget = CharBudget::new(max_chars);
    if !budget.try_take(char_len(RECALL_HEADER)) {
        return Ok(Recall::empty());
    }
    let mut text = RECALL_HEADER.to_owned();
    // The date frames everything below; a budget too small for it and some
    // content goes without it.
    let framing = today_line(today);
    if budget.remaining() >= char_len(&framing) + 1 + MIN_ROOM_AFTER_FRAMING {
        budget.try_take(char_len(&framing) + 1);
        text.push('\n');
        text.push_str(&framing);
    }
    let mut items = Vec::new();

    let facts = newest_active(conn, scope, standing)?;
    let mut memory_lines = Vec::new();
    let mut heading_cost = char_len(MEMORIES_HEADING) + 1;
    for fact in &facts {
        let line = memory_line(fact);
        if budget.try_take(char_len(&line) + 1 + heading_cost) {
            heading_cost = 0;
            memory_lines.push(line);
            items.push(RecalledItem {
                citation: Some(Citation::new(fact.id.clone())),
                kind: fact.kind.clone(),
                text: fact.text.clone(),
                score: None,
            });
        }
    }
    if !memory_lines.is_empty() {
        text.push('\n');
        text.push_str(MEMORIES_HEADING);
        for line in memory_lines {
            text.push('\n');
            text.push_str(&line);
        }
    }

    let (candidates, threads) = candidates(conn, scope)?;
    let heading = char_len(TURNS_HEADING) + 1;
    if !candidates.is_empty() && budget.remaining() > heading {
        let mut room = CharBudget::new(budget.remaining() - heading);
        let mut chosen = pick(&candidates, &threads, &mut room);
        if !chosen.is_empty() {
            text.push('\n');
            text.push_str(TURNS_HEADING);
            // Newest conversation first, turns in their order.
            chosen.sort_by_key(|&i| {
                let c = &candidates[i];
                (-threads[c.thread].newest, c.seq)
            });
            let mut open = None;
            for i in chosen {
                let c = &candidates[i];
                if open != Some(c.thread) {
                    open = Some(c.thread);
                    text.push('\n');
                    text.push_str(&threads[c.thread].heading);
                }
                text.push('\n');
                text.push_str(&c.line());
                items.push(RecalledItem {
                    citation: Some(Citation::new(turn_citation(c.id))),
                    kind: memgate_recall::ranked::TURN_KIND.to_owned(),
                    text: c.text.clone(),
                    score: Some(c.score),
                });
            }
        }
    }
    if items.is_empty() {
        return Ok(Recall::empty());
    }
    debug_assert!(char_len(&text) <= max_chars);
    Ok(Recall { text, items })
}

/// Most scopes whose block [`BlockCache`] keeps (about 25 KB each at the
/// default budget); when full it starts over.
const MAX_CACHED_BLOCKS: usize = 256;

/// First-turn blocks already built, per scope, each with the scope's write
/// generation, the date and the settings it was built for. A block depends
/// on nothing else, so a scope nobody wrote to since (its generation is read
/// in the same snapshot) gets the very block it would be built again,
/// without reading and picking from [`MAX_CANDIDATES`] turns.
#[derive(Debug, Default)]
pub struct BlockCache {
    blocks: Mutex<HashMap<i64, CachedBlock>>,
    hits: AtomicU64,
}

#[derive(Debug)]
struct CachedBlock {
    generation: i64,
    built_for: (usize, usize, String),
    block: Recall,
}

impl BlockCache {
    /// [`first_turn_block`] of `scope`, from the cache when it still holds.
    pub fn block(
        &self,
        conn: &Connection,
        scope: i64,
        standing: usize,
        max_chars: usize,
        today: &str,
    ) -> Result<Recall> {
        let generation = write_generation(conn, scope)?;
        let lock = || self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = lock().get(&scope).filter(|c| {
            c.generation == generation
                && c.built_for.0 == standing
                && c.built_for.1 == max_chars
                && c.built_for.2 == today
        }) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(cached.block.clone());
        }
        let block = first_turn_block(conn, scope, standing, max_chars, today)?;
        let mut blocks = lock();
        if blocks.len() >= MAX_CACHED_BLOCKS && !blocks.contains_key(&scope) {
            blocks.clear();
        }
        blocks.insert(
            scope,
            CachedBlock {
                generation,
                built_for: (standing, max_chars, today.to_owned()),
                block: block.clone(),
            },
        );
        Ok(block)
    }

    /// How many blocks came from the cache (tests and diagnostics).
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}
