//! What erasure costs on the local store, and what it does to captures.
//!
//! For each size, a fresh store is filled with synthetic turns (captured in
//! 100-turn thread snapshots, as [`crate::store_bench`] does) and explicit
//! memories (one per 100 items) spread over scopes: `alice` (default agent
//! and `coder`, about a tenth of the items each), and `bob` with the rest.
//! Then each level is forgotten once, smallest first, on the same store:
//! one fact with two versions, one 100-turn thread, alice's default scope,
//! then alice (her remaining `coder` scope).
//!
//! Per level: the wall time of the whole `forget` call, and separately the
//! part every erasure pays whatever it removes (the recall index merged into
//! one segment, then the write-ahead log checkpointed and truncated),
//! measured alone right after on the same store. While each forget runs,
//! another thread captures 2-turn snapshots into bob's scope; reported are
//! how many finished during the forget, the slowest of them, and the median
//! capture latency before and right after (20 captures each). Figures are
//! measured, never asserted.

use crate::process::file_mb;
use crate::workload::TextGen;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, FactPatch, ForgetReport, ForgetTarget, MemoryError,
    Message, RememberOutcome, RememberRequest, Result,
};
use memgate_store::{LocalConfig, MemoryStore};
use memgate_testsupport::SplitMix;
use serde::Serialize;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Turns per captured thread snapshot while filling.
const THREAD_TURNS: usize = 100;
/// Captures timed before and after each forget.
const PROBE_CAPTURES: usize = 20;

/// The cost of one forget.
#[derive(Clone, Debug, Serialize)]
pub struct LevelCost {
    pub level: &'static str,
    /// Items (turns + memories) in the store when this forget ran.
    pub items_before: usize,
    pub erased: ForgetCounts,
    pub forget_ms: f64,
    /// Index merge + WAL truncate alone, on the store right after.
    pub fixed_ms: f64,
    /// Captures into another scope that finished while the forget ran.
    pub captures_during: usize,
    /// The slowest of them (they wait for the forget's write transaction).
    pub capture_max_during_ms: f64,
    pub capture_p50_before_ms: f64,
    pub capture_p50_after_ms: f64,
}

/// What one forget erased.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ForgetCounts {
    pub facts: usize,
    pub versions: usize,
    pub turns: usize,
}

impl From<ForgetReport> for ForgetCounts {
    fn from(r: ForgetReport) -> Self {
        Self {
            facts: r.facts,
            versions: r.versions,
            turns: r.turns,
        }
    }
}

/// One store size.
#[derive(Clone, Debug, Serialize)]
pub struct SizeCost {
    pub items: usize,
    pub file_mb: f64,
    pub fill_s: f64,
    pub levels: Vec<LevelCost>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetBenchReport {
    pub cores: usize,
    pub sizes: Vec<SizeCost>,
}

/// Runs the benchmark at each size, in a temporary directory under `dir`
/// (the system's when `None`), deleted afterwards.
pub fn run_forget_bench(sizes: &[usize], dir: Option<&Path>) -> Result<ForgetBenchReport> {
    let mut rng = SplitMix::new(0x666f_7267);
    let mut out = Vec::new();
    for &items in sizes {
        let tmp = match dir {
            Some(d) => tempfile::tempdir_in(d),
            None => tempfile::tempdir(),
        }
        .map_err(|e| MemoryError::backend(format!("cannot create a benchmark directory: {e}")))?;
        out.push(bench_size(
            items,
            &tmp.path().join("forget.sqlite3"),
            &mut rng,
        )?);
    }
    Ok(ForgetBenchReport {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        sizes: out,
    })
}

fn alice() -> Caller {
    Caller::new("alice")
}

fn coder() -> Caller {
    alice().with_agent("coder")
}

fn bob() -> Caller {
    Caller::new("bob")
}

fn snapshot(caller: &Caller, thread: &str, messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone().with_thread(thread),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

/// A `n`-turn thread snapshot of generated text.
fn turns(text: &TextGen, rng: &mut SplitMix, thread: &str, n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let words = 10 + rng.below(40);
            let s = text.sentence(rng, words);
            if i % 2 == 0 {
                Message::human(s)
            } else {
                Message::ai(s)
            }
            .with_id(format!("{thread}-{i}"))
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples.get(samples.len() / 2).map_or(0.0, |d| ms(*d))
}

/// Fills the store: alice's two scopes a tenth of the items each, bob the
/// rest; one explicit memory per 100 items, in the same proportions.
fn fill(store: &MemoryStore, items: usize, text: &TextGen, rng: &mut SplitMix) -> Result<()> {
    let memories = items / 100;
    let threads = (items - memories).div_ceil(THREAD_TURNS);
    for t in 0..threads {
        let owner = match t % 10 {
            0 => alice(),
            1 => coder(),
            _ => bob(),
        };
        let name = format!("thread-{t}");
        let n = THREAD_TURNS.min(items - memories - t * THREAD_TURNS);
        store.capture(&snapshot(&owner, &name, turns(text, rng, &name, n)))?;
    }
    for m in 0..memories {
        let owner = match m % 10 {
            0 => alice(),
            1 => coder(),
            _ => bob(),
        };
        let fact = format!("memory {m}: {}", text.sentence(rng, 12));
        store.remember(&owner, &RememberRequest::new("fact", &fact)?)?;
    }
    Ok(())
}

fn items_of(store: &MemoryStore) -> Result<usize> {
    let mut n = 0;
    for who in [alice(), coder(), bob()] {
        let export = store.export(&who)?;
        n += export.facts.len() + export.turns.len();
    }
    Ok(n)
}

/// Median latency of `PROBE_CAPTURES` 2-turn captures into bob's scope.
fn probe(store: &MemoryStore, text: &TextGen, rng: &mut SplitMix, tag: &str) -> Result<f64> {
    let mut samples = Vec::new();
    for i in 0..PROBE_CAPTURES {
        let name = format!("probe-{tag}-{i}");
        let request = snapshot(&bob(), &name, turns(text, rng, &name, 2));
        let started = Instant::now();
        store.capture(&request)?;
        samples.push(started.elapsed());
    }
    Ok(median_ms(samples))
}

/// Runs `forget` on one thread while another captures into bob's scope.
fn forget_under_captures(
    store: &Arc<MemoryStore>,
    caller: &Caller,
    target: &ForgetTarget,
    text: &TextGen,
    rng: &mut SplitMix,
    tag: &str,
) -> Result<(ForgetReport, Duration, Vec<Duration>)> {
    let done = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    let requests: Vec<CaptureRequest> = (0..10_000)
        .map(|i| {
            let name = format!("during-{tag}-{i}");
            snapshot(&bob(), &name, turns(text, rng, &name, 2))
        })
        .collect();
    let writer = {
        let store = Arc::clone(store);
        let done = Arc::clone(&done);
        let finished = Arc::clone(&finished);
        std::thread::spawn(move || -> Result<Vec<Duration>> {
            let mut latencies = Vec::new();
            for request in &requests {
                if done.load(Ordering::Acquire) {
                    break;
                }
                // Started before the forget ended: counted, however long
                // it then waited for the forget's transaction.
                let started = Instant::now();
                store.capture(request)?;
                latencies.push(started.elapsed());
                finished.fetch_add(1, Ordering::Release);
            }
            Ok(latencies)
        })
    };
    // The forget starts among captures: once a few have finished.
    while finished.load(Ordering::Acquire) < 3 && !writer.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let before_forget = finished.load(Ordering::Acquire);
    let started = Instant::now();
    let report = store.forget(caller, target);
    let took = started.elapsed();
    done.store(true, Ordering::Release);
    let latencies = writer
        .join()
        .map_err(|_| MemoryError::backend("the benchmark's capture thread panicked"))??;
    // Only those that ran while the forget did (the last may have waited on it).
    Ok((
        report?,
        took,
        latencies[before_forget.min(latencies.len())..].to_vec(),
    ))
}

/// The part of an erasure that does not depend on what it removed.
fn fixed_cost(store: &MemoryStore) -> Result<Duration> {
    let started = Instant::now();
    store.scrub()?;
    Ok(started.elapsed())
}

fn bench_size(items: usize, path: &Path, rng: &mut SplitMix) -> Result<SizeCost> {
    let store = Arc::new(MemoryStore::open(path, LocalConfig::default())?);
    let text = TextGen::new(rng, 20_000);
    let started = Instant::now();
    fill(&store, items, &text, rng)?;
    let fill_s = started.elapsed().as_secs_f64();
    store.checkpoint()?;
    let file = file_mb(path);

    // The fact: one of alice's, revised once so it has two versions.
    let id = match store.remember(
        &alice(),
        &RememberRequest::new("fact", "alice's flat is on the fourth floor")?,
    )? {
        RememberOutcome::Stored { citation } => citation.0,
        other => {
            return Err(MemoryError::backend(format!(
                "benchmark remember answered {other:?}"
            )))
        }
    };
    store.revise_fact(
        &alice(),
        &id,
        &FactPatch {
            kind: None,
            text: Some("alice's flat is on the fifth floor".to_owned()),
            confidence: None,
        },
    )?;
    let levels = [
        ("fact", alice(), ForgetTarget::Fact { id }),
        (
            "thread",
            alice().with_thread("thread-10"),
            ForgetTarget::Thread,
        ),
        ("scope", alice(), ForgetTarget::Scope),
        ("user", coder(), ForgetTarget::User),
    ];
    let mut out = Vec::new();
    for (level, caller, target) in levels {
        let items_before = items_of(&store)?;
        let before = probe(&store, &text, rng, &format!("{level}-before"))?;
        let (report, took, during) =
            forget_under_captures(&store, &caller, &target, &text, rng, level)?;
        let after = probe(&store, &text, rng, &format!("{level}-after"))?;
        let fixed = fixed_cost(&store)?;
        out.push(LevelCost {
            level,
            items_before,
            erased: report.into(),
            forget_ms: ms(took),
            fixed_ms: ms(fixed),
            captures_during: during.len(),
            capture_max_during_ms: during.iter().max().map_or(0.0, |d| ms(*d)),
            capture_p50_before_ms: before,
            capture_p50_after_ms: after,
        });
    }
    Ok(SizeCost {
        items,
        file_mb: file,
        fill_s,
        levels: out,
    })
}

impl fmt::Display for ForgetBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "local store forget cost ({} cores); captures run into another scope meanwhile",
            self.cores
        )?;
        for s in &self.sizes {
            writeln!(
                f,
                "{} items ({:.1} MB, filled in {:.1} s):",
                s.items, s.file_mb, s.fill_s
            )?;
            writeln!(
                f,
                "  {:<7} {:>8} {:>22} {:>10} {:>9} {:>8} {:>10} {:>10} {:>10}",
                "level",
                "items",
                "erased f/v/t",
                "forget ms",
                "fixed ms",
                "during",
                "max ms",
                "p50 before",
                "p50 after"
            )?;
            for l in &s.levels {
                writeln!(
                    f,
                    "  {:<7} {:>8} {:>22} {:>10.1} {:>9.1} {:>8} {:>10.1} {:>10.2} {:>10.2}",
                    l.level,
                    l.items_before,
                    format!(
                        "{}/{}/{}",
                        l.erased.facts, l.erased.versions, l.erased.turns
                    ),
                    l.forget_ms,
                    l.fixed_ms,
                    l.captures_during,
                    l.capture_max_during_ms,
                    l.capture_p50_before_ms,
                    l.capture_p50_after_ms
                )?;
            }
        }
        writeln!(
            f,
            "  fixed = recall-index merge + WAL checkpoint(TRUNCATE) alone, the floor of any \
             erasure; during = 2-turn captures finished while the forget ran, max = the slowest"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_erases_what_it_names_on_the_benchmark_store() {
        let dir = tempfile::tempdir().unwrap();
        let report = run_forget_bench(&[2_000], Some(dir.path())).unwrap();
        let levels = &report.sizes[0].levels;
        let erased: Vec<(&str, usize, usize, usize)> = levels
            .iter()
            .map(|l| (l.level, l.erased.facts, l.erased.versions, l.erased.turns))
            .collect();
        // 20 memories and 20 threads of 100 turns (the last has 80):
        // alice holds threads 0 and 10 and memories 0 and 10, her coder
        // agent threads 1 and 11 and memories 1 and 11.
        assert_eq!(
            erased,
            [
                ("fact", 1, 2, 0),
                ("thread", 0, 0, 100),
                ("scope", 2, 2, 100),
                ("user", 2, 2, 200)
            ]
        );
        assert!(levels.iter().all(|l| l.forget_ms > 0.0 && l.fixed_ms > 0.0));
        assert!(report.to_string().contains("p50 after"));
    }
}
