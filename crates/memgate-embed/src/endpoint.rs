//! An OpenAI-compatible `POST <url>/embeddings` client.
//!
//! `url` is the API base including its version (`http://127.0.0.1:11434/v1`
//! for Ollama, `https://api.openai.com/v1`). Texts go in batches of
//! [`EndpointConfig::batch`]; one [`Embedder::embed`] call, all its batches
//! together, is bounded by [`EndpointConfig::deadline`] from the first byte
//! sent to the last byte read. Answers are checked (one vector per input, by
//! `index`; one length for all; finite numbers) and normalised.
//!
//! The store calls embedders from blocking threads; the client runs its
//! requests on a runtime of its own (one worker), and from inside another
//! runtime on a scoped thread, so it can be called from anywhere.

use crate::{normalize, EmbedError, Embedder, Result};
use memgate_core::Secret;
use serde::Deserialize;
use std::time::{Duration, Instant};

/// Settings of an endpoint embedder.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// Base URL including the API version, without a trailing `/embeddings`.
    pub url: String,
    /// The model name sent with every request.
    pub model: String,
    /// Bearer token, if the endpoint needs one (never logged or shown).
    pub api_key: Option<Secret>,
    /// `dimensions` to ask for (models that support shortening).
    pub dimensions: Option<usize>,
    /// Total deadline of one `embed` call.
    pub deadline: Duration,
    /// Most texts per request.
    pub batch: usize,
}

/// See the module doc.
pub struct EndpointEmbedder {
    config: EndpointConfig,
    id: String,
    client: reqwest::Client,
    /// Always `Some` until dropped (see the `Drop` impl).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for EndpointEmbedder {
    /// A runtime dropped inside another runtime's async context panics (it
    /// would block there): the store holding this embedder is often
    /// released by an async task (a CLI command, the service's shutdown).
    /// Between calls nothing runs on it, so nothing is cut short.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl EndpointEmbedder {
    pub fn new(config: EndpointConfig) -> Result<Self> {
        if !(config.url.starts_with("http://") || config.url.starts_with("https://")) {
            return Err(EmbedError::Config(
                "embedder url must start with http:// or https://".into(),
            ));
        }
        if config.model.trim().is_empty() {
            return Err(EmbedError::Config(
                "embedder model must not be blank".into(),
            ));
        }
        if config.batch == 0 {
            return Err(EmbedError::Config(
                "embedder batch must be at least 1".into(),
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(config.deadline)
            .build()
            .map_err(|e| EmbedError::Config(format!("cannot build the HTTP client: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("memgate-embed")
            .enable_all()
            .build()
            .map_err(|e| EmbedError::Config(format!("cannot start the embedder runtime: {e}")))?;
        let id = match config.dimensions {
            Some(d) => format!("{}/{d}", config.model),
            None => config.model.clone(),
        };
        Ok(Self {
            config,
            id,
            client,
            runtime: Some(runtime),
        })
    }

    fn endpoint(&self) -> String {
        format!("{}/embeddings", self.config.url.trim_end_matches('/'))
    }

    /// One request for `texts`, within `deadline`.
    async fn request(&self, texts: &[&str], deadline: Instant) -> Result<Vec<Vec<f32>>> {
        let mut body = serde_json::json!({
            "model": self.config.model,
            "input": texts,
            "encoding_format": "float",
        });
        if let Some(d) = self.config.dimensions {
            body["dimensions"] = d.into();
        }
        let mut request = self.client.post(self.endpoint()).json(&body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key.expose());
        }
        let call = async {
            let response = request
                .send()
                .await
                .map_err(|e| EmbedError::Failed(transport_error(&e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(EmbedError::Failed(format!("endpoint answered {status}")));
            }
            response
                .bytes()
                .await
                .map_err(|e| EmbedError::Failed(transport_error(&e)))
        };
        let bytes = tokio::time::timeout_at(deadline.into(), call)
            .await
            .map_err(|_| EmbedError::Deadline(self.config.deadline.as_millis()))??;
        let answer: Answer = serde_json::from_slice(&bytes).map_err(|e| {
            EmbedError::Failed(format!("endpoint answer is not an embeddings list: {e}"))
        })?;
        check(answer, texts.len())
    }
}

/// A transport error's kind, without the URL's query or any header: what
/// every OpenAI-compatible client of memgate (this one, the distillation
/// endpoint) says when a call fails below HTTP.
pub fn transport_error(e: &reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "broken answer body"
    } else {
        "request failed"
    };
    format!("endpoint {kind}")
}

/// The vectors of `answer` in input order, checked and normalised.
fn check(answer: Answer, expected: usize) -> Result<Vec<Vec<f32>>> {
    if answer.data.len() != expected {
        return Err(EmbedError::Failed(format!(
            "endpoint returned {} vectors for {expected} inputs",
            answer.data.len()
        )));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
    for item in answer.data {
        let slot = out
            .get_mut(item.index)
            .ok_or_else(|| EmbedError::Failed("endpoint returned an index out of range".into()))?;
        *slot = Some(item.embedding);
    }
    let mut vectors: Vec<Vec<f32>> = out
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| EmbedError::Failed("endpoint returned an index twice".into()))?;
    let dims = vectors.first().map_or(0, Vec::len);
    if dims == 0
        || vectors
            .iter()
            .any(|v| v.len() != dims || v.iter().any(|x| !x.is_finite()))
    {
        return Err(EmbedError::Failed(
            "endpoint vectors are empty, of different lengths or not finite".into(),
        ));
    }
    for v in &mut vectors {
        normalize(v);
    }
    Ok(vectors)
}

impl Embedder for EndpointEmbedder {
    fn model(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + self.config.deadline;
        let work = async {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(self.config.batch) {
                out.extend(self.request(chunk, deadline).await?);
            }
            Ok(out)
        };
        let Some(runtime) = &self.runtime else {
            return Err(EmbedError::Failed("embedder runtime is gone".into()));
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Blocking inside another runtime's worker is not allowed.
            std::thread::scope(|s| {
                s.spawn(|| runtime.block_on(work))
                    .join()
                    .unwrap_or_else(|_| Err(EmbedError::Failed("embedder thread panicked".into())))
            })
        } else {
            runtime.block_on(work)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(items: &[(usize, &[f32])]) -> Answer {
        Answer {
            data: items
                .iter()
                .map(|(index, v)| Item {
                    index: *index,
                    embedding: v.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn answers_are_put_in_input_order_and_normalised() {
        let v = check(answer(&[(1, &[0.0, 2.0]), (0, &[3.0, 4.0])]), 2).unwrap();
        assert_eq!(v, [vec![0.6, 0.8], vec![0.0, 1.0]]);
    }

    #[test]
    fn malformed_answers_are_refused() {
        assert!(check(answer(&[(0, &[1.0])]), 2).is_err());
        assert!(check(answer(&[(0, &[1.0]), (0, &[1.0])]), 2).is_err());
        assert!(check(answer(&[(0, &[1.0]), (5, &[1.0])]), 2).is_err());
        assert!(check(answer(&[(0, &[1.0]), (1, &[1.0, 2.0])]), 2).is_err());
        assert!(check(answer(&[(0, &[f32::NAN])]), 1).is_err());
        assert!(check(answer(&[(0, &[])]), 1).is_err());
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let config = EndpointConfig {
            url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key: Some(Secret::new("sk-secret-value")),
            dimensions: None,
            deadline: Duration::from_millis(100),
            batch: 8,
        };
        assert!(!format!("{config:?}").contains("sk-secret"));
        let bad = EndpointEmbedder::new(EndpointConfig {
            url: "ftp://x".into(),
            ..config
        });
        assert!(bad.is_err());
    }

    #[test]
    fn it_can_be_dropped_inside_an_async_context() {
        // A CLI command or the service releases its store (and so this
        // embedder) from async code; dropping the runtime there panicked.
        let embedder = EndpointEmbedder::new(EndpointConfig {
            url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key: None,
            dimensions: None,
            deadline: Duration::from_millis(100),
            batch: 8,
        })
        .unwrap();
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        outer.block_on(async move { drop(embedder) });
    }
}
