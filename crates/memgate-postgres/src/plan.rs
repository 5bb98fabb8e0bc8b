//! Query planning: `local`'s step 0 ([`memgate_recall::ranked`]) on
//! PostgreSQL, so a recall never walks a common term's whole posting list.
//!
//! Each query term's document count in the scope (turns plus active
//! memories) is read from `term_docs` (schema migration 2, kept exact by
//! triggers in every writing transaction), one index lookup per term in one
//! statement, with the scope's totals from `scope_docs` (migration 8).
//! Terms absent from the scope are dropped. The rarest terms are walked
//! (their postings read) while their counts together stay within
//! [`MAXSCORE_BUDGET`], as `local`'s MaxScore walks them; every present
//! term, the common ones too, is scored at the walked documents by BM25
//! ([`Bm25`]), without reading the common terms' postings. When even the
//! rarest term is over the budget the query has no discriminating word: the
//! newest documents holding the two rarest terms together are taken, else
//! those holding the rarest alone, without scores. Those newest turns are reached
//! by whichever [`Walk`] is expected to read fewer rows: the matches'
//! postings, or the scope's newest turns walked backwards until enough match
//! (the matches of two terms estimated from their counts). Either gives the
//! same turns. The counts are exact, so a term that retire or forget made
//! rare again is planned as rare at once.

use crate::backend::{PostgresBackend, Scope};
use crate::terms::{all_of, any_of, quoted, TEXT_SEARCH_CONFIG};
use deadpool_postgres::GenericClient;
use memgate_core::Result;
pub use memgate_recall::ranked::MAXSCORE_BUDGET;

/// BM25's k1 and b, FTS5's (so `local` and `postgres` score alike).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// What the ranking asks PostgreSQL for (a `to_tsquery` input each).
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// BM25 over the documents matching any of these uncommon terms.
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

/// BM25 in a scope for a query's present terms: each lexeme's idf (FTS5's:
/// `ln((N - n + 0.5) / (n + 0.5))`, at least 1e-6) and the scope's average
/// document length, in distinct lexemes (`length(search)`). A document's
/// score ([`crate::recall`]) sums, per lexeme it holds, `idf × tf × (k1 + 1)
/// / (tf + k1 × (1 - b + b × len / avg_len))`, with `tf` 1.0 when the lexeme
/// is in the body and 0.5 when only in the context, as `local` weighs its
/// columns. A repeated word counts once: reading each row's positions
/// (`unnest(tsvector)`) cost three to four times the walk itself, and a
/// captured turn seldom repeats a query word (docs/design/lexical-pruning.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Bm25 {
    pub lexemes: Vec<String>,
    pub idf: Vec<f64>,
    pub avg_len: f64,
}

impl Bm25 {
    /// `counted`: (document count, lexeme) of the present terms; `docs` and
    /// `lexemes`: the scope's totals. A lexeme two terms share counts once.
    pub fn new(counted: &[(usize, &str)], docs: usize, lexemes: usize) -> Self {
        let n = docs.max(1) as f64;
        let mut out = Bm25 {
            lexemes: Vec::new(),
            idf: Vec::new(),
            avg_len: (lexemes as f64 / n).max(1.0),
        };
        for (df, lexeme) in counted.iter().filter(|(df, _)| *df > 0) {
            if out.lexemes.iter().any(|l| l == lexeme) {
                continue;
            }
            let df = *df as f64;
            out.lexemes.push((*lexeme).to_owned());
            out.idf.push(((n - df + 0.5) / (df + 0.5)).ln().max(1e-6));
        }
        out
    }

    /// The SQL of a document's score, for a row `m` with `search`, for
    /// this query's lexemes: `$5` (text[]), their idfs `$6` (float8[]) and
    /// the average length `$7`. One `CASE` per lexeme, each testing the
    /// lexeme's `tsquery` (parsed once per statement, an InitPlan): a
    /// per-row subquery over `unnest` parsed every lexeme again at every
    /// row and cost more than the walk itself at 1M items
    /// (docs/design/lexical-pruning.md). Lexemes are letters and digits
    /// ([`crate::terms`]), so each is a `tsquery` as it stands.
    pub fn score_sql(&self) -> String {
        if self.lexemes.is_empty() {
            // The statement still names its parameters' types.
            return "(0 * $7::float8 + 0 * cardinality($5::text[]) + 0 * cardinality($6::float8[]))"
                .to_owned();
        }
        let norm = format!(
            "({K1} * ({one_minus_b} + {B} * length(m.search) / $7::float8))",
            one_minus_b = 1.0 - B
        );
        let terms: Vec<String> = (1..=self.lexemes.len())
            .map(|i| {
                format!(
                    "CASE WHEN NOT m.search @@ (SELECT (($5::text[])[{i}])::tsquery) THEN 0
                          WHEN m.search @@ (SELECT (($5::text[])[{i}] || ':A')::tsquery)
                          THEN ($6::float8[])[{i}] * {full} / (1.0 + {norm})
                          ELSE ($6::float8[])[{i}] * {half} / (0.5 + {norm}) END",
                    full = K1 + 1.0,
                    half = 0.5 * (K1 + 1.0),
                )
            })
            .collect();
        format!("({})", terms.join(" + "))
    }
}

/// The document count of each of `$3` (folded terms) in the scope of
/// (`$1`, `$2`), in order: the count of the term's lexeme (the `english`
/// stemming documents get) in `term_docs`, and that lexeme; no row at all
/// when the scope is absent. Then, the same on every row: the id span of
/// the scope's turns (two probes of `turns_by_scope`), which
/// [`Walk::for_newest`] weighs, and the scope's document and lexeme totals
/// ([`Bm25`]).
fn count_sql() -> String {
    format!(
        "SELECT coalesce(c.docs, 0), c.lexeme,
                coalesce((SELECT max(id) FROM turns WHERE scope_id = s.id)
                         - (SELECT min(id) FROM turns WHERE scope_id = s.id) + 1, 0),
                coalesce(t.docs, 0), coalesce(t.lexemes, 0)
         FROM (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2) s
              LEFT JOIN scope_docs t ON t.scope_id = s.id,
              unnest($3::text[]) WITH ORDINALITY AS q(term, ord)
              LEFT JOIN LATERAL (
                  SELECT d.docs, d.lexeme FROM term_docs d
                  WHERE d.scope_id = s.id
                    AND d.lexeme = ANY(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', q.term)))
                  ORDER BY d.docs DESC LIMIT 1) c ON true
         ORDER BY q.ord"
    )
}

/// The plan for counted terms, in query order (see the module doc), in a
/// scope whose turns span `span` ids; `None` when no term occurs in the
/// scope. The walked terms' counts stay within [`MAXSCORE_BUDGET`].
pub fn choose(counted: &[(usize, &str)], span: usize) -> Option<Plan> {
    choose_within(counted, span, MAXSCORE_BUDGET)
}

/// [`choose`] with the walked terms' counts within `budget`.
pub fn choose_within(counted: &[(usize, &str)], span: usize, budget: usize) -> Option<Plan> {
    let mut present: Vec<(usize, &str)> = counted.iter().copied().filter(|(n, _)| *n > 0).collect();
    if present.is_empty() {
        return None;
    }
    // Stable: equally common terms keep their query order, as in `local`.
    present.sort_by_key(|(n, _)| *n);
    let mut kept = Vec::new();
    let mut total = 0;
    for (n, term) in &present {
        if total + n > budget {
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
    /// Plans `terms` in `scope`: reads their counts and the scope's totals
    /// (one statement), then [`choose_within`] `budget`, with the BM25
    /// weights of every present term.
    pub(crate) async fn plan(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        terms: &[String],
        budget: usize,
    ) -> Result<Option<(Plan, Bm25)>> {
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
        let lexemes: Vec<(usize, String)> = rows
            .iter()
            .filter_map(|row| {
                let lexeme: Option<String> = row.get(1);
                Some((row.get::<_, i64>(0).max(0) as usize, lexeme?))
            })
            .collect();
        let lexemes: Vec<(usize, &str)> = lexemes.iter().map(|(n, l)| (*n, l.as_str())).collect();
        let span = rows[0].get::<_, i64>(2).max(0) as usize;
        let (docs, total) = (rows[0].get::<_, i64>(3), rows[0].get::<_, i64>(4));
        let bm25 = Bm25::new(&lexemes, docs.max(0) as usize, total.max(0) as usize);
        Ok(choose_within(&counted, span, budget).map(|plan| (plan, bm25)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_terms_are_dropped_and_rare_ones_walked_within_the_budget() {
        assert_eq!(choose(&[(0, "a"), (0, "b")], 10), None);
        assert_eq!(
            choose(
                &[(1500, "common"), (0, "absent"), (3, "rare"), (90, "mid")],
                5000
            ),
            Some(Plan::Scored("'rare' | 'mid' | 'common'".to_owned()))
        );
        // 3 + 90 + 1950 is over the budget: the most common term is not
        // walked (it is still scored: Bm25 holds every present term).
        assert_eq!(
            choose(&[(1950, "common"), (3, "rare"), (90, "mid")], 5000),
            Some(Plan::Scored("'rare' | 'mid'".to_owned()))
        );
    }

    #[test]
    fn only_common_terms_take_the_newest_with_the_two_rarest() {
        assert_eq!(
            choose(&[(2005, "x"), (2001, "y"), (2100, "z")], 5000),
            Some(Plan::Newest {
                first: "'y' & 'x'".to_owned(),
                fallback: Some("'y'".to_owned()),
                rarest_docs: 2001,
                second_docs: Some(2005),
                span: 5000,
            })
        );
        assert_eq!(
            choose(&[(2001, "x")], 2100),
            Some(Plan::Newest {
                first: "'x'".to_owned(),
                fallback: None,
                rarest_docs: 2001,
                second_docs: None,
                span: 2100,
            })
        );
    }

    #[test]
    fn bm25_weighs_rare_lexemes_above_common_ones_and_counts_a_shared_lexeme_once() {
        let bm25 = Bm25::new(
            &[(5, "harbour"), (900, "day"), (0, "absent"), (5, "harbour")],
            1000,
            20_000,
        );
        assert_eq!(bm25.lexemes, ["harbour", "day"]);
        assert!(bm25.idf[0] > 4.0 * bm25.idf[1], "{bm25:?}");
        // A lexeme in most documents still weighs a little, never less than nothing.
        assert_eq!(Bm25::new(&[(999, "the")], 1000, 1).idf, [1e-6]);
        assert_eq!(bm25.avg_len, 20.0);
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
        // 2 500 and 3 000: ~7.5 together, so their postings; 2 500 alone
        // would take 20 000 rows to hold the pool: fetch the 2 500.
        let plan = choose(&[(3_000, "a"), (2_500, "b")], 1_000_000).unwrap();
        assert_eq!(
            plan.newest_walks(50),
            Some((Walk::Postings, Walk::Postings))
        );
        assert_eq!(Plan::Scored("'a'".into()).newest_walks(50), None);
    }
}
