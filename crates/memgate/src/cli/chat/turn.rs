//! The turn loop without a terminal: one user and one thread at a time,
//! each turn through `memgate-host` as an agent host does it (injection,
//! model calls with tool rounds, capture). Tests drive it directly with any
//! backend and a scripted model server.

use super::openai::{wire_messages, wire_tool, ModelClient, WireCall};
use super::terminal::{line_out, print_flush};
use crate::cli::error::Result;
use memgate_core::tool::ToolResult;
use memgate_core::{Caller, MemoryBackend, Message, ToolCall};
use memgate_host::{
    new_message_id, CaptureHandle, CaptureOutcome, InjectionOutcome, MemoryHost, MemoryStatus,
    SaveReport, SkipReason, ToolContext,
};
use serde_json::{json, Value};
use std::io::Write;

/// Model calls one turn may make: each tool round costs one.
const MAX_MODEL_CALLS_PER_TURN: usize = 6;

const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant in a terminal chat. \
Answer concisely. When the user explicitly asks you to remember something, use the memory tool \
and tell the user its exact result.";

/// The line shown for a turn's recall, when the turn asked for memory.
fn recall_line(outcome: &InjectionOutcome, backend: &str) -> Option<String> {
    Some(match outcome {
        InjectionOutcome::Injected { memory, .. } => match memory {
            MemoryStatus::Recalled { chars, .. } => {
                format!("recalled: {chars} chars from {backend}")
            }
            MemoryStatus::Nothing => "recalled: nothing".to_owned(),
            MemoryStatus::Disabled => "recalled: nothing (memory injection is off)".to_owned(),
        },
        InjectionOutcome::Skipped(SkipReason::Timeout(deadline)) => format!(
            "recalled: nothing (recall took longer than {:.1}s; retrying next turn)",
            deadline.as_secs_f64()
        ),
        InjectionOutcome::Skipped(SkipReason::Failed(err)) => {
            format!("recalled: nothing (recall failed: {err}; retrying next turn)")
        }
        InjectionOutcome::DateUpdated { .. }
        | InjectionOutcome::Frozen
        | InjectionOutcome::NoTarget => return None,
    })
}

/// The turn loop: one user, one thread at a time, any backend, any model.
pub struct ChatSession {
    host: MemoryHost,
    pub(super) model: ModelClient,
    /// The host-resolved user and agent; the thread is `thread`.
    user: Caller,
    thread: String,
    system_prompt: String,
    pub(super) transcript: Vec<Message>,
    captures: Vec<CaptureHandle>,
}

impl ChatSession {
    pub fn new(
        host: MemoryHost,
        model: ModelClient,
        caller: Caller,
        system_prompt: Option<String>,
        thread: Option<String>,
    ) -> Self {
        Self {
            host,
            model,
            user: Caller {
                thread: None,
                ..caller
            },
            thread: thread.unwrap_or_else(new_thread_id),
            system_prompt: system_prompt.unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
            transcript: Vec::new(),
            captures: Vec::new(),
        }
    }

    fn caller(&self) -> Caller {
        self.user.clone().with_thread(self.thread.clone())
    }

    pub(super) fn banner(&self, out: &mut dyn Write) {
        let backend = self.host.backend();
        let user = &self.user.user;
        let who = if user.is_default_fallback() {
            format!("{user} (no --user / MEMGATE_USER given: the host fallback)")
        } else {
            user.to_string()
        };
        let remember = if self.host.tools().specs().is_empty() {
            "off"
        } else {
            "on"
        };
        line_out(
            out,
            &format!(
                "memgate chat: model {} at {}\nmemory: {} backend, user {who}, remember tool {remember}\n\
                 /new starts a new thread, /quit leaves\nthread {}",
                self.model.endpoint.model,
                self.model.endpoint.base_url,
                backend.name(),
                self.thread
            ),
        );
    }

    /// One user turn: injection, model calls (with tool rounds), capture.
    /// On a model failure the turn is undone, so the input can be retried.
    pub async fn turn(&mut self, input: &str, out: &mut (dyn Write + Send)) -> Result<()> {
        self.report_finished_captures(out).await;
        let caller = self.caller();
        let before = self.transcript.len();
        self.transcript
            .push(Message::human(input).with_id(new_message_id()));
        let outcome = self
            .host
            .injector()
            .prepare_turn(&caller, &mut self.transcript)
            .await;
        if let Some(line) = recall_line(&outcome, self.host.backend().name()) {
            line_out(out, &line);
        }
        match self.answer(&caller, out).await {
            Ok(()) => {
                let capture = self.host.capture().after_turn(&caller, &self.transcript);
                self.captures.push(capture);
                Ok(())
            }
            Err(e) => {
                self.transcript.truncate(before);
                Err(e)
            }
        }
    }

    /// Calls the model until it answers without tool calls.
    async fn answer(&mut self, caller: &Caller, out: &mut (dyn Write + Send)) -> Result<()> {
        let tools: Vec<Value> = self.host.tools().specs().iter().map(wire_tool).collect();
        let context = ToolContext::new(caller.clone());
        for _ in 0..MAX_MODEL_CALLS_PER_TURN {
            let messages = wire_messages(&self.system_prompt, &self.transcript);
            let mut printed = false;
            let reply = self
                .model
                .complete(messages, &tools, &mut |text| {
                    printed |= !text.is_empty();
                    print_flush(out, text);
                })
                .await?;
            if printed {
                line_out(out, "");
            }
            let calls: Vec<ToolCall> = reply
                .calls
                .iter()
                .map(|c| {
                    let args = serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|_| Value::String(c.arguments.clone()));
                    ToolCall::new(c.name.clone(), args, Some(c.id.clone()))
                })
                .collect();
            self.transcript.push(
                Message::ai(reply.text)
                    .with_id(new_message_id())
                    .with_tool_calls(calls),
            );
            if reply.calls.is_empty() {
                return Ok(());
            }
            for call in reply.calls {
                let result = self.call_tool(&context, &call, out).await;
                let mut message = Message::tool(result.content.to_string(), call.id.clone())
                    .with_id(new_message_id())
                    .with_name(call.name.clone());
                if result.is_error {
                    message.status = Some("error".to_owned());
                }
                self.transcript.push(message);
            }
        }
        line_out(
            out,
            &format!(
                "(stopped: the model kept calling tools after {MAX_MODEL_CALLS_PER_TURN} calls)"
            ),
        );
        Ok(())
    }

    async fn call_tool(
        &self,
        context: &ToolContext,
        call: &WireCall,
        out: &mut (dyn Write + Send),
    ) -> ToolResult {
        let tools = self.host.tools();
        match tools
            .dispatch_json(context, &call.name, &call.arguments)
            .await
        {
            Some(result) => {
                line_out(out, &format!("saved: {}", SaveReport::from_result(&result)));
                result
            }
            None => ToolResult {
                is_error: true,
                content: json!({"error": {"code": "unknown_tool",
                                          "message": format!("there is no tool named {:?}", call.name)}}),
            },
        }
    }

    /// Starts a new thread (after the current thread's captures are done).
    pub async fn new_thread(&mut self, out: &mut (dyn Write + Send)) {
        self.drain_captures(out).await;
        self.transcript.clear();
        self.thread = new_thread_id();
        line_out(out, &format!("thread {}", self.thread));
    }

    /// Waits for outstanding captures before leaving.
    pub async fn finish(&mut self, out: &mut (dyn Write + Send)) {
        self.drain_captures(out).await;
    }

    async fn drain_captures(&mut self, out: &mut (dyn Write + Send)) {
        for capture in std::mem::take(&mut self.captures) {
            report_capture(capture.wait().await, out);
        }
    }

    async fn report_finished_captures(&mut self, out: &mut (dyn Write + Send)) {
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.captures)
            .into_iter()
            .partition(CaptureHandle::is_finished);
        self.captures = running;
        for capture in done {
            report_capture(capture.wait().await, out);
        }
    }
}

fn report_capture(outcome: CaptureOutcome, out: &mut dyn Write) {
    if let CaptureOutcome::Failed(err) = outcome {
        line_out(out, &format!("capture failed: {err}"));
    }
}

fn new_thread_id() -> String {
    format!("chat-{}", new_message_id())
}
#[cfg(test)]
mod tests {
    use super::super::scripted::*;
    use super::*;
    use memgate_core::noop::NoopBackend;
    use memgate_core::MemoryError;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_failed_model_call_undoes_the_turn() {
        let (backend, _dir) = local();
        let model = ScriptedModel::start(
            json!([{"when": {"user_contains": "hello"}, "reply": {"content": "hi!"}}]),
            &[],
        );
        let mut chat = session(backend, "alice", client(&model, true, None));
        let err = turn(&mut chat, "unscripted").await.unwrap_err().to_string();
        assert!(
            err.contains("HTTP 400") && err.contains("no rule matched"),
            "{err}"
        );
        assert!(chat.transcript.is_empty());

        // The next turn is a first turn again: one user message, injected anew.
        let out = turn(&mut chat, "hello").await.unwrap();
        assert!(
            out.contains("recalled: nothing") && out.contains("hi!"),
            "{out}"
        );
        let last = model.requests().pop().unwrap();
        let users: Vec<_> = last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(users, ["hello"]);
    }

    #[tokio::test]
    async fn no_tool_is_offered_when_the_backend_cannot_remember() {
        let model = ScriptedModel::start(rfc_script(), &[]);
        let mut chat = session(Arc::new(NoopBackend), "alice", client(&model, true, None));
        let out = turn(&mut chat, REFUND_REQUEST).await.unwrap();
        assert!(out.contains("recalled: nothing"), "{out}");
        let requests = model.requests();
        assert!(requests[0].get("tools").is_none(), "{}", requests[0]);
    }

    #[test]
    fn recall_lines_say_what_happened() {
        let line = |o: InjectionOutcome| recall_line(&o, "local");
        let injected = |memory| InjectionOutcome::Injected {
            date: "d".into(),
            memory,
        };
        assert_eq!(
            line(injected(MemoryStatus::Recalled {
                chars: 42,
                items: 1
            }))
            .unwrap(),
            "recalled: 42 chars from local"
        );
        assert_eq!(
            line(injected(MemoryStatus::Nothing)).unwrap(),
            "recalled: nothing"
        );
        assert!(line(InjectionOutcome::Skipped(SkipReason::Timeout(
            Duration::from_secs(5)
        )))
        .unwrap()
        .contains("longer than 5.0s; retrying next turn"));
        assert!(line(InjectionOutcome::Skipped(SkipReason::Failed(
            MemoryError::backend("503")
        )))
        .unwrap()
        .contains("recall failed: 503"));
        assert_eq!(line(InjectionOutcome::Frozen), None);
    }
}
