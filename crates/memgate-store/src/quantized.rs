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
//!
//! Before the int8 scan, a 1-bit pass narrows the field: each vector's
//! signs (48 bytes at 384 dimensions, taken from its codes) are compared
//! with the query's by Hamming distance, and only the `keep` closest go on
//! to the int8 scan. At 100k items that reads 4.8 MB instead of 38 MB; the
//! sign agreement of two unit vectors falls with the angle between them, so
//! near items stay in when `keep` is a margin above what the int8 scan
//! passes on ([`crate::vectors`]' prefilter factor, measured there).

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
    /// Per item: [`Self::words`] words of sign bits (bit `d` set when code
    /// `d` is positive), for the 1-bit pass.
    signs: Vec<u64>,
    slot: HashMap<i64, usize>,
}

/// The sign bits of `v` into `out` (bit `d` of word `d / 64` set when
/// `v[d] > 0`).
pub fn sign_bits<T: Copy + PartialOrd + Default>(v: &[T], out: &mut [u64]) {
    out.fill(0);
    for (d, x) in v.iter().enumerate() {
        if *x > T::default() {
            out[d / 64] |= 1 << (d % 64);
        }
    }
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

    /// Words of sign bits per item.
    fn words(&self) -> usize {
        self.dims.div_ceil(64)
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
        let (dims, words) = (self.dims, self.words());
        let s = match self.slot.get(&item) {
            Some(&s) => s,
            None => {
                let s = self.items.len();
                self.items.push(item);
                self.codes.resize(self.codes.len() + dims, 0);
                self.scales.push(0.0);
                self.sums.push(0);
                self.signs.resize(self.signs.len() + words, 0);
                self.slot.insert(item, s);
                s
            }
        };
        let codes = &mut self.codes[s * dims..(s + 1) * dims];
        self.scales[s] = quantize(vector, codes);
        self.sums[s] = codes.iter().map(|&c| i32::from(c)).sum();
        sign_bits(codes, &mut self.signs[s * words..(s + 1) * words]);
    }

    /// The `n` items whose approximate similarity to `query` is highest (in
    /// no particular order); empty when `query` has another length. With
    /// more than `keep` items, only the `keep` (at least `n`) whose signs
    /// agree most with the query's are scored in int8 (the module doc).
    pub fn candidates(&self, query: &[f32], n: usize, keep: usize) -> Vec<i64> {
        if query.len() != self.dims || self.is_empty() || n == 0 {
            return Vec::new();
        }
        let mut q = vec![0i8; self.dims];
        // The query's own scale orders nothing: it is left out.
        quantize(query, &mut q);
        let slots: Vec<u32> = if keep.max(n) < self.items.len() {
            let mut bits = vec![0u64; self.words()];
            sign_bits(query, &mut bits);
            self.closest_signs(&bits, keep.max(n))
        } else {
            (0..self.items.len() as u32).collect()
        };
        let mut scored = self.scan(&q, &slots);
        let n = n.min(scored.len());
        scored.select_nth_unstable_by(n - 1, |a, b| b.0.total_cmp(&a.0));
        scored[..n]
            .iter()
            .map(|&(_, i)| self.items[i as usize])
            .collect()
    }
}

impl Quantized {
    /// The `keep` slots whose sign bits are nearest to `bits` in Hamming
    /// distance (ties at the cut broken by slot order), in slot order.
    /// Distances are at most `dims`, so a histogram finds the cut in one
    /// pass instead of a sort.
    fn closest_signs(&self, bits: &[u64], keep: usize) -> Vec<u32> {
        let distances = hamming_kernel()(&self.signs, bits);
        let mut histogram = vec![0usize; self.words() * 64 + 1];
        for &d in &distances {
            histogram[usize::from(d)] += 1;
        }
        // `cut`: the largest distance taken; `at_cut`: how many of it.
        let (mut cut, mut below) = (0, 0);
        while below + histogram[cut] < keep {
            below += histogram[cut];
            cut += 1;
        }
        let mut at_cut = keep - below;
        let mut out = Vec::with_capacity(keep);
        for (slot, &d) in distances.iter().enumerate() {
            let d = usize::from(d);
            if d < cut || (d == cut && at_cut > 0) {
                if d == cut {
                    at_cut -= 1;
                }
                out.push(slot as u32);
            }
        }
        out
    }

    /// The approximate similarity to the codes `q` of each of `slots`, with
    /// its slot.
    fn scan(&self, q: &[i8], slots: &[u32]) -> Vec<(f32, u32)> {
        #[cfg(target_arch = "x86_64")]
        if self.dims.is_multiple_of(64)
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512bw")
        {
            // SAFETY: both features were just detected; `dims` is a
            // multiple of 64 as the kernel needs.
            return unsafe { self.scan_vnni(q, slots) };
        }
        self.scan_with(dot_kernel(), q, slots)
    }

    /// [`Self::scan`] with the dot product given (CPUs without VNNI).
    fn scan_with(&self, dot: fn(&[i8], &[i8]) -> i32, q: &[i8], slots: &[u32]) -> Vec<(f32, u32)> {
        let dims = self.dims;
        slots
            .iter()
            .map(|&s| {
                let i = s as usize;
                let codes = &self.codes[i * dims..(i + 1) * dims];
                (dot(codes, q) as f32 * self.scales[i], s)
            })
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
    unsafe fn scan_vnni(&self, q: &[i8], slots: &[u32]) -> Vec<(f32, u32)> {
        use std::arch::x86_64::*;
        let dims = self.dims;
        let shifted: Vec<u8> = q.iter().map(|&x| (i16::from(x) + 128) as u8).collect();
        let chunks = dims / 64;
        // SAFETY: `shifted` holds `dims` bytes, `chunks` × 64 of them.
        let query: Vec<__m512i> = (0..chunks)
            .map(|c| unsafe { _mm512_loadu_si512(shifted.as_ptr().add(c * 64).cast()) })
            .collect();
        let mut out = Vec::with_capacity(slots.len());
        for &s in slots {
            let i = s as usize;
            let codes = &self.codes[i * dims..(i + 1) * dims];
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
            out.push((dot as f32 * self.scales[i], s));
        }
        out
    }
}

/// Hamming distances of every item's sign words (`signs`, `bits.len()`
/// words each) to `bits`.
type HammingKernel = fn(&[u64], &[u64]) -> Vec<u16>;

/// The fastest Hamming kernel this CPU runs.
fn hamming_kernel() -> HammingKernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512vpopcntdq")
            && std::arch::is_x86_feature_detected!("avx512f")
        {
            return hamming_vpopcntdq_safe;
        }
        if std::arch::is_x86_feature_detected!("popcnt") {
            return hamming_popcnt_safe;
        }
    }
    hamming_generic
}

#[inline(always)]
fn hamming_generic(signs: &[u64], bits: &[u64]) -> Vec<u16> {
    signs
        .chunks_exact(bits.len())
        .map(|item| {
            item.iter()
                .zip(bits)
                .map(|(a, b)| (a ^ b).count_ones() as u16)
                .sum()
        })
        .collect()
}

/// The portable loop with the `popcnt` instruction (SSE4.2-era CPUs and
/// later; without it `count_ones` is a bit-twiddling sequence).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn hamming_popcnt(signs: &[u64], bits: &[u64]) -> Vec<u16> {
    hamming_generic(signs, bits)
}

#[cfg(target_arch = "x86_64")]
fn hamming_popcnt_safe(signs: &[u64], bits: &[u64]) -> Vec<u16> {
    // SAFETY: only returned by `hamming_kernel` after POPCNT was detected.
    unsafe { hamming_popcnt(signs, bits) }
}

#[cfg(target_arch = "x86_64")]
fn hamming_vpopcntdq_safe(signs: &[u64], bits: &[u64]) -> Vec<u16> {
    // SAFETY: only returned by `hamming_kernel` after AVX-512F and
    // VPOPCNTDQ were detected.
    unsafe { hamming_vpopcntdq(signs, bits) }
}

/// Eight words per instruction: an item's words (six at 384 dimensions)
/// are loaded under a mask, XORed with the query's, counted lane by lane
/// (`vpopcntq`) and summed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
unsafe fn hamming_vpopcntdq(signs: &[u64], bits: &[u64]) -> Vec<u16> {
    use std::arch::x86_64::*;
    let words = bits.len();
    let lanes = |from: usize| -> __mmask8 { (((1u32 << (words - from).min(8)) - 1) & 0xff) as u8 };
    let mut out = Vec::with_capacity(signs.len() / words.max(1));
    for item in signs.chunks_exact(words) {
        let mut count = _mm512_setzero_si512();
        for from in (0..words).step_by(8) {
            let mask = lanes(from);
            // SAFETY: the mask covers only the words from `from` to the
            // end of `item` and of `bits` (both `words` long).
            let (a, b) = unsafe {
                (
                    _mm512_maskz_loadu_epi64(mask, item.as_ptr().add(from).cast()),
                    _mm512_maskz_loadu_epi64(mask, bits.as_ptr().add(from).cast()),
                )
            };
            count = _mm512_add_epi64(count, _mm512_popcnt_epi64(_mm512_xor_si512(a, b)));
        }
        out.push(_mm512_reduce_add_epi64(count) as u16);
    }
    out
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
        let mut rng = memgate_testsupport::SplitMix::new(seed);
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

    /// `vectors` indexed by position, and (exact cosine, position) of each,
    /// best first.
    fn indexed_with_exact_order(
        vectors: &[Vec<f32>],
        query: &[f32],
    ) -> (Quantized, Vec<(f32, i64)>) {
        let mut q = Quantized::default();
        for (i, v) in vectors.iter().enumerate() {
            q.upsert(i as i64, v);
        }
        let mut exact: Vec<(f32, i64)> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (v.iter().zip(query).map(|(x, y)| x * y).sum(), i as i64))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        (q, exact)
    }

    #[test]
    fn candidates_hold_the_exact_nearest_items() {
        let vectors: Vec<Vec<f32>> = (0..2000).map(|i| unit(10 + i, 64)).collect();
        let query = unit(7, 64);
        let (mut q, exact) = indexed_with_exact_order(&vectors, &query);
        // Four times as many candidates as wanted hold the exact top 10.
        let found = q.candidates(&query, 40, usize::MAX);
        assert_eq!(found.len(), 40);
        for (_, item) in &exact[..10] {
            assert!(found.contains(item), "exact neighbour {item} missed");
        }
        // A replaced vector is scored by its new value.
        q.upsert(exact[1999].1, &query);
        assert!(q.candidates(&query, 1, usize::MAX).contains(&exact[1999].1));
        assert_eq!(q.items.len(), 2000);
        assert!(q.candidates(&[1.0; 3], 5, usize::MAX).is_empty());
    }

    /// The Hamming kernels this CPU runs, with their names.
    fn hamming_kernels() -> Vec<(&'static str, HammingKernel)> {
        let mut kernels: Vec<(&str, HammingKernel)> = vec![("portable", hamming_generic)];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("popcnt") {
                kernels.push(("popcnt", hamming_popcnt_safe));
            }
            if std::arch::is_x86_feature_detected!("avx512vpopcntdq")
                && std::arch::is_x86_feature_detected!("avx512f")
            {
                kernels.push(("vpopcntdq", hamming_vpopcntdq_safe));
            }
        }
        kernels
    }

    #[test]
    fn every_hamming_kernel_counts_the_differing_signs() {
        // 64 dimensions (one word), 384 (six: one masked load), 600 (ten:
        // a full load and a masked one).
        for dims in [64usize, 384, 600] {
            let words = dims.div_ceil(64);
            let (query, mut bits) = (unit(5, dims), vec![0u64; words]);
            sign_bits(&query, &mut bits);
            let items: Vec<Vec<f32>> = (0..37).map(|i| unit(200 + i, dims)).collect();
            let mut signs = vec![0u64; items.len() * words];
            for (v, out) in items.iter().zip(signs.chunks_exact_mut(words)) {
                sign_bits(v, out);
            }
            let want: Vec<u16> = items
                .iter()
                .map(|v| {
                    v.iter()
                        .zip(&query)
                        .filter(|(a, b)| (**a > 0.0) != (**b > 0.0))
                        .count() as u16
                })
                .collect();
            for (name, kernel) in hamming_kernels() {
                assert_eq!(kernel(&signs, &bits), want, "{name}, {dims} dimensions");
            }
        }
    }

    #[test]
    fn the_sign_pass_keeps_exactly_the_closest_signs() {
        let mut q = Quantized::default();
        for i in 0..500 {
            q.upsert(i, &unit(300 + i as u64, 384));
        }
        let mut bits = vec![0u64; 6];
        sign_bits(&unit(9, 384), &mut bits);
        let distances = hamming_kernel()(&q.signs, &bits);
        for keep in [1, 37, 250, 499] {
            let kept = q.closest_signs(&bits, keep);
            assert_eq!(kept.len(), keep);
            let worst_kept = kept.iter().map(|&s| distances[s as usize]).max().unwrap();
            let best_dropped = (0..500u32)
                .filter(|s| !kept.contains(s))
                .map(|s| distances[s as usize])
                .min()
                .unwrap();
            assert!(
                worst_kept <= best_dropped,
                "keep {keep}: {worst_kept} > {best_dropped}"
            );
        }
    }

    #[test]
    fn the_sign_pass_keeps_the_near_items_of_a_large_scope() {
        // 20 items near the query among 5,000 unrelated ones; a pass that
        // keeps 200 (five times the 40 int8 candidates) still finds the
        // exact top 10, and a scope no larger than `keep` skips it.
        let dims = 384;
        let query = unit(11, dims);
        // The near items last: a pass that kept the first slots would fail.
        let mut vectors: Vec<Vec<f32>> = (0..5000).map(|i| unit(5000 + i, dims)).collect();
        vectors.extend((0..20).map(|i| {
            let noise = unit(1000 + i, dims);
            let mut v: Vec<f32> = query
                .iter()
                .zip(&noise)
                .map(|(a, b)| a + (0.5 + i as f32 / 20.0) * b)
                .collect();
            memgate_embed::normalize(&mut v);
            v
        }));
        let (q, exact) = indexed_with_exact_order(&vectors, &query);
        let found = q.candidates(&query, 40, 200);
        assert_eq!(found.len(), 40);
        for (_, item) in &exact[..10] {
            assert!(
                found.contains(item),
                "exact neighbour {item} dropped by the sign pass"
            );
        }
        let mut all = q.candidates(&query, 40, 5020);
        let mut full = q.candidates(&query, 40, usize::MAX);
        all.sort_unstable();
        full.sort_unstable();
        assert_eq!(all, full);
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
        // Every slot, and a subset in the order the sign pass gives.
        let subset: Vec<u32> = (0..300).filter(|s| s % 7 != 3).collect();
        for slots in [(0..300).collect::<Vec<u32>>(), subset] {
            // The scan this CPU runs, and the two the others do.
            let mut scans = vec![
                q.scan(&codes, &slots),
                q.scan_with(dot_generic, &codes, &slots),
            ];
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                scans.push(q.scan_with(dot_avx2_safe, &codes, &slots));
            }
            for scanned in scans {
                assert_eq!(scanned.len(), slots.len());
                for ((score, slot), want) in scanned.into_iter().zip(&slots) {
                    assert_eq!(slot, *want);
                    let s = slot as usize;
                    let plain =
                        dot_generic(&q.codes[s * 384..(s + 1) * 384], &codes) as f32 * q.scales[s];
                    assert_eq!(score, plain, "slot {s}");
                }
            }
        }
    }
}
