//! Query planning: `local`'s step 0 ([`memgate_store::ranking`]) on
//! PostgreSQL, so a recall never walks a common term's whole posting list.
//!
//! Each query term's document count in the scope (active memories plus
//! turns) is measured in one statement, each count stopping at
//! [`POSTINGS_BUDGET`] + 1 per table. Terms absent from the scope are
//! dropped; the rarest terms are kept while their counts together stay
//! within the budget, and the most common are left out (they carry the
//! least weight). When even the rarest term is over the budget the query has
//! no discriminating word: the newest documents holding the two rarest terms
//! together are taken, else those holding the rarest alone, without scores.
//! Terms seen over the budget are remembered per scope ([`CommonTerms`]) and
//! not counted again, as `local` does: a term only becomes rarer through
//! retire or forget, and forget clears what this replica remembered.

use crate::backend::{PostgresBackend, Scope};
use crate::terms::{all_of, any_of, quoted, TEXT_SEARCH_CONFIG};
use deadpool_postgres::GenericClient;
use memgate_core::Result;
pub use memgate_store::ranking::POSTINGS_BUDGET;
use std::collections::HashSet;
use std::sync::Mutex;

/// Most (scope, term) verdicts [`CommonTerms`] keeps before it starts over.
const MAX_COMMON_TERMS: usize = 100_000;

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

/// (user, peer, term) triples known to match more than [`POSTINGS_BUDGET`]
/// documents of their scope.
#[derive(Debug, Default)]
pub struct CommonTerms(Mutex<HashSet<(String, String, String)>>);

impl CommonTerms {
    fn key(scope: &Scope, term: &str) -> (String, String, String) {
        (scope.user.clone(), scope.peer.clone(), term.to_owned())
    }

    fn contains(&self, scope: &Scope, term: &str) -> bool {
        self.lock().contains(&Self::key(scope, term))
    }

    fn insert(&self, scope: &Scope, term: &str) {
        let mut set = self.lock();
        if set.len() >= MAX_COMMON_TERMS {
            set.clear();
        }
        set.insert(Self::key(scope, term));
    }

    /// Forgets every verdict (after an erasure made terms rarer).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String, String)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counts each of `$3` (quoted terms) in the scope of (`$1`, `$2`), each
/// table stopping at the budget + 1; no row at all when the scope is absent.
fn count_sql() -> String {
    let over = POSTINGS_BUDGET + 1;
    let q = format!("to_tsquery('{TEXT_SEARCH_CONFIG}', q.term)");
    format!(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM turns
                    WHERE scope_id = s.id AND search @@ {q} LIMIT {over}) t)
              + (SELECT count(*) FROM (SELECT 1 FROM memories
                    WHERE scope_id = s.id AND state = 'active' AND search @@ {q} LIMIT {over}) m)
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
    /// Plans `terms` in `scope`: counts the terms not already known to be
    /// common (one statement), remembers the common ones, then [`choose`]s.
    pub(crate) async fn plan(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        terms: &[String],
    ) -> Result<Option<Plan>> {
        let over = POSTINGS_BUDGET + 1;
        let unknown: Vec<String> = terms
            .iter()
            .filter(|t| !self.common.contains(scope, t))
            .map(|t| quoted(t))
            .collect();
        let mut counts = std::collections::HashMap::new();
        if !unknown.is_empty() {
            let rows = self
                .rows(c, &count_sql(), &[&scope.user, &scope.peer, &unknown])
                .await?;
            if rows.is_empty() {
                return Ok(None); // no such scope: nothing stored yet
            }
            for (row, term) in rows.iter().zip(&unknown) {
                let n = (row.get::<_, i64>(0) as usize).min(over);
                counts.insert(&term[1..term.len() - 1], n);
            }
        }
        let counted: Vec<(usize, &str)> = terms
            .iter()
            .map(|t| {
                let n = counts.get(t.as_str()).copied().unwrap_or(over);
                if n > POSTINGS_BUDGET {
                    self.common.insert(scope, t);
                }
                (n, t.as_str())
            })
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
