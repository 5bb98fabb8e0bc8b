//! Redaction quality and cost: recall over the secret corpus, the share of
//! near misses (and, given a LoCoMo file, of real conversation turns)
//! altered, and the cost per captured turn.
//!
//! `cargo run --profile profiling -p memgate-lab --example redact_bench -- [LOCOMO_JSON]`

#[path = "../../memgate-redact/tests/corpus/mod.rs"]
mod corpus;

use memgate_redact::Redactor;
use std::hint::black_box;
use std::time::Instant;

/// Every turn's text of a LoCoMo file (`conversation.session_N[].text`).
fn locomo_turns(path: &str) -> Vec<String> {
    let data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read the LoCoMo file"))
            .expect("LoCoMo JSON");
    let mut turns = Vec::new();
    for sample in data.as_array().into_iter().flatten() {
        let Some(conv) = sample["conversation"].as_object() else {
            continue;
        };
        for (key, session) in conv {
            if !key.starts_with("session_") || key.ends_with("date_time") {
                continue;
            }
            for turn in session.as_array().into_iter().flatten() {
                if let Some(text) = turn["text"].as_str() {
                    turns.push(text.to_owned());
                }
            }
        }
    }
    turns
}

/// Mean nanoseconds per text over enough rounds to take about 200 ms.
fn ns_per_text(redactor: &Redactor, texts: &[String]) -> f64 {
    let mut rounds = 1;
    loop {
        let start = Instant::now();
        for _ in 0..rounds {
            for t in texts {
                black_box(redactor.redact(black_box(t)));
            }
        }
        let took = start.elapsed();
        if took.as_millis() >= 200 {
            return took.as_nanos() as f64 / (rounds * texts.len()) as f64;
        }
        rounds *= 2;
    }
}

fn main() {
    let redactor = Redactor::default();
    let caught = corpus::SECRETS
        .iter()
        .filter(|(_, _, secret, text)| !redactor.redact(text).text.contains(secret))
        .count();
    let altered = corpus::NEAR_MISSES
        .iter()
        .filter(|t| !redactor.redact(t).is_clean())
        .count();
    println!(
        "secret recall: {caught}/{} ({:.1}%), {} rules",
        corpus::SECRETS.len(),
        100.0 * caught as f64 / corpus::SECRETS.len() as f64,
        redactor.rule_ids().count()
    );
    println!(
        "near misses altered: {altered}/{} ({:.2}%)",
        corpus::NEAR_MISSES.len(),
        100.0 * altered as f64 / corpus::NEAR_MISSES.len() as f64
    );
    let secrets: Vec<String> = corpus::SECRETS.iter().map(|s| s.3.to_owned()).collect();
    let near: Vec<String> = corpus::NEAR_MISSES
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    println!(
        "cost: {:.0} ns per near-miss text, {:.0} ns per text with a secret",
        ns_per_text(&redactor, &near),
        ns_per_text(&redactor, &secrets)
    );
    if let Some(path) = std::env::args().nth(1) {
        let turns = locomo_turns(&path);
        let altered: Vec<&String> = turns
            .iter()
            .filter(|t| !redactor.redact(t).is_clean())
            .collect();
        let bytes: usize = turns.iter().map(String::len).sum();
        println!(
            "LoCoMo turns altered: {}/{} ({:.2}%)",
            altered.len(),
            turns.len(),
            100.0 * altered.len() as f64 / turns.len().max(1) as f64
        );
        let ns = ns_per_text(&redactor, &turns);
        println!(
            "cost per captured LoCoMo turn: {ns:.0} ns (mean {} bytes/turn, {:.0} MB/s)",
            bytes / turns.len().max(1),
            (bytes as f64 / turns.len().max(1) as f64) / ns * 1000.0
        );
    }
}
