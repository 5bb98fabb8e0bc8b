//! Plugging memgate-host into a Rust agent loop.
//!
//! ```text
//! cargo run -p memgate-host --example agent_loop
//! ```
//!
//! The loop is the host's own; memgate-host adds memory at four points:
//!
//! 1. before each model call, `injector().prepare_turn` (first-turn recall,
//!    date reminders, frozen memory afterwards);
//! 2. the model is offered `tools().specs()` and its tool calls go through
//!    `tools().dispatch` with the host's principal (a `ToolContext`);
//! 3. after the turn, `capture().after_turn` with the whole transcript;
//! 4. when the host compacts, `capture().before_compaction` with the head
//!    it removes.
//!
//! The "model" here is a stand-in function so the example runs offline; a
//! real host calls its model client there (see `memgate chat`). Memory lives
//! in a local store in a temporary directory.

use memgate_core::message::RoleKind;
use memgate_core::tool::ToolSpec;
use memgate_core::{BackendContext, Caller, Message, ToolCall};
use memgate_host::{
    CaptureOutcome, HostSettings, InjectionOutcome, MemoryHost, MemoryStatus, SaveReport,
    ToolContext,
};
use serde_json::json;
use std::sync::Arc;

/// Keep at most this many messages; older ones are compacted away.
const KEEP_MESSAGES: usize = 8;

#[tokio::main]
async fn main() -> memgate_core::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let backend = memgate_store::LocalBackend::from_backend_config(
        &serde_json::Map::new(),
        &BackendContext::new(dir.path()),
    )?;
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(Arc::new(backend)),
        HostSettings::default(),
    );

    // The host authenticates its user; identity never comes from the model.
    let first = Caller::new("alice").with_thread("thread-1");
    run_turn(
        &host,
        &first,
        &mut Vec::new(),
        "remember: invoices are numbered per year",
    )
    .await;

    // A new thread: its first turn recalls what was saved.
    let second = Caller::new("alice").with_thread("thread-2");
    let mut transcript = Vec::new();
    for input in ["How are invoices numbered?", "And credit notes?", "Thanks."] {
        run_turn(&host, &second, &mut transcript, input).await;
        compact_if_long(&host, &second, &mut transcript).await;
    }
    Ok(())
}

/// One user turn of the host's loop.
async fn run_turn(host: &MemoryHost, caller: &Caller, transcript: &mut Vec<Message>, input: &str) {
    println!("user: {input}");
    transcript.push(Message::human(input).with_id(memgate_host::new_message_id()));

    // 1. Memory before the model call.
    match host.injector().prepare_turn(caller, transcript).await {
        InjectionOutcome::Injected {
            memory: MemoryStatus::Recalled { chars, .. },
            ..
        } => println!("  [memory] recalled {chars} chars"),
        InjectionOutcome::Injected { .. } => println!("  [memory] nothing to recall"),
        InjectionOutcome::Skipped(why) => {
            println!("  [memory] skipped ({why:?}); retried next turn")
        }
        InjectionOutcome::Frozen
        | InjectionOutcome::DateUpdated { .. }
        | InjectionOutcome::NoTarget => {}
    }

    // 2. Model calls, with tool rounds.
    let tools = host.tools().specs();
    let context = ToolContext::new(caller.clone());
    loop {
        let reply = stand_in_model(transcript, &tools);
        let calls = reply.tool_calls.clone();
        transcript.push(reply);
        if calls.is_empty() {
            break;
        }
        for call in calls {
            let result = match host
                .tools()
                .dispatch(&context, &call.name, &call.args)
                .await
            {
                Some(result) => {
                    println!("  [memory] saved: {}", SaveReport::from_result(&result));
                    result.content.to_string()
                }
                None => json!({"error": "unknown tool"}).to_string(),
            };
            transcript.push(Message::tool(result, call.id.unwrap_or_default()));
        }
    }
    if let Some(answer) = transcript.last() {
        println!("assistant: {}", answer.text());
    }

    // 3. Capture after the turn; the host may await the handle or not.
    match host.capture().after_turn(caller, transcript).wait().await {
        CaptureOutcome::Captured(report) => println!("  [memory] captured {} new", report.stored),
        CaptureOutcome::Skipped(why) => println!("  [memory] capture skipped: {why:?}"),
        CaptureOutcome::Failed(err) => println!("  [memory] capture failed: {err}"),
    }
}

/// 4. Compaction: the removed head is captured first (errors never stop it).
async fn compact_if_long(host: &MemoryHost, caller: &Caller, transcript: &mut Vec<Message>) {
    if transcript.len() <= KEEP_MESSAGES {
        return;
    }
    let head: Vec<Message> = transcript
        .drain(..transcript.len() - KEEP_MESSAGES)
        .collect();
    println!("  [compaction] removing {} messages", head.len());
    let _still_running = host.capture().before_compaction(caller, head);
}

/// Stands in for the model: saves on "remember:", reports a tool result,
/// otherwise says how much memory it was shown.
fn stand_in_model(transcript: &[Message], tools: &[ToolSpec]) -> Message {
    let last = transcript.last().expect("a message");
    if last.role.kind() == RoleKind::Tool {
        return Message::ai("Done; the store answered.");
    }
    let input = last.text();
    if let (Some(fact), false) = (input.strip_prefix("remember:"), tools.is_empty()) {
        let call = ToolCall::new(
            tools[0].qualified_name("_"),
            json!({"text": fact.trim()}),
            Some("call-1".to_owned()),
        );
        return Message::ai("").with_tool_calls(vec![call]);
    }
    let memory = transcript
        .iter()
        .filter(|m| m.is_injected_memory())
        .map(|m| m.text())
        .collect::<Vec<_>>()
        .join("\n");
    if memory.contains("per year") {
        Message::ai("Memory says: invoices are numbered per year.")
    } else {
        Message::ai("I have no memory about that.")
    }
}
