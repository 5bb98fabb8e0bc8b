//! The re-ordering recall applies to the fused pool (both stores):
//! named-speaker preference, thread evidence, then thread coverage, and the
//! top `top_k`.
//!
//! Each step was kept because it moved LoCoMo's turn and session recall
//! together and its neighbours in a grid did too (leave-one-conversation-out
//! agrees); the alternatives measured beside it, and why they were
//! rejected, are in docs/design/recall-reordering.md.

use crate::ranked::{Origin, Placed, Ranked};
use std::collections::HashMap;

/// How the fused pool is re-ordered: each weight 0 turns its step off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rerank {
    /// [`prefer_named_speaker`]'s factor.
    pub named_speaker: f64,
    /// [`add_thread_evidence`]'s weight.
    pub thread_evidence: f64,
    /// [`cover_threads`]' weight.
    pub coverage: f64,
}

impl Rerank {
    /// The fused list as it is.
    pub const NONE: Self = Self {
        named_speaker: 0.0,
        thread_evidence: 0.0,
        coverage: 0.0,
    };

    /// What recall uses (local and postgres alike): the turns of the one
    /// speaker the query names count 1.4×, every turn gains half its
    /// thread's best score, and a turn of a thread not yet in the list
    /// counts 1.5×. The centre of a grid (with the fusion's lambda) whose
    /// one-step neighbours but one also read turn R@10 ≥ 0.75 and session
    /// R@10 ≥ 0.92 on the LoCoMo development split with all-MiniLM-L6-v2:
    /// 0.765 / 0.925 against 0.747 / 0.900 as fused.
    pub const DEFAULT: Self = Self::NONE
        .named_speaker(0.4)
        .thread_evidence(0.5)
        .coverage(0.5);

    pub const fn named_speaker(self, factor: f64) -> Self {
        Self {
            named_speaker: factor,
            ..self
        }
    }

    pub const fn thread_evidence(self, weight: f64) -> Self {
        Self {
            thread_evidence: weight,
            ..self
        }
    }

    pub const fn coverage(self, weight: f64) -> Self {
        Self {
            coverage: weight,
            ..self
        }
    }
}

impl std::fmt::Display for Rerank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.named_speaker > 0.0 {
            parts.push(format!("named speaker {}", self.named_speaker));
        }
        if self.thread_evidence > 0.0 {
            parts.push(format!(
                "thread evidence (best of its thread) {}",
                self.thread_evidence
            ));
        }
        if self.coverage > 0.0 {
            parts.push(format!("thread coverage {}", self.coverage));
        }
        if parts.is_empty() {
            parts.push("as fused".to_owned());
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// Re-orders `ranked` (every fused candidate, best first) for `query`:
/// named-speaker preference, thread evidence, then thread coverage, and
/// the top `top_k`. Both stores run [`Rerank::DEFAULT`] through it, so
/// they rank alike.
pub fn rerank_fused(
    mut ranked: Vec<Ranked>,
    query: &str,
    rerank: &Rerank,
    top_k: usize,
) -> Vec<Ranked> {
    prefer_named_speaker(&mut ranked, query, rerank.named_speaker);
    if rerank.thread_evidence > 0.0 {
        add_thread_evidence(&mut ranked, rerank.thread_evidence);
    }
    if rerank.coverage > 0.0 {
        return cover_threads(ranked, rerank.coverage, top_k);
    }
    ranked.truncate(top_k);
    ranked
}

/// The one speaker of `ranked` (the fused pool) that `query` names, as a
/// whole word or run of words, any case (`Melanie`, `melanie's`, `Ana
/// Silva`); none when it names no speaker of the pool or more than one
/// (then the question is about what they share, and no side is preferred).
pub fn named_speaker<'a>(query: &str, ranked: &'a [Ranked]) -> Option<&'a str> {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let asked = words(query);
    let mut speakers: Vec<&str> = ranked
        .iter()
        .filter_map(|r| match &r.origin {
            Origin::Turn {
                speaker: Some(s), ..
            } => Some(s.as_str()),
            _ => None,
        })
        .collect();
    speakers.sort_unstable();
    speakers.dedup();
    let mut named = speakers.into_iter().filter(|s| {
        let name = words(s);
        !name.is_empty() && asked.windows(name.len()).any(|w| w == name.as_slice())
    });
    match (named.next(), named.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// Named-speaker preference (part of [`Rerank::DEFAULT`]): when the query
/// names one speaker of the pool, that speaker's turns count `(1 +
/// factor)` × their fused score, then the list is sorted again (ties by
/// citation). A question about a person is mostly answered by what that
/// person said: on the LoCoMo development split 644 of the 762 scored
/// questions name one speaker and have all their evidence in that
/// speaker's turns, and the lexical side sees the name only as context of
/// every one of them.
pub fn prefer_named_speaker(ranked: &mut [Ranked], query: &str, factor: f64) {
    if factor <= 0.0 {
        return;
    }
    let Some(named) = named_speaker(query, ranked).map(str::to_owned) else {
        return;
    };
    for r in ranked.iter_mut() {
        if let Origin::Turn {
            speaker: Some(s), ..
        } = &r.origin
        {
            if *s == named {
                r.score *= 1.0 + factor;
            }
        }
    }
    sort_fused(ranked);
}

/// Best first, ties by citation: the order of every fused list.
fn sort_fused(ranked: &mut [Ranked]) {
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.citation.cmp(&b.citation))
    });
}

/// Thread evidence: every turn gains `weight` × the best fused score of
/// its thread in `ranked` (the fused pool, its own included), then the
/// pool is sorted again. A turn in a conversation that is about the
/// question is likelier to be evidence.
pub fn add_thread_evidence(ranked: &mut [Ranked], weight: f64) {
    let mut best: HashMap<&str, f64> = HashMap::new();
    for r in ranked.iter() {
        if let Some((thread, _)) = r.place() {
            let b = best.entry(thread).or_insert(f64::MIN);
            if r.score > *b {
                *b = r.score;
            }
        }
    }
    let bonus: Vec<f64> = ranked
        .iter()
        .map(|r| match r.place() {
            Some((thread, _)) => weight * best[thread].max(0.0),
            None => 0.0,
        })
        .collect();
    for (r, b) in ranked.iter_mut().zip(bonus) {
        r.score += b;
    }
    sort_fused(ranked);
}

/// Thread coverage: the top `top_k` are picked one at a time, a candidate
/// whose thread has no turn picked yet counting `(1 + weight)` × its
/// score. The gain of covering a new thread is in proportion to its own
/// evidence. `ranked` is every fused candidate, best first.
pub fn cover_threads(ranked: Vec<Ranked>, weight: f64, top_k: usize) -> Vec<Ranked> {
    pick_by_thread(ranked, top_k, |r, picked| match (&r.origin, picked) {
        (Origin::Turn { .. }, 0) => r.score * (1.0 + weight),
        _ => r.score,
    })
}

/// Picks the top `top_k` one at a time, each by its `adjusted` score given
/// how many turns of its thread are already picked (0 for memories); ties
/// go to the smaller citation. A picked item keeps its adjusted score.
fn pick_by_thread(
    ranked: Vec<Ranked>,
    top_k: usize,
    adjusted: impl Fn(&Ranked, usize) -> f64,
) -> Vec<Ranked> {
    // Each candidate's thread as a small number, found once: the picks
    // below score every candidate left for every place (recall's path).
    let mut threads: HashMap<&str, usize> = HashMap::new();
    let thread_of: Vec<Option<usize>> = ranked
        .iter()
        .map(|r| match &r.origin {
            Origin::Turn { thread, .. } => {
                let next = threads.len();
                Some(*threads.entry(thread.as_str()).or_insert(next))
            }
            Origin::Memory => None,
        })
        .collect();
    let mut picked_in = vec![0usize; threads.len()];
    drop(threads);
    let mut left: Vec<Option<Ranked>> = ranked.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(top_k);
    while out.len() < top_k {
        let mut best: Option<(usize, f64)> = None;
        for (i, r) in left.iter().enumerate() {
            let Some(r) = r else { continue };
            let picked = thread_of[i].map_or(0, |t| picked_in[t]);
            let score = adjusted(r, picked);
            let better = best.is_none_or(|(b, bs)| {
                score.total_cmp(&bs).then_with(|| {
                    let held = left[b].as_ref().map(|h| h.citation.as_str());
                    held.cmp(&Some(r.citation.as_str()))
                }) == std::cmp::Ordering::Greater
            });
            if better {
                best = Some((i, score));
            }
        }
        let Some((i, score)) = best else { break };
        let mut r = left[i]
            .take()
            .unwrap_or_else(|| unreachable!("chosen among the ones left"));
        r.score = score;
        if let Some(t) = thread_of[i] {
            picked_in[t] += 1;
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::turn;

    /// A fused turn of `thread`.
    fn in_thread(id: i64, score: f64, thread: &str) -> Ranked {
        let mut r = turn(id, score);
        if let Origin::Turn { thread: t, .. } = &mut r.origin {
            *t = thread.into();
        }
        r
    }

    fn said_by(id: i64, score: f64, thread: &str, who: &str) -> Ranked {
        let mut r = in_thread(id, score, thread);
        if let Origin::Turn { speaker, .. } = &mut r.origin {
            *speaker = Some(who.into());
        }
        r
    }

    fn order(ranked: &[Ranked]) -> Vec<i64> {
        ranked.iter().filter_map(Ranked::item).collect()
    }

    #[test]
    fn a_speaker_is_named_by_whole_words_in_any_case_and_only_alone() {
        let pool = vec![
            said_by(1, 1.0, "a", "Melanie"),
            said_by(2, 0.9, "a", "Caroline"),
            said_by(3, 0.8, "b", "Ana Silva"),
            turn(4, 0.7),
        ];
        let named = |q: &str| named_speaker(q, &pool);
        assert_eq!(
            named("What activities does Melanie partake in?"),
            Some("Melanie")
        );
        assert_eq!(named("what did melanie's sister say"), Some("Melanie"));
        assert_eq!(named("Where does ANA SILVA live?"), Some("Ana Silva"));
        // A name inside another word, or half of a two-word name, is not a mention.
        assert_eq!(named("Did Melanies bring it?"), None);
        assert_eq!(named("Where does Ana live?"), None);
        // Two speakers named: a question about both prefers neither.
        assert_eq!(named("When did Melanie and Caroline meet?"), None);
        assert_eq!(named("What is the weather?"), None);
        // Only speakers of the pool count.
        assert_eq!(named_speaker("Melanie", &pool[1..]), None);
    }

    #[test]
    fn the_named_speakers_turns_count_more_and_nothing_else_moves() {
        let pool = vec![
            said_by(1, 1.0, "a", "Caroline"),
            said_by(2, 0.9, "a", "Melanie"),
            said_by(3, 0.8, "b", "Caroline"),
            said_by(4, 0.6, "b", "Melanie"),
            turn(5, 0.5),
        ];
        let mut ranked = pool.clone();
        prefer_named_speaker(&mut ranked, "Where has Melanie camped?", 0.4);
        // 0.9 × 1.4 = 1.26 and 0.6 × 1.4 = 0.84 pass 1.0 and 0.8.
        assert_eq!(order(&ranked), vec![2, 1, 4, 3, 5]);
        assert!((ranked[0].score - 1.26).abs() < 1e-12);
        assert!((ranked[1].score - 1.0).abs() < 1e-12);
        assert!((ranked[4].score - 0.5).abs() < 1e-12);
        // No name, two names, or a factor of 0: the pool as it was.
        for (query, factor) in [
            ("Where has she camped?", 0.4),
            ("Did Melanie camp with Caroline?", 0.4),
            ("Where has Melanie camped?", 0.0),
        ] {
            let mut same = pool.clone();
            prefer_named_speaker(&mut same, query, factor);
            assert_eq!(same, pool, "{query} / {factor}");
        }
    }

    #[test]
    fn the_default_reordering_prefers_the_speaker_then_spreads_over_threads() {
        // Thread "a" holds the two best turns, by Caroline; the question
        // names Melanie, whose turns are in "a" and "b".
        let pool = vec![
            said_by(1, 1.0, "a", "Caroline"),
            said_by(2, 0.95, "a", "Caroline"),
            said_by(3, 0.7, "a", "Melanie"),
            said_by(4, 0.6, "b", "Melanie"),
            said_by(5, 0.5, "c", "Caroline"),
        ];
        let as_fused = rerank_fused(pool.clone(), "Where has Melanie camped?", &Rerank::NONE, 3);
        assert_eq!(order(&as_fused), vec![1, 2, 3]);
        let got = rerank_fused(pool, "Where has Melanie camped?", &Rerank::DEFAULT, 3);
        // Speaker: 3 → 0.98, 4 → 0.84. Evidence (half the thread's best):
        // "a" +0.5, "b" +0.42, "c" +0.25. Coverage picks 1 (1.5 × 1.5),
        // then "b"'s 4 at 1.26 × 1.5 = 1.89 over 3 (1.48) and 2 (1.45),
        // then 3, which the speaker put ahead of 2.
        assert_eq!(order(&got), vec![1, 4, 3]);
    }

    #[test]
    fn thread_coverage_scales_a_new_thread_by_its_own_score() {
        // "a": 1.0, 0.9; "b": 0.7, 0.5.
        let ranked = vec![
            in_thread(1, 1.0, "a"),
            in_thread(2, 0.9, "a"),
            in_thread(3, 0.7, "b"),
            in_thread(4, 0.5, "b"),
        ];
        let cited =
            |r: &[Ranked]| -> Vec<String> { r.iter().map(|r| r.citation.clone()).collect() };
        // Weight 0.5: turn 1 counts 1.5 (a new thread); then turn 3 counts
        // 0.7 × 1.5 = 1.05 against turn 2's 0.9 (its thread is covered).
        let got = cover_threads(ranked.clone(), 0.5, 4);
        assert_eq!(cited(&got), ["turn_1", "turn_3", "turn_2", "turn_4"]);
        let scores: Vec<f64> = got.iter().map(|r| r.score).collect();
        for (got, want) in scores.iter().zip([1.5, 1.05, 0.9, 0.5]) {
            assert!((got - want).abs() < 1e-9, "{scores:?}");
        }
        // Weight 0.2: 0.7 × 1.2 = 0.84 < 0.9, the order stays.
        let kept = cover_threads(ranked, 0.2, 3);
        assert_eq!(cited(&kept), ["turn_1", "turn_2", "turn_3"]);
    }

    #[test]
    fn thread_evidence_lifts_the_turns_of_a_thread_with_evidence() {
        let placed = |id: i64, score: f64, thread: &str, seq: i64| {
            let mut r = turn(id, score);
            if let Origin::Turn {
                thread: t, seq: s, ..
            } = &mut r.origin
            {
                (*t, *s) = (thread.into(), seq);
            }
            r
        };
        // Thread "a": turn 1 (1.0, seq 1), turn 2 (0.5, seq 2); thread "b":
        // turn 3 (0.6, seq 1).
        let pool = || {
            vec![
                placed(1, 1.0, "a", 1),
                placed(3, 0.6, "b", 1),
                placed(2, 0.5, "a", 2),
            ]
        };
        let order =
            |r: &[Ranked]| -> Vec<String> { r.iter().map(|r| r.citation.clone()).collect() };
        let mut best = pool();
        add_thread_evidence(&mut best, 0.5);
        // 2: 0.5 + 0.5 × 1.0 passes 3: 0.6 + 0.5 × 0.6.
        assert_eq!(order(&best), ["turn_1", "turn_2", "turn_3"]);
        let scores: Vec<f64> = best.iter().map(|r| r.score).collect();
        for (got, want) in scores.iter().zip([1.5, 1.0, 0.9]) {
            assert!((got - want).abs() < 1e-9, "{scores:?}");
        }
        // Weight 0 keeps the order.
        let mut same = pool();
        add_thread_evidence(&mut same, 0.0);
        assert_eq!(order(&same), ["turn_1", "turn_3", "turn_2"]);
    }
}
