//! `memgate eval locomo FILE --distill replay|endpoint`: the evaluation's
//! conversations captured again into local stores with distillation on
//! (one with speaker names, one without), their jobs run by the real
//! worker ([`memgate_distill::Distiller`]) against the
//! [replay endpoint](crate::replay) or the configured `memory.distill`
//! endpoint, and recall scored with each fact counted through the turns it
//! rests on: a fact at rank r (or in the block) reaches its source turns.

use crate::locomo::{lexical, DiaId, DEPTH};
use crate::process::percentile_ms;
use crate::replay::{observations, ReplayEndpoint, ReplayScript};
use memgate_core::distill::DistillQueue;
use memgate_core::setup::EnvSource;
use memgate_core::{Caller, CaptureRequest, MemoryError, Message, RecallRequest, Result};
use memgate_distill::{DistillSettings, Distiller};
use memgate_recall::{Origin, Ranked};
use memgate_store::config::EmbedderSettings;
use memgate_store::hybrid::Ranking;
use memgate_store::{LocalBackend, LocalConfig, MemoryStore};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Who answers the distillation prompts.
#[derive(Clone)]
pub enum DistillSource {
    /// The dataset's own observations ([`crate::replay`]).
    Replay,
    /// A real endpoint: the configured `memory.distill` (enabled), its key
    /// read from `env`.
    Endpoint {
        settings: DistillSettings,
        env: EnvSource,
    },
}

impl std::fmt::Debug for DistillSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl DistillSource {
    /// The word the rows that use it carry.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Endpoint { .. } => "endpoint",
        }
    }

    /// What the rows' figures mean.
    pub fn meaning(&self) -> &'static str {
        match self {
            Self::Replay => {
                "the dataset's own facts: the pipeline's ceiling, not a model's quality"
            }
            Self::Endpoint { .. } => "the configured memory.distill model",
        }
    }
}

/// Highest turns per job for the replay (a development-split session has at most 43
/// turns, so a session is one job).
const REPLAY_TURNS_PER_JOB: u64 = 64;

/// The replay's settings: the worker's defaults, pointed at `base_url`,
/// with budgets no replay reaches (it reports no tokens).
fn replay_settings(base_url: &str) -> Result<DistillSettings> {
    DistillSettings::parse(Some(&json!({
        "enabled": true,
        "base_url": base_url,
        "model": "locomo-replay",
        "max_job_tokens": 200_000,
        "max_daily_tokens": 1_000_000_000u64,
        "max_turns_per_job": REPLAY_TURNS_PER_JOB,
    })))
}

/// What the distillation did over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DistillFigures {
    pub source: String,
    /// Observations in the file, and those resting on no stored turn.
    pub observations: usize,
    pub observations_unplaced: usize,
    pub jobs_applied: usize,
    pub jobs_parked: usize,
    /// Jobs still queued when a run stopped (the day's token budget).
    pub jobs_left: usize,
    pub facts_added: usize,
    pub facts_superseded: usize,
    /// Turns captured into the distilling store, and what the endpoint
    /// reported for them.
    pub turns: usize,
    pub model_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The lexical ranking of a question, p50 and p99 in ms: in the store
    /// without facts, and in the store that distils (what turning
    /// distillation on costs a ranking).
    pub ranking_without_facts_ms: (f64, f64),
    pub ranking_with_facts_ms: (f64, f64),
}

/// One local store with distillation on, and what maps its citations to
/// dialogue ids.
struct DistilledStore {
    backend: Arc<LocalBackend>,
    distiller: Arc<Distiller>,
    script: Option<ReplayScript>,
    _endpoint: Option<ReplayEndpoint>,
    /// Turn citation → dialogue id.
    turns: HashMap<String, DiaId>,
    /// Fact citation → the dialogue ids of its source turns.
    facts: HashMap<String, Vec<DiaId>>,
}

impl DistilledStore {
    fn store(&self) -> &MemoryStore {
        self.backend.store()
    }

    /// The dialogue ids each ranked entry reaches.
    fn reached(&self, ranked: Vec<Ranked>) -> Vec<Vec<DiaId>> {
        ranked
            .into_iter()
            .map(|r| match r.origin {
                Origin::Turn { message_id, .. } => message_id
                    .as_deref()
                    .and_then(DiaId::parse)
                    .into_iter()
                    .collect(),
                Origin::Memory => self.facts.get(&r.citation).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// The dialogue ids the no-query block reaches (each once), and its
    /// length.
    fn block(&self, asker: &Caller) -> Result<(Vec<DiaId>, usize)> {
        let block = self.store().recall(&RecallRequest {
            caller: asker.clone(),
            query: None,
        })?;
        let mut seen = HashSet::new();
        let reached = block
            .items
            .iter()
            .filter_map(|i| i.citation.as_ref())
            .flat_map(|c| match self.turns.get(&c.0) {
                Some(d) => vec![*d],
                None => self.facts.get(&c.0).cloned().unwrap_or_default(),
            })
            .filter(|d| seen.insert(*d))
            .collect();
        Ok((reached, memgate_core::budget::char_len(&block.text)))
    }
}

/// The distilling stores of one evaluation run, on a runtime of their own
/// (the evaluation is synchronous; the worker and the replay endpoint are
/// not).
pub(crate) struct Distillation {
    runtime: tokio::runtime::Runtime,
    source: DistillSource,
    named: DistilledStore,
    unnamed: DistilledStore,
    figures: DistillFigures,
    /// How long each question's lexical ranking took without facts and
    /// with them.
    ranking_times: [Vec<Duration>; 2],
}

impl Distillation {
    /// Opens both stores under `dir`; the named one ranks with `embedder`
    /// too when one is given.
    pub(crate) fn open(
        dir: &Path,
        source: &DistillSource,
        embedder: Option<&EmbedderSettings>,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| MemoryError::backend(format!("cannot start a runtime: {e}")))?;
        let open = |name: &str, embedder: Option<&EmbedderSettings>| -> Result<DistilledStore> {
            let (settings, env, script, endpoint) = match source {
                DistillSource::Replay => {
                    let script = ReplayScript::default();
                    let endpoint = runtime.block_on(ReplayEndpoint::start(script.clone()))?;
                    let settings = replay_settings(&endpoint.base_url)?;
                    let env: EnvSource = Arc::new(|_| None);
                    (settings, env, Some(script), Some(endpoint))
                }
                DistillSource::Endpoint { settings, env } => {
                    (settings.clone(), env.clone(), None, None)
                }
            };
            let config = LocalConfig {
                distill: Some(settings.queue),
                ..LocalConfig::default()
            };
            let mut store = MemoryStore::open(dir.join(name), config)?;
            if let Some(e) = embedder {
                store = store.with_embedder(e.build()?);
            }
            let backend = Arc::new(LocalBackend::from_store(store));
            let queue: Arc<dyn DistillQueue> = backend.clone();
            let distiller = Arc::new(memgate_distill::distiller(queue, &settings, &env)?);
            Ok(DistilledStore {
                backend,
                distiller,
                script,
                _endpoint: endpoint,
                turns: HashMap::new(),
                facts: HashMap::new(),
            })
        };
        let named = open("distilled.sqlite3", embedder)?;
        let unnamed = open("distilled-unnamed.sqlite3", None)?;
        Ok(Self {
            figures: DistillFigures {
                source: source.label().to_owned(),
                ..DistillFigures::default()
            },
            runtime,
            source: source.clone(),
            named,
            unnamed,
            ranking_times: Default::default(),
        })
    }

    pub(crate) fn source(&self) -> &DistillSource {
        &self.source
    }

    /// Captures one session into both stores (without speaker names into
    /// the second); each capture queues its distillation job.
    pub(crate) fn capture(&mut self, request: &CaptureRequest) -> Result<()> {
        let stored = self.named.store().capture(request)?.stored;
        self.figures.turns += stored;
        let unnamed = CaptureRequest {
            messages: request
                .messages
                .iter()
                .map(|m| Message {
                    name: None,
                    ..m.clone()
                })
                .collect(),
            ..request.clone()
        };
        self.unnamed.store().capture(&unnamed)?;
        Ok(())
    }

    /// Runs the queued jobs of a captured conversation (`sample`, scope of
    /// `asker`) in both stores, then reads the facts' provenance.
    pub(crate) fn distill(&mut self, asker: &Caller, sample: &Value, field: &str) -> Result<()> {
        let replayed = match self.source {
            DistillSource::Replay => Some(observations(sample, field)?),
            DistillSource::Endpoint { .. } => None,
        };
        if let Some(o) = &replayed {
            self.figures.observations += o.len();
        }
        for (i, store) in [&mut self.named, &mut self.unnamed].into_iter().enumerate() {
            let mut by_dia = HashMap::new();
            for r in store.store().newest_turns(asker, usize::MAX >> 1)? {
                if let Origin::Turn { message_id, .. } = &r.origin {
                    if let Some(d) = message_id.as_deref().and_then(DiaId::parse) {
                        by_dia.insert(d, r.citation.clone());
                        store.turns.insert(r.citation, d);
                    }
                }
            }
            if let (Some(script), Some(o)) = (&store.script, &replayed) {
                let unplaced = script.add(o, &by_dia);
                if i == 0 {
                    self.figures.observations_unplaced += unplaced;
                }
            }
            let report = self.runtime.block_on(store.distiller.run_until_idle())?;
            let left = self
                .runtime
                .block_on(store.backend.queue_figures("0000-00-00"))?
                .queued as usize;
            if i == 0 {
                self.figures.jobs_applied += report.applied;
                self.figures.jobs_parked += report.parked;
                self.figures.facts_added += report.facts_added;
                self.figures.facts_superseded += report.facts_superseded;
                self.figures.jobs_left = left;
            }
            for fact in store.store().list_facts(asker, false)? {
                let reached = fact
                    .sources
                    .iter()
                    .filter_map(|s| store.turns.get(s).copied())
                    .collect();
                store.facts.insert(fact.id, reached);
            }
            if store
                .store()
                .model_state()
                .is_ok_and(|m| m != memgate_store::vectors::ModelState::Off)
            {
                store.store().index_all_vectors(64)?;
            }
        }
        Ok(())
    }

    /// The named store's lexical ranking of `question`, each entry's
    /// dialogue ids.
    /// `without_facts` is how long the same question took in the store
    /// without facts; both are kept for the figures.
    pub(crate) fn lexical(
        &mut self,
        asker: &Caller,
        question: &str,
        without_facts: Duration,
    ) -> Result<Vec<Vec<DiaId>>> {
        let started = Instant::now();
        let ranked = lexical(self.named.store(), asker, question)?;
        self.ranking_times[1].push(started.elapsed());
        self.ranking_times[0].push(without_facts);
        Ok(self.named.reached(ranked))
    }

    /// The lexical ranking of `question` in the store captured without
    /// speaker names (as DeerFlow sends turns), each entry's dialogue ids.
    pub(crate) fn lexical_unnamed(
        &self,
        asker: &Caller,
        question: &str,
    ) -> Result<Vec<Vec<DiaId>>> {
        Ok(self
            .unnamed
            .reached(lexical(self.unnamed.store(), asker, question)?))
    }

    /// The named store's hybrid ranking (what recall ranks with), when it
    /// has an embedder.
    pub(crate) fn hybrid(&self, asker: &Caller, question: &str) -> Result<Vec<Vec<DiaId>>> {
        let store = self.named.store();
        let vector = store.query_vector(question);
        let ranked = store.ranked_with(asker, question, &vector, DEPTH, &Ranking::DEFAULT)?;
        Ok(self.named.reached(ranked))
    }

    /// The no-query blocks of both stores: (dialogue ids reached, length).
    pub(crate) fn blocks(&self, asker: &Caller) -> Result<[(Vec<DiaId>, usize); 2]> {
        Ok([self.named.block(asker)?, self.unnamed.block(asker)?])
    }

    /// The run's figures, the endpoint's token counts included.
    pub(crate) fn finish(mut self) -> DistillFigures {
        let stats = self.named.distiller.stats();
        self.figures.model_calls = stats.calls.load(Ordering::Relaxed);
        self.figures.prompt_tokens = stats.prompt_tokens.load(Ordering::Relaxed);
        self.figures.completion_tokens = stats.completion_tokens.load(Ordering::Relaxed);
        let [without, with] = self.ranking_times.map(|mut times| {
            times.sort_unstable();
            (percentile_ms(&times, 0.50), percentile_ms(&times, 0.99))
        });
        self.figures.ranking_without_facts_ms = without;
        self.figures.ranking_with_facts_ms = with;
        self.figures
    }
}
