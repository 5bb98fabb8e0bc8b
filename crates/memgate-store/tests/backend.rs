//! The async backend as the factory builds it: configuration, capabilities,
//! warm-up, every operation through the blocking pool, shutdown.

mod common;

use common::capture;
use memgate_core::capture::host_default_keep_hidden;
use memgate_core::{
    BackendContext, Caller, FactPatch, KeepHiddenHook, MemoryBackend, MemoryError, Message,
    RecallRequest, RememberOutcome, RememberRequest, SearchQuery, WarmStatus,
};
use memgate_store::LocalBackend;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

fn config(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[tokio::test]
async fn built_from_backend_config_under_the_storage_root() {
    let root = tempfile::tempdir().unwrap();
    let ctx = BackendContext::new(root.path());
    let backend = LocalBackend::from_backend_config(&config(json!({})), &ctx).unwrap();
    assert_eq!(backend.name(), "local");
    let caps = backend.capabilities();
    assert!(
        caps.recall
            && caps.capture
            && caps.remember
            && caps.search
            && caps.facts
            && caps.import_export
    );
    assert_eq!(backend.warm().await.unwrap(), WarmStatus::Ready);
    assert!(root.path().join("local/memgate.sqlite3").exists());

    // An explicit storage_path wins over the context's.
    let other = tempfile::tempdir().unwrap();
    let cfg =
        config(json!({"storage_path": other.path().to_str().unwrap(), "max_injection_chars": 300}));
    let b2 = LocalBackend::from_backend_config(&cfg, &ctx).unwrap();
    assert!(other.path().join("local/memgate.sqlite3").exists());
    assert_eq!(b2.store().config().recall.max_injection_chars, 300);
}

#[tokio::test]
async fn configuration_errors_name_the_key() {
    let root = tempfile::tempdir().unwrap();
    let ctx = BackendContext::new(root.path());
    for (cfg, key) in [
        (
            json!({"max_injection_chars": 10}),
            "backend_config.max_injection_chars",
        ),
        (
            json!({"recall_top_k": "ten"}),
            "backend_config.recall_top_k",
        ),
        (json!({"api_key": "s3cr3t-value"}), "backend_config.api_key"),
    ] {
        let err = LocalBackend::from_backend_config(&config(cfg), &ctx).unwrap_err();
        assert!(matches!(err, MemoryError::Config(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(key), "{msg}");
        assert!(
            !msg.contains("s3cr3t-value"),
            "values are never echoed: {msg}"
        );
    }
    assert!(
        !root.path().join("local").exists(),
        "nothing is created for a bad config"
    );
}

#[tokio::test]
async fn every_operation_works_through_the_async_face() {
    let root = tempfile::tempdir().unwrap();
    let hook: KeepHiddenHook = Arc::new(host_default_keep_hidden);
    let ctx = BackendContext::new(root.path()).with_keep_hidden(hook);
    let backend = LocalBackend::from_backend_config(&Map::new(), &ctx).unwrap();
    let me = Caller::new("carol").with_agent("helper");

    let stored = backend
        .remember(
            &me,
            &RememberRequest::new("preference", "Likes window seats").unwrap(),
        )
        .await
        .unwrap();
    let RememberOutcome::Stored { citation } = stored else {
        panic!("{stored:?}")
    };
    let id = citation.0;
    let answer = json!({"version": 1, "kind": "human_input_response", "source": "ui",
                        "request_id": "r", "value": "aisle", "response_kind": "text"});
    let report = backend
        .capture(&capture(
            &me,
            "th",
            vec![
                Message::human("seat choice: aisle")
                    .with_flag("hide_from_ui", true)
                    .with_flag("human_input_response", answer),
                Message::ai("Noted your seat choice."),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(report.stored, 2, "the context's keep-hook is used");
    let recall = backend
        .recall(&RecallRequest {
            caller: me.clone(),
            query: Some("seat".into()),
        })
        .await
        .unwrap();
    assert_eq!(recall.items.len(), 3);
    let hits = backend
        .search(&me, &SearchQuery::new("window"))
        .await
        .unwrap();
    assert_eq!(hits[0].id, id);
    let revised = backend
        .revise_fact(
            &me,
            &id,
            &FactPatch {
                text: Some("Likes aisle seats".into()),
                kind: None,
                confidence: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(revised.version, 2);
    assert_eq!(
        backend.get_fact(&me, &id).await.unwrap().text,
        "Likes aisle seats"
    );
    backend.retire_fact(&me, &id).await.unwrap();
    assert!(backend.list_facts(&me, false).await.unwrap().is_empty());
    let export = backend.export(&me).await.unwrap();
    let fresh = Caller::new("dave");
    let imported = backend.import(&fresh, &export).await.unwrap();
    assert_eq!((imported.facts_imported, imported.turns_imported), (1, 2));
    let mut threadless = capture(&me, "th", vec![Message::human("x")]);
    threadless.caller.thread = None;
    let err = backend.capture(&threadless).await.unwrap_err();
    assert!(err.to_string().contains("thread"));
}

#[tokio::test]
async fn shutdown_checkpoints_closes_and_refuses_later_work() {
    let root = tempfile::tempdir().unwrap();
    let backend =
        LocalBackend::from_backend_config(&Map::new(), &BackendContext::new(root.path())).unwrap();
    let me = Caller::new("erin");
    for i in 0..50 {
        backend
            .remember(
                &me,
                &RememberRequest::new("fact", &format!("fact {i}")).unwrap(),
            )
            .await
            .unwrap();
    }
    let wal = root.path().join("local/memgate.sqlite3-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);
    assert!(backend.shutdown(Duration::from_secs(5)).await);
    // The WAL was checkpointed into the main file.
    assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0), 0);
    let err = backend
        .recall(&RecallRequest {
            caller: me.clone(),
            query: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::Closed(_)), "{err:?}");
    let err = backend.store().list_facts(&me, false).unwrap_err();
    assert!(matches!(err, MemoryError::Closed(_)), "{err:?}");
    // Everything is there after a reopen.
    let again =
        LocalBackend::from_backend_config(&Map::new(), &BackendContext::new(root.path())).unwrap();
    assert_eq!(again.list_facts(&me, false).await.unwrap().len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_work_in_flight() {
    let root = tempfile::tempdir().unwrap();
    let backend =
        LocalBackend::from_backend_config(&Map::new(), &BackendContext::new(root.path())).unwrap();
    let me = Caller::new("frank");
    let writer = {
        let backend = backend.clone();
        let me = me.clone();
        tokio::spawn(async move {
            let msgs: Vec<Message> = (0..2000)
                .map(|i| Message::human(format!("line {i} of a long paste")))
                .collect();
            backend.capture(&capture(&me, "t", msgs)).await
        })
    };
    // Let the capture start, then shut down while it runs.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let drained = backend.shutdown(Duration::from_secs(30)).await;
    let outcome = writer.await.unwrap();
    assert!(drained);
    match outcome {
        // Either it was admitted (and then completed before the close)…
        Ok(report) => {
            assert_eq!(report.stored, 2000);
            let reopened =
                LocalBackend::from_backend_config(&Map::new(), &BackendContext::new(root.path()))
                    .unwrap();
            assert_eq!(reopened.export(&me).await.unwrap().turns.len(), 2000);
        }
        // …or refused outright; never half-done.
        Err(e) => assert!(matches!(e, MemoryError::Closed(_)), "{e:?}"),
    }
}
