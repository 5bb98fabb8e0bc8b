//! `memgate eval locomo FILE`: recall quality of the local store on a
//! LoCoMo-format file, without any model.
//!
//! Procedure (the dataset README's): every turn of a conversation is
//! captured into one isolated scope (user `locomo`, agent = the sample id),
//! through [`MemoryStore::capture`], the code the service uses. Each session
//! is one thread, captured as one transcript snapshot; a turn is a message
//! whose `id` is its dialogue id (`D3:5`), whose `name` is the speaker and
//! whose `additional_kwargs.timestamp` is the session's date, so speaker and
//! date reach the index through the normal capture path. A shared image is
//! part of the message text as `[shared image: <caption>]`.
//!
//! Each scored question (categories 1–4; 5 is adversarial and unscored) is
//! asked as a recall query through [`MemoryStore::ranked`], the ranking
//! recall uses. Scores, overall and per category, with the question count as
//! denominator:
//! - turn level: evidence turns (`D3:5`) among the top k turns;
//! - session level: evidence sessions (`D3`) among the sessions of the top
//!   k turns;
//! - recall@k = share of a question's evidence found (averaged), hit@k = at
//!   least one found, MRR = 1 / rank of the first evidence hit in the top 10.
//!
//! Malformed evidence ids are repaired as the README says (`D:11:26` →
//! `D11:26`, `D8:6; D9:17` → two ids); a bare `D` is skipped and counted. A
//! question left with no evidence still counts (it can only score 0).
//!
//! The same run measures a plain BM25 baseline for comparison: FTS5's
//! default tokenizer and BM25 over each turn's text alone, queried with every
//! word of the question.
//!
//! No-query block coverage (what a new conversation starts with): after a
//! conversation is captured, recall is called with no query, as DeerFlow
//! does at the start of every thread, and the figure is the share of that
//! conversation's evidence turns (of its scored questions) the block cites.
//! It is reported as the mean over conversations and pooled over all
//! evidence turns, with the characters the block used, next to a baseline
//! that fills the same budget with the newest turns. Question text is never
//! seen by the block. The block is measured twice: on the transcripts as
//! the dataset has them (each message named by its speaker), and captured
//! again into a second store without the names, as DeerFlow sends its
//! messages (only the roles tell the two speakers apart).

use crate::distilled::{DistillFigures, DistillSource, Distillation};
use crate::process::overlap;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, MemoryError, Message, Recall, RecallRequest, Result, Role,
};
use memgate_recall::block::assemble;
use memgate_recall::fusion::{Fusion, DEFAULT_DENSE_POOL, DEFAULT_FUSION};
use memgate_recall::ranked::candidate_pool;
use memgate_recall::turns::TIMESTAMP_KEY;
use memgate_recall::{Origin, Ranked, Rerank};
use memgate_store::config::EmbedderSettings;
use memgate_store::hybrid::{QueryVector, Ranking};
use memgate_store::vectors::PREFILTER_FACTOR;
use memgate_store::{LocalConfig, MemoryStore};
use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;

/// The cut-offs reported.
pub const KS: [usize; 2] = [5, 10];
pub(crate) const DEPTH: usize = 10;

/// Options of the evaluation.
#[derive(Clone, Debug)]
pub struct LocomoOptions {
    /// Also measure the plain BM25 baseline.
    pub baseline: bool,
    /// Also measure hybrid recall with this embedder (lexical is always
    /// measured, on the same store).
    pub embedder: Option<EmbedderSettings>,
    /// Also measure recall and the block with distilled facts
    /// ([`crate::distilled`]): rows carry the source's word (`replay`,
    /// `endpoint`) in their label.
    pub distill: Option<DistillSource>,
}

impl Default for LocomoOptions {
    fn default() -> Self {
        Self {
            baseline: true,
            embedder: None,
            distill: None,
        }
    }
}

/// A dialogue id: session and turn number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DiaId {
    pub session: u32,
    pub turn: u32,
}

impl DiaId {
    /// Parses `D3:5` (also the malformed `D:3:5`); `None` otherwise.
    pub fn parse(raw: &str) -> Option<Self> {
        let rest = raw.trim().strip_prefix('D')?;
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        let (s, t) = rest.split_once(':')?;
        Some(Self {
            session: s.trim().parse().ok()?,
            turn: t.trim().parse().ok()?,
        })
    }
}

/// Evidence ids of one question, with repair and skip counts.
#[derive(Debug, Default, PartialEq)]
pub struct Evidence {
    pub ids: Vec<DiaId>,
    pub repaired: usize,
    pub skipped: usize,
}

/// Reads a question's `evidence` list, repairing malformed ids.
pub fn parse_evidence(raw: &[Value]) -> Evidence {
    let mut ev = Evidence::default();
    for item in raw {
        let Some(s) = item.as_str() else {
            ev.skipped += 1;
            continue;
        };
        let pieces: Vec<&str> = s
            .split([';', ','])
            .flat_map(str::split_whitespace)
            .filter(|p| !p.is_empty())
            .collect();
        let mut repaired = pieces.len() > 1;
        for piece in &pieces {
            match DiaId::parse(piece) {
                Some(id) => {
                    repaired |= piece.starts_with("D:");
                    if !ev.ids.contains(&id) {
                        ev.ids.push(id);
                    }
                }
                None => ev.skipped += 1,
            }
        }
        if pieces.is_empty() {
            ev.skipped += 1;
        }
        if repaired {
            ev.repaired += 1;
        }
    }
    ev
}

/// Scores at one level (turn or session).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LevelScores {
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub hit_at_5: f64,
    pub hit_at_10: f64,
    pub mrr: f64,
}

/// Scores of one group of questions.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Scores {
    pub questions: usize,
    pub turn: LevelScores,
    pub session: LevelScores,
}

/// One ranking system's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SystemScores {
    pub system: String,
    pub overall: Scores,
    /// Keyed by category number.
    pub per_category: BTreeMap<u32, Scores>,
    /// In the file's order of conversations ([`LocomoReport::conversation_ids`]).
    pub per_conversation: Vec<Scores>,
}

/// The evaluation report (`--json` serializes it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LocomoReport {
    pub file: String,
    pub conversations: usize,
    pub turns_captured: usize,
    pub questions_scored: usize,
    pub questions_unscored: usize,
    pub evidence_ids_repaired: usize,
    pub evidence_ids_skipped: usize,
    /// The sample ids, in the file's order.
    pub conversation_ids: Vec<String>,
    pub systems: Vec<SystemScores>,
    /// Leave-one-conversation-out selection over named grids of the hybrid
    /// rows ([`leave_one_out`]); empty without an embedder.
    pub leave_one_out: Vec<LeaveOneOut>,
    /// No-query block coverage: memgate's first-turn block, the same without
    /// speaker names, then the newest-turns baseline.
    pub no_query: Vec<BlockCoverage>,
    /// Costs of the hybrid run, when an embedder was given.
    pub embedding: Option<EmbeddingFigures>,
    /// What distillation did, with `--distill`.
    pub distill: Option<DistillFigures>,
}

/// What hybrid recall cost in the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EmbeddingFigures {
    pub model: String,
    /// Building the embedder (loading a local model).
    pub load_seconds: f64,
    /// Vectors written, and the time the indexer took for them.
    pub vectors: usize,
    pub index_seconds: f64,
    /// Questions embedded, and the encoder's time for them.
    pub queries: usize,
    pub embed_seconds: f64,
    /// Hybrid rankings (one per question and fusion) and their time
    /// without the query embedding.
    pub rankings: usize,
    pub search_seconds: f64,
    /// Hybrid rankings that fell back to lexical.
    pub embedder_failures: u64,
    /// The questions embedded again by the embedder's document path (the
    /// float32 reference of a cheaper query path), and its time.
    pub reference_embed_seconds: f64,
    /// The dense side alone: overlap@10 of each search's top 10 with the
    /// exact cosine top 10 of the float32 query ([`DENSE_OVERLAPS`]).
    pub dense_overlap: Vec<(String, f64)>,
}

/// The fusions measured beside the default, as (fusion, dense pool
/// multiple), each without re-ordering: one query embedding each question,
/// so the comparison costs one encoder pass.
pub const EVALUATED_FUSIONS: &[(Fusion, usize)] = &[
    (Fusion::Rank { dense_weight: 0.35 }, 1),
    (Fusion::Score { lambda: 0.25 }, 1),
    (Fusion::Score { lambda: 0.5 }, 1),
    (Fusion::Score { lambda: 1.0 }, 1),
    (Fusion::Score { lambda: 0.5 }, 2),
    (Fusion::Score { lambda: 0.5 }, 4),
    (Fusion::Score { lambda: 1.0 }, 4),
];

/// How the default's dense side or re-ordering is varied beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DenseVariant {
    /// The question embedded by the document path (float32 for the local
    /// model) instead of the query path.
    ReferenceQuery,
    /// The sign prefilter keeping this many items per int8 candidate. A
    /// LoCoMo scope (~550 turns) is below the default's cut, so these run
    /// it harder than recall at 100k does.
    Prefilter(usize),
    /// Another fusion and re-ordering ([`Rerank`]).
    Reranked(Fusion, Rerank),
}

/// The grids the evaluation prints, by name; each is also a grid of the
/// leave-one-conversation-out selection (with the default added).
const FUSIONS_GRID: &str = "fusions and dense pools";
const NEIGHBOURHOOD_GRID: &str =
    "the default's neighbourhood: named speaker, evidence, coverage, fusion";
const PARTS_GRID: &str = "the default's parts";
const DENSE_GRID: &str = "dense side: query path and prefilter";
const EVERY_GRID: &str = "every hybrid row";

/// The variants the evaluation prints beside the default, with their grid:
/// the named speaker's preference under thread evidence and thread
/// coverage with the fusion's lambda, the whole 3 × 3 × 3 × 3 grid whose
/// centre is [`Rerank::DEFAULT`] (fixed before its leave-one-out was
/// read); the default's parts, each alone and without the speaker; and the
/// dense side's query path and prefilter.
fn dense_variants() -> Vec<(&'static str, DenseVariant)> {
    let mut out = Vec::new();
    for lambda in [0.5, 0.6, 0.75] {
        for speaker in [0.3, 0.4, 0.5] {
            for evidence in [0.4, 0.5, 0.6] {
                for coverage in [0.4, 0.5, 0.6] {
                    let rerank = Rerank::NONE
                        .named_speaker(speaker)
                        .thread_evidence(evidence)
                        .coverage(coverage);
                    out.push((
                        NEIGHBOURHOOD_GRID,
                        DenseVariant::Reranked(Fusion::Score { lambda }, rerank),
                    ));
                }
            }
        }
    }
    let parts = [
        Rerank::NONE,
        Rerank::NONE.named_speaker(0.4),
        Rerank::NONE.thread_evidence(0.5).coverage(0.5),
    ];
    out.extend(
        parts
            .into_iter()
            .map(|r| (PARTS_GRID, DenseVariant::Reranked(DEFAULT_FUSION, r))),
    );
    out.extend(
        [
            DenseVariant::ReferenceQuery,
            DenseVariant::Prefilter(1),
            DenseVariant::Prefilter(2),
        ]
        .into_iter()
        .map(|v| (DENSE_GRID, v)),
    );
    out
}

/// The dense searches compared with the exact ranking, by name: the query
/// vector (query path or reference) and the prefilter factor.
const DENSE_OVERLAPS: &[(&str, bool, usize)] = &[
    (
        "query path, prefilter default (as recall)",
        false,
        PREFILTER_FACTOR,
    ),
    ("float32 query, prefilter default", true, PREFILTER_FACTOR),
    ("float32 query, prefilter x1", true, 1),
    ("float32 query, prefilter x2", true, 2),
    ("float32 query, no prefilter", true, usize::MAX),
];

/// The lexical ranking alone (what recall does with no embedder).
pub(crate) fn lexical(store: &MemoryStore, caller: &Caller, query: &str) -> Result<Vec<Ranked>> {
    store.ranked_with(
        caller,
        query,
        &QueryVector::lexical(),
        DEPTH,
        &Ranking::DEFAULT,
    )
}

/// How much of the conversations' evidence one kind of no-query block holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BlockCoverage {
    pub system: String,
    /// Mean over conversations of (evidence turns in the block / evidence turns).
    pub coverage_mean: f64,
    /// Evidence turns in the blocks / evidence turns, over all conversations.
    pub coverage_pooled: f64,
    /// Mean characters of the block, and the budget.
    pub chars_mean: f64,
    pub max_chars: usize,
    /// Mean number of turns the block cites.
    pub turns_mean: f64,
    /// Per conversation, in the file's order: so leave-one-conversation-out
    /// can choose among block layouts as it does among ranking weights.
    pub per_conversation: Vec<ConversationCoverage>,
}

/// One conversation's evidence turns, and how many of them its block cites.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ConversationCoverage {
    pub found: usize,
    pub evidence: usize,
}

/// Running sums for [`BlockCoverage`].
#[derive(Default)]
struct CoverageTally {
    conversations: usize,
    share_sum: f64,
    found: usize,
    evidence: usize,
    chars: usize,
    turns: usize,
    per_conversation: Vec<ConversationCoverage>,
}

impl CoverageTally {
    fn add(&mut self, block: &[DiaId], chars: usize, evidence: &HashSet<DiaId>) {
        let found = block.iter().filter(|d| evidence.contains(d)).count();
        self.conversations += 1;
        self.share_sum += found as f64 / evidence.len().max(1) as f64;
        self.found += found;
        self.evidence += evidence.len();
        self.chars += chars;
        self.turns += block.len();
        self.per_conversation.push(ConversationCoverage {
            found,
            evidence: evidence.len(),
        });
    }

    fn finish(&self, system: &str, max_chars: usize) -> BlockCoverage {
        let n = self.conversations.max(1) as f64;
        BlockCoverage {
            system: system.to_owned(),
            coverage_mean: self.share_sum / n,
            coverage_pooled: self.found as f64 / self.evidence.max(1) as f64,
            chars_mean: self.chars as f64 / n,
            max_chars,
            turns_mean: self.turns as f64 / n,
            per_conversation: self.per_conversation.clone(),
        }
    }
}

/// The dialogue ids of the turns a block cites (`turn_<id>` citations).
fn cited_turns(store: &MemoryStore, caller: &Caller, recall: &Recall) -> Result<Vec<DiaId>> {
    let cited: Vec<String> = recall
        .items
        .iter()
        .filter_map(|i| i.citation.as_ref().map(|c| c.0.clone()))
        .filter(|c| c.starts_with("turn_"))
        .collect();
    Ok(store
        .by_citation(caller, &cited)?
        .into_iter()
        .filter_map(|r| match r.origin {
            Origin::Turn { message_id, .. } => message_id.as_deref().and_then(DiaId::parse),
            Origin::Memory => None,
        })
        .collect())
}

/// The baseline block: the newest turns of the caller's scope that fit the
/// budget, laid out as recall lays out ranked turns.
fn newest_turns_block(store: &MemoryStore, caller: &Caller) -> Result<Recall> {
    let ranked = store.newest_turns(caller, NEWEST_BASELINE_TURNS)?;
    Ok(assemble(&ranked, store.config().recall.max_injection_chars))
}

/// More turns than any default budget can hold.
const NEWEST_BASELINE_TURNS: usize = 2_000;

/// Running sums for one group of questions.
#[derive(Default)]
struct Tally {
    n: usize,
    sums: [[f64; 5]; 2],
}

impl Tally {
    fn add(&mut self, turn: [f64; 5], session: [f64; 5]) {
        self.n += 1;
        for (acc, v) in self.sums[0].iter_mut().zip(turn) {
            *acc += v;
        }
        for (acc, v) in self.sums[1].iter_mut().zip(session) {
            *acc += v;
        }
    }

    fn scores(&self) -> Scores {
        let level = |s: &[f64; 5]| {
            let d = self.n.max(1) as f64;
            LevelScores {
                recall_at_5: s[0] / d,
                recall_at_10: s[1] / d,
                hit_at_5: s[2] / d,
                hit_at_10: s[3] / d,
                mrr: s[4] / d,
            }
        };
        Scores {
            questions: self.n,
            turn: level(&self.sums[0]),
            session: level(&self.sums[1]),
        }
    }
}

/// recall@5, recall@10, hit@5, hit@10, MRR of one ranked list whose
/// entries each reach some items (a turn, or a fact's source turns).
fn measure<T: Eq + std::hash::Hash + Copy>(ranked: &[Vec<T>], evidence: &HashSet<T>) -> [f64; 5] {
    if evidence.is_empty() {
        return [0.0; 5];
    }
    let found = |k: usize| {
        let top: HashSet<T> = ranked.iter().take(k).flatten().copied().collect();
        top.intersection(evidence).count()
    };
    let (f5, f10) = (found(KS[0]), found(KS[1]));
    let total = evidence.len() as f64;
    let first = ranked
        .iter()
        .take(DEPTH)
        .position(|r| r.iter().any(|x| evidence.contains(x)));
    [
        f5 as f64 / total,
        f10 as f64 / total,
        f64::from(u8::from(f5 > 0)),
        f64::from(u8::from(f10 > 0)),
        first.map_or(0.0, |p| 1.0 / (p + 1) as f64),
    ]
}

/// Per-system tallies, overall, per category and per conversation.
#[derive(Default)]
struct SystemTally {
    overall: Tally,
    per_category: BTreeMap<u32, Tally>,
    per_conversation: Vec<Tally>,
}

/// Where a question belongs: its conversation (index in the file) and
/// category.
#[derive(Clone, Copy)]
struct Asked {
    conversation: usize,
    category: u32,
}

impl SystemTally {
    fn add(&mut self, asked: Asked, ranked: &[Option<DiaId>], evidence: &[DiaId]) {
        let reached: Vec<Vec<DiaId>> = ranked.iter().map(|r| r.iter().copied().collect()).collect();
        self.add_reached(asked, &reached, evidence);
    }

    /// Adds a ranking whose entries each reach some dialogue turns (a
    /// turn itself; a fact its source turns; a memory none).
    fn add_reached(&mut self, asked: Asked, ranked: &[Vec<DiaId>], evidence: &[DiaId]) {
        let turns: HashSet<DiaId> = evidence.iter().copied().collect();
        let sessions: HashSet<u32> = evidence.iter().map(|d| d.session).collect();
        let ranked_sessions: Vec<Vec<u32>> = ranked
            .iter()
            .map(|r| r.iter().map(|d| d.session).collect())
            .collect();
        let t = measure(ranked, &turns);
        let s = measure(&ranked_sessions, &sessions);
        self.overall.add(t, s);
        self.per_category
            .entry(asked.category)
            .or_default()
            .add(t, s);
        if self.per_conversation.len() <= asked.conversation {
            self.per_conversation
                .resize_with(asked.conversation + 1, Tally::default);
        }
        self.per_conversation[asked.conversation].add(t, s);
    }

    fn finish(&self, system: &str) -> SystemScores {
        SystemScores {
            system: system.to_owned(),
            overall: self.overall.scores(),
            per_category: self
                .per_category
                .iter()
                .map(|(c, t)| (*c, t.scores()))
                .collect(),
            per_conversation: self.per_conversation.iter().map(Tally::scores).collect(),
        }
    }
}

/// Issue 11's aims for hybrid recall on the development split: turn and
/// session recall@10.
pub const TURN_AIM: f64 = 0.75;
pub const SESSION_AIM: f64 = 0.92;

/// One held-out conversation of [`leave_one_out`]: the system the rule chose
/// on the other conversations, its figures there, and its figures on the
/// held-out one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fold {
    pub held_out: String,
    pub questions: usize,
    pub chosen: String,
    /// Turn and session recall@10 of the chosen system on the other
    /// conversations (question-weighted).
    pub chosen_on_others: (f64, f64),
    /// Its turn and session recall@10 on the held-out conversation.
    pub held_out_scores: (f64, f64),
}

/// Leave-one-conversation-out selection over one named grid of systems
/// ([`leave_one_out`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeaveOneOut {
    pub grid: String,
    pub systems: usize,
    pub folds: Vec<Fold>,
    /// Held-out turn and session recall@10, pooled over the folds with the
    /// question count as weight: what choosing by the rule is worth on
    /// conversations it did not see.
    pub pooled: (f64, f64),
    /// The rule's choice on every conversation, and its (in-sample)
    /// figures: what the full-split table would suggest.
    pub chosen_on_all: String,
    pub chosen_on_all_scores: (f64, f64),
}

/// Turn and session recall@10 and the question count of the conversations
/// `keep` accepts (question-weighted).
fn pooled_recall(per_conversation: &[Scores], keep: impl Fn(usize) -> bool) -> (f64, f64, usize) {
    let (mut turn, mut session, mut n) = (0.0, 0.0, 0);
    for (_, s) in per_conversation
        .iter()
        .enumerate()
        .filter(|(c, _)| keep(*c))
    {
        turn += s.turn.recall_at_10 * s.questions as f64;
        session += s.session.recall_at_10 * s.questions as f64;
        n += s.questions;
    }
    let d = n.max(1) as f64;
    (turn / d, session / d, n)
}

/// The selection rule: the best turn recall among the systems whose session
/// recall meets [`SESSION_AIM`], else the best session recall; ties go to
/// the earlier system (grids list the default first). `figures` are (turn,
/// session) per system.
fn choose(figures: &[(f64, f64)]) -> Option<usize> {
    let meets = |i: &usize| figures[*i].1 >= SESSION_AIM;
    let best_by = |key: fn(&(f64, f64)) -> f64, only_meeting: bool| {
        (0..figures.len())
            .filter(|i| !only_meeting || meets(i))
            .fold(None, |best: Option<usize>, i| match best {
                Some(b) if key(&figures[b]) >= key(&figures[i]) => Some(b),
                _ => Some(i),
            })
    };
    best_by(|f| f.0, true).or_else(|| best_by(|f| f.1, false))
}

/// For each conversation, [`choose`] a system of `grid` on the other
/// conversations and score it on the held-out one; `pooled` is the
/// question-weighted held-out figure. A setting that generalises keeps its
/// figures when held out; one fitted to the split does not.
pub fn leave_one_out(
    name: &str,
    grid: &[&SystemScores],
    conversation_ids: &[String],
) -> LeaveOneOut {
    let mut folds = Vec::new();
    let (mut turn, mut session, mut n) = (0.0, 0.0, 0);
    for (held, id) in conversation_ids.iter().enumerate() {
        let figures: Vec<(f64, f64)> = grid
            .iter()
            .map(|s| {
                let (t, ss, _) = pooled_recall(&s.per_conversation, |c| c != held);
                (t, ss)
            })
            .collect();
        let Some(chosen) = choose(&figures) else {
            continue;
        };
        let (t, ss, q) = pooled_recall(&grid[chosen].per_conversation, |c| c == held);
        turn += t * q as f64;
        session += ss * q as f64;
        n += q;
        folds.push(Fold {
            held_out: id.clone(),
            questions: q,
            chosen: grid[chosen].system.clone(),
            chosen_on_others: figures[chosen],
            held_out_scores: (t, ss),
        });
    }
    let d = n.max(1) as f64;
    let all: Vec<(f64, f64)> = grid
        .iter()
        .map(|s| (s.overall.turn.recall_at_10, s.overall.session.recall_at_10))
        .collect();
    let on_all = choose(&all);
    LeaveOneOut {
        grid: name.to_owned(),
        systems: grid.len(),
        folds,
        pooled: (turn / d, session / d),
        chosen_on_all: on_all.map_or_else(String::new, |c| grid[c].system.clone()),
        chosen_on_all_scores: on_all.map_or((0.0, 0.0), |c| all[c]),
    }
}

fn bad(field: impl Into<String>, rule: &str) -> MemoryError {
    MemoryError::invalid(field, rule)
}

/// One conversation's sessions: (number, date, turns).
type Sessions<'a> = Vec<(u32, Option<&'a str>, &'a Vec<Value>)>;

fn sessions_of(conversation: &serde_json::Map<String, Value>) -> Sessions<'_> {
    let mut out: Sessions<'_> = conversation
        .iter()
        .filter_map(|(k, v)| {
            let n: u32 = k.strip_prefix("session_")?.parse().ok()?;
            let turns = v.as_array()?;
            let date = conversation
                .get(&format!("session_{n}_date_time"))
                .and_then(Value::as_str);
            Some((n, date, turns))
        })
        .collect();
    out.sort_by_key(|(n, _, _)| *n);
    out
}

/// The message a dataset turn becomes.
fn turn_message(turn: &Value, speaker_a: &str, date: Option<&str>, field: &str) -> Result<Message> {
    let speaker = turn
        .get("speaker")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{field}.speaker"), "must be a string"))?;
    let dia_id = turn
        .get("dia_id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{field}.dia_id"), "must be a string"))?;
    let mut text = turn
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{field}.text"), "must be a string"))?
        .to_owned();
    if let Some(caption) = turn.get("blip_caption").and_then(Value::as_str) {
        text.push_str(&format!("\n[shared image: {caption}]"));
    }
    let role = if speaker == speaker_a {
        Role::human()
    } else {
        Role::ai()
    };
    let mut message = Message::new(role, text).with_id(dia_id).with_name(speaker);
    if let Some(date) = date {
        message = message.with_flag(TIMESTAMP_KEY, date);
    }
    Ok(message)
}

/// The baseline's own SQLite errors.
fn db_error(e: rusqlite::Error) -> MemoryError {
    MemoryError::backend(format!("the plain BM25 baseline's database: {e}"))
}

/// The plain BM25 baseline: one in-memory FTS5 table per conversation with
/// SQLite's default tokenizer, each turn's text alone.
struct PlainBm25 {
    conn: Connection,
    ids: Vec<Option<DiaId>>,
}

impl PlainBm25 {
    fn new() -> Result<Self> {
        let conn = Connection::open_in_memory().map_err(db_error)?;
        conn.execute_batch("CREATE VIRTUAL TABLE turns USING fts5(text)")
            .map_err(db_error)?;
        Ok(Self {
            conn,
            ids: Vec::new(),
        })
    }

    fn add(&mut self, id: Option<DiaId>, text: &str) -> Result<()> {
        self.ids.push(id);
        self.conn
            .execute(
                "INSERT INTO turns (rowid, text) VALUES (?1, ?2)",
                rusqlite::params![self.ids.len() as i64, text],
            )
            .map_err(db_error)?;
        Ok(())
    }

    fn query(&self, question: &str) -> Result<Vec<Option<DiaId>>> {
        let words: Vec<String> = question
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| format!("\"{}\"", w.to_lowercase()))
            .collect();
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT rowid FROM turns WHERE turns MATCH ?1 ORDER BY bm25(turns) LIMIT ?2",
            )
            .map_err(db_error)?;
        let rows = stmt
            .query_map(rusqlite::params![words.join(" OR "), DEPTH as i64], |r| {
                r.get::<_, i64>(0)
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<i64>>>())
            .map_err(db_error)?;
        Ok(rows
            .into_iter()
            .map(|rowid| self.ids[(rowid - 1) as usize])
            .collect())
    }
}

/// Runs the evaluation on a LoCoMo-format file.
pub fn run_locomo(path: &Path, options: &LocomoOptions) -> Result<LocomoReport> {
    let raw = std::fs::read(path)
        .map_err(|e| MemoryError::invalid("file", format!("cannot be read: {e}")))?;
    let data: Value = serde_json::from_slice(&raw)
        .map_err(|e| MemoryError::invalid("file", format!("is not valid JSON: {e}")))?;
    let samples = data
        .as_array()
        .ok_or_else(|| bad("file", "must be a JSON list of samples"))?;

    let dir = tempfile::tempdir()
        .map_err(|e| MemoryError::backend(format!("cannot create a temporary directory: {e}")))?;
    let mut store = MemoryStore::open(dir.path().join("locomo.sqlite3"), LocalConfig::default())?;
    let mut embedding = None;
    if let Some(settings) = &options.embedder {
        let started = std::time::Instant::now();
        store = store.with_embedder(settings.build()?);
        embedding = Some(EmbeddingFigures {
            model: store.embedder_model().unwrap_or_default().to_owned(),
            load_seconds: started.elapsed().as_secs_f64(),
            ..EmbeddingFigures::default()
        });
    }

    let mut report = LocomoReport {
        file: path.display().to_string(),
        conversations: 0,
        turns_captured: 0,
        questions_scored: 0,
        questions_unscored: 0,
        evidence_ids_repaired: 0,
        evidence_ids_skipped: 0,
        conversation_ids: Vec::new(),
        systems: Vec::new(),
        leave_one_out: Vec::new(),
        no_query: Vec::new(),
        embedding: None,
        distill: None,
    };
    let mut distillation = options
        .distill
        .as_ref()
        .map(|source| Distillation::open(dir.path(), source, options.embedder.as_ref()))
        .transpose()?;
    let mut distilled_lexical = SystemTally::default();
    let mut distilled_hybrid = SystemTally::default();
    // With distillation, the lexical rows again without speaker names.
    let mut unnamed_lexical = SystemTally::default();
    let mut distilled_lexical_unnamed = SystemTally::default();
    let mut distilled_block = CoverageTally::default();
    let mut distilled_block_unnamed = CoverageTally::default();
    let mut distilled_hybrid_label = None;
    let mut first_turn = CoverageTally::default();
    let mut first_turn_unnamed = CoverageTally::default();
    // The same conversations without speaker names (no-query rows only).
    let unnamed = MemoryStore::open(
        dir.path().join("locomo-unnamed.sqlite3"),
        LocalConfig::default(),
    )?;
    let mut newest = CoverageTally::default();
    let mut memgate = SystemTally::default();
    let mut hybrid: Vec<SystemTally> = EVALUATED_FUSIONS
        .iter()
        .map(|_| SystemTally::default())
        .collect();
    let mut plain = SystemTally::default();
    let mut default_hybrid = SystemTally::default();
    let variants = dense_variants();
    let mut dense_variants: Vec<SystemTally> =
        variants.iter().map(|_| SystemTally::default()).collect();
    let mut overlaps = vec![0.0f64; DENSE_OVERLAPS.len()];

    for (i, sample) in samples.iter().enumerate() {
        let field = format!("[{i}]");
        let conversation = sample
            .get("conversation")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(format!("{field}.conversation"), "must be an object"))?;
        let sample_id = sample
            .get("sample_id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("sample-{i}"), str::to_owned);
        let speaker_a = conversation
            .get("speaker_a")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut baseline = if options.baseline {
            Some(PlainBm25::new()?)
        } else {
            None
        };
        for (n, date, turns) in sessions_of(conversation) {
            let caller = Caller::new("locomo")
                .with_agent(sample_id.clone())
                .with_thread(format!("session_{n}"));
            let messages = turns
                .iter()
                .enumerate()
                .map(|(j, t)| {
                    turn_message(
                        t,
                        speaker_a,
                        date,
                        &format!("{field}.conversation.session_{n}[{j}]"),
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            if let Some(b) = baseline.as_mut() {
                for m in &messages {
                    b.add(m.id.as_deref().and_then(DiaId::parse), &m.text())?;
                }
            }
            unnamed.capture(&CaptureRequest {
                caller: caller.clone(),
                messages: messages
                    .iter()
                    .map(|m| Message {
                        name: None,
                        ..m.clone()
                    })
                    .collect(),
                kind: CaptureKind::AfterTurn,
                trace_id: None,
            })?;
            let request = CaptureRequest {
                caller,
                messages,
                kind: CaptureKind::AfterTurn,
                trace_id: None,
            };
            if let Some(d) = distillation.as_mut() {
                d.capture(&request)?;
            }
            let captured = store.capture(&request)?;
            report.turns_captured += captured.stored;
        }
        if let Some(figures) = embedding.as_mut() {
            let started = std::time::Instant::now();
            figures.vectors += store.index_all_vectors(64)?;
            figures.index_seconds += started.elapsed().as_secs_f64();
        }
        report.conversations += 1;
        report.conversation_ids.push(sample_id.clone());

        let asker = Caller::new("locomo").with_agent(sample_id.clone());
        if let Some(d) = distillation.as_mut() {
            d.distill(&asker, sample, &field)?;
        }
        let questions = sample
            .get("qa")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("{field}.qa"), "must be a list"))?;
        let mut all_evidence = HashSet::new();
        for (j, qa) in questions.iter().enumerate() {
            let category = qa.get("category").and_then(Value::as_u64).unwrap_or(0) as u32;
            if !(1..=4).contains(&category) {
                report.questions_unscored += 1;
                continue;
            }
            let question = qa
                .get("question")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{field}.qa[{j}].question"), "must be a string"))?;
            let evidence = parse_evidence(
                qa.get("evidence")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice),
            );
            report.evidence_ids_repaired += evidence.repaired;
            report.evidence_ids_skipped += evidence.skipped;
            report.questions_scored += 1;
            let asked = Asked {
                conversation: i,
                category,
            };

            let dia_ids = |ranked: Vec<Ranked>| -> Vec<Option<DiaId>> {
                ranked
                    .into_iter()
                    .map(|r| match r.origin {
                        Origin::Turn { message_id, .. } => {
                            message_id.as_deref().and_then(DiaId::parse)
                        }
                        Origin::Memory => None,
                    })
                    .collect()
            };
            let started = std::time::Instant::now();
            let lexical_ranked = lexical(&store, &asker, question)?;
            let lexical_time = started.elapsed();
            memgate.add(asked, &dia_ids(lexical_ranked), &evidence.ids);
            if let Some(d) = distillation.as_mut() {
                distilled_lexical.add_reached(
                    asked,
                    &d.lexical(&asker, question, lexical_time)?,
                    &evidence.ids,
                );
                unnamed_lexical.add(
                    asked,
                    &dia_ids(lexical(&unnamed, &asker, question)?),
                    &evidence.ids,
                );
                distilled_lexical_unnamed.add_reached(
                    asked,
                    &d.lexical_unnamed(&asker, question)?,
                    &evidence.ids,
                );
                if options.embedder.is_some() {
                    distilled_hybrid.add_reached(
                        asked,
                        &d.hybrid(&asker, question)?,
                        &evidence.ids,
                    );
                }
            }
            if let Some(figures) = embedding.as_mut() {
                let started = std::time::Instant::now();
                let vector = store.query_vector(question);
                figures.embed_seconds += started.elapsed().as_secs_f64();
                figures.queries += 1;
                let started = std::time::Instant::now();
                // Exactly what recall ranks with.
                let ranked =
                    store.ranked_with(&asker, question, &vector, DEPTH, &Ranking::DEFAULT)?;
                figures.search_seconds += started.elapsed().as_secs_f64();
                figures.rankings += 1;
                default_hybrid.add(asked, &dia_ids(ranked), &evidence.ids);
                for ((fusion, pool), tally) in EVALUATED_FUSIONS.iter().zip(hybrid.iter_mut()) {
                    let started = std::time::Instant::now();
                    let ranking = Ranking {
                        fusion: *fusion,
                        dense_pool: *pool,
                        prefilter: PREFILTER_FACTOR,
                        rerank: Rerank::NONE,
                    };
                    let ranked = store.ranked_with(&asker, question, &vector, DEPTH, &ranking)?;
                    figures.search_seconds += started.elapsed().as_secs_f64();
                    figures.rankings += 1;
                    tally.add(asked, &dia_ids(ranked), &evidence.ids);
                }
                let started = std::time::Instant::now();
                let reference = store.reference_query_vector(question);
                figures.reference_embed_seconds += started.elapsed().as_secs_f64();
                for ((_, variant), tally) in variants.iter().zip(dense_variants.iter_mut()) {
                    let (v, ranking) = match variant {
                        DenseVariant::ReferenceQuery => (&reference, Ranking::DEFAULT),
                        DenseVariant::Prefilter(f) => (
                            &vector,
                            Ranking {
                                prefilter: *f,
                                ..Ranking::DEFAULT
                            },
                        ),
                        DenseVariant::Reranked(f, r) => (
                            &vector,
                            Ranking {
                                fusion: *f,
                                rerank: *r,
                                ..Ranking::DEFAULT
                            },
                        ),
                    };
                    let ranked = store.ranked_with(&asker, question, v, DEPTH, &ranking)?;
                    tally.add(asked, &dia_ids(ranked), &evidence.ids);
                }
                let pool = candidate_pool(DEPTH) * DEFAULT_DENSE_POOL;
                if let Some(exact_query) = reference.vector() {
                    let exact = store.exact_nearest(&asker, exact_query, DEPTH)?;
                    for ((_, reference_query, prefilter), sum) in
                        DENSE_OVERLAPS.iter().zip(overlaps.iter_mut())
                    {
                        let q = if *reference_query {
                            &reference
                        } else {
                            &vector
                        };
                        let Some(q) = q.vector() else { continue };
                        let nearest = store.nearest_items(&asker, q, pool, *prefilter)?;
                        let found: Vec<i64> = nearest.iter().map(|(i, _)| *i).collect();
                        *sum += overlap(&found, &exact);
                    }
                }
            }
            all_evidence.extend(evidence.ids.iter().copied());
            if let Some(b) = &baseline {
                plain.add(asked, &b.query(question)?, &evidence.ids);
            }
        }
        if !all_evidence.is_empty() {
            let block = store.recall(&RecallRequest {
                caller: asker.clone(),
                query: None,
            })?;
            let chars = memgate_core::budget::char_len(&block.text);
            first_turn.add(&cited_turns(&store, &asker, &block)?, chars, &all_evidence);
            let block = unnamed.recall(&RecallRequest {
                caller: asker.clone(),
                query: None,
            })?;
            let chars = memgate_core::budget::char_len(&block.text);
            first_turn_unnamed.add(
                &cited_turns(&unnamed, &asker, &block)?,
                chars,
                &all_evidence,
            );
            if let Some(d) = &distillation {
                let [(named, chars), (unnamed, unnamed_chars)] = d.blocks(&asker)?;
                distilled_block.add(&named, chars, &all_evidence);
                distilled_block_unnamed.add(&unnamed, unnamed_chars, &all_evidence);
            }
            let block = newest_turns_block(&store, &asker)?;
            let chars = memgate_core::budget::char_len(&block.text);
            newest.add(&cited_turns(&store, &asker, &block)?, chars, &all_evidence);
        }
    }
    let max_chars = store.config().recall.max_injection_chars;
    report
        .no_query
        .push(first_turn.finish("memgate first-turn block", max_chars));
    report
        .no_query
        .push(first_turn_unnamed.finish("memgate first-turn block, no speaker names", max_chars));
    let distilled_rows = distillation.map(|d| {
        let label = format!("{}: {}", d.source().label(), d.source().meaning());
        (label, d.finish())
    });
    if let Some((label, _)) = &distilled_rows {
        report.no_query.push(distilled_block.finish(
            &format!("memgate first-turn block + facts ({label})"),
            max_chars,
        ));
        report.no_query.push(distilled_block_unnamed.finish(
            &format!("memgate first-turn block + facts, no speaker names ({label})"),
            max_chars,
        ));
    }
    unnamed.close()?;
    report
        .no_query
        .push(newest.finish("newest turns (baseline)", max_chars));
    if let Some(figures) = embedding.as_mut() {
        figures.embedder_failures = store.retrieval_counts().embedder_failures;
    }
    store.close()?;
    report.systems.push(memgate.finish("memgate local ranking"));
    if let Some((label, figures)) = distilled_rows {
        let lexical_row = report.systems.len() - 1;
        report
            .systems
            .push(distilled_lexical.finish(&format!("memgate local ranking + facts ({label})")));
        let grid = [
            &report.systems[lexical_row],
            &report.systems[lexical_row + 1],
        ];
        report.leave_one_out.push(leave_one_out(
            &format!("lexical, with or without {} facts", figures.source),
            &grid,
            &report.conversation_ids,
        ));
        let unnamed_row = report.systems.len();
        report
            .systems
            .push(unnamed_lexical.finish("memgate local ranking, no speaker names"));
        report
            .systems
            .push(distilled_lexical_unnamed.finish(&format!(
                "memgate local ranking + facts, no speaker names ({label})"
            )));
        let grid = [
            &report.systems[unnamed_row],
            &report.systems[unnamed_row + 1],
        ];
        report.leave_one_out.push(leave_one_out(
            &format!(
                "lexical, no speaker names, with or without {} facts",
                figures.source
            ),
            &grid,
            &report.conversation_ids,
        ));
        if options.embedder.is_some() {
            distilled_hybrid_label = Some(format!("+ facts ({label})"));
        }
        report.distill = Some(figures);
    }
    if let Some(figures) = embedding {
        // Indices into `report.systems` of each grid's rows; the default
        // is in every grid.
        let mut grids: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        let default_row = Some(report.systems.len());
        report.systems.push(default_hybrid.finish(&format!(
            "memgate hybrid ({}; {DEFAULT_FUSION}, dense pool x{DEFAULT_DENSE_POOL}; {}, the default)",
            figures.model,
            Rerank::DEFAULT
        )));
        if let Some(label) = &distilled_hybrid_label {
            let row = report.systems.len();
            report.systems.push(distilled_hybrid.finish(&format!(
                "memgate hybrid ({}; the default) {label}",
                figures.model
            )));
            let grid = [&report.systems[row - 1], &report.systems[row]];
            report.leave_one_out.push(leave_one_out(
                "the hybrid default, with or without the facts",
                &grid,
                &report.conversation_ids,
            ));
        }
        for ((fusion, pool), tally) in EVALUATED_FUSIONS.iter().zip(&hybrid) {
            grids
                .entry(FUSIONS_GRID)
                .or_default()
                .push(report.systems.len());
            report.systems.push(tally.finish(&format!(
                "memgate hybrid ({}; {fusion}, dense pool x{pool}; as fused)",
                figures.model
            )));
        }
        for ((grid, variant), tally) in variants.iter().zip(&dense_variants) {
            let what = match variant {
                DenseVariant::ReferenceQuery => format!(
                    "{}; questions embedded by the document path (float32)",
                    Rerank::DEFAULT
                ),
                DenseVariant::Prefilter(f) => format!("{}; sign prefilter x{f}", Rerank::DEFAULT),
                DenseVariant::Reranked(_, r) => r.to_string(),
            };
            let fusion = match variant {
                DenseVariant::Reranked(f, _) => *f,
                _ => DEFAULT_FUSION,
            };
            grids.entry(grid).or_default().push(report.systems.len());
            report.systems.push(tally.finish(&format!(
                "memgate hybrid ({}; {fusion}, dense pool x{DEFAULT_DENSE_POOL}; {what})",
                figures.model
            )));
        }
        let every: Vec<usize> = grids.values().flatten().copied().collect();
        grids.insert(EVERY_GRID, every);
        for (name, rows) in &grids {
            let grid: Vec<&SystemScores> = default_row
                .iter()
                .chain(rows.iter().filter(|r| Some(**r) != default_row))
                .map(|r| &report.systems[*r])
                .collect();
            report
                .leave_one_out
                .push(leave_one_out(name, &grid, &report.conversation_ids));
        }
        let mut figures = figures;
        figures.dense_overlap = DENSE_OVERLAPS
            .iter()
            .zip(&overlaps)
            .map(|((name, _, _), sum)| ((*name).to_owned(), sum / figures.queries.max(1) as f64))
            .collect();
        report.embedding = Some(figures);
    }
    if options.baseline {
        report.systems.push(plain.finish("plain BM25 (baseline)"));
    }
    Ok(report)
}

impl fmt::Display for LocomoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "LoCoMo recall evaluation: {}", self.file)?;
        writeln!(
            f,
            "{} conversations, {} turns captured, {} questions scored (categories 1-4), \
             {} unscored; evidence ids repaired {}, skipped {}",
            self.conversations,
            self.turns_captured,
            self.questions_scored,
            self.questions_unscored,
            self.evidence_ids_repaired,
            self.evidence_ids_skipped
        )?;
        for system in &self.systems {
            writeln!(f)?;
            writeln!(f, "{}", system.system)?;
            writeln!(
                f,
                "{:<10} {:>5} | {:>6} {:>6} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} {:>6} {:>6}",
                "group",
                "n",
                "T R@5",
                "T R@10",
                "T H@5",
                "T H@10",
                "T MRR",
                "S R@5",
                "S R@10",
                "S H@5",
                "S H@10",
                "S MRR"
            )?;
            let mut rows: Vec<(String, &Scores)> = vec![("overall".to_owned(), &system.overall)];
            rows.extend(
                system
                    .per_category
                    .iter()
                    .map(|(c, s)| (format!("category {c}"), s)),
            );
            for (name, s) in rows {
                let (t, ss) = (&s.turn, &s.session);
                writeln!(
                    f,
                    "{:<10} {:>5} | {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} | {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3}",
                    name, s.questions, t.recall_at_5, t.recall_at_10, t.hit_at_5, t.hit_at_10, t.mrr,
                    ss.recall_at_5, ss.recall_at_10, ss.hit_at_5, ss.hit_at_10, ss.mrr
                )?;
            }
        }
        if let Some(default) = self
            .systems
            .iter()
            .find(|s| s.system.ends_with("the default)"))
        {
            writeln!(f)?;
            writeln!(f, "Per conversation, {}", default.system)?;
            writeln!(
                f,
                "{:<14} {:>5} | {:>6} {:>6} {:>6}",
                "conversation", "n", "T R@10", "S R@10", "T MRR"
            )?;
            for (id, s) in self.conversation_ids.iter().zip(&default.per_conversation) {
                writeln!(
                    f,
                    "{:<14} {:>5} | {:>6.3} {:>6.3} {:>6.3}",
                    id, s.questions, s.turn.recall_at_10, s.session.recall_at_10, s.turn.mrr
                )?;
            }
        }
        for l in &self.leave_one_out {
            writeln!(f)?;
            writeln!(
                f,
                "Leave one conversation out, grid \"{}\" ({} systems, the default included): \
                 chosen on the other conversations by the best turn R@10 with session R@10 >= \
                 {SESSION_AIM} (else the best session R@10), scored on the held-out one",
                l.grid, l.systems
            )?;
            for fold in &l.folds {
                writeln!(
                    f,
                    "  held out {:<10} {:>4} q: held-out T/S R@10 {:.3} / {:.3} (others {:.3} / {:.3}); {}",
                    fold.held_out,
                    fold.questions,
                    fold.held_out_scores.0,
                    fold.held_out_scores.1,
                    fold.chosen_on_others.0,
                    fold.chosen_on_others.1,
                    fold.chosen
                )?;
            }
            writeln!(
                f,
                "  pooled held-out T/S R@10 {:.3} / {:.3} (aims {TURN_AIM} / {SESSION_AIM}); \
                 chosen on all five {:.3} / {:.3}: {}",
                l.pooled.0,
                l.pooled.1,
                l.chosen_on_all_scores.0,
                l.chosen_on_all_scores.1,
                l.chosen_on_all
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "No-query block (recall with no query after capturing each conversation): \
             share of the conversation's evidence turns the block cites"
        )?;
        writeln!(
            f,
            "{:<42} | {:>9} {:>9} | {:>7} {:>6}",
            "system", "mean", "pooled", "chars", "turns"
        )?;
        for c in &self.no_query {
            writeln!(
                f,
                "{:<42} | {:>9.3} {:>9.3} | {:>7.0} {:>6.1}",
                c.system, c.coverage_mean, c.coverage_pooled, c.chars_mean, c.turns_mean
            )?;
        }
        if let Some(c) = self.no_query.first() {
            writeln!(f, "(budget: {} characters)", c.max_chars)?;
        }
        if let Some(e) = &self.embedding {
            writeln!(f)?;
            writeln!(
                f,
                "Embedding ({}): model load {:.2} s; {} vectors in {:.1} s ({:.0} items/s); \
                 {} questions embedded, mean {:.2} ms each; {} hybrid rankings, mean {:.2} ms \
                 each without the embedding; {} fell back to lexical",
                e.model,
                e.load_seconds,
                e.vectors,
                e.index_seconds,
                e.vectors as f64 / e.index_seconds.max(1e-9),
                e.queries,
                1000.0 * e.embed_seconds / e.queries.max(1) as f64,
                e.rankings,
                1000.0 * e.search_seconds / e.rankings.max(1) as f64,
                e.embedder_failures
            )?;
            writeln!(
                f,
                "Reference (document path) question embedding: mean {:.2} ms each",
                1000.0 * e.reference_embed_seconds / e.queries.max(1) as f64
            )?;
            for (name, overlap) in &e.dense_overlap {
                writeln!(
                    f,
                    "Dense top 10, {name}: overlap@10 with the exact float32 ranking {overlap:.3}"
                )?;
            }
        }
        if let Some(d) = &self.distill {
            writeln!(f)?;
            writeln!(
                f,
                "Distillation ({}): {} jobs applied, {} parked, {} left queued; {} facts added, \
                 {} superseded, from {} turns; {} model calls, {} prompt / {} completion tokens \
                 ({:.1} calls per 100 turns)",
                d.source,
                d.jobs_applied,
                d.jobs_parked,
                d.jobs_left,
                d.facts_added,
                d.facts_superseded,
                d.turns,
                d.model_calls,
                d.prompt_tokens,
                d.completion_tokens,
                100.0 * d.model_calls as f64 / d.turns.max(1) as f64
            )?;
            writeln!(
                f,
                "Lexical ranking per question, p50 / p99: {:.3} / {:.3} ms without facts, \
                 {:.3} / {:.3} ms in the store that distils",
                d.ranking_without_facts_ms.0,
                d.ranking_without_facts_ms.1,
                d.ranking_with_facts_ms.0,
                d.ranking_with_facts_ms.1,
            )?;
            if d.source == "replay" {
                writeln!(
                    f,
                    "Replay: {} observations of the file, {} resting on no captured turn. Rows \
                     marked replay hold the dataset's own facts: the pipeline's ceiling, not a \
                     model's quality; a fact counts through its source turns",
                    d.observations, d.observations_unplaced
                )?;
            }
        }
        writeln!(f)?;
        write!(
            f,
            "T = turn level (evidence turns D3:5), S = session level (D3); R = recall, H = hit, \
             MRR over the top 10; denominators are question counts"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evidence_ids_are_repaired_or_skipped() {
        let ev = parse_evidence(&[
            json!("D1:3"),
            json!("D:11:26"),
            json!("D8:6; D9:17"),
            json!("D"),
        ]);
        assert_eq!(
            ev.ids,
            [
                DiaId {
                    session: 1,
                    turn: 3
                },
                DiaId {
                    session: 11,
                    turn: 26
                },
                DiaId {
                    session: 8,
                    turn: 6
                },
                DiaId {
                    session: 9,
                    turn: 17
                }
            ]
        );
        assert_eq!((ev.repaired, ev.skipped), (2, 1));
    }

    /// A system whose turn and session recall@10 are `turn` and
    /// `session[c]` on conversations of `questions[c]` questions.
    fn system(name: &str, turn: f64, session: &[f64], questions: &[usize]) -> SystemScores {
        let scores = |t: f64, s: f64, n: usize| {
            let mut out = Scores {
                questions: n,
                ..Scores::default()
            };
            out.turn.recall_at_10 = t;
            out.session.recall_at_10 = s;
            out
        };
        let n: usize = questions.iter().sum();
        let pooled = session
            .iter()
            .zip(questions)
            .map(|(s, q)| s * *q as f64)
            .sum::<f64>();
        SystemScores {
            system: name.to_owned(),
            overall: scores(turn, pooled / n as f64, n),
            per_category: BTreeMap::new(),
            per_conversation: session
                .iter()
                .zip(questions)
                .map(|(s, q)| scores(turn, *s, *q))
                .collect(),
        }
    }

    #[test]
    fn the_rule_prefers_turn_recall_among_systems_meeting_the_session_aim() {
        // b and c meet the session aim; c has the better turn recall.
        assert_eq!(choose(&[(0.9, 0.90), (0.7, 0.93), (0.8, 0.92)]), Some(2));
        // None meets it: the best session recall, the earlier on a tie.
        assert_eq!(choose(&[(0.9, 0.90), (0.7, 0.91), (0.8, 0.91)]), Some(1));
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn coverage_tally_keeps_each_conversations_counts_in_order() {
        let id = |s| DiaId::parse(s).unwrap();
        let mut tally = CoverageTally::default();
        let evidence: HashSet<DiaId> = [id("D1:1"), id("D1:2")].into_iter().collect();
        tally.add(&[id("D1:1"), id("D1:3")], 100, &evidence);
        let evidence: HashSet<DiaId> = [id("D2:1")].into_iter().collect();
        tally.add(&[], 50, &evidence);
        let got = tally.finish("block", 200);
        assert_eq!(
            got.per_conversation,
            [
                ConversationCoverage {
                    found: 1,
                    evidence: 2
                },
                ConversationCoverage {
                    found: 0,
                    evidence: 1
                },
            ]
        );
        assert!((got.coverage_mean - 0.25).abs() < 1e-12);
        assert!((got.coverage_pooled - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn leave_one_out_chooses_on_the_other_conversations_and_pools_by_questions() {
        let questions = [10, 10, 20];
        let ids: Vec<String> = ["c0", "c1", "c2"].map(str::to_owned).to_vec();
        let default = system("default", 0.7, &[0.9, 0.9, 0.9], &questions);
        let spread = system("spread", 0.8, &[0.95, 0.95, 0.85], &questions);
        let got = leave_one_out("g", &[&default, &spread], &ids);
        let chosen: Vec<&str> = got.folds.iter().map(|f| f.chosen.as_str()).collect();
        // Holding out c0 or c1, "spread" is at 0.883 on the others (below
        // the aim and the default's 0.9); holding out c2, it is at 0.95.
        assert_eq!(chosen, ["default", "default", "spread"]);
        assert_eq!(got.folds[2].held_out_scores, (0.8, 0.85));
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(near(got.folds[0].chosen_on_others.1, 0.9));
        // Pooled by questions: (7 + 7 + 16) / 40 and (9 + 9 + 17) / 40.
        assert!(
            near(got.pooled.0, 0.75) && near(got.pooled.1, 0.875),
            "{got:?}"
        );
        // On all three both are at session 0.9: the earlier (the default).
        assert_eq!(got.chosen_on_all, "default");
    }

    #[test]
    fn metrics_follow_their_definitions() {
        let id = |t| {
            Some(DiaId {
                session: 1,
                turn: t,
            })
        };
        let ranked: Vec<Vec<DiaId>> = (1..=10).map(|t| id(t).into_iter().collect()).collect();
        let evidence: HashSet<DiaId> = [3, 7, 40].iter().map(|t| id(*t).unwrap()).collect();
        let m = measure(&ranked, &evidence);
        assert_eq!(m[0], 1.0 / 3.0); // only turn 3 in the top 5
        assert_eq!(m[1], 2.0 / 3.0);
        assert_eq!((m[2], m[3]), (1.0, 1.0));
        assert_eq!(m[4], 1.0 / 3.0); // first hit at rank 3
        assert_eq!(measure(&ranked, &HashSet::new()), [0.0; 5]);
    }
}
