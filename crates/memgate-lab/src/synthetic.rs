//! An embedder without a model, for benchmarks that measure what vectors
//! cost to search rather than what they mean: a unit vector of pseudo-random
//! components seeded by the text, so the same text always gets the same
//! vector.

use memgate_embed::{EmbedError, Embedder};
use memgate_testsupport::SplitMix;
use std::sync::Arc;

/// Pseudo-random unit vectors of `dims` components under a model name.
pub struct RandomEmbedder {
    model: String,
    dims: usize,
}

impl RandomEmbedder {
    /// Vectors of `dims` components under their own model name.
    pub fn new(dims: usize) -> Arc<Self> {
        Self::posing_as(&format!("bench-random/{dims}"), dims)
    }

    /// Vectors filed under `model`'s name, so a store that holds a real
    /// model's vectors takes these as more of them: a large size is filled
    /// in seconds where the model would take minutes, and searched the same.
    pub fn posing_as(model: &str, dims: usize) -> Arc<Self> {
        Arc::new(Self {
            model: model.to_owned(),
            dims,
        })
    }
}

impl Embedder for RandomEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                // FNV-1a of the text seeds the components.
                let seed = t.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
                });
                let mut rng = SplitMix::new(seed);
                let mut v: Vec<f32> = (0..self.dims).map(|_| rng.unit() as f32 - 0.5).collect();
                memgate_embed::normalize(&mut v);
                v
            })
            .collect())
    }
}
