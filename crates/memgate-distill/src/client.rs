//! An OpenAI-compatible `POST <base_url>/chat/completions` client for the
//! distillation prompt.
//!
//! One call is bounded by `memory.distill.timeout_ms` in total (connect,
//! headers, body). Redirects are never followed, so the key goes only to
//! the configured server. Errors name the status or the transport failure
//! ([`memgate_embed::transport_error`], shared with the endpoint embedder)
//! and never carry the answer's body, which a careless server may fill with
//! the key it was sent.

use crate::settings::DistillSettings;
use memgate_core::{MemoryError, Result, Secret};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// One message of the prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
}

/// The model's answer and what the endpoint says it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub content: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Why a call gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Worth retrying later: 408, 429, 5xx, a timeout, a transport failure,
    /// an answer that is not a chat completion.
    Transient(String),
    /// Retrying the same request cannot help (another 4xx).
    Refused(String),
}

impl CallError {
    pub fn reason(&self) -> &str {
        match self {
            Self::Transient(r) | Self::Refused(r) => r,
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: AnswerMessage,
}

#[derive(Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// See the module doc.
pub struct ChatClient {
    client: reqwest::Client,
    url: String,
    model: String,
    key: Option<Secret>,
    timeout: Duration,
    structured: bool,
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatClient")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl ChatClient {
    pub fn new(settings: &DistillSettings, key: Option<Secret>) -> Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                MemoryError::Config(format!("memory.distill: cannot build the HTTP client: {e}"))
            })?;
        Ok(Self {
            client,
            url: format!(
                "{}/chat/completions",
                settings.base_url.trim_end_matches('/')
            ),
            model: settings.model.clone(),
            key,
            timeout: settings.timeout,
            structured: settings.structured_output,
        })
    }

    /// Asks for one completion of `messages`, at most `max_tokens` long.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        max_tokens: u64,
    ) -> std::result::Result<Completion, CallError> {
        let mut body = json!({
            "model": self.model,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": messages
                .iter()
                .map(|m| json!({"role": m.role, "content": m.content}))
                .collect::<Vec<_>>(),
        });
        if self.structured {
            body["response_format"] = crate::answer::response_format();
        }
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let call = async {
            let response = request
                .send()
                .await
                .map_err(|e| CallError::Transient(memgate_embed::transport_error(&e)))?;
            let status = response.status();
            if !status.is_success() {
                let reason = format!("endpoint answered {status}");
                return Err(
                    if status.as_u16() == 408 || status.as_u16() == 429 || status.is_server_error()
                    {
                        CallError::Transient(reason)
                    } else {
                        CallError::Refused(reason)
                    },
                );
            }
            response
                .bytes()
                .await
                .map_err(|e| CallError::Transient(memgate_embed::transport_error(&e)))
        };
        let bytes = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| {
                CallError::Transient(format!(
                    "endpoint did not answer within {} ms",
                    self.timeout.as_millis()
                ))
            })??;
        let answer: Answer = serde_json::from_slice(&bytes).map_err(|_| {
            CallError::Transient("endpoint answer is not a chat completion".to_owned())
        })?;
        let content = answer
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .unwrap_or_default();
        let usage = answer.usage.unwrap_or(Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
        });
        Ok(Completion {
            content,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
        })
    }
}

/// A rough token count of `text` (4 bytes a token) for the budget check
/// before a call; the endpoint's own `usage` is what is recorded.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The value of `messages` as sent, for the budget estimate.
pub fn estimate_messages(messages: &[ChatMessage]) -> u64 {
    messages
        .iter()
        .map(|m| estimate_tokens(&m.content) + 4)
        .sum()
}
