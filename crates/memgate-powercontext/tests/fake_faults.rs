//! Fault and contract tests against the in-process FAKE PowerContext server
//! (tests/common/fake.rs). The real servers are exercised in real_servers.rs;
//! these cover what a real server will not do on demand.

mod common;

use common::fake::*;
use common::*;
use memgate_core::{
    Acknowledgement, Caller, CaptureRequest, CommitOutcome, HandoffContent, HandoffStage,
    MemoryBackend, MemoryError, Message, RecallRequest, RememberOutcome, RememberRequest,
    SearchQuery, WarmStatus,
};
use memgate_powercontext::settings::*;
use memgate_powercontext::{
    PowerContextBackend, RememberTool, MANAGEMENT_NOTE, PASSIVE_CAPTURE_NOTE,
};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "fake-secret-token-Zq9xW4";
const SCOPE: &str = "scp_0vbbw94ec67mzhrkkhgmeb5z6g";

/// A 1.4.x fake: probes answered, everything else scripted by `f`.
async fn current(f: impl Fn(&Seen) -> FakeReply + Send + Sync + 'static) -> Fake {
    Fake::start(move |seen| match seen.path.as_str() {
        "/v1/server-info" => server_info_current(),
        p if p.starts_with("/v1/scopes/") => FakeReply::Json(200, json!({"scope_id": SCOPE})),
        _ => f(seen),
    })
    .await
}

/// A 0.0.2 fake.
async fn snapshot(f: impl Fn(&Seen) -> FakeReply + Send + Sync + 'static) -> Fake {
    Fake::start(move |seen| snapshot_probe(&seen.path).unwrap_or_else(|| f(seen))).await
}

fn pairs(fake: &Fake, overrides: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    binding(&fake.base_url, TOKEN, SCOPE, overrides)
}

fn owner_recall(query: &str) -> RecallRequest {
    RecallRequest {
        caller: Caller::new(OWNER),
        query: Some(query.to_owned()),
    }
}

fn fact(text: &str) -> RememberRequest {
    RememberRequest::new("fact", text).unwrap()
}

// ---------------------------------------------------------------- recall

#[tokio::test]
async fn recall_sends_the_bound_request_and_returns_content_unchanged() {
    let content = "PowerContext prepared untrusted historical context.\n\n## Memory\n\n> 金额使用整数分 {\"citation\":\"x\"}";
    let c = content.to_owned();
    let fake = current(move |_| prepared_ready(&c)).await;
    let backend = backend(&pairs(&fake, &[(ENV_MAX_BYTES, "4096")]));
    let recall = backend
        .recall(&owner_recall("money conventions"))
        .await
        .unwrap();
    assert_eq!(recall.text, content);

    let seen = fake.seen();
    let prepare: Vec<_> = seen
        .iter()
        .filter(|s| s.path == "/v1/context/prepare")
        .collect();
    assert_eq!(prepare.len(), 1);
    assert_eq!(prepare[0].method, "POST");
    assert_eq!(
        prepare[0].authorization.as_deref(),
        Some(&*format!("Bearer {TOKEN}"))
    );
    assert_eq!(
        prepare[0].body,
        json!({"scope_id": SCOPE, "query": "money conventions", "max_bytes": 4096,
               "assembly": {"format": "markdown", "sections": [{"family": "memory", "limit": 6}]}})
    );
}

#[tokio::test]
async fn recall_on_0_0_2_sends_no_assembly() {
    let fake = snapshot(|_| prepared_empty()).await;
    let backend = backend(&pairs(&fake, &[]));
    let recall = backend
        .recall(&owner_recall("billing database"))
        .await
        .unwrap();
    assert!(recall.is_empty());
    assert_eq!(
        fake.bodies("/v1/context/prepare"),
        vec![json!({"scope_id": SCOPE, "query": "billing database", "max_bytes": 8000})]
    );
    assert_eq!(fake.count("/v1/capabilities"), 1);
}

#[tokio::test]
async fn generation_is_detected_once_per_backend() {
    let fake = current(|_| prepared_empty()).await;
    let backend = Arc::new(backend(&pairs(&fake, &[])));
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let b = backend.clone();
            tokio::spawn(async move { b.recall(&owner_recall(&format!("q{i}"))).await })
        })
        .collect();
    for c in calls {
        assert!(c.await.unwrap().unwrap().is_empty());
    }
    assert_eq!(fake.count("/v1/server-info"), 1);
    assert_eq!(fake.count("/v1/context/prepare"), 8);
}

#[tokio::test]
async fn blank_or_missing_query_makes_no_request() {
    let fake = current(|_| prepared_ready("x")).await;
    let backend = backend(&pairs(&fake, &[]));
    for query in [None, Some(""), Some("  \n\t ")] {
        let r = backend
            .recall(&RecallRequest {
                caller: Caller::new(OWNER),
                query: query.map(str::to_owned),
            })
            .await
            .unwrap();
        assert!(r.is_empty());
    }
    assert_eq!(fake.total(), 0);
}

#[tokio::test]
async fn long_multibyte_query_is_cut_to_8192_characters() {
    let fake = current(|_| prepared_empty()).await;
    let backend = backend(&pairs(&fake, &[]));
    let long = "账".repeat(9000);
    backend.recall(&owner_recall(&long)).await.unwrap();
    let sent = fake.bodies("/v1/context/prepare")[0]["query"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sent.chars().count(), 8192);
    assert!(long.starts_with(&sent));
}

#[tokio::test]
async fn slow_drip_body_is_cut_off_at_the_total_deadline() {
    let logs = LogCapture::start();
    let fake = current(|_| FakeReply::SlowDrip {
        chunk: b" ".to_vec(),
        every: Duration::from_millis(50),
    })
    .await;
    let backend = backend(&pairs(&fake, &[(ENV_RECALL_TIMEOUT_SECONDS, "0.5")]));
    backend.warm().await.unwrap();
    let started = Instant::now();
    let recall = backend.recall(&owner_recall("anything")).await.unwrap();
    let elapsed = started.elapsed();
    assert!(recall.is_empty());
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    // A hang guard, not a timing claim (the benchmark measures overshoot).
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    assert_eq!(fake.count("/v1/context/prepare"), 1, "no retry");
    let text = logs.text();
    assert!(text.contains("category=\"timeout\""), "{text}");
    assert_no_secret(TOKEN, &[&text]);
}

#[tokio::test]
async fn hanging_headers_are_cut_off_at_the_total_deadline() {
    let fake = current(|_| FakeReply::Hang).await;
    let backend = backend(&pairs(&fake, &[(ENV_RECALL_TIMEOUT_SECONDS, "0.3")]));
    let started = Instant::now();
    assert!(backend.recall(&owner_recall("x")).await.unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_millis(1300));
}

#[tokio::test]
async fn auth_failures_recall_nothing_and_log_a_category_without_the_token() {
    for (status, category) in [(401, "unauthorized"), (403, "forbidden")] {
        let logs = LogCapture::start();
        let fake = current(move |_| FakeReply::Json(status, error_body(category))).await;
        let backend = backend(&pairs(&fake, &[]));
        let recall = backend.recall(&owner_recall("money")).await.unwrap();
        assert!(recall.is_empty());
        let text = logs.text();
        assert!(text.contains(&format!("category=\"{category}\"")), "{text}");
        assert!(text.contains("WARN"), "{text}");
        assert_no_secret(TOKEN, &[&text, &format!("{backend:?}")]);
        assert_eq!(fake.count("/v1/context/prepare"), 1, "no retry");
    }
}

#[tokio::test]
async fn malformed_prepare_answers_are_discarded_whole() {
    let ready = |c: &str| {
        json!({"schema": "powercontext.prepared-context.v1", "status": "ready",
               "content": c, "content_bytes": c.len()})
    };
    let mut extra_field = ready("x");
    extra_field["citations"] = json!([]);
    let mut wrong_schema = ready("x");
    wrong_schema["schema"] = json!("other.v1");
    let mut wrong_count = ready("日本");
    wrong_count["content_bytes"] = json!(2);
    let over_budget = ready(&"a".repeat(600));
    let cases: Vec<(&str, FakeReply)> = vec![
        (
            "not json",
            FakeReply::Raw(200, b"<html>oops</html>".to_vec()),
        ),
        ("extra field", FakeReply::Json(200, extra_field)),
        ("wrong schema", FakeReply::Json(200, wrong_schema)),
        ("char count", FakeReply::Json(200, wrong_count)),
        ("over max_bytes", FakeReply::Json(200, over_budget)),
        ("huge body", FakeReply::Raw(200, vec![b' '; 300 * 1024])),
        ("5xx", FakeReply::Json(500, error_body("internal_error"))),
        ("201", FakeReply::Json(201, ready("x"))),
    ];
    for (label, reply) in cases {
        let logs = LogCapture::start();
        let reply = Arc::new(std::sync::Mutex::new(Some(reply)));
        let fake = current(move |_| reply.lock().unwrap().take().unwrap_or(FakeReply::Hang)).await;
        let backend = backend(&pairs(&fake, &[(ENV_MAX_BYTES, "512")]));
        let recall = backend.recall(&owner_recall("q")).await.unwrap();
        assert!(recall.is_empty(), "{label}: {recall:?}");
        assert_eq!(fake.count("/v1/context/prepare"), 1, "{label}");
        let text = logs.text();
        assert!(
            text.contains("powercontext recall failed"),
            "{label}: {text}"
        );
        assert!(
            !text.contains("aaaa") && !text.contains("日本"),
            "{label}: content logged"
        );
    }
}

#[tokio::test]
async fn concurrent_recalls_share_a_bounded_pool() {
    let fake = current(|seen| {
        let q = seen.body["query"].as_str().unwrap_or("").to_owned();
        FakeReply::Delay(
            Duration::from_millis(40),
            Box::new(prepared_ready(&format!("for {q}"))),
        )
    })
    .await;
    let backend = Arc::new(backend(&pairs(&fake, &[])));
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let b = backend.clone();
            tokio::spawn(async move { (i, b.recall(&owner_recall(&format!("q{i}"))).await) })
        })
        .collect();
    for t in tasks {
        let (i, r) = t.await.unwrap();
        assert_eq!(
            r.unwrap().text,
            format!("for q{i}"),
            "answers must not cross"
        );
    }
    let peak = fake.peak_in_flight();
    assert!(peak <= 16, "at most 16 requests in flight, saw {peak}");
    assert!(peak > 1, "requests should overlap, saw {peak}");
}

// ---------------------------------------------------------------- identity

#[tokio::test]
async fn refused_callers_get_nothing_and_cause_no_request() {
    let fake = current(|_| prepared_ready("secret memory")).await;
    let backend = backend(&pairs(&fake, &[]));
    let tool = RememberTool::new(Arc::new(backend));
    let refused = [
        Caller::new("intruder"),
        Caller::default(), // host had no identity
        Caller::new(memgate_core::UserId::from_host(None)),
        Caller::new("default"),
        Caller::new(format!(" {OWNER}")),
        Caller::new(format!("{OWNER} ")),
        Caller::new(OWNER.to_uppercase()),
        // An agent or thread named after the owner does not make one the owner.
        Caller::new("intruder").with_agent(OWNER).with_thread(OWNER),
    ];
    for caller in &refused {
        let r = tool
            .backend()
            .recall(&RecallRequest {
                caller: caller.clone(),
                query: Some("anything".into()),
            })
            .await;
        assert!(
            matches!(r, Err(MemoryError::RejectedIdentity(_))),
            "{caller:?}"
        );
        let w = tool.backend().remember(caller, &fact("x")).await;
        assert!(
            matches!(w, Err(MemoryError::RejectedIdentity(_))),
            "{caller:?}"
        );
        let t = tool.call(caller, &json!({"text": "x"})).await;
        assert!(t.is_error);
        assert_eq!(t.content["error"]["code"], "rejected_identity");
        // Capture refuses the same way, with Source capture off (the no-op).
        let c = tool
            .backend()
            .capture(&CaptureRequest {
                caller: caller.clone().with_thread("t-1"),
                messages: vec![Message::human("x")],
                kind: Default::default(),
                trace_id: None,
            })
            .await;
        assert!(
            matches!(c, Err(MemoryError::RejectedIdentity(_))),
            "{caller:?}: {c:?}"
        );
    }
    assert_eq!(
        fake.total(),
        0,
        "a refused caller must not reach the server"
    );

    // The owner, under any agent or thread, is admitted.
    let ok = tool
        .backend()
        .recall(&RecallRequest {
            caller: Caller::new(OWNER)
                .with_agent("research-agent")
                .with_thread("t-9"),
            query: Some("q".into()),
        })
        .await
        .unwrap();
    assert_eq!(ok.text, "secret memory");
}

// ---------------------------------------------------------------- remember

#[tokio::test]
async fn lost_answer_after_commit_is_unknown_with_exactly_one_request() {
    let logs = LogCapture::start();
    let fake = snapshot(|seen| match seen.path.as_str() {
        "/v1/memory/remember" => FakeReply::CutBody {
            status: 200,
            partial: br#"{"memory":{"family":"mem"#.to_vec(),
        },
        _ => FakeReply::Json(500, error_body("unexpected")),
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("use pytest"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, RememberOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    assert!(outcome.describe().contains("unknown"));
    assert_eq!(fake.count("/v1/memory/remember"), 1, "never retried");
    assert_eq!(fake.count("/v1/memory/entries/list"), 0);
    assert_no_secret(TOKEN, &[&logs.text(), &format!("{outcome:?}")]);
}

#[tokio::test]
async fn deadline_after_sending_is_unknown_and_not_retried() {
    let fake = current(|seen| match seen.path.as_str() {
        "/v1/atomic-memory/search" => FakeReply::Json(200, json!({"mode": "text", "hits": []})),
        _ => FakeReply::Hang,
    })
    .await;
    let backend = backend(&pairs(&fake, &[(ENV_REMEMBER_TIMEOUT_SECONDS, "0.4")]));
    let started = Instant::now();
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("use pytest"))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(1400));
    let RememberOutcome::Unknown { reason } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        reason.contains("deadline") && reason.contains("after the save was sent"),
        "{reason}"
    );
    assert_eq!(fake.count("/v1/memory/remember"), 1);
}

#[tokio::test]
async fn server_rejection_is_failed_and_5xx_is_unknown() {
    for (status, expect_failed) in [
        (422, true),
        (409, true),
        (401, true),
        (302, true),
        (500, false),
        (503, false),
    ] {
        let fake = snapshot(move |_| FakeReply::Json(status, error_body("some_code"))).await;
        let backend = backend(&pairs(&fake, &[]));
        let outcome = backend
            .remember(&Caller::new(OWNER), &fact("x"))
            .await
            .unwrap();
        match (&outcome, expect_failed) {
            (RememberOutcome::Failed { reason }, true) => {
                assert!(
                    reason.contains(&status.to_string()) || status == 401,
                    "{reason}"
                );
                assert!(reason.contains("nothing was stored"), "{reason}");
            }
            (RememberOutcome::Unknown { .. }, false) => {}
            _ => panic!("HTTP {status}: {outcome:?}"),
        }
        assert_eq!(
            fake.count("/v1/memory/remember"),
            1,
            "HTTP {status}: never retried"
        );
    }
}

#[tokio::test]
async fn unreachable_server_is_failed_and_nothing_was_sent() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let pairs = binding(&format!("http://127.0.0.1:{port}"), TOKEN, SCOPE, &[]);
    let backend = backend(&pairs);
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("x"))
        .await
        .unwrap();
    let RememberOutcome::Failed { reason } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        reason.contains("could not be reached") && reason.contains("nothing was sent"),
        "{reason}"
    );
    assert!(backend.recall(&owner_recall("q")).await.unwrap().is_empty());
    assert!(backend.warm().await.is_err());
}

#[tokio::test]
async fn snapshot_no_op_keeps_revision_and_reads_back_the_citation() {
    let citation = json!({"memory_ref": {"family": "memory", "artifact_id": "memory", "revision": 3},
                          "entry_id": "mem_ent_aa", "entry_version_id": "mem_ver_bb"});
    let c = citation.clone();
    let fake = snapshot(move |seen| match seen.path.as_str() {
        "/v1/memory/remember" => FakeReply::Json(
            200,
            json!({"memory": {"family": "memory", "artifact_id": "memory", "revision": 7}, "entry": null}),
        ),
        "/v1/memory/entries/list" => FakeReply::Json(
            200,
            json!({"memory": {"revision": 7}, "entries": [
                {"citation": {"entry_id": "other"}, "kind": "fact", "text": "other", "state": "active"},
                {"citation": c, "kind": "fact", "text": "use pytest", "state": "active"}]}),
        ),
        _ => FakeReply::Hang,
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("  use pytest "))
        .await
        .unwrap();
    let RememberOutcome::AlreadyPresent {
        citation: Some(got),
        revision,
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(*revision, Some(7));
    assert!(got.as_str().contains("mem_ent_aa") && got.as_str().contains("mem_ver_bb"));
    assert_eq!(fake.count("/v1/memory/remember"), 1);
    assert_eq!(
        fake.bodies("/v1/memory/remember")[0],
        json!({"scope_id": SCOPE, "kind": "fact", "text": "use pytest"})
    );
}

#[tokio::test]
async fn snapshot_no_op_without_readback_invents_no_citation() {
    let fake = snapshot(|seen| match seen.path.as_str() {
        "/v1/memory/remember" => FakeReply::Json(
            200,
            json!({"memory": {"family": "memory", "artifact_id": "memory", "revision": 2}, "entry": null}),
        ),
        _ => FakeReply::Json(503, error_body("runtime_not_ready")),
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("x"))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        RememberOutcome::AlreadyPresent {
            citation: None,
            revision: Some(2)
        }
    );
    assert_eq!(
        fake.count("/v1/memory/remember"),
        1,
        "no retry to obtain a citation"
    );
}

#[tokio::test]
async fn current_precheck_finds_the_identical_record_and_writes_nothing() {
    let fake = current(|seen| match seen.path.as_str() {
        "/v1/atomic-memory/search" => FakeReply::Json(
            200,
            json!({"mode": "text", "hits": [
                {"memory": atomic_record("art_other", "fact", "use pytest for tests"), "score": 0.02},
                {"memory": atomic_record("art_same_kind_wrong", "preference", "use pytest"), "score": 0.02},
                {"memory": atomic_record("art_hit", "fact", "use pytest"), "score": 0.01}]}),
        ),
        _ => FakeReply::Json(500, error_body("unexpected")),
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("use pytest"))
        .await
        .unwrap();
    let RememberOutcome::AlreadyPresent {
        citation: Some(c),
        revision: Some(1),
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert!(c.as_str().contains("art_hit"), "{c}");
    assert_eq!(fake.count("/v1/memory/remember"), 0, "nothing written");
    assert_eq!(
        fake.bodies("/v1/atomic-memory/search")[0],
        json!({"scope_id": SCOPE, "query": "use pytest", "mode": "text", "kind": "fact", "limit": 100})
    );
}

#[tokio::test]
async fn current_precheck_miss_stores_once_with_the_server_citation() {
    let fake = current(|seen| match seen.path.as_str() {
        "/v1/atomic-memory/search" => FakeReply::Json(200, json!({"mode": "text", "hits": []})),
        "/v1/memory/remember" => {
            FakeReply::Json(200, atomic_stored("art_new", "fact", "use pytest"))
        }
        _ => FakeReply::Hang,
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("use pytest"))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        RememberOutcome::Stored {
            citation: memgate_core::Citation::new(
                r#"{"artifact_ref":{"artifact_id":"art_new","family":"atomic-memory","revision":1}}"#
            )
        }
    );
    assert_eq!(fake.count("/v1/memory/remember"), 1);
}

#[tokio::test]
async fn failed_precheck_stores_nothing_and_says_so() {
    let fake = current(|seen| match seen.path.as_str() {
        "/v1/atomic-memory/search" => FakeReply::Json(403, error_body("forbidden")),
        _ => FakeReply::Json(200, atomic_stored("art_x", "fact", "x")),
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let outcome = backend
        .remember(&Caller::new(OWNER), &fact("x"))
        .await
        .unwrap();
    let RememberOutcome::Failed { reason } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        reason.contains("403") && reason.contains("nothing was sent"),
        "{reason}"
    );
    assert_eq!(fake.count("/v1/memory/remember"), 0);
}

// ---------------------------------------------------------------- the tool

#[tokio::test]
async fn tool_reports_the_outcome_without_secrets_and_refuses_foreign_arguments() {
    let logs = LogCapture::start();
    let fake = current(|seen| match seen.path.as_str() {
        "/v1/atomic-memory/search" => FakeReply::Json(200, json!({"mode": "text", "hits": []})),
        "/v1/memory/remember" => {
            let text = seen.body["text"].as_str().unwrap_or("").to_owned();
            FakeReply::Json(200, atomic_stored("art_tool", "preference", &text))
        }
        _ => FakeReply::Hang,
    })
    .await;
    let tool = RememberTool::new(Arc::new(backend(&pairs(&fake, &[]))));
    let owner = Caller::new(OWNER);

    for args in [
        json!({"text": "x", "user_id": OWNER}),
        json!({"text": "x", "scope_id": "scp_other"}),
        json!({"text": "x", "token": "t"}),
        json!({"text": "x", "kind": "secret-kind"}),
        json!({"text": "   "}),
    ] {
        let r = tool.call(&owner, &args).await;
        assert!(r.is_error, "{args}");
        assert_eq!(r.content["error"]["code"], "invalid_input");
    }
    assert_eq!(fake.total(), 0, "invalid arguments never reach the server");

    let r = tool
        .call(
            &owner,
            &json!({"text": "Prefers tabs", "kind": "preference"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.content["outcome"], "stored");
    assert!(r.content["citation"].as_str().unwrap().contains("art_tool"));
    assert!(r.content["message"]
        .as_str()
        .unwrap()
        .starts_with("Saved to memory"));
    assert_eq!(
        fake.bodies("/v1/memory/remember")[0],
        json!({"scope_id": SCOPE, "kind": "preference", "text": "Prefers tabs"})
    );
    let spec = serde_json::to_string(&RememberTool::spec()).unwrap();
    assert_no_secret(
        TOKEN,
        &[
            &r.content.to_string(),
            &spec,
            &logs.text(),
            &format!("{tool:?}"),
        ],
    );
    assert_no_secret(SCOPE, &[&r.content.to_string()]);
}

#[tokio::test]
async fn tool_unknown_outcome_is_not_an_error_but_says_do_not_retry() {
    let fake = snapshot(|_| FakeReply::CutBody {
        status: 200,
        partial: b"{".to_vec(),
    })
    .await;
    let tool = RememberTool::new(Arc::new(backend(&pairs(&fake, &[]))));
    let r = tool.call(&Caller::new(OWNER), &json!({"text": "x"})).await;
    assert!(!r.is_error);
    assert_eq!(r.content["outcome"], "unknown");
    assert!(r.content["message"]
        .as_str()
        .unwrap()
        .contains("not retried"));
    assert_eq!(fake.count("/v1/memory/remember"), 1);
}

// ---------------------------------------------------------------- setup, warm, lifecycle

#[tokio::test]
async fn construction_and_capture_make_no_request() {
    let fake = current(|_| prepared_ready("x")).await;
    let backend = backend(&pairs(&fake, &[]));
    let report = backend
        .capture(&CaptureRequest {
            caller: Caller::new(OWNER).with_thread("t1"),
            messages: vec![Message::human("remember I like tabs"), Message::ai("ok")],
            kind: Default::default(),
            trace_id: None,
        })
        .await
        .unwrap();
    assert_eq!(
        (report.stored, report.already_known, report.filtered),
        (0, 0, 2)
    );
    assert!(!backend.capabilities().capture);
    assert!(PASSIVE_CAPTURE_NOTE.contains("no-op"));
    drop(backend);
    assert_eq!(fake.total(), 0);
}

#[tokio::test]
async fn yaml_binding_keys_are_rejected_not_applied() {
    let fake = current(|_| prepared_ready("x")).await;
    let ctx = context(&pairs(&fake, &[]));
    for key in [
        "base_url",
        "token",
        "scope_id",
        "owner_user_id",
        "recall_timeout_seconds",
        "whatever",
    ] {
        let mut config = Map::new();
        config.insert("storage_path".into(), json!("/var/lib/memgate"));
        config.insert(key.into(), json!(TOKEN));
        let e = PowerContextBackend::from_backend_config(&config, &ctx).unwrap_err();
        assert!(matches!(e, MemoryError::Config(_)));
        assert!(
            e.to_string().contains(&format!("backend_config.{key}")),
            "{e}"
        );
        assert_no_secret(TOKEN, &[&e.to_string()]);
        let e = RememberTool::from_plugin_config(&config, &ctx).unwrap_err();
        assert!(e.to_string().contains(&format!("config.{key}")), "{e}");
    }
    assert_eq!(fake.total(), 0);
}

#[tokio::test]
async fn backend_and_tool_from_one_context_share_one_snapshot() {
    let fake = current(|_| prepared_ready("x")).await;
    let ctx = context(&pairs(&fake, &[]));
    let backend = PowerContextBackend::from_backend_config(&Map::new(), &ctx).unwrap();
    let tool = RememberTool::from_plugin_config(&Map::new(), &ctx.clone()).unwrap();
    assert!(Arc::ptr_eq(backend.settings(), tool.backend().settings()));

    let broken = context(&pairs(&fake, &[(ENV_OWNER_USER_ID, "default")]));
    let e1 = PowerContextBackend::from_backend_config(&Map::new(), &broken).unwrap_err();
    let e2 = RememberTool::from_plugin_config(&Map::new(), &broken).unwrap_err();
    assert_eq!(e1.to_string(), e2.to_string());
    assert!(e1.to_string().contains(ENV_OWNER_USER_ID));
}

#[tokio::test]
async fn warm_detects_scope_and_credential_problems() {
    let good = current(|_| prepared_empty()).await;
    let b = backend(&pairs(&good, &[]));
    assert_eq!(b.warm().await.unwrap(), WarmStatus::Ready);
    assert_eq!(
        b.server_info().unwrap().package_version.as_deref(),
        Some("1.4.1")
    );

    let no_scope = Fake::start(|seen| match seen.path.as_str() {
        "/v1/server-info" => server_info_current(),
        _ => FakeReply::Json(404, error_body("scope_not_found")),
    })
    .await;
    let e = backend(&pairs(&no_scope, &[])).warm().await.unwrap_err();
    assert!(e.to_string().contains("scope_not_found"), "{e}");

    let logs = LogCapture::start();
    let bad_token = Fake::start(|_| FakeReply::Json(401, error_body("unauthorized"))).await;
    let e = backend(&pairs(&bad_token, &[])).warm().await.unwrap_err();
    assert!(e.to_string().contains("401"), "{e}");
    assert_no_secret(TOKEN, &[&e.to_string(), &format!("{e:?}"), &logs.text()]);

    let future = Fake::start(|seen| match seen.path.as_str() {
        "/v1/server-info" => FakeReply::Json(
            200,
            json!({"api_contract_version": {"major": 2, "minor": 0}}),
        ),
        _ => prepared_ready("must not be used"),
    })
    .await;
    let b = backend(&pairs(&future, &[]));
    assert!(b
        .warm()
        .await
        .unwrap_err()
        .to_string()
        .contains("unsupported"));
    assert!(b.recall(&owner_recall("q")).await.unwrap().is_empty());
    assert_eq!(future.count("/v1/context/prepare"), 0);
}

#[tokio::test]
async fn management_is_unsupported_with_a_pointer() {
    let fake = current(|_| prepared_empty()).await;
    let b = backend(&pairs(&fake, &[]));
    let owner = Caller::new(OWNER);
    let e = b.search(&owner, &SearchQuery::new("x")).await.unwrap_err();
    assert!(matches!(e, MemoryError::Unsupported { .. }));
    assert!(
        e.to_string()
            .starts_with("search not supported by powercontext"),
        "{e}"
    );
    assert!(
        e.to_string().contains("PowerContext's own API or UI"),
        "{e}"
    );
    assert!(b.list_facts(&owner, false).await.is_err());
    assert!(b.export(&owner).await.is_err());
    assert!(MANAGEMENT_NOTE.contains("PowerContext's own API"));
    assert_eq!(fake.total(), 0);
}

#[tokio::test]
async fn shutdown_drains_in_flight_work_then_refuses_new_work() {
    let fake =
        current(|_| FakeReply::Delay(Duration::from_millis(200), Box::new(prepared_ready("late"))))
            .await;
    let backend = Arc::new(backend(&pairs(&fake, &[])));
    backend.warm().await.unwrap();
    let b = backend.clone();
    let in_flight = tokio::spawn(async move { b.recall(&owner_recall("q")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        backend.shutdown(Duration::from_secs(2)).await,
        "drained in time"
    );
    assert_eq!(in_flight.await.unwrap().unwrap().text, "late");
    let before = fake.total();
    let e = backend.recall(&owner_recall("q")).await.unwrap_err();
    assert!(matches!(e, MemoryError::Closed(_)));
    assert!(matches!(
        backend.remember(&Caller::new(OWNER), &fact("x")).await,
        Err(MemoryError::Closed(_))
    ));
    assert_eq!(fake.total(), before);
}

#[test]
fn debug_output_of_every_public_type_hides_the_token() {
    let pairs = binding("https://pc.example.com", TOKEN, SCOPE, &[]);
    let s = settings(&pairs);
    let b = PowerContextBackend::from_settings(s.clone()).unwrap();
    let t = RememberTool::new(Arc::new(
        PowerContextBackend::from_settings(s.clone()).unwrap(),
    ));
    assert_no_secret(
        TOKEN,
        &[
            &format!("{s:?}"),
            &format!("{b:?}"),
            &format!("{t:?}"),
            &format!("{:?}", s.token()),
        ],
    );
    let _: &Value = &RememberTool::spec().input_schema;
}

// ---------------------------------------------------------------- handoff

fn task() -> HandoffContent {
    HandoffContent::new("ship refunds", &[], &[], "run pytest", &[]).unwrap()
}

/// A prepared handoff as 1.4.1 answers `prepare-current` (shape observed on
/// the real server; see testkit/README.md).
fn prepared_current() -> FakeReply {
    FakeReply::Json(
        200,
        json!({"boundary": {"kind": "handoff-boundary", "position": 1},
               "handoff": {"schema": "powercontext.prepared-handoff.v1", "scope_id": SCOPE,
                           "base": null, "content": {"objective": "ship refunds"}}}),
    )
}

#[tokio::test]
async fn handoff_refused_callers_cause_no_request() {
    let fake = current(|_| prepared_current()).await;
    let backend = backend(&pairs(&fake, &[]));
    let draft = backend
        .prepare_handoff(&Caller::new(OWNER), &task())
        .await
        .unwrap();
    for caller in [
        Caller::new("intruder"),
        Caller::default(),
        Caller::new("default"),
        Caller::new(format!("{OWNER} ")),
        Caller::new("intruder").with_agent(OWNER).with_thread(OWNER),
    ] {
        let id = draft.id.as_str();
        let refused = [
            backend.prepare_handoff(&caller, &task()).await.err(),
            backend.get_handoff(&caller, id).await.err(),
            backend.correct_handoff(&caller, id, &task()).await.err(),
            backend.finalize_handoff(&caller, id).await.err(),
            backend.continue_handoff(&caller, id).await.err(),
            backend
                .acknowledge_handoff(&caller, id, &Acknowledgement::Accepted)
                .await
                .err(),
            backend.commit_handoff(&caller, id).await.err(),
        ];
        for r in refused {
            assert!(
                matches!(r, Some(MemoryError::RejectedIdentity(_))),
                "{caller:?}: {r:?}"
            );
        }
    }
    assert_eq!(
        fake.total(),
        0,
        "a refused caller must not reach the server"
    );
}

#[tokio::test]
async fn lost_handoff_answers_are_unknown_and_not_retried() {
    let logs = LogCapture::start();
    let finalizes = std::sync::atomic::AtomicUsize::new(0);
    let fake = current(move |seen| match seen.path.as_str() {
        "/v1/work/handoffs/prepare-current"
            if finalizes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 =>
        {
            FakeReply::CutBody {
                status: 200,
                partial: br#"{"boundary":{"kind"#.to_vec(),
            }
        }
        "/v1/work/handoffs/prepare-current" => prepared_current(),
        "/v1/handoff/commit" => FakeReply::CutBody {
            status: 200,
            partial: br#"{"reference":{"fam"#.to_vec(),
        },
        _ => FakeReply::Json(500, error_body("unexpected")),
    })
    .await;
    let backend = backend(&pairs(&fake, &[]));
    let owner = Caller::new(OWNER);

    // A finalize whose answer is lost leaves the draft a draft and says so.
    let draft = backend.prepare_handoff(&owner, &task()).await.unwrap();
    let lost = backend
        .finalize_handoff(&owner, &draft.id)
        .await
        .unwrap_err();
    let lost = lost.to_string();
    assert!(
        lost.contains("outcome unknown") && lost.contains("not retried"),
        "{lost}"
    );
    assert_eq!(fake.count("/v1/work/handoffs/prepare-current"), 1);
    let still = backend.get_handoff(&owner, &draft.id).await.unwrap();
    assert_eq!(still.stage, HandoffStage::Draft);
    let commit_before = backend.commit_handoff(&owner, &draft.id).await;
    assert!(
        matches!(commit_before, Err(MemoryError::Conflict(_))),
        "{commit_before:?}"
    );
    // Finalizing again is the user's decision; the server treats the same
    // handoff id as the same boundary.
    let prepared = backend.finalize_handoff(&owner, &draft.id).await.unwrap();
    assert_eq!(prepared.stage, HandoffStage::Prepared);

    let outcome = backend.commit_handoff(&owner, &draft.id).await.unwrap();
    let CommitOutcome::Unknown { reason } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(reason.contains("after the commit was sent"), "{reason}");
    assert!(outcome.describe().contains("not retried"));
    assert_eq!(fake.count("/v1/handoff/commit"), 1, "never retried");
    let still = backend.get_handoff(&owner, &draft.id).await.unwrap();
    assert_eq!(still.stage, HandoffStage::Prepared, "not marked committed");
    assert_no_secret(TOKEN, &[&logs.text(), reason, &lost]);
}
