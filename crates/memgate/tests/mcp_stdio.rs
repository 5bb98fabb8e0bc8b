//! `memgate mcp` driven by the official rmcp client over a real stdio
//! child process, and `/mcp` on `memgate serve` answering the MCP
//! handshake over streamable HTTP.

use memgate_testsupport::mcp::{call, tool_names, try_call, McpClient};
use rmcp::model::ClientConfig;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::json;
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

/// `memgate mcp` started under `home` (its `config.yaml` as written), after
/// the MCP handshake.
async fn session(home: &Path) -> McpClient {
    let transport = TokioChildProcess::new(command(home, &["mcp"])).unwrap();
    ClientConfig::default()
        .serve(transport)
        .await
        .expect("MCP handshake")
}

#[tokio::test]
async fn stdio_session_saves_and_recalls_as_the_configured_user() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::write(h.join("config.yaml"), "mcp:\n  user: alice\n").unwrap();
    let client = session(h).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("memgate")
    );

    assert_eq!(tool_names(&client).await, ["recall", "remember", "search"]);

    let (_, saved) = call(
        &client,
        "remember",
        json!({"text": "deploys happen on Tuesdays only", "kind": "constraint"}),
    )
    .await;
    assert_eq!(saved["outcome"], "stored", "{saved}");

    let (smuggled, _) = call(&client, "remember", json!({"text": "x", "user_id": "bob"})).await;
    assert!(smuggled, "identity never comes from tool arguments");

    let (_, recalled) = call(
        &client,
        "recall",
        json!({"query": "when do deploys happen?"}),
    )
    .await;
    let text = recalled["text"].as_str().unwrap();
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
        let client = session(h).await;
        let tools = tool_names(&client).await;
        assert_eq!(
            tools.iter().any(|t| t == "forget"),
            offered,
            "{config}: {tools:?}"
        );
        let (is_error, saved) = call(
            &client,
            "remember",
            json!({"text": "the beehive is on the north roof"}),
        )
        .await;
        assert!(!is_error, "{saved}");
        let forget = try_call(
            &client,
            "forget",
            json!({"target": "user", "confirm": true}),
        )
        .await;
        if offered {
            let (_, erased) = forget.expect("forget answers");
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

#[tokio::test]
async fn stdio_offers_handoff_tools_only_when_the_config_opts_in() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    for (config, offered) in [
        ("mcp:\n  user: alice\n", false),
        ("mcp:\n  user: alice\n  handoff_tools: true\n", true),
    ] {
        std::fs::write(h.join("config.yaml"), config).unwrap();
        let client = session(h).await;
        let tools = tool_names(&client).await;
        assert_eq!(
            tools.iter().any(|t| t == "handoff_prepare"),
            offered,
            "{config}: {tools:?}"
        );
        let prepared = try_call(
            &client,
            "handoff_prepare",
            json!({"objective": "ship refunds", "next_action": "run pytest"}),
        )
        .await;
        if offered {
            let (is_error, draft) = prepared.expect("handoff_prepare answers");
            assert!(!is_error, "{draft}");
            assert_eq!(draft["handoff"]["stage"], "draft", "{draft}");
        } else {
            let refused = prepared
                .expect_err("handoff_prepare is refused")
                .to_string();
            assert!(refused.contains("mcp.handoff_tools"), "{refused}");
        }
        client.cancel().await.unwrap();
    }
}
