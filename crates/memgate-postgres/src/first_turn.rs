//! The first-turn block on PostgreSQL (recall with no query and no
//! `injection_query`): `local`'s read, pick and layout
//! ([`memgate_recall::first_turn`]). The candidates are the newest
//! [`MAX_CANDIDATES`] turns of the scope with an excerpt kept at capture
//! ([`crate::excerpts`]), then the newest [`MAX_ABOUT_SPEAKER`] older ones
//! about their speaker, each assistant turn with the user turn it answers
//! (the newest user turn before it in its thread). While the excerpts of
//! turns stored by an older version are still being computed, the block is
//! built from the newest [`MAX_RECENT_TURNS`] turns, excerpted here.

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use memgate_core::time::now_rfc3339;
use memgate_core::{Caller, FactOrigin, Recall, Result};
use memgate_recall::citation::parse_memory_citation;
use memgate_recall::first_turn::{
    candidates_of, AskedTurn, FirstTurnBlock, StoredTurn, TurnCandidate, MAX_ABOUT_SPEAKER,
    MAX_CANDIDATES,
};
use tokio_postgres::Row;

/// Most recent turns a block reads and excerpts while the kept excerpts are
/// incomplete (bounds the rows read and the scoring per block).
pub const MAX_RECENT_TURNS: i64 = 1_000;

/// What a candidate keeps of a turn (never its text: the excerpt is shown).
const CANDIDATE_ROW: &str = "id, scope_id, thread, seq, role, speaker, occurred_at, captured_at,
    excerpt, excerpt_score, excerpt_terms, excerpt_about";

/// The candidates with their questions, newest first (`$1`, `$2`: the scope).
fn candidates_sql() -> String {
    format!(
        "WITH recent AS (
             SELECT {CANDIDATE_ROW} FROM turns
             WHERE scope_id = {SCOPE_ID} AND excerpt IS NOT NULL
             ORDER BY id DESC LIMIT {MAX_CANDIDATES}),
         older AS (
             SELECT {CANDIDATE_ROW} FROM turns
             WHERE scope_id = {SCOPE_ID} AND excerpt_about
               AND (SELECT count(*) FROM recent) = {MAX_CANDIDATES}
               AND id < (SELECT min(id) FROM recent)
             ORDER BY id DESC LIMIT {MAX_ABOUT_SPEAKER}),
         t AS (SELECT * FROM recent UNION ALL SELECT * FROM older)
         SELECT t.id, t.thread, t.seq, t.role, t.speaker,
                coalesce(t.occurred_at, substr(t.captured_at, 1, 10)),
                t.excerpt, t.excerpt_score, t.excerpt_terms, t.excerpt_about,
                q.id, q.seq, q.speaker, CASE WHEN q.excerpt IS NULL THEN q.text ELSE '' END,
                q.excerpt, q.excerpt_about
         FROM t LEFT JOIN LATERAL (
             SELECT p.id, p.seq, p.speaker, p.text, p.excerpt, p.excerpt_about FROM turns p
             WHERE t.role = 'ai' AND p.scope_id = t.scope_id AND p.thread = t.thread
               AND p.seq < t.seq AND p.role = 'human'
             ORDER BY p.seq DESC LIMIT 1) q ON true
         ORDER BY t.id DESC"
    )
}

/// A row of [`candidates_sql`].
fn candidate(r: &Row) -> TurnCandidate {
    let answers = r.get::<_, Option<i64>>(10).map(|id| AskedTurn {
        id,
        seq: r.get(11),
        speaker: r.get(12),
        text: r.get(13),
        excerpt: r.get(14),
        about_speaker: r.get(15),
    });
    TurnCandidate {
        id: r.get(0),
        thread: r.get(1),
        seq: r.get(2),
        ai: r.get::<_, &str>(3) == "ai",
        speaker: r.get(4),
        when: r.get(5),
        excerpt: r.get(6),
        score: r.get(7),
        terms: r.get::<_, Option<String>>(8).unwrap_or_default(),
        about_speaker: r.get(9),
        answers,
    }
}

/// The newest turns, to be excerpted here (`$3`: how many).
fn recent_turns_sql() -> String {
    format!(
        "SELECT id, thread, seq, role, speaker,
                coalesce(occurred_at, substr(captured_at, 1, 10)), text
         FROM turns WHERE scope_id = {SCOPE_ID} ORDER BY id DESC LIMIT $3"
    )
}

/// The candidates among the rows of [`recent_turns_sql`].
fn candidates_of_recent(rows: &[Row]) -> Vec<TurnCandidate> {
    let turns: Vec<StoredTurn> = rows
        .iter()
        .map(|r| StoredTurn {
            id: r.get(0),
            thread: r.get(1),
            seq: r.get(2),
            ai: r.get::<_, &str>(3) == "ai",
            speaker: r.get(4),
            when: r.get(5),
            text: r.get(6),
        })
        .collect();
    candidates_of(&turns)
}
/// Most current distilled facts a profile reads (as `local`'s).
pub const MAX_PROFILE_FACTS: usize = 200;

impl PostgresBackend {
    /// The first-turn block of the caller's scope: the profile (the newest
    /// `standing_memories` current explicit facts, then at most
    /// [`MAX_PROFILE_FACTS`] current distilled ones, round-robin over their
    /// threads), then the turns.
    pub(crate) async fn first_turn_block(&self, caller: &Caller) -> Result<Recall> {
        let settings = &self.config.recall;
        let today = now_rfc3339();
        let Some(mut block) = FirstTurnBlock::new(settings.max_injection_chars, &today[..10])
        else {
            return Ok(Recall::empty());
        };
        let scope = Scope::of(caller);
        // Explicit facts first (newest first, at most `standing`), then
        // distilled ones round-robin over their threads (every thread's
        // newest, then every thread's second newest, ...): a bounded read
        // that still spans the history. Superseded and retired versions are
        // never read.
        let current = format!(
            "scope_id = {SCOPE_ID} AND state = 'active' AND superseded_by IS NULL \
             AND valid_to IS NULL"
        );
        let standing_sql = format!(
            "(SELECT {cols} FROM memories WHERE {current} AND origin = 'explicit'
              ORDER BY id DESC LIMIT $3)
             UNION ALL
             (SELECT {cols} FROM memories WHERE id IN (
                 SELECT id FROM (
                     SELECT id, row_number() OVER (PARTITION BY thread ORDER BY id DESC) AS round
                     FROM memories WHERE {current} AND origin = 'distilled') AS ranked
                 ORDER BY round, id DESC LIMIT {MAX_PROFILE_FACTS}))",
            cols = crate::facts::FACT_COLUMNS
        );
        let standing_limit = settings.standing_memories as i64;
        type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
        let standing_params: [Param; 3] = [&scope.user, &scope.peer, &standing_limit];
        let kept = self.excerpts_ready().await?;
        let (client, on_replica) = self.read_client(&scope).await?;
        let (turns_sql, turns_params): (String, Vec<Param>) = if kept {
            (candidates_sql(), vec![&scope.user, &scope.peer])
        } else {
            (
                recent_turns_sql(),
                vec![&scope.user, &scope.peer, &MAX_RECENT_TURNS],
            )
        };
        let read = tokio::try_join!(
            self.rows(&client, &standing_sql, &standing_params),
            self.rows(&client, &turns_sql, &turns_params),
        );
        drop(client);
        let (standing, turns) = match self.replica_outcome(on_replica, read) {
            Some(read) => read?,
            None => {
                let client = self.client().await?;
                tokio::try_join!(
                    self.rows(&client, &standing_sql, &standing_params),
                    self.rows(&client, &turns_sql, &turns_params),
                )?
            }
        };
        let mut facts: Vec<_> = standing.iter().map(crate::facts::fact_from_row).collect();
        // A union's order is not promised: explicit first, newest first
        // (the profile orders the distilled ones itself).
        facts.sort_by_key(|f| {
            (
                f.origin != FactOrigin::Explicit,
                std::cmp::Reverse(parse_memory_citation(&f.id)),
            )
        });
        block.profile(&facts);
        block.turns(&if kept {
            turns.iter().map(candidate).collect()
        } else {
            candidates_of_recent(&turns)
        });
        Ok(block.finish())
    }
}
