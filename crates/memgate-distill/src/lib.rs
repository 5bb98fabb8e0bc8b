//! # memgate-distill — facts distilled from captured turns, off the write path
//!
//! Optional (`memory.distill.enabled`, off by default) and only for the
//! stores memgate owns. A capture commits its new turns and a durable job
//! naming them ([`memgate_core::distill::DistillQueue`] is the store's
//! side); this crate's [`Worker`] runs those jobs in the background:
//!
//! - [`settings`]: `memory.distill`, validated with errors naming the key;
//! - [`prompt`]: the job's turns and a bounded set of related current
//!   facts, as data;
//! - [`client`]: one OpenAI-compatible chat call within a total deadline;
//! - [`answer`]: the answer read strictly (tolerant of fences and chatter);
//! - [`worker`]: one repair round, apply-or-park, retries with back-off,
//!   the token budgets, figures.
//!
//! The model proposes operations (add, supersede, none) citing the turns
//! they rest on; the store applies a job's operations in one transaction
//! or parks the job with its reason. Nothing is deleted by a model.

pub mod answer;
pub mod client;
pub mod prompt;
pub mod settings;
pub mod worker;

pub use client::ChatClient;
pub use settings::DistillSettings;
pub use worker::{DistillStats, Distiller, JobEnd, RunReport, Worker, MAX_YIELD};

use memgate_core::distill::DistillQueue;
use memgate_core::setup::EnvSource;
use memgate_core::Result;
use std::sync::Arc;

/// The distiller `settings` describe over `queue`, its key read from `env`.
pub fn distiller(
    queue: Arc<dyn DistillQueue>,
    settings: &DistillSettings,
    env: &EnvSource,
) -> Result<Distiller> {
    let client = ChatClient::new(settings, settings.api_key(env)?)?;
    Ok(Distiller::new(queue, client, settings.clone()))
}
