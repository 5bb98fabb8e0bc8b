//! The first-turn block of the local store: what a new conversation starts
//! with when the host gives no query (DeerFlow's `get_context` at the start
//! of every thread). The pick and the layout are
//! [`memgate_recall::first_turn`]'s, shared with `postgres`; this module
//! reads the rows.
//!
//! Excerpts are computed once, when the turn is stored ([`cache_excerpt`];
//! turns never change), so a block is two indexed reads plus the pick: the
//! newest [`MAX_CANDIDATES`] turns of the scope with an excerpt, and the
//! newest [`MAX_ABOUT_SPEAKER`] older ones that say something of their
//! speaker (what the user said about themselves does not drop out as
//! conversations pile up). Each assistant turn is read with the user turn it
//! answers (the newest user turn before it in its thread).
//!
//! A block depends only on the scope's turns and memories, the date and the
//! settings, so the store keeps the last block of each scope
//! ([`BlockCache`]) with the scope's write generation (bumped by every write
//! to the scope, in its transaction: [`crate::schema`]) and hands it out
//! again until the scope changes or the day turns.

use crate::error::db_error;
use crate::facts::current_profile;
use crate::scope::write_generation;
use memgate_core::{Recall, Result};
use memgate_recall::first_turn::{
    AskedTurn, FirstTurnBlock, TurnCandidate, MAX_ABOUT_SPEAKER, MAX_CANDIDATES,
};
use memgate_recall::salience::{excerpt, SpeakerNames};
use rusqlite::{params, Connection};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
        "UPDATE turns SET excerpt = ?2, excerpt_score = ?3, excerpt_terms = ?4, excerpt_about = ?5
         WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            e.text,
            e.score,
            e.terms.join(" "),
            e.about_speaker
        ])
    })
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

/// The columns of a candidate and of the user turn it answers, `t` the
/// candidate, `q` that user turn (its text only when it has no excerpt to
/// show: a long text is not read for nothing).
const CANDIDATE_COLUMNS: &str = "t.id, t.thread, t.seq, t.role, t.speaker,
    coalesce(t.occurred_at, substr(t.captured_at, 1, 10)), t.excerpt, t.excerpt_score,
    t.excerpt_terms, t.excerpt_about, q.id, q.seq, q.speaker,
    CASE WHEN q.excerpt IS NULL THEN q.text ELSE '' END, q.excerpt, q.excerpt_about";

/// What the candidate sub-selects keep of a turn (never its text: the
/// excerpt is what is shown).
const CANDIDATE_ROW: &str = "id, scope_id, thread, seq, role, speaker, occurred_at, captured_at,
    excerpt, excerpt_score, excerpt_terms, excerpt_about";

/// Joins `q`, the newest user turn before an assistant turn `t` in its thread.
const ANSWERED_TURN: &str = "LEFT JOIN turns q ON t.role = 'ai' AND q.id = (
    SELECT p.id FROM turns p
    WHERE p.scope_id = t.scope_id AND p.thread = t.thread AND p.seq < t.seq AND p.role = 'human'
    ORDER BY p.seq DESC LIMIT 1)";

fn candidate(r: &rusqlite::Row) -> rusqlite::Result<TurnCandidate> {
    let answers = match r.get::<_, Option<i64>>(10)? {
        Some(id) => Some(AskedTurn {
            id,
            seq: r.get(11)?,
            speaker: r.get(12)?,
            text: r.get(13)?,
            excerpt: r.get(14)?,
            about_speaker: r.get(15)?,
        }),
        None => None,
    };
    Ok(TurnCandidate {
        id: r.get(0)?,
        thread: r.get(1)?,
        seq: r.get(2)?,
        ai: r.get_ref(3)?.as_str()? == "ai",
        speaker: r.get(4)?,
        when: r.get(5)?,
        excerpt: r.get(6)?,
        score: r.get(7)?,
        terms: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
        about_speaker: r.get(9)?,
        answers,
    })
}

/// The newest `MAX_CANDIDATES` turns of `scope` with an excerpt, then the
/// newest `MAX_ABOUT_SPEAKER` older ones about their speaker; newest first.
fn candidates(conn: &Connection, scope: i64) -> Result<Vec<TurnCandidate>> {
    let mut out: Vec<TurnCandidate> = conn
        .prepare_cached(&format!(
            "SELECT {CANDIDATE_COLUMNS}
             FROM (SELECT {CANDIDATE_ROW} FROM turns WHERE scope_id = ?1 AND excerpt IS NOT NULL
                   ORDER BY id DESC LIMIT {MAX_CANDIDATES}) t
             {ANSWERED_TURN}
             ORDER BY t.id DESC"
        ))
        .and_then(|mut s| s.query_map(params![scope], candidate)?.collect())
        .map_err(db_error)?;
    if out.len() == MAX_CANDIDATES {
        let oldest = out.last().map_or(0, |c| c.id);
        let older: Vec<TurnCandidate> = conn
            .prepare_cached(&format!(
                "SELECT {CANDIDATE_COLUMNS}
                 FROM (SELECT {CANDIDATE_ROW} FROM turns
                       WHERE scope_id = ?1 AND excerpt_about = 1 AND id < ?2
                       ORDER BY id DESC LIMIT {MAX_ABOUT_SPEAKER}) t
                 {ANSWERED_TURN}
                 ORDER BY t.id DESC"
            ))
            .and_then(|mut s| s.query_map(params![scope, oldest], candidate)?.collect())
            .map_err(db_error)?;
        out.extend(older);
    }
    Ok(out)
}

/// The first-turn block of `scope` within `max_chars`
/// ([`memgate_recall::first_turn`]): the profile (the newest `standing`
/// current explicit facts, then current distilled ones round-robin over
/// their threads), then the turns not already told by a shown fact.
pub fn first_turn_block(
    conn: &Connection,
    scope: i64,
    standing: usize,
    max_chars: usize,
    today: &str,
) -> Result<Recall> {
    let Some(mut block) = FirstTurnBlock::new(max_chars, today) else {
        return Ok(Recall::empty());
    };
    block.profile(&current_profile(conn, scope, standing)?);
    block.turns(&candidates(conn, scope)?);
    Ok(block.finish())
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
