//! Behaviour of the OpenViking backend against the FAKE OpenViking
//! (`common/fake.rs`): the acceptance list of `deerflow-memory-contract`
//! §7.1 and §7.6, the wire shape (headers, bodies), and the faults a real
//! server does not produce on demand.

mod common;

use common::fake::{hit, payload_text, slow_drip_server, FakeOpenViking, Reply};
use common::*;
use memgate_core::intake::on_callers_thread;
use memgate_core::signature::{
    message_signature, sequence_digest, HeadFingerprint, SequenceHasher,
};
use memgate_core::{
    Caller, KnownHead, MemoryBackend, MemoryError, MemoryMode, Message, RecallRequest, SearchQuery,
    ToolCall, UserId, WarmStatus,
};
use memgate_openviking::cursor::load_cursor;
use memgate_openviking::scope::session_id;
use memgate_openviking::{OpenVikingBackend, UriStyle};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn alice() -> Caller {
    Caller::new("alice")
        .with_agent("research")
        .with_thread("thread-1")
}

/// The host contract's shape: no query (the fixed `injection_query` is sent).
fn recall_request(caller: Caller) -> RecallRequest {
    RecallRequest {
        caller,
        query: None,
    }
}

fn preferences_hit() -> Value {
    json!({"context_type": "memory", "uri": "viking://user/alice/memories/preferences/alice/style.md",
           "level": 2, "score": 0.91, "abstract": "Prefers concise answers.", "category": "preferences"})
}

struct Setup {
    fake: FakeOpenViking,
    dir: tempfile::TempDir,
    backend: OpenVikingBackend,
}

async fn setup(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Setup {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), edit);
    Setup { fake, dir, backend }
}

fn sid(caller: &Caller) -> String {
    session_id("alice", "research", caller.thread.as_deref().unwrap())
}

fn cursor_text(s: &Setup, caller: &Caller) -> String {
    std::fs::read_to_string(s.backend.config().cursor_path(&sid(caller))).unwrap()
}

fn assert_no_secret(text: &str) {
    assert!(!text.contains(USER_KEY), "the API key leaked: {text}");
}

// ---------------------------------------------------------------- §7.1

#[tokio::test]
async fn config_uses_single_user_key_and_rejects_legacy_trusted_fields() {
    let dir = tempfile::tempdir().unwrap();
    let config = base_config("http://openviking:1933", dir.path());
    let missing =
        OpenVikingBackend::from_backend_config(&config, &context(dir.path(), &[])).unwrap_err();
    assert!(matches!(missing, MemoryError::Config(_)));
    assert!(missing.to_string().contains("USER API key"));

    let backend = OpenVikingBackend::from_backend_config(
        &config,
        &context(dir.path(), &[("OPENVIKING_API_KEY", USER_KEY)]),
    )
    .unwrap();
    assert_eq!(backend.config().owner_user_id, "alice");
    assert_eq!(backend.config().retrieval.content_mode.as_str(), "overview");
    assert_eq!(
        backend.config().retrieval.injection_query,
        "profile preferences and prior decisions"
    );
    assert_no_secret(&format!("{backend:?}"));

    for (key, value, expected) in [
        (
            "auth_mode",
            json!("trusted"),
            "trusted mode is no longer supported",
        ),
        ("colour", json!("blue"), "Unknown OpenViking"),
        (
            "default_peer_id",
            json!("df-agent-default"),
            "reserved prefix",
        ),
        ("max_connections", json!(10), "custom HTTP client fields"),
    ] {
        let mut c = config.clone();
        c.insert(key.into(), value);
        let err = OpenVikingBackend::from_backend_config(
            &c,
            &context(dir.path(), &[("OPENVIKING_API_KEY", USER_KEY)]),
        )
        .unwrap_err();
        assert!(err.to_string().contains(expected), "{key}: {err}");
        assert_no_secret(&err.to_string());
    }
}

#[tokio::test]
async fn backend_is_named_openviking_with_recall_capture_and_search() {
    let s = setup(|_| {}).await;
    assert_eq!(s.backend.name(), "openviking");
    let caps = s.backend.capabilities();
    assert!(caps.recall && caps.capture && caps.search);
    assert!(!caps.remember && !caps.facts && !caps.import_export);
    let caller = alice();
    let remember = memgate_core::RememberRequest::new("fact", "x").unwrap();
    let errors = [
        s.backend.remember(&caller, &remember).await.unwrap_err(),
        s.backend.list_facts(&caller, false).await.unwrap_err(),
        s.backend.get_fact(&caller, "f1").await.unwrap_err(),
        s.backend.retire_fact(&caller, "f1").await.unwrap_err(),
        s.backend.export(&caller).await.unwrap_err(),
    ];
    for err in errors {
        assert!(matches!(err, MemoryError::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().ends_with("not supported by openviking"));
    }
    assert!(s.fake.requests().is_empty());
}

#[tokio::test]
async fn writes_are_batches_then_an_always_commit_with_only_the_user_key() {
    let s = setup(|_| {}).await;
    s.backend
        .capture(&capture_request(
            &alice(),
            vec![human("h1", "hi"), ai("a1", "hello")],
        ))
        .await
        .unwrap();
    let requests = s.fake.requests();
    let routes: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    let session = sid(&alice());
    assert_eq!(
        routes,
        [
            // The first capture of a conversation asks for the session's
            // count, the base of its durable intent.
            format!("/api/v1/sessions/{session}"),
            format!("/api/v1/sessions/{session}/messages/batch"),
            format!("/api/v1/sessions/{session}/commit")
        ]
    );
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[2].body, json!({"keep_recent_count": 0}));
    for r in &requests {
        assert_eq!(r.header("x-api-key"), Some(USER_KEY));
        assert_eq!(r.header("x-openviking-actor-peer"), Some("research"));
    }
    assert_no_trusted_headers(&s.fake);
}

#[tokio::test]
async fn a_redirect_is_never_followed_so_the_key_goes_only_to_the_configured_server() {
    // reqwest keeps custom headers across hosts when it follows a redirect,
    // and the USER key is one; the official SDK does not follow them either.
    let s = setup(|_| {}).await;
    let elsewhere = FakeOpenViking::start().await;
    s.fake
        .plan("batch", [Reply::Redirect(elsewhere.url.clone())]);
    for route in ["find", "search"] {
        s.fake.plan(route, [Reply::Redirect(elsewhere.url.clone())]);
    }
    let report = s
        .backend
        .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
        .await
        .unwrap();
    assert_eq!(report.stored, 0, "a redirected write is a failed write");
    let _ = s.backend.recall(&recall_request(alice())).await;
    assert_eq!(s.fake.requests_to("batch").len(), 1);
    let retrievals = s.fake.requests_to("find").len() + s.fake.requests_to("search").len();
    assert_eq!(retrievals, 1, "a redirected read is not retried either");
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect target was called: {:?}",
        elsewhere.requests()
    );
}

fn assert_no_trusted_headers(fake: &FakeOpenViking) {
    for r in fake.requests() {
        for forbidden in [
            "x-openviking-account",
            "x-openviking-user",
            "x-openviking-role",
            "authorization",
        ] {
            assert!(r.header(forbidden).is_none(), "{} sent {forbidden}", r.path);
        }
    }
}

#[tokio::test]
async fn context_preserves_existing_fixed_query_behavior() {
    let s = setup(|_| {}).await;
    s.fake.set_memories(vec![preferences_hit()]);
    let recall = s.backend.recall(&recall_request(alice())).await.unwrap();
    assert_eq!(recall.text, "- [preferences] Prefers concise answers.");
    assert_eq!(recall.items.len(), 1);
    assert_eq!(
        recall.items[0].citation.as_ref().unwrap().as_str(),
        "viking://user/alice/memories/preferences/alice/style.md"
    );
    let calls = s.fake.requests();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.path, "/api/v1/search/search");
    assert_eq!(call.header("x-openviking-actor-peer"), Some("research"));
    assert_eq!(
        call.body,
        json!({"query": "profile preferences and prior decisions",
               "target_uri": ["viking://~/memories", "viking://~/peers/research/memories"],
               "limit": 4,
               "session_id": session_id("alice", "research", "thread-1")})
    );
    assert_no_trusted_headers(&s.fake);
}

/// A query-aware host (DeerFlow's `supports_query_aware_context`) passes
/// the user's input: that is what is searched; a blank one falls back to
/// the fixed query.
#[tokio::test]
async fn context_searches_the_hosts_query_when_it_passes_one() {
    let s = setup(|_| {}).await;
    s.fake.set_memories(vec![preferences_hit()]);
    for (query, sent) in [
        (
            "  which answer style do I like?  ",
            "which answer style do I like?",
        ),
        (" \t ", "profile preferences and prior decisions"),
    ] {
        let request = RecallRequest {
            caller: alice(),
            query: Some(query.into()),
        };
        let recall = s.backend.recall(&request).await.unwrap();
        assert_eq!(recall.text, "- [preferences] Prefers concise answers.");
        let calls = s.fake.requests();
        assert_eq!(calls.last().unwrap().body["query"], sent);
    }
}

#[tokio::test]
async fn context_without_thread_uses_existing_find_path() {
    let s = setup(|_| {}).await;
    s.fake.set_memories(vec![preferences_hit()]);
    let caller = Caller::new("alice").with_agent("research");
    let recall = s.backend.recall(&recall_request(caller)).await.unwrap();
    assert_eq!(recall.text, "- [preferences] Prefers concise answers.");
    let calls = s.fake.requests();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].path, "/api/v1/search/find");
    assert!(calls[0].body.get("session_id").is_none());
    assert_eq!(calls[0].body["limit"], 4);
}

#[tokio::test]
async fn manager_refuses_to_share_single_user_key_across_users() {
    let s = setup(|_| {}).await;
    let bob = Caller::new("bob")
        .with_agent("research")
        .with_thread("thread-1");
    let err = s
        .backend
        .recall(&recall_request(bob.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::RejectedIdentity(_)));
    assert!(err.to_string().contains("owner_user_id 'alice'"), "{err}");
    let err = s
        .backend
        .capture(&capture_request(&bob, vec![human("h1", "hi")]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("owner_user_id 'alice'"));
    let err = s
        .backend
        .search(&bob, &SearchQuery::new("style"))
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::RejectedIdentity(_)));
    assert!(s.fake.requests().is_empty(), "no request for another user");
    assert!(
        !s.dir.path().join("openviking").exists(),
        "no cursor touched"
    );
}

#[tokio::test]
async fn manager_records_only_unseen_suffix() {
    let s = setup(|_| {}).await;
    let first = vec![human("h1", "Remember Vim."), ai("a1", "I will remember.")];
    s.backend
        .capture(&capture_request(&alice(), first.clone()))
        .await
        .unwrap();
    let again = s
        .backend
        .capture(&capture_request(&alice(), first.clone()))
        .await
        .unwrap();
    assert_eq!((again.stored, again.already_known), (0, 2));
    let mut grown = first.clone();
    grown.push(human("h2", "Also Helix."));
    let report = s
        .backend
        .capture(&capture_request(&alice(), grown))
        .await
        .unwrap();
    assert_eq!((report.stored, report.already_known), (1, 2));
    assert_eq!(
        s.fake.batches(),
        vec![
            vec!["Remember Vim.".to_owned(), "I will remember.".to_owned()],
            vec!["Also Helix.".to_owned()]
        ]
    );
    for batch in s.fake.requests_to("batch") {
        assert_eq!(batch.header("x-openviking-actor-peer"), Some("research"));
        for m in batch.body["messages"].as_array().unwrap() {
            assert_eq!(m["peer_id"], "research");
        }
    }
    assert_eq!(s.fake.commits(&sid(&alice())), 2);
}

#[tokio::test]
async fn partial_write_progress_is_not_resubmitted() {
    let s = setup(|c| set(c, "failure_policy.write", json!("raise"))).await;
    let messages = conversation(150, "m");
    s.fake
        .plan("batch", [Reply::Normal, Reply::Error(500, "INTERNAL")]);
    let err = s
        .backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(
        "OpenViking partially recorded a conversation; confirmed progress was preserved"
    ));
    assert!(err
        .to_string()
        .contains(&format!("(session={})", sid(&alice()))));
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(cursor.submitted_prefix_count, Some(100));
    assert!(!cursor.commit_pending);

    let report = s
        .backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!(report.stored, 50);
    let batches = s.fake.batches();
    assert_eq!(batches.len(), 3);
    assert_eq!(batches[0].len(), 100);
    assert_eq!(batches[2].len(), 50);
    assert_eq!(batches[2][0], "m question 100");
    assert_eq!(s.fake.session_messages(&sid(&alice())).len(), 150);
}

#[tokio::test]
async fn pending_commit_is_retried_without_resubmitting_messages() {
    let s = setup(|_| {}).await;
    let messages = vec![human("h1", "hi"), ai("a1", "hello")];
    s.fake.plan("commit", [Reply::Error(503, "UNAVAILABLE")]);
    // log_and_drop: the failure is logged, the capture returns.
    s.backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap();
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert!(cursor.commit_pending);
    assert_eq!(cursor.submitted_prefix_count, Some(2));
    assert_eq!(
        s.fake.requests_to("commit").len(),
        1,
        "writes are not retried"
    );

    s.fake.clear_requests();
    s.backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    let routes: Vec<String> = s.fake.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        routes,
        [
            format!("/api/v1/sessions/{}", sid(&alice())),
            format!("/api/v1/sessions/{}/commit", sid(&alice()))
        ]
    );
    for r in s.fake.requests() {
        assert_eq!(r.header("x-openviking-actor-peer"), Some("research"));
    }
    assert!(s.fake.requests_to("batch").is_empty());
    assert_eq!(s.fake.batches().len(), 0);
    assert_eq!(s.fake.session_messages(&sid(&alice())).len(), 2);
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert!(!cursor.commit_pending);
}

#[tokio::test]
async fn search_maps_documents_and_filters_on_the_memory_type() {
    let s = setup(|_| {}).await;
    s.fake.set_memories(vec![preferences_hit()]);
    let caller = Caller::new("alice").with_agent("research");
    let query = SearchQuery {
        query: "  answer style ".into(),
        top_k: 3,
        kind: Some("preferences".into()),
    };
    let hits = s.backend.search(&caller, &query).await.unwrap();
    assert_eq!(hits.len(), 1);
    let uri = "viking://user/alice/memories/preferences/alice/style.md";
    assert_eq!(hits[0].id, uri);
    assert_eq!(hits[0].source.as_deref(), Some(uri));
    assert_eq!(hits[0].content, "Prefers concise answers.");
    assert_eq!(hits[0].category, "preferences");
    assert_eq!(hits[0].score, Some(0.91));
    let call = &s.fake.requests()[0];
    assert_eq!(call.path, "/api/v1/search/find");
    assert_eq!(call.body["query"], "answer style");
    assert_eq!(call.body["limit"], 3);
    assert_eq!(call.body["tags"], json!(["memory_type=preferences"]));
    assert!(call.body.get("filter").is_none());
    assert!(call.body.get("session_id").is_none());

    // top_k is clamped to 1..=100; a missing category reads "memory".
    s.fake
        .set_memories(vec![hit("viking://user/alice/memories/x.md", 2, 0.5, "X")]);
    let hits = s
        .backend
        .search(
            &caller,
            &SearchQuery {
                query: "x".into(),
                top_k: 500,
                kind: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(hits[0].category, "memory");
    assert_eq!(s.fake.requests()[1].body["limit"], 100);
}

#[tokio::test]
async fn capture_keeps_tool_history_but_drops_hidden_injected_context() {
    let s = setup(|_| {}).await;
    let call = Message::ai("")
        .with_id("a-tool")
        .with_tool_calls(vec![ToolCall::new(
            "search",
            json!({"query": "OpenViking"}),
            Some("call-1".into()),
        )]);
    let messages = vec![
        human("h1", "Find OpenViking docs."),
        call,
        Message::human("<memory>\nold\n</memory>")
            .with_id("h1__memory")
            .with_flag("hide_from_ui", true)
            .with_flag("dynamic_context_reminder", true),
        ai("a2", "Here they are."),
    ];
    let report = s
        .backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!((report.stored, report.filtered), (3, 1));
    assert_eq!(
        s.fake.batches(),
        vec![vec![
            "Find OpenViking docs.".to_owned(),
            "tool:search".to_owned(),
            "Here they are.".to_owned()
        ]]
    );
    let tool_part = &s.fake.requests_to("batch")[0].body["messages"][1]["parts"][0];
    assert_eq!(
        *tool_part,
        json!({"type": "tool", "tool_id": "call-1", "tool_name": "search",
               "tool_input": {"query": "OpenViking"}, "tool_status": "pending"})
    );
}

#[tokio::test]
async fn hidden_messages_are_captured_when_the_host_keep_hook_says_so() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), &[("OPENVIKING_API_KEY", USER_KEY)])
        .with_keep_hidden(Arc::new(memgate_core::capture::host_default_keep_hidden));
    let backend =
        OpenVikingBackend::from_backend_config(&base_config(&fake.url, dir.path()), &ctx).unwrap();
    let answer = json!({"version": 1, "kind": "human_input_response", "source": "ui",
                        "request_id": "r1", "value": "yes", "response_kind": "text"});
    let messages = vec![
        human("h1", "Shall I?"),
        Message::human("yes")
            .with_id("h2")
            .with_flag("hide_from_ui", true)
            .with_flag("human_input_response", answer),
        Message::system("<system-reminder>").with_flag("hide_from_ui", true),
    ];
    backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!(
        fake.batches(),
        vec![vec!["Shall I?".to_owned(), "yes".to_owned()]]
    );
}

#[tokio::test]
async fn compacted_history_rebases_without_replaying_known_messages() {
    let s = setup(|c| set(c, "max_seen_message_ids", json!(16))).await;
    let history = conversation(20, "h");
    s.backend
        .capture(&capture_request(&alice(), history.clone()))
        .await
        .unwrap();
    let mut compacted = history[12..].to_vec();
    compacted.push(human("h20", "new after compaction"));
    let report = s
        .backend
        .capture(&capture_request(&alice(), compacted.clone()))
        .await
        .unwrap();
    assert_eq!(report.stored, 1);
    let batches = s.fake.batches();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[1], vec!["new after compaction".to_owned()]);
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(
        cursor.submitted_prefix_count,
        Some(9),
        "the prefix is re-based"
    );
    let sigs: Vec<String> = compacted.iter().map(message_signature).collect();
    assert_eq!(
        cursor.submitted_prefix_digest.as_deref(),
        Some(sequence_digest(&sigs).as_str())
    );
}

#[tokio::test]
async fn failed_write_does_not_advance_capture_cursor() {
    let s = setup(|_| {}).await;
    let messages = vec![human("h1", "hi"), ai("a1", "hello")];
    s.fake.plan("batch", [Reply::Error(500, "INTERNAL")]);
    let report = s
        .backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap();
    assert_eq!(report.stored, 0, "log_and_drop swallowed the failure");
    // Only the intent is on disk: nothing confirmed, the batch may have
    // arrived, so the next capture asks the server first.
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(cursor.submitted_prefix_count, None);
    assert!(cursor.submitted_signatures.is_empty());
    assert_eq!(cursor.in_flight.unwrap().base_total, 0);
    assert!(s.fake.requests_to("commit").is_empty());
    s.backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!(
        s.fake.batches(),
        vec![
            vec!["hi".to_owned(), "hello".to_owned()],
            vec!["hi".to_owned(), "hello".to_owned()]
        ]
    );
}

#[tokio::test]
async fn corrupt_cursor_fails_closed_instead_of_replaying_history() {
    for (body, word) in [
        ("not-json", "unreadable"),
        ("[1, 2]", "invalid (not a JSON object)"),
    ] {
        let s = setup(|_| {}).await; // write policy log_and_drop
        let path = s.backend.config().cursor_path(&sid(&alice()));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        let err = s
            .backend
            .capture(&capture_request(&alice(), vec![human("h1", "private")]))
            .await
            .unwrap_err();
        assert!(matches!(err, MemoryError::Corruption(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "OpenViking capture cursor is {word}; refusing unsafe replay (session={})",
                sid(&alice())
            )
        );
        assert!(s.fake.requests().is_empty());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            body,
            "the file is kept"
        );
    }
}

#[tokio::test]
async fn session_locks_do_not_accumulate() {
    let s = setup(|_| {}).await;
    for thread in ["t1", "t2", "t3"] {
        let caller = Caller::new("alice").with_thread(thread);
        s.backend
            .capture(&capture_request(&caller, vec![human("h", "x")]))
            .await
            .unwrap();
    }
    assert_eq!(s.backend.live_session_locks(), 0);
}

#[tokio::test]
async fn concurrent_captures_of_one_session_send_each_message_once() {
    let s = setup(|_| {}).await;
    let messages = conversation(6, "c");
    let (ra_req, rb_req) = (
        capture_request(&alice(), messages.clone()),
        capture_request(&alice(), messages.clone()),
    );
    let a = s.backend.capture(&ra_req);
    let b = s.backend.capture(&rb_req);
    let (ra, rb) = tokio::join!(a, b);
    assert_eq!(ra.unwrap().stored + rb.unwrap().stored, 6);
    assert_eq!(s.fake.session_messages(&sid(&alice())).len(), 6);
    assert_eq!(s.backend.live_session_locks(), 0);
}

#[tokio::test]
async fn shutdown_uses_existing_manager_lifecycle_contract() {
    let s = setup(|_| {}).await;
    assert!(s.backend.shutdown(Duration::from_secs(1)).await);
    assert!(s.backend.resources_closed());
    assert!(s.backend.shutdown(Duration::from_secs(1)).await);
}

#[tokio::test]
async fn shutdown_timeout_closes_resources_after_active_write_finishes() {
    let s = setup(|_| {}).await;
    s.fake.plan("batch", [Reply::Blocked]);
    let backend = s.backend.clone();
    let write = tokio::spawn(async move {
        backend
            .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
            .await
    });
    s.fake.wait_blocked().await;
    assert!(!s.backend.shutdown(Duration::ZERO).await);
    assert!(
        !s.backend.resources_closed(),
        "the running write keeps the client"
    );
    // New work is refused while the write drains.
    let late = s.backend.recall(&recall_request(alice())).await.unwrap();
    assert!(late.is_empty());
    s.fake.release();
    let report = write.await.unwrap().unwrap();
    assert_eq!(report.stored, 1, "the blocked write completed");
    assert!(s.backend.resources_closed());
    assert!(s.backend.shutdown(Duration::from_secs(1)).await);
}

/// A capture whose host stops waiting while its batch is in flight (on
/// the host's own thread or not): the write finishes on its own, the
/// outcome is written (not left as an intent), and capturing the same
/// messages again sends and asks nothing.
async fn a_capture_abandoned_mid_write_is_settled(on_own_thread: bool) {
    let s = setup(|_| {}).await;
    s.fake.plan("batch", [Reply::Blocked]);
    let messages = vec![human("h1", "hi"), ai("a1", "hello")];
    let backend = s.backend.clone();
    let request = capture_request(&alice(), messages.clone());
    let waiting = tokio::spawn(async move {
        let capture = backend.capture(&request);
        if on_own_thread {
            on_callers_thread(capture).await
        } else {
            capture.await
        }
    });
    s.fake.wait_blocked().await;
    waiting.abort(); // the host stopped waiting
    let _ = waiting.await;
    s.fake.release();
    let path = s.backend.config().cursor_path(&sid(&alice()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while load_cursor(&path).unwrap().submitted_prefix_count != Some(2) {
        assert!(Instant::now() < deadline, "cursor was not saved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(load_cursor(&path).unwrap().in_flight.is_none());
    let asked = s.fake.requests().len();
    let report = s
        .backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!(report.stored, 0);
    assert_eq!(s.fake.batches().len(), 1, "nothing is sent twice");
    assert_eq!(
        s.fake.requests().len(),
        asked,
        "the outcome was written, so nothing is asked"
    );
}

#[tokio::test]
async fn a_capture_abandoned_by_its_caller_still_saves_its_cursor() {
    a_capture_abandoned_mid_write_is_settled(false).await;
}

#[tokio::test]
async fn an_abandoned_caller_on_its_own_thread_leaves_the_outcome_to_the_task() {
    a_capture_abandoned_mid_write_is_settled(true).await;
}

#[tokio::test]
async fn a_caller_waiting_on_its_own_thread_writes_the_outcome_before_it_returns() {
    let s = setup(|_| {}).await;
    let messages = vec![human("h1", "hi"), ai("a1", "hello")];
    let request = capture_request(&alice(), messages);
    let report = on_callers_thread(s.backend.capture(&request))
        .await
        .unwrap();
    assert_eq!(report.stored, 2);
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(cursor.submitted_prefix_count, Some(2));
    assert!(cursor.in_flight.is_none(), "the outcome, not the intent");
}

#[tokio::test]
async fn capture_cursor_contains_no_message_content() {
    let s = setup(|_| {}).await;
    let secret = "my private diagnosis is Zebra-42";
    s.backend
        .capture(&capture_request(&alice(), vec![human("h1", secret)]))
        .await
        .unwrap();
    let text = cursor_text(&s, &alice());
    assert!(!text.contains(secret) && !text.contains("Zebra"));
    assert!(!text.contains("h1\""), "not even the message id");
    let cursor: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(cursor["submitted_prefix_count"], 1);
    assert!(text.starts_with("{\n  \"schema_version\": 1,\n"));
    let leftovers: Vec<_> =
        std::fs::read_dir(s.backend.config().cursor_path("x").parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
    assert!(leftovers.is_empty());
}

// ---------------------------------------------------------------- §7.6

#[tokio::test]
async fn blank_search_needs_no_identity_and_a_closed_backend_does_nothing() {
    let s = setup(|_| {}).await;
    let bob = Caller::new("bob");
    assert!(s
        .backend
        .search(&bob, &SearchQuery::new("  \t"))
        .await
        .unwrap()
        .is_empty());
    assert!(s.fake.requests().is_empty());

    assert!(s.backend.shutdown(Duration::from_secs(1)).await);
    assert!(s
        .backend
        .recall(&recall_request(alice()))
        .await
        .unwrap()
        .is_empty());
    assert!(s
        .backend
        .search(&alice(), &SearchQuery::new("x"))
        .await
        .unwrap()
        .is_empty());
    let report = s
        .backend
        .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
        .await
        .unwrap();
    assert_eq!(report.stored, 0);
    let warm = s.backend.warm().await.unwrap();
    assert!(matches!(warm, WarmStatus::Degraded { .. }));
    assert!(s.fake.requests().is_empty());
}

#[tokio::test]
async fn absent_and_empty_users_are_default() {
    let s = setup(|c| set(c, "owner_user_id", json!("default"))).await;
    s.fake.set_memories(vec![preferences_hit()]);
    for user in [None, Some("")] {
        let caller = Caller::new(UserId::from_host(user)).with_thread("t1");
        assert!(!s
            .backend
            .recall(&recall_request(caller.clone()))
            .await
            .unwrap()
            .is_empty());
        s.backend
            .capture(&capture_request(&caller, vec![human("h1", "hi")]))
            .await
            .unwrap();
    }
    let default_session = session_id("default", "deerflow", "t1");
    assert_eq!(s.fake.session_messages(&default_session).len(), 1);
}

#[tokio::test]
async fn invalid_agent_names_always_raise() {
    let s = setup(|_| {}).await; // fail_open and log_and_drop
    for agent in ["", "  ", "__DEFAULT__"] {
        let caller = Caller::new("alice").with_agent(agent).with_thread("t");
        let err = s
            .backend
            .recall(&recall_request(caller.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, MemoryError::InvalidInput { .. }),
            "{agent:?}: {err:?}"
        );
        let err = s
            .backend
            .capture(&capture_request(&caller, vec![human("h", "x")]))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Invalid OpenViking peer scope"));
        let err = s
            .backend
            .search(&caller, &SearchQuery::new("x"))
            .await
            .unwrap_err();
        assert!(matches!(err, MemoryError::InvalidInput { .. }));
    }
    assert!(s.fake.requests().is_empty());
}

#[tokio::test]
async fn capture_requires_a_thread() {
    let s = setup(|_| {}).await;
    for caller in [Caller::new("alice"), Caller::new("alice").with_thread("")] {
        let err = s
            .backend
            .capture(&capture_request(&caller, vec![human("h", "x")]))
            .await
            .unwrap_err();
        assert!(matches!(err, MemoryError::InvalidInput { .. }));
        assert_eq!(
            err.to_string(),
            "invalid thread_id: OpenViking memory write requires thread_id"
        );
    }
    assert!(s.fake.requests().is_empty());
}

#[tokio::test]
async fn only_hidden_changes_make_no_remote_call() {
    let s = setup(|_| {}).await;
    let mut messages = vec![human("h1", "hi"), ai("a1", "hello")];
    s.backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap();
    let before = cursor_text(&s, &alice());
    s.fake.clear_requests();
    messages.push(
        Message::system("<system-reminder>new day</system-reminder>")
            .with_flag("hide_from_ui", true),
    );
    let report = s
        .backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!((report.stored, report.filtered), (0, 1));
    assert!(s.fake.requests().is_empty());
    assert_eq!(cursor_text(&s, &alice()), before);
}

#[tokio::test]
async fn fallback_after_partial_write_keeps_the_previous_prefix() {
    let s = setup(|_| {}).await;
    let first = conversation(10, "p");
    s.backend
        .capture(&capture_request(&alice(), first.clone()))
        .await
        .unwrap();
    let before = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    // An edited earlier message breaks the prefix; 150 new ones follow.
    let mut edited = first.clone();
    edited[0] = human("p0", "p question 0 (edited)");
    edited.extend(conversation(150, "n"));
    s.fake
        .plan("batch", [Reply::Normal, Reply::Error(503, "UNAVAILABLE")]);
    s.backend
        .capture(&capture_request(&alice(), edited))
        .await
        .unwrap();
    let after = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(after.submitted_prefix_count, before.submitted_prefix_count);
    assert_eq!(
        after.submitted_prefix_digest,
        before.submitted_prefix_digest
    );
    assert_eq!(after.submitted_signatures.len(), 110);
    assert_eq!(s.fake.batches()[1][0], "p question 0 (edited)");
    assert_eq!(
        s.fake.requests_to("batch").len(),
        3,
        "a failed write is not retried"
    );
}

#[tokio::test]
async fn the_window_keeps_the_last_max_seen_signatures() {
    let s = setup(|c| set(c, "max_seen_message_ids", json!(16))).await;
    let messages = conversation(20, "w");
    s.backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap();
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    let expected: Vec<String> = messages[4..].iter().map(message_signature).collect();
    assert_eq!(cursor.submitted_signatures, expected);
    assert_eq!(cursor.submitted_prefix_count, Some(20));
}

#[tokio::test]
async fn recall_formatting_dedups_defaults_the_category_and_stays_in_budget() {
    let s = setup(|c| set(c, "retrieval.max_injection_chars", json!(256))).await;
    let long = "word ".repeat(80);
    s.fake.set_memories(vec![
        hit("viking://user/alice/memories/a.md", 2, 0.9, "Lives  in\nLISBON."),
        hit("viking://user/alice/memories/b.md", 2, 0.8, "lives in lisbon."),
        json!({"uri": "viking://user/alice/memories/c.md", "level": 1, "score": 0.7, "abstract": "", "overview": null}),
        hit("viking://user/alice/memories/d.md", 2, 0.6, &long),
    ]);
    let recall = s.backend.recall(&recall_request(alice())).await.unwrap();
    let lines: Vec<&str> = recall.text.lines().collect();
    assert_eq!(lines[0], "- [memory] Lives in LISBON.");
    assert_eq!(lines.len(), 2);
    assert!(lines[1].ends_with('…'));
    assert_eq!(recall.text.chars().count(), 256);
    assert_eq!(recall.items.len(), 2);
}

#[tokio::test]
async fn the_memory_type_tag_names_the_category_when_the_server_sends_none() {
    let s = setup(|_| {}).await;
    s.fake.set_memories(vec![json!({
        "context_type": "memory", "level": 2, "score": 0.8,
        "uri": "viking://user/alice/peers/research/memories/preferences/research/coffee.md",
        "abstract": "- Prefers dark roast coffee.", "tags": ["memory_type=preferences"]
    })]);
    let recall = s.backend.recall(&recall_request(alice())).await.unwrap();
    assert_eq!(recall.text, "- [preferences] - Prefers dark roast coffee.");
    assert_eq!(recall.items[0].kind, "preferences");
}

/// `doctor` warms, then diagnoses: the identity line reads the body the
/// warm already fetched, so the server is asked once; a diagnose without a
/// fresh warm asks again.
#[tokio::test]
async fn doctor_asks_health_once_after_a_warm() {
    let s = setup(|_| {}).await;
    s.fake.set_health(json!({
        "status": "ok", "version": "0.5.2",
        "account_id": "acme", "user_id": "alice", "role": "user"
    }));
    assert_eq!(s.backend.warm().await.unwrap(), WarmStatus::Ready);
    let lines = s.backend.diagnose().await;
    let identity = lines.iter().find(|d| d.check == "identity").unwrap();
    assert!(identity.healthy, "{identity:?}");
    assert!(identity.detail.contains("alice"), "{identity:?}");
    assert_eq!(s.fake.requests_to("health").len(), 1);
    s.backend.diagnose().await;
    assert_eq!(s.fake.requests_to("health").len(), 2);
}

#[tokio::test]
async fn warm_follows_the_startup_policy() {
    // Healthy: ready, and the version picks the URI form.
    let s = setup(|_| {}).await;
    assert_eq!(s.backend.warm().await.unwrap(), WarmStatus::Ready);
    assert_eq!(s.backend.server_version().as_deref(), Some("0.5.2"));
    assert_eq!(s.backend.uri_style(), UriStyle::Home);
    let health = &s.fake.requests_to("health")[0];
    assert_eq!(health.header("x-api-key"), Some(USER_KEY));
    assert!(health.header("x-openviking-actor-peer").is_none());

    // Unhealthy under fail_fast: an error with the documented message.
    let s = setup(|c| set(c, "startup_policy", json!("fail_fast"))).await;
    s.fake.set_health(json!({"status": "degraded"}));
    let err = s.backend.warm().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "OpenViking health check returned an unhealthy response"
    );
    // Unhealthy under warn: degraded.
    let s = setup(|_| {}).await;
    s.fake.set_health(json!({"status": "degraded"}));
    assert!(matches!(
        s.backend.warm().await.unwrap(),
        WarmStatus::Degraded { .. }
    ));
    // The health call failing under warn: degraded (after one retry).
    s.fake.plan(
        "health",
        [
            Reply::Error(503, "UNAVAILABLE"),
            Reply::Error(503, "UNAVAILABLE"),
        ],
    );
    s.fake.set_health(json!({"status": "ok"}));
    assert!(matches!(
        s.backend.warm().await.unwrap(),
        WarmStatus::Degraded { .. }
    ));
    assert_eq!(s.fake.requests_to("health").len(), 3);
    // An unreachable server under fail_fast: the same message.
    let dir = tempfile::tempdir().unwrap();
    let dead = backend_with("http://127.0.0.1:9", dir.path(), |c| {
        set(c, "startup_policy", json!("fail_fast"))
    });
    let err = dead.warm().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "OpenViking health check returned an unhealthy response"
    );
}

#[tokio::test]
async fn an_older_server_gets_the_legacy_memory_uris() {
    let s = setup(|_| {}).await;
    s.fake
        .set_health(json!({"status": "ok", "version": "0.4.16"}));
    assert_eq!(s.backend.warm().await.unwrap(), WarmStatus::Ready);
    assert_eq!(s.backend.uri_style(), UriStyle::Legacy);
    s.backend.recall(&recall_request(alice())).await.unwrap();
    assert_eq!(
        s.fake.requests_to("search")[0].body["target_uri"],
        json!([
            "viking://user/memories",
            "viking://user/peers/research/memories"
        ])
    );
}

#[tokio::test]
async fn pending_commit_flush_failure_follows_the_write_policy() {
    for raise in [true, false] {
        let s = setup(|c| {
            if raise {
                set(c, "failure_policy.write", json!("raise"))
            }
        })
        .await;
        s.fake.plan("commit", [Reply::Error(500, "INTERNAL")]);
        let first = vec![human("h1", "hi")];
        let _ = s
            .backend
            .capture(&capture_request(&alice(), first.clone()))
            .await;
        let before = cursor_text(&s, &alice());
        assert!(before.contains("\"commit_pending\": true"));
        s.fake.plan("session", [Reply::Error(500, "INTERNAL")]);
        let mut grown = first.clone();
        grown.push(ai("a1", "new"));
        let result = s.backend.capture(&capture_request(&alice(), grown)).await;
        if raise {
            let err = result.unwrap_err();
            assert!(
                err.to_string().contains("pending commit retry failed"),
                "{err}"
            );
        } else {
            assert_eq!(result.unwrap().stored, 0);
        }
        assert_eq!(s.fake.batches().len(), 1, "nothing new was recorded");
        assert_eq!(cursor_text(&s, &alice()), before, "the cursor is unchanged");
    }
}

#[tokio::test]
async fn tool_mode_is_refused_before_the_config_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config("not a url", dir.path());
    config.insert("auth_mode".into(), json!("trusted"));
    let ctx = context(dir.path(), &[]).with_mode(MemoryMode::Tool);
    let err = OpenVikingBackend::from_backend_config(&config, &ctx).unwrap_err();
    assert!(matches!(err, MemoryError::Config(_)));
    assert_eq!(
        err.to_string(),
        "The OpenViking automatic-memory backend supports memory.mode='middleware' only; use OpenViking MCP for explicit model tools"
    );
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn reads_are_retried_once_on_unavailable_and_writes_never() {
    let s = setup(|_| {}).await;
    s.fake.set_memories(vec![preferences_hit()]);
    s.fake.plan("search", [Reply::Error(503, "UNAVAILABLE")]);
    let recall = s.backend.recall(&recall_request(alice())).await.unwrap();
    assert!(!recall.is_empty());
    assert_eq!(s.fake.requests_to("search").len(), 2);

    s.fake.clear_requests();
    s.fake.plan("search", [Reply::Error(500, "INTERNAL")]);
    assert!(s
        .backend
        .recall(&recall_request(alice()))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.fake.requests_to("search").len(),
        1,
        "INTERNAL is not retried"
    );

    s.fake.plan("batch", [Reply::Error(503, "UNAVAILABLE")]);
    s.backend
        .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
        .await
        .unwrap();
    assert_eq!(s.fake.requests_to("batch").len(), 1);
}

#[tokio::test]
async fn auth_and_server_errors_follow_the_read_and_write_policies() {
    for (status, code) in [
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (500, "INTERNAL"),
    ] {
        // fail_open / log_and_drop: nothing recalled, capture returns.
        let s = setup(|_| {}).await;
        s.fake.plan("search", [Reply::Error(status, code)]);
        assert!(s
            .backend
            .recall(&recall_request(alice()))
            .await
            .unwrap()
            .is_empty());
        s.fake.plan("batch", [Reply::Error(status, code)]);
        s.backend
            .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
            .await
            .unwrap();
        // raise / raise: the error names the status and code, never the key.
        let s = setup(|c| {
            set(c, "failure_policy.read", json!("raise"));
            set(c, "failure_policy.write", json!("raise"));
        })
        .await;
        s.fake.plan("search", [Reply::Error(status, code)]);
        let err = s
            .backend
            .recall(&recall_request(alice()))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&format!("HTTP {status} {code}")), "{text}");
        assert!(
            text.contains("fake"),
            "the server's message is kept: {text}"
        );
        assert_no_secret(&text);
        assert_no_secret(&format!("{err:?}"));
        s.fake.plan("batch", [Reply::Error(status, code)]);
        let err = s
            .backend
            .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
            .await
            .unwrap_err();
        assert!(err
            .to_string()
            .contains("OpenViking conversation recording failed; capture cursor was not advanced"));
        assert_no_secret(&err.to_string());
    }
}

#[tokio::test]
async fn malformed_and_oversized_read_bodies_are_errors() {
    let s = setup(|c| set(c, "failure_policy.read", json!("raise"))).await;
    s.fake.plan("search", [Reply::Raw(200, "{not json")]);
    let err = s
        .backend
        .recall(&recall_request(alice()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("malformed response"), "{err}");
    s.fake.plan(
        "search",
        [
            Reply::Raw(502, "<html>bad gateway</html>"),
            Reply::Raw(502, "<html>bad gateway</html>"),
        ],
    );
    let err = s
        .backend
        .recall(&recall_request(alice()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HTTP 502"), "{err}");
    s.fake.plan("search", [Reply::Huge(17 * 1024 * 1024)]);
    let err = s
        .backend
        .recall(&recall_request(alice()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
    // Under fail_open the same faults recall nothing.
    let s = setup(|_| {}).await;
    s.fake.plan("search", [Reply::Raw(200, "{not json")]);
    assert!(s
        .backend
        .recall(&recall_request(alice()))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_write_answered_2xx_counts_as_done_whatever_its_body() {
    let s = setup(|_| {}).await;
    s.fake.plan("batch", [Reply::Raw(200, "ok")]);
    let report = s
        .backend
        .capture(&capture_request(&alice(), vec![human("h1", "hi")]))
        .await
        .unwrap();
    assert_eq!(report.stored, 1);
    assert!(!cursor_text(&s, &alice()).contains("\"commit_pending\": true"));
}

#[tokio::test]
async fn the_deadline_covers_a_slow_dripping_body() {
    let url = slow_drip_server().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&url, dir.path(), |c| {
        set(c, "timeout_seconds", json!(0.5));
        set(c, "failure_policy.read", json!("raise"));
        set(c, "allow_insecure_http", json!(true));
    });
    let started = Instant::now();
    let err = backend.recall(&recall_request(alice())).await.unwrap_err();
    assert!(matches!(err, MemoryError::DeadlineExceeded(_)), "{err:?}");
    // Two attempts of 0.5 s each, not the ~7 minutes the body would take.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_lost_commit_answer_is_settled_by_the_next_capture() {
    let s = setup(|c| set(c, "timeout_seconds", json!(0.5))).await;
    // The server commits, but its answer never arrives in time.
    s.fake.plan("commit", [Reply::Late(Duration::from_secs(3))]);
    let messages = vec![human("h1", "hi")];
    s.backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap();
    assert!(cursor_text(&s, &alice()).contains("\"commit_pending\": true"));
    assert_eq!(s.fake.commits(&sid(&alice())), 1);
    // Next time: the session has nothing uncommitted, so nothing is committed again.
    s.fake.clear_requests();
    let report = s
        .backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    assert_eq!(report.stored, 0);
    assert_eq!(s.fake.requests().len(), 1, "only the session read");
    assert_eq!(s.fake.requests()[0].method, "GET");
    assert_eq!(s.fake.commits(&sid(&alice())), 1);
    assert!(cursor_text(&s, &alice()).contains("\"commit_pending\": false"));
}

#[tokio::test]
async fn score_threshold_reaches_the_server() {
    let s = setup(|c| set(c, "retrieval.score_threshold", json!(0.25))).await;
    s.backend.recall(&recall_request(alice())).await.unwrap();
    assert_eq!(s.fake.requests()[0].body["score_threshold"], 0.25);
}

#[tokio::test]
async fn content_modes_choose_the_text() {
    let leaf = "viking://user/alice/memories/preferences/alice/coffee.md";
    let dir_node = "viking://user/alice/memories/.overview.md";
    let hits = vec![
        hit(leaf, 2, 0.9, "- Prefers coffee."),
        hit(dir_node, 1, 0.5, "Overview of memories"),
    ];
    for (mode, expected_reads, first_line) in [
        ("overview", 0, "- [memory] - Prefers coffee."),
        ("abstract", 0, "- [memory] - Prefers coffee."),
        ("auto", 1, "- [memory] Dark roast coffee, every morning."),
        ("read", 2, "- [memory] Dark roast coffee, every morning."),
    ] {
        let s = setup(|c| set(c, "retrieval.content_mode", json!(mode))).await;
        s.fake.set_memories(hits.clone());
        s.fake
            .set_content(leaf, "Dark roast coffee,\n every morning.");
        let recall = s.backend.recall(&recall_request(alice())).await.unwrap();
        assert_eq!(recall.text.lines().next().unwrap(), first_line, "{mode}");
        let reads = s.fake.requests_to("read");
        assert_eq!(reads.len(), expected_reads, "{mode}");
        for r in &reads {
            assert_eq!(r.header("x-openviking-actor-peer"), Some("research"));
            assert!(r.query.contains("offset=0") && r.query.contains("limit=-1"));
        }
        // In read mode the directory node has no content: it falls back to its abstract.
        if mode == "read" {
            assert!(recall.text.contains("Overview of memories"));
        }
    }
}

/// Captures `messages` once so a valid cursor exists, then forgets the
/// requests that took.
async fn captured_once(s: &Setup, messages: &[Message]) -> std::path::PathBuf {
    s.backend
        .capture(&capture_request(&alice(), messages.to_vec()))
        .await
        .unwrap();
    s.fake.clear_requests();
    s.backend.config().cursor_path(&sid(&alice()))
}

/// One hand edit of a cursor file's JSON.
type CursorEdit = Box<dyn Fn(&mut Value)>;

#[tokio::test]
async fn every_inexact_cursor_fails_closed_with_zero_requests() {
    let messages = vec![human("h1", "hi"), ai("a1", "hello"), human("h2", "more")];
    let other = "f".repeat(64);
    let edits: Vec<(&str, CursorEdit)> = vec![
        ("empty object", Box::new(|c| *c = json!({}))),
        (
            "wrong prefix digest",
            Box::new(move |c| c["submitted_prefix_digest"] = json!(other.clone())),
        ),
        (
            "non-string signatures",
            Box::new(|c| c["submitted_signatures"] = json!([1, 2, 3])),
        ),
        ("schema 2", Box::new(|c| c["schema_version"] = json!(2))),
        ("unknown key", Box::new(|c| c["replay"] = json!(true))),
        (
            "count only",
            Box::new(|c| c["submitted_prefix_digest"] = Value::Null),
        ),
        (
            "string count",
            Box::new(|c| c["submitted_prefix_count"] = json!("3")),
        ),
        (
            "pending as text",
            Box::new(|c| c["commit_pending"] = json!("false")),
        ),
        (
            "intent without batches",
            Box::new(
                |c| c["memgate_in_flight"] = json!({"base_total": 0, "written_ms": 0, "start": 0, "signatures": [], "batches": []}),
            ),
        ),
    ];
    for (name, edit) in edits {
        let s = setup(|_| {}).await; // write policy log_and_drop
        let path = captured_once(&s, &messages[..2]).await;
        let mut cursor: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut cursor);
        let body = cursor.to_string();
        std::fs::write(&path, &body).unwrap();
        let err = s
            .backend
            .capture(&capture_request(&alice(), messages.clone()))
            .await
            .unwrap_err();
        assert!(matches!(err, MemoryError::Corruption(_)), "{name}: {err:?}");
        assert!(
            err.to_string().contains("refusing unsafe replay"),
            "{name}: {err}"
        );
        assert!(s.fake.requests().is_empty(), "{name}: no request at all");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            body,
            "{name}: file kept"
        );
    }
}

#[tokio::test]
async fn a_lost_answer_is_reconciled_on_the_next_capture_instead_of_resent() {
    let s = setup(|c| set(c, "timeout_seconds", json!(0.5))).await;
    let first = vec![human("h1", "hi"), ai("a1", "hello")];
    let path = captured_once(&s, &first).await;
    let mut grown = first.clone();
    grown.extend([human("h2", "next"), ai("a2", "reply")]);
    // The server stores the batch, but its answer never arrives: to the
    // client this is a process that died right after sending.
    s.fake.plan("batch", [Reply::Late(Duration::from_secs(2))]);
    let report = s
        .backend
        .capture(&capture_request(&alice(), grown.clone()))
        .await
        .unwrap();
    assert_eq!(report.stored, 0);
    let left = load_cursor(&path).unwrap();
    let intent = left.in_flight.clone().expect("the intent stays");
    assert_eq!((intent.base_total, intent.payloads()), (2, 2));
    assert_eq!(left.submitted_prefix_count, Some(2));
    tokio::time::sleep(Duration::from_secs(2)).await;

    s.fake.clear_requests();
    let report = s
        .backend
        .capture(&capture_request(&alice(), grown.clone()))
        .await
        .unwrap();
    assert_eq!((report.stored, report.already_known), (0, 4));
    let routes: Vec<String> = s
        .fake
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    let session = sid(&alice());
    assert_eq!(
        routes,
        [
            format!("GET /api/v1/sessions/{session}"),
            format!("GET /api/v1/sessions/{session}"),
            format!("GET /api/v1/sessions/{session}"),
            format!("POST /api/v1/sessions/{session}/commit"),
        ],
        "the count read until it settles, then the pending commit (its own session read), no batch"
    );
    let texts: Vec<String> = s
        .fake
        .session_messages(&session)
        .iter()
        .map(payload_text)
        .collect();
    assert_eq!(texts, ["hi", "hello", "next", "reply"], "each message once");
    let settled = load_cursor(&path).unwrap();
    assert!(settled.in_flight.is_none() && !settled.commit_pending);
    assert_eq!(settled.submitted_prefix_count, Some(4));
    assert_eq!(settled.server_total, Some(4));
}

#[tokio::test]
async fn a_count_that_fits_no_batch_boundary_fails_closed() {
    let s = setup(|_| {}).await;
    let first = vec![human("h1", "hi"), ai("a1", "hello")];
    let path = captured_once(&s, &first).await;
    let mut cursor: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let sig = message_signature(&human("h2", "next"));
    // An intent whose base is above what the server holds (the keys are
    // its base: no rollback, no confirmation slot).
    cursor["memgate_in_flight"] = json!({"base_total": 9, "written_ms": 0, "start": 2, "signatures": [sig],
        "batches": [{"inputs": 1, "payloads": 1, "prefix_digest": "a".repeat(64)}]});
    cursor.as_object_mut().unwrap().remove("memgate_confirmed");
    std::fs::write(&path, cursor.to_string()).unwrap();
    let mut grown = first.clone();
    grown.push(human("h2", "next"));
    let err = s
        .backend
        .capture(&capture_request(&alice(), grown))
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::Corruption(_)), "{err:?}");
    assert!(
        err.to_string().contains("the session holds 2 messages"),
        "{err}"
    );
    assert_eq!(s.fake.requests_to("batch").len(), 0);
}

#[tokio::test]
async fn unchanged_recapture_writes_nothing_and_a_sending_one_fsyncs_only_its_intent() {
    let s = setup(|_| {}).await;
    let mut messages = vec![human("h1", "hi"), ai("a1", "hello")];
    let path = captured_once(&s, &messages).await;
    let before = std::fs::metadata(&path).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.backend
        .capture(&capture_request(&alice(), messages.clone()))
        .await
        .unwrap();
    assert!(s.fake.requests().is_empty());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        before,
        "not rewritten"
    );
    // A capture that sends: the optimistic intent (body + directory), then
    // its confirmation in place (no fsync).
    messages.push(human("h2", "more"));
    let fsyncs = memgate_openviking::cursor::fsync_count();
    s.backend
        .capture(&capture_request(&alice(), messages))
        .await
        .unwrap();
    let spent = memgate_openviking::cursor::fsync_count() - fsyncs;
    // Tests in this binary run in parallel and may add their own.
    assert!(spent >= 2, "{spent}");
    assert!(load_cursor(&path).unwrap().in_flight.is_none());
}

// ------------------------------------------- captures read against the cursor

/// The head a surface builds from the messages the cursor holds.
fn known_head(messages: &[Message]) -> memgate_core::KnownHead {
    let mut head = memgate_core::KnownHead::default();
    for m in messages {
        head.push(message_signature(m), &m.signature_fields());
    }
    head
}

#[tokio::test]
async fn a_begun_capture_sends_only_the_messages_after_the_known_head() {
    let s = setup(|_| {}).await;
    let history = conversation(6, "h");
    s.backend
        .capture(&capture_request(&alice(), history.clone()))
        .await
        .unwrap();
    let begun = s
        .backend
        .try_begin_capture(&alice())
        .expect("a free session");
    let sigs: Vec<String> = history.iter().map(message_signature).collect();
    let digest = sequence_digest(&sigs);
    assert_eq!(begun.known_prefix(), Some((6, digest.as_str())));
    let rest = vec![
        Message::system("<memory>")
            .with_id("x__memory")
            .with_flag("hide_from_ui", true),
        human("h6", "one more"),
    ];
    let report = begun
        .capture(known_head(&history), rest.clone())
        .await
        .unwrap()
        .expect("the head is the cursor's prefix");
    assert_eq!(
        (report.stored, report.already_known, report.filtered),
        (1, 6, 1)
    );
    assert_eq!(
        s.fake.batches().last().unwrap(),
        &vec!["one more".to_owned()]
    );

    // The cursor is the one a whole capture of the same transcript leaves.
    assert_cursor_of_whole_captures(&s, history, rest).await;
}

/// `s`'s cursor equals the one whole captures of `history`, then `history`
/// and `rest`, leave on a new backend.
async fn assert_cursor_of_whole_captures(s: &Setup, history: Vec<Message>, rest: Vec<Message>) {
    let whole = setup(|_| {}).await;
    let mut all = history.clone();
    all.extend(rest);
    for transcript in [history, all] {
        whole
            .backend
            .capture(&capture_request(&alice(), transcript))
            .await
            .unwrap();
    }
    let cursor = |s: &Setup| load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(cursor(s), cursor(&whole));
}

#[tokio::test]
async fn a_head_the_cursor_does_not_hold_sends_nothing_and_asks_for_the_whole_transcript() {
    let s = setup(|_| {}).await;
    let history = conversation(4, "h");
    s.backend
        .capture(&capture_request(&alice(), history.clone()))
        .await
        .unwrap();
    let before = cursor_text(&s, &alice());
    let mut edited = history.clone();
    edited[1] = ai("h1", "an edited answer");
    let begun = s.backend.try_begin_capture(&alice()).unwrap();
    let answer = begun
        .capture(known_head(&edited), vec![human("h4", "new")])
        .await
        .unwrap();
    assert!(answer.is_none(), "the edited message must be sent whole");
    assert_eq!(s.fake.batches().len(), 1, "nothing was sent");
    assert_eq!(cursor_text(&s, &alice()), before, "the cursor is kept");

    // Read whole, the same transcript is captured as usual.
    let mut whole = edited;
    whole.push(human("h4", "new"));
    let report = s
        .backend
        .capture(&capture_request(&alice(), whole))
        .await
        .unwrap();
    assert_eq!(report.stored, 2, "the edit and the new message");
}

/// The fingerprint a surface computes over the captured messages.
fn fingerprint_of(messages: &[Message]) -> HeadFingerprint {
    let mut fp = HeadFingerprint::default();
    for m in messages {
        fp.absorb(&m.signature_fields());
    }
    fp
}

#[tokio::test]
async fn a_head_recognised_by_its_fingerprint_sends_only_the_messages_after_it() {
    let s = setup(|_| {}).await;
    let history = conversation(6, "h");
    s.backend
        .capture(&capture_request(&alice(), history.clone()))
        .await
        .unwrap();
    let begun = s.backend.try_begin_capture(&alice()).unwrap();
    let (fingerprint, running) = begun.prefix_head().expect("a completed capture records it");
    assert_eq!(fingerprint, fingerprint_of(&history).value());
    assert_eq!(running.absorbed(), 6);
    let sigs: Vec<String> = history.iter().map(message_signature).collect();
    assert_eq!(running.digest(), sequence_digest(&sigs));
    let head = KnownHead::recognised(running, fingerprint_of(&history), 0);
    let rest = vec![
        Message::system("<memory>")
            .with_id("x__memory")
            .with_flag("hide_from_ui", true),
        human("h6", "one more"),
    ];
    let report = begun
        .capture(head, rest.clone())
        .await
        .unwrap()
        .expect("the head is the cursor's prefix");
    assert_eq!(
        (report.stored, report.already_known, report.filtered),
        (1, 6, 1)
    );
    assert_eq!(
        s.fake.batches().last().unwrap(),
        &vec!["one more".to_owned()]
    );

    // The cursor, prefix head included, is the one whole captures leave.
    let mut all = history.clone();
    all.extend(rest.clone());
    assert_cursor_of_whole_captures(&s, history, rest).await;
    let captured: Vec<Message> = all
        .into_iter()
        .filter(|m| m.id.as_deref() != Some("x__memory"))
        .collect();
    let cursor = load_cursor(&s.backend.config().cursor_path(&sid(&alice()))).unwrap();
    assert_eq!(
        cursor.prefix_head.unwrap().fingerprint,
        fingerprint_of(&captured).value()
    );
}

#[tokio::test]
async fn a_recognised_head_that_is_not_the_cursors_prefix_asks_for_the_whole_transcript() {
    let s = setup(|_| {}).await;
    let history = conversation(4, "h");
    s.backend
        .capture(&capture_request(&alice(), history.clone()))
        .await
        .unwrap();
    let before = cursor_text(&s, &alice());
    // A head one message short of the prefix: its signatures would be
    // needed to match anything, and it has none.
    let sigs: Vec<String> = history[..3].iter().map(message_signature).collect();
    let mut running = SequenceHasher::default();
    running.absorb(&sigs);
    let head = KnownHead::recognised(running, fingerprint_of(&history[..3]), 0);
    let begun = s.backend.try_begin_capture(&alice()).unwrap();
    let answer = begun
        .capture(head, vec![history[3].clone(), human("h4", "new")])
        .await
        .unwrap();
    assert!(answer.is_none(), "planned without signatures");
    assert_eq!(s.fake.batches().len(), 1, "nothing was sent");
    assert_eq!(cursor_text(&s, &alice()), before, "the cursor is kept");
}

#[tokio::test]
async fn a_recognised_head_under_a_reconciled_intent_asks_for_the_whole_transcript() {
    let s = setup(|c| set(c, "timeout_seconds", json!(0.5))).await;
    let first = vec![human("h1", "hi"), ai("a1", "hello")];
    let path = captured_once(&s, &first).await;
    let mut grown = first.clone();
    grown.extend([human("h2", "next"), ai("a2", "reply")]);
    s.fake.plan("batch", [Reply::Late(Duration::from_secs(2))]);
    s.backend
        .capture(&capture_request(&alice(), grown.clone()))
        .await
        .unwrap();
    let left = load_cursor(&path).unwrap();
    assert!(
        left.in_flight.is_some() && left.prefix_head.is_some(),
        "the intent keeps the head of its prefix"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Reconciling moves the prefix past the recognised head: nothing is
    // sent, the reconciled cursor is kept, and the whole transcript is asked for.
    let begun = s.backend.try_begin_capture(&alice()).unwrap();
    let (_, running) = begun.prefix_head().unwrap();
    let head = KnownHead::recognised(running, fingerprint_of(&first), 0);
    let answer = begun.capture(head, grown[2..].to_vec()).await.unwrap();
    assert!(answer.is_none());
    assert_eq!(s.fake.requests_to("batch").len(), 1, "only the lost one");
    let reconciled = load_cursor(&path).unwrap();
    assert!(reconciled.in_flight.is_none());
    assert_eq!(reconciled.submitted_prefix_count, Some(4));
    let report = s
        .backend
        .capture(&capture_request(&alice(), grown))
        .await
        .unwrap();
    assert_eq!((report.stored, report.already_known), (0, 4));
}

#[tokio::test]
async fn a_capture_is_begun_only_on_a_free_session_of_an_allowed_caller() {
    let s = setup(|_| {}).await;
    let begun = s.backend.try_begin_capture(&alice()).expect("free");
    assert_eq!(begun.known_prefix(), None, "no cursor yet");
    assert!(s.backend.try_begin_capture(&alice()).is_none(), "busy");
    let other = alice().with_thread("thread-2");
    assert!(s.backend.try_begin_capture(&other).is_some());
    drop(begun);
    assert!(
        s.backend.try_begin_capture(&alice()).is_some(),
        "free again"
    );
    assert!(s.backend.try_begin_capture(&Caller::new("bob")).is_none());
    assert!(s
        .backend
        .try_begin_capture(&Caller::new("alice").with_agent("research"))
        .is_none());
    assert_eq!(s.backend.live_session_locks(), 0);
}
