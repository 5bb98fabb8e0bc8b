//! `memgate mcp` driven by the official rmcp client over a real stdio
//! child process, and `/mcp` on `memgate serve` answering the MCP
//! handshake over streamable HTTP.

use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_memgate");

fn command(home: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_USER");
    cmd
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn stdio_session_saves_and_recalls_as_the_configured_user() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::write(h.join("config.yaml"), "mcp:\n  user: alice\n").unwrap();
    let transport = TokioChildProcess::new(command(h, &["mcp"])).unwrap();
    let client = ClientConfig::default()
        .serve(transport)
        .await
        .expect("MCP handshake");
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("memgate")
    );

    let mut tools: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    tools.sort();
    assert_eq!(tools, ["recall", "remember", "search"]);

    let saved = client
        .call_tool(
            CallToolRequestParams::new("remember").with_arguments(object(json!({
                "text": "deploys happen on Tuesdays only", "kind": "constraint"
            }))),
        )
        .await
        .unwrap();
    let saved = saved.structured_content.unwrap();
    assert_eq!(saved["outcome"], "stored", "{saved}");

    let smuggled = client
        .call_tool(
            CallToolRequestParams::new("remember").with_arguments(object(json!({
                "text": "x", "user_id": "bob"
            }))),
        )
        .await
        .unwrap();
    assert_eq!(smuggled.is_error, Some(true));

    let recalled = client
        .call_tool(
            CallToolRequestParams::new("recall").with_arguments(object(json!({
                "query": "when do deploys happen?"
            }))),
        )
        .await
        .unwrap();
    let text = recalled.structured_content.unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("Tuesdays"), "{text}");
    client.cancel().await.unwrap();

    // The memory is alice's (the configured principal), visible to the CLI as alice only.
    let alice = command(h, &["--user", "alice", "facts", "list", "--json"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&alice.stdout).contains("Tuesdays"));
    let default_user = command(h, &["facts", "list", "--json"])
        .output()
        .await
        .unwrap();
    assert!(!String::from_utf8_lossy(&default_user.stdout).contains("Tuesdays"));
}

#[tokio::test]
async fn stdio_offers_forget_only_when_the_config_opts_in() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    for (config, offered) in [
        ("mcp:\n  user: alice\n", false),
        ("mcp:\n  user: alice\n  forget_tool: false\n", false),
        ("mcp:\n  user: alice\n  forget_tool: true\n", true),
    ] {
        std::fs::write(h.join("config.yaml"), config).unwrap();
        let transport = TokioChildProcess::new(command(h, &["mcp"])).unwrap();
        let client = ClientConfig::default()
            .serve(transport)
            .await
            .expect("MCP handshake");
        let tools: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(
            tools.iter().any(|t| t == "forget"),
            offered,
            "{config}: {tools:?}"
        );
        let saved = client
            .call_tool(
                CallToolRequestParams::new("remember").with_arguments(object(json!({
                    "text": "the beehive is on the north roof"
                }))),
            )
            .await
            .unwrap();
        assert_ne!(saved.is_error, Some(true), "{saved:?}");
        let forget = client
            .call_tool(
                CallToolRequestParams::new("forget")
                    .with_arguments(object(json!({"target": "user", "confirm": true}))),
            )
            .await;
        if offered {
            let erased = forget.expect("forget answers").structured_content.unwrap();
            assert_eq!(erased["target"], "user", "{erased}");
            assert_eq!(erased["erased"]["facts"], 1, "{erased}");
        } else {
            let refused = forget.expect_err("forget is refused").to_string();
            assert!(refused.contains("mcp.forget_tool"), "{refused}");
        }
        client.cancel().await.unwrap();
    }
    // Only the opted-in session erased: nothing of alice is left.
    let alice = command(h, &["--user", "alice", "facts", "list", "--json", "--all"])
        .output()
        .await
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&alice.stdout).contains("beehive"),
        "{}",
        String::from_utf8_lossy(&alice.stdout)
    );
}
