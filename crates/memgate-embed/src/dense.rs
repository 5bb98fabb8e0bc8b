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
//! On CPUs with AVX-512 BF16 a layer also keeps its weights rounded to
//! bfloat16 ([`Precision::Bf16`]): half the bytes per pass, and one
//! `vdpbf16ps` multiplies 32 weights by two inputs, summing in float32. A
//! query is read through every weight once per pass, so this halves the
//! encoder's memory traffic; the rounding (8 significant bits, inputs too)
//! moves a sentence vector by a cosine of ~1e-4 (`examples/encode` prints
//! it). Float32 stays the exact path.

/// Outputs computed together (two AVX2 registers).
const TILE: usize = 16;
/// Rows of `x` sharing one pass over a tile of weights.
const ROWS: usize = 4;

/// How a layer multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Float32 weights and inputs: the reference.
    Exact,
    /// Weights and inputs rounded to bfloat16, products summed in float32
    /// (AVX-512 BF16; [`Precision::Exact`] where the CPU lacks it).
    Bf16,
}

/// A dense layer, its weight packed by tiles of outputs: tile `t` holds
/// `Wᵀ[k, t·TILE..(t+1)·TILE]` for every input `k` in turn (zero-padded).
pub struct Linear {
    packed: Vec<f32>,
    /// The same weights as bfloat16 ([`bf16_supported`] CPUs only, else
    /// empty): tile `t`, input pair `p` holds, for each of its [`TILE`]
    /// outputs, the weights of inputs `2p` and `2p + 1` side by side — the
    /// pairs `vdpbf16ps` multiplies.
    packed_bf16: Vec<u16>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

/// `x` rounded to the nearest bfloat16 (ties to even; the upper half of
/// its float32 bits).
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// Whether this CPU runs the bfloat16 kernel.
pub fn bf16_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

impl Linear {
    /// From PyTorch's layout: `weight` is `[out, in]` row-major.
    pub fn new(weight: &[f32], bias: Vec<f32>, inputs: usize, outputs: usize) -> Self {
        let tiles = outputs.div_ceil(TILE);
        let mut packed = vec![0.0; tiles * inputs * TILE];
        let pairs = inputs.div_ceil(2);
        let mut packed_bf16 = if bf16_supported() {
            vec![0u16; tiles * pairs * 2 * TILE]
        } else {
            Vec::new()
        };
        for (o, row) in weight.chunks_exact(inputs).enumerate() {
            let (tile, lane) = (o / TILE, o % TILE);
            for (i, w) in row.iter().enumerate() {
                packed[(tile * inputs + i) * TILE + lane] = *w;
                if let Some(b) =
                    packed_bf16.get_mut(((tile * pairs + i / 2) * TILE + lane) * 2 + i % 2)
                {
                    *b = to_bf16(*w);
                }
            }
        }
        Self {
            packed,
            packed_bf16,
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
        if precision == Precision::Bf16 && !self.packed_bf16.is_empty() {
            bf16(self, &bf16_pairs(x, self.inputs), n, &mut out);
            return out;
        }
        kernel()(self, x, n, &mut out);
        out
    }
}

/// The rows of `x` (`inputs` wide) as bfloat16 pairs: word `p` of a row
/// holds inputs `2p` (low half) and `2p + 1` (high half, 0 past the end),
/// the operand `vdpbf16ps` broadcasts.
fn bf16_pairs(x: &[f32], inputs: usize) -> Vec<u32> {
    let pairs = inputs.div_ceil(2);
    let mut out = Vec::with_capacity(x.len() / inputs.max(1) * pairs);
    for row in x.chunks_exact(inputs) {
        for pair in row.chunks(2) {
            let high = pair.get(1).map_or(0, |v| to_bf16(*v));
            out.push(u32::from(to_bf16(pair[0])) | u32::from(high) << 16);
        }
    }
    out
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

/// The bfloat16 kernel over `x` as [`bf16_pairs`].
#[cfg(target_arch = "x86_64")]
fn bf16(l: &Linear, x: &[u32], n: usize, out: &mut [f32]) {
    wide_blocks(l, n, |rows, r0, tile, pair| {
        // SAFETY: `packed_bf16` is filled only where `bf16_supported`
        // detected AVX-512F and AVX-512 BF16; `rows ≤ WIDE_ROWS` and `r0 +
        // rows ≤ n`.
        unsafe { by_rows_and_tiles!(bf16_block, rows, pair, (l, x, r0, tile, out)) }
    });
}

/// [`avx512_block`] in bfloat16: per input pair, one load of 32 weights
/// per tile and one `vdpbf16ps` per row and tile (two products per lane,
/// summed into the float32 accumulator).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16_block<const R: usize, const T: usize>(
    l: &Linear,
    x: &[u32],
    r0: usize,
    tile: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (pairs, o) = (l.inputs.div_ceil(2), l.outputs);
    let step = 2 * TILE;
    let weights = &l.packed_bf16[tile * pairs * step..(tile + T) * pairs * step];
    let rows = &x[r0 * pairs..(r0 + R) * pairs];
    let (w, a) = (weights.as_ptr(), rows.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for p in 0..pairs {
        // SAFETY: tile `t`'s pair `p` is the 32 bfloat16 at `(t·pairs +
        // p)·2·TILE` of `weights`, row `r`'s pair `p` is `rows[r·pairs +
        // p]`: both in bounds of the slices taken above. `__m512bh` is 32
        // bfloat16 in the 64 bytes of an `__m512i`.
        let wv: [__m512bh; T] = std::array::from_fn(|t| unsafe {
            std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                w.add((t * pairs + p) * step).cast(),
            ))
        });
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let v = unsafe {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    *a.add(r * pairs + p) as i32
                ))
            };
            for t in 0..T {
                acc[t] = _mm512_dpbf16_ps(acc[t], v, wv[t]);
            }
        }
    }
    add_lanes(&acc, r0, tile, o, out);
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
    fn the_bf16_kernel_multiplies_the_rounded_values_exactly_enough() {
        // 37 outputs, 29 inputs (an odd count: the last pair half empty);
        // 7 and 31 rows as above.
        for n in [7, 31] {
            let (k, o) = (29, 37);
            let value = |i: usize| ((i * 7919) % 97) as f32 / 97.0 - 0.5;
            let weight: Vec<f32> = (0..o * k).map(value).collect();
            let bias: Vec<f32> = (0..o).map(|i| value(i + 5)).collect();
            let x: Vec<f32> = (0..n * k).map(|i| value(i + 11)).collect();
            let layer = Linear::new(&weight, bias.clone(), k, o);
            let got = layer.apply_with(&x, n, Precision::Bf16);
            if !bf16_supported() {
                // No bfloat16 kernel: the exact path answers.
                assert_eq!(got, layer.apply(&x, n));
                continue;
            }
            let round = |v: f32| f32::from_bits(u32::from(to_bf16(v)) << 16);
            for r in 0..n {
                for j in 0..o {
                    let rounded = f64::from(bias[j])
                        + (0..k)
                            .map(|i| f64::from(round(x[r * k + i]) * round(weight[j * k + i])))
                            .sum::<f64>();
                    let exact = bias[j]
                        + (0..k)
                            .map(|i| x[r * k + i] * weight[j * k + i])
                            .sum::<f32>();
                    let g = got[r * o + j];
                    assert!(
                        (f64::from(g) - rounded).abs() < 1e-5,
                        "{n} rows: {g} vs {rounded}"
                    );
                    // Eight significant bits: within 1% of the inputs' scale.
                    assert!(
                        (g - exact).abs() < 0.01 * k as f32 * 0.25,
                        "{g} vs exact {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(-2.5), 0xc020);
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
