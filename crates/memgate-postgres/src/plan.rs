//! Query planning: `local`'s step 0 ([`memgate_recall::ranked`]) on
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
//! holding the rarest alone, without scores. Those newest turns are reached
//! by whichever [`Walk`] is expected to read fewer rows: the matches'
//! postings, or the scope's newest turns walked backwards until enough match
//! (the matches of two terms estimated from their counts). Either gives the
//! same turns. The counts are exact, so a term that retire or forget made
//! rare again is planned as rare at once.

use crate::backend::{PostgresBackend, Scope};
use crate::terms::{all_of, any_of, quoted, TEXT_SEARCH_CONFIG};
use deadpool_postgres::GenericClient;
use memgate_core::Result;
pub use memgate_recall::ranked::POSTINGS_BUDGET;

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
        /// How many hold the second rarest (`first` names both), if any.
        second_docs: Option<usize>,
        /// The id span of the scope's turns (≥ their number).
        span: usize,
    },
}

impl Plan {
    /// The walks of a [`Plan::Newest`] to `pool` turns: for `first` and for
    /// `fallback`. Two terms' matches are estimated as if independent
    /// (`rarest × second / span`); when they are fewer, the window walk
    /// finds too few, and the postings are read after all (exact either
    /// way, only slower).
    pub fn newest_walks(&self, pool: usize) -> Option<(Walk, Walk)> {
        let Plan::Newest {
            rarest_docs,
            second_docs,
            span,
            ..
        } = *self
        else {
            return None;
        };
        let rarest = Walk::for_newest(rarest_docs as f64, span, pool);
        let first = match second_docs {
            Some(second) => Walk::for_newest(
                rarest_docs as f64 * second as f64 / span.max(1) as f64,
                span,
                pool,
            ),
            None => rarest,
        };
        Some((first, rarest))
    }
}

/// How a newest-first plan reaches its turns: whichever reads fewer rows.
/// Both give the newest `pool` matches: a window that holds fewer is
/// followed by the postings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Walk {
    /// The index: every posting of the plan's terms, the newest matches
    /// kept. Each match costs a heap fetch at a scattered page.
    Postings,
    /// The scope's newest turns backwards, each tested, stopping at the
    /// pool's worth of matches or after `rows` turns: [`NEWEST_COVER`]
    /// times the rows expected to hold the pool. Consecutive turns share
    /// pages, so a walked row is cheaper than a fetched match.
    Recent { rows: i64 },
}

/// How many times the rows expected to hold the pool a [`Walk::Recent`]
/// may walk before it gives up for the postings.
pub const NEWEST_COVER: usize = 4;

/// How many walked rows cost what one fetched match does: at a million
/// turns, 0.55 µs per walked row against 4-6 µs per fetched match
/// (`EXPLAIN ANALYZE`; docs/design/postgres.md).
pub const WALKED_ROWS_PER_FETCH: f64 = 8.0;

impl Walk {
    /// The cheaper walk to the `pool` newest of `matches` (expected) among
    /// `span` turns: the postings fetch every match; a window walks about
    /// `pool × span / matches` rows, [`WALKED_ROWS_PER_FETCH`] of them the
    /// price of one fetch. Either costs at most about
    /// `sqrt(pool × span / WALKED_ROWS_PER_FETCH)` fetches, so the cost
    /// grows with the square root of the scope, not with it.
    pub fn for_newest(matches: f64, span: usize, pool: usize) -> Self {
        if matches < 1.0 {
            return Walk::Postings;
        }
        let expected = (pool as f64 * span as f64 / matches).max(pool as f64);
        if expected / WALKED_ROWS_PER_FETCH < matches {
            Walk::Recent {
                rows: (NEWEST_COVER as f64 * expected).ceil() as i64,
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
    let (first, fallback, second_docs) = match present.get(1) {
        Some((n, second)) => (
            all_of(&[rarest_term, second]),
            Some(quoted(rarest_term)),
            Some(*n),
        ),
        None => (quoted(rarest_term), None, None),
    };
    Some(Plan::Newest {
        first,
        fallback,
        rarest_docs,
        second_docs,
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
                second_docs: Some(605),
                span: 5000,
            })
        );
        assert_eq!(
            choose(&[(601, "x")], 700),
            Some(Plan::Newest {
                first: "'x'".to_owned(),
                fallback: None,
                rarest_docs: 601,
                second_docs: None,
                span: 700,
            })
        );
    }

    #[test]
    fn newest_walks_read_the_fewer_rows() {
        // 700 of 1 000 000 turns: fetching 700 beats walking ~71 000.
        assert_eq!(Walk::for_newest(700.0, 1_000_000, 50), Walk::Postings);
        // 200 000 of 1 000 000: ~250 rows hold the pool; walk up to 4 ×.
        assert_eq!(
            Walk::for_newest(200_000.0, 1_000_000, 50),
            Walk::Recent { rows: 1000 }
        );
        // Never a window smaller than the pool's.
        assert_eq!(
            Walk::for_newest(1_000_000.0, 1_000, 50),
            Walk::Recent { rows: 200 }
        );
        assert_eq!(Walk::for_newest(5.0, 10, 50), Walk::Postings);
        assert_eq!(Walk::for_newest(0.0, 10, 50), Walk::Postings);
    }

    #[test]
    fn a_pair_is_walked_by_its_estimated_matches_its_rarest_alone_by_its_count() {
        // 10 000 and 800 000 of 1 000 000: ~8 000 together, ~6 250 rows
        // hold the pool of 50: walking beats fetching 8 000.
        let plan = choose(&[(800_000, "common"), (10_000, "rarer")], 1_000_000).unwrap();
        let (first, rarest) = plan.newest_walks(50).unwrap();
        assert_eq!(first, Walk::Recent { rows: 25_000 });
        assert_eq!(rarest, Walk::Recent { rows: 20_000 });
        // 2 000 and 3 000: ~6 together, so their postings; 2 000 alone
        // would take 25 000 rows to hold the pool: fetch the 2 000.
        let plan = choose(&[(3_000, "a"), (2_000, "b")], 1_000_000).unwrap();
        assert_eq!(
            plan.newest_walks(50),
            Some((Walk::Postings, Walk::Postings))
        );
        assert_eq!(Plan::Scored("'a'".into()).newest_walks(50), None);
    }
}
