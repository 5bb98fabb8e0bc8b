//! The BERT encoder both local models run (all-MiniLM-L6-v2 and
//! multilingual-e5-small are post-norm BERT encoders; they differ in their
//! tokenizer, depth and how their weights are stored): token, position and
//! type embeddings, layer-normalised, then per layer self-attention and a
//! GELU feed-forward block, each added back and layer-normalised; the
//! tokens' vectors are mean-pooled and normalised. Matrix products use
//! `matrixmultiply` (pure Rust, SIMD) for attention and [`crate::dense`]
//! for the dense layers.

use crate::dense::{Linear, Precision};
use crate::normalize;

pub(crate) struct Norm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

pub(crate) struct Layer {
    /// Query, key and value in one layer of `3 × hidden` outputs (a row of
    /// its output is `q | k | v`): the input rows are read, and quantised
    /// on the int8 path, once instead of three times. Every output is
    /// computed exactly as by its own layer, so the vectors are the same.
    pub query_key_value: Linear,
    pub attention_out: Linear,
    pub attention_norm: Norm,
    pub intermediate: Linear,
    pub output: Linear,
    pub output_norm: Norm,
}

/// The token embedding table: float32 rows, or rows of 4-bit blocks
/// ([`crate::e5`]'s format) widened one row at a time, so a 250,000-piece
/// vocabulary stays at a seventh of its float32 size in memory.
pub(crate) enum Words {
    F32(Vec<f32>),
    /// Each row: `hidden / 32` blocks of a float16 scale and 16 bytes of
    /// nibbles (byte `j` holds weight `j` low and `j + 16` high, each stored
    /// as its value plus 8).
    Q4(Vec<u8>),
}

/// Bytes of one 4-bit block: a float16 scale and 32 nibbles.
pub(crate) const Q4_BLOCK_BYTES: usize = 18;
/// Weights per 4-bit block.
pub(crate) const Q4_BLOCK: usize = 32;

/// Widens 4-bit `blocks` into `out` (`out.len() / 32` blocks).
pub(crate) fn widen_q4(blocks: &[u8], out: &mut [f32]) {
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q4_BLOCK))
    {
        let scale = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        for (j, &byte) in block[2..].iter().enumerate() {
            out[j] = (f32::from(byte & 0x0F) - 8.0) * scale;
            out[j + 16] = (f32::from(byte >> 4) - 8.0) * scale;
        }
    }
}

/// An IEEE half-precision value as f32 (subnormals, infinities and NaN
/// included).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((h >> 10) & 0x1F);
    let mantissa = f32::from(h & 0x3FF);
    sign * match exponent {
        0 => mantissa * 2f32.powi(-24),
        31 if mantissa == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1.0 + mantissa / 1024.0) * 2f32.powi(e - 15),
    }
}

impl Words {
    /// The row of token `id`, `hidden` wide (a 4-bit row widened).
    fn row(&self, id: usize, hidden: usize) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Words::F32(rows) => std::borrow::Cow::Borrowed(&rows[id * hidden..(id + 1) * hidden]),
            Words::Q4(rows) => {
                let bytes = hidden / Q4_BLOCK * Q4_BLOCK_BYTES;
                let mut row = vec![0.0f32; hidden];
                widen_q4(&rows[id * bytes..(id + 1) * bytes], &mut row);
                std::borrow::Cow::Owned(row)
            }
        }
    }

    /// How many tokens the table holds.
    pub(crate) fn rows(&self, hidden: usize) -> usize {
        match self {
            Words::F32(rows) => rows.len() / hidden,
            Words::Q4(rows) => rows.len() / (hidden / Q4_BLOCK * Q4_BLOCK_BYTES),
        }
    }
}

/// The weights of one encoder and its shape.
pub(crate) struct Encoder {
    pub hidden: usize,
    pub heads: usize,
    pub eps: f32,
    pub words: Words,
    /// One row per position, `hidden` wide.
    pub positions: Vec<f32>,
    pub token_type: Vec<f32>,
    pub embedding_norm: Norm,
    pub layers: Vec<Layer>,
}

/// Longest input in tokens for either model (MiniLM's `max_seq_length`;
/// e5 could read 512, but a document is a turn and the one before it, and
/// the encoder's cost grows with the square of the length).
const MAX_TOKENS: usize = 256;

impl Encoder {
    /// How many tokens an input is cut to: [`MAX_TOKENS`], or fewer when
    /// the model has fewer positions.
    pub fn max_tokens(&self) -> usize {
        MAX_TOKENS.min(self.positions.len() / self.hidden)
    }

    /// The unit vector of token `ids` (ids within the table, at most
    /// [`Self::max_tokens`] of them), the dense layers at `precision`
    /// (attention, norms and GELU stay float32).
    pub fn embed_ids(&self, ids: &[u32], precision: Precision) -> Vec<f32> {
        let (n, h) = (ids.len(), self.hidden);
        let mut x = vec![0.0f32; n * h];
        for (row, (&id, out)) in ids.iter().zip(x.chunks_exact_mut(h)).enumerate() {
            // word + position + type, in this order: vectors stored before
            // the encoder was shared were summed so, bit for bit.
            let word = self.words.row(id as usize, h);
            let pos = &self.positions[row * h..(row + 1) * h];
            for (j, o) in out.iter_mut().enumerate() {
                *o = word[j] + pos[j] + self.token_type[j];
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
        let h = self.hidden;
        let heads = self.heads;
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
            // SAFETY: `qkv` holds `n` rows of `3h` floats, so head `off`'s
            // `d` columns of Q and K over `n` rows at stride `3h` stay inside
            // it; `scores` holds `n × n` floats.
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
            // SAFETY: `scores` is `n × n`; V's head columns at stride `3h`
            // stay inside `qkv`; `context` holds `n × h` floats, of which
            // head `off`'s `d` columns are written at stride `h`.
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
        layer_norm_all(x, self.hidden, norm, self.eps);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_and_four_bit_blocks_widen_exactly() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7C00), f32::INFINITY);
        // Scale 0.5; byte j holds weight j (low) and j + 16 (high), each + 8.
        let mut block = vec![0x00, 0x38];
        block.extend((0..16u8).map(|j| (j % 16) | ((15 - j) << 4)));
        let mut out = [0.0f32; 32];
        widen_q4(&block, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(out[j + 16], (7.0 - j as f32) * 0.5);
        }
    }

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
}
