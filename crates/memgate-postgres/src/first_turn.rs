//! The first-turn block on PostgreSQL (recall with no query and no
//! `injection_query`): `local`'s pick and layout
//! ([`memgate_recall::first_turn`]) over the newest
//! [`MAX_RECENT_TURNS`] turns of the scope, whose excerpts are computed
//! when the block is built (nothing is cached in the schema, so a replica
//! of any version reads the same rows).

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use memgate_core::time::now_rfc3339;
use memgate_core::{Caller, Recall, Result};
use memgate_recall::first_turn::{candidates_of, FirstTurnBlock, StoredTurn, MEMORIES_HEADING};

/// Most recent turns a block reads and excerpts (bounds the rows read and
/// the scoring per block: about the [`memgate_recall`] 500 candidates with
/// an excerpt that `local` reads from its cache).
pub const MAX_RECENT_TURNS: i64 = 1_000;

impl PostgresBackend {
    /// The first-turn block of the caller's scope: the newest
    /// `standing_memories` explicit memories, then the turns.
    pub(crate) async fn first_turn_block(&self, caller: &Caller) -> Result<Recall> {
        let settings = &self.config.recall;
        let today = now_rfc3339();
        let Some(mut block) = FirstTurnBlock::new(settings.max_injection_chars, &today[..10])
        else {
            return Ok(Recall::empty());
        };
        let scope = Scope::of(caller);
        let standing_sql = format!(
            "SELECT {} FROM memories WHERE scope_id = {SCOPE_ID} AND state = 'active'
             ORDER BY id DESC LIMIT $3",
            crate::facts::FACT_COLUMNS
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
        let facts: Vec<_> = standing.iter().map(crate::facts::fact_from_row).collect();
        block.memories(MEMORIES_HEADING, &facts);
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
