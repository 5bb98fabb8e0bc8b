//! The OpenViking backend against the REAL OpenViking server (0.5.x, api_key
//! mode, on loopback) started by `testkit/up`. Each run creates its own
//! account with two USER keys through the admin API (root key), captures
//! conversations for two peers, waits for the server's extraction, and
//! recalls through memgate. `#[ignore]`d: `testkit/run-tests` runs them with
//! `--include-ignored`, where a missing server fails them.

mod common;

use common::*;
use memgate_core::{
    BackendContext, Caller, MemoryBackend, MemoryError, Message, RecallRequest, SearchQuery,
    ToolCall, WarmStatus,
};
use memgate_openviking::{OpenVikingBackend, UriStyle};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// An account of this run, with the USER keys of `alice` and `bob`.
struct Account {
    url: String,
    root_key: String,
    id: String,
    alice_key: String,
    bob_key: String,
}

async fn post(url: &str, key: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .header("X-API-Key", key)
        .json(&body)
        .send()
        .await
        .expect("OpenViking answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(url: &str, key: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(url)
        .header("X-API-Key", key)
        .send()
        .await
        .expect("OpenViking answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn create_account(server: &RealServer, tag: &str) -> Account {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let id = format!("mg{tag}{}x{nanos}", std::process::id());
    let (status, body) = post(
        &format!("{}/api/v1/admin/accounts", server.url),
        &server.root_key,
        json!({"account_id": id, "admin_user_id": "admin"}),
    )
    .await;
    assert_eq!(status, 200, "account creation: {body}");
    let mut keys = Vec::new();
    for user in ["alice", "bob"] {
        let (status, body) = post(
            &format!("{}/api/v1/admin/accounts/{id}/users", server.url),
            &server.root_key,
            json!({"user_id": user, "role": "user"}),
        )
        .await;
        assert_eq!(status, 200, "user creation: {body}");
        keys.push(body["result"]["user_key"].as_str().unwrap().to_owned());
    }
    Account {
        url: server.url.clone(),
        root_key: server.root_key.clone(),
        id,
        bob_key: keys.pop().unwrap(),
        alice_key: keys.pop().unwrap(),
    }
}

impl Account {
    /// Best-effort clean-up of this run's account.
    async fn delete(&self) {
        let _ = reqwest::Client::new()
            .delete(format!("{}/api/v1/admin/accounts/{}", self.url, self.id))
            .header("X-API-Key", &self.root_key)
            .send()
            .await;
    }
}

fn backend(url: &str, key: &str, owner: &str, dir: &Path) -> OpenVikingBackend {
    let config = json!({
        "base_url": url,
        "owner_user_id": owner,
        "startup_policy": "fail_fast",
        "timeout_seconds": 30,
        "failure_policy": {"read": "raise", "write": "raise"},
        "retrieval": {"top_k": 8}
    });
    let ctx: BackendContext = context(dir, &[("OPENVIKING_API_KEY", key)]);
    OpenVikingBackend::from_backend_config(config.as_object().unwrap(), &ctx).unwrap()
}

/// Waits until every commit task of the key's user has finished.
async fn wait_for_extraction(url: &str, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (status, body) = get(
            &format!("{url}/api/v1/tasks?task_type=session_commit&limit=100"),
            key,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let tasks = body["result"].as_array().cloned().unwrap_or_default();
        for t in &tasks {
            assert_ne!(t["status"], "failed", "extraction failed: {t}");
        }
        let busy = tasks
            .iter()
            .any(|t| matches!(t["status"].as_str(), Some("pending" | "running")));
        if !tasks.is_empty() && !busy {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "extraction did not finish: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn recall_text(backend: &OpenVikingBackend, caller: Caller) -> String {
    backend
        .recall(&RecallRequest {
            caller,
            query: None,
        })
        .await
        .expect("recall")
        .text
}

#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_capture_commit_extract_recall_with_peer_and_user_isolation() {
    let server = real_server();
    let account = create_account(&server, "iso").await;
    let dir = tempfile::tempdir().unwrap();
    let alice = backend(&server.url, &account.alice_key, "alice", dir.path());

    // Health: ready, a 0.5.x server, home-relative memory URIs.
    assert_eq!(alice.warm().await.unwrap(), WarmStatus::Ready);
    let version = alice.server_version().unwrap();
    assert!(version.starts_with("0.5."), "{version}");
    assert_eq!(alice.uri_style(), UriStyle::Home);

    // Two peers of one user, one thread each.
    let research = Caller::new("alice")
        .with_agent("research")
        .with_thread("trip");
    let default_agent = Caller::new("alice").with_thread("tools");
    let trip = vec![
        human("t1", "I prefer dark roast coffee."),
        ai("t2", "Noted."),
    ];
    let tools = vec![
        human("e1", "My favourite editor is Helix."),
        ai("e2", "Got it."),
    ];
    let r = alice
        .capture(&capture_request(&research, trip.clone()))
        .await
        .unwrap();
    assert_eq!(r.stored, 2);
    let r = alice
        .capture(&capture_request(&default_agent, tools))
        .await
        .unwrap();
    assert_eq!(r.stored, 2);

    // The same snapshot again stores nothing; a grown one only the new turns.
    let r = alice
        .capture(&capture_request(&research, trip.clone()))
        .await
        .unwrap();
    assert_eq!((r.stored, r.already_known), (0, 2));
    let mut grown = trip.clone();
    grown.push(human("t3", "I live in Lisbon."));
    grown.push(ai("t4", "Nice city."));
    let r = alice
        .capture(&capture_request(&research, grown))
        .await
        .unwrap();
    assert_eq!((r.stored, r.already_known), (2, 2));
    let sid = alice.session_id(&research).unwrap();
    let (status, session) = get(
        &format!("{}/api/v1/sessions/{sid}", server.url),
        &account.alice_key,
    )
    .await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(
        session["result"]["total_message_count"], 4,
        "nothing was sent twice: {session}"
    );
    assert_eq!(session["result"]["commit_count"], 2);
    assert_eq!(
        session["result"]["pending_tokens"], 0,
        "every capture committed"
    );

    wait_for_extraction(&server.url, &account.alice_key).await;

    // Each peer recalls its own memory, and only its own.
    let research_view = recall_text(&alice, Caller::new("alice").with_agent("research")).await;
    assert!(research_view.contains("coffee"), "{research_view}");
    assert!(!research_view.contains("Helix"), "{research_view}");
    println!("recall for alice/research:\n{research_view}");
    let default_view = recall_text(&alice, Caller::new("alice")).await;
    println!("recall for alice/default agent:\n{default_view}");
    assert!(default_view.contains("Helix"), "{default_view}");
    assert!(!default_view.contains("coffee"), "{default_view}");
    // Bound to the thread's session (search mode) the peer still finds it.
    let in_thread = recall_text(&alice, research.clone()).await;
    assert!(in_thread.contains("coffee"), "{in_thread}");
    // The server's memory_type tag becomes the category.
    assert!(
        research_view.contains("- [preferences] "),
        "{research_view}"
    );

    // Search: filtered by memory type before the cut.
    let hits = alice
        .search(
            &Caller::new("alice").with_agent("research"),
            &SearchQuery::new("coffee"),
        )
        .await
        .unwrap();
    assert!(hits
        .iter()
        .any(|h| h.content.contains("coffee") && h.category == "preferences"));
    assert!(hits
        .iter()
        .all(|h| h.id.starts_with("viking://user/alice/")));
    // The content read `read`/`auto` modes use works on the hit's URI.
    let leaf = hits
        .iter()
        .find(|h| h.id.ends_with(".md") && h.content.contains("coffee"))
        .unwrap();
    let client = memgate_openviking::client::OpenVikingClient::new(
        &server.url,
        &alice.config().api_key,
        Duration::from_secs(30),
    )
    .unwrap();
    let body = client.read_content("research", &leaf.id).await.unwrap();
    assert!(body.as_str().unwrap().contains("coffee"), "{body}");
    let events = alice
        .search(
            &Caller::new("alice").with_agent("research"),
            &SearchQuery {
                query: "coffee".into(),
                top_k: 5,
                kind: Some("events".into()),
            },
        )
        .await
        .unwrap();
    assert!(events.iter().all(|h| h.category == "events"), "{events:?}");
    let preferences = alice
        .search(
            &Caller::new("alice").with_agent("research"),
            &SearchQuery {
                query: "coffee".into(),
                top_k: 5,
                kind: Some("preferences".into()),
            },
        )
        .await
        .unwrap();
    assert!(!preferences.is_empty());
    assert!(preferences.iter().all(|h| h.category == "preferences"));

    // score_threshold reaches the server: nothing scores above 0.99.
    let strict_dir = tempfile::tempdir().unwrap();
    let strict = {
        let config = json!({
            "base_url": server.url, "owner_user_id": "alice",
            "retrieval": {"score_threshold": 0.99}, "failure_policy": {"read": "raise"}
        });
        OpenVikingBackend::from_backend_config(
            config.as_object().unwrap(),
            &context(
                strict_dir.path(),
                &[("OPENVIKING_API_KEY", &account.alice_key)],
            ),
        )
        .unwrap()
    };
    assert_eq!(
        recall_text(&strict, Caller::new("alice").with_agent("research")).await,
        ""
    );

    // Another user's key sees none of alice's memory.
    let bob_dir = tempfile::tempdir().unwrap();
    let bob = backend(&server.url, &account.bob_key, "bob", bob_dir.path());
    let bob_view = recall_text(&bob, Caller::new("bob").with_agent("research")).await;
    assert!(
        !bob_view.contains("coffee") && !bob_view.contains("Helix"),
        "{bob_view}"
    );
    let bob_hits = bob
        .search(
            &Caller::new("bob").with_agent("research"),
            &SearchQuery::new("coffee"),
        )
        .await
        .unwrap();
    assert!(
        bob_hits.iter().all(|h| !h.id.contains("/user/alice/")),
        "{bob_hits:?}"
    );
    // And alice's backend refuses bob before any request.
    let refused = alice
        .recall(&RecallRequest {
            caller: Caller::new("bob"),
            query: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(refused, MemoryError::RejectedIdentity(_)));

    assert!(alice.shutdown(Duration::from_secs(5)).await);
    account.delete().await;
}

/// What the server does with the requests memgate avoids, pinned: the
/// uid-less memory URI of the original adapter, another peer's tree, and
/// another user's tree.
#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_pins_uri_and_isolation_rules() {
    let server = real_server();
    let account = create_account(&server, "pin").await;
    let find = |key: &str, peer: &str, targets: Value| {
        let url = format!("{}/api/v1/search/find", server.url);
        let key = key.to_owned();
        let peer = peer.to_owned();
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .header("X-API-Key", key)
                .header("X-OpenViking-Actor-Peer", peer)
                .json(&json!({"query": "coffee", "target_uri": targets, "limit": 3}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    // 0.5.x refuses the uid-less form DeerFlow uses and asks for `viking://~/…`.
    let (status, body) = find(
        &account.alice_key,
        "research",
        json!([
            "viking://user/memories",
            "viking://user/peers/research/memories"
        ]),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_URI");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("viking://~/memories"));
    // The home form memgate sends is accepted.
    let (status, _) = find(
        &account.alice_key,
        "research",
        json!(["viking://~/memories", "viking://~/peers/research/memories"]),
    )
    .await;
    assert_eq!(status, 200);
    // A peer may not read another peer's tree.
    let (status, body) = find(
        &account.alice_key,
        "research",
        json!(["viking://~/peers/deerflow/memories"]),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "PERMISSION_DENIED");
    // One user's key may not read another user's tree.
    let (status, body) = find(
        &account.bob_key,
        "research",
        json!(["viking://user/alice/memories"]),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    // `/health` tells who a key is, and refuses an unknown key.
    let (status, who) = get(&format!("{}/health", server.url), &account.alice_key).await;
    assert_eq!((status, who["user_id"].as_str()), (200, Some("alice")));
    let (status, _) = get(&format!("{}/health", server.url), "not-a-key").await;
    assert_eq!(status, 401);
    account.delete().await;
}

#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_refuses_an_unknown_key_at_warm_and_recall() {
    let server = real_server();
    let dir = tempfile::tempdir().unwrap();
    let wrong = backend(&server.url, "bm90.YS5rZXk.bm9wZQ", "alice", dir.path());
    let err = wrong.warm().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "OpenViking health check returned an unhealthy response"
    );
    let err = wrong
        .recall(&RecallRequest {
            caller: Caller::new("alice"),
            query: None,
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("HTTP 401 UNAUTHENTICATED"),
        "{err}"
    );
    assert!(!err.to_string().contains("bm90.YS5rZXk.bm9wZQ"));
    let err = wrong
        .capture(&capture_request(
            &Caller::new("alice").with_thread("t"),
            vec![human("h", "x")],
        ))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert!(
        !dir.path().join("openviking").exists()
            || std::fs::read_dir(dir.path().join("openviking/sessions"))
                .map(|d| d.count())
                .unwrap_or(0)
                == 0
    );
}

/// The counters crash reconciliation relies on, as OpenViking 0.5.2 keeps
/// them: `total_message_count` counts every message the session received,
/// committed (archived) or not, and a commit leaves it alone while it clears
/// `message_count`; a session that was never written is a 404.
#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_pins_the_session_counts_reconciliation_reads() {
    let server = real_server();
    let account = create_account(&server, "cnt").await;
    let key = &account.alice_key;
    let session = format!("{}/api/v1/sessions/pin-counts", server.url);
    let counts = |body: &Value| {
        let r = &body["result"];
        (
            r["message_count"].as_u64(),
            r["total_message_count"].as_u64(),
            r["commit_count"].as_u64(),
        )
    };
    let (status, _) = get(&session, key).await;
    assert_eq!(status, 404, "never written: not found");
    let batch = json!({"messages": [{"role": "user", "content": "one"},
                                    {"role": "assistant", "content": "two"}]});
    let (status, body) = post(&format!("{session}/messages/batch"), key, batch.clone()).await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = get(&session, key).await;
    assert_eq!(counts(&body), (Some(2), Some(2), Some(0)), "{body}");
    let (status, body) = post(
        &format!("{session}/commit"),
        key,
        json!({"keep_recent_count": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = get(&session, key).await;
    assert_eq!(
        counts(&body),
        (Some(0), Some(2), Some(1)),
        "commit keeps the total: {body}"
    );
    post(&format!("{session}/messages/batch"), key, batch).await;
    let (_, body) = get(&session, key).await;
    assert_eq!(counts(&body), (Some(2), Some(4), Some(1)), "{body}");
    wait_for_extraction(&server.url, key).await;
    let (_, body) = get(&session, key).await;
    assert_eq!(
        counts(&body).1,
        Some(4),
        "extraction does not touch it: {body}"
    );

    // memgate's cursor follows the same count after a capture.
    let dir = tempfile::tempdir().unwrap();
    let alice = backend(&server.url, key, "alice", dir.path());
    let caller = Caller::new("alice")
        .with_agent("counts")
        .with_thread("t-counts");
    let messages = vec![human("h1", "count me"), common::ai("a1", "counted")];
    alice
        .capture(&capture_request(&caller, messages))
        .await
        .unwrap();
    let sid = memgate_openviking::scope::session_id("alice", "counts", "t-counts");
    let cursor =
        memgate_openviking::cursor::load_cursor(&alice.config().cursor_path(&sid)).unwrap();
    let (_, body) = get(&format!("{}/api/v1/sessions/{sid}", server.url), key).await;
    assert_eq!(cursor.server_total, counts(&body).1, "{body}");
    assert!(cursor.in_flight.is_none());
    alice.shutdown(Duration::from_secs(5)).await;
    account.delete().await;
}

/// Tool parts as the real server keeps them: a capture whose tool-call
/// arguments and results hold what the body writer must escape (quotes,
/// backslashes, control characters, text beyond ASCII; nested objects,
/// numbers, booleans, null) is accepted, and the commit's archive holds the
/// same text, arguments and output memgate was given.
#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_keeps_tool_parts_with_escaped_arguments_as_sent() {
    let server = real_server();
    let account = create_account(&server, "tool").await;
    let key = &account.alice_key;
    let dir = tempfile::tempdir().unwrap();
    let alice = backend(&server.url, key, "alice", dir.path());
    let tricky =
        "say \"hi\" \\ C:\\path\n\ttab \u{1} caf\u{e9} \u{2713} \u{4f60}\u{597d} \u{1f600}";
    let args = json!({"query": tricky, "limit": 5, "ratio": 0.25, "exact": true, "near": null,
                      "filters": {"tags": ["a", "b\"c"], "nested": {"deep": [1, 2.5, false]}}});
    let messages = vec![
        human("h1", &format!("look up {tricky}")),
        Message::ai("")
            .with_id("a1")
            .with_tool_calls(vec![ToolCall::new(
                "search",
                args.clone(),
                Some("call_1".into()),
            )]),
        Message::tool(format!("found {tricky}"), "call_1")
            .with_id("t1")
            .with_name("search"),
        common::ai("a2", &format!("answer {tricky}")),
    ];
    let caller = Caller::new("alice")
        .with_agent("tools")
        .with_thread("t-tools");
    alice
        .capture(&capture_request(&caller, messages))
        .await
        .unwrap();

    let sid = memgate_openviking::scope::session_id("alice", "tools", "t-tools");
    let (status, session) = get(&format!("{}/api/v1/sessions/{sid}", server.url), key).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["result"]["total_message_count"], 4, "{session}");
    let uri = session["result"]["uri"]
        .as_str()
        .expect("the session's uri");
    let archive = format!("{uri}/history/archive_001/messages.jsonl");
    let read_url = reqwest::Url::parse_with_params(
        &format!("{}/api/v1/content/read", server.url),
        [("uri", archive.as_str()), ("offset", "0"), ("limit", "-1")],
    )
    .unwrap();
    let (status, read) = get(read_url.as_str(), key).await;
    assert_eq!(status, 200, "{read}");
    let kept: Vec<Value> = read["result"]
        .as_str()
        .expect("the archive's text")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("one message per line"))
        .collect();
    assert_eq!(kept.len(), 4, "{kept:?}");
    let parts = |i: usize| kept[i]["parts"].as_array().cloned().unwrap_or_default();
    let part_text = |i: usize| parts(i)[0]["text"].as_str().map(str::to_owned);
    assert_eq!(
        part_text(0).as_deref(),
        Some(format!("look up {tricky}").as_str())
    );
    let call = &parts(1)[0];
    assert_eq!(call["tool_input"], args, "{call}");
    assert_eq!(call["tool_name"], "search");
    let result = &parts(2)[0];
    assert_eq!(
        result["tool_output"],
        json!(format!("found {tricky}")),
        "{result}"
    );
    assert_eq!(
        part_text(3).as_deref(),
        Some(format!("answer {tricky}").as_str())
    );
    alice.shutdown(Duration::from_secs(5)).await;
    account.delete().await;
}

/// `doctor`'s identity line: the real 0.5 `/health` names the user a valid
/// USER key acts as; a key of another user than `owner_user_id` is a
/// problem, and an unknown key names no user.
#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_health_names_the_keys_user_for_doctor() {
    let server = real_server();
    let account = create_account(&server, "who").await;
    let dir = tempfile::tempdir().unwrap();
    let own = backend(&server.url, &account.alice_key, "alice", dir.path());
    let lines = own.diagnose().await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].detail.starts_with("outbox off"), "{lines:?}");
    assert!(lines[0].healthy, "{lines:?}");
    assert_eq!(
        lines[0].detail,
        format!(
            "the key acts as user alice in account {} (role user)",
            account.id
        )
    );
    let other = backend(&server.url, &account.bob_key, "alice", dir.path());
    let lines = other.diagnose().await;
    assert!(!lines[0].healthy, "{lines:?}");
    assert!(lines[0].detail.contains("acts as user bob"), "{lines:?}");
    assert!(!lines[0].detail.contains(&account.bob_key));
    let unknown = backend(&server.url, "bm90.YS5rZXk.bm9wZQ", "alice", dir.path());
    assert!(!unknown.diagnose().await[0].healthy);
    account.delete().await;
}

/// The sessions a key's user holds on the server.
async fn sessions_of(url: &str, key: &str) -> Vec<Value> {
    let (status, body) = get(&format!("{url}/api/v1/sessions"), key).await;
    assert_eq!(status, 200, "{body}");
    body["result"].as_array().cloned().unwrap_or_default()
}

/// With owner `alice` and a valid USER key of `bob`, the start-up check
/// (the `/health` call `doctor` uses) finds the key's user: `fail_fast`
/// refuses to start, `warn` runs degraded, and under either every
/// operation is refused with the reason; nothing lands in bob's account
/// (listed with bob's own key, which does show a write memgate makes for
/// bob himself).
#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_another_users_key_is_refused_at_startup_under_each_policy() {
    let server = real_server();
    let account = create_account(&server, "own").await;
    for policy in ["fail_fast", "warn"] {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({
            "base_url": server.url,
            "owner_user_id": "alice",
            "startup_policy": policy,
            "timeout_seconds": 30,
            "failure_policy": {"read": "fail_open", "write": "log_and_drop"},
        });
        let ctx = context(dir.path(), &[("OPENVIKING_API_KEY", &account.bob_key)]);
        let foreign =
            OpenVikingBackend::from_backend_config(config.as_object().unwrap(), &ctx).unwrap();
        let reason = match foreign.warm().await {
            Err(MemoryError::RejectedIdentity(reason)) if policy == "fail_fast" => reason,
            Ok(WarmStatus::Degraded { reason }) if policy == "warn" => reason,
            other => panic!("{policy}: {other:?}"),
        };
        assert!(
            reason.contains("acts as user 'bob'") && reason.contains("owner_user_id is 'alice'"),
            "{policy}: {reason}"
        );
        assert!(!reason.contains(&account.bob_key));
        let alice = Caller::new("alice").with_thread("t1");
        let refusals = [
            foreign
                .capture(&capture_request(
                    &alice,
                    vec![human("h1", "I live in Porto.")],
                ))
                .await
                .map(|_| ()),
            foreign
                .recall(&RecallRequest {
                    caller: alice.clone(),
                    query: Some("where do I live".into()),
                })
                .await
                .map(|_| ()),
            foreign
                .search(
                    &alice,
                    &SearchQuery {
                        query: "Porto".into(),
                        top_k: 5,
                        kind: None,
                    },
                )
                .await
                .map(|_| ()),
        ];
        for refusal in refusals {
            match refusal {
                Err(MemoryError::RejectedIdentity(why)) => assert_eq!(why, reason),
                other => panic!("{policy}: {other:?}"),
            }
        }
        assert_eq!(
            sessions_of(&server.url, &account.bob_key).await,
            Vec::<Value>::new()
        );
    }
    // The listing sees a write into bob's account when bob is the owner.
    let dir = tempfile::tempdir().unwrap();
    let own = backend(&server.url, &account.bob_key, "bob", dir.path());
    own.warm().await.unwrap();
    own.capture(&capture_request(
        &Caller::new("bob").with_thread("t1"),
        vec![human("h1", "I live in Braga.")],
    ))
    .await
    .unwrap();
    assert_eq!(sessions_of(&server.url, &account.bob_key).await.len(), 1);
    account.delete().await;
}
