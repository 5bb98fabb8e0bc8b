//! Capture on PostgreSQL: each new human and AI turn stored exactly once,
//! by `local`'s rules of what is kept ([`memgate_recall::turns::storable`]).
//!
//! Exactly once, even when several replicas capture the same thread at the
//! same time: the unique constraint on (scope, thread, signature) with
//! `ON CONFLICT DO NOTHING` decides what is new, and the rows the insert
//! returns are what this capture stored (the others were already known). A
//! transaction-scoped advisory lock on (scope, thread) makes concurrent
//! captures of one thread take turns, so positions (`seq`, which neighbour
//! smoothing reads) stay dense and in order; captures of different threads
//! never wait for each other. Each new turn is stored with its first-turn
//! excerpt ([`crate::excerpts`]). A capture is one transaction, committed
//! before the report is returned; with `memory.distill` on, the new turns'
//! distillation job commits in it too ([`crate::distill`]).

use crate::backend::{PostgresBackend, Scope};
use crate::excerpts::{ExcerptColumns, EXCERPT_RULES};
use crate::terms::{fold, search_vector};
use deadpool_postgres::GenericClient;
use memgate_core::capture::is_captureable;
use memgate_core::time::now_rfc3339;
use memgate_core::{CaptureCut, CaptureReport, CaptureRequest, MemoryError, Result};
use memgate_recall::salience::{excerpt, SpeakerNames};
use memgate_recall::turns::{storable, NewTurn};

/// Inserts every new turn of `turns` in one statement at the end of
/// `thread`; returns how many were new.
const INSERT_TURNS: &str = "INSERT INTO turns (scope_id, thread, seq, signature, message_id,
        role, speaker, occurred_at, text, captured_at, search,
        excerpt, excerpt_score, excerpt_terms, excerpt_about, excerpt_rules)
    SELECT $1, $2, $3 + t.ord - 1, t.signature, t.message_id, t.role, t.speaker,
        t.occurred_at, t.text, t.captured_at, SEARCH_VECTOR,
        t.excerpt, t.excerpt_score, t.excerpt_terms, t.excerpt_about, $17
    FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                $10::text[], $11::text[], $12::text[],
                $13::text[], $14::float8[], $15::text[], $16::bool[])
         WITH ORDINALITY AS t(signature, message_id, role, speaker, occurred_at, text,
                              captured_at, body, context,
                              excerpt, excerpt_score, excerpt_terms, excerpt_about, ord)
    ON CONFLICT (scope_id, thread, signature) DO NOTHING
    RETURNING id";

/// What [`PostgresBackend::store_turns`] wrote of a batch.
#[derive(Default)]
pub(crate) struct StoredTurns {
    /// The new turns' ids, ascending (a distillation job names them).
    pub ids: Vec<i64>,
    pub already_known: usize,
    /// The cuts of the turns it stored.
    pub cut: Vec<CaptureCut>,
}

impl PostgresBackend {
    /// Takes the (scope, thread) lock until the caller's transaction ends:
    /// captures (and a forget) of one thread take turns.
    pub(crate) async fn lock_thread(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        thread: &str,
    ) -> Result<()> {
        self.exec(
            c,
            "SELECT pg_advisory_xact_lock(hashtext('memgate-turns:' || $1::bigint::text), \
             hashtext($2))",
            &[&scope_id, &thread],
        )
        .await
        .map(|_| ())
    }

    /// Stores `turns` (in order) at the end of `thread` in `scope_id`, inside
    /// the caller's transaction.
    pub(crate) async fn store_turns(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        thread: &str,
        turns: &[NewTurn],
    ) -> Result<StoredTurns> {
        self.lock_thread(c, scope_id, thread).await?;
        // Signatures already in the thread (or repeated in this batch) take no
        // position; the insert's ON CONFLICT stays the guarantee.
        let signatures: Vec<&str> = turns.iter().map(|t| t.signature.as_str()).collect();
        let known: std::collections::HashSet<String> = self
            .rows(
                c,
                "SELECT signature FROM turns WHERE scope_id = $1 AND thread = $2
                 AND signature = ANY($3)",
                &[&scope_id, &thread, &signatures],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // Each new turn's first-turn excerpt, with the speakers met so far in
        // the batch as names (as `local` computes it).
        let mut batch_seen = std::collections::HashSet::new();
        let mut names = SpeakerNames::default();
        let mut new: Vec<&NewTurn> = Vec::new();
        let mut excerpts = ExcerptColumns::default();
        for t in turns {
            names.add(t.speaker.as_deref());
            if !known.contains(&t.signature) && batch_seen.insert(t.signature.as_str()) {
                excerpts.push(excerpt(&t.text, names.as_slice()));
                new.push(t);
            }
        }
        if new.is_empty() {
            return Ok(StoredTurns {
                already_known: turns.len(),
                ..StoredTurns::default()
            });
        }
        let next: i64 = self
            .row(
                c,
                "SELECT coalesce(max(seq), 0) + 1 FROM turns WHERE scope_id = $1 AND thread = $2",
                &[&scope_id, &thread],
            )
            .await?
            .get(0);
        let column = |f: fn(&NewTurn) -> Option<String>| -> Vec<Option<String>> {
            new.iter().map(|t| f(t)).collect()
        };
        let sql = INSERT_TURNS.replace("SEARCH_VECTOR", &search_vector("t.body", "t.context"));
        let rows = self
            .rows(
                c,
                &sql,
                &[
                    &scope_id,
                    &thread,
                    &next,
                    &column(|t| Some(t.signature.clone())),
                    &column(|t| t.message_id.clone()),
                    &column(|t| Some(t.role.to_owned())),
                    &column(|t| t.speaker.clone()),
                    &column(|t| t.occurred_at.clone()),
                    &column(|t| Some(t.text.clone())),
                    &column(|t| Some(t.captured_at.clone())),
                    &column(|t| Some(fold(&t.text))),
                    &column(|t| {
                        Some(fold(&format!(
                            "{} {}",
                            t.speaker.as_deref().unwrap_or_default(),
                            t.occurred_at.as_deref().unwrap_or_default()
                        )))
                    }),
                    &excerpts.text,
                    &excerpts.score,
                    &excerpts.terms,
                    &excerpts.about,
                    &EXCERPT_RULES,
                ],
            )
            .await?;
        let mut ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        ids.sort_unstable();
        // The thread lock keeps every turn of `new` new until the commit.
        Ok(StoredTurns {
            already_known: turns.len() - ids.len(),
            ids,
            cut: new.iter().filter_map(|t| t.cut.clone()).collect(),
        })
    }

    /// Stores the new turns of a snapshot (or compaction head) in one
    /// transaction. Requires a thread.
    pub(crate) async fn capture_turns(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        let thread = request.caller.require_thread()?;
        let captured_at = now_rfc3339();
        let keep = self.keep_hidden.as_ref();
        let turns: Vec<NewTurn> = request
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| is_captureable(m, keep))
            .filter_map(|(i, m)| storable(m, i, &captured_at, &self.redactor))
            .collect();
        let mut report = CaptureReport::default();
        if turns.is_empty() {
            if self.is_closing() {
                return Err(MemoryError::Closed("postgres".to_owned()));
            }
        } else {
            let scope = Scope::of(&request.caller);
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            let scope_id = self.ensure_scope(&tx, &scope).await?;
            let stored = self.store_turns(&tx, scope_id, thread, &turns).await?;
            // The new turns' distillation job commits with them.
            let queued = match self.distill {
                Some(limits) if !stored.ids.is_empty() => Some(
                    self.queue_new_turns(&tx, scope_id, thread, &stored.ids, limits)
                        .await?,
                ),
                _ => None,
            };
            tx.commit().await.map_err(|e| self.err(e))?;
            if queued == Some(crate::distill::Queued::Skipped) {
                self.distill_skipped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    "distillation queue full: new turns were not queued (`memgate distill` queues them later)"
                );
            }
            report.stored = stored.ids.len();
            report.already_known = stored.already_known;
            report.cut = stored.cut;
        }
        report.filtered = request.messages.len() - report.stored - report.already_known;
        tracing::debug!(
            stored = report.stored,
            already_known = report.already_known,
            filtered = report.filtered,
            trace_id = request.trace_id.as_deref().unwrap_or(""),
            "postgres capture"
        );
        Ok(report)
    }
}
