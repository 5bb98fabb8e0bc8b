//! `memgate bench`: how fast the local store is at a given size.
//!
//! For each size, a fresh store in a temporary directory is filled with
//! synthetic conversation turns (captured in batches, each batch one durable
//! transaction, exactly as a host's capture) and explicit memories (one
//! `remember` each), then asked realistic recall queries: a few words of an
//! earlier message plus a couple of unrelated words, and now and then no
//! query at all (the configured `injection_query`). Text follows a Zipf
//! distribution over a vocabulary, with English function words mixed in.
//!
//! After 200 untimed warm-up recalls, each timed recall is one call.
//! Reported per size: capture throughput (turns/s, durable), remember
//! throughput, recall latency p50/p99 (the whole [`MemoryStore::recall`]:
//! ranking and block assembly), recalls without a query apart (a scope
//! not written to since gets its cached first-turn block) and right after a
//! one-turn capture (the block built again), the file size and the process's peak RSS
//! (`VmHWM`, reset before each size where the kernel allows). Figures are
//! measured, never asserted.
//!
//! With an embedder ([`BenchOptions::embedder`]), recall is hybrid: the
//! first [`EMBED_SAMPLE`] items are embedded by the real embedder through the
//! indexer (giving the indexing rate, i.e. capture throughput with
//! embedding on), the rest get random unit vectors of the same model and
//! length through the same indexer ([`RandomEmbedder::posing_as`]: the
//! latency of a search over them does not depend on their values, and
//! embedding 100k items with the model would take minutes),
//! and every timed recall embeds its query with the real embedder. The
//! model's load time is reported too.

use crate::process::{
    file_mb, overlap, percentile_ms, reset_vm_hwm, rusage_counts, thread_cpu_ns, vm_hwm_mb,
};
use crate::synthetic::RandomEmbedder;
use crate::workload::Workload;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, MemoryError, Message, RecallRequest, Result,
};
use memgate_recall::ranked::{candidate_pool, MAXSCORE_BUDGET};
use memgate_store::config::EmbedderSettings;
use memgate_store::ranking::{profiled, RankProfile, TermCounts};
use memgate_store::{LocalConfig, MemoryStore};
use memgate_testsupport::SplitMix;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Untimed recalls before the timed ones (a running service is warm).
const WARM_UP_QUERIES: usize = 200;
/// Recalls without a query timed right after a capture (the block rebuilt).
const REBUILT_BLOCK_RECALLS: usize = 20;
/// Timed queries whose top 10 is compared across postings budgets.
const OVERLAP_QUERIES: usize = 200;
/// A postings budget no bench query reaches: BM25 over every match.
const UNPRUNED: usize = 10_000_000;
/// The postings budgets whose rankings are compared (the shipped one is
/// added when it is not among them).
const COMPARED_BUDGETS: [usize; 6] = [600, 1_500, 2_000, 5_000, 20_000, UNPRUNED];
/// Items embedded by the real embedder when benchmarking hybrid recall.
pub const EMBED_SAMPLE: usize = 1_000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Item counts (turns + memories) of the stores to build.
    pub sizes: Vec<usize>,
    /// Recall queries timed per size.
    pub recall_queries: usize,
    /// Turns per capture call (one transaction each).
    pub capture_batch: usize,
    /// One explicit memory per this many items.
    pub memory_every: usize,
    pub seed: u64,
    /// Where to create the stores (a temporary directory by default).
    pub dir: Option<PathBuf>,
    /// Benchmark hybrid recall with this embedder (see the module doc).
    pub embedder: Option<EmbedderSettings>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            sizes: vec![10_000, 100_000],
            recall_queries: 2_000,
            capture_batch: 100,
            memory_every: 100,
            seed: 0x6d67_6174,
            dir: None,
            embedder: None,
        }
    }
}

/// Figures for one store size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeReport {
    pub items: usize,
    pub turns: usize,
    pub memories: usize,
    pub capture_batch: usize,
    pub capture_turns_per_sec: f64,
    /// Per capture call (one batch, one durable transaction): the index
    /// merges a write triggers are paid inside some of them.
    pub capture_p99_ms: f64,
    pub capture_max_ms: f64,
    /// Of capture's time per turn, what computing the turn's first-turn
    /// excerpt costs (`salience::excerpt`, timed again over the same texts
    /// outside the store; the UPDATE that stores it is not included).
    pub excerpt_us_per_turn: f64,
    pub replay_turns_per_sec: f64,
    pub remember_per_sec: f64,
    pub recall_queries: usize,
    pub recall_p50_ms: f64,
    pub recall_p99_ms: f64,
    pub recall_max_ms: f64,
    /// On-CPU time of the recalling thread: latency without waiting for a
    /// core, which matters on a shared machine.
    pub recall_cpu_p50_ms: Option<f64>,
    pub recall_cpu_p99_ms: Option<f64>,
    pub recall_mean_items: f64,
    /// The recalls without a query alone (the first-turn block).
    pub no_query_recalls: usize,
    pub no_query_p50_ms: f64,
    pub no_query_p99_ms: f64,
    /// Recalls without a query right after a capture to the scope: the
    /// block is built again (the cached one no longer holds), as at the
    /// start of a host's next conversation.
    pub rebuilt_block_recalls: usize,
    pub rebuilt_block_p50_ms: f64,
    pub rebuilt_block_p99_ms: f64,
    /// On-CPU p50 of each quarter of the timed recalls, in order: a drift
    /// within one run (the machine) against a level set per run (the file).
    pub recall_cpu_p50_by_quarter_ms: Vec<f64>,
    /// The reader connection's page cache over the timed recalls: pages
    /// found in it, and pages read from the file or the write-ahead log.
    pub reader_cache_hits: u64,
    pub reader_cache_misses: u64,
    /// Ranking quality and cost across postings budgets, over up to
    /// [`OVERLAP_QUERIES`] timed queries.
    pub quality_queries: usize,
    pub budgets: Vec<BudgetFigures>,
    /// The write-ahead log's size when the timed recalls start (frames a
    /// reader may have to look pages up in).
    pub wal_mb_at_recall: f64,
    /// Of the process over the timed recalls (`getrusage`): page faults and
    /// involuntary context switches (preempted while recalling).
    pub recall_minor_faults: u64,
    pub recall_involuntary_switches: u64,
    /// Where the time of the slowest timed recalls went, against all.
    pub recall_tail: RecallTail,
    pub database_mb: f64,
    /// Peak resident set size of the process (VmHWM), when readable.
    pub peak_rss_mb: Option<f64>,
    /// False when VmHWM could not be reset, so the peak may come from an
    /// earlier size.
    pub peak_rss_reset: bool,
    /// With an embedder: its model, load time and indexing rate (items/s).
    pub embedder: Option<EmbedderFigures>,
}

/// The embedder's costs in a hybrid run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EmbedderFigures {
    pub model: String,
    pub load_ms: f64,
    pub embedded_items: usize,
    pub embed_items_per_sec: f64,
    pub synthetic_vectors: usize,
    /// The recalls with a query split in two: embedding the query (the
    /// encoder) and the rest (search, fusion, block).
    pub query_embed_p50_ms: f64,
    pub query_embed_p99_ms: f64,
    pub search_p50_ms: f64,
    pub search_p99_ms: f64,
    /// Of the rest: the int8 scan, and the exact re-score of its
    /// candidates (wall, per recall).
    pub dense_scan_p50_ms: f64,
    pub dense_scan_p99_ms: f64,
    pub dense_rescore_p50_ms: f64,
    pub dense_rescore_p99_ms: f64,
    /// The same recalls again with queries of a real question's length
    /// ([`LOCOMO_QUESTION_TOKENS`]), reported apart (`None`: no timed
    /// recalls).
    pub short_queries: Option<ShortQueryFigures>,
    /// The sign prefilter at several factors, against the exact ranking.
    pub prefilter: Vec<PrefilterFigure>,
}

/// Recalls whose queries have the token counts of LoCoMo's questions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShortQueryFigures {
    pub recalls: usize,
    pub mean_tokens: f64,
    pub recall_p50_ms: f64,
    pub recall_p99_ms: f64,
    pub recall_cpu_p50_ms: Option<f64>,
    pub recall_cpu_p99_ms: Option<f64>,
    pub query_embed_p50_ms: f64,
    pub query_embed_p99_ms: f64,
    pub dense_scan_p50_ms: f64,
    pub dense_scan_p99_ms: f64,
}

/// One prefilter setting measured on [`PREFILTER_QUERIES`] queries: the
/// dense search's top 10 against the exact cosine top 10 of the scope, and
/// the dense search's cost (scan and exact re-score, wall).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefilterFigure {
    /// Items kept per int8 candidate (`None`: no prefilter, every item
    /// int8-scanned — the search before the prefilter).
    pub factor: Option<usize>,
    pub overlap_at_10: f64,
    pub search_p50_ms: f64,
    pub search_p99_ms: f64,
}

/// Queries the prefilter comparison runs (each also ranked exactly, which
/// reads every vector of the scope from SQLite).
const PREFILTER_QUERIES: usize = 40;

/// Factors the prefilter comparison measures (`None`: off).
const PREFILTER_FACTORS: &[Option<usize>] = &[None, Some(16), Some(8), Some(4), Some(2)];

/// How many of LoCoMo's 762 scored development questions tokenise (with
/// `[CLS]` and `[SEP]`, all-MiniLM-L6-v2's WordPiece) to each length:
/// `examples/encode DIR 1 locomo-dev.json` prints it. Mean 13.5, p50 13.
pub const LOCOMO_QUESTION_TOKENS: &[(usize, usize)] = &[
    (6, 1),
    (7, 5),
    (8, 29),
    (9, 36),
    (10, 71),
    (11, 89),
    (12, 95),
    (13, 97),
    (14, 73),
    (15, 65),
    (16, 60),
    (17, 41),
    (18, 36),
    (19, 22),
    (20, 16),
    (21, 6),
    (22, 9),
    (23, 6),
    (24, 2),
    (26, 1),
    (27, 1),
    (32, 1),
];

/// A length drawn from [`LOCOMO_QUESTION_TOKENS`].
fn question_tokens(rng: &mut SplitMix) -> usize {
    let total: usize = LOCOMO_QUESTION_TOKENS.iter().map(|(_, n)| n).sum();
    let mut pick = rng.below(total);
    for &(tokens, n) in LOCOMO_QUESTION_TOKENS {
        if pick < n {
            return tokens;
        }
        pick -= n;
    }
    13
}

/// What one batch of timed recalls measured (sorted).
#[derive(Default)]
struct Timings {
    latencies: Vec<Duration>,
    cpu: Vec<Duration>,
    no_query: Vec<Duration>,
    embeds: Vec<Duration>,
    searches: Vec<Duration>,
    scans: Vec<Duration>,
    rescores: Vec<Duration>,
    items: usize,
    /// On-CPU p50 of each quarter of the recalls, in the order they ran
    /// (drift within one run, told apart from drift between runs).
    cpu_p50_by_quarter_ms: Vec<f64>,
    /// Each recall's ranking profile, in the order they ran.
    phases: Vec<RecallPhases>,
}

impl Timings {
    /// On-CPU percentile, when every recall's was read.
    fn cpu_ms(&self, p: f64) -> Option<f64> {
        (self.cpu.len() == self.latencies.len()).then(|| percentile_ms(&self.cpu, p))
    }
}

/// Share of the timed recalls, slowest by on-CPU time, that
/// [`RecallTail`] describes.
const TAIL_SHARE: f64 = 0.02;

/// One recall (or the mean of several): what its rankings did
/// ([`RankProfile`]) and where its time went, in ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RecallPhases {
    pub recalls: usize,
    /// Recalls without a query (the first-turn block, no ranking).
    pub no_query: f64,
    /// Rankings whose terms were all common (newest first, no BM25).
    pub newest: f64,
    pub terms: f64,
    /// Postings counts read from the index (the other terms were known).
    pub counted: f64,
    /// Documents the BM25 plan scores.
    pub plan_n: f64,
    /// Of those, scored by a bound without their length read.
    pub lengths_skipped: f64,
    /// Of those, scored with a length remembered from an earlier query.
    pub lengths_remembered: f64,
    pub wall_ms: f64,
    pub cpu_ms: Option<f64>,
    pub plan_ms: f64,
    pub candidates_ms: f64,
    pub places_ms: f64,
    pub neighbours_ms: f64,
    pub rows_ms: f64,
    /// The recall outside its rankings (standing memories, the block).
    pub rest_ms: f64,
}

impl RecallPhases {
    fn of(wall: Duration, cpu: Option<Duration>, p: &RankProfile) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let ranking = p.plan + p.candidates + p.places + p.neighbours + p.rows;
        Self {
            recalls: 1,
            no_query: f64::from(u8::from(p.rankings == 0)),
            newest: p.newest as f64,
            terms: p.terms as f64,
            counted: p.counted as f64,
            plan_n: p.plan_n as f64,
            lengths_skipped: p.lengths_skipped as f64,
            lengths_remembered: p.lengths_remembered as f64,
            wall_ms: ms(wall),
            cpu_ms: cpu.map(ms),
            plan_ms: ms(p.plan),
            candidates_ms: ms(p.candidates),
            places_ms: ms(p.places),
            neighbours_ms: ms(p.neighbours),
            rows_ms: ms(p.rows),
            rest_ms: ms(wall.saturating_sub(ranking)),
        }
    }

    /// The mean of `all` (their count in `recalls`).
    fn mean(all: &[RecallPhases]) -> Self {
        let n = all.len().max(1) as f64;
        let avg = |field: fn(&RecallPhases) -> f64| all.iter().map(field).sum::<f64>() / n;
        let cpu: Option<f64> = all.iter().map(|r| r.cpu_ms).sum();
        Self {
            recalls: all.len(),
            no_query: avg(|r| r.no_query),
            newest: avg(|r| r.newest),
            terms: avg(|r| r.terms),
            counted: avg(|r| r.counted),
            plan_n: avg(|r| r.plan_n),
            lengths_skipped: avg(|r| r.lengths_skipped),
            lengths_remembered: avg(|r| r.lengths_remembered),
            wall_ms: avg(|r| r.wall_ms),
            cpu_ms: cpu.filter(|_| !all.is_empty()).map(|c| c / n),
            plan_ms: avg(|r| r.plan_ms),
            candidates_ms: avg(|r| r.candidates_ms),
            places_ms: avg(|r| r.places_ms),
            neighbours_ms: avg(|r| r.neighbours_ms),
            rows_ms: avg(|r| r.rows_ms),
            rest_ms: avg(|r| r.rest_ms),
        }
    }

    /// The text report's figures.
    fn line(&self) -> String {
        let cpu = self
            .cpu_ms
            .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.3}"));
        format!(
            "{} recalls ({:.0}% without a query, {:.0}% newest-first): {:.1} terms, {:.1} \
             counted, plan n {:.0} ({:.0} without a length read, {:.0} remembered); ms wall {:.3} / cpu {cpu}: plan {:.3}, candidates {:.3}, \
             places {:.3}, neighbours {:.3}, rows {:.3}, rest {:.3}",
            self.recalls,
            100.0 * self.no_query,
            100.0 * self.newest,
            self.terms,
            self.counted,
            self.plan_n,
            self.lengths_skipped,
            self.lengths_remembered,
            self.wall_ms,
            self.plan_ms,
            self.candidates_ms,
            self.places_ms,
            self.neighbours_ms,
            self.rows_ms,
            self.rest_ms
        )
    }
}

/// The slowest [`TAIL_SHARE`] of the timed recalls by on-CPU time (wall
/// time without a CPU clock), against the mean of all: which recalls the
/// tail is made of.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RecallTail {
    pub slowest: RecallPhases,
    pub all: RecallPhases,
    /// Each of the slowest, slowest first.
    pub slowest_each: Vec<RecallPhases>,
}

impl RecallTail {
    fn of(phases: &[RecallPhases]) -> Self {
        let key = |r: &RecallPhases| r.cpu_ms.unwrap_or(r.wall_ms);
        let mut by_time: Vec<&RecallPhases> = phases.iter().collect();
        by_time.sort_by(|a, b| key(b).total_cmp(&key(a)));
        let n = ((phases.len() as f64 * TAIL_SHARE).ceil() as usize).min(phases.len());
        let slowest_each: Vec<RecallPhases> = by_time[..n].iter().map(|r| (*r).clone()).collect();
        Self {
            slowest: RecallPhases::mean(&slowest_each),
            all: RecallPhases::mean(phases),
            slowest_each,
        }
    }
}

/// Times one recall per query (`hybrid`: split each into its parts).
fn time_recalls(
    store: &MemoryStore,
    caller: &Caller,
    queries: Vec<Option<String>>,
    hybrid: bool,
) -> Result<Timings> {
    let mut t = Timings::default();
    for query in queries {
        let request = RecallRequest {
            caller: caller.clone(),
            query,
        };
        let before = store.retrieval_counts();
        let cpu_before = thread_cpu_ns();
        let started = Instant::now();
        let (recall, profile) = profiled(|| store.recall(&request));
        let recall = recall?;
        let took = started.elapsed();
        t.latencies.push(took);
        if request.query.is_none() {
            t.no_query.push(took);
        } else if hybrid {
            let after = store.retrieval_counts();
            let nanos = |a: u64, b: u64| Duration::from_nanos(a - b);
            let embed = nanos(after.query_embed_nanos, before.query_embed_nanos);
            t.scans
                .push(nanos(after.dense_scan_nanos, before.dense_scan_nanos));
            t.rescores
                .push(nanos(after.dense_rescore_nanos, before.dense_rescore_nanos));
            t.embeds.push(embed);
            t.searches.push(took.saturating_sub(embed));
        }
        let cpu = cpu_before
            .zip(thread_cpu_ns())
            .map(|(a, b)| Duration::from_nanos(b.saturating_sub(a)));
        t.cpu.extend(cpu);
        t.phases.push(RecallPhases::of(took, cpu, &profile));
        t.items += recall.items.len();
    }
    t.cpu_p50_by_quarter_ms = t
        .cpu
        .chunks(t.cpu.len().div_ceil(4).max(1))
        .map(|quarter| {
            let mut quarter = quarter.to_vec();
            quarter.sort_unstable();
            percentile_ms(&quarter, 0.5)
        })
        .collect();
    for v in [
        &mut t.latencies,
        &mut t.cpu,
        &mut t.no_query,
        &mut t.embeds,
        &mut t.searches,
        &mut t.scans,
        &mut t.rescores,
    ] {
        v.sort_unstable();
    }
    Ok(t)
}

/// The prefilter at each of [`PREFILTER_FACTORS`] on `queries`: overlap@10
/// with the exact ranking, and the dense search's wall time.
fn measure_prefilter(
    store: &MemoryStore,
    caller: &Caller,
    queries: &[String],
) -> Result<Vec<PrefilterFigure>> {
    let pool = candidate_pool(store.config().recall.recall_top_k);
    let vectors: Vec<Vec<f32>> = queries
        .iter()
        .filter_map(|q| store.query_vector(q).vector().map(<[f32]>::to_vec))
        .collect();
    let exact: Vec<Vec<i64>> = vectors
        .iter()
        .map(|v| store.exact_nearest(caller, v, 10))
        .collect::<Result<_>>()?;
    let mut out = Vec::new();
    for &factor in PREFILTER_FACTORS {
        let (mut overlap_sum, mut took) = (0.0, Vec::new());
        for (v, exact) in vectors.iter().zip(&exact) {
            let started = Instant::now();
            let nearest = store.nearest_items(caller, v, pool, factor.unwrap_or(usize::MAX))?;
            took.push(started.elapsed());
            let found: Vec<i64> = nearest.iter().map(|(i, _)| *i).collect();
            overlap_sum += overlap(&found, exact);
        }
        took.sort_unstable();
        out.push(PrefilterFigure {
            factor,
            overlap_at_10: overlap_sum / vectors.len().max(1) as f64,
            search_p50_ms: percentile_ms(&took, 0.5),
            search_p99_ms: percentile_ms(&took, 0.99),
        });
    }
    Ok(out)
}

/// One postings budget's lexical ranking of the quality queries.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetFigures {
    pub budget: usize,
    /// Share of queries whose source turn (the turn the query's words were
    /// taken from) is in the top 10: over all, then over the first and the
    /// second half apart (a budget chosen on one half is checked on the
    /// other).
    pub source_at_10: f64,
    pub source_at_10_first_half: f64,
    pub source_at_10_second_half: f64,
    /// Mean share of the top 10 of BM25 over every match this budget keeps.
    pub overlap_with_unpruned: f64,
    /// Share of BM25 rankings MaxScore proved exact within the budget.
    pub exact_share: f64,
    /// The ranking alone (no block), wall time.
    pub rank_p50_ms: f64,
    pub rank_p99_ms: f64,
}

/// The benchmark report (`--json` serializes it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport {
    pub cores: usize,
    pub profile: &'static str,
    pub sizes: Vec<SizeReport>,
}

/// Each budget's figures over `queries` (query, source text): see
/// [`BudgetFigures`]. The budgets take turns query by query, so a drift of
/// the machine's speed reaches them alike.
fn budget_quality(
    store: &MemoryStore,
    user: &Caller,
    queries: &[(String, &str)],
) -> Result<Vec<BudgetFigures>> {
    let mut budgets = COMPARED_BUDGETS.to_vec();
    if !budgets.contains(&MAXSCORE_BUDGET) {
        budgets.push(MAXSCORE_BUDGET);
        budgets.sort_unstable();
    }
    let counts: Vec<TermCounts> = budgets.iter().map(|_| TermCounts::default()).collect();
    let half = queries.len() / 2;
    let mut hits = vec![[0.0f64; 2]; budgets.len()];
    let mut overlap_sum = vec![0.0; budgets.len()];
    let mut took = vec![Vec::with_capacity(queries.len()); budgets.len()];
    let (mut scored, mut inexact) = (vec![0usize; budgets.len()], vec![0usize; budgets.len()]);
    for (q, (query, source)) in queries.iter().enumerate() {
        let mut tops = Vec::with_capacity(budgets.len());
        for (i, budget) in budgets.iter().enumerate() {
            let started = Instant::now();
            let (top, profile) =
                profiled(|| store.ranked_within(user, &counts[i], *budget, query, 10));
            took[i].push(started.elapsed());
            let top = top?;
            hits[i][usize::from(q >= half)] +=
                f64::from(u8::from(top.iter().any(|r| r.text == *source)));
            scored[i] += profile.rankings - profile.newest;
            inexact[i] += profile.inexact;
            tops.push(top.into_iter().map(|r| r.citation).collect::<Vec<_>>());
        }
        let unpruned = &tops[budgets.iter().position(|b| *b == UNPRUNED).unwrap_or(0)];
        for (i, top) in tops.iter().enumerate() {
            let kept = unpruned.iter().filter(|c| top.contains(c)).count();
            overlap_sum[i] += if unpruned.is_empty() {
                1.0
            } else {
                kept as f64 / unpruned.len() as f64
            };
        }
    }
    let n = queries.len().max(1) as f64;
    Ok(budgets
        .iter()
        .enumerate()
        .map(|(i, budget)| {
            took[i].sort_unstable();
            BudgetFigures {
                budget: *budget,
                source_at_10: (hits[i][0] + hits[i][1]) / n,
                source_at_10_first_half: hits[i][0] / half.max(1) as f64,
                source_at_10_second_half: hits[i][1] / (queries.len() - half).max(1) as f64,
                overlap_with_unpruned: overlap_sum[i] / n,
                exact_share: 1.0 - inexact[i] as f64 / scored[i].max(1) as f64,
                rank_p50_ms: percentile_ms(&took[i], 0.50),
                rank_p99_ms: percentile_ms(&took[i], 0.99),
            }
        })
        .collect())
}

fn bench_size(items: usize, opts: &BenchOptions, rng: &mut SplitMix) -> Result<SizeReport> {
    let peak_rss_reset = reset_vm_hwm();
    let dir = match &opts.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .map_err(|e| MemoryError::backend(format!("cannot create a benchmark directory: {e}")))?;
    let path = dir.path().join("bench.sqlite3");
    let mut store = MemoryStore::open(&path, LocalConfig::default())?;
    let mut embedder = None;
    let mut tokens_of = None;
    if let Some(settings) = &opts.embedder {
        let started = Instant::now();
        let built = settings.build()?;
        let load_ms = started.elapsed().as_secs_f64() * 1000.0;
        embedder = Some(EmbedderFigures {
            model: built.model().to_owned(),
            load_ms,
            embedded_items: 0,
            embed_items_per_sec: 0.0,
            synthetic_vectors: 0,
            query_embed_p50_ms: 0.0,
            query_embed_p99_ms: 0.0,
            search_p50_ms: 0.0,
            search_p99_ms: 0.0,
            dense_scan_p50_ms: 0.0,
            dense_scan_p99_ms: 0.0,
            dense_rescore_p50_ms: 0.0,
            dense_rescore_p99_ms: 0.0,
            short_queries: None,
            prefilter: Vec::new(),
        });
        tokens_of = Some(std::sync::Arc::clone(&built));
        store = store.with_embedder(built);
    }
    let batch = opts.capture_batch.max(1);
    let mut workload = Workload::new(rng, items, opts.memory_every, batch);
    let (turns, memories) = (workload.turns, workload.memories);
    let user = workload.user.clone();

    // Capture: each call is one new thread snapshot of `batch` turns.
    let mut captured_texts: Vec<String> = Vec::with_capacity(turns);
    let mut capture_time = Duration::ZERO;
    let mut capture_calls = Vec::new();
    let mut replay: Option<CaptureRequest> = None;
    while let Some(request) = workload.next_capture(rng) {
        let n = request.messages.len();
        captured_texts.extend(request.messages.iter().map(Message::text));
        let started = Instant::now();
        let report = store.capture(&request)?;
        capture_time += started.elapsed();
        capture_calls.push(started.elapsed());
        if report.stored != n {
            return Err(MemoryError::backend(format!(
                "benchmark capture stored {} of {n} turns",
                report.stored
            )));
        }
        replay.get_or_insert(request);
    }

    capture_calls.sort_unstable();
    let started = Instant::now();
    for text in &captured_texts {
        std::hint::black_box(memgate_recall::salience::excerpt(text, &[]));
    }
    let excerpt_us_per_turn =
        started.elapsed().as_secs_f64() * 1e6 / captured_texts.len().max(1) as f64;
    drop(captured_texts);

    // Replaying a known snapshot: de-duplication only.
    let replay_turns_per_sec = match &replay {
        Some(request) => {
            let rounds = 20;
            let started = Instant::now();
            for _ in 0..rounds {
                store.capture(request)?;
            }
            (rounds * request.messages.len()) as f64 / started.elapsed().as_secs_f64()
        }
        None => 0.0,
    };

    let started = Instant::now();
    for i in 0..memories {
        store.remember(&user, &workload.memory(rng, i)?)?;
    }
    let remember_per_sec = memories as f64 / started.elapsed().as_secs_f64().max(1e-9);

    if let Some(figures) = embedder.as_mut() {
        let started = Instant::now();
        let mut embedded = 0;
        while embedded < EMBED_SAMPLE.min(items) {
            let n = store.index_vectors(32)?;
            if n == 0 {
                break;
            }
            embedded += n;
        }
        figures.embedded_items = embedded;
        figures.embed_items_per_sec = embedded as f64 / started.elapsed().as_secs_f64().max(1e-9);
        // The rest: random unit vectors filed under the model's name, through
        // the same indexer; a search's cost does not depend on their values.
        if let Some(real) = tokens_of.clone() {
            let dims = real
                .embed(&["dimensions"])
                .map_err(|e| MemoryError::backend(e.to_string()))?
                .first()
                .map_or(0, Vec::len);
            let model = real.model().to_owned();
            store = store.with_embedder(RandomEmbedder::posing_as(&model, dims));
            figures.synthetic_vectors = store.index_all_vectors(256)?;
            store = store.with_embedder(real);
        }
    }

    // Recall: warm up, then time each call.
    // A query and the turn its words were taken from.
    let query = |rng: &mut SplitMix| workload.sourced_query(rng);
    for _ in 0..WARM_UP_QUERIES {
        let q = query(rng);
        store.recall(&RecallRequest {
            caller: user.clone(),
            query: q.map(|(q, _)| q),
        })?;
    }
    store.page_cache_counts()?;
    let wal_mb_at_recall = {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::metadata(PathBuf::from(wal)).map_or(0, |m| m.len()) as f64 / (1024.0 * 1024.0)
    };
    let usage_before = rusage_counts();
    let queries: Vec<Option<(String, &str)>> =
        (0..opts.recall_queries).map(|_| query(rng)).collect();
    let asked: Vec<(String, &str)> = queries
        .iter()
        .flatten()
        .take(OVERLAP_QUERIES)
        .cloned()
        .collect();
    let queries = queries.into_iter().map(|q| q.map(|(q, _)| q)).collect();
    let timed = time_recalls(&store, &user, queries, embedder.is_some())?;
    let usage_after = rusage_counts();
    // A single client always gets the same pooled reader back.
    let (reader_cache_hits, reader_cache_misses) = store.page_cache_counts()?;
    let budgets = budget_quality(&store, &user, &asked)?;
    let recall_cpu_p50_by_quarter_ms = timed.cpu_p50_by_quarter_ms.clone();
    let mut prefilter_queries = Vec::new();
    // Queries of a real question's length: consecutive words of an earlier
    // message, as many as fit a token count drawn from LoCoMo's questions.
    if let (Some(figures), Some(model)) = (embedder.as_mut(), &tokens_of) {
        let tokens = |q: &str| model.token_count(q).unwrap_or(q.split(' ').count() + 2);
        let (mut short, mut total_tokens) = (Vec::new(), 0);
        while short.len() < opts.recall_queries && !workload.samples().is_empty() {
            let target = question_tokens(rng);
            let words: Vec<&str> = workload.samples()[rng.below(workload.samples().len())]
                .split(' ')
                .collect();
            let start = rng.below(words.len());
            let mut q = format!("{}?", words[start]);
            for w in &words[start + 1..] {
                let longer = format!("{} {w}?", q.trim_end_matches('?'));
                if tokens(&longer) > target {
                    break;
                }
                q = longer;
            }
            total_tokens += tokens(&q);
            short.push(Some(q));
        }
        let recalls = short.len();
        let short_texts: Vec<String> = short
            .iter()
            .flatten()
            .take(PREFILTER_QUERIES)
            .cloned()
            .collect();
        let t = time_recalls(&store, &user, short, true)?;
        figures.short_queries = (recalls > 0).then(|| ShortQueryFigures {
            recalls,
            mean_tokens: total_tokens as f64 / recalls as f64,
            recall_p50_ms: percentile_ms(&t.latencies, 0.50),
            recall_p99_ms: percentile_ms(&t.latencies, 0.99),
            recall_cpu_p50_ms: t.cpu_ms(0.50),
            recall_cpu_p99_ms: t.cpu_ms(0.99),
            query_embed_p50_ms: percentile_ms(&t.embeds, 0.50),
            query_embed_p99_ms: percentile_ms(&t.embeds, 0.99),
            dense_scan_p50_ms: percentile_ms(&t.scans, 0.50),
            dense_scan_p99_ms: percentile_ms(&t.scans, 0.99),
        });
        prefilter_queries = short_texts;
    }
    // The first-turn block after a write: one new turn, then a recall
    // without a query (only the recall is timed).
    let mut rebuilt = Vec::with_capacity(REBUILT_BLOCK_RECALLS);
    for i in 0..REBUILT_BLOCK_RECALLS {
        let message = Message::human(workload.text.sentence(rng, 12)).with_id(format!("after-{i}"));
        store.capture(&CaptureRequest {
            caller: user.clone().with_thread("after-the-timed-recalls"),
            messages: vec![message],
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })?;
        let started = Instant::now();
        store.recall(&RecallRequest {
            caller: user.clone(),
            query: None,
        })?;
        rebuilt.push(started.elapsed());
    }
    rebuilt.sort_unstable();
    let t = &timed;
    if let Some(figures) = embedder.as_mut() {
        figures.query_embed_p50_ms = percentile_ms(&t.embeds, 0.50);
        figures.query_embed_p99_ms = percentile_ms(&t.embeds, 0.99);
        figures.search_p50_ms = percentile_ms(&t.searches, 0.50);
        figures.search_p99_ms = percentile_ms(&t.searches, 0.99);
        figures.dense_scan_p50_ms = percentile_ms(&t.scans, 0.50);
        figures.dense_scan_p99_ms = percentile_ms(&t.scans, 0.99);
        figures.dense_rescore_p50_ms = percentile_ms(&t.rescores, 0.50);
        figures.dense_rescore_p99_ms = percentile_ms(&t.rescores, 0.99);
    }

    // The peak of the recall path: the prefilter comparison below reads
    // every vector of the scope for its exact ranking (SQLite's page cache
    // grows by it), which no recall does.
    let peak_rss_mb = vm_hwm_mb();
    if let Some(figures) = embedder.as_mut() {
        figures.prefilter = measure_prefilter(&store, &user, &prefilter_queries)?;
    }
    let report = SizeReport {
        items,
        turns,
        memories,
        capture_batch: batch,
        capture_turns_per_sec: turns as f64 / capture_time.as_secs_f64().max(1e-9),
        capture_p99_ms: percentile_ms(&capture_calls, 0.99),
        capture_max_ms: percentile_ms(&capture_calls, 1.0),
        excerpt_us_per_turn,
        replay_turns_per_sec,
        remember_per_sec,
        recall_queries: opts.recall_queries,
        recall_p50_ms: percentile_ms(&t.latencies, 0.50),
        recall_p99_ms: percentile_ms(&t.latencies, 0.99),
        recall_max_ms: percentile_ms(&t.latencies, 1.0),
        recall_cpu_p50_ms: t.cpu_ms(0.50),
        recall_cpu_p99_ms: t.cpu_ms(0.99),
        recall_mean_items: t.items as f64 / opts.recall_queries.max(1) as f64,
        no_query_recalls: t.no_query.len(),
        no_query_p50_ms: percentile_ms(&t.no_query, 0.50),
        no_query_p99_ms: percentile_ms(&t.no_query, 0.99),
        rebuilt_block_recalls: rebuilt.len(),
        rebuilt_block_p50_ms: percentile_ms(&rebuilt, 0.50),
        rebuilt_block_p99_ms: percentile_ms(&rebuilt, 0.99),
        recall_cpu_p50_by_quarter_ms,
        quality_queries: asked.len(),
        budgets,
        reader_cache_hits,
        reader_cache_misses,
        wal_mb_at_recall,
        recall_minor_faults: usage_after.0.saturating_sub(usage_before.0),
        recall_involuntary_switches: usage_after.1.saturating_sub(usage_before.1),
        recall_tail: RecallTail::of(&t.phases),
        database_mb: file_mb(&path),
        peak_rss_mb,
        peak_rss_reset,
        embedder,
    };
    store.close()?;
    Ok(report)
}

/// Builds and measures a store at each size.
pub fn run_bench(opts: &BenchOptions) -> Result<BenchReport> {
    let mut rng = SplitMix::new(opts.seed);
    let sizes = opts
        .sizes
        .iter()
        .map(|&n| bench_size(n, opts, &mut rng))
        .collect::<Result<Vec<_>>>()?;
    Ok(BenchReport {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        sizes,
    })
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "memgate local store benchmark ({} build, {} cores)",
            self.profile, self.cores
        )?;
        writeln!(
            f,
            "{:>8} | {:>11} {:>11} {:>10} | {:>10} {:>10} {:>10} | {:>9} {:>9} | {:>6} {:>9}",
            "items",
            "capture t/s",
            "replay t/s",
            "remember/s",
            "recall p50",
            "recall p99",
            "recall max",
            "cpu p50",
            "cpu p99",
            "db MB",
            "peak RSS"
        )?;
        for s in &self.sizes {
            let rss = s
                .peak_rss_mb
                .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.1} MB"));
            let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |m| format!("{m:.3} ms"));
            writeln!(
                f,
                "{:>8} | {:>11.0} {:>11.0} {:>10.0} | {:>7.3} ms {:>7.3} ms {:>7.3} ms | {:>9} {:>9} | {:>6.1} {:>9}",
                s.items,
                s.capture_turns_per_sec,
                s.replay_turns_per_sec,
                s.remember_per_sec,
                s.recall_p50_ms,
                s.recall_p99_ms,
                s.recall_max_ms,
                ms(s.recall_cpu_p50_ms),
                ms(s.recall_cpu_p99_ms),
                s.database_mb,
                rss
            )?;
        }
        for s in &self.sizes {
            let per_turn_us = 1e6 / s.capture_turns_per_sec.max(1e-9);
            writeln!(
                f,
                "{:>8} | capture {:.1} µs per turn, of which the first-turn excerpt {:.1} µs ({:.0}%); \
                 per capture call ({} turns) p99 {:.1} ms, max {:.1} ms",
                s.items,
                per_turn_us,
                s.excerpt_us_per_turn,
                100.0 * s.excerpt_us_per_turn / per_turn_us,
                s.capture_batch,
                s.capture_p99_ms,
                s.capture_max_ms
            )?;
            writeln!(
                f,
                "{:>8} | {} recalls without a query (first-turn block): p50 {:.3} ms, p99 {:.3} ms",
                s.items, s.no_query_recalls, s.no_query_p50_ms, s.no_query_p99_ms
            )?;
            writeln!(
                f,
                "{:>8} | {} recalls without a query right after a capture (block rebuilt): \
                 p50 {:.3} ms, p99 {:.3} ms",
                s.items, s.rebuilt_block_recalls, s.rebuilt_block_p50_ms, s.rebuilt_block_p99_ms
            )?;
            let quarters: Vec<String> = s
                .recall_cpu_p50_by_quarter_ms
                .iter()
                .map(|q| format!("{q:.3}"))
                .collect();
            for b in &s.budgets {
                let name = if b.budget == UNPRUNED {
                    "every match".to_owned()
                } else if b.budget == MAXSCORE_BUDGET {
                    format!("{} (shipped)", b.budget)
                } else {
                    b.budget.to_string()
                };
                writeln!(
                    f,
                    "{:>8} | postings budget {name}: source turn in the top 10 {:.3} \
                     ({} queries; halves {:.3} / {:.3}), top-10 overlap with every match {:.3}, \
                     exact {:.3}; ranking p50 {:.3} / p99 {:.3} ms",
                    s.items,
                    b.source_at_10,
                    s.quality_queries,
                    b.source_at_10_first_half,
                    b.source_at_10_second_half,
                    b.overlap_with_unpruned,
                    b.exact_share,
                    b.rank_p50_ms,
                    b.rank_p99_ms,
                )?;
            }
            let lookups = (s.reader_cache_hits + s.reader_cache_misses).max(1);
            writeln!(
                f,
                "{:>8} | timed recalls: on-CPU p50 by quarter {} ms; reader page cache {} hits, \
                 {} misses ({:.1}%); WAL {:.1} MB at the start; {} minor faults, {} involuntary \
                 switches",
                s.items,
                quarters.join(" / "),
                s.reader_cache_hits,
                s.reader_cache_misses,
                100.0 * s.reader_cache_misses as f64 / lookups as f64,
                s.wal_mb_at_recall,
                s.recall_minor_faults,
                s.recall_involuntary_switches
            )?;
            writeln!(
                f,
                "{:>8} | slowest {:.0}% of the timed recalls by on-CPU time, means: {}",
                s.items,
                100.0 * TAIL_SHARE,
                s.recall_tail.slowest.line()
            )?;
            writeln!(
                f,
                "{:>8} | all timed recalls, means: {}",
                s.items,
                s.recall_tail.all.line()
            )?;
            if let Some(e) = &s.embedder {
                writeln!(
                    f,
                    "{:>8} | hybrid, {}: model load {:.0} ms; {} items embedded at {:.0} items/s; \
                     {} random vectors of the same model; recalls with a query: query \
                     embedding p50 {:.3} / p99 {:.3} ms, the rest p50 {:.3} / p99 {:.3} ms \
                     (of it int8 scan p50 {:.3} / p99 {:.3} ms, exact re-score p50 {:.3} / \
                     p99 {:.3} ms)",
                    s.items,
                    e.model,
                    e.load_ms,
                    e.embedded_items,
                    e.embed_items_per_sec,
                    e.synthetic_vectors,
                    e.query_embed_p50_ms,
                    e.query_embed_p99_ms,
                    e.search_p50_ms,
                    e.search_p99_ms,
                    e.dense_scan_p50_ms,
                    e.dense_scan_p99_ms,
                    e.dense_rescore_p50_ms,
                    e.dense_rescore_p99_ms
                )?;
                if let Some(q) = &e.short_queries {
                    let ms =
                        |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |m| format!("{m:.3}"));
                    writeln!(
                        f,
                        "{:>8} | hybrid, {} queries of LoCoMo question length ({:.1} tokens mean): \
                         recall p50 {:.3} / p99 {:.3} ms, cpu p50 {} / p99 {} ms; query \
                         embedding p50 {:.3} / p99 {:.3} ms; int8 scan p50 {:.3} / p99 {:.3} ms",
                        s.items,
                        q.recalls,
                        q.mean_tokens,
                        q.recall_p50_ms,
                        q.recall_p99_ms,
                        ms(q.recall_cpu_p50_ms),
                        ms(q.recall_cpu_p99_ms),
                        q.query_embed_p50_ms,
                        q.query_embed_p99_ms,
                        q.dense_scan_p50_ms,
                        q.dense_scan_p99_ms
                    )?;
                }
                for p in &e.prefilter {
                    writeln!(
                        f,
                        "{:>8} | dense search, sign prefilter {}: overlap@10 with the exact \
                         ranking {:.3}; search (scan + exact re-score) p50 {:.3} / p99 {:.3} ms",
                        s.items,
                        p.factor
                            .map_or_else(|| "off".to_owned(), |f| format!("x{f}")),
                        p.overlap_at_10,
                        p.search_p50_ms,
                        p.search_p99_ms
                    )?;
                }
            }
        }
        write!(
            f,
            "capture: {} turns per durable transaction; recall: {} timed queries per size, \
             whole recall call (ranking + block); cpu = on-CPU time of the recalling thread",
            self.sizes.first().map_or(0, |s| s.capture_batch),
            self.sizes.first().map_or(0, |s| s.recall_queries)
        )
    }
}
