//! Prints what writing a tool call's arguments into a batch body costs two
//! ways: `Value`'s `Display` (what `payload.rs` used before 8fc6673) and
//! `serde_json::to_string` (what its `push_value` calls now). Both must give
//! the same bytes; the run stops if they do not.
//!
//! ```text
//! cargo run --release -p memgate-lab --example value_writer
//! ```
//!
//! The arguments are capture_cost.py's: `{"query": topic, "limit": 5}`.

use serde_json::{json, Value};
use std::time::Instant;

const VALUES: usize = 1_000;
const PASSES: usize = 200;
const ROUNDS: usize = 5;

fn main() {
    let topics = [
        "refund",
        "invoice",
        "helm chart",
        "postgres index",
        "coffee order",
    ];
    let values: Vec<Value> = (0..VALUES)
        .map(|i| json!({"query": topics[i % topics.len()], "limit": 5}))
        .collect();
    for value in &values {
        let display = value.to_string();
        let writer = serde_json::to_string(value).expect("a JSON value serializes");
        assert_eq!(display, writer, "the two writers disagree");
    }
    println!(
        "per {VALUES} tool-call arguments, mean of {PASSES} passes, {ROUNDS} rounds alternated:"
    );
    let mut body = String::new();
    for round in 1..=ROUNDS {
        let display = per_pass(&mut body, |body, v| body.push_str(&v.to_string()), &values);
        let writer = per_pass(
            &mut body,
            |body, v| body.push_str(&serde_json::to_string(v).expect("a JSON value serializes")),
            &values,
        );
        println!(
            "round {round}: Display {display:.1} µs, serde_json::to_string {writer:.1} µs ({:.1}×)",
            display / writer
        );
    }
}

/// Mean microseconds to write every value once into a cleared body.
fn per_pass(body: &mut String, write: impl Fn(&mut String, &Value), values: &[Value]) -> f64 {
    let started = Instant::now();
    for _ in 0..PASSES {
        body.clear();
        for value in values {
            write(body, value);
        }
    }
    std::hint::black_box(&body);
    started.elapsed().as_secs_f64() / PASSES as f64 * 1e6
}
