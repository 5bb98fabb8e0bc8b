//! The evaluation and benchmark modules run end to end on small inputs and
//! report what they measured (figures are never asserted as timings).

use memgate_lab::locomo::{run_locomo, LocomoOptions};
use memgate_lab::store_bench::{run_bench, BenchOptions};
use serde_json::json;

/// A two-conversation file in the LoCoMo shape, including the data quirks.
fn tiny_locomo() -> serde_json::Value {
    json!([
        {
            "sample_id": "conv-a",
            "conversation": {
                "speaker_a": "Ann", "speaker_b": "Ben",
                "session_1_date_time": "1:00 pm on 3 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound named Comet."},
                    {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! How old is she?"},
                    {"speaker": "Ann", "dia_id": "D1:3", "text": "Three years old."}
                ],
                "session_2_date_time": "9:00 am on 20 May, 2023",
                "session_2": [
                    {"speaker": "Ben", "dia_id": "D2:1", "text": "My violin recital went well.",
                     "img_url": ["x"], "blip_caption": "a photo of a violin on a stage"},
                    {"speaker": "Ann", "dia_id": "D2:2", "text": "Congratulations on the recital!"}
                ]
            },
            "qa": [
                {"question": "What breed is Comet?", "answer": "greyhound", "evidence": ["D1:1"], "category": 4},
                {"question": "Which instrument did Ben play at the recital?", "answer": "violin",
                 "evidence": ["D2:1; D2:2"], "category": 1},
                {"question": "When was the recital?", "answer": "May", "evidence": ["D:2:1", "D"], "category": 2},
                {"question": "Is Comet a cat?", "answer": "no", "evidence": [], "category": 5}
            ]
        },
        {
            "sample_id": "conv-b",
            "conversation": {
                "speaker_a": "Cy", "speaker_b": "Di",
                "session_1_date_time": "2 June 2023",
                "session_1": [
                    {"speaker": "Cy", "dia_id": "D1:1", "text": "Our greyhound Comet... no, we have no dog."},
                    {"speaker": "Di", "dia_id": "D1:2", "text": "I bake sourdough on Sundays."}
                ]
            },
            "qa": [
                {"question": "What does Di bake?", "answer": "sourdough", "evidence": ["D1:2"], "category": 4}
            ]
        }
    ])
}

#[test]
fn locomo_eval_ingests_every_turn_and_scores_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.json");
    std::fs::write(&file, serde_json::to_vec(&tiny_locomo()).unwrap()).unwrap();
    let report = run_locomo(&file, &LocomoOptions::default()).unwrap();
    assert_eq!(report.conversations, 2);
    assert_eq!(report.turns_captured, 7);
    assert_eq!((report.questions_scored, report.questions_unscored), (4, 1));
    assert_eq!(
        (report.evidence_ids_repaired, report.evidence_ids_skipped),
        (2, 1)
    );
    assert_eq!(report.systems.len(), 2);
    let ours = &report.systems[0];
    assert_eq!(ours.overall.questions, 4);
    // "What breed is Comet?" finds D1:1 first in conv-a (conv-b's Comet
    // lives in another scope and cannot interfere).
    let cat4 = &ours.per_category[&4];
    assert_eq!(cat4.questions, 2);
    assert_eq!(cat4.turn.hit_at_5, 1.0);
    // The image caption is part of the turn: "instrument … recital" finds
    // D2:1 and D2:2 (repaired from "D2:1; D2:2").
    assert_eq!(ours.per_category[&1].turn.recall_at_10, 1.0);
    // Per conversation, in the file's order: three questions of conv-a, one
    // of conv-b ("sourdough" is found).
    assert_eq!(report.conversation_ids, ["conv-a", "conv-b"]);
    let per: Vec<usize> = ours.per_conversation.iter().map(|s| s.questions).collect();
    assert_eq!(per, [3, 1]);
    assert_eq!(ours.per_conversation[1].turn.recall_at_10, 1.0);
    // Leave-one-out selection is over hybrid rows: none without an embedder.
    assert!(report.leave_one_out.is_empty());
    // The no-query block is measured next to the newest-turns baseline.
    // The block, the block over transcripts without speaker names, the
    // newest turns.
    assert_eq!(report.no_query.len(), 3);
    assert_eq!(
        report.no_query[1].system,
        "memgate first-turn block, no speaker names"
    );
    let block = &report.no_query[0];
    assert!(
        block.coverage_pooled > 0.0 && block.coverage_pooled <= 1.0,
        "{block:?}"
    );
    assert!(block.chars_mean <= block.max_chars as f64);
    assert!(report.embedding.is_none());
    let text = report.to_string();
    assert!(text.contains("plain BM25 (baseline)") && text.contains("category 4"));
    assert!(text.contains("memgate first-turn block") && text.contains("newest turns (baseline)"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["questions_scored"], 4);
}

#[test]
fn locomo_eval_names_what_is_wrong_with_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        br#"[{"conversation": {"speaker_a": "A", "session_1": [{"speaker": "A"}]}, "qa": []}]"#,
    )
    .unwrap();
    let err = run_locomo(&file, &LocomoOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("[0].conversation.session_1[0].dia_id"),
        "{err}"
    );
    std::fs::write(&file, b"{not json").unwrap();
    assert!(run_locomo(&file, &LocomoOptions::default())
        .unwrap_err()
        .to_string()
        .contains("JSON"));
}

#[test]
fn bench_reports_every_figure_for_each_size() {
    let options = BenchOptions {
        sizes: vec![300, 600],
        recall_queries: 50,
        capture_batch: 25,
        ..BenchOptions::default()
    };
    let report = run_bench(&options).unwrap();
    assert_eq!(report.sizes.len(), 2);
    for (s, items) in report.sizes.iter().zip([300, 600]) {
        assert_eq!(s.items, items);
        assert_eq!(s.turns + s.memories, items);
        assert_eq!(s.recall_queries, 50);
        assert!(s.capture_turns_per_sec > 0.0 && s.remember_per_sec > 0.0);
        assert!(s.recall_p50_ms <= s.recall_p99_ms && s.recall_p99_ms <= s.recall_max_ms);
        assert!(
            s.recall_mean_items > 0.0,
            "realistic queries recall something"
        );
        assert!(s.database_mb > 0.0);
        if cfg!(target_os = "linux") {
            assert!(s.peak_rss_mb.unwrap() > 0.0);
        }
    }
    let table = report.to_string();
    assert!(table.contains("recall p99") && table.contains("capture t/s"));
    assert!(serde_json::to_value(&report).unwrap()["sizes"][1]["items"] == 600);
}
