//! Handoffs on PostgreSQL: drafts and prepared handoffs kept in a table
//! with an expiry, bound to the user who prepared them.
//!
//! A table, not process memory like `local`: any number of replicas serve
//! one database, and the receiving thread's request may reach another
//! replica than the one that prepared the handoff. The expiry is the
//! database's clock, so replicas with skewed clocks agree; expired rows are
//! never read and are deleted by the next prepare. A handoff is still never
//! memory: the table is outside recall, search, facts and export, and only
//! a commit stores one milestone memory.

use crate::backend::PostgresBackend;
use deadpool_postgres::GenericClient;
use memgate_core::handoff::MILESTONE_KIND;
use memgate_core::time::format_unix_millis;
use memgate_core::{
    Acknowledgement, Caller, CommitOutcome, Continuation, Handoff, HandoffContent, HandoffStage,
    MemoryError, RememberRequest, Result,
};

/// The most open handoffs one user may hold (as on `local`).
pub const MAX_HANDOFFS_PER_USER: i64 = 64;

/// The database clock in milliseconds since the epoch.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

impl PostgresBackend {
    fn lifetime_ms(&self) -> i64 {
        i64::try_from(self.config.handoff_lifetime.as_millis()).unwrap_or(i64::MAX)
    }

    /// Holds a new draft of `content` for the caller.
    pub(crate) async fn hold_handoff(
        &self,
        caller: &Caller,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        let content = content.redacted(&self.redactor)?;
        let user = caller.user.as_str();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        // One user's prepares are serialized, so the cap holds across replicas.
        self.exec(
            &tx,
            "SELECT pg_advisory_xact_lock(hashtextextended('memgate-handoff:' || $1, 0))",
            &[&user],
        )
        .await?;
        self.exec(
            &tx,
            &format!("DELETE FROM handoffs WHERE expires_ms <= {NOW_MS}"),
            &[],
        )
        .await?;
        let open: i64 = self
            .row(
                &tx,
                "SELECT count(*) FROM handoffs WHERE user_id = $1",
                &[&user],
            )
            .await?
            .get(0);
        if open >= MAX_HANDOFFS_PER_USER {
            return Err(MemoryError::Conflict(format!(
                "the caller already holds {MAX_HANDOFFS_PER_USER} open handoffs, the most kept; \
                 finalize, commit or let some expire first"
            )));
        }
        let row = self
            .row(
                &tx,
                &format!(
                    "SELECT 'hof_' || replace(gen_random_uuid()::text, '-', ''), \
                     {NOW_MS} + $1::bigint"
                ),
                &[&self.lifetime_ms()],
            )
            .await?;
        let (id, expires_ms): (String, i64) = (row.get(0), row.get(1));
        let handoff = Handoff {
            id,
            stage: HandoffStage::Draft,
            revision: 1,
            content,
            from_thread: caller.thread.clone(),
            expires_at: format_unix_millis(expires_ms),
            acknowledgement: None,
            milestone: None,
        };
        self.exec(
            &tx,
            "INSERT INTO handoffs (id, user_id, body, expires_ms) VALUES ($1, $2, $3, $4)",
            &[&handoff.id, &user, &body_of(&handoff)?, &expires_ms],
        )
        .await?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(handoff)
    }

    /// The caller's own live handoff `id`; another user's, or an expired
    /// one, is answered exactly like a missing one.
    pub(crate) async fn held_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        let client = self.client().await?;
        self.read_own(&client, caller, id, false).await
    }

    async fn read_own(
        &self,
        c: &impl GenericClient,
        caller: &Caller,
        id: &str,
        for_update: bool,
    ) -> Result<Handoff> {
        let lock = if for_update { " FOR UPDATE" } else { "" };
        let row = self
            .row_opt(
                c,
                &format!(
                    "SELECT body FROM handoffs \
                     WHERE id = $1 AND user_id = $2 AND expires_ms > {NOW_MS}{lock}"
                ),
                &[&id, &caller.user.as_str()],
            )
            .await?
            .ok_or_else(|| MemoryError::NotFound(format!("handoff {id}")))?;
        let body: String = row.get(0);
        serde_json::from_str(&body).map_err(|e| {
            MemoryError::Backend(format!(
                "handoff {id} is held in a shape this version cannot read: {e}"
            ))
        })
    }

    /// Applies `step` to the caller's own live handoff under a row lock,
    /// so concurrent steps from two replicas apply one after the other.
    pub(crate) async fn change_handoff(
        &self,
        caller: &Caller,
        id: &str,
        step: impl FnOnce(&mut Handoff) -> Result<()>,
    ) -> Result<Handoff> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let mut handoff = self.read_own(&tx, caller, id, true).await?;
        step(&mut handoff)?;
        self.exec(
            &tx,
            "UPDATE handoffs SET body = $2 WHERE id = $1",
            &[&id, &body_of(&handoff)?],
        )
        .await?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(handoff)
    }

    pub(crate) async fn correct_held_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        let content = content.redacted(&self.redactor)?;
        self.change_handoff(caller, id, |h| h.correct(content))
            .await
    }

    pub(crate) async fn continue_held_handoff(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Continuation> {
        self.held_handoff(caller, id).await?.continuation()
    }

    pub(crate) async fn acknowledge_held_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.change_handoff(caller, id, |h| h.acknowledge(acknowledgement))
            .await
    }

    /// One milestone memory in the caller's scope; a second commit of the
    /// same handoff answers the milestone already stored.
    pub(crate) async fn commit_held_handoff(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<CommitOutcome> {
        let content = match self.held_handoff(caller, id).await?.to_commit()? {
            Ok(content) => content,
            Err(citation) => return Ok(CommitOutcome::Stored { citation }),
        };
        let request = match RememberRequest::new(MILESTONE_KIND, &content.milestone_text()) {
            Ok(request) => request,
            Err(e) => {
                return Ok(CommitOutcome::Failed {
                    reason: e.to_string(),
                })
            }
        };
        let outcome = CommitOutcome::of_milestone(self.remember_fact(caller, &request).await?);
        if let CommitOutcome::Stored { citation } = &outcome {
            // The milestone is stored whatever happens to this mark; a lost
            // mark only means a later commit finds the identical memory.
            let citation = citation.clone();
            let _ = self
                .change_handoff(caller, id, |h| {
                    h.committed(citation);
                    Ok(())
                })
                .await;
        }
        Ok(outcome)
    }
}

fn body_of(handoff: &Handoff) -> Result<String> {
    serde_json::to_string(handoff)
        .map_err(|e| MemoryError::Backend(format!("cannot encode handoff {}: {e}", handoff.id)))
}
