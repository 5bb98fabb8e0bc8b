//! `cargo run --profile profiling -p memgate-lab --example encode -- MODEL [N]
//! [LOCOMO_JSON]`: a local model's cost alone (MODEL: MiniLM's directory or
//! e5's file, as `model_path`) — model load time, then N embeddings of a
//! query-length text by the exact query path (float32) and by the query
//! path recall uses (int8 where the CPU has AVX-512 VNNI), and of a
//! turn-length text as a document, wall and on-CPU p50/p99 (on-CPU from the
//! thread's CPU clock, the honest figure on a shared machine). With a LoCoMo
//! file, also the token counts of its questions (the lengths a real query
//! has), one embedding of each by both query paths, and how far the query
//! path's vectors are from the exact ones (cosine).

use memgate_lab::process::thread_cpu_ns;
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
    let dir = args.next().expect("usage: encode MODEL [N] [LOCOMO_JSON]");
    let n: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(200);
    let questions = args.next().map(|p| locomo_questions(&p));
    let started = Instant::now();
    let model = memgate_embed::load_local(dir.as_ref()).expect("load the model");
    println!(
        "model {} load {:.0} ms",
        model.model(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let tokens = |t: &str| model.token_count(t).unwrap_or(0);
    let exact = |t: &str| model.embed_query_exact(t).expect("embed");
    let query_path = |t: &str| model.embed_query(t).expect("embed");
    let document = |t: &str| model.embed(&[t]).expect("embed").remove(0);
    println!(
        "query ({} tokens) x{n}, exact: {}",
        tokens(QUERY),
        timed(&[QUERY], n, exact)
    );
    println!(
        "query ({} tokens) x{n}, query path: {}",
        tokens(QUERY),
        timed(&[QUERY], n, query_path)
    );
    println!("turn x{n}, as a document: {}", timed(&[TURN], n, document));
    if let Some(questions) = questions {
        let texts: Vec<&str> = questions.iter().map(String::as_str).collect();
        let mut counts: Vec<usize> = texts.iter().map(|q| tokens(q)).collect();
        counts.sort_unstable();
        let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
        println!(
            "LoCoMo questions x{}: tokens mean {mean:.1}, p50 {}, p99 {}",
            counts.len(),
            counts[counts.len() / 2],
            counts[(counts.len() - 1) * 99 / 100],
        );
        println!("LoCoMo questions, exact: {}", timed(&texts, 1, exact));
        println!(
            "LoCoMo questions, query path: {}",
            timed(&texts, 1, query_path)
        );
        let mut cosines: Vec<f32> = texts
            .iter()
            .map(|t| {
                exact(t)
                    .iter()
                    .zip(&query_path(t))
                    .map(|(x, y)| x * y)
                    .sum()
            })
            .collect();
        cosines.sort_by(f32::total_cmp);
        let mean = cosines.iter().sum::<f32>() / cosines.len().max(1) as f32;
        println!(
            "LoCoMo questions, cosine of the query path to the exact vectors: mean {mean:.6}, min {:.6}",
            cosines[0]
        );
    }
}
