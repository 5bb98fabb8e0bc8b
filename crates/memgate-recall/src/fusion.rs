//! Score fusion of hybrid recall, shared by both stores memgate owns
//! (`local` and `postgres`): pure arithmetic over a lexical ranking and a
//! dense neighbour list, so both fuse the same way and only load rows their
//! own way.
//!
//! Items are recall-index ids (turn `n`, memory `-n`). [`fuse`] combines the
//! two lists ([`Fusion::Score`], the default: the lexical score divided by
//! the best lexical score of the query, plus `lambda` times the cosine
//! similarity scaled so the nearest item gets 1 and the last of the dense
//! pool 0; or [`Fusion::Rank`], reciprocal rank) and names the dense hits the
//! lexical list missed; the store loads those (with its scope and state
//! checks), [`Fused::add`]s them, takes [`Fused::ranked`] and re-orders it
//! with [`crate::rerank::rerank_fused`].

use crate::citation::item_citation;
use crate::ranked::Ranked;
use std::collections::HashMap;

/// How the lexical and the dense list are combined.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "fusion", rename_all = "snake_case")]
pub enum Fusion {
    /// `lexical / best lexical + lambda × scaled cosine` (module doc).
    Score { lambda: f64 },
    /// `1 / (RRF_K + lexical rank) + dense_weight / (RRF_K + dense rank)`.
    Rank { dense_weight: f64 },
}

impl std::fmt::Display for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Score { lambda } => write!(f, "score fusion, lambda {lambda}"),
            Self::Rank { dense_weight } => write!(f, "rank fusion, dense weight {dense_weight}"),
        }
    }
}

/// Reciprocal-rank constant (the usual 60: ranks beyond the first few
/// differ little).
pub const RRF_K: f64 = 60.0;

/// What hybrid recall uses, followed by [`crate::rerank::Rerank::DEFAULT`].
/// Under that re-ordering lambda 0.6 reads turn R@10 0.765 / session R@10
/// 0.925 on the LoCoMo development split with all-MiniLM-L6-v2, against
/// 0.760 / 0.921 at 0.5 and 0.761 / 0.922 at 0.75 (`memgate eval locomo`;
/// docs/design/hybrid-recall.md).
pub const DEFAULT_FUSION: Fusion = Fusion::Score { lambda: 0.6 };

/// How many nearest items the dense side brings, as a multiple of the
/// lexical candidate pool ([`crate::ranked::candidate_pool`]). With score fusion it
/// also sets the dense scale's floor (the last of the dense pool scores 0).
/// Pools of 2 and 4 measured within noise of 1 (`memgate eval locomo`).
pub const DEFAULT_DENSE_POOL: usize = 1;

/// The fused candidates, and the dense hits still to be loaded.
pub struct Fused {
    entries: HashMap<String, (f64, Ranked)>,
    /// Dense hits the lexical list missed, with their fused score: the
    /// backend loads each (same scope, state and category checks as a
    /// lexical hit) and [`Fused::add`]s it; one it cannot load is left out.
    pub missing: Vec<(i64, f64)>,
}

impl Fused {
    /// Enters a loaded dense hit with the score [`fuse`] gave it.
    pub fn add(&mut self, score: f64, entry: Ranked) {
        self.entries
            .entry(entry.citation.clone())
            .or_insert((score, entry));
    }

    /// Best first (ties by citation), at most `top_k`.
    pub fn ranked(self, top_k: usize) -> Vec<Ranked> {
        let mut out: Vec<Ranked> = self
            .entries
            .into_values()
            .map(|(score, mut r)| {
                r.score = score;
                r
            })
            .collect();
        out.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.citation.cmp(&b.citation))
        });
        out.truncate(top_k);
        out
    }
}

/// Fuses `lexical` (best first) with `dense` (the nearest items best first,
/// with their cosine); `similarity` holds the cosine of lexical hits that
/// have a vector.
pub fn fuse(
    lexical: Vec<Ranked>,
    dense: &[(i64, f32)],
    similarity: &HashMap<i64, f32>,
    fusion: Fusion,
) -> Fused {
    let mut fused = Fused {
        entries: HashMap::new(),
        missing: Vec::new(),
    };
    match fusion {
        Fusion::Rank { dense_weight } => {
            for (i, r) in lexical.into_iter().enumerate() {
                let score = 1.0 / (RRF_K + (i + 1) as f64);
                fused.entries.insert(r.citation.clone(), (score, r));
            }
            for (i, (item, _)) in dense.iter().enumerate() {
                let score = dense_weight / (RRF_K + (i + 1) as f64);
                match fused.entries.get_mut(&item_citation(*item)) {
                    Some(entry) => entry.0 += score,
                    None => fused.missing.push((*item, score)),
                }
            }
        }
        Fusion::Score { lambda } => {
            let best = lexical.first().map_or(0.0, |r| r.score);
            let n = lexical.len().max(1) as f64;
            // The dense scale: nearest 1, last of the pool 0.
            let top = dense.first().map_or(0.0, |d| f64::from(d.1));
            let floor = dense.last().map_or(0.0, |d| f64::from(d.1));
            let scaled = |cos: f32| {
                if top > floor {
                    ((f64::from(cos) - floor) / (top - floor)).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            };
            for (i, r) in lexical.into_iter().enumerate() {
                // A newest-first list (all terms common) has no usable
                // scores: its order counts instead.
                let lex = if best > 0.0 {
                    (r.score / best).max(0.0)
                } else {
                    1.0 - i as f64 / n
                };
                let cos = r.item().and_then(|item| similarity.get(&item).copied());
                let score = lex + lambda * cos.map_or(0.0, scaled);
                fused.entries.insert(r.citation.clone(), (score, r));
            }
            for (item, cos) in dense {
                // A lexical hit counted its cosine already.
                if !fused.entries.contains_key(&item_citation(*item)) {
                    fused.missing.push((*item, lambda * scaled(*cos)));
                }
            }
        }
    }
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::turn;

    #[test]
    fn score_fusion_adds_scaled_cosines_and_names_dense_only_hits() {
        let lexical = vec![turn(1, 2.0), turn(2, 1.0)];
        let dense = [(3, 0.9), (2, 0.5), (4, 0.1)];
        let similarity = HashMap::from([(2, 0.5)]);
        let mut fused = fuse(lexical, &dense, &similarity, Fusion::Score { lambda: 0.5 });
        // Turn 3 (nearest: scaled 1) and turn 4 (last of the pool: 0) are
        // not lexical hits; turn 2 is, so it is not loaded again.
        assert_eq!(fused.missing, [(3, 0.5), (4, 0.0)]);
        fused.add(0.5, turn(3, 0.0));
        let got = fused.ranked(10);
        let cited: Vec<&str> = got.iter().map(|r| r.citation.as_str()).collect();
        assert_eq!(cited, ["turn_1", "turn_2", "turn_3"]);
        // 1: 2/2; 2: 1/2 + 0.5 × (0.5 - 0.1) / 0.8; 3: 0.5 × 1.
        for (r, want) in got.iter().zip([1.0, 0.75, 0.5]) {
            assert!((r.score - want).abs() < 1e-6, "{} {}", r.citation, r.score);
        }
    }

    #[test]
    fn rank_fusion_adds_reciprocal_ranks() {
        let fused = fuse(
            vec![turn(1, 9.0), turn(2, 8.0)],
            &[(2, 0.9)],
            &HashMap::new(),
            Fusion::Rank { dense_weight: 1.0 },
        );
        assert!(fused.missing.is_empty());
        let got = fused.ranked(1);
        assert_eq!(got[0].citation, "turn_2");
        assert!((got[0].score - (1.0 / (RRF_K + 2.0) + 1.0 / (RRF_K + 1.0))).abs() < 1e-12);
    }
}
