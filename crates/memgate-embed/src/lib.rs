//! # memgate-embed — text embedders for hybrid recall
//!
//! One trait, [`Embedder`], and two implementations:
//! - [`EndpointEmbedder`]: any OpenAI-compatible `POST /v1/embeddings`
//!   (Ollama, vLLM, TEI, OpenAI), every call bounded by one total deadline
//!   (connect, headers and body);
//! - [`MiniLm`]: all-MiniLM-L6-v2 run in-process in pure Rust (its own
//!   WordPiece tokenizer and BERT encoder over `model.safetensors`), no
//!   Python, no native runtime, nothing downloaded at build or run time.
//!
//! Vectors come back L2-normalised, so a dot product is the cosine. The
//! [`Embedder::model`] string names the model *and* its dimensions: the
//! store keeps it with every vector and never compares vectors of two models.
//! Errors never carry the endpoint's key or the embedded text.

mod dense;
mod endpoint;
mod minilm;
mod wordpiece;

pub use dense::Precision;
pub use endpoint::{EndpointConfig, EndpointEmbedder};
pub use minilm::MiniLm;
pub use wordpiece::WordPiece;

/// Why an embedding could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The embedder is misconfigured or its model files are unusable.
    #[error("embedder configuration: {0}")]
    Config(String),
    /// The call did not finish within its deadline.
    #[error("embedder did not answer within {0} ms")]
    Deadline(u128),
    /// The endpoint or model failed (transport error, bad status, bad body).
    #[error("embedder failed: {0}")]
    Failed(String),
}

pub type Result<T> = std::result::Result<T, EmbedError>;

/// Turns texts into unit vectors of one fixed model.
pub trait Embedder: Send + Sync {
    /// Identifies the model and its dimensions (`minilm-l6-v2/384`); vectors
    /// of different `model` strings are never compared.
    fn model(&self) -> &str;

    /// One unit vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;

    /// The unit vector of a recall query. Embedders may answer it by a
    /// cheaper path than [`Embedder::embed`]'s (the local model's int8
    /// query path) as long as it lands in the same space; by default it is
    /// [`Embedder::embed`] of the one text.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        let mut vectors = self.embed(&[text])?;
        match (vectors.pop(), vectors.is_empty()) {
            (Some(v), true) => Ok(v),
            _ => Err(EmbedError::Failed(
                "the embedder returned a wrong number of vectors".into(),
            )),
        }
    }

    /// How many tokens the model reads `text` as, when the embedder knows
    /// (benchmarks draw queries of realistic length with it).
    fn token_count(&self, _text: &str) -> Option<usize> {
        None
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn normalize_makes_unit_vectors() {
        let mut v = vec![3.0, 4.0];
        super::normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = vec![0.0; 3];
        super::normalize(&mut z);
        assert_eq!(z, [0.0; 3]);
    }
}
