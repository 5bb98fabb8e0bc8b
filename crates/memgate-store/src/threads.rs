//! A scope's captured threads a page at a time, from the `turns_by_thread`
//! index: the thread list counts and pages without reading turn texts, and
//! a thread's page reads only its own turns.

use crate::error::db_error;
use crate::scope::ScopeRow;
use memgate_core::{PageRequest, Result, ThreadList, ThreadSummary, ThreadTurn, ThreadTurns};
use memgate_recall::citation::turn_citation;
use memgate_recall::scope::ScopeKey;
use rusqlite::{params, Connection};

/// One page of `key`'s threads by name, with turn counts and the capture
/// times of each thread's first and last turn.
pub(crate) fn list(conn: &Connection, key: &ScopeKey, page: PageRequest) -> Result<ThreadList> {
    let Some(scope) = key.find(conn)? else {
        return Ok(ThreadList::default());
    };
    let total: i64 = conn
        .prepare_cached("SELECT count(DISTINCT thread) FROM turns WHERE scope_id = ?1")
        .and_then(|mut s| s.query_row([scope], |r| r.get(0)))
        .map_err(db_error)?;
    // Counts come from the index alone; only the page's first and last
    // turns are read for their times.
    let threads = conn
        .prepare_cached(
            "WITH page AS (
                 SELECT thread, count(*) AS n, min(seq) AS first, max(seq) AS last
                 FROM turns WHERE scope_id = ?1
                 GROUP BY thread ORDER BY thread LIMIT ?2 OFFSET ?3)
             SELECT p.thread, p.n,
                 (SELECT captured_at FROM turns t
                  WHERE t.scope_id = ?1 AND t.thread = p.thread AND t.seq = p.first LIMIT 1),
                 (SELECT captured_at FROM turns t
                  WHERE t.scope_id = ?1 AND t.thread = p.thread AND t.seq = p.last LIMIT 1)
             FROM page p ORDER BY p.thread",
        )
        .and_then(|mut s| {
            s.query_map(
                params![scope, to_i64(page.limit), to_i64(page.offset)],
                |r| {
                    Ok(ThreadSummary {
                        thread: r.get(0)?,
                        turns: r.get::<_, i64>(1)?.unsigned_abs(),
                        first_captured_at: r.get(2)?,
                        last_captured_at: r.get(3)?,
                    })
                },
            )?
            .collect()
        })
        .map_err(db_error)?;
    Ok(ThreadList {
        threads,
        total: total.unsigned_abs(),
    })
}

/// One page of thread `thread`'s turns in `key`'s scope, in order.
pub(crate) fn read(
    conn: &Connection,
    key: &ScopeKey,
    thread: &str,
    page: PageRequest,
) -> Result<ThreadTurns> {
    let Some(scope) = key.find(conn)? else {
        return Ok(ThreadTurns::default());
    };
    let total: i64 = conn
        .prepare_cached("SELECT count(*) FROM turns WHERE scope_id = ?1 AND thread = ?2")
        .and_then(|mut s| s.query_row(params![scope, thread], |r| r.get(0)))
        .map_err(db_error)?;
    let turns = conn
        .prepare_cached(
            "SELECT id, role, text, captured_at FROM turns
             WHERE scope_id = ?1 AND thread = ?2 ORDER BY seq LIMIT ?3 OFFSET ?4",
        )
        .and_then(|mut s| {
            s.query_map(
                params![scope, thread, to_i64(page.limit), to_i64(page.offset)],
                |r| {
                    Ok(ThreadTurn {
                        citation: turn_citation(r.get(0)?),
                        role: r.get(1)?,
                        text: r.get(2)?,
                        captured_at: r.get(3)?,
                    })
                },
            )?
            .collect()
        })
        .map_err(db_error)?;
    Ok(ThreadTurns {
        turns,
        total: total.unsigned_abs(),
    })
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
