//! What bounds the no-query block's coverage when it is made of the
//! dataset's own facts: how much of each conversation's evidence the facts
//! cite at all, and how many characters every fact takes as a profile line
//! against the block's budget. No store and no model: counts over the file.
//!
//! ```text
//! cargo run --release -p memgate-lab --example fact_bounds -- \
//!     ../shared/data/locomo/locomo-dev.json
//! ```
//!
//! Evidence is that of the scored questions (categories 1–4), read and
//! repaired as `memgate eval locomo` reads it; facts are the `observation`
//! lists the replay serves. A profile line is laid out as the first-turn
//! block lays out a fact (`- [mem_N] (fact) text` and its newline), `N`
//! numbered through the file as a store would number them.

use memgate_lab::locomo::{parse_evidence, DiaId};
use memgate_lab::replay::observations;
use memgate_recall::settings::RecallSettings;
use serde_json::Value;
use std::collections::HashSet;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: fact_bounds LOCOMO.json");
    let data: Value = serde_json::from_slice(&std::fs::read(&path).expect("read the LoCoMo file"))
        .expect("LoCoMo JSON");
    let budget = RecallSettings::default().max_injection_chars;
    println!("conversation | facts | evidence turns | cited by some fact | profile-line characters (block budget {budget})");
    let (mut next_id, mut evidence_all, mut cited_all) = (1usize, 0usize, 0usize);
    for (i, sample) in data.as_array().into_iter().flatten().enumerate() {
        let name = sample["sample_id"].as_str().unwrap_or("?").to_owned();
        let facts = observations(sample, &format!("[{i}]")).expect("observations");
        let evidence: HashSet<DiaId> = sample["qa"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|qa| (1..=4).contains(&qa["category"].as_u64().unwrap_or(0)))
            .flat_map(|qa| {
                parse_evidence(qa["evidence"].as_array().map_or(&[][..], Vec::as_slice)).ids
            })
            .collect();
        let cited: HashSet<DiaId> = facts
            .iter()
            .flat_map(|f| f.evidence.iter().copied())
            .collect();
        let found = evidence.intersection(&cited).count();
        let mut chars = 0;
        for fact in &facts {
            chars += format!("- [mem_{next_id}] (fact) {}\n", fact.text)
                .chars()
                .count();
            next_id += 1;
        }
        println!(
            "{name} | {} | {} | {found} ({:.3}) | {chars}",
            facts.len(),
            evidence.len(),
            found as f64 / evidence.len().max(1) as f64
        );
        evidence_all += evidence.len();
        cited_all += found;
    }
    println!(
        "all | | {evidence_all} | {cited_all} ({:.3}) |",
        cited_all as f64 / evidence_all.max(1) as f64
    );
}
