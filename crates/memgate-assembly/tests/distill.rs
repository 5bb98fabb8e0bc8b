//! The factory with `memory.distill` on: a long-running surface's backend
//! runs the worker, captures stay acknowledged as before, the worker's
//! figures reach `figures()` (what `/metrics` and `doctor` show), and a
//! drain stops it.

use memgate_assembly::config::Config;
use memgate_assembly::factory::{open_backend, BackendSetup};
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message};
use memgate_testsupport::scripted_model::ScriptedModel;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_backend_distils_in_the_background_and_shows_its_figures() {
    let answer = json!({"operations": [{"op": "add", "fact": null, "kind": "fact",
        "text": "Dana's name is Dana", "confidence": 1.0, "sources": ["turn_1"]}]});
    let model = ScriptedModel::start(
        json!([{"when": {"user_contains": "I'm Dana"},
                "reply": {"content": answer.to_string(),
                          "usage": {"prompt_tokens": 200, "completion_tokens": 20}}}]),
        &[],
    );
    let home = tempfile::tempdir().unwrap();
    let config = Config::from_yaml(
        &format!(
            "memory:\n  distill:\n    enabled: true\n    base_url: {}\n    model: scripted\n",
            model.url
        ),
        "t",
    )
    .unwrap();
    let setup = BackendSetup::new(home.path(), Arc::new(|_| None)).running_distiller();
    let backend = open_backend(&config.memory, &setup).unwrap();
    let dana = Caller::new("dana").with_thread("t1");
    let report = backend
        .capture(&CaptureRequest {
            caller: dana.clone(),
            messages: vec![Message::human("Hi, I'm Dana.")],
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
        .await
        .unwrap();
    assert_eq!(report.stored, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while backend.list_facts(&dana, false).await.unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the worker did not distil the capture"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let figures = backend.figures();
    let value = |name: &str| figures.iter().find(|f| f.name == name).map(|f| f.value);
    assert_eq!(value("memgate_distill_jobs_applied_total"), Some(1));
    assert_eq!(value("memgate_distill_prompt_tokens_total"), Some(200));
    assert!(backend.drain(Duration::from_secs(5)).await.drained());
    // Stopped: its figures are gone with it.
    assert_eq!(
        backend
            .figures()
            .iter()
            .filter(|f| f.name.starts_with("memgate_distill"))
            .count(),
        0
    );
}
