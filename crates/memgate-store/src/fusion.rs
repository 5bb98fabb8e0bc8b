//! Score fusion of hybrid recall, shared by every store backend (`local`
//! and `postgres`): pure arithmetic over a lexical ranking and a dense
//! neighbour list, so both backends fuse the same way and only load rows
//! their own way.
//!
//! Items are recall-index ids (turn `n`, memory `-n`), the encoding both
//! backends use. [`fuse`] combines the two lists ([`Fusion::Score`], the
//! default: the lexical score divided by the best lexical score of the query,
//! plus `lambda` times the cosine similarity scaled so the nearest item gets
//! 1 and the last of the dense pool 0; or [`Fusion::Rank`], reciprocal rank)
//! and names the dense hits the lexical list missed; the backend loads those
//! (with its scope and state checks), [`Fused::add`]s them, takes
//! [`Fused::ranked`] and re-orders it with [`rerank_fused`]
//! ([`Rerank::DEFAULT`]).

use crate::ranking::{item_citation, Ranked};
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

/// What hybrid recall uses, followed by [`Rerank::DEFAULT`]. Lambda 0.5
/// led the fusions `memgate eval locomo` compares ([`EVALUATED_FUSIONS`])
/// on the LoCoMo development split with all-MiniLM-L6-v2 by turn recall@10
/// alone (0.747, session 0.900; lexical 0.674 / 0.886); under the default
/// re-ordering 0.6 does better (0.765 / 0.925 against 0.760 / 0.921 at
/// 0.5 and 0.761 / 0.922 at 0.75; notes/recall.md, session 16).
pub const DEFAULT_FUSION: Fusion = Fusion::Score { lambda: 0.6 };

/// The fusion sessions 6–15 recalled with (lambda 0.5, no re-ordering):
/// the evaluation's grids of those sessions re-order it, so their figures
/// stay comparable with what they printed then.
pub const EXPLORED_FUSION: Fusion = Fusion::Score { lambda: 0.5 };

/// How many nearest items the dense side brings, as a multiple of the
/// lexical candidate pool (`ranking::candidate_pool`). With score fusion it
/// also sets the dense scale's floor (the last of the dense pool scores 0).
/// Pools of 2 and 4 measured within noise of 1 (notes/recall.md).
pub const DEFAULT_DENSE_POOL: usize = 1;

/// The variants the LoCoMo evaluation measures side by side, as (fusion,
/// dense pool multiple): one query embedding each question, so the
/// comparison costs one encoder pass.
pub const EVALUATED_FUSIONS: &[(Fusion, usize)] = &[
    (Fusion::Rank { dense_weight: 0.35 }, 1),
    (Fusion::Score { lambda: 0.25 }, 1),
    (Fusion::Score { lambda: 0.5 }, 1),
    (Fusion::Score { lambda: 1.0 }, 1),
    (Fusion::Score { lambda: 0.5 }, 2),
    (Fusion::Score { lambda: 0.5 }, 4),
    (Fusion::Score { lambda: 1.0 }, 4),
];

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

/// Thread diversity (an evaluated variant, not the default): the top
/// `top_k` are picked one at a time, each candidate's score lowered by
/// `weight` × the best score for every turn of its thread already picked,
/// so the list spreads over more threads (the LoCoMo session figure counts
/// the threads — sessions — of the top 10; adding the scores of a thread
/// instead, measured first, lost 0.05 of it). The first `head` places are
/// taken by score alone (a relevance head, a diverse tail: the penalty
/// over the whole list cost turn recall). `ranked` is every fused
/// candidate, best first.
pub fn diversify_threads(
    ranked: Vec<Ranked>,
    weight: f64,
    head: usize,
    top_k: usize,
) -> Vec<Ranked> {
    let best = ranked.first().map_or(0.0, |r| r.score);
    pick_by_thread(ranked, top_k, |r, place, picked| {
        if place < head {
            r.score
        } else {
            r.score - weight * best * picked as f64
        }
    })
}

/// Thread coverage (an evaluated variant): the top `top_k` are picked
/// one at a time, a candidate whose thread has no turn picked yet counting
/// `(1 + weight × gain)` × its score, `gain` being its thread's in `gains`
/// (in [0, 1], e.g. [`unit_scaled`] session dense scores, so the coverage
/// places go to the sessions most like the question) or 1 without
/// `gains`. The gain of covering a new thread is in proportion to its own
/// evidence, where [`diversify_threads`] takes the same amount from every
/// later turn of a covered thread whatever its score. `ranked` is every
/// fused candidate, best first.
pub fn cover_threads(
    ranked: Vec<Ranked>,
    weight: f64,
    top_k: usize,
    gains: Option<&HashMap<String, f64>>,
) -> Vec<Ranked> {
    pick_by_thread(ranked, top_k, |r, _, picked| match (&r.origin, picked) {
        (crate::ranking::Origin::Turn { thread, .. }, 0) => {
            let gain = gains.map_or(1.0, |g| g.get(thread).copied().unwrap_or(0.0));
            r.score * (1.0 + weight * gain)
        }
        _ => r.score,
    })
}

/// Picks the top `top_k` one at a time, each by its `adjusted` score given
/// the place being filled and how many turns of its thread are already
/// picked (0 for memories); ties go to the smaller citation. A picked
/// item keeps its adjusted score.
fn pick_by_thread(
    ranked: Vec<Ranked>,
    top_k: usize,
    adjusted: impl Fn(&Ranked, usize, usize) -> f64,
) -> Vec<Ranked> {
    // Each candidate's thread as a small number, found once: the picks
    // below score every candidate left for every place (recall's path).
    let mut threads: HashMap<&str, usize> = HashMap::new();
    let thread_of: Vec<Option<usize>> = ranked
        .iter()
        .map(|r| match &r.origin {
            crate::ranking::Origin::Turn { thread, .. } => {
                let next = threads.len();
                Some(*threads.entry(thread.as_str()).or_insert(next))
            }
            crate::ranking::Origin::Memory => None,
        })
        .collect();
    let mut picked_in = vec![0usize; threads.len()];
    drop(threads);
    let mut left: Vec<Option<Ranked>> = ranked.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(top_k);
    while out.len() < top_k {
        let place = out.len();
        let mut best: Option<(usize, f64)> = None;
        for (i, r) in left.iter().enumerate() {
            let Some(r) = r else { continue };
            let picked = thread_of[i].map_or(0, |t| picked_in[t]);
            let score = adjusted(r, place, picked);
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

/// Evaluated re-orderings of the fused list and dense feedback, beside the
/// default (none of them: [`Rerank::NONE`]); `memgate eval locomo`
/// measures each against it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rerank {
    /// [`diversify_threads`] weight and head (weight 0: off).
    pub diversity: (f64, usize),
    /// Dense feedback ([`feedback_query`]): how many of the best fused hits
    /// and their weight (0 hits: off).
    pub feedback: (usize, f32),
    /// [`add_thread_evidence`] (weight 0: off).
    pub thread_evidence: (ThreadEvidence, f64),
    /// [`cover_threads`] weight (0: off; it replaces diversity).
    pub coverage: f64,
    /// Lexical feedback ([`feedback_terms`], [`add_feedback_pass`]): how
    /// many of the best fused hits, how many terms, and the weight of the
    /// second lexical pass (0 hits: off).
    pub lexical_feedback: (usize, usize, f64),
    /// [`add_thread_match`] weight (0: off).
    pub thread_match: f64,
    /// Session dense score: how a thread's score is read and the weight
    /// each of its pooled turns gains of it, unit-scaled ([`unit_scaled`],
    /// added by [`add_thread_match`]; 0: off).
    pub session_dense: (SessionDense, f64),
    /// Thread coverage's gain per thread ([`cover_threads`]): the same for
    /// every thread, or its unit-scaled session dense score.
    pub coverage_by_session_dense: bool,
    /// Lexical feedback's documents: the best fused hits (false), or the
    /// lexical list's best hit and the dense side's nearest item (one
    /// document when they are the same turn).
    pub lexical_feedback_from_both_sides: bool,
    /// [`prefer_named_speaker`] factor (0: off).
    pub named_speaker: f64,
}

impl Rerank {
    /// The default: the fused list as it is.
    pub const NONE: Self = Self {
        diversity: (0.0, 0),
        feedback: (0, 0.0),
        thread_evidence: (ThreadEvidence::Best, 0.0),
        coverage: 0.0,
        lexical_feedback: (0, 0, 0.0),
        thread_match: 0.0,
        session_dense: (SessionDense::Centroid, 0.0),
        coverage_by_session_dense: false,
        lexical_feedback_from_both_sides: false,
        named_speaker: 0.0,
    };

    /// What recall uses (local and postgres alike): the turns of the one
    /// speaker the query names count 1.4×, every turn gains half its
    /// thread's best score (thread evidence, best), and a turn of a thread
    /// not yet in the list counts 1.5× (thread coverage 0.5). Chosen with
    /// [`DEFAULT_FUSION`] on the LoCoMo development split with
    /// all-MiniLM-L6-v2 (recipe r3) as the centre of a grid whose eight
    /// one-step neighbours but one meet both of issue 11's aims: turn
    /// R@10 0.747 → 0.765, session 0.900 → 0.925, MRR 0.549 → 0.578
    /// (notes/recall.md, session 16, with the leave-one-out figures).
    pub const DEFAULT: Self = Self::NONE
        .named_speaker(0.4)
        .thread_evidence(ThreadEvidence::Best, 0.5)
        .coverage(0.5);

    pub const fn named_speaker(self, factor: f64) -> Self {
        Self {
            named_speaker: factor,
            ..self
        }
    }

    /// True when a thread's session dense score is needed.
    pub const fn needs_session_dense(&self) -> bool {
        self.session_dense.1 > 0.0 || (self.coverage > 0.0 && self.coverage_by_session_dense)
    }

    pub const fn session_dense(self, kind: SessionDense, weight: f64) -> Self {
        Self {
            session_dense: (kind, weight),
            ..self
        }
    }

    /// [`Self::coverage`] with the session dense score (of
    /// [`Self::session_dense`]'s kind) as each thread's gain.
    pub const fn coverage_by_session_dense(self, weight: f64) -> Self {
        Self {
            coverage: weight,
            coverage_by_session_dense: true,
            ..self
        }
    }

    /// [`Self::lexical_feedback`] from the lexical and the dense side's
    /// best hit (the first `hits` is 1 or 2 documents whatever is given).
    pub const fn lexical_feedback_from_both_sides(self, terms: usize, weight: f64) -> Self {
        Self {
            lexical_feedback: (1, terms, weight),
            lexical_feedback_from_both_sides: true,
            ..self
        }
    }

    pub const fn thread_match(self, weight: f64) -> Self {
        Self {
            thread_match: weight,
            ..self
        }
    }

    pub const fn lexical_feedback(self, hits: usize, terms: usize, weight: f64) -> Self {
        Self {
            lexical_feedback: (hits, terms, weight),
            ..self
        }
    }

    pub const fn coverage(self, weight: f64) -> Self {
        Self {
            coverage: weight,
            ..self
        }
    }

    pub const fn diversity(self, weight: f64, head: usize) -> Self {
        Self {
            diversity: (weight, head),
            ..self
        }
    }

    pub const fn feedback(self, hits: usize, weight: f32) -> Self {
        Self {
            feedback: (hits, weight),
            ..self
        }
    }

    pub const fn thread_evidence(self, evidence: ThreadEvidence, weight: f64) -> Self {
        Self {
            thread_evidence: (evidence, weight),
            ..self
        }
    }
}

impl std::fmt::Display for Rerank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.lexical_feedback.0 > 0 {
            let (hits, terms, weight) = self.lexical_feedback;
            let of = if self.lexical_feedback_from_both_sides {
                "the lexical and the dense best hit".to_owned()
            } else {
                format!("the top {hits}")
            };
            parts.push(format!(
                "lexical feedback: {terms} terms of {of}, weight {weight}"
            ));
        }
        if self.named_speaker > 0.0 {
            parts.push(format!("named speaker {}", self.named_speaker));
        }
        if self.thread_match > 0.0 {
            parts.push(format!("session term match {}", self.thread_match));
        }
        if self.session_dense.1 > 0.0 {
            let (kind, weight) = self.session_dense;
            parts.push(format!("session dense ({kind}) {weight}"));
        }
        if self.feedback.0 > 0 {
            parts.push(format!(
                "dense feedback from the top {}, weight {}",
                self.feedback.0, self.feedback.1
            ));
        }
        if self.thread_evidence.1 > 0.0 {
            parts.push(format!(
                "thread evidence ({}) {}",
                self.thread_evidence.0, self.thread_evidence.1
            ));
        }
        if self.coverage > 0.0 && self.coverage_by_session_dense {
            let kind = self.session_dense.0;
            parts.push(format!(
                "thread coverage {} by session dense ({kind})",
                self.coverage
            ));
        } else if self.coverage > 0.0 {
            parts.push(format!("thread coverage {}", self.coverage));
        }
        match self.diversity {
            (w, _) if w <= 0.0 => {}
            (w, 0) => parts.push(format!("thread diversity {w}")),
            (w, head) => parts.push(format!("thread diversity {w} after the first {head}")),
        }
        if parts.is_empty() {
            parts.push("as fused".to_owned());
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// Dense pseudo-relevance feedback (Rocchio on the query vector):
/// `normalise(query + weight × mean of hits)`. A question whose evidence
/// shares little with it but much with its best hits (multi-hop: the
/// other half of the answer is about the same person or event) is moved
/// towards them; one more dense pass over the loaded vectors searches
/// with it. No hits (or a zero sum) keep the query.
pub fn feedback_query(query: &[f32], hits: &[Vec<f32>], weight: f32) -> Vec<f32> {
    let hits: Vec<&Vec<f32>> = hits.iter().filter(|h| h.len() == query.len()).collect();
    if hits.is_empty() {
        return query.to_vec();
    }
    let share = weight / hits.len() as f32;
    let mut moved = query.to_vec();
    for h in hits {
        for (m, x) in moved.iter_mut().zip(h.iter()) {
            *m += share * x;
        }
    }
    let norm = moved.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        moved.iter_mut().for_each(|x| *x /= norm);
        moved
    } else {
        query.to_vec()
    }
}

/// Lexical pseudo-relevance feedback (RM3-like), the terms: each of the
/// best fused `hits` (score, text) is a feedback document with weight in
/// proportion to its score, each of its terms weighs its share of the
/// document (term count / document length), and a term's feedback weight
/// (the sum over the documents) is multiplied by its rarity in the scope,
/// `ln(1 + budget / documents)` (`documents` counts the scope's documents
/// holding it, no further than `budget` + 1; a term over the budget, or in
/// none, is left out: the lexical planner would drop it). The query's own
/// terms and terms of fewer than three characters are left out. At most
/// `n`, best first (ties by term); only the `4 n` best by feedback weight
/// are counted. The multi-hop question's other half is often said in
/// words its first hits share with it (the person, the event), not in the
/// question's words.
pub fn feedback_terms<E>(
    hits: &[(f64, &str)],
    query: &str,
    n: usize,
    budget: usize,
    mut documents: impl FnMut(&str) -> Result<usize, E>,
) -> Result<Vec<String>, E> {
    let asked: std::collections::HashSet<String> = crate::terms::terms(query).into_iter().collect();
    let total: f64 = hits.iter().map(|(s, _)| s.max(0.0)).sum();
    if n == 0 || total <= 0.0 {
        return Ok(Vec::new());
    }
    let mut weight: HashMap<String, f64> = HashMap::new();
    for (score, text) in hits {
        let terms = crate::terms::terms(text);
        let share = score.max(0.0) / total / terms.len().max(1) as f64;
        for t in terms {
            if t.chars().count() >= 3 && !asked.contains(&t) {
                *weight.entry(t).or_default() += share;
            }
        }
    }
    let best_first = |v: &mut Vec<(String, f64)>| {
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    };
    let mut candidates: Vec<(String, f64)> = weight.into_iter().collect();
    best_first(&mut candidates);
    candidates.truncate(4 * n);
    let mut scored = Vec::with_capacity(candidates.len());
    for (term, w) in candidates {
        let df = documents(&term)?;
        if (1..=budget).contains(&df) {
            scored.push((term, w * (1.0 + budget as f64 / df as f64).ln()));
        }
    }
    best_first(&mut scored);
    Ok(scored.into_iter().take(n).map(|(t, _)| t).collect())
}

/// Lexical feedback, the second pass ranked in (RM3's interpolation of
/// the query with its feedback model): every entry's score becomes
/// `(1 - weight) × score / best + weight × feedback score / best feedback
/// score` (0 for the list it is not in), best first (ties by citation).
/// Interpolated rather than added, so the list's best stays near 1 and
/// [`fuse`], which divides by it, keeps its balance with the dense side. A
/// lexical list without positive scores (a newest-first plan) is kept as
/// it is, and so is `lexical` when `feedback` has none or `weight` is
/// outside (0, 1).
pub fn add_feedback_pass(lexical: Vec<Ranked>, feedback: Vec<Ranked>, weight: f64) -> Vec<Ranked> {
    let best = lexical.first().map_or(0.0, |r| r.score);
    let best_feedback = feedback.first().map_or(0.0, |r| r.score);
    if best <= 0.0 || best_feedback <= 0.0 || weight <= 0.0 || weight >= 1.0 {
        return lexical;
    }
    let mut merged: HashMap<String, Ranked> = HashMap::new();
    for mut r in lexical {
        r.score = (1.0 - weight) * (r.score / best).max(0.0);
        merged.insert(r.citation.clone(), r);
    }
    for mut r in feedback {
        let gain = weight * (r.score / best_feedback).max(0.0);
        match merged.get_mut(&r.citation) {
            Some(entry) => entry.score += gain,
            None => {
                r.score = gain;
                merged.insert(r.citation.clone(), r);
            }
        }
    }
    let mut out: Vec<Ranked> = merged.into_values().collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.citation.cmp(&b.citation))
    });
    out
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
            crate::ranking::Origin::Turn {
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
        if let crate::ranking::Origin::Turn {
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

/// The re-orderings that need nothing but the fused pool (`ranked`, every
/// candidate best first) and the query, in their order: named-speaker
/// preference, thread evidence, then thread coverage (each thread's gain
/// from `gains` when given, see [`cover_threads`]) or diversity, and the
/// top `top_k`. Both backends run [`Rerank::DEFAULT`] through it, so they
/// rank alike; the local backend's evaluated feedback passes and session
/// scores come before it.
pub fn rerank_fused(
    mut ranked: Vec<Ranked>,
    query: &str,
    rerank: &Rerank,
    top_k: usize,
    gains: Option<&HashMap<String, f64>>,
) -> Vec<Ranked> {
    prefer_named_speaker(&mut ranked, query, rerank.named_speaker);
    let (evidence, evidence_weight) = rerank.thread_evidence;
    if evidence_weight > 0.0 {
        add_thread_evidence(&mut ranked, evidence, evidence_weight);
    }
    if rerank.coverage > 0.0 {
        return cover_threads(ranked, rerank.coverage, top_k, gains);
    }
    let (diversity, head) = rerank.diversity;
    if diversity > 0.0 {
        return diversify_threads(ranked, diversity, head, top_k);
    }
    ranked.truncate(top_k);
    ranked
}

/// What a thread's turns in the fused pool say for a turn of it
/// ([`add_thread_evidence`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadEvidence {
    /// The best fused score in the thread (the turn's own included).
    Best,
    /// The best fused score of the thread's other turns (0 when alone).
    BestOther,
    /// The fused scores of the turn before and after it (adjacency
    /// smoothing of the fused score, so the dense side's neighbours count
    /// too).
    Adjacent,
}

impl std::fmt::Display for ThreadEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Best => "best of its thread",
            Self::BestOther => "best other turn of its thread",
            Self::Adjacent => "its neighbours' fused scores",
        })
    }
}

/// Thread evidence (an evaluated variant): every turn gains `weight` × the
/// [`ThreadEvidence`] of its thread in `ranked` (the fused pool), then the
/// pool is sorted again. A turn in a conversation that is about the
/// question is likelier to be evidence.
pub fn add_thread_evidence(ranked: &mut [Ranked], evidence: ThreadEvidence, weight: f64) {
    use crate::ranking::Placed;
    // Best and second best score per thread, and scores by place.
    let mut best: HashMap<&str, (f64, f64)> = HashMap::new();
    let mut at: HashMap<(&str, i64), f64> = HashMap::new();
    for r in ranked.iter() {
        if let Some((thread, seq)) = r.place() {
            let b = best.entry(thread).or_insert((f64::MIN, f64::MIN));
            if r.score > b.0 {
                *b = (r.score, b.0);
            } else if r.score > b.1 {
                b.1 = r.score;
            }
            at.insert((thread, seq), r.score);
        }
    }
    let bonus: Vec<f64> = ranked
        .iter()
        .map(|r| {
            let Some((thread, seq)) = r.place() else {
                return 0.0;
            };
            let (first, second) = best[thread];
            let score = match evidence {
                ThreadEvidence::Best => first,
                ThreadEvidence::BestOther if r.score >= first => second,
                ThreadEvidence::BestOther => first,
                ThreadEvidence::Adjacent => {
                    let near = |s: i64| at.get(&(thread, s)).copied().unwrap_or(0.0);
                    near(seq - 1) + near(seq + 1)
                }
            };
            weight * score.max(0.0)
        })
        .collect();
    for (r, b) in ranked.iter_mut().zip(bonus) {
        r.score += b;
    }
    sort_fused(ranked);
}

/// Session term match (an evaluated signal): every turn gains `weight` ×
/// its thread's score in `matches` (`ranking::thread_matches`: the rarity
/// of the query's terms the whole session holds) over the best thread's,
/// then the list is sorted again (ties by citation). A session that holds
/// more of what the question names is likelier to be one it asks about,
/// even where no single turn holds much of it.
pub fn add_thread_match(ranked: &mut [Ranked], matches: &HashMap<String, f64>, weight: f64) {
    let best = matches.values().copied().fold(0.0, f64::max);
    if best <= 0.0 || weight <= 0.0 {
        return;
    }
    for r in ranked.iter_mut() {
        if let crate::ranking::Origin::Turn { thread, .. } = &r.origin {
            r.score += weight * matches.get(thread).copied().unwrap_or(0.0) / best;
        }
    }
    sort_fused(ranked);
}

/// How a thread's (session's) dense score is read: a session-level signal
/// beside the turns' own cosines (an evaluated variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionDense {
    /// The cosine of the query with the thread's centroid, the normalised
    /// mean of all its turns' vectors (not only the pooled ones): what the
    /// session as a whole is about.
    Centroid,
    /// The mean of the thread's best `k` cosines in the dense pool, each
    /// missing one counted as the pool's last cosine.
    TopTurns(usize),
}

impl std::fmt::Display for SessionDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Centroid => f.write_str("centroid"),
            Self::TopTurns(k) => write!(f, "mean of its top {k} pooled cosines"),
        }
    }
}

/// [`SessionDense::TopTurns`]: per thread of `ranked` (the fused pool), the
/// mean of its best `k` cosines in `dense` (the dense pool, best first),
/// the pool's last cosine standing in for each it lacks.
pub fn top_turn_similarity(
    ranked: &[Ranked],
    dense: &[(i64, f32)],
    k: usize,
) -> HashMap<String, f64> {
    let floor = dense.last().map_or(0.0, |d| f64::from(d.1));
    let cosine: HashMap<i64, f64> = dense.iter().map(|(i, c)| (*i, f64::from(*c))).collect();
    let mut best: HashMap<String, Vec<f64>> = HashMap::new();
    for r in ranked {
        if let crate::ranking::Origin::Turn { thread, .. } = &r.origin {
            let of_thread = best.entry(thread.clone()).or_default();
            if let Some(c) = r.item().and_then(|i| cosine.get(&i)) {
                of_thread.push(*c);
            }
        }
    }
    best.into_iter()
        .map(|(thread, mut cosines)| {
            let k = k.max(1);
            cosines.sort_by(|a, b| b.total_cmp(a));
            cosines.resize(k, floor);
            let mean = cosines.iter().sum::<f64>() / k as f64;
            (thread, mean)
        })
        .collect()
}

/// `scores` scaled to [0, 1] over the threads of `ranked` (the fused pool):
/// its best thread 1, its worst 0 (all 0 when they tie), like the dense
/// side's scale in [`fuse`]. Threads outside the pool are left out: the
/// scale is the pool's, whatever the scope's size.
pub fn unit_scaled(ranked: &[Ranked], scores: &HashMap<String, f64>) -> HashMap<String, f64> {
    let pooled: HashMap<&str, f64> = ranked
        .iter()
        .filter_map(|r| match &r.origin {
            crate::ranking::Origin::Turn { thread, .. } => {
                Some((thread.as_str(), *scores.get(thread)?))
            }
            crate::ranking::Origin::Memory => None,
        })
        .collect();
    let top = pooled.values().copied().fold(f64::MIN, f64::max);
    let floor = pooled.values().copied().fold(f64::MAX, f64::min);
    pooled
        .into_iter()
        .map(|(thread, s)| {
            let scaled = if top > floor {
                (s - floor) / (top - floor)
            } else {
                0.0
            };
            (thread.to_owned(), scaled)
        })
        .collect()
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
    use crate::ranking::{turn_citation, Origin, TURN_KIND};

    fn turn(id: i64, score: f64) -> Ranked {
        Ranked {
            citation: turn_citation(id),
            kind: TURN_KIND.to_owned(),
            text: format!("turn {id}"),
            score,
            origin: Origin::Turn {
                thread: "t".into(),
                seq: id,
                message_id: None,
                role: "human".into(),
                speaker: None,
                occurred_at: None,
            },
        }
    }

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
        let as_fused = rerank_fused(
            pool.clone(),
            "Where has Melanie camped?",
            &Rerank::NONE,
            3,
            None,
        );
        assert_eq!(order(&as_fused), vec![1, 2, 3]);
        let got = rerank_fused(pool, "Where has Melanie camped?", &Rerank::DEFAULT, 3, None);
        // Speaker: 3 → 0.98, 4 → 0.84. Evidence (half the thread's best):
        // "a" +0.5, "b" +0.42, "c" +0.25. Coverage picks 1 (1.5 × 1.5),
        // then "b"'s 4 at 1.26 × 1.5 = 1.89 over 3 (1.48) and 2 (1.45),
        // then 3, which the speaker put ahead of 2.
        assert_eq!(order(&got), vec![1, 4, 3]);
    }

    #[test]
    fn thread_diversity_lets_another_thread_in() {
        // Turns 1 and 2 in "a" (1.0, 0.9), turn 3 in "b" (0.8).
        let ranked = vec![
            in_thread(1, 1.0, "a"),
            in_thread(2, 0.9, "a"),
            in_thread(3, 0.8, "b"),
        ];
        let got = diversify_threads(ranked.clone(), 0.25, 0, 3);
        let cited: Vec<&str> = got.iter().map(|r| r.citation.as_str()).collect();
        // After turn 1, turn 2 counts 0.9 - 0.25 = 0.65 < 0.8.
        assert_eq!(cited, ["turn_1", "turn_3", "turn_2"]);
        assert!((got[2].score - 0.65).abs() < 1e-9);
        // Weight 0 keeps the order.
        let same = diversify_threads(ranked.clone(), 0.0, 0, 3);
        let cited: Vec<&str> = same.iter().map(|r| r.citation.as_str()).collect();
        assert_eq!(cited, ["turn_1", "turn_2", "turn_3"]);
        // A head of two: turn 2 is placed by its score before the penalty
        // starts.
        let headed = diversify_threads(ranked, 0.25, 2, 3);
        let cited: Vec<&str> = headed.iter().map(|r| r.citation.as_str()).collect();
        assert_eq!(cited, ["turn_1", "turn_2", "turn_3"]);
        assert!((headed[1].score - 0.9).abs() < 1e-9);
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
        let got = cover_threads(ranked.clone(), 0.5, 4, None);
        assert_eq!(cited(&got), ["turn_1", "turn_3", "turn_2", "turn_4"]);
        let scores: Vec<f64> = got.iter().map(|r| r.score).collect();
        for (got, want) in scores.iter().zip([1.5, 1.05, 0.9, 0.5]) {
            assert!((got - want).abs() < 1e-9, "{scores:?}");
        }
        // Weight 0.2: 0.7 × 1.2 = 0.84 < 0.9, the order stays.
        let kept = cover_threads(ranked, 0.2, 3, None);
        assert_eq!(cited(&kept), ["turn_1", "turn_2", "turn_3"]);
    }

    /// Scores by thread name.
    fn by_thread(scores: &[(&str, f64)]) -> HashMap<String, f64> {
        scores.iter().map(|(t, s)| ((*t).to_owned(), *s)).collect()
    }

    #[test]
    fn session_dense_by_top_turns_averages_a_threads_best_pooled_cosines() {
        // Pool: a holds items 1-3, b item 4, c item 7 (no dense cosine).
        let ranked = vec![
            in_thread(1, 1.0, "a"),
            in_thread(2, 0.9, "a"),
            in_thread(3, 0.8, "a"),
            in_thread(4, 0.7, "b"),
            in_thread(7, 0.6, "c"),
        ];
        let dense = [(1, 0.9), (4, 0.8), (2, 0.6), (3, 0.4), (6, 0.2)];
        let got = top_turn_similarity(&ranked, &dense, 2);
        let near = |t: &str, want: f64| (got[t] - want).abs() < 1e-6;
        // a: its two best (0.9, 0.6); b: 0.8 and the pool's last 0.2; c:
        // twice the floor.
        assert!(
            near("a", 0.75) && near("b", 0.5) && near("c", 0.2),
            "{got:?}"
        );
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn unit_scaled_puts_the_pools_best_thread_at_one_and_its_worst_at_zero() {
        let ranked = vec![
            in_thread(1, 1.0, "a"),
            in_thread(2, 0.9, "b"),
            in_thread(3, 0.8, "c"),
        ];
        let scores = by_thread(&[("a", 0.75), ("b", 0.5), ("c", 0.25), ("d", 0.9)]);
        let got = unit_scaled(&ranked, &scores);
        // d is not in the pool: neither scaled nor the scale's top.
        assert_eq!(got.len(), 3);
        assert!((got["a"] - 1.0).abs() < 1e-12 && (got["b"] - 0.5).abs() < 1e-12);
        assert_eq!(got["c"], 0.0);
        // Threads that tie say nothing: all 0.
        let tied = by_thread(&[("a", 0.3), ("b", 0.3), ("c", 0.3)]);
        assert!(unit_scaled(&ranked, &tied).values().all(|s| *s == 0.0));
    }

    #[test]
    fn coverage_by_session_dense_gives_the_places_to_the_sessions_most_like_the_question() {
        // b and c tie on their turns; c's session is like the question (gain
        // 1), b's is not (gain 0).
        let ranked = vec![
            in_thread(1, 1.0, "a"),
            in_thread(2, 0.9, "a"),
            in_thread(3, 0.7, "b"),
            in_thread(4, 0.7, "c"),
        ];
        let gains = by_thread(&[("a", 1.0), ("b", 0.0), ("c", 1.0)]);
        let cited =
            |r: &[Ranked]| -> Vec<String> { r.iter().map(|r| r.citation.clone()).collect() };
        // Weight 0.5: c's turn counts 0.7 × 1.5 = 1.05 and goes before a's
        // second turn (0.9); b's counts 0.7 and is last.
        let got = cover_threads(ranked.clone(), 0.5, 4, Some(&gains));
        assert_eq!(cited(&got), ["turn_1", "turn_4", "turn_2", "turn_3"]);
        assert!((got[1].score - 1.05).abs() < 1e-9 && (got[3].score - 0.7).abs() < 1e-9);
        // With the same gain for every thread, b's turn (the smaller
        // citation) takes the coverage place before c's.
        let flat = cover_threads(ranked, 0.5, 4, None);
        assert_eq!(cited(&flat), ["turn_1", "turn_3", "turn_4", "turn_2"]);
    }

    #[test]
    fn dense_feedback_moves_the_query_towards_the_mean_of_its_hits() {
        let q = [1.0, 0.0, 0.0];
        let hits = vec![vec![0.0, 1.0, 0.0], vec![0.0, 0.0, 1.0]];
        // q + 1.0 × (0, 0.5, 0.5), normalised.
        let moved = feedback_query(&q, &hits, 1.0);
        let n = (1.0f32 + 0.25 + 0.25).sqrt();
        for (got, want) in moved.iter().zip([1.0 / n, 0.5 / n, 0.5 / n]) {
            assert!((got - want).abs() < 1e-6, "{moved:?}");
        }
        // No hits, or hits of another dimension, keep the query.
        assert_eq!(feedback_query(&q, &[], 1.0), q);
        assert_eq!(feedback_query(&q, &[vec![1.0, 0.0]], 1.0), q);
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
        add_thread_evidence(&mut best, ThreadEvidence::Best, 0.5);
        // 2: 0.5 + 0.5 × 1.0 passes 3: 0.6 + 0.5 × 0.6.
        assert_eq!(order(&best), ["turn_1", "turn_2", "turn_3"]);
        let scores: Vec<f64> = best.iter().map(|r| r.score).collect();
        for (got, want) in scores.iter().zip([1.5, 1.0, 0.9]) {
            assert!((got - want).abs() < 1e-9, "{scores:?}");
        }
        let mut other = pool();
        add_thread_evidence(&mut other, ThreadEvidence::BestOther, 0.5);
        // 1 gains 0.5 × 0.5, 2 gains 0.5 × 1.0, 3 is alone.
        let scores: Vec<f64> = other.iter().map(|r| r.score).collect();
        assert_eq!(order(&other), ["turn_1", "turn_2", "turn_3"]);
        for (got, want) in scores.iter().zip([1.25, 1.0, 0.6]) {
            assert!((got - want).abs() < 1e-9, "{scores:?}");
        }
        let mut adjacent = pool();
        add_thread_evidence(&mut adjacent, ThreadEvidence::Adjacent, 0.5);
        // 2 (seq 2) gains 0.5 × turn 1's 1.0; 3 has no neighbour.
        assert_eq!(order(&adjacent), ["turn_1", "turn_2", "turn_3"]);
        assert!((adjacent[1].score - 1.0).abs() < 1e-9);
        // Weight 0 keeps the order.
        let mut same = pool();
        add_thread_evidence(&mut same, ThreadEvidence::Best, 0.0);
        assert_eq!(order(&same), ["turn_1", "turn_3", "turn_2"]);
    }

    #[test]
    fn lexical_feedback_picks_rare_terms_of_the_best_hits() {
        // Hit 1 (score 3) and hit 2 (score 1); "tent" is in both, "hiking"
        // only in hit 1, "lake" only in hit 2, "trip" is the query's,
        // "go" too short, "really" common.
        let hits = [
            (3.0, "tent hiking trip really"),
            (1.0, "tent lake go really"),
        ];
        let documents = |t: &str| -> Result<usize, ()> {
            Ok(match t {
                "really" => 601,
                "tent" | "hiking" | "lake" => 4,
                _ => 1,
            })
        };
        let got = feedback_terms(&hits, "the camping trip", 2, 600, documents).unwrap();
        // tent: 3/4 × 1/4 + 1/4 × 1/4 = 0.25; hiking 0.1875; lake 0.0625
        // (same rarity); "really" is over the budget.
        assert_eq!(got, ["tent", "hiking"]);
        let all = feedback_terms(&hits, "the camping trip", 10, 600, documents).unwrap();
        assert_eq!(all, ["tent", "hiking", "lake"]);
        // Rarity decides between equal weights: "lake" in 1 document
        // against "tent" in 4.
        let rarer = |t: &str| -> Result<usize, ()> { Ok(if t == "lake" { 1 } else { 4 }) };
        let got = feedback_terms(&[(1.0, "tent lake")], "", 1, 600, rarer).unwrap();
        assert_eq!(got, ["lake"]);
        // No terms asked, or no positive score: nothing.
        assert!(feedback_terms(&hits, "", 0, 600, documents)
            .unwrap()
            .is_empty());
        assert!(feedback_terms(&[(0.0, "tent")], "", 3, 600, documents)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_feedback_pass_adds_its_scaled_scores_and_its_own_hits() {
        let lexical = vec![turn(1, 4.0), turn(2, 2.0)];
        let feedback = vec![turn(3, 10.0), turn(2, 5.0)];
        let got = add_feedback_pass(lexical.clone(), feedback.clone(), 0.25);
        // 1: 0.75 × 4/4; 2: 0.75 × 2/4 + 0.25 × 5/10; 3: 0.25 × 10/10.
        let cited: Vec<(&str, f64)> = got.iter().map(|r| (r.citation.as_str(), r.score)).collect();
        assert_eq!(cited, [("turn_1", 0.75), ("turn_2", 0.5), ("turn_3", 0.25)]);
        // Weight 0 or 1, an empty pass, or a lexical list without scores
        // keep the lexical list as it is.
        assert_eq!(
            add_feedback_pass(lexical.clone(), feedback.clone(), 0.0),
            lexical
        );
        assert_eq!(
            add_feedback_pass(lexical.clone(), feedback.clone(), 1.0),
            lexical
        );
        assert_eq!(add_feedback_pass(lexical.clone(), Vec::new(), 0.5), lexical);
        let newest = vec![turn(1, -0.5), turn(2, -1.0)];
        assert_eq!(add_feedback_pass(newest.clone(), feedback, 0.5), newest);
    }

    #[test]
    fn session_term_match_lifts_the_turns_of_sessions_holding_rare_terms() {
        // Four threads; "tent" in a and b, "lake" in a only.
        let holding = vec![
            vec!["a".to_owned(), "b".to_owned()],
            vec!["a".to_owned()],
            Vec::new(),
        ];
        let scores = crate::ranking::thread_match_scores(&holding, 4);
        let (two, four) = (3.0f64.ln(), 5.0f64.ln());
        assert!((scores["a"] - (two + four)).abs() < 1e-12, "{scores:?}");
        assert!((scores["b"] - two).abs() < 1e-12, "{scores:?}");
        assert!(!scores.contains_key("c"));
        // Turn 1 (thread c) leads turn 2 (a) by 0.1 and turn 3 (b) by 0.2;
        // weight 0.25 lifts 2 by 0.25 and 3 by 0.25 × ln 3 / (ln 3 + ln 5).
        let mut ranked = vec![
            in_thread(1, 1.0, "c"),
            in_thread(2, 0.9, "a"),
            in_thread(3, 0.8, "b"),
        ];
        add_thread_match(&mut ranked, &scores, 0.25);
        let cited: Vec<&str> = ranked.iter().map(|r| r.citation.as_str()).collect();
        assert_eq!(cited, ["turn_2", "turn_1", "turn_3"]);
        assert!((ranked[0].score - 1.15).abs() < 1e-12);
        let b = 0.8 + 0.25 * two / (two + four);
        assert!((ranked[2].score - b).abs() < 1e-12);
        // Weight 0 keeps the list.
        let before = ranked.clone();
        add_thread_match(&mut ranked, &scores, 0.0);
        assert_eq!(ranked, before);
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
