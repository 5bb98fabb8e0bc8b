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

/// Outputs computed together (two AVX2 registers).
const TILE: usize = 16;
/// Rows of `x` sharing one pass over a tile of weights.
const ROWS: usize = 4;

/// A dense layer, its weight packed by tiles of outputs: tile `t` holds
/// `Wᵀ[k, t·TILE..(t+1)·TILE]` for every input `k` in turn (zero-padded).
pub struct Linear {
    packed: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
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
        Self {
            packed,
            bias,
            inputs,
            outputs,
        }
    }

    /// `x · Wᵀ + b` for the `n` rows of `x` (`n × inputs`).
    pub fn apply(&self, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(n * self.outputs);
        for _ in 0..n {
            out.extend_from_slice(&self.bias);
        }
        kernel()(self, &x[..n * self.inputs], n, &mut out);
        out
    }
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

#[cfg(target_arch = "x86_64")]
fn avx512(l: &Linear, x: &[f32], n: usize, out: &mut [f32]) {
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
            // SAFETY: `kernel` returns this only after detecting AVX-512F;
            // `rows ≤ WIDE_ROWS` and `r0 + rows ≤ n`.
            unsafe { avx512_dispatch(l, x, r0, rows, tile, pair, out) };
            tile += if pair { 2 } else { 1 };
        }
        r0 += rows;
    }
}

/// Calls [`avx512_block`] with `rows` and the tile count as constants.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512_dispatch(
    l: &Linear,
    x: &[f32],
    r0: usize,
    rows: usize,
    tile: usize,
    pair: bool,
    out: &mut [f32],
) {
    macro_rules! by_rows {
        ($t:literal, $($r:literal)*) => {
            match rows {
                $($r => unsafe { avx512_block::<$r, $t>(l, x, r0, tile, out) },)*
                _ => unreachable!("at most WIDE_ROWS rows"),
            }
        };
    }
    if pair {
        by_rows!(2, 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
    } else {
        by_rows!(1, 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
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
    for (r, acc) in acc.iter().enumerate() {
        for (t, acc) in acc.iter().enumerate() {
            let j0 = (tile + t) * TILE;
            let width = TILE.min(o - j0);
            let mut lanes = [0.0f32; TILE];
            // SAFETY: `lanes` holds sixteen floats.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
            let row = &mut out[(r0 + r) * o + j0..(r0 + r) * o + j0 + width];
            for (o, a) in row.iter_mut().zip(lanes) {
                *o += a;
            }
        }
    }
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
