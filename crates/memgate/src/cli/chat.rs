//! `memgate chat`: a terminal agent host for any OpenAI-compatible chat
//! endpoint (OpenAI, Ollama, vLLM, llama.cpp …), with memory.
//!
//! Each turn goes through `memgate-host` exactly as an agent host would:
//! first-turn recall injected as a hidden user-role `<memory>` message
//! (shown as `recalled: …`), the `remember` tool offered when the backend
//! can remember (its outcome shown as `saved: …`, from the store's answer),
//! and capture of the transcript after each turn. Answers stream (SSE).
//! `/new` starts a new thread, `/quit` (or end of input, or Ctrl-C at the
//! prompt) leaves once running captures are done; Ctrl-C during a turn drops
//! that turn.
//!
//! The endpoint comes from `MEMGATE_CHAT_BASE_URL`, `MEMGATE_CHAT_MODEL` and
//! the optional `MEMGATE_CHAT_API_KEY`; the key is only ever sent in the
//! `Authorization` header and is masked in everything printed.
//!
//! [`ChatSession`] is the turn loop without a terminal: tests drive it
//! directly with any backend and a scripted model server.

use clap::Args;
use memgate_core::message::RoleKind;
use memgate_core::tool::{ToolResult, ToolSpec};
use memgate_core::{Caller, MemoryBackend, MemoryError, Message, Result, ToolCall};
use memgate_host::{
    new_message_id, CaptureHandle, CaptureOutcome, HostSettings, InjectionOutcome, MemoryHost,
    MemoryStatus, SaveReport, SkipReason, ToolContext,
};
use serde_json::{json, Value};
use std::fmt;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

pub const ENV_BASE_URL: &str = "MEMGATE_CHAT_BASE_URL";
pub const ENV_MODEL: &str = "MEMGATE_CHAT_MODEL";
pub const ENV_API_KEY: &str = "MEMGATE_CHAT_API_KEY";

/// Model calls one turn may make: each tool round costs one.
const MAX_MODEL_CALLS_PER_TURN: usize = 6;
/// Most bytes of an error body quoted from the model endpoint.
const MAX_ERROR_BODY: usize = 2048;

const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant in a terminal chat. \
Answer concisely. When the user explicitly asks you to remember something, use the memory tool \
and tell the user its exact result.";

/// `memgate chat` options. The API key is read from `MEMGATE_CHAT_API_KEY`
/// only (never a flag, so it stays out of process listings).
#[derive(Args, Debug)]
pub struct ChatArgs {
    /// OpenAI-compatible API base URL, e.g. http://localhost:11434/v1 (Ollama).
    #[arg(long, env = ENV_BASE_URL, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model name at that endpoint, e.g. llama3.1.
    #[arg(long, env = ENV_MODEL)]
    pub model: Option<String>,
    /// Id of the first thread (default: a fresh one).
    #[arg(long)]
    pub thread: Option<String>,
    /// Seconds first-turn recall may take before the turn goes on without memory.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub recall_timeout: f64,
    /// Seconds the model endpoint may stay silent before the request fails.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub model_timeout: f64,
    /// Wait for whole answers instead of streaming them.
    #[arg(long)]
    pub no_stream: bool,
    /// System prompt (never carries memory: recalled text goes in a user-role message).
    #[arg(long)]
    pub system: Option<String>,
}

/// Runs the chat with the config's switches (`memory.enabled`,
/// `memory.injection_enabled`).
pub async fn run_with_settings(
    args: ChatArgs,
    backend: Arc<memgate_assembly::AssembledBackend>,
    caller: Caller,
    settings: HostSettings,
) -> Result<()> {
    let endpoint = Endpoint::resolve(&args, |name| std::env::var(name).ok())?;
    let settings = settings.with_recall_deadline_secs(args.recall_timeout)?;
    let silence = seconds("model_timeout", args.model_timeout)?;
    let model = ModelClient::new(endpoint, !args.no_stream, silence)?;
    let host = MemoryHost::new(backend, settings);
    let mut session = ChatSession::new(host, model, caller, args.system, args.thread);
    let mut out = std::io::stdout();
    session.banner(&mut out);

    let mut lines = stdin_lines();
    loop {
        print_flush(&mut out, "you> ");
        // Ctrl-C at the prompt leaves like /quit.
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tokio::signal::ctrl_c() => {
                line_out(&mut out, "");
                break;
            }
        };
        let line = match line {
            Some(Ok(line)) => line,
            None => break,
            Some(Err(e)) => return Err(MemoryError::backend(format!("cannot read input: {e}"))),
        };
        match line.trim() {
            "" => {}
            "/quit" | "/exit" => break,
            "/new" => session.new_thread(&mut out).await,
            command if command.starts_with('/') => {
                line_out(&mut out, "commands: /new (new thread), /quit")
            }
            input => {
                // Ctrl-C during a turn drops that turn (as a model failure
                // does) and returns to the prompt.
                let before = session.transcript.len();
                let finished = tokio::select! {
                    result = session.turn(input, &mut out) => Some(result),
                    _ = tokio::signal::ctrl_c() => None,
                };
                match finished {
                    Some(Ok(())) => {}
                    Some(Err(e)) => line_out(&mut out, &format!("error: {e}")),
                    None => {
                        session.transcript.truncate(before);
                        line_out(&mut out, "\n(interrupted: this turn was dropped)");
                    }
                }
            }
        }
    }
    // Captures already running finish before the chat leaves; a second
    // Ctrl-C leaves at once.
    tokio::select! {
        () = session.finish(&mut out) => {}
        _ = tokio::signal::ctrl_c() => line_out(&mut out, "(left without waiting for the last capture)"),
    }
    Ok(())
}

/// Lines of standard input, read on a thread of their own: a read still
/// blocked at the prompt when Ctrl-C ends the chat must not hold the process
/// (a Tokio stdin read would keep the runtime's shutdown waiting for Enter).
fn stdin_lines() -> tokio::sync::mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn seconds(field: &str, value: f64) -> Result<Duration> {
    if value.is_finite() && value > 0.0 && value <= 86_400.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(MemoryError::invalid(
            field,
            "must be a number of seconds greater than 0 and at most 86400",
        ))
    }
}

fn print_flush(out: &mut dyn Write, text: &str) {
    let _ = write!(out, "{text}");
    let _ = out.flush();
}

fn line_out(out: &mut dyn Write, text: &str) {
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// The API key: sent in the `Authorization` header, masked everywhere else.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// Where the model is.
#[derive(Clone, Debug)]
pub struct Endpoint {
    base_url: String,
    model: String,
    api_key: Option<ApiKey>,
}

impl Endpoint {
    /// From the options (which clap fills from the environment) and the
    /// key variable; a missing endpoint explains how to configure one.
    fn resolve(args: &ChatArgs, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        fn present(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|s| !s.is_empty())
        }
        let (Some(base_url), Some(model)) = (present(&args.base_url), present(&args.model)) else {
            return Err(MemoryError::Config(format!(
                "memgate chat needs an OpenAI-compatible endpoint: set {ENV_BASE_URL} \
                 (for Ollama: http://localhost:11434/v1) and {ENV_MODEL} (e.g. llama3.1); \
                 {ENV_API_KEY} is optional for local servers"
            )));
        };
        let url = reqwest::Url::parse(base_url).map_err(|e| {
            MemoryError::Config(format!("{ENV_BASE_URL} must be an http(s) URL ({e})"))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(MemoryError::Config(format!(
                "{ENV_BASE_URL} must be an http(s) URL (got scheme {})",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(MemoryError::Config(format!(
                "{ENV_BASE_URL} must not carry credentials; put the key in {ENV_API_KEY}"
            )));
        }
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
            api_key: var(ENV_API_KEY)
                .filter(|k| !k.trim().is_empty())
                .map(ApiKey),
        })
    }

    /// `text` with every occurrence of the key masked.
    fn redact(&self, text: &str) -> String {
        match &self.api_key {
            Some(ApiKey(key)) => text.replace(key.as_str(), "[redacted]"),
            None => text.to_owned(),
        }
    }
}

/// One model answer: its text and the tool calls it asked for.
#[derive(Debug, Default, PartialEq)]
struct Reply {
    text: String,
    calls: Vec<WireCall>,
}

/// A tool call as the model sent it (arguments as raw JSON text).
#[derive(Debug, Default, Clone, PartialEq)]
struct WireCall {
    id: String,
    name: String,
    arguments: String,
}

/// An OpenAI-compatible `/chat/completions` client.
pub struct ModelClient {
    http: reqwest::Client,
    endpoint: Endpoint,
    stream: bool,
}

impl ModelClient {
    /// `silence` bounds how long the endpoint may send nothing.
    pub fn new(endpoint: Endpoint, stream: bool, silence: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10).min(silence))
            .read_timeout(silence)
            .build()
            .map_err(|e| MemoryError::backend(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            endpoint,
            stream,
        })
    }

    /// Sends one request; streamed text goes to `on_text` as it arrives.
    async fn complete(
        &self,
        messages: Vec<Value>,
        tools: &[Value],
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Reply> {
        let mut body =
            json!({"model": self.endpoint.model, "messages": messages, "stream": self.stream});
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        let url = format!("{}/chat/completions", self.endpoint.base_url);
        let mut request = self.http.post(&url).json(&body);
        if let Some(ApiKey(key)) = &self.endpoint.api_key {
            request = request.bearer_auth(key);
        }
        let failed = |what: String| MemoryError::backend(self.endpoint.redact(&what));
        let mut response = request
            .send()
            .await
            .map_err(|e| failed(format!("model endpoint {url} unreachable: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(failed(format!(
                "model endpoint answered HTTP {}: {}",
                status.as_u16(),
                error_message(&body)
            )));
        }
        if !self.stream {
            let body: Value = response
                .json()
                .await
                .map_err(|e| failed(format!("model answer is not JSON: {e}")))?;
            let reply = parse_completion(&body).map_err(failed)?;
            on_text(&reply.text);
            return Ok(reply);
        }
        let mut stream = StreamedReply::default();
        let mut events = SseDecoder::default();
        'read: loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|e| failed(format!("model stream broke off: {e}")))?;
            let Some(chunk) = chunk else { break };
            for data in events.push(&chunk) {
                if data == "[DONE]" {
                    break 'read;
                }
                let event: Value = serde_json::from_str(&data)
                    .map_err(|e| failed(format!("model stream sent a bad event: {e}")))?;
                if let Some(text) = stream.apply(&event).map_err(failed)? {
                    on_text(&text);
                }
            }
        }
        Ok(stream.finish())
    }
}

/// The error message of an endpoint's error body (OpenAI `{"error":{"message"}}`),
/// or the body's beginning.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["error"].as_str())
            .map(str::to_owned)
    });
    let text = message.unwrap_or_else(|| body.trim().to_owned());
    let mut end = text.len().min(MAX_ERROR_BODY);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// A non-streamed completion.
fn parse_completion(body: &Value) -> std::result::Result<Reply, String> {
    let message = &body["choices"][0]["message"];
    if !message.is_object() {
        return Err(format!(
            "model answer has no choices[0].message ({})",
            error_message(&body.to_string())
        ));
    }
    let calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| WireCall {
                    id: c["id"].as_str().unwrap_or_default().to_owned(),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    arguments: arguments_text(&c["function"]["arguments"]),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Reply {
        text: message["content"].as_str().unwrap_or_default().to_owned(),
        calls,
    })
}

/// Arguments are JSON text in OpenAI's format; some servers send an object.
fn arguments_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Splits a server-sent event stream into `data` payloads.
#[derive(Default)]
struct SseDecoder {
    buffer: Vec<u8>,
}

impl SseDecoder {
    /// Adds bytes; returns the data of every event they completed.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(data) = line.strip_prefix("data:") {
                events.push(data.strip_prefix(' ').unwrap_or(data).to_owned());
            }
        }
        events
    }
}

/// Accumulates streamed deltas: text, and tool calls by their index.
#[derive(Default)]
struct StreamedReply {
    text: String,
    calls: Vec<WireCall>,
}

impl StreamedReply {
    /// Applies one chunk; returns its new text, if any.
    fn apply(&mut self, event: &Value) -> std::result::Result<Option<String>, String> {
        if !event["error"].is_null() {
            return Err(format!(
                "model stream reported an error: {}",
                error_message(&event.to_string())
            ));
        }
        let delta = &event["choices"][0]["delta"];
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            // Without an index (some servers send whole calls), a delta that
            // names a call starts one; anything else continues the last one.
            let starts = call["id"].is_string() || call["function"]["name"].is_string();
            let index = match call["index"].as_u64() {
                Some(i) => i as usize,
                None if starts || self.calls.is_empty() => self.calls.len(),
                None => self.calls.len() - 1,
            };
            if index > 64 {
                return Err("model stream sent a tool call index above 64".to_owned());
            }
            if self.calls.len() <= index {
                self.calls.resize(index + 1, WireCall::default());
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call["id"].as_str() {
                slot.id = id.to_owned();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                slot.name.push_str(name);
            }
            slot.arguments
                .push_str(&arguments_text(&call["function"]["arguments"]));
        }
        match delta["content"].as_str() {
            Some(text) if !text.is_empty() => {
                self.text.push_str(text);
                Ok(Some(text.to_owned()))
            }
            _ => Ok(None),
        }
    }

    fn finish(self) -> Reply {
        Reply {
            text: self.text,
            calls: self
                .calls
                .into_iter()
                .filter(|c| !c.name.is_empty())
                .collect(),
        }
    }
}

/// The transcript in OpenAI's message format, after the system prompt.
/// Roles map by kind: the injected `X__memory` message is a human message,
/// so it goes out with the `user` role.
fn wire_messages(system_prompt: &str, transcript: &[Message]) -> Vec<Value> {
    let mut wire = vec![json!({"role": "system", "content": system_prompt})];
    wire.extend(transcript.iter().filter_map(|m| match m.role.kind() {
        RoleKind::System => Some(json!({"role": "system", "content": m.text()})),
        RoleKind::Human => Some(json!({"role": "user", "content": m.content.to_value()})),
        RoleKind::Ai => {
            let mut message = json!({"role": "assistant", "content": m.text()});
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": arguments_text(&c.args)}})
                    })
                    .collect();
                message["tool_calls"] = Value::Array(calls);
            }
            Some(message)
        }
        RoleKind::Tool => Some(json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id,
            "content": m.text(),
        })),
        RoleKind::Other => None,
    }));
    wire
}

/// A tool in OpenAI's `tools` format, under the name the model must call.
fn wire_tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.qualified_name("_"),
            "description": spec.description,
            "parameters": spec.input_schema,
        }
    })
}

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
    model: ModelClient,
    /// The host-resolved user and agent; the thread is `thread`.
    user: Caller,
    thread: String,
    system_prompt: String,
    transcript: Vec<Message>,
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

    fn banner(&self, out: &mut dyn Write) {
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
    //! The turn loop against `testkit/scripted_model.py` (a real HTTP
    //! server speaking the OpenAI protocol, logging every request body), on
    //! the local store and on real PowerContext servers from testkit/.

    use super::*;
    use memgate_core::noop::NoopBackend;
    use memgate_core::BackendContext;
    use std::collections::HashMap;
    use std::io::BufRead;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};

    const CONVENTION: &str = "money amounts are integer cents; use pytest for backend tests";
    /// What the scripted model saves: one self-contained statement, as the
    /// tool description asks, so it names what the convention is for.
    const SAVED_STATEMENT: &str =
        "Order service conventions: money amounts are integer cents; use pytest for backend tests.";
    const SAVE_REQUEST: &str =
        "Remember this for the order service: money amounts are integer cents; use pytest for backend tests.";
    const REFUND_REQUEST: &str =
        "Add a refund calculation to the order service, following its conventions.";

    /// `testkit/scripted_model.py` on a free port, stopped on drop.
    struct ScriptedModel {
        child: Child,
        url: String,
        log: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl ScriptedModel {
        fn start(script: Value, extra: &[&str]) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let script_path = dir.path().join("script.json");
            std::fs::write(&script_path, script.to_string()).unwrap();
            let log = dir.path().join("requests.jsonl");
            let server =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testkit/scripted_model.py");
            let mut child = Command::new("python3")
                .arg(server)
                .arg("--script")
                .arg(&script_path)
                .arg("--log")
                .arg(&log)
                .args(extra)
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3 runs testkit/scripted_model.py");
            let mut first = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .unwrap();
            let url = first
                .trim()
                .rsplit(' ')
                .next()
                .filter(|u| u.starts_with("http://"))
                .unwrap_or_else(|| panic!("scripted_model did not start: {first:?}"))
                .to_owned();
            Self {
                child,
                url,
                log,
                _dir: dir,
            }
        }

        /// Every request body the server received, in order.
        fn requests(&self) -> Vec<Value> {
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).expect("a JSON body per line"))
                .collect()
        }
    }

    impl Drop for ScriptedModel {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn client(model: &ScriptedModel, stream: bool, key: Option<&str>) -> ModelClient {
        let endpoint = Endpoint {
            base_url: model.url.clone(),
            model: "scripted".to_owned(),
            api_key: key.map(|k| ApiKey(k.to_owned())),
        };
        ModelClient::new(endpoint, stream, Duration::from_secs(30)).unwrap()
    }

    fn session(backend: Arc<dyn MemoryBackend>, user: &str, model: ModelClient) -> ChatSession {
        let backend = memgate_assembly::AssembledBackend::with_defaults(backend);
        let host = MemoryHost::new(backend, HostSettings::default());
        ChatSession::new(host, model, Caller::new(user), None, None)
    }

    async fn turn(session: &mut ChatSession, input: &str) -> Result<String> {
        let mut out = Vec::new();
        let result = session.turn(input, &mut out).await;
        let text = String::from_utf8(out).unwrap();
        result.map(|()| text)
    }

    fn local() -> (Arc<dyn MemoryBackend>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let backend = memgate_store::LocalBackend::from_backend_config(
            &serde_json::Map::new(),
            &BackendContext::new(dir.path()),
        )
        .unwrap();
        (Arc::new(backend), dir)
    }

    fn rfc_script() -> Value {
        json!([
            {"when": {"last_role": "tool"},
             "reply": {"content": "The memory tool answered: {{tool_result}}"}},
            {"when": {"user_contains": "remember this"},
             "reply": {"tool_calls": [{"name": "memgate_remember",
                                       "arguments": {"text": SAVED_STATEMENT, "kind": "preference"}}]}},
            {"when": {"user_contains": "refund"},
             "reply": {"content": "Refunds will be computed in integer cents, with pytest tests."}}
        ])
    }

    fn content_of(m: &Value) -> String {
        m["content"].as_str().unwrap_or_default().to_owned()
    }

    /// The messages of the model server's last request and the index of
    /// its memory message, after checking that memory went out as a
    /// user-role message and that no system message carries `needle`.
    fn memory_message(model: &ScriptedModel, needle: &str) -> (Vec<Value>, usize) {
        let requests = model.requests();
        let messages = requests.last().unwrap()["messages"]
            .as_array()
            .unwrap()
            .clone();
        for m in messages.iter().filter(|m| m["role"] == "system") {
            assert!(
                !content_of(m).contains(needle),
                "memory in a system message: {m}"
            );
        }
        let at = messages
            .iter()
            .position(|m| content_of(m).starts_with("<memory>\n"))
            .unwrap_or_else(|| panic!("no memory message went out: {messages:?}"));
        assert_eq!(messages[at]["role"], "user");
        (messages, at)
    }

    /// What the RFC scenario observed, for backend-specific checks.
    struct Evidence {
        citation: String,
        /// The hidden memory message's content as the model server received it.
        memory_on_the_wire: String,
    }

    /// The RFC's first workflow through the chat turn loop: save in one
    /// thread, recall in a new one, checked on the model server's side.
    async fn rfc_scenario(backend: Arc<dyn MemoryBackend>, user: &str) -> Evidence {
        let model = ScriptedModel::start(rfc_script(), &[]);
        let name = backend.name().to_owned();
        let mut chat = session(backend, user, client(&model, true, None));

        // Thread A: the model calls `remember`; the store's answer is shown.
        let out = turn(&mut chat, SAVE_REQUEST).await.unwrap();
        assert!(out.contains("recalled: nothing\n"), "{out}");
        let citation = out
            .lines()
            .find_map(|l| l.strip_prefix("saved: stored ("))
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("no `saved: stored (…)` line: {out}"))
            .to_owned();
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "one call for the tool, one after it");
        assert_eq!(requests[0]["stream"], true);
        let tool = &requests[0]["tools"][0];
        assert_eq!(tool["type"], "function");
        assert_eq!(tool["function"]["name"], "memgate_remember");
        assert_eq!(
            tool["function"]["parameters"],
            memgate_core::tool::remember_spec("memgate", "x").input_schema
        );
        // The model was told the store's answer, citation included.
        let answer = requests[1]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(answer["role"], "tool");
        let answer: Value = serde_json::from_str(answer["content"].as_str().unwrap()).unwrap();
        assert_eq!(answer["outcome"], "stored", "{answer}");
        assert_eq!(answer["citation"], citation.as_str(), "{answer}");
        assert!(out.contains("The memory tool answered: {"), "{out}");

        // Thread B: a new conversation asks for work under the conventions.
        let mut out = Vec::new();
        chat.new_thread(&mut out).await;
        let out = turn(&mut chat, REFUND_REQUEST).await.unwrap();
        let chars: usize = out
            .lines()
            .find_map(|l| l.strip_prefix("recalled: "))
            .and_then(|rest| rest.strip_suffix(&format!(" chars from {name}")))
            .unwrap_or_else(|| panic!("no `recalled: N chars from {name}` line: {out}"))
            .parse()
            .unwrap();
        assert!(
            out.contains("Refunds will be computed in integer cents"),
            "{out}"
        );

        let (messages, memory_at) = memory_message(&model, "integer cents");
        let text = content_of;
        assert_eq!(messages[0]["role"], "system");
        let memory = &messages[memory_at];
        let content = text(memory);
        assert!(content.ends_with("\n</memory>"), "{content}");
        assert!(content.contains(CONVENTION), "{content}");
        assert_eq!(
            content.chars().count() - "<memory>\n".len() - "\n</memory>".len(),
            chars,
            "the recall line counts what was sent"
        );
        assert_eq!(messages[memory_at + 1]["role"], "user");
        assert_eq!(text(&messages[memory_at + 1]), REFUND_REQUEST);
        // Thread A's messages are not part of thread B (only recalled in memory).
        assert!(
            !messages
                .iter()
                .any(|m| text(m).contains("Remember this") && !text(m).starts_with("<memory>")),
            "{messages:?}"
        );

        // The identical save again: nothing new is stored.
        let out = turn(&mut chat, SAVE_REQUEST).await.unwrap();
        assert!(
            out.lines().any(|l| l.starts_with("saved: already present")),
            "{out}"
        );
        let mut out = Vec::new();
        chat.finish(&mut out).await;
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("capture failed"), "{out}");
        Evidence {
            citation,
            memory_on_the_wire: content,
        }
    }

    #[tokio::test]
    async fn rfc_scenario_on_the_local_store() {
        let (backend, _dir) = local();
        let evidence = rfc_scenario(backend, "alice").await;
        assert!(
            evidence
                .memory_on_the_wire
                .contains(&format!("[{}]", evidence.citation)),
            "the saved entry itself is recalled with its citation: {}",
            evidence.memory_on_the_wire
        );
    }

    /// The RFC scenario on OpenViking, which has no `remember`: the user's
    /// request to remember is an ordinary turn, captured into the thread's
    /// session and extracted by the server (with testkit's deterministic
    /// model provider); a new thread then recalls it with the fixed
    /// injection query, and the model server receives it in a hidden
    /// user-role memory message. Runs against the real OpenViking 0.5 of
    /// testkit/, as a fresh user with its own USER key.
    #[tokio::test]
    async fn rfc_scenario_on_openviking_through_capture() {
        let test = "rfc_scenario_on_openviking_through_capture";
        let var = |s: &str| {
            std::env::var(format!("MEMGATE_TEST_OPENVIKING_{s}"))
                .ok()
                .filter(|v| !v.is_empty())
        };
        let (Some(url), Some(root), Some(account)) = (var("URL"), var("ROOT_KEY"), var("ACCOUNT"))
        else {
            assert_ne!(
                std::env::var("MEMGATE_REQUIRE_REAL_SERVERS").as_deref(),
                Ok("1"),
                "{test}: MEMGATE_TEST_OPENVIKING_* unset but MEMGATE_REQUIRE_REAL_SERVERS=1"
            );
            println!("{test}: skipped: real server not running (run testkit/up)");
            return;
        };
        // A fresh user, so nothing else is in its memory.
        let user: String = format!("chat{}", new_message_id())
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(24)
            .collect::<String>()
            .to_lowercase();
        let created: Value = reqwest::Client::new()
            .post(format!("{url}/api/v1/admin/accounts/{account}/users"))
            .header("X-API-Key", &root)
            .json(&json!({"user_id": user, "role": "user"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let key = created["result"]["user_key"]
            .as_str()
            .unwrap_or_else(|| panic!("user creation: {created}"))
            .to_owned();
        let storage = tempfile::tempdir().unwrap();
        let config = json!({"base_url": url, "owner_user_id": user, "timeout_seconds": 30.0});
        let ctx = BackendContext::new(storage.path()).with_env(Arc::new(move |name| {
            (name == "OPENVIKING_API_KEY").then(|| key.clone())
        }));
        let backend: Arc<dyn MemoryBackend> = Arc::new(
            memgate_openviking::OpenVikingBackend::from_backend_config(
                config.as_object().unwrap(),
                &ctx,
            )
            .unwrap(),
        );
        backend
            .warm()
            .await
            .expect("OpenViking is healthy and knows the key");

        let script = json!([
            {"when": {"user_contains": "remember this"},
             "reply": {"content": "Noted for the order service."}},
            {"when": {"user_contains": "refund"},
             "reply": {"content": "Refunds will be computed in integer cents, with pytest tests."}}
        ]);
        let model = ScriptedModel::start(script, &[]);
        let mut chat = session(Arc::clone(&backend), &user, client(&model, true, None));

        // Thread A: no tool is offered (OpenViking cannot remember); the
        // turn is captured when it ends.
        // (A fresh user's recall already carries OpenViking's directory
        // summaries, so thread A recalls something, but not the convention.)
        let out = turn(&mut chat, SAVE_REQUEST).await.unwrap();
        assert!(
            out.contains(" chars from openviking") || out.contains("recalled: nothing"),
            "{out}"
        );
        let first = model.requests()[0]["messages"].as_array().unwrap().clone();
        assert!(
            first.iter().all(|m| !(m["content"]
                .as_str()
                .unwrap_or_default()
                .starts_with("<memory>")
                && m["content"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("integer cents"))),
            "nothing about the convention is in memory yet: {first:?}"
        );
        assert!(!out.contains("saved:"), "{out}");
        assert!(
            model.requests()[0].get("tools").is_none(),
            "no tool without remember"
        );
        let mut out = Vec::new();
        chat.new_thread(&mut out).await; // waits for thread A's capture
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("capture failed"), "{out}");

        // The server extracts memories after the commit (about 10-15 s).
        let probe = memgate_core::RecallRequest {
            caller: Caller::new(user.as_str()),
            query: None,
        };
        let mut extracted = false;
        for _ in 0..90 {
            if backend
                .recall(&probe)
                .await
                .unwrap()
                .text
                .contains("integer cents")
            {
                extracted = true;
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(
            extracted,
            "OpenViking extracted no memory from the captured turn"
        );

        // Thread B: recalled on the first turn, sent as a user-role memory message.
        let out = turn(&mut chat, REFUND_REQUEST).await.unwrap();
        assert!(out.contains(" chars from openviking"), "{out}");
        let (messages, memory_at) = memory_message(&model, "integer cents");
        let memory = &messages[memory_at];
        assert!(content_of(memory).contains("integer cents"), "{memory}");
        let mut out = Vec::new();
        chat.finish(&mut out).await;
        assert!(backend.shutdown(Duration::from_secs(5)).await);
    }

    /// A real server from testkit/ (`{prefix}_URL`, `_TOKEN`, `_SCOPE_ID`),
    /// or `None` with a printed skip line; with
    /// `MEMGATE_REQUIRE_REAL_SERVERS=1` its absence fails the test.
    fn real_server(prefix: &str, test: &str) -> Option<(String, String)> {
        let var = |s: &str| {
            std::env::var(format!("{prefix}_{s}"))
                .ok()
                .filter(|v| !v.is_empty())
        };
        match (var("URL"), var("TOKEN")) {
            (Some(url), Some(token)) => Some((url, token)),
            _ if std::env::var("MEMGATE_REQUIRE_REAL_SERVERS").as_deref() == Ok("1") => panic!(
                "{test}: {prefix}_URL/_TOKEN are not set but MEMGATE_REQUIRE_REAL_SERVERS=1 \
                 (run testkit/up and source testkit/.run/env)"
            ),
            _ => {
                println!(
                    "{test}: skipped: real server not running (run testkit/up; {prefix}_URL unset)"
                );
                None
            }
        }
    }

    const PC_OWNER: &str = "user-7f3a";

    fn powercontext(url: &str, token: &str, scope: &str) -> Arc<dyn MemoryBackend> {
        use memgate_powercontext::settings::*;
        let vars: HashMap<&str, String> = [
            (ENV_BASE_URL, url.to_owned()),
            (ENV_OWNER_USER_ID, PC_OWNER.to_owned()),
            (ENV_SCOPE_ID, scope.to_owned()),
            (ENV_TOKEN, token.to_owned()),
        ]
        .into_iter()
        .collect();
        let ctx = BackendContext::new(std::env::temp_dir())
            .with_env(Arc::new(move |name| vars.get(name).cloned()));
        Arc::new(
            memgate_powercontext::PowerContextBackend::from_backend_config(
                &serde_json::Map::new(),
                &ctx,
            )
            .unwrap(),
        )
    }

    fn unique(label: &str) -> String {
        format!("{label}-{}", new_message_id())
    }

    /// A fresh Scope on a 1.4.x server, so the first save is a new entry.
    /// 1.4.1 answers 409 `binding-version` when Scope creation races another
    /// binding write; creation is idempotent per key, so it is repeated.
    async fn pc14_scope(url: &str, token: &str) -> String {
        let http = reqwest::Client::new();
        let body = json!({"title": "memgate chat RFC scenario",
                          "summary": "memgate chat test scope",
                          "idempotency_key": unique("memgate-chat")});
        for _ in 0..40 {
            let response = http
                .post(format!("{url}/v1/scopes"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap_or_default();
            match status {
                201 => return answer["scope_id"].as_str().unwrap().to_owned(),
                409 if answer["error"]["code"] == "binding-version" => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                _ => panic!("scope creation: HTTP {status} {answer}"),
            }
        }
        panic!("scope creation kept conflicting")
    }

    /// PowerContext's bounded text cites the saved entry: the entry id
    /// (0.0.2) or artifact id (1.4.x) of the citation the save returned.
    fn assert_cites_saved_entry(evidence: &Evidence) {
        let citation: Value = serde_json::from_str(&evidence.citation).unwrap();
        let id = citation["entry_id"]
            .as_str()
            .or_else(|| citation["artifact_ref"]["artifact_id"].as_str())
            .unwrap_or_else(|| panic!("unexpected citation {citation}"));
        assert!(
            evidence.memory_on_the_wire.contains(id),
            "{id} not in {}",
            evidence.memory_on_the_wire
        );
    }

    /// Observed on 0.0.2 and 1.4.1 as testkit runs them (no embedding
    /// model): retrieval is lexical. The RFC's refund request shares no word
    /// with the bare convention, so it recalls nothing; a statement that
    /// names the order service (as the scenario's model saves it) is found.
    async fn powercontext_recall_needs_shared_words(backend: Arc<dyn MemoryBackend>) {
        let caller = Caller::new(PC_OWNER);
        for text in [CONVENTION, SAVED_STATEMENT] {
            let request = memgate_core::RememberRequest::new("preference", text).unwrap();
            backend.remember(&caller, &request).await.unwrap();
        }
        let recall = |query: &str| memgate_core::RecallRequest {
            caller: caller.clone(),
            query: Some(query.to_owned()),
        };
        let refund = backend.recall(&recall(REFUND_REQUEST)).await.unwrap();
        assert!(refund.text.contains(SAVED_STATEMENT), "{}", refund.text);
        let bare_only = |text: &str| text.replace(SAVED_STATEMENT, "").contains(CONVENTION);
        assert!(!bare_only(&refund.text), "{}", refund.text);
        let cents = backend.recall(&recall("integer cents")).await.unwrap();
        assert!(bare_only(&cents.text), "{}", cents.text);
    }

    #[tokio::test]
    async fn powercontext_1_4_recall_needs_shared_words() {
        let test = "powercontext_1_4_recall_needs_shared_words";
        let Some((url, token)) = real_server("MEMGATE_TEST_PC14", test) else {
            return;
        };
        let scope = pc14_scope(&url, &token).await;
        powercontext_recall_needs_shared_words(powercontext(&url, &token, &scope)).await;
    }

    #[tokio::test]
    async fn powercontext_0_0_2_recall_needs_shared_words() {
        let test = "powercontext_0_0_2_recall_needs_shared_words";
        let Some((url, token)) = real_server("MEMGATE_TEST_PC002", test) else {
            return;
        };
        let scope = unique("memgate-chat-lexical");
        powercontext_recall_needs_shared_words(powercontext(&url, &token, &scope)).await;
    }

    #[tokio::test]
    async fn rfc_scenario_on_powercontext_1_4() {
        let test = "rfc_scenario_on_powercontext_1_4";
        let Some((url, token)) = real_server("MEMGATE_TEST_PC14", test) else {
            return;
        };
        let scope = pc14_scope(&url, &token).await;
        let evidence = rfc_scenario(powercontext(&url, &token, &scope), PC_OWNER).await;
        assert_cites_saved_entry(&evidence);
        assert!(!evidence.memory_on_the_wire.contains(&token));
    }

    #[tokio::test]
    async fn rfc_scenario_on_powercontext_0_0_2() {
        let test = "rfc_scenario_on_powercontext_0_0_2";
        let Some((url, token)) = real_server("MEMGATE_TEST_PC002", test) else {
            return;
        };
        // 0.0.2 Scopes are implicit: a new name is a new, empty Scope.
        let scope = unique("memgate-chat-rfc");
        let evidence = rfc_scenario(powercontext(&url, &token, &scope), PC_OWNER).await;
        assert_cites_saved_entry(&evidence);
        assert!(!evidence.memory_on_the_wire.contains(&token));
    }

    #[tokio::test]
    async fn whole_answers_work_without_streaming() {
        let (backend, _dir) = local();
        let model = ScriptedModel::start(rfc_script(), &[]);
        let mut chat = session(backend, "alice", client(&model, false, None));
        let out = turn(&mut chat, SAVE_REQUEST).await.unwrap();
        assert!(out.contains("saved: stored (mem_"), "{out}");
        assert!(out.contains("The memory tool answered: {"), "{out}");
        let requests = model.requests();
        assert!(requests.iter().all(|r| r["stream"] == false));
    }

    #[tokio::test]
    async fn the_api_key_is_sent_but_never_shown() {
        const KEY: &str = "sk-test-7d1c0a94e2";
        const WRONG: &str = "sk-wrong-51bb03";
        let (backend, _dir) = local();
        let model = ScriptedModel::start(rfc_script(), &["--require-key", KEY]);

        let mut chat = session(backend.clone(), "alice", client(&model, true, Some(WRONG)));
        let err = turn(&mut chat, REFUND_REQUEST)
            .await
            .unwrap_err()
            .to_string();
        // The careless server echoed the key it was given; it is masked here.
        assert!(err.contains("HTTP 401"), "{err}");
        assert!(err.contains("[redacted]"), "{err}");
        assert!(!err.contains(WRONG), "{err}");

        let mut chat = session(backend, "alice", client(&model, true, Some(KEY)));
        let mut out = Vec::new();
        chat.banner(&mut out);
        let out = String::from_utf8(out).unwrap() + &turn(&mut chat, REFUND_REQUEST).await.unwrap();
        assert!(out.contains("Refunds will be computed"), "{out}");
        assert!(!out.contains(KEY), "{out}");
        assert!(!format!("{:?}", chat.model.endpoint).contains(KEY));
        assert!(model
            .requests()
            .iter()
            .all(|r| !r.to_string().contains(KEY)));
    }

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

    fn args(base_url: Option<&str>, model: Option<&str>) -> ChatArgs {
        ChatArgs {
            base_url: base_url.map(str::to_owned),
            model: model.map(str::to_owned),
            thread: None,
            recall_timeout: 5.0,
            model_timeout: 120.0,
            no_stream: false,
            system: None,
        }
    }

    #[test]
    fn a_missing_endpoint_says_how_to_set_one_and_is_a_caller_error() {
        for a in [
            args(None, None),
            args(Some("http://localhost:11434/v1"), None),
            args(None, Some("llama3.1")),
            args(Some("  "), Some("llama3.1")),
        ] {
            let err = Endpoint::resolve(&a, |_| None).unwrap_err();
            assert!(err.is_caller_error(), "exit code 2");
            let text = err.to_string();
            assert!(text.contains("MEMGATE_CHAT_BASE_URL"), "{text}");
            assert!(text.contains("http://localhost:11434/v1"), "{text}");
            assert!(text.contains("MEMGATE_CHAT_MODEL"), "{text}");
        }
        let err = Endpoint::resolve(&args(Some("localhost:11434"), Some("m")), |_| None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be an http(s) URL"), "{err}");
        let err = Endpoint::resolve(&args(Some("https://u:hunter2@h/v1"), Some("m")), |_| None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("must not carry credentials") && !err.contains("hunter2"),
            "{err}"
        );
        let ok = Endpoint::resolve(&args(Some("http://h:1/v1/"), Some("m")), |n| {
            (n == ENV_API_KEY).then(|| "k-1".to_owned())
        })
        .unwrap();
        assert_eq!(ok.base_url, "http://h:1/v1");
        assert!(!format!("{ok:?}").contains("k-1"));
    }

    #[test]
    fn sse_events_survive_arbitrary_chunk_boundaries() {
        let stream = "data: {\"a\":1}\r\n\r\n: comment\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut decoder = SseDecoder::default();
            let (a, b) = stream.as_bytes().split_at(split);
            let mut events = decoder.push(a);
            events.extend(decoder.push(b));
            assert_eq!(events, ["{\"a\":1}", "[DONE]"], "split at {split}");
        }
    }

    #[test]
    fn streamed_tool_calls_are_assembled_by_index() {
        let mut reply = StreamedReply::default();
        for event in [
            json!({"choices": [{"delta": {"role": "assistant", "content": "Sav"}}]}),
            json!({"choices": [{"delta": {"content": "ing."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "memgate_remember", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"text\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"x\"}"}}]}}]}),
            // Ollama-style: a whole call in one delta, arguments as an object, no index.
            json!({"choices": [{"delta": {"tool_calls": [
                {"id": "c2", "function": {"name": "other", "arguments": {"q": 1}}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ] {
            reply.apply(&event).unwrap();
        }
        let reply = reply.finish();
        assert_eq!(reply.text, "Saving.");
        assert_eq!(
            reply.calls,
            [
                WireCall {
                    id: "c1".into(),
                    name: "memgate_remember".into(),
                    arguments: r#"{"text":"x"}"#.into()
                },
                WireCall {
                    id: "c2".into(),
                    name: "other".into(),
                    arguments: r#"{"q":1}"#.into()
                },
            ]
        );
        let err = StreamedReply::default()
            .apply(&json!({"error": {"message": "overloaded"}}))
            .unwrap_err();
        assert!(err.contains("overloaded"), "{err}");
    }

    #[test]
    fn the_memory_message_goes_out_with_the_user_role() {
        use memgate_host::reminder::{date_reminder, memory_message};
        let transcript = vec![
            date_reminder("m1", "2026-10-09, Friday"),
            memory_message("m1", "remembered"),
            Message::human("hi").with_id("m1__user"),
            Message::ai("").with_tool_calls(vec![ToolCall::new(
                "memgate_remember",
                json!({"text": "x"}),
                Some("c1".into()),
            )]),
            Message::tool("{\"outcome\":\"stored\"}", "c1"),
        ];
        let wire = wire_messages("system prompt", &transcript);
        let roles: Vec<_> = wire.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "system", "user", "user", "assistant", "tool"]
        );
        assert_eq!(wire[2]["content"], "<memory>\nremembered\n</memory>");
        assert_eq!(
            wire[4]["tool_calls"][0]["function"]["arguments"],
            r#"{"text":"x"}"#
        );
        assert_eq!(wire[5]["tool_call_id"], "c1");
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
