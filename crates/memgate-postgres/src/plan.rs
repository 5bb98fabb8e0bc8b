//! Query planning: `local`'s step 0 ([`memgate_store::ranking`]) on
//! PostgreSQL, so a recall never walks a common term's whole posting list.
//!
//! Each query term's document count in the scope (turns plus active
//! memories) is read from `term_docs` (schema migration 2, kept exact by
//! triggers in every writing transaction), one index lookup per term in one
//! statement. Terms absent from the scope are dropped; the rarest terms are
//! kept while their counts together stay within the budget, and the most
//! common are left out (they carry the least weight). When even the rarest
//! term is over the budget the query has no discriminating word: the newest
//! documents holding the two rarest terms together are taken, else those
//! holding the rarest alone, without scores; when the rarest term is so
//! common that a window of the scope's newest turns holds enough of it, only
//! that window is read ([`Walk`]). The counts are exact, so a
//! term that retire or forget made rare again is planned as rare at once.

use crate::backend::{PostgresBackend, Scope};
use crate::terms::{all_of, any_of, quoted, TEXT_SEARCH_CONFIG};
use deadpool_postgres::GenericClient;
use memgate_core::Result;
pub use memgate_store::ranking::POSTINGS_BUDGET;

/// What the ranking asks PostgreSQL for (a `to_tsquery` input each).
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// `ts_rank` over the documents matching any of these uncommon terms.
    Scored(String),
    /// Every term is common: the newest documents matching `first`, or
    /// `fallback` when `first` (two terms together) matches nothing.
    Newest {
        first: String,
        fallback: Option<String>,
        /// How many documents hold the rarest term.
        rarest_docs: usize,
        /// The id span of the scope's turns (≥ their number).
        span: usize,
    },
}

/// How a newest-first plan reaches its turns: whichever reads fewer rows.
#[derive(Debug, PartialEq)]
pub enum Walk {
    /// The index: every posting of the plan's terms, the newest matches kept.
    Postings,
    /// Only the scope's newest `rows` turns, where the rarest term is
    /// expected [`NEWEST_COVER`] times as often as the pool needs.
    Recent { rows: i64 },
}

/// How many times the pool a [`Walk::Recent`] window is expected to hold.
pub const NEWEST_COVER: usize = 4;

impl Walk {
    /// The cheaper walk to `pool` newest matches of a term held by `docs`
    /// of `span` turns: its postings cost `docs` rows, a window of the
    /// newest turns `NEWEST_COVER × pool × span / docs`. Either is at most
    /// about `sqrt(NEWEST_COVER × pool × span)` rows, so the cost grows with
    /// the square root of the scope, not with it. The window is an
    /// approximation: matches older than it are not seen.
    pub fn for_newest(docs: usize, span: usize, pool: usize) -> Self {
        let window = (NEWEST_COVER * pool * span).div_ceil(docs.max(1)).max(pool);
        if window < docs {
            Walk::Recent {
                rows: window as i64,
            }
        } else {
            Walk::Postings
        }
    }
}

/// The document count of each of `$3` (folded terms) in the scope of
/// (`$1`, `$2`), in order: the count of the term's lexeme (the `english`
/// stemming documents get) in `term_docs`; no row at all when the scope is
/// absent. The second column is the id span of the scope's turns (two
/// probes of `turns_by_scope`), which [`Walk::for_newest`] weighs.
fn count_sql() -> String {
    format!(
        "SELECT coalesce((SELECT max(d.docs) FROM term_docs d
                          WHERE d.scope_id = s.id
                            AND d.lexeme = ANY(tsvector_to_array(
                                to_tsvector('{TEXT_SEARCH_CONFIG}', q.term)))), 0),
                coalesce((SELECT max(id) FROM turns WHERE scope_id = s.id)
                         - (SELECT min(id) FROM turns WHERE scope_id = s.id) + 1, 0)
         FROM (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2) s,
              unnest($3::text[]) WITH ORDINALITY AS q(term, ord)
         ORDER BY q.ord"
    )
}

/// The plan for counted terms, in query order (see the module doc), in a
/// scope whose turns span `span` ids; `None` when no term occurs in the scope.
pub fn choose(counted: &[(usize, &str)], span: usize) -> Option<Plan> {
    let mut present: Vec<(usize, &str)> = counted.iter().copied().filter(|(n, _)| *n > 0).collect();
    if present.is_empty() {
        return None;
    }
    // Stable: equally common terms keep their query order, as in `local`.
    present.sort_by_key(|(n, _)| *n);
    let mut kept = Vec::new();
    let mut total = 0;
    for (n, term) in &present {
        if total + n > POSTINGS_BUDGET {
            break;
        }
        total += n;
        kept.push(*term);
    }
    if !kept.is_empty() {
        return Some(Plan::Scored(any_of(&kept)));
    }
    let (rarest_docs, rarest_term) = present[0];
    let (first, fallback) = match present.get(1) {
        Some((_, second)) => (all_of(&[rarest_term, second]), Some(quoted(rarest_term))),
        None => (quoted(rarest_term), None),
    };
    Some(Plan::Newest {
        first,
        fallback,
        rarest_docs,
        span,
    })
}

impl PostgresBackend {
    /// Plans `terms` in `scope`: reads their counts (one statement), then
    /// [`choose`]s.
    pub(crate) async fn plan(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        terms: &[String],
    ) -> Result<Option<Plan>> {
        let rows = self
            .rows(c, &count_sql(), &[&scope.user, &scope.peer, &terms])
            .await?;
        if rows.is_empty() {
            return Ok(None); // no such scope: nothing stored yet
        }
        let counted: Vec<(usize, &str)> = rows
            .iter()
            .zip(terms)
            .map(|(row, term)| (row.get::<_, i64>(0).max(0) as usize, term.as_str()))
            .collect();
        let span = rows[0].get::<_, i64>(1).max(0) as usize;
        Ok(choose(&counted, span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_terms_are_dropped_and_rare_ones_kept_within_the_budget() {
        assert_eq!(choose(&[(0, "a"), (0, "b")], 10), None);
        assert_eq!(
            choose(
                &[(500, "common"), (0, "absent"), (3, "rare"), (90, "mid")],
                1000
            ),
            Some(Plan::Scored("'rare' | 'mid' | 'common'".to_owned()))
        );
        // 3 + 90 + 550 is over the budget: the most common term is left out.
        assert_eq!(
            choose(&[(550, "common"), (3, "rare"), (90, "mid")], 1000),
            Some(Plan::Scored("'rare' | 'mid'".to_owned()))
        );
    }

    #[test]
    fn only_common_terms_take_the_newest_with_the_two_rarest() {
        assert_eq!(
            choose(&[(605, "x"), (601, "y"), (700, "z")], 5000),
            Some(Plan::Newest {
                first: "'y' & 'x'".to_owned(),
                fallback: Some("'y'".to_owned()),
                rarest_docs: 601,
                span: 5000,
            })
        );
        assert_eq!(
            choose(&[(601, "x")], 700),
            Some(Plan::Newest {
                first: "'x'".to_owned(),
                fallback: None,
                rarest_docs: 601,
                span: 700,
            })
        );
    }

    #[test]
    fn newest_walks_read_the_fewer_rows() {
        // 700 of 1 000 000 turns: the postings (700 rows) beat a window of
        // 4 × 30 × 1e6 / 700 ≈ 171 429 rows.
        assert_eq!(Walk::for_newest(700, 1_000_000, 30), Walk::Postings);
        // 200 000 of 1 000 000: a window of 600 newest rows.
        assert_eq!(
            Walk::for_newest(200_000, 1_000_000, 30),
            Walk::Recent { rows: 600 }
        );
        // Never a window smaller than the pool.
        assert_eq!(
            Walk::for_newest(1_000_000, 1_000, 30),
            Walk::Recent { rows: 30 }
        );
        assert_eq!(Walk::for_newest(5, 10, 30), Walk::Postings);
    }
}
