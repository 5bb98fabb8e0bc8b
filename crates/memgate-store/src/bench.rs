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
//! length written directly (the latency of a search over them does not
//! depend on their values, and embedding 100k items would take minutes),
//! and every timed recall embeds its query with the real embedder. The
//! model's load time is reported too.

use crate::config::LocalConfig;
use crate::store::MemoryStore;
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryError, Message, RecallRequest};
use memgate_core::{RememberRequest, Result};
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
/// The budget of earlier releases, kept as a reference ranking.
const EARLIER_BUDGET: usize = 600;
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
    pub embedder: Option<crate::config::EmbedderSettings>,
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
    /// Ranking quality across postings budgets, over up to
    /// [`OVERLAP_QUERIES`] timed queries: the share whose source turn (the
    /// turn the query's words were taken from) is in the top 10, with the
    /// shipped budget, the earlier budget (600) and BM25 over every match;
    /// and the mean share of the earlier budget's top 10 the shipped one keeps.
    pub quality_queries: usize,
    pub source_at_10: f64,
    pub earlier_source_at_10: f64,
    pub unpruned_source_at_10: f64,
    pub overlap_at_10_vs_earlier: f64,
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
/// ([`crate::ranking::RankProfile`]) and where its time went, in ms.
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
    fn of(wall: Duration, cpu: Option<Duration>, p: &crate::ranking::RankProfile) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let ranking = p.plan + p.candidates + p.places + p.neighbours + p.rows;
        Self {
            recalls: 1,
            no_query: f64::from(u8::from(p.rankings == 0)),
            newest: p.newest as f64,
            terms: p.terms as f64,
            counted: p.counted as f64,
            plan_n: p.plan_n as f64,
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
             counted, plan n {:.0}; ms wall {:.3} / cpu {cpu}: plan {:.3}, candidates {:.3}, \
             places {:.3}, neighbours {:.3}, rows {:.3}, rest {:.3}",
            self.recalls,
            100.0 * self.no_query,
            100.0 * self.newest,
            self.terms,
            self.counted,
            self.plan_n,
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
        let (recall, profile) = crate::ranking::profiled(|| store.recall(&request));
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
    let key = crate::scope::ScopeKey::of(caller);
    let pool = crate::ranking::candidate_pool(store.config().recall_top_k);
    let vectors: Vec<Vec<f32>> = queries
        .iter()
        .filter_map(|q| store.query_vector(q).vector().map(<[f32]>::to_vec))
        .collect();
    store.read(|conn| {
        let Some(scope) = key.find(conn)? else {
            return Ok(Vec::new());
        };
        let exact: Vec<Vec<i64>> = vectors
            .iter()
            .map(|v| store.exact_nearest(conn, scope, v, 10))
            .collect::<Result<_>>()?;
        let mut out = Vec::new();
        for &factor in PREFILTER_FACTORS {
            let (mut overlap, mut took) = (0.0, Vec::new());
            for (v, exact) in vectors.iter().zip(&exact) {
                let started = Instant::now();
                let (nearest, _) = store.nearest_items_with(
                    conn,
                    scope,
                    v,
                    pool,
                    &[],
                    factor.unwrap_or(usize::MAX),
                )?;
                took.push(started.elapsed());
                let found: Vec<i64> = nearest.iter().map(|(i, _)| *i).collect();
                overlap += crate::vectors::overlap(&found, exact);
            }
            took.sort_unstable();
            out.push(PrefilterFigure {
                factor,
                overlap_at_10: overlap / vectors.len().max(1) as f64,
                search_p50_ms: percentile_ms(&took, 0.5),
                search_p99_ms: percentile_ms(&took, 0.99),
            });
        }
        Ok(out)
    })
}

/// The benchmark report (`--json` serializes it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport {
    pub cores: usize,
    pub profile: &'static str,
    pub sizes: Vec<SizeReport>,
}

/// A small deterministic generator (SplitMix64), so runs are repeatable.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const FUNCTION_WORDS: &[&str] = &[
    "the", "a", "and", "to", "of", "i", "you", "it", "is", "that", "in", "we", "for", "on", "with",
    "was", "my", "this", "be", "have",
];

/// Content words people use; the injection query's words are among them so
/// a query-less recall finds something, as it would in real use.
const COMMON_WORDS: &[&str] = &[
    "project",
    "meeting",
    "deadline",
    "profile",
    "preferences",
    "important",
    "events",
    "goals",
    "constraints",
    "decisions",
    "prior",
    "ongoing",
    "entities",
    "user",
    "travel",
    "family",
    "budget",
    "music",
    "coffee",
    "weekend",
    "report",
    "server",
    "database",
    "team",
    "release",
    "garden",
    "book",
    "flight",
    "doctor",
    "birthday",
    "recipe",
    "python",
    "rust",
    "editor",
    "vim",
    "deploy",
    "invoice",
    "school",
    "piano",
    "hiking",
];

/// Zipf-distributed text over common and synthetic words (shared with the
/// postgres backend's benchmark, so both measure the same text).
pub struct TextGen {
    vocab: Vec<String>,
    cumulative: Vec<f64>,
}

impl TextGen {
    pub fn new(rng: &mut SplitMix, synthetic: usize) -> Self {
        const SYLLABLES: &[&str] = &[
            "ka", "lo", "mi", "ren", "tas", "vo", "quin", "bar", "del", "su", "nor", "pe", "gil",
            "tra", "zu", "mon", "fe", "lis", "dor", "wen",
        ];
        let mut vocab: Vec<String> = COMMON_WORDS.iter().map(|w| (*w).to_owned()).collect();
        while vocab.len() < COMMON_WORDS.len() + synthetic {
            let n = 2 + rng.below(3);
            let word: String = (0..n)
                .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                .collect();
            vocab.push(word);
        }
        // Shuffle so common words are spread over the ranks.
        for i in (1..vocab.len()).rev() {
            vocab.swap(i, rng.below(i + 1));
        }
        let mut total = 0.0;
        let cumulative = (1..=vocab.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Self { vocab, cumulative }
    }

    pub fn word(&self, rng: &mut SplitMix) -> &str {
        let total = *self.cumulative.last().unwrap_or(&1.0);
        let x = rng.unit() * total;
        let i = self.cumulative.partition_point(|c| *c < x);
        &self.vocab[i.min(self.vocab.len() - 1)]
    }

    pub fn sentence(&self, rng: &mut SplitMix, words: usize) -> String {
        let mut out = String::new();
        for i in 0..words {
            if i > 0 {
                out.push(' ');
            }
            if rng.below(10) < 4 {
                out.push_str(FUNCTION_WORDS[rng.below(FUNCTION_WORDS.len())]);
            } else {
                out.push_str(self.word(rng));
            }
        }
        out
    }
}

/// The synthetic memory of one benchmark size, generated from one
/// [`SplitMix`] in a fixed order (the text's vocabulary, then the captures,
/// then the explicit memories, then the queries), so the local store's
/// bench and the postgres backend's bench measure the same data for the
/// same seed. Captures are made one at a time, so a large size is never
/// held in memory whole.
pub struct Workload {
    pub text: TextGen,
    /// The (user, agent) scope everything is written to and recalled from.
    pub user: Caller,
    /// Captured turns in all.
    pub turns: usize,
    /// Explicit memories, one [`Workload::memory`] each.
    pub memories: usize,
    per_capture: usize,
    made: usize,
    threads: usize,
    /// One captured sentence in 50, the material of [`Workload::query`].
    samples: Vec<String>,
}

impl Workload {
    /// `items` in all: one explicit memory per `memory_every`, the rest
    /// turns in new-thread snapshots of `per_capture`.
    pub fn new(rng: &mut SplitMix, items: usize, memory_every: usize, per_capture: usize) -> Self {
        let memories = items / memory_every.max(1);
        Self {
            text: TextGen::new(rng, 20_000),
            user: Caller::new("bench-user").with_agent("bench-agent"),
            turns: items - memories,
            memories,
            per_capture: per_capture.max(1),
            made: 0,
            threads: 0,
            samples: Vec::new(),
        }
    }

    /// The next capture (a new thread's snapshot, human and AI turns
    /// alternating), or `None` once every turn is made.
    pub fn next_capture(&mut self, rng: &mut SplitMix) -> Option<CaptureRequest> {
        if self.made == self.turns {
            return None;
        }
        let n = self.per_capture.min(self.turns - self.made);
        let thread = self.threads;
        let messages = (0..n)
            .map(|i| {
                let words = if i % 2 == 0 {
                    8 + rng.below(20)
                } else {
                    15 + rng.below(45)
                };
                let s = self.text.sentence(rng, words);
                if rng.below(50) == 0 {
                    self.samples.push(s.clone());
                }
                if i % 2 == 0 {
                    Message::human(s)
                } else {
                    Message::ai(s)
                }
                .with_id(format!("t{thread}-{i}"))
            })
            .collect();
        self.made += n;
        self.threads += 1;
        Some(CaptureRequest {
            caller: self.user.clone().with_thread(format!("thread-{thread}")),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
    }

    /// Explicit memory `i` (a short fact, numbered so none repeats).
    pub fn memory(&self, rng: &mut SplitMix, i: usize) -> Result<RememberRequest> {
        let words = 5 + rng.below(15);
        let fact = format!("{} (note {i})", self.text.sentence(rng, words));
        RememberRequest::new("fact", &fact)
    }

    /// A realistic recall query: a few words of an earlier message plus a
    /// couple of unrelated words, and one time in 20 none at all.
    /// The captured sentences queries are drawn from.
    pub fn samples(&self) -> &[String] {
        &self.samples
    }

    pub fn query(&self, rng: &mut SplitMix) -> Option<String> {
        self.sourced_query(rng).map(|(q, _)| q)
    }

    /// [`Workload::query`] with the captured sentence its words were taken
    /// from (what the ranking-quality figures look for in the top 10).
    pub fn sourced_query(&self, rng: &mut SplitMix) -> Option<(String, &str)> {
        if rng.below(20) == 0 || self.samples.is_empty() {
            return None;
        }
        let sample = &self.samples[rng.below(self.samples.len())];
        let words: Vec<&str> = sample.split(' ').collect();
        let take = (3 + rng.below(6)).min(words.len());
        let start = rng.below(words.len() - take + 1);
        let mut q = words[start..start + take].join(" ");
        for _ in 0..1 + rng.below(2) {
            q.push(' ');
            q.push_str(self.text.word(rng));
        }
        Some((format!("{q}?"), sample.as_str()))
    }
}

/// Nanoseconds this thread has spent on a CPU (`CLOCK_THREAD_CPUTIME_ID`;
/// finer than `/proc/thread-self/schedstat`, which moves in scheduler
/// ticks here). Shared with the encoder example.
#[cfg(unix)]
pub fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(unix))]
pub fn thread_cpu_ns() -> Option<u64> {
    None
}

/// Minor page faults and involuntary context switches of the process.
#[cfg(unix)]
fn rusage_counts() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value; getrusage writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0, 0);
    }
    (usage.ru_minflt as u64, usage.ru_nivcsw as u64)
}

#[cfg(not(unix))]
fn rusage_counts() -> (u64, u64) {
    (0, 0)
}

/// Page cache hits and misses of `conn` since the last call (the counters
/// are reset).
fn page_cache_counts(conn: &rusqlite::Connection) -> (u64, u64) {
    use rusqlite::ffi;
    let read = |op| {
        let (mut current, mut highest) = (0, 0);
        // SAFETY: the handle is live for the borrow of `conn`; the out
        // pointers are valid.
        unsafe { ffi::sqlite3_db_status(conn.handle(), op, &mut current, &mut highest, 1) };
        current.max(0) as u64
    };
    (
        read(ffi::SQLITE_DBSTATUS_CACHE_HIT),
        read(ffi::SQLITE_DBSTATUS_CACHE_MISS),
    )
}

/// Source-turn hit rates at 10 of `queries` (query, source text) with the
/// shipped budget, the earlier one and none, and the shipped top 10's
/// overlap with the earlier one's (see [`SizeReport`]).
fn budget_quality(
    conn: &rusqlite::Connection,
    user: &Caller,
    queries: &[(String, &str)],
) -> Result<[f64; 4]> {
    use crate::ranking::{rank_within, TermCounts, POSTINGS_BUDGET};
    let Some(scope) = crate::scope::ScopeKey::of(user).find(conn)? else {
        return Ok([0.0; 4]);
    };
    let budgets = [POSTINGS_BUDGET, EARLIER_BUDGET, UNPRUNED];
    let common = budgets.map(|_| TermCounts::default());
    let mut sums = [0.0; 4];
    for (query, source) in queries {
        let mut tops = Vec::with_capacity(budgets.len());
        for (i, (budget, common)) in budgets.iter().zip(&common).enumerate() {
            let top = rank_within(conn, common, *budget, scope, query, 10, None)?;
            sums[i] += f64::from(u8::from(top.iter().any(|r| r.text == *source)));
            tops.push(top.into_iter().map(|r| r.citation).collect::<Vec<_>>());
        }
        let earlier = &tops[1];
        let kept = earlier.iter().filter(|c| tops[0].contains(c)).count();
        sums[3] += if earlier.is_empty() {
            1.0
        } else {
            kept as f64 / earlier.len() as f64
        };
    }
    let n = queries.len().max(1) as f64;
    Ok(sums.map(|s| s / n))
}

fn vm_hwm_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Resets the peak RSS counter (Linux: `echo 5 > /proc/self/clear_refs`).
fn reset_vm_hwm() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1000.0
}

fn file_mb(path: &std::path::Path) -> f64 {
    let mut total = 0u64;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        total += std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len());
    }
    total as f64 / (1024.0 * 1024.0)
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
        std::hint::black_box(crate::salience::excerpt(text, &[]));
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
        figures.synthetic_vectors = store.fill_random_vectors(rng.next_u64())?;
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
    store.read(|conn| Ok(page_cache_counts(conn)))?;
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
    let (reader_cache_hits, reader_cache_misses) =
        store.read(|conn| Ok(page_cache_counts(conn)))?;
    let overlaps = store.read(|conn| budget_quality(conn, &user, &asked))?;
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
        source_at_10: overlaps[0],
        earlier_source_at_10: overlaps[1],
        unpruned_source_at_10: overlaps[2],
        overlap_at_10_vs_earlier: overlaps[3],
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
            writeln!(
                f,
                "{:>8} | source turn in the top 10 ({} queries): postings budget {} {:.3}, \
                 budget {EARLIER_BUDGET} {:.3}, BM25 over every match {:.3}; top-10 overlap \
                 of budget {} with budget {EARLIER_BUDGET} {:.3}",
                s.items,
                s.quality_queries,
                crate::ranking::POSTINGS_BUDGET,
                s.source_at_10,
                s.earlier_source_at_10,
                s.unpruned_source_at_10,
                crate::ranking::POSTINGS_BUDGET,
                s.overlap_at_10_vs_earlier
            )?;
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
