//! One rule per field (`memgate_core::fields`), the same over HTTP and MCP
//! on the real embedded store: NUL and other control characters in a
//! memory's `text` or `kind` are refused, a search's `kind` filter follows
//! the stored kind's 128-character rule, each error names the field and
//! the rule, and what was stored before is intact. (The MCP remember tool
//! is the model's tool: its kind is one of the conventional kinds.)

use memgate_assembly::AssembledBackend;
use memgate_core::{BackendContext, Caller, MemoryBackend, SearchQuery};
use memgate_server::mcp::MemoryMcp;
use memgate_store::LocalBackend;
use memgate_testsupport::mcp::{call, McpClient};
use rmcp::model::ClientConfig;
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};
use std::sync::Arc;

mod api_support;
use api_support::{post, spawn};

const KEPT: &str = "the harbour office opens at nine";

/// The real embedded store; the HTTP API and the MCP server each put
/// memgate's defaults around it, as the service does.
fn local(dir: &std::path::Path) -> Arc<LocalBackend> {
    Arc::new(LocalBackend::from_backend_config(&Map::new(), &BackendContext::new(dir)).unwrap())
}

async fn connect(server: MemoryMcp) -> McpClient {
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

/// The refused inputs: (arguments of remember or search, field, rule words).
fn refusals() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    vec![
        (
            "remember",
            json!({"text": "fa\u{0}ct about the harbour", "kind": "fact"}),
            "text",
            "must not contain control characters other than tab and line breaks (found U+0000)",
        ),
        (
            "remember",
            json!({"text": "a bell \u{7} rings", "kind": "fact"}),
            "text",
            "(found U+0007)",
        ),
        (
            "remember",
            json!({"text": "a plain fact", "kind": "fa\u{0}ct"}),
            "kind",
            "must not contain control characters (found U+0000)",
        ),
        (
            "remember",
            json!({"text": "a plain fact", "kind": "k".repeat(129)}),
            "kind",
            "must be at most 128 characters (got 129)",
        ),
        (
            "search",
            json!({"query": "harbour", "kind": "k".repeat(1 << 20)}),
            "kind",
            "must be at most 128 characters (got 1048576)",
        ),
        (
            "search",
            json!({"query": "harbour", "kind": "fa\u{0}ct"}),
            "kind",
            "must not contain control characters (found U+0000)",
        ),
    ]
}

/// What alice holds, as search sees it.
async fn held(backend: &dyn MemoryBackend) -> Vec<String> {
    backend
        .search(&Caller::new("alice"), &SearchQuery::new("harbour"))
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.content)
        .collect()
}

#[tokio::test]
async fn http_refuses_each_field_rule_naming_the_field_and_keeps_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let backend = local(dir.path());
    let base = spawn(backend.clone()).await;
    let caller = json!({"user": "alice"});
    let (status, _) = post(
        &base,
        "/v1/remember",
        json!({"caller": caller, "text": KEPT}),
    )
    .await;
    assert_eq!(status, 200);
    let before = held(backend.as_ref()).await;
    assert_eq!(before, [KEPT]);
    for (operation, mut args, field, rule) in refusals() {
        args["caller"] = caller.clone();
        let (status, body) = post(&base, &format!("/v1/{operation}"), args).await;
        assert_eq!(status, 400, "{operation} {field}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("invalid {field}: ")) && message.contains(rule),
            "{operation}: {body}"
        );
    }
    assert_eq!(held(backend.as_ref()).await, before, "stored data intact");
}

#[tokio::test]
async fn mcp_refuses_each_field_rule_naming_the_field_and_keeps_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let backend = local(dir.path());
    let client = connect(MemoryMcp::new(
        AssembledBackend::with_defaults(backend.clone()),
        Caller::new("alice"),
    ))
    .await;
    let (is_error, _) = call(&client, "remember", json!({"text": KEPT})).await;
    assert!(!is_error);
    let before = held(backend.as_ref()).await;
    assert_eq!(before, [KEPT]);
    for (tool, args, field, rule) in refusals() {
        // The model's remember tool offers the conventional kinds only
        // (`memgate_core::tool`), a stricter rule that names the field too.
        let rule = if (tool, field) == ("remember", "kind") {
            "must be one of fact, preference"
        } else {
            rule
        };
        let (is_error, content) = call(&client, tool, args).await;
        assert!(is_error, "{tool} {field}: {content}");
        let text = content.to_string();
        assert!(
            text.contains(&format!("invalid {field}: ")) && text.contains(rule),
            "{tool}: {text}"
        );
    }
    assert_eq!(held(backend.as_ref()).await, before, "stored data intact");
}

/// The OpenAPI document states the same limits the rules enforce.
#[tokio::test]
async fn the_openapi_document_states_the_field_rules() {
    let dir = tempfile::tempdir().unwrap();
    let base = spawn(local(dir.path())).await;
    let doc: Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let schemas = &doc["components"]["schemas"];
    let remember = &schemas["RememberBody"]["properties"];
    assert_eq!(remember["kind"]["maxLength"], 128, "{remember}");
    let kind_pattern = remember["kind"]["pattern"].as_str().unwrap();
    let text_pattern = remember["text"]["pattern"].as_str().unwrap();
    let search_kind = &schemas["SearchBody"]["properties"]["kind"];
    assert_eq!(search_kind["maxLength"], 128, "{search_kind}");
    assert_eq!(search_kind["pattern"].as_str(), Some(kind_pattern));
    // The patterns say what the rules say about control characters.
    for (pattern, allowed, refused) in [
        (kind_pattern, "preference", vec!["fa\u{0}ct", "a\tb"]),
        (text_pattern, "a\tb\nc\r\n", vec!["fa\u{0}ct", "bell\u{7}"]),
    ] {
        let re = regex::Regex::new(pattern).unwrap();
        assert!(re.is_match(allowed), "{pattern}");
        for value in refused {
            assert!(!re.is_match(value), "{pattern} {value:?}");
        }
    }
}
