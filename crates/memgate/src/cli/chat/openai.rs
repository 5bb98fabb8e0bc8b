//! The OpenAI-compatible `/chat/completions` client: where the model is
//! (and its key, masked in everything shown), the request, whole and
//! streamed answers, and the transcript and tools in OpenAI's wire format.

use super::sse::SseDecoder;
use super::{ChatArgs, ENV_API_KEY, ENV_BASE_URL, ENV_MODEL};
use crate::cli::error::{CliError, Result};
use memgate_core::message::RoleKind;
use memgate_core::tool::ToolSpec;
use memgate_core::{Message, Secret};
use serde_json::{json, Value};
use std::time::Duration;

/// Most bytes of an error body quoted from the model endpoint.
const MAX_ERROR_BODY: usize = 2048;

/// Where the model is.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub(super) base_url: String,
    pub(super) model: String,
    /// Sent in the `Authorization` header, masked everywhere else.
    api_key: Option<Secret>,
}

impl Endpoint {
    /// From the options (which clap fills from the environment) and the
    /// key variable; a missing endpoint explains how to configure one.
    pub(super) fn resolve(args: &ChatArgs, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        fn present(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|s| !s.is_empty())
        }
        let (Some(base_url), Some(model)) = (present(&args.base_url), present(&args.model)) else {
            return Err(CliError::Setting(format!(
                "memgate chat needs an OpenAI-compatible endpoint: set {ENV_BASE_URL} \
                 (for Ollama: http://localhost:11434/v1) and {ENV_MODEL} (e.g. llama3.1); \
                 {ENV_API_KEY} is optional for local servers"
            )));
        };
        let url = reqwest::Url::parse(base_url).map_err(|e| {
            CliError::Setting(format!("{ENV_BASE_URL} must be an http(s) URL ({e})"))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(CliError::Setting(format!(
                "{ENV_BASE_URL} must be an http(s) URL (got scheme {})",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(CliError::Setting(format!(
                "{ENV_BASE_URL} must not carry credentials; put the key in {ENV_API_KEY}"
            )));
        }
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
            api_key: Secret::from_setting(var(ENV_API_KEY)),
        })
    }

    /// `text` with every occurrence of the key masked.
    fn redact(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => key.scrub(text),
            None => text.to_owned(),
        }
    }
}

/// One model answer: its text and the tool calls it asked for.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Reply {
    pub(super) text: String,
    pub(super) calls: Vec<WireCall>,
}

/// A tool call as the model sent it (arguments as raw JSON text).
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct WireCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

/// An OpenAI-compatible `/chat/completions` client.
pub struct ModelClient {
    http: reqwest::Client,
    pub(super) endpoint: Endpoint,
    stream: bool,
}

impl ModelClient {
    /// `silence` bounds how long the endpoint may send nothing.
    pub fn new(endpoint: Endpoint, stream: bool, silence: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10).min(silence))
            .read_timeout(silence)
            .build()
            .map_err(|e| CliError::Internal(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            endpoint,
            stream,
        })
    }

    /// Sends one request; streamed text goes to `on_text` as it arrives.
    pub(super) async fn complete(
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
        if let Some(key) = &self.endpoint.api_key {
            request = request.bearer_auth(key.expose());
        }
        let failed = |what: String| CliError::Model(self.endpoint.redact(&what));
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
pub(super) fn wire_messages(system_prompt: &str, transcript: &[Message]) -> Vec<Value> {
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
pub(super) fn wire_tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.qualified_name("_"),
            "description": spec.description,
            "parameters": spec.input_schema,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::scripted::*;
    use super::*;
    use memgate_core::ToolCall;

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

    #[test]
    fn a_missing_endpoint_says_how_to_set_one_and_is_a_caller_error() {
        for a in [
            args(None, None),
            args(Some("http://localhost:11434/v1"), None),
            args(None, Some("llama3.1")),
            args(Some("  "), Some("llama3.1")),
        ] {
            let err = Endpoint::resolve(&a, |_| None).unwrap_err();
            assert_eq!(err.exit_code(), 2);
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
}
