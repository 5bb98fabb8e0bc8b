//! `backend_config.embedder`: which embedder hybrid recall uses, read and
//! validated the same way by every store that embeds (`local`, `postgres`).
//!
//! Keys: `kind` (`local` or `endpoint`, required). For `local`: `model_path`
//! (required): the directory holding all-MiniLM-L6-v2's `config.json`,
//! `vocab.txt` and `model.safetensors`, or the multilingual-e5-small file
//! `e5-small-q4.bin`. For `endpoint`: `url` (required; an OpenAI-compatible
//! base such as `http://127.0.0.1:11434/v1`), `model` (required), `api_key`
//! (optional; never shown), `dimensions` (optional, 1–8192), `deadline_ms`
//! (2000, 10–60000: one embedding call in total), `batch` (32, 1–256).

use crate::{EmbedError, Embedder};
use memgate_core::setup::integer_setting;
use memgate_core::{MemoryError, Result, Secret};
use serde::Serialize;
use serde_json::Value;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const EMBED_DEADLINE_MS: RangeInclusive<u64> = 10..=60_000;
const EMBED_BATCH: RangeInclusive<u64> = 1..=256;
const EMBED_DIMENSIONS: RangeInclusive<u64> = 1..=8192;
const EMBEDDER_KEYS: &[&str] = &[
    "kind",
    "model_path",
    "url",
    "model",
    "api_key",
    "dimensions",
    "deadline_ms",
    "batch",
];

/// Which embedder hybrid recall uses (`backend_config.embedder`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EmbedderSettings {
    /// A model in-process: all-MiniLM-L6-v2 from its directory, or
    /// multilingual-e5-small from its file.
    Local { model_path: PathBuf },
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Endpoint {
        url: String,
        model: String,
        #[serde(skip)]
        api_key: Option<Secret>,
        dimensions: Option<usize>,
        deadline: Duration,
        batch: usize,
    },
}

impl EmbedderSettings {
    /// Builds the embedder (loading a local model reads its files).
    pub fn build(&self) -> Result<Arc<dyn Embedder>> {
        let config_error =
            |e: EmbedError| MemoryError::Config(format!("backend_config.embedder: {e}"));
        Ok(match self {
            Self::Local { model_path } => crate::load_local(model_path).map_err(config_error)?,
            Self::Endpoint {
                url,
                model,
                api_key,
                dimensions,
                deadline,
                batch,
            } => Arc::new(
                crate::EndpointEmbedder::new(crate::EndpointConfig {
                    url: url.clone(),
                    model: model.clone(),
                    api_key: api_key.clone(),
                    dimensions: *dimensions,
                    deadline: *deadline,
                    batch: *batch,
                })
                .map_err(config_error)?,
            ),
        })
    }

    /// Reads and validates `backend_config.embedder` (also what `memgate
    /// eval locomo --embedder JSON` takes); an unknown key or a value outside
    /// its rule names `backend_config.embedder.<key>`, never the value.
    pub fn parse(value: &Value) -> Result<Self> {
        let field = |k: &str| format!("backend_config.embedder.{k}");
        let map = value.as_object().ok_or_else(|| {
            MemoryError::Config("backend_config.embedder must be an object".to_owned())
        })?;
        if let Some(unknown) = map.keys().find(|k| !EMBEDDER_KEYS.contains(&k.as_str())) {
            return Err(MemoryError::Config(format!(
                "{} is not an embedder setting (known: {})",
                field(unknown),
                EMBEDDER_KEYS.join(", ")
            )));
        }
        let text = |k: &str, required: bool| -> Result<Option<String>> {
            match map.get(k) {
                None | Some(Value::Null) if !required => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
                _ => Err(MemoryError::Config(format!(
                    "{} must be a non-empty string",
                    field(k)
                ))),
            }
        };
        let number = |k: &str, default: u64, range: RangeInclusive<u64>| -> Result<u64> {
            match map.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => integer_setting(v, &format!("embedder.{k}"), range),
            }
        };
        match text("kind", true)?.as_deref() {
            Some("local") => Ok(Self::Local {
                model_path: PathBuf::from(text("model_path", true)?.unwrap_or_default()),
            }),
            Some("endpoint") => {
                let url = text("url", true)?.unwrap_or_default();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(MemoryError::Config(format!(
                        "{} must start with http:// or https://",
                        field("url")
                    )));
                }
                let dimensions = match map.get("dimensions") {
                    None | Some(Value::Null) => None,
                    Some(v) => {
                        Some(integer_setting(v, "embedder.dimensions", EMBED_DIMENSIONS)? as usize)
                    }
                };
                Ok(Self::Endpoint {
                    url,
                    model: text("model", true)?.unwrap_or_default(),
                    api_key: Secret::from_setting(text("api_key", false)?),
                    dimensions,
                    deadline: Duration::from_millis(number(
                        "deadline_ms",
                        2_000,
                        EMBED_DEADLINE_MS,
                    )?),
                    batch: number("batch", 32, EMBED_BATCH)? as usize,
                })
            }
            _ => Err(MemoryError::Config(format!(
                "{} must be \"local\" or \"endpoint\"",
                field("kind")
            ))),
        }
    }
}
