//! The HTTP surface over a real listener: error shapes, limits, auth,
//! gates, metrics and the OpenAPI document. Backends here are the `noop`
//! backend and a named in-process fake that counts calls.

use async_trait::async_trait;
use memgate_assembly::{AssembledBackend, Deadlines, Gates};
use memgate_core::noop::NoopBackend;
use memgate_core::{
    Capabilities, CaptureReport, CaptureRequest, MemoryBackend, Recall, RecallRequest, Result,
};
use memgate_server::auth::BearerToken;
use memgate_server::openapi::OPERATIONS;
use memgate_server::{router, ServerState};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Fake backend: counts calls, recalls a fixed line.
#[derive(Default)]
struct CountingFake {
    calls: AtomicUsize,
}

#[async_trait]
impl MemoryBackend for CountingFake {
    fn name(&self) -> &str {
        "counting-fake"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            recall: true,
            capture: true,
            ..Default::default()
        }
    }
    async fn recall(&self, _r: &RecallRequest) -> Result<Recall> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(Recall {
            text: "- [fact] recalled".into(),
            items: vec![],
        })
    }
    async fn capture(&self, r: &CaptureRequest) -> Result<CaptureReport> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(CaptureReport {
            stored: r.messages.len(),
            ..Default::default()
        })
    }
}

async fn spawn(state: ServerState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    format!("http://{addr}")
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn health_names_the_backend_and_its_capabilities() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        NoopBackend,
    ))))
    .await;
    let h: Value = reqwest::get(format!("{base}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["backend"], "noop");
    assert_eq!(h["capabilities"]["search"], true);
    assert_eq!(h["capabilities"]["remember"], false);
}

#[tokio::test]
async fn bad_bodies_get_a_clear_error_in_the_api_shape() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        NoopBackend,
    ))))
    .await;
    let (status, body) = post(
        &base,
        "/v1/remember",
        &json!({"caller": {"user": "u"}, "text": "x", "scope": "s"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_input");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("scope"),
        "{body}"
    );

    let (status, body) = post(
        &base,
        "/v1/remember",
        &json!({"caller": {"user": "u"}, "kind": "fact"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("text"),
        "{body}"
    );

    let (status, body) = post(
        &base,
        "/v1/remember",
        &json!({"caller": {"user": "u"}, "text": "   "}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid text"),
        "{body}"
    );

    let r = reqwest::Client::new()
        .post(format!("{base}/v1/recall"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_input");

    let (status, body) = post(
        &base,
        "/v1/capture",
        &json!({"caller": {"user": "u"}, "messages": []}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("thread"),
        "{body}"
    );

    let (status, body) = post(
        &base,
        "/v1/capture",
        &json!({"caller": {"user": "u", "thread": "t"}, "messages": [{"content": "no role"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("role"),
        "{body}"
    );

    let (status, body) = post(
        &base,
        "/v1/search",
        &json!({"caller": {"user": "u"}, "query": "q", "top_k": 0}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "top_k", "{body}");
}

/// Capture is strict about message fields (the shared message type is
/// lenient for in-process hosts): a misspelt field is refused by name
/// before the backend is called; host data in `additional_kwargs` and the
/// documented aliases (`role`, `tool_id`, …) are accepted.
#[tokio::test]
async fn capture_refuses_unknown_message_fields_by_name() {
    let fake = Arc::new(CountingFake::default());
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(
        fake.clone(),
    )))
    .await;
    let caller = json!({"user": "u", "thread": "t"});
    let (status, body) = post(
        &base,
        "/v1/capture",
        &json!({"caller": caller, "messages": [
            {"type": "human", "content": "hi"},
            {"type": "ai", "contnet": "typo"},
        ]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_input");
    assert_eq!(body["error"]["field"], "messages[1].contnet", "{body}");
    assert!(
        body["error"]["rule"]
            .as_str()
            .unwrap()
            .contains("additional_kwargs"),
        "{body}"
    );
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);

    let (status, body) = post(
        &base,
        "/v1/capture",
        &json!({"caller": caller, "messages": [
            {"role": "human", "content": "hi", "additional_kwargs": {"host": {"x": 1}}},
            {"type": "tool", "content": "ok", "tool_id": "c1", "tool_name": "f", "tool_status": "success"},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["stored"], 2);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
}

/// Every operation requires the same strict caller; a body that breaks a
/// rule is refused with the field named, before the backend is called.
#[tokio::test]
async fn the_caller_is_strict_and_the_same_on_every_route() {
    let fake = Arc::new(CountingFake::default());
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(
        fake.clone(),
    )))
    .await;
    let nul = format!("a{}b", '\u{0}');
    let long = "t".repeat(513);
    let callers = [
        (None, "missing field `caller`"),
        (Some(json!([])), "expected an object"),
        (Some(json!({"user": null})), "invalid type: null"),
        (Some(json!({})), "missing field `user`"),
        (Some(json!({"user": ""})), "caller.user must not be empty"),
        (Some(json!({"user": nul})), "control characters"),
        (
            Some(json!({"user": "u", "thread": long})),
            "at most 512 bytes",
        ),
    ];
    for (route, rest) in [
        ("/v1/remember", json!({"text": "x"})),
        ("/v1/recall", json!({})),
        ("/v1/search", json!({"query": "x"})),
        ("/v1/facts/list", json!({})),
    ] {
        for (caller, expect) in &callers {
            let mut body = rest.clone();
            if let Some(caller) = caller {
                body["caller"] = caller.clone();
            }
            let (status, answer) = post(&base, route, &body).await;
            assert_eq!(status, 400, "{route} {body}: {answer}");
            assert_eq!(answer["error"]["code"], "invalid_input");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(expect), "{route} {body}: {message}");
        }
    }
    assert_eq!(
        fake.calls.load(Ordering::SeqCst),
        0,
        "no bad body reached the backend"
    );

    let r = reqwest::Client::new()
        .post(format!("{base}/v1/recall"))
        .header("content-type", "text/plain")
        .body(r#"{"caller":{"user":"u"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unsupported_media_type");
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let mut state = ServerState::new(AssembledBackend::with_defaults(Arc::new(NoopBackend)));
    state.max_body_bytes = 2048;
    let base = spawn(state).await;
    let (status, body) = post(
        &base,
        "/v1/remember",
        &json!({"caller": {"user": "u"}, "text": "a".repeat(4096)}),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "body_too_large");
}

#[tokio::test]
async fn unsupported_operations_are_501() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        NoopBackend,
    ))))
    .await;
    let (status, body) = post(
        &base,
        "/v1/remember",
        &json!({"caller": {"user": "u"}, "text": "keep this"}),
    )
    .await;
    assert_eq!(status, 501);
    assert_eq!(body["error"]["code"], "unsupported");
    assert_eq!(body["error"]["message"], "remember not supported by noop");
    let (status, _) = post(
        &base,
        "/v1/facts/get",
        &json!({"caller": {"user": "u"}, "id": "x"}),
    )
    .await;
    assert_eq!(status, 501);
}

#[tokio::test]
async fn bearer_token_guards_everything_but_health() {
    let mut state = ServerState::new(AssembledBackend::with_defaults(Arc::new(NoopBackend)));
    state.token = BearerToken::from_setting(Some("tok-123".into()));
    let base = spawn(state).await;
    let client = reqwest::Client::new();
    let open = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(open.status().as_u16(), 200);
    for token in [None, Some("wrong")] {
        let mut req = client
            .post(format!("{base}/v1/recall"))
            .json(&json!({"caller": {"user": "u"}}));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
        assert!(!body.to_string().contains("tok-123"));
    }
    let ok = client
        .post(format!("{base}/v1/recall"))
        .bearer_auth("tok-123")
        .json(&json!({"caller": {"user": "u"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let metrics = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(metrics.status().as_u16(), 401);
}

#[tokio::test]
async fn disabled_memory_never_reaches_the_backend() {
    let fake = Arc::new(CountingFake::default());
    let gated = |fake: Arc<CountingFake>, gates| {
        ServerState::new(Arc::new(AssembledBackend::new(
            fake,
            gates,
            Deadlines::default(),
        )))
    };
    let state = gated(
        fake.clone(),
        Gates {
            enabled: true,
            injection_enabled: false,
        },
    );
    let base = spawn(state).await;
    let (status, body) = post(&base, "/v1/recall", &json!({"caller": {"user": "u"}})).await;
    assert_eq!((status, body["text"].as_str()), (200, Some("")));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    let capture = json!({"caller": {"user": "u", "thread": "t"},
                         "messages": [{"type": "human", "content": "hi"}]});
    let (status, body) = post(&base, "/v1/capture", &capture).await;
    assert_eq!((status, body["stored"].as_u64()), (200, Some(1)));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);

    let fake = Arc::new(CountingFake::default());
    let state = gated(
        fake.clone(),
        Gates {
            enabled: false,
            injection_enabled: true,
        },
    );
    let base = spawn(state).await;
    let (_, body) = post(&base, "/v1/capture", &capture).await;
    assert_eq!(body["stored"], 0);
    let (_, body) = post(&base, "/v1/recall", &json!({"caller": {"user": "u"}})).await;
    assert_eq!(body["text"], "");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn metrics_count_operations_without_user_text() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        CountingFake::default(),
    ))))
    .await;
    let secret_text = "my-private-diary-entry";
    post(
        &base,
        "/v1/capture",
        &json!({"caller": {"user": "alice-private", "thread": "t"},
                "messages": [{"type": "human", "content": secret_text}]}),
    )
    .await;
    post(
        &base,
        "/v1/recall",
        &json!({"caller": {"user": "alice-private"}, "query": secret_text}),
    )
    .await;
    post(
        &base,
        "/v1/search",
        &json!({"caller": {"user": "u"}, "query": secret_text}),
    )
    .await;
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(r#"memgate_requests_total{operation="capture",outcome="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"memgate_requests_total{operation="recall",outcome="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"memgate_requests_total{operation="search",outcome="unsupported"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"memgate_request_duration_seconds_count{operation="recall"} 1"#));
    assert!(!text.contains(secret_text) && !text.contains("alice-private"));
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        NoopBackend,
    ))))
    .await;
    let doc: Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let client = reqwest::Client::new();
    for op in OPERATIONS {
        assert!(
            doc["paths"][op.path][op.method].is_object(),
            "{} missing",
            op.path
        );
        let r = match op.method {
            "get" => client
                .get(format!("{base}{}", op.path))
                .send()
                .await
                .unwrap(),
            _ => client
                .post(format!("{base}{}", op.path))
                .json(&json!({}))
                .send()
                .await
                .unwrap(),
        };
        assert!(
            ![404, 405].contains(&r.status().as_u16()),
            "{} {} is documented but not routed",
            op.method,
            op.path
        );
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "RecallRequest",
        "Recall",
        "CaptureRequest",
        "Message",
        "RememberOutcome",
        "ErrorBody",
    ] {
        assert!(
            schemas.contains_key(name),
            "schema {name} missing: {:?}",
            schemas.keys()
        );
    }
    // Every $ref resolves to a component.
    let text = doc.to_string();
    for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = piece.split('"').next().unwrap();
        assert!(schemas.contains_key(name), "dangling $ref {name}");
    }
}
