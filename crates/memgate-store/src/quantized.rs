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
    /// Per item: the sum of its codes (the VNNI scan's correction, below).
    sums: Vec<i32>,
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
                self.sums.push(0);
                self.slot.insert(item, s);
                s
            }
        };
        let codes = &mut self.codes[s * dims..(s + 1) * dims];
        self.scales[s] = quantize(vector, codes);
        self.sums[s] = codes.iter().map(|&c| i32::from(c)).sum();
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
        let mut scored = self.scan(&q);
        let n = n.min(scored.len());
        scored.select_nth_unstable_by(n - 1, |a, b| b.0.total_cmp(&a.0));
        scored[..n]
            .iter()
            .map(|&(_, i)| self.items[i as usize])
            .collect()
    }
}

impl Quantized {
    /// Every item's approximate similarity to the codes `q`, with its slot.
    fn scan(&self, q: &[i8]) -> Vec<(f32, u32)> {
        #[cfg(target_arch = "x86_64")]
        if self.dims.is_multiple_of(64)
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512bw")
        {
            // SAFETY: both features were just detected; `dims` is a
            // multiple of 64 as the kernel needs.
            return unsafe { self.scan_vnni(q) };
        }
        let dot = dot_kernel();
        self.codes
            .chunks_exact(self.dims)
            .zip(&self.scales)
            .enumerate()
            .map(|(i, (codes, scale))| (dot(codes, q) as f32 * scale, i as u32))
            .collect()
    }

    /// [`Self::scan`] with one VNNI instruction per 64 codes. `vpdpbusd`
    /// multiplies *unsigned* by signed bytes, so the query is shifted by
    /// 128 into `0..=254` and the shift taken off again with the item's
    /// code sum: `Σ (q + 128)·c − 128·Σ c = Σ q·c` (exact, in i32). This is
    /// the scan's whole cost at 100k items: it reads each code byte once,
    /// where the auto-vectorised loop widened every byte to 16 bits first
    /// (`perf`: 30% of a hybrid recall).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn scan_vnni(&self, q: &[i8]) -> Vec<(f32, u32)> {
        use std::arch::x86_64::*;
        let dims = self.dims;
        let shifted: Vec<u8> = q.iter().map(|&x| (i16::from(x) + 128) as u8).collect();
        let chunks = dims / 64;
        // SAFETY: `shifted` holds `dims` bytes, `chunks` × 64 of them.
        let query: Vec<__m512i> = (0..chunks)
            .map(|c| unsafe { _mm512_loadu_si512(shifted.as_ptr().add(c * 64).cast()) })
            .collect();
        let mut out = Vec::with_capacity(self.items.len());
        for (i, codes) in self.codes.chunks_exact(dims).enumerate() {
            let (mut even, mut odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for (c, q) in query.iter().enumerate() {
                // SAFETY: `codes` holds `dims` = `chunks` × 64 bytes.
                let v = unsafe { _mm512_loadu_si512(codes.as_ptr().add(c * 64).cast()) };
                if c % 2 == 0 {
                    even = _mm512_dpbusd_epi32(even, *q, v);
                } else {
                    odd = _mm512_dpbusd_epi32(odd, *q, v);
                }
            }
            let dot = _mm512_reduce_add_epi32(_mm512_add_epi32(even, odd)) - 128 * self.sums[i];
            out.push((dot as f32 * self.scales[i], i as u32));
        }
        out
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

    #[test]
    fn every_scan_scores_like_the_plain_dot_product() {
        // 384 dimensions: the VNNI scan where the CPU has it.
        let mut q = Quantized::default();
        for i in 0..300 {
            q.upsert(i, &unit(100 + i as u64, 384));
        }
        let (query, mut codes) = (unit(3, 384), vec![0i8; 384]);
        quantize(&query, &mut codes);
        let scanned = q.scan(&codes);
        assert_eq!(scanned.len(), 300);
        for (score, slot) in scanned {
            let s = slot as usize;
            let plain = dot_generic(&q.codes[s * 384..(s + 1) * 384], &codes) as f32 * q.scales[s];
            assert_eq!(score, plain, "slot {s}");
        }
    }
}
