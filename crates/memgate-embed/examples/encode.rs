//! `cargo run --release -p memgate-embed --example encode -- MODEL_DIR [N]`:
//! the local encoder's cost alone — model load time, then N embeddings of a
//! query-length and of a turn-length text, wall and on-CPU p50/p99 (on-CPU
//! from `/proc/thread-self/schedstat`, the honest figure on a shared machine).

use memgate_embed::MiniLm;
use std::time::{Duration, Instant};

const QUERY: &str = "When did Caroline go to the LGBTQ support group?";
const TURN: &str = "I went to a LGBTQ support group yesterday and it was so powerful. \
    The transgender stories were so inspiring! I was so happy and thankful for all the \
    support. It made me realise how much I want to keep going with my counseling course.";

/// Nanoseconds this thread has run on a CPU (Linux; `None` elsewhere).
fn on_cpu() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: encode MODEL_DIR [N]");
    let n: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(200);
    let started = Instant::now();
    let model = MiniLm::load(dir.as_ref()).expect("load the model");
    println!("model load {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
    for (name, text) in [("query", QUERY), ("turn", TURN)] {
        let tokens = model.token_count(text);
        let (mut wall, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (t, c) = (Instant::now(), on_cpu());
            std::hint::black_box(model.embed_one(text));
            wall.push(t.elapsed());
            if let (Some(a), Some(b)) = (c, on_cpu()) {
                cpu.push(Duration::from_nanos(b - a));
            }
        }
        wall.sort_unstable();
        cpu.sort_unstable();
        let cpu = if cpu.len() == n {
            format!(
                "on-CPU p50 {:.2} / p99 {:.2} ms",
                percentile(&cpu, 0.5),
                percentile(&cpu, 0.99)
            )
        } else {
            "on-CPU n/a".to_owned()
        };
        println!(
            "{name} ({tokens} tokens) x{n}: wall p50 {:.2} / p99 {:.2} ms, {cpu}",
            percentile(&wall, 0.5),
            percentile(&wall, 0.99)
        );
    }
}
