//! Int8 copies of a scope's unit vectors for the brute-force dense scan.
//!
//! A search compares the query with every vector of the scope; at 100k
//! items × 384 dimensions that is 154 MB of float32 per query, more memory
//! traffic than the recall budget allows. Each vector is kept here as int8
//! codes with one scale (`max |x| / 127`), a quarter of the bytes, scored
//! with integer dot products. The scan only *chooses candidates*: the caller
//! re-scores the best of them exactly from the stored float32 vectors, so
//! quantisation can change which items are looked at (with a margin of
//! [`crate::vectors`]' re-score factor), never a score recall uses.

use std::collections::HashMap;

/// One scope's vectors as int8 codes.
#[derive(Default)]
pub struct Quantized {
    dims: usize,
    items: Vec<i64>,
    /// `items.len() × dims` codes.
    codes: Vec<i8>,
    /// Per item: what one code step is worth.
    scales: Vec<f32>,
    slot: HashMap<i64, usize>,
}

/// The int8 codes of `v` into `out` and their scale (0 for a zero vector).
pub fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        out.fill(0);
        return 0.0;
    }
    let scale = max / 127.0;
    for (o, x) in out.iter_mut().zip(v) {
        *o = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

impl Quantized {
    /// Length of the vectors held (0 before the first).
    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn contains(&self, item: i64) -> bool {
        self.slot.contains_key(&item)
    }

    /// Adds `item`'s vector, or replaces it (a revised memory). A vector of
    /// another length than the first one held is ignored.
    pub fn upsert(&mut self, item: i64, vector: &[f32]) {
        if self.dims == 0 {
            self.dims = vector.len();
        }
        if vector.len() != self.dims || self.dims == 0 {
            return;
        }
        let dims = self.dims;
        let s = match self.slot.get(&item) {
            Some(&s) => s,
            None => {
                let s = self.items.len();
                self.items.push(item);
                self.codes.resize(self.codes.len() + dims, 0);
                self.scales.push(0.0);
                self.slot.insert(item, s);
                s
            }
        };
        self.scales[s] = quantize(vector, &mut self.codes[s * dims..(s + 1) * dims]);
    }

    /// The `n` items whose approximate similarity to `query` is highest (in
    /// no particular order); empty when `query` has another length.
    pub fn candidates(&self, query: &[f32], n: usize) -> Vec<i64> {
        if query.len() != self.dims || self.is_empty() || n == 0 {
            return Vec::new();
        }
        let mut q = vec![0i8; self.dims];
        // The query's own scale orders nothing: it is left out.
        quantize(query, &mut q);
        let dot = dot_kernel();
        let mut scored: Vec<(f32, u32)> = self
            .codes
            .chunks_exact(self.dims)
            .zip(&self.scales)
            .enumerate()
            .map(|(i, (codes, scale))| (dot(codes, &q) as f32 * scale, i as u32))
            .collect();
        let n = n.min(scored.len());
        scored.select_nth_unstable_by(n - 1, |a, b| b.0.total_cmp(&a.0));
        scored[..n]
            .iter()
            .map(|&(_, i)| self.items[i as usize])
            .collect()
    }
}

/// `Σ a·b` over int8 codes, written for auto-vectorisation.
#[inline(always)]
fn dot_generic(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// The same loop compiled for AVX2 (16 products per instruction instead
/// of SSE2's 8); chosen at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(a: &[i8], b: &[i8]) -> i32 {
    dot_generic(a, b)
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2_safe(a: &[i8], b: &[i8]) -> i32 {
    // SAFETY: only returned by `dot_kernel` after AVX2 was detected.
    unsafe { dot_avx2(a, b) }
}

/// The fastest dot product this CPU runs.
fn dot_kernel() -> fn(&[i8], &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return dot_avx2_safe;
    }
    dot_generic
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dims: usize) -> Vec<f32> {
        let mut rng = crate::bench::SplitMix::new(seed);
        let mut v: Vec<f32> = (0..dims).map(|_| rng.unit() as f32 - 0.5).collect();
        memgate_embed::normalize(&mut v);
        v
    }

    #[test]
    fn quantized_dot_products_stay_close_to_the_exact_ones() {
        let (a, b) = (unit(1, 384), unit(2, 384));
        let (mut qa, mut qb) = (vec![0i8; 384], vec![0i8; 384]);
        let (sa, sb) = (quantize(&a, &mut qa), quantize(&b, &mut qb));
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let approx = dot_kernel()(&qa, &qb) as f32 * sa * sb;
        assert!((exact - approx).abs() < 0.01, "{exact} vs {approx}");
        assert_eq!(dot_kernel()(&qa, &qb), dot_generic(&qa, &qb));
        assert_eq!(quantize(&[0.0; 4], &mut [1; 4]), 0.0);
    }

    #[test]
    fn candidates_hold_the_exact_nearest_items() {
        let mut q = Quantized::default();
        let vectors: Vec<Vec<f32>> = (0..2000).map(|i| unit(10 + i, 64)).collect();
        for (i, v) in vectors.iter().enumerate() {
            q.upsert(i as i64, v);
        }
        let query = unit(7, 64);
        let mut exact: Vec<(f32, i64)> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (v.iter().zip(&query).map(|(x, y)| x * y).sum(), i as i64))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        // Four times as many candidates as wanted hold the exact top 10.
        let found = q.candidates(&query, 40);
        assert_eq!(found.len(), 40);
        for (_, item) in &exact[..10] {
            assert!(found.contains(item), "exact neighbour {item} missed");
        }
        // A replaced vector is scored by its new value.
        q.upsert(exact[1999].1, &query);
        assert!(q.candidates(&query, 1).contains(&exact[1999].1));
        assert_eq!(q.items.len(), 2000);
        assert!(q.candidates(&[1.0; 3], 5).is_empty());
    }
}
