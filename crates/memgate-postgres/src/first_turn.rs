//! The first-turn block on PostgreSQL (recall with no query and no
//! `injection_query`): `local`'s pick and layout
//! ([`memgate_recall::first_turn`]) over the newest
//! [`MAX_RECENT_TURNS`] turns of the scope, whose excerpts are computed
//! when the block is built (nothing is cached in the schema, so a replica
//! of any version reads the same rows).

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use memgate_core::time::now_rfc3339;
use memgate_core::{Caller, FactOrigin, Recall, Result};
use memgate_recall::citation::parse_memory_citation;
use memgate_recall::first_turn::{candidates_of, FirstTurnBlock, StoredTurn};

/// Most recent turns a block reads and excerpts (bounds the rows read and
/// the scoring per block: about the [`memgate_recall`] 500 candidates with
/// an excerpt that `local` reads from its cache).
pub const MAX_RECENT_TURNS: i64 = 1_000;
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
        let turns_sql = format!(
            "SELECT id, thread, seq, role, speaker,
                    coalesce(occurred_at, substr(captured_at, 1, 10)), text
             FROM turns WHERE scope_id = {SCOPE_ID} ORDER BY id DESC LIMIT $3"
        );
        let standing_limit = settings.standing_memories as i64;
        type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
        let standing_params: [Param; 3] = [&scope.user, &scope.peer, &standing_limit];
        let turns_params: [Param; 3] = [&scope.user, &scope.peer, &MAX_RECENT_TURNS];
        let (client, on_replica) = self.read_client(&scope).await?;
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
        let turns: Vec<StoredTurn> = turns
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
        block.turns(&candidates_of(&turns));
        Ok(block.finish())
    }
}
