//! Dense layers `x · Wᵀ + b` for the few rows a sentence has.
//!
//! A query is ~12 tokens: a general matrix product spends most of its time
//! repacking the weight matrix on every call (measured with `perf` on
//! `examples/encode`: `matrixmultiply`'s packing 36% of the encoder, its
//! kernel 40%). Here the weights are packed once at load, tile by tile: the
//! [`TILE`] outputs `j0..j0 + TILE` of every input `k` lie side by side, so
//! a pass over one tile reads one contiguous run of memory (walking down a
//! column of a plain transposed matrix stalled on every row). Each input
//! adds `x[r, k] · Wᵀ[k, tile]` to [`TILE`] accumulators per row for a block
//! of [`ROWS`] rows, held in AVX2 registers (FMA), chosen at run time; other
//! CPUs run the same loop portably.
//!
//! On CPUs with AVX-512 VNNI a layer also keeps its weights as int8 with
//! one scale per output ([`Precision::Int8`]), and each input row is
//! quantised to int8 with its own scale when the layer is applied (dynamic
//! per-token activations). One `vpdpbusd` multiplies 64 weight bytes by four
//! inputs into sixteen int32 sums, four times the multiply-adds per
//! instruction of float32 FMA and a quarter of the weight bytes. Float32
//! stays the exact path. (A bfloat16 path, `vdpbf16ps`, was measured no
//! faster than float32 here: docs/design/dense-scan.md.)

/// Outputs computed together (two AVX2 registers).
const TILE: usize = 16;
/// Rows of `x` sharing one pass over a tile of weights.
const ROWS: usize = 4;

/// How a layer multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Float32 weights and inputs: the reference.
    Exact,
    /// Int8 weights (a scale per output) and int8 inputs (a scale per
    /// row), products summed exactly in int32 (AVX-512 VNNI;
    /// [`Precision::Exact`] where the CPU lacks it).
    Int8,
}

/// A dense layer, its weight packed by tiles of outputs: tile `t` holds
/// `Wᵀ[k, t·TILE..(t+1)·TILE]` for every input `k` in turn (zero-padded).
pub struct Linear {
    packed: Vec<f32>,
    /// The same weights as int8 ([`int8_supported`] CPUs only, else empty):
    /// tile `t`, input quad `q` holds, for each of its [`TILE`] outputs,
    /// the codes of inputs `4q..4q + 4` side by side — the bytes
    /// `vpdpbusd` multiplies.
    packed_i8: Vec<i8>,
    /// Per output: what one weight code step is worth, and the sum of its
    /// codes (the correction for inputs shifted into unsigned bytes).
    weight_scales: Vec<f32>,
    weight_sums: Vec<i32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

/// Whether this CPU runs the int8 kernel.
pub fn int8_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// What recall queries are embedded with on this CPU: int8 where it runs
/// the int8 kernel, else float32. Documents (the indexer) always use
/// [`Precision::Exact`].
pub fn query_precision() -> Precision {
    if int8_supported() {
        Precision::Int8
    } else {
        Precision::Exact
    }
}

/// `v`'s int8 codes (`round(v / scale)`, `scale = max |v| / 127`) through
/// `code`, and the scale (0 for a zero row, whose codes are not written).
#[inline(always)]
fn quantize_row(v: &[f32], mut code: impl FnMut(usize, i8)) -> f32 {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        return 0.0;
    }
    let inverse = 127.0 / max;
    for (i, x) in v.iter().enumerate() {
        code(i, round_small(x * inverse).clamp(-127.0, 127.0) as i8);
    }
    max / 127.0
}

/// `x` rounded to the nearest integer, ties to even, for `|x| < 2^22`
/// (adding and taking away 1.5 × 2^23 leaves no fraction bits): unlike
/// `f32::round`, a libm call without SSE4.1, it vectorises (`perf`: the
/// calls were 5% of an int8 query).
#[inline(always)]
fn round_small(x: f32) -> f32 {
    (x + 12_582_912.0) - 12_582_912.0
}

impl Linear {
    /// From PyTorch's layout: `weight` is `[out, in]` row-major.
    pub fn new(weight: &[f32], bias: Vec<f32>, inputs: usize, outputs: usize) -> Self {
        let tiles = outputs.div_ceil(TILE);
        let mut packed = vec![0.0; tiles * inputs * TILE];
        for (o, row) in weight.chunks_exact(inputs).enumerate() {
            let (tile, lane) = (o / TILE, o % TILE);
            for (i, w) in row.iter().enumerate() {
                packed[(tile * inputs + i) * TILE + lane] = *w;
            }
        }
        let (mut packed_i8, mut weight_scales, mut weight_sums) =
            (Vec::new(), Vec::new(), Vec::new());
        if int8_supported() {
            let quads = inputs.div_ceil(4);
            packed_i8 = vec![0i8; tiles * quads * TILE * 4];
            for (o, row) in weight.chunks_exact(inputs).enumerate() {
                let (tile, lane) = (o / TILE, o % TILE);
                let mut sum = 0;
                weight_scales.push(quantize_row(row, |i, c| {
                    packed_i8[((tile * quads + i / 4) * TILE + lane) * 4 + i % 4] = c;
                    sum += i32::from(c);
                }));
                weight_sums.push(sum);
            }
        }
        Self {
            packed,
            packed_i8,
            weight_scales,
            weight_sums,
            bias,
            inputs,
            outputs,
        }
    }

    /// `x · Wᵀ + b` for the `n` rows of `x` (`n × inputs`).
    #[cfg(test)]
    pub fn apply(&self, x: &[f32], n: usize) -> Vec<f32> {
        self.apply_with(x, n, Precision::Exact)
    }

    /// [`Self::apply`] at `precision`.
    pub fn apply_with(&self, x: &[f32], n: usize, precision: Precision) -> Vec<f32> {
        let mut out = Vec::with_capacity(n * self.outputs);
        for _ in 0..n {
            out.extend_from_slice(&self.bias);
        }
        let x = &x[..n * self.inputs];
        #[cfg(target_arch = "x86_64")]
        if precision == Precision::Int8 && !self.packed_i8.is_empty() {
            let rows = QuantizedRows::of(x, self.inputs);
            int8(self, &rows, n, &mut out);
            return out;
        }
        kernel()(self, x, n, &mut out);
        out
    }
}

/// Input rows as unsigned bytes for `vpdpbusd`: each row quantised with
/// its own scale ([`quantize_row`]) and shifted by 128 into `1..=255`,
/// `4 · inputs.div_ceil(4)` bytes a row (past the end 128, i.e. zero, which
/// meets zero weights anyway); the kernel reads them four at a time.
struct QuantizedRows {
    bytes: Vec<u8>,
    scales: Vec<f32>,
}

impl QuantizedRows {
    fn of(x: &[f32], inputs: usize) -> Self {
        #[cfg(target_arch = "x86_64")]
        if int8_supported() {
            // SAFETY: the features were just detected.
            return unsafe { Self::of_avx512(x, inputs) };
        }
        Self::of_any(x, inputs)
    }

    /// [`Self::of_any`] compiled for AVX-512 (`perf`: quantising the rows
    /// was 17% of an int8 query when compiled for the baseline CPU).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn of_avx512(x: &[f32], inputs: usize) -> Self {
        Self::of_any(x, inputs)
    }

    #[inline(always)]
    fn of_any(x: &[f32], inputs: usize) -> Self {
        let width = inputs.div_ceil(4) * 4;
        let rows = x.len() / inputs.max(1);
        let mut bytes = vec![128u8; rows * width];
        let mut scales = Vec::with_capacity(rows);
        for (row, out) in x.chunks_exact(inputs).zip(bytes.chunks_exact_mut(width)) {
            scales.push(quantize_shifted(row, &mut out[..inputs]));
        }
        Self { bytes, scales }
    }
}

/// [`quantize_row`] of `row` written as `code + 128` into `out`, in a loop
/// that vectorises: the largest magnitude is taken on the bits (for
/// numbers, a larger magnitude has larger bits), codes are stored in order.
#[inline(always)]
fn quantize_shifted(row: &[f32], out: &mut [u8]) -> f32 {
    let max_bits = row
        .iter()
        .map(|x| x.to_bits() & 0x7fff_ffff)
        .fold(0, u32::max);
    let max = f32::from_bits(max_bits);
    if max == 0.0 {
        return 0.0;
    }
    let inverse = 127.0 / max;
    for (o, x) in out.iter_mut().zip(row) {
        *o = (round_small(x * inverse).clamp(-127.0, 127.0) as i32 + 128) as u8;
    }
    max / 127.0
}

type Kernel = fn(&Linear, &[f32], usize, &mut [f32]);

/// The fastest kernel this CPU runs.
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return avx512;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return avx2;
    }
    portable
}

/// Rows of `x` an AVX-512 pass over two tiles of weights serves at most:
/// two accumulators per row plus the two weight registers fit the 32
/// vector registers. A query (~13 tokens) is one pass, so every weight is
/// read once and feeds 13 multiply-adds instead of 4.
#[cfg(target_arch = "x86_64")]
const WIDE_ROWS: usize = 14;

/// Walks the `n` rows in blocks of at most [`WIDE_ROWS`] and the tiles two
/// at a time, calling `block(rows, first row, first tile, two tiles?)`.
#[cfg(target_arch = "x86_64")]
fn wide_blocks(l: &Linear, n: usize, mut block: impl FnMut(usize, usize, usize, bool)) {
    if n == 0 {
        return;
    }
    // Blocks of nearly equal size (51 rows: 13, 13, 13, 12), not 14 + 14 +
    // 14 + 9: an uneven last block wastes its pass.
    let blocks = n.div_ceil(WIDE_ROWS);
    let tiles = l.outputs.div_ceil(TILE);
    let mut r0 = 0;
    for b in 0..blocks {
        let rows = (n - r0) / (blocks - b);
        let mut tile = 0;
        while tile < tiles {
            let pair = tiles - tile >= 2;
            block(rows, r0, tile, pair);
            tile += if pair { 2 } else { 1 };
        }
        r0 += rows;
    }
}

/// Calls `$block::<rows, tiles>$args` with the row count (1 to
/// [`WIDE_ROWS`]) and the tile count (1 or 2) as constants.
#[cfg(target_arch = "x86_64")]
macro_rules! by_rows_and_tiles {
    ($block:ident, $rows:expr, $pair:expr, $args:tt) => {
        if $pair {
            by_rows_and_tiles!(@rows $block, 2, $rows, $args, 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
        } else {
            by_rows_and_tiles!(@rows $block, 1, $rows, $args, 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
        }
    };
    (@rows $block:ident, $t:literal, $rows:expr, $args:tt, $($r:literal)*) => {
        match $rows {
            $($r => $block::<$r, $t> $args,)*
            _ => unreachable!("at most WIDE_ROWS rows"),
        }
    };
}

#[cfg(target_arch = "x86_64")]
fn avx512(l: &Linear, x: &[f32], n: usize, out: &mut [f32]) {
    wide_blocks(l, n, |rows, r0, tile, pair| {
        // SAFETY: `kernel` returns this only after detecting AVX-512F;
        // `rows ≤ WIDE_ROWS` and `r0 + rows ≤ n`.
        unsafe { by_rows_and_tiles!(avx512_block, rows, pair, (l, x, r0, tile, out)) }
    });
}

/// The int8 kernel over `x` quantised as [`QuantizedRows`].
#[cfg(target_arch = "x86_64")]
fn int8(l: &Linear, x: &QuantizedRows, n: usize, out: &mut [f32]) {
    wide_blocks(l, n, |rows, r0, tile, pair| {
        // SAFETY: `packed_i8` is filled only where `int8_supported`
        // detected AVX-512F/BW/VNNI; `rows ≤ WIDE_ROWS` and `r0 + rows ≤ n`.
        unsafe { by_rows_and_tiles!(int8_block, rows, pair, (l, x, r0, tile, out)) }
    });
}

/// [`avx512_block`] in int8: per input quad, one load of 64 weight codes
/// per tile and one `vpdpbusd` per row and tile (four products per lane,
/// summed exactly into the int32 accumulator); then per output
/// `(Σ (x + 128)·w − 128·Σ w) · row scale · weight scale`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn int8_block<const R: usize, const T: usize>(
    l: &Linear,
    x: &QuantizedRows,
    r0: usize,
    tile: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (quads, o) = (l.inputs.div_ceil(4), l.outputs);
    let step = 4 * TILE;
    let weights = &l.packed_i8[tile * quads * step..(tile + T) * quads * step];
    let rows = &x.bytes[r0 * quads * 4..(r0 + R) * quads * 4];
    let (w, a) = (weights.as_ptr(), rows.as_ptr());
    let mut acc = [[_mm512_setzero_si512(); T]; R];
    for q in 0..quads {
        // SAFETY: tile `t`'s quad `q` is the 64 codes at `(t·quads +
        // q)·4·TILE` of `weights`, row `r`'s quad `q` the four bytes at
        // `(r·quads + q)·4` of `rows`: both in bounds of the slices taken
        // above.
        let wv: [__m512i; T] = std::array::from_fn(|t| unsafe {
            _mm512_loadu_si512(w.add((t * quads + q) * step).cast())
        });
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let quad = unsafe { a.add((r * quads + q) * 4).cast::<i32>().read_unaligned() };
            let v = _mm512_set1_epi32(quad);
            for t in 0..T {
                acc[t] = _mm512_dpbusd_epi32(acc[t], v, wv[t]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        let row_scale = x.scales[r0 + r];
        for (t, acc) in acc.iter().enumerate() {
            let j0 = (tile + t) * TILE;
            let width = TILE.min(o - j0);
            let mut lanes = [0i32; TILE];
            // SAFETY: `lanes` holds sixteen int32.
            unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), *acc) };
            let row = &mut out[(r0 + r) * o + j0..(r0 + r) * o + j0 + width];
            for (j, (o, a)) in row.iter_mut().zip(lanes).enumerate() {
                let dot = a - 128 * l.weight_sums[j0 + j];
                *o += dot as f32 * row_scale * l.weight_scales[j0 + j];
            }
        }
    }
}

/// Adds the accumulators of rows `r0..` and tiles `tile..` to `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn add_lanes<const R: usize, const T: usize>(
    acc: &[[std::arch::x86_64::__m512; T]; R],
    r0: usize,
    tile: usize,
    o: usize,
    out: &mut [f32],
) {
    for (r, acc) in acc.iter().enumerate() {
        for (t, acc) in acc.iter().enumerate() {
            let j0 = (tile + t) * TILE;
            let width = TILE.min(o - j0);
            let mut lanes = [0.0f32; TILE];
            // SAFETY: `lanes` holds sixteen floats.
            unsafe { std::arch::x86_64::_mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
            let row = &mut out[(r0 + r) * o + j0..(r0 + r) * o + j0 + width];
            for (o, a) in row.iter_mut().zip(lanes) {
                *o += a;
            }
        }
    }
}

/// Rows `r0..r0 + R`, the outputs of tiles `tile..tile + T`: sixteen
/// outputs per register, one register per row and tile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_block<const R: usize, const T: usize>(
    l: &Linear,
    x: &[f32],
    r0: usize,
    tile: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (k, o) = (l.inputs, l.outputs);
    let weights = &l.packed[tile * k * TILE..(tile + T) * k * TILE];
    let rows = &x[r0 * k..(r0 + R) * k];
    let (w, a) = (weights.as_ptr(), rows.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for i in 0..k {
        // SAFETY: tile `t`'s input `i` is the sixteen floats at
        // `(t·k + i)·TILE` of `weights`, and row `r`'s input `i` is
        // `rows[r·k + i]`: both in bounds of the slices taken above.
        let wv: [__m512; T] =
            std::array::from_fn(|t| unsafe { _mm512_loadu_ps(w.add((t * k + i) * TILE)) });
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `rows` holds `R` rows of `k` inputs, so `r·k + i` is in bounds.
            let v = _mm512_set1_ps(unsafe { *a.add(r * k + i) });
            for t in 0..T {
                acc[t] = _mm512_fmadd_ps(v, wv[t], acc[t]);
            }
        }
    }
    add_lanes(&acc, r0, tile, o, out);
}

#[cfg(target_arch = "x86_64")]
fn avx2(l: &Linear, x: &[f32], n: usize, out: &mut [f32]) {
    for tile in 0..l.outputs.div_ceil(TILE) {
        let mut r0 = 0;
        while r0 + ROWS <= n {
            // SAFETY: `kernel` returns this only after detecting AVX2 and FMA.
            unsafe { avx2_block::<ROWS>(l, x, r0, tile, out) };
            r0 += ROWS;
        }
        while r0 < n {
            // SAFETY: as above.
            unsafe { avx2_block::<1>(l, x, r0, tile, out) };
            r0 += 1;
        }
    }
}

/// [`block`] with the accumulators in AVX registers (two of eight lanes per
/// row); the compiler's own vectorisation of `block` spilled them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_block<const R: usize>(
    l: &Linear,
    x: &[f32],
    r0: usize,
    tile: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (k, o) = (l.inputs, l.outputs);
    let weights = &l.packed[tile * k * TILE..(tile + 1) * k * TILE];
    let rows = &x[r0 * k..(r0 + R) * k];
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for (i, w) in weights.chunks_exact(TILE).enumerate() {
        // SAFETY: `w` holds TILE = 16 floats: two unaligned loads of eight.
        let (w0, w1) = unsafe {
            (
                _mm256_loadu_ps(w.as_ptr()),
                _mm256_loadu_ps(w.as_ptr().add(8)),
            )
        };
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = _mm256_set1_ps(rows[r * k + i]);
            acc[0] = _mm256_fmadd_ps(a, w0, acc[0]);
            acc[1] = _mm256_fmadd_ps(a, w1, acc[1]);
        }
    }
    let j0 = tile * TILE;
    let width = TILE.min(o - j0);
    for (r, acc) in acc.iter().enumerate() {
        let mut lanes = [0.0f32; TILE];
        // SAFETY: `lanes` holds sixteen floats.
        unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc[0]);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), acc[1]);
        }
        let row = &mut out[(r0 + r) * o + j0..(r0 + r) * o + j0 + width];
        for (o, a) in row.iter_mut().zip(lanes) {
            *o += a;
        }
    }
}

fn portable(l: &Linear, x: &[f32], n: usize, out: &mut [f32]) {
    for tile in 0..l.outputs.div_ceil(TILE) {
        for r in 0..n {
            block(l, x, r, tile, out);
        }
    }
}

/// Row `r`, the outputs of `tile`: `out += x · Wᵀ` (the portable kernel).
fn block(l: &Linear, x: &[f32], r: usize, tile: usize, out: &mut [f32]) {
    let (k, o) = (l.inputs, l.outputs);
    let weights = &l.packed[tile * k * TILE..(tile + 1) * k * TILE];
    let mut acc = [0.0f32; TILE];
    for (a, w) in x[r * k..(r + 1) * k].iter().zip(weights.chunks_exact(TILE)) {
        for (c, w) in acc.iter_mut().zip(w) {
            *c += a * w;
        }
    }
    let j0 = tile * TILE;
    let width = TILE.min(o - j0);
    for (o, a) in out[r * o + j0..r * o + j0 + width].iter_mut().zip(acc) {
        *o += a;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_multiplies_by_the_transposed_weight() {
        // W = [[1, 2], [3, 4], [5, 6]] (3 outputs, 2 inputs), b = [1, 0, -1]
        let layer = Linear::new(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![1.0, 0.0, -1.0], 2, 3);
        let out = layer.apply(&[1.0, 1.0, 0.0, 2.0], 2);
        assert_eq!(out, [4.0, 7.0, 10.0, 5.0, 8.0, 11.0]);
    }

    #[test]
    fn every_kernel_agrees_with_the_definition_on_uneven_sizes() {
        // 37 outputs (a pair of tiles and one more, partly filled), 29
        // inputs; 7 rows (a block of four and three single rows for AVX2,
        // one block for AVX-512) and 31 (AVX-512: blocks of 10, 10, 11).
        for n in [7, 31] {
            agrees_with_the_definition(n, 29, 37);
        }
    }

    #[test]
    fn the_int8_kernel_multiplies_the_quantised_values_exactly() {
        // 37 outputs, 29 inputs (not a multiple of four: the last quad
        // padded); 7 and 31 rows as above.
        for n in [7, 31] {
            let (k, o) = (29, 37);
            let value = |i: usize| ((i * 7919) % 97) as f32 / 97.0 - 0.5;
            let weight: Vec<f32> = (0..o * k).map(value).collect();
            let bias: Vec<f32> = (0..o).map(|i| value(i + 5)).collect();
            let x: Vec<f32> = (0..n * k).map(|i| value(i + 11)).collect();
            let layer = Linear::new(&weight, bias.clone(), k, o);
            let got = layer.apply_with(&x, n, Precision::Int8);
            if !int8_supported() {
                // No int8 kernel: the exact path answers.
                assert_eq!(got, layer.apply(&x, n));
                continue;
            }
            let codes = |row: &[f32]| {
                let mut c = vec![0i8; row.len()];
                let scale = quantize_row(row, |i, v| c[i] = v);
                (c, scale)
            };
            for r in 0..n {
                let (xc, xs) = codes(&x[r * k..(r + 1) * k]);
                for j in 0..o {
                    let (wc, ws) = codes(&weight[j * k..(j + 1) * k]);
                    let dot: i32 = xc
                        .iter()
                        .zip(&wc)
                        .map(|(a, b)| i32::from(*a) * i32::from(*b))
                        .sum();
                    let want = bias[j] + dot as f32 * xs * ws;
                    let exact = bias[j]
                        + (0..k)
                            .map(|i| x[r * k + i] * weight[j * k + i])
                            .sum::<f32>();
                    let g = got[r * o + j];
                    assert!((g - want).abs() < 1e-5, "{n} rows: {g} vs {want}");
                    // Codes of 1/127 of each row's largest value.
                    assert!((g - exact).abs() < 0.02, "{g} vs exact {exact}");
                }
            }
        }
    }

    #[test]
    fn rows_are_quantised_like_weights() {
        let row: Vec<f32> = (0..301)
            .map(|i| ((i * 37) % 101) as f32 / 13.0 - 3.9)
            .collect();
        let mut codes = vec![0i8; row.len()];
        let scale = quantize_row(&row, |i, c| codes[i] = c);
        let rows = QuantizedRows::of(&row, row.len());
        assert_eq!(rows.scales, [scale]);
        let shifted: Vec<i16> = codes.iter().map(|&c| i16::from(c) + 128).collect();
        let got: Vec<i16> = rows.bytes[..row.len()]
            .iter()
            .map(|&b| i16::from(b))
            .collect();
        assert_eq!(got, shifted);
        assert!(
            rows.bytes[row.len()..].iter().all(|&b| b == 128),
            "padding is zero"
        );
    }

    #[test]
    fn a_zero_row_quantises_to_zero() {
        let mut codes = [5i8; 3];
        assert_eq!(quantize_row(&[0.0; 3], |i, c| codes[i] = c), 0.0);
        assert_eq!(codes, [5; 3], "no code written for a zero row");
        let layer = Linear::new(&[1.0, 2.0, 3.0, 4.0], vec![0.5, -0.5], 2, 2);
        assert_eq!(
            layer.apply_with(&[0.0, 0.0], 1, Precision::Int8),
            [0.5, -0.5]
        );
    }

    fn agrees_with_the_definition(n: usize, k: usize, o: usize) {
        let value = |i: usize| ((i * 7919) % 97) as f32 / 97.0 - 0.5;
        let weight: Vec<f32> = (0..o * k).map(value).collect();
        let bias: Vec<f32> = (0..o).map(|i| value(i + 5)).collect();
        let x: Vec<f32> = (0..n * k).map(|i| value(i + 11)).collect();
        let layer = Linear::new(&weight, bias.clone(), k, o);
        let mut want = vec![0.0f32; n * o];
        for r in 0..n {
            for j in 0..o {
                want[r * o + j] = bias[j]
                    + (0..k)
                        .map(|i| x[r * k + i] * weight[j * k + i])
                        .sum::<f32>();
            }
        }
        // The portable kernel and every one this CPU runs.
        let mut kernels: Vec<Kernel> = vec![portable, kernel()];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            kernels.push(avx2);
        }
        for run in kernels {
            let mut got = Vec::new();
            for _ in 0..n {
                got.extend_from_slice(&bias);
            }
            run(&layer, &x, n, &mut got);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-4, "{n} rows: {g} vs {w}");
            }
        }
    }
}
