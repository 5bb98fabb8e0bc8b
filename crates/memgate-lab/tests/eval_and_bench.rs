//! The evaluation and benchmark modules run end to end on small inputs and
//! report what they measured (figures are never asserted as timings).

use memgate_lab::distilled::DistillSource;
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
            ],
            "observation": {
                "session_1_observation": {"Ann": [["Ann adopted a three-year-old greyhound named Comet.", ["D1:1", "D1:3"]]]},
                "session_2_observation": {"Ben": [["Ben played the violin at his recital.", "D2:1"]]}
            }
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
            ],
            "observation": {
                "session_1_observation": {"Di": [["Di bakes sourdough on Sundays.", "D1:2"]]}
            }
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
fn locomo_eval_with_replay_distils_the_observations_and_counts_facts_through_their_turns() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.json");
    std::fs::write(&file, serde_json::to_vec(&tiny_locomo()).unwrap()).unwrap();
    let options = LocomoOptions {
        distill: Some(DistillSource::Replay),
        ..LocomoOptions::default()
    };
    let report = run_locomo(&file, &options).unwrap();
    // The real worker ran one job per session, each answered by the replay
    // endpoint with that session's observations, all applied.
    let d = report.distill.as_ref().unwrap();
    assert_eq!((d.observations, d.observations_unplaced), (3, 0));
    assert_eq!((d.jobs_applied, d.jobs_parked, d.jobs_left), (3, 0, 0));
    assert_eq!((d.facts_added, d.model_calls, d.turns), (3, 3, 7));
    // Today's rows stay; the replay rows sit beside them, labelled.
    let names: Vec<&str> = report.systems.iter().map(|s| s.system.as_str()).collect();
    assert_eq!(names[0], "memgate local ranking");
    assert!(
        names[1].starts_with("memgate local ranking + facts (replay: "),
        "{names:?}"
    );
    assert!(names[1].contains("not a model's quality"));
    // "What breed is Comet?" ranks the fact first, which reaches D1:1.
    let replay = &report.systems[1];
    assert_eq!(replay.per_category[&4].turn.mrr, 1.0);
    assert_eq!(replay.per_category[&4].turn.hit_at_5, 1.0);
    // The same two rows over the transcripts without speaker names.
    assert_eq!(names[2], "memgate local ranking, no speaker names");
    assert!(
        names[3].starts_with("memgate local ranking + facts, no speaker names (replay: "),
        "{names:?}"
    );
    assert_eq!(report.systems[3].per_category[&4].turn.mrr, 1.0);
    let no_query: Vec<&str> = report.no_query.iter().map(|c| c.system.as_str()).collect();
    assert_eq!(no_query.len(), 5, "{no_query:?}");
    assert!(no_query[2].starts_with("memgate first-turn block + facts (replay"));
    assert!(no_query[3].starts_with("memgate first-turn block + facts, no speaker names (replay"));
    // The block leads with the facts: every evidence turn of the tiny file
    // that an observation rests on is reached.
    assert!(
        report.no_query[2].coverage_pooled > 0.0,
        "{:?}",
        report.no_query[2]
    );
    assert_eq!(report.leave_one_out.len(), 2);
    assert_eq!(report.leave_one_out[0].folds.len(), 2);
    assert_eq!(report.leave_one_out[1].folds.len(), 2);
    let text = report.to_string();
    assert!(
        text.contains("Distillation (replay): 3 jobs applied, 0 parked"),
        "{text}"
    );
    assert!(text.contains("the pipeline's ceiling, not a model's quality"));

    // A file without the dataset's facts cannot be replayed: the field is named.
    let mut bare = tiny_locomo();
    bare[1].as_object_mut().unwrap().remove("observation");
    std::fs::write(&file, serde_json::to_vec(&bare).unwrap()).unwrap();
    let err = run_locomo(&file, &options).unwrap_err().to_string();
    assert!(err.contains("[1].observation"), "{err}");
}

#[test]
fn locomo_eval_with_an_endpoint_runs_the_configured_model_and_counts_its_tokens() {
    use memgate_testsupport::scripted_model::ScriptedModel;
    // The first session of conv-a gets one fact; every other prompt none.
    let add = json!({"operations": [{"op": "add", "fact": null, "kind": "fact",
        "text": "Ann has a greyhound named Comet", "confidence": 0.8, "sources": ["turn_1"]}]});
    let model = ScriptedModel::start(
        json!([
            // The turn's words, not the fact's: later prompts show the fact.
            {"when": {"user_contains": "adopted a greyhound"},
             "reply": {"content": add.to_string(),
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20}}},
            {"when": {"always": true},
             "reply": {"content": "{\"operations\": []}",
                       "usage": {"prompt_tokens": 90, "completion_tokens": 5}}}
        ]),
        &[],
    );
    let settings = memgate_distill::DistillSettings::parse(Some(&json!({
        "enabled": true, "base_url": model.url, "model": "scripted", "timeout_ms": 5000,
    })))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.json");
    std::fs::write(&file, serde_json::to_vec(&tiny_locomo()).unwrap()).unwrap();
    let options = LocomoOptions {
        distill: Some(DistillSource::Endpoint {
            settings,
            env: std::sync::Arc::new(|_| None),
        }),
        ..LocomoOptions::default()
    };
    let report = run_locomo(&file, &options).unwrap();
    let d = report.distill.as_ref().unwrap();
    assert_eq!(d.source, "endpoint");
    assert_eq!((d.jobs_applied, d.jobs_parked, d.facts_added), (3, 0, 1));
    // The named store's three calls, with the usage the endpoint reported.
    assert_eq!(
        (d.model_calls, d.prompt_tokens, d.completion_tokens),
        (3, 280, 30)
    );
    // Both stores asked the model (with and without speaker names).
    assert_eq!(model.requests().len(), 6);
    assert!(report.systems[1]
        .system
        .starts_with("memgate local ranking + facts (endpoint: "));
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
