//! The MCP surface with the official rmcp client over a real MCP transport
//! (newline-delimited JSON-RPC over an in-process duplex pipe, the same
//! transport stdio uses), on the real embedded store.

use memgate_assembly::AssembledBackend;
use memgate_core::noop::NoopBackend;
use memgate_core::{BackendContext, Caller, MemoryBackend};
use memgate_server::mcp::MemoryMcp;
use memgate_store::LocalBackend;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Map, Value};
use std::sync::Arc;

async fn connect(server: MemoryMcp) -> RunningService<RoleClient, ClientConfig> {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = server.serve(server_end).await.expect("server starts");
        let _ = running.waiting().await;
    });
    ClientConfig::default()
        .serve(client_end)
        .await
        .expect("client connects")
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

async fn call(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    a: Value,
) -> (bool, Value) {
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(a)))
        .await
        .expect("tool call answered");
    (
        result.is_error == Some(true),
        result.structured_content.unwrap_or(Value::Null),
    )
}

fn local(dir: &std::path::Path) -> Arc<AssembledBackend> {
    AssembledBackend::with_defaults(Arc::new(
        LocalBackend::from_backend_config(&Map::new(), &BackendContext::new(dir)).unwrap(),
    ))
}

#[tokio::test]
async fn tools_follow_the_backend_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    let client = connect(MemoryMcp::new(local(dir.path()), Caller::new("alice"))).await;
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["recall", "remember", "search"]);

    // noop can search (empty) but neither remember nor recall.
    let client = connect(MemoryMcp::new(
        AssembledBackend::with_defaults(Arc::new(NoopBackend)),
        Caller::new("alice"),
    ))
    .await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["search"]);
    let err = client
        .call_tool(
            CallToolRequestParams::new("remember").with_arguments(args(json!({"text": "x"}))),
        )
        .await;
    assert!(err.is_err(), "an unlisted tool cannot be called");
}

#[tokio::test]
async fn remember_then_recall_as_the_configured_principal() {
    let dir = tempfile::tempdir().unwrap();
    let backend = local(dir.path());
    let client = connect(MemoryMcp::new(backend.clone(), Caller::new("alice"))).await;

    let (is_error, saved) = call(
        &client,
        "remember",
        json!({"text": "money amounts are integer cents; use pytest for backend tests", "kind": "decision"}),
    )
    .await;
    assert!(!is_error, "{saved}");
    assert_eq!(saved["outcome"], "stored");
    assert!(saved["citation"].as_str().unwrap().starts_with("mem_"));

    let (_, again) = call(
        &client,
        "remember",
        json!({"text": "money amounts are integer cents; use pytest for backend tests", "kind": "decision"}),
    )
    .await;
    assert_eq!(again["outcome"], "already_present");
    assert_eq!(again["citation"], saved["citation"]);

    let (is_error, recalled) =
        call(&client, "recall", json!({"query": "integer cents pytest"})).await;
    assert!(!is_error);
    assert!(
        recalled["text"].as_str().unwrap().contains("integer cents"),
        "{recalled}"
    );

    let (_, found) = call(&client, "search", json!({"query": "pytest", "top_k": 3})).await;
    assert_eq!(found["count"], 1);

    // The memory belongs to the configured principal, not to anyone else.
    let bob = backend
        .search(
            &Caller::new("bob"),
            &memgate_core::SearchQuery::new("pytest"),
        )
        .await
        .unwrap();
    assert!(bob.is_empty());
}

#[tokio::test]
async fn identity_never_comes_from_tool_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let backend = local(dir.path());
    let client = connect(MemoryMcp::new(backend.clone(), Caller::new("alice"))).await;
    for (tool, a) in [
        ("remember", json!({"text": "x", "user_id": "mallory"})),
        ("remember", json!({"text": "x", "scope_id": "s"})),
        ("recall", json!({"query": "x", "user": "mallory"})),
        ("search", json!({"query": "x", "agent": "other"})),
    ] {
        let (is_error, body) = call(&client, tool, a).await;
        assert!(is_error, "{tool}: {body}");
        assert_eq!(body["error"]["code"], "invalid_input", "{body}");
    }
    for user in ["alice", "mallory"] {
        let facts = backend.list_facts(&Caller::new(user), true).await.unwrap();
        assert!(facts.is_empty(), "nothing was saved for {user}");
    }
    let (is_error, body) = call(&client, "search", json!({"query": "x", "top_k": 0})).await;
    assert!(is_error && body["error"]["message"].as_str().unwrap().contains("top_k"));
}
