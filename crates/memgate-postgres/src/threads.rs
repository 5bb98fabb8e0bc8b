//! A scope's captured threads a page at a time, with `local`'s rules:
//! threads by name with counts and first/last capture times, one thread's
//! turns in order. Both read the `(scope_id, thread, seq)` index, so a
//! page costs the page, not the scope.

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use memgate_core::{
    Caller, PageRequest, Result, ThreadList, ThreadSummary, ThreadTurn, ThreadTurns,
};
use memgate_recall::citation::turn_citation;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PostgresBackend {
    /// How many rows a listing of the caller's scope has, and one page of
    /// them. Both statements take the scope as `$1, $2`, then `args`; the
    /// page's statement takes its limit and offset after those.
    async fn scope_page(
        &self,
        caller: &Caller,
        count_sql: &str,
        page_sql: &str,
        args: &[&(dyn ToSql + Sync)],
        page: PageRequest,
    ) -> Result<(u64, Vec<Row>)> {
        let scope = Scope::of(caller);
        let (limit, offset) = (to_i64(page.limit), to_i64(page.offset));
        let client = self.client().await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&scope.user, &scope.peer];
        params.extend_from_slice(args);
        let total = self.rows(&client, count_sql, &params).await?;
        let total: i64 = total.first().map_or(0, |r| r.get(0));
        params.extend([&limit as &(dyn ToSql + Sync), &offset]);
        let rows = self.rows(&client, page_sql, &params).await?;
        Ok((total.unsigned_abs(), rows))
    }

    /// One page of the caller's threads, by name.
    pub(crate) async fn thread_page(
        &self,
        caller: &Caller,
        page: PageRequest,
    ) -> Result<ThreadList> {
        let (total, rows) = self
            .scope_page(
                caller,
                &format!("SELECT count(DISTINCT thread) FROM turns WHERE scope_id = {SCOPE_ID}"),
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
                &[],
                page,
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
            total,
        })
    }

    /// One page of one of the caller's threads, in order.
    pub(crate) async fn thread_turns(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        let (total, rows) = self
            .scope_page(
                caller,
                &format!("SELECT count(*) FROM turns WHERE scope_id = {SCOPE_ID} AND thread = $3"),
                &format!(
                    "SELECT id, role, text, captured_at FROM turns
                     WHERE scope_id = {SCOPE_ID} AND thread = $3
                     ORDER BY seq LIMIT $4 OFFSET $5"
                ),
                &[&thread],
                page,
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
            total,
        })
    }
}
