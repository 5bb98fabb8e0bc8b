//! The MCP client side of memgate's MCP tests, over any transport the
//! official rmcp client speaks (an in-process pipe, a stdio child process):
//! list the tools, call one, read its structured answer.

use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{RunningService, ServiceError};
use rmcp::RoleClient;
use serde_json::{Map, Value};

/// A connected rmcp client session.
pub type McpClient = RunningService<RoleClient, ClientConfig>;

/// Tool arguments from a JSON object literal; anything else is a test bug.
pub fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("tool arguments must be a JSON object, got {other}"),
    }
}

/// The names of the tools the server lists, sorted.
pub async fn tool_names(client: &McpClient) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list answered")
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    names.sort();
    names
}

/// Calls `tool`, keeping a protocol-level refusal (an unlisted tool) as `Err`.
pub async fn try_call(
    client: &McpClient,
    tool: &str,
    args: Value,
) -> Result<(bool, Value), ServiceError> {
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments(args)))
        .await?;
    Ok((
        result.is_error == Some(true),
        result.structured_content.unwrap_or(Value::Null),
    ))
}

/// Calls `tool` and answers (is_error, structured content).
pub async fn call(client: &McpClient, tool: &str, args: Value) -> (bool, Value) {
    try_call(client, tool, args)
        .await
        .unwrap_or_else(|e| panic!("{tool} call answered: {e}"))
}
