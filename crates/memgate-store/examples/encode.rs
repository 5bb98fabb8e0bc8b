//! `cargo run --release -p memgate-store --example encode -- MODEL_DIR [N]
//! [LOCOMO_JSON]`: the local encoder's cost alone — model load time, then N
//! embeddings of a query-length and of a turn-length text, wall and on-CPU
//! p50/p99 (on-CPU from the thread's CPU clock, the honest figure on a
//! shared machine), at each precision (`Exact`: float32, what documents are
//! embedded with; `Int8`: the query path where the CPU has AVX-512 VNNI).
//! With a LoCoMo file, also the token counts of its questions (the lengths
//! a real query has), one embedding of each at each precision, and how far
//! the int8 vectors are from the float32 ones (cosine).

use memgate_embed::{MiniLm, Precision};
use memgate_store::bench::thread_cpu_ns;
use std::time::{Duration, Instant};

const QUERY: &str = "When did Caroline go to the LGBTQ support group?";
const TURN: &str = "I went to a LGBTQ support group yesterday and it was so powerful. \
    The transgender stories were so inspiring! I was so happy and thankful for all the \
    support. It made me realise how much I want to keep going with my counseling course.";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// The questions of a LoCoMo file (category 5, unanswerable, left out as
/// the evaluation does).
fn locomo_questions(path: &str) -> Vec<String> {
    let data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read the LoCoMo file"))
            .expect("LoCoMo JSON");
    let mut out = Vec::new();
    for sample in data.as_array().into_iter().flatten() {
        for qa in sample["qa"].as_array().into_iter().flatten() {
            if qa["category"].as_u64() != Some(5) {
                if let Some(q) = qa["question"].as_str() {
                    out.push(q.to_owned());
                }
            }
        }
    }
    out
}

/// Wall and on-CPU times of `embed` over `texts` (each `rounds` times),
/// as a printable line.
fn timed(texts: &[&str], rounds: usize, embed: impl Fn(&str) -> Vec<f32>) -> String {
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for text in texts {
            let (t, c) = (Instant::now(), thread_cpu_ns());
            std::hint::black_box(embed(text));
            wall.push(t.elapsed());
            if let (Some(a), Some(b)) = (c, thread_cpu_ns()) {
                cpu.push(Duration::from_nanos(b - a));
            }
        }
    }
    wall.sort_unstable();
    cpu.sort_unstable();
    let cpu = if cpu.len() == wall.len() {
        format!(
            "on-CPU p50 {:.2} / p99 {:.2} ms",
            percentile(&cpu, 0.5),
            percentile(&cpu, 0.99)
        )
    } else {
        "on-CPU n/a".to_owned()
    };
    format!(
        "wall p50 {:.2} / p99 {:.2} ms, {cpu}",
        percentile(&wall, 0.5),
        percentile(&wall, 0.99)
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .expect("usage: encode MODEL_DIR [N] [LOCOMO_JSON]");
    let n: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(200);
    let questions = args.next().map(|p| locomo_questions(&p));
    let started = Instant::now();
    let model = MiniLm::load(dir.as_ref()).expect("load the model");
    println!("model load {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
    println!("query path on this CPU: {:?}", model.query_precision());
    let precisions = [Precision::Exact, Precision::Int8];
    for (name, text) in [("query", QUERY), ("turn", TURN)] {
        let tokens = model.token_count(text);
        for p in precisions {
            let line = timed(&[text], n, |t| model.embed_one_with(t, p));
            println!("{name} ({tokens} tokens) x{n}, {p:?}: {line}");
        }
    }
    if let Some(questions) = questions {
        let texts: Vec<&str> = questions.iter().map(String::as_str).collect();
        let mut tokens: Vec<usize> = texts.iter().map(|q| model.token_count(q)).collect();
        tokens.sort_unstable();
        let mean = tokens.iter().sum::<usize>() as f64 / tokens.len().max(1) as f64;
        let mut histogram = std::collections::BTreeMap::new();
        for t in &tokens {
            *histogram.entry(*t).or_insert(0usize) += 1;
        }
        println!(
            "LoCoMo questions x{}: tokens mean {mean:.1}, p50 {}, p99 {}",
            tokens.len(),
            tokens[tokens.len() / 2],
            tokens[(tokens.len() - 1) * 99 / 100],
        );
        println!("token histogram (tokens: questions): {histogram:?}");
        for p in precisions {
            let line = timed(&texts, 1, |t| model.embed_one_with(t, p));
            println!("LoCoMo questions, {p:?}: {line}");
        }
        let mut cosines: Vec<f32> = texts
            .iter()
            .map(|t| {
                let (a, b) = (
                    model.embed_one_with(t, Precision::Exact),
                    model.embed_one_with(t, Precision::Int8),
                );
                a.iter().zip(&b).map(|(x, y)| x * y).sum()
            })
            .collect();
        cosines.sort_by(f32::total_cmp);
        let mean = cosines.iter().sum::<f32>() / cosines.len().max(1) as f32;
        println!(
            "LoCoMo questions, cosine of Int8 to Exact vectors: mean {mean:.6}, min {:.6}",
            cosines[0]
        );
    }
}
