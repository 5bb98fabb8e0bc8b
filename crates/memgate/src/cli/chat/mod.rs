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
//! The parts: [`turn`] is the turn loop without a terminal (tests drive it
//! directly with any backend and a scripted model server), [`terminal`] the
//! prompt around it, [`openai`] the model client and [`sse`] its stream.

mod openai;
#[cfg(test)]
mod scenario;
#[cfg(test)]
mod scripted;
mod sse;
mod terminal;
mod turn;

use crate::cli::error::Result;
use clap::Args;
use memgate_core::{Caller, MemoryError};
use memgate_host::{HostSettings, MemoryHost};
use openai::{Endpoint, ModelClient};
use std::sync::Arc;
use std::time::Duration;
use turn::ChatSession;

pub const ENV_BASE_URL: &str = "MEMGATE_CHAT_BASE_URL";
pub const ENV_MODEL: &str = "MEMGATE_CHAT_MODEL";
pub const ENV_API_KEY: &str = "MEMGATE_CHAT_API_KEY";

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
    let session = ChatSession::new(host, model, caller, args.system, args.thread);
    terminal::run(session).await
}

fn seconds(field: &str, value: f64) -> Result<Duration> {
    if value.is_finite() && value > 0.0 && value <= 86_400.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(MemoryError::invalid(
            field,
            "must be a number of seconds greater than 0 and at most 86400",
        )
        .into())
    }
}
