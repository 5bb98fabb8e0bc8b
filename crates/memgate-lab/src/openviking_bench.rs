//! The adapter's own cost, without the network: what one capture spends on
//! filtering and signing the transcript, reading and matching the cursor,
//! converting the new messages and saving the cursor durably; and what
//! recall spends formatting the block.
//!
//! Each capture scenario is an after-turn capture of a transcript of N
//! messages whose first N − 2 were captured before (the usual case: one
//! user message and one answer are new). The steps are the ones the real
//! capture runs (`capture::sign_all`, `CapturePlan`, `payload::to_payload`
//! then `payload::redact_payload` with the default redactor,
//! `memgate_openviking::cursor`), timed one by one; figures are medians.

use memgate_core::capture::captureable;
use memgate_core::{Message, Redactor, ToolCall};
use memgate_openviking::capture::{sign_all, CapturePlan};
use memgate_openviking::cursor::{load_cursor, save_cursor, TranscriptCursor};
use memgate_openviking::injection::format_injection;
use memgate_openviking::payload::{redact_payload, to_payload};
use memgate_openviking::retrieval::RetrievedMemory;
use serde::Serialize;
use serde_json::json;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Transcript sizes measured.
pub const TRANSCRIPT_SIZES: [usize; 3] = [100, 1_000, 10_000];

/// Cost of one after-turn capture of an N-message transcript, in µs.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureCost {
    pub messages: usize,
    pub new_messages: usize,
    pub iterations: usize,
    /// Capture filter plus one signature per message.
    pub sign_us: f64,
    /// Reading and parsing the cursor file.
    pub cursor_load_us: f64,
    /// Prefix digest match and the pending set.
    pub cursor_match_us: f64,
    /// Converting the new messages to OpenViking payloads and redacting
    /// secrets in them (what capture sends).
    pub convert_us: f64,
    /// Advancing the cursor and serializing it (CPU).
    pub cursor_encode_us: f64,
    /// `save_cursor`: encoding, temp file, fsync, rename, directory fsync (disk).
    pub cursor_write_us: f64,
    /// Everything but the disk write: the adapter's CPU cost (median of whole runs).
    pub cpu_total_us: f64,
    /// Everything including the durable write (median of whole runs).
    pub total_us: f64,
    /// The compaction path: matching a shrunken transcript by window search.
    pub compacted_match_us: f64,
}

/// Cost of formatting one recall block, in µs.
#[derive(Clone, Debug, Serialize)]
pub struct FormatCost {
    pub memories: usize,
    pub chars_per_memory: usize,
    pub max_injection_chars: usize,
    pub output_chars: usize,
    pub format_us: f64,
}

/// All figures of one run.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterBenchReport {
    pub cores: usize,
    pub cursor_dir: String,
    pub max_seen_message_ids: usize,
    pub captures: Vec<CaptureCost>,
    pub recall_formatting: Vec<FormatCost>,
}

impl fmt::Display for AdapterBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "OpenViking adapter cost (no network), {} cores, cursor files in {}, window {}",
            self.cores, self.cursor_dir, self.max_seen_message_ids
        )?;
        writeln!(f, "capture (after-turn, 2 new messages), medians in µs:")?;
        writeln!(
            f,
            "{:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>10} {:>10}",
            "messages",
            "sign",
            "load",
            "match",
            "convert",
            "encode",
            "cpu total",
            "µs/msg",
            "fsync'd",
            "total",
            "compacted"
        )?;
        for c in &self.captures {
            writeln!(
                f,
                "{:>8} {:>9.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.1} {:>8.3} {:>10.1} {:>10.1} {:>10.1}",
                c.messages,
                c.sign_us,
                c.cursor_load_us,
                c.cursor_match_us,
                c.convert_us,
                c.cursor_encode_us,
                c.cpu_total_us,
                c.cpu_total_us / c.messages as f64,
                c.cursor_write_us,
                c.total_us,
                c.compacted_match_us
            )?;
        }
        writeln!(
            f,
            "  cpu total = sign + load + match + convert (payloads + redaction) + encode; fsync'd = durable cursor write (temp file, fsync, rename, directory fsync); compacted = matching after compaction (window search)"
        )?;
        writeln!(f, "recall formatting, medians in µs:")?;
        for r in &self.recall_formatting {
            writeln!(
                f,
                "  {} memories × {} chars, budget {} → {} chars: {:.1} µs",
                r.memories, r.chars_per_memory, r.max_injection_chars, r.output_chars, r.format_us
            )?;
        }
        Ok(())
    }
}

/// Runs the benchmark with cursor files in a fresh directory under the
/// system temp directory (removed afterwards).
pub fn run_adapter_bench() -> AdapterBenchReport {
    let dir = std::env::temp_dir().join(format!("memgate-ov-bench-{}", std::process::id()));
    let report = run_adapter_bench_in(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// Runs the benchmark with cursor files under `dir` (to measure a specific
/// disk: fsync costs differ between tmpfs and real storage).
pub fn run_adapter_bench_in(dir: &Path) -> AdapterBenchReport {
    let max_seen = memgate_openviking::config::DEFAULT_MAX_SEEN_MESSAGE_IDS;
    let captures = TRANSCRIPT_SIZES
        .iter()
        .map(|&n| capture_cost(dir, n, max_seen))
        .collect();
    let recall_formatting = [(8, 1_500, 12_000), (100, 400, 12_000), (100, 400, 100_000)]
        .iter()
        .map(|&(count, chars, max)| format_cost(count, chars, max))
        .collect();
    AdapterBenchReport {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cursor_dir: dir.display().to_string(),
        max_seen_message_ids: max_seen,
        captures,
        recall_formatting,
    }
}

/// A deterministic transcript: turns of user, assistant tool call, tool
/// result and answer, plus the host's hidden reminders.
pub fn synthetic_transcript(n: usize) -> Vec<Message> {
    const WORDS: [&str; 16] = [
        "memory", "prefers", "concise", "answers", "project", "deadline", "coffee", "editor",
        "lisbon", "review", "deploy", "budget", "weekly", "meeting", "notes", "release",
    ];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut sentence = |words: usize| {
        let mut out = String::new();
        for _ in 0..words {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(WORDS[(seed % WORDS.len() as u64) as usize]);
        }
        out
    };
    (0..n)
        .map(|i| {
            let id = format!("m{i}");
            match i % 6 {
                0 => Message::system("<system-reminder>date</system-reminder>")
                    .with_id(id)
                    .with_flag("hide_from_ui", true),
                1 => Message::human(sentence(25)).with_id(id),
                2 => Message::ai("")
                    .with_id(id)
                    .with_tool_calls(vec![ToolCall::new(
                        "search",
                        json!({"query": sentence(4)}),
                        Some(format!("call-{i}")),
                    )]),
                3 => Message::tool(sentence(40), format!("call-{}", i - 1))
                    .with_id(id)
                    .with_name("search"),
                _ => Message::ai(sentence(35)).with_id(id),
            }
        })
        .collect()
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

fn capture_cost(dir: &Path, n: usize, max_seen: usize) -> CaptureCost {
    let transcript = synthetic_transcript(n);
    let scenario_dir: PathBuf = dir.join(format!("n{n}"));
    let before_path = scenario_dir.join("before.json");
    let after_path = scenario_dir.join("after.json");

    // The cursor after the previous turn: everything but the last two messages.
    let previous = captureable(&transcript[..n - 2], None);
    let previous_plan = CapturePlan::new(&TranscriptCursor::default(), sign_all(&previous));
    let before = previous_plan.completed(&TranscriptCursor::default(), max_seen);
    save_cursor(&before_path, &before).expect("bench cursor directory is writable");

    let redactor = Redactor::shared_default();
    let iterations = (20_000 / n).clamp(7, 200);
    let (mut sign, mut load, mut matching, mut convert) = (vec![], vec![], vec![], vec![]);
    let (mut encode, mut write, mut cpu_total, mut total) = (vec![], vec![], vec![], vec![]);
    let mut new_messages = 0;
    for _ in 0..iterations {
        let run = Instant::now();
        let t = Instant::now();
        let captured = captureable(&transcript, None);
        let signatures = sign_all(&captured);
        sign.push(micros(t));

        let t = Instant::now();
        let cursor = load_cursor(&before_path).expect("bench cursor is readable");
        load.push(micros(t));

        let t = Instant::now();
        let plan = CapturePlan::new(&cursor, signatures);
        matching.push(micros(t));

        let t = Instant::now();
        let payloads: Vec<_> = plan
            .pending
            .iter()
            .filter_map(|&i| {
                to_payload(captured[i], "research").map(|mut payload| {
                    redact_payload(&mut payload, &redactor);
                    payload
                })
            })
            .collect();
        convert.push(micros(t));
        new_messages = plan.pending.len();
        std::hint::black_box(&payloads);

        let t = Instant::now();
        let next = plan.completed(&cursor, max_seen);
        std::hint::black_box(next.to_json());
        encode.push(micros(t));
        cpu_total.push(micros(run));

        let t = Instant::now();
        save_cursor(&after_path, &next).expect("bench cursor saved");
        write.push(micros(t));
        total.push(micros(run));
    }

    // Compaction: the host now passes only the last messages plus new ones;
    // the prefix no longer fits and the window is searched.
    let compacted_transcript: Vec<Message> = transcript[n / 2..].to_vec();
    let compacted = captureable(&compacted_transcript, None);
    let compacted_sigs = sign_all(&compacted);
    let after = load_cursor(&after_path).expect("bench cursor is readable");
    let mut compacted_match = vec![];
    for _ in 0..iterations {
        let t = Instant::now();
        let plan = CapturePlan::new(&after, compacted_sigs.clone());
        compacted_match.push(micros(t));
        std::hint::black_box(plan);
    }

    CaptureCost {
        messages: n,
        new_messages,
        iterations,
        sign_us: median(&mut sign),
        cursor_load_us: median(&mut load),
        cursor_match_us: median(&mut matching),
        convert_us: median(&mut convert),
        cursor_encode_us: median(&mut encode),
        cursor_write_us: median(&mut write),
        cpu_total_us: median(&mut cpu_total),
        total_us: median(&mut total),
        compacted_match_us: median(&mut compacted_match),
    }
}

fn format_cost(count: usize, chars: usize, max: usize) -> FormatCost {
    let memories: Vec<RetrievedMemory> = (0..count)
        .map(|i| {
            let body: String = format!("Memory {i}: prefers ÄÖÜ straße   and\tcoffee. ")
                .chars()
                .cycle()
                .take(chars)
                .collect();
            RetrievedMemory {
                uri: Some(format!("viking://user/u/memories/preferences/u/m{i}.md")),
                level: Some(2),
                category: Some("preferences".into()),
                score: Some(0.5),
                text: body,
            }
        })
        .collect();
    let iterations = 200;
    let mut samples = Vec::with_capacity(iterations);
    let mut output_chars = 0;
    for _ in 0..iterations {
        let t = Instant::now();
        let out = format_injection(&memories, max);
        samples.push(micros(t));
        output_chars = out.text.chars().count();
    }
    FormatCost {
        memories: count,
        chars_per_memory: chars,
        max_injection_chars: max,
        output_chars,
        format_us: median(&mut samples),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_transcript_has_the_host_shape() {
        let t = synthetic_transcript(12);
        assert_eq!(t.len(), 12);
        assert_eq!(
            captureable(&t, None).len(),
            10,
            "hidden reminders are filtered"
        );
        let sigs = sign_all(&captureable(&t, None));
        let unique: std::collections::HashSet<_> = sigs.iter().collect();
        assert_eq!(unique.len(), sigs.len());
    }
}
