//! Exact top-k BM25 without scoring every match: MaxScore (Turtle & Flood).
//!
//! A document's BM25 score is a sum of one part per query term, and no
//! part can exceed its term's [`term_bound`] (`idf × (k1 + 1)`, whatever
//! the term frequency and document length). So with the query's terms
//! ordered rarest first, and the `k` best documents among those holding
//! one of the first `e` terms already scored in full (every term's part,
//! the common ones' included), a document holding none of those `e` terms
//! scores at most the sum of the remaining terms' bounds: once that sum is
//! no more than the `k`-th best score, the `k` best are the exact top `k`.
//! Until then, the rarest remaining terms are added ([`essential_terms`]).
//!
//! Only the walk over the first `e` terms' postings costs in proportion to
//! their length; the other terms are looked up at those documents only.

/// BM25's term-frequency saturation, as in SQLite FTS5's `bm25()`.
pub const K1: f64 = 1.2;
/// BM25's length normalisation, as in SQLite FTS5's `bm25()`.
pub const B: f64 = 0.75;

/// The inverse document frequency of a term found in `docs` of `rows`
/// documents, exactly as FTS5's `bm25()` computes it (never below 1e-6).
pub fn idf(rows: i64, docs: i64) -> f64 {
    let idf = ((rows - docs) as f64 + 0.5) / (docs as f64 + 0.5);
    let idf = idf.ln();
    if idf <= 0.0 {
        1e-6
    } else {
        idf
    }
}

/// The most one term adds to a document's BM25 score: its part
/// `idf × f × (k1 + 1) / (f + k1 × (1 − b + b × len / avg))` tends to
/// `idf × (k1 + 1)` as its frequency `f` grows and is always below it.
pub fn term_bound(idf: f64) -> f64 {
    idf * (K1 + 1.0)
}

/// How many of the terms (their bounds given rarest first) must be walked
/// so that a document holding none of them scores at most `threshold`:
/// the smallest `e` with `sum(bounds[e..]) <= threshold`.
pub fn essential_terms(bounds: &[f64], threshold: f64) -> usize {
    let mut rest: f64 = bounds.iter().sum();
    for (e, bound) in bounds.iter().enumerate() {
        if rest <= threshold {
            return e;
        }
        rest -= bound;
    }
    bounds.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idf_is_fts5s_and_never_below_its_floor() {
        assert!((idf(1000, 9) - (991.5f64 / 9.5).ln()).abs() < 1e-12);
        assert_eq!(idf(10, 9), 1e-6);
        assert_eq!(idf(10, 10), 1e-6);
    }

    #[test]
    fn a_terms_part_never_reaches_its_bound() {
        let bound = term_bound(2.0);
        for f in [0.5, 1.0, 3.0, 100.0] {
            for ratio in [0.0, 0.5, 1.0, 4.0] {
                let part = 2.0 * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * ratio));
                assert!(part < bound, "f {f}, len/avg {ratio}");
            }
        }
    }

    #[test]
    fn essential_terms_are_the_fewest_whose_rest_stays_under_the_threshold() {
        let bounds = [5.0, 3.0, 2.0, 1.0];
        assert_eq!(essential_terms(&bounds, 11.0), 0);
        assert_eq!(essential_terms(&bounds, 6.0), 1);
        assert_eq!(essential_terms(&bounds, 3.0), 2);
        assert_eq!(essential_terms(&bounds, 1.0), 3);
        assert_eq!(essential_terms(&bounds, 0.5), 4);
        assert_eq!(essential_terms(&bounds, 0.0), 4);
        assert_eq!(essential_terms(&[], 0.0), 0);
    }
}
