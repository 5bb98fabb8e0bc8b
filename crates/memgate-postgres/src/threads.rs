//! A scope's captured threads a page at a time, with `local`'s rules:
//! threads by name with counts and first/last capture times, one thread's
//! turns in order. Both read the `(scope_id, thread, seq)` index, so a
//! page costs the page, not the scope.

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use memgate_core::{
    Caller, PageRequest, Result, ThreadList, ThreadSummary, ThreadTurn, ThreadTurns,
};
use memgate_recall::citation::turn_citation;

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PostgresBackend {
    /// One page of the caller's threads, by name.
    pub(crate) async fn thread_page(
        &self,
        caller: &Caller,
        page: PageRequest,
    ) -> Result<ThreadList> {
        let scope = Scope::of(caller);
        let client = self.client().await?;
        let total = self
            .rows(
                &client,
                &format!("SELECT count(DISTINCT thread) FROM turns WHERE scope_id = {SCOPE_ID}"),
                &[&scope.user, &scope.peer],
            )
            .await?;
        let total: i64 = total.first().map_or(0, |r| r.get(0));
        let rows = self
            .rows(
                &client,
                &format!(
                    "WITH page AS (
                         SELECT scope_id, thread, count(*) AS n, min(seq) AS first, max(seq) AS last
                         FROM turns WHERE scope_id = {SCOPE_ID}
                         GROUP BY scope_id, thread ORDER BY thread LIMIT $3 OFFSET $4)
                     SELECT p.thread, p.n, f.captured_at, l.captured_at
                     FROM page p
                     JOIN turns f ON f.scope_id = p.scope_id AND f.thread = p.thread AND f.seq = p.first
                     JOIN turns l ON l.scope_id = p.scope_id AND l.thread = p.thread AND l.seq = p.last
                     ORDER BY p.thread"
                ),
                &[&scope.user, &scope.peer, &to_i64(page.limit), &to_i64(page.offset)],
            )
            .await?;
        Ok(ThreadList {
            threads: rows
                .iter()
                .map(|r| ThreadSummary {
                    thread: r.get(0),
                    turns: r.get::<_, i64>(1).unsigned_abs(),
                    first_captured_at: r.get(2),
                    last_captured_at: r.get(3),
                })
                .collect(),
            total: total.unsigned_abs(),
        })
    }

    /// One page of one of the caller's threads, in order.
    pub(crate) async fn thread_turns(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        let scope = Scope::of(caller);
        let client = self.client().await?;
        let total = self
            .rows(
                &client,
                &format!("SELECT count(*) FROM turns WHERE scope_id = {SCOPE_ID} AND thread = $3"),
                &[&scope.user, &scope.peer, &thread],
            )
            .await?;
        let total: i64 = total.first().map_or(0, |r| r.get(0));
        let rows = self
            .rows(
                &client,
                &format!(
                    "SELECT id, role, text, captured_at FROM turns
                     WHERE scope_id = {SCOPE_ID} AND thread = $3
                     ORDER BY seq LIMIT $4 OFFSET $5"
                ),
                &[
                    &scope.user,
                    &scope.peer,
                    &thread,
                    &to_i64(page.limit),
                    &to_i64(page.offset),
                ],
            )
            .await?;
        Ok(ThreadTurns {
            turns: rows
                .iter()
                .map(|r| ThreadTurn {
                    citation: turn_citation(r.get(0)),
                    role: r.get(1),
                    text: r.get(2),
                    captured_at: r.get(3),
                })
                .collect(),
            total: total.unsigned_abs(),
        })
    }
}
