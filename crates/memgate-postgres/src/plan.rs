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
//! holding the rarest alone, without scores. The counts are exact, so a
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
    },
}

/// The document count of each of `$3` (folded terms) in the scope of
/// (`$1`, `$2`), in order: the count of the term's lexeme (the `english`
/// stemming documents get) in `term_docs`; no row at all when the scope is
/// absent.
fn count_sql() -> String {
    format!(
        "SELECT coalesce((SELECT max(d.docs) FROM term_docs d
                          WHERE d.scope_id = s.id
                            AND d.lexeme = ANY(tsvector_to_array(
                                to_tsvector('{TEXT_SEARCH_CONFIG}', q.term)))), 0)
         FROM (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2) s,
              unnest($3::text[]) WITH ORDINALITY AS q(term, ord)
         ORDER BY q.ord"
    )
}

/// The plan for counted terms, in query order (see the module doc); `None`
/// when no term occurs in the scope.
pub fn choose(counted: &[(usize, &str)]) -> Option<Plan> {
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
    let rarest = quoted(present[0].1);
    Some(match present.get(1) {
        Some((_, second)) => Plan::Newest {
            first: all_of(&[present[0].1, second]),
            fallback: Some(rarest),
        },
        None => Plan::Newest {
            first: rarest,
            fallback: None,
        },
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
        Ok(choose(&counted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_terms_are_dropped_and_rare_ones_kept_within_the_budget() {
        assert_eq!(choose(&[(0, "a"), (0, "b")]), None);
        assert_eq!(
            choose(&[(500, "common"), (0, "absent"), (3, "rare"), (90, "mid")]),
            Some(Plan::Scored("'rare' | 'mid' | 'common'".to_owned()))
        );
        // 3 + 90 + 550 is over the budget: the most common term is left out.
        assert_eq!(
            choose(&[(550, "common"), (3, "rare"), (90, "mid")]),
            Some(Plan::Scored("'rare' | 'mid'".to_owned()))
        );
    }

    #[test]
    fn only_common_terms_take_the_newest_with_the_two_rarest() {
        assert_eq!(
            choose(&[(601, "x"), (601, "y"), (601, "z")]),
            Some(Plan::Newest {
                first: "'x' & 'y'".to_owned(),
                fallback: Some("'x'".to_owned())
            })
        );
        assert_eq!(
            choose(&[(601, "x")]),
            Some(Plan::Newest {
                first: "'x'".to_owned(),
                fallback: None
            })
        );
    }
}
