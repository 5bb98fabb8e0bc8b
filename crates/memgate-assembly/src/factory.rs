//! The one factory: builds the backend named by `manager_class` the way the
//! host's factory does (the storage root injected into `backend_config`, the
//! host's keep-hook for hidden messages and the `memory.redaction` redactor
//! handed over, the tool-mode invariant
//! checked after construction) and wraps it in the [`AssembledBackend`] every
//! surface uses. The CLI, the service, MCP and the Python extension all come
//! through here, so no surface can skip a gate, a deadline or the drain.

use crate::assembled::{AssembledBackend, Gates};
use crate::config::{resolve_storage_path, runtime_home, ManagerClass, MemoryConfig};
use memgate_core::capture::host_default_keep_hidden;
use memgate_core::distill::DistillQueue;
use memgate_core::noop::NoopBackend;
use memgate_core::setup::{process_env, EnvSource};
use memgate_core::{
    BackendContext, KeepHiddenHook, MemoryBackend, MemoryError, MemoryMode, Result,
};
use memgate_openviking::OpenVikingBackend;
use memgate_store::LocalBackend;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the factory needs besides the `memory:` section.
#[derive(Clone)]
pub struct BackendSetup {
    /// The runtime home: `$MEMGATE_HOME`, else `./.memgate`.
    pub home: PathBuf,
    pub env: EnvSource,
    /// The host's `should_keep_hidden_message`; the host's default when unset.
    pub keep_hidden: Option<KeepHiddenHook>,
    /// Run the distillation worker in this process when `memory.distill` is
    /// on (long-running surfaces: `serve`, `mcp`). One-shot commands only
    /// queue; `memgate distill` runs the queue on demand.
    pub runs_distiller: bool,
}

impl BackendSetup {
    /// From the process: `$MEMGATE_HOME` (or `./.memgate`) and the real
    /// environment.
    pub fn from_process() -> Result<Self> {
        let cwd = std::env::current_dir()
            .map_err(|e| MemoryError::Config(format!("cannot read the working directory: {e}")))?;
        let home = runtime_home(std::env::var("MEMGATE_HOME").ok().as_deref(), &cwd);
        Ok(Self::new(home, process_env()))
    }

    pub fn new(home: impl Into<PathBuf>, env: EnvSource) -> Self {
        Self {
            home: home.into(),
            env,
            keep_hidden: None,
            runs_distiller: false,
        }
    }

    /// This process runs the distillation worker (see `runs_distiller`).
    pub fn running_distiller(mut self) -> Self {
        self.runs_distiller = true;
        self
    }

    /// Hands the backend the host's own keep-hook instead of the default.
    pub fn with_keep_hidden(mut self, hook: KeepHiddenHook) -> Self {
        self.keep_hidden = Some(hook);
        self
    }

    /// The storage root a backend will use for this `memory:` section.
    pub fn storage_path(&self, memory: &MemoryConfig) -> Result<PathBuf> {
        resolve_storage_path(&memory.backend_config, &self.home)
    }
}

/// Builds and assembles the backend named by `memory.manager_class`. No
/// network I/O: start-up health is `warm()`'s job. What it answers is all a
/// surface gets: a backend's fast paths are operations of the contract
/// ([`MemoryBackend::begin_capture`]), wrapped like every other.
pub fn open_backend(memory: &MemoryConfig, setup: &BackendSetup) -> Result<Arc<AssembledBackend>> {
    let (backend, distiller) = build(memory, setup)?;
    memory.deadlines.validate()?;
    let mut assembled = assembled(backend, memory);
    if let Some(distiller) = distiller {
        assembled = assembled.with_distiller(distiller)?;
    }
    Ok(Arc::new(assembled))
}

fn assembled(backend: Arc<dyn MemoryBackend>, memory: &MemoryConfig) -> AssembledBackend {
    let gates = Gates {
        enabled: memory.enabled,
        injection_enabled: memory.injection_enabled,
    };
    AssembledBackend::new(backend, gates, memory.deadlines)
}

/// Wraps a backend built elsewhere (the HTTP client of `--url`) with the
/// `memory:` section's gates and deadlines.
pub fn assemble(
    backend: Arc<dyn MemoryBackend>,
    memory: &MemoryConfig,
) -> Result<Arc<AssembledBackend>> {
    memory.deadlines.validate()?;
    Ok(Arc::new(assembled(backend, memory)))
}

/// The distillation queue of the configured store, with the store itself
/// (to shut it down): what `memgate distill` runs on demand. Refused for a
/// backend that does not distil, or with `memory.distill` off.
pub fn open_distill_queue(
    memory: &MemoryConfig,
    setup: &BackendSetup,
) -> Result<(Arc<dyn MemoryBackend>, Arc<dyn DistillQueue>)> {
    let distill = memory.distill_settings()?;
    if !distill.enabled {
        return Err(MemoryError::Config(
            "memory.distill.enabled is false: nothing distils".to_owned(),
        ));
    }
    match build_store(memory, setup, &distill)? {
        (backend, Some(queue)) => Ok((backend, queue)),
        (_, None) => Err(not_distilling(memory)),
    }
}

fn not_distilling(memory: &MemoryConfig) -> MemoryError {
    MemoryError::Config(format!(
        "memory.distill.enabled: distillation works with the stores memgate owns \
         (local, postgres), and manager_class is {}",
        memory.manager_class
    ))
}

/// The backend, and the distiller to run over it when `memory.distill` is
/// on (the stores memgate owns: `local` and `postgres`).
fn build(
    memory: &MemoryConfig,
    setup: &BackendSetup,
) -> Result<(Arc<dyn MemoryBackend>, Option<memgate_distill::Distiller>)> {
    let distill = memory.distill_settings()?;
    let (backend, queue) = build_store(memory, setup, &distill)?;
    if distill.enabled && queue.is_none() {
        return Err(not_distilling(memory));
    }
    if memory.mode == MemoryMode::Tool && !backend.capabilities().search {
        return Err(MemoryError::Config(format!(
            "memory.mode: tool mode requires a backend that implements search, and {} does not",
            backend.name()
        )));
    }
    let distiller = match queue {
        Some(queue) if distill.enabled && setup.runs_distiller => {
            Some(memgate_distill::distiller(queue, &distill, &setup.env)?)
        }
        _ => None,
    };
    Ok((backend, distiller))
}

type Queue = Arc<dyn DistillQueue>;

/// The backend named by `manager_class`, and its distillation queue when it
/// is a store memgate owns.
fn build_store(
    memory: &MemoryConfig,
    setup: &BackendSetup,
    distill: &memgate_distill::DistillSettings,
) -> Result<(Arc<dyn MemoryBackend>, Option<Queue>)> {
    let storage = setup.storage_path(memory)?;
    let mut backend_config = memory.backend_config.clone();
    backend_config.insert(
        "storage_path".to_owned(),
        Value::String(storage.display().to_string()),
    );
    let ctx = BackendContext::new(&storage)
        .with_mode(memory.mode)
        .with_env(setup.env.clone())
        .with_redactor(memory.redactor()?)
        .with_keep_hidden(
            setup
                .keep_hidden
                .clone()
                .unwrap_or_else(|| Arc::new(host_default_keep_hidden)),
        )
        .with_distill(distill.queue_limits());
    let mut queue: Option<Queue> = None;
    let backend: Arc<dyn MemoryBackend> = match memory.manager_class {
        ManagerClass::Local => {
            let local = Arc::new(LocalBackend::from_backend_config(&backend_config, &ctx)?);
            queue = Some(local.clone());
            local
        }
        ManagerClass::OpenViking => Arc::new(OpenVikingBackend::from_backend_config(
            &backend_config,
            &ctx,
        )?),
        ManagerClass::PowerContext => Arc::new(
            memgate_powercontext::PowerContextBackend::from_backend_config(&backend_config, &ctx)?,
        ),
        ManagerClass::Noop => {
            reject_keys("noop", &backend_config)?;
            Arc::new(NoopBackend)
        }
        ManagerClass::Postgres => {
            let postgres = Arc::new(memgate_postgres::PostgresBackend::from_backend_config(
                &backend_config,
                &ctx,
            )?);
            queue = Some(postgres.clone());
            postgres
        }
    };
    Ok((backend, queue))
}

/// The noop backend takes no settings besides the injected storage root.
fn reject_keys(backend: &str, config: &Map<String, Value>) -> Result<()> {
    let unknown: Vec<&str> = config
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "storage_path")
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(MemoryError::Config(format!(
            "memory.backend_config: the {backend} backend takes no settings; unknown: {}",
            unknown.join(", ")
        )))
    }
}

/// Operator-facing notes `memgate doctor` prints for a backend.
pub fn backend_notes(class: ManagerClass) -> Vec<String> {
    match class {
        ManagerClass::Local => vec![format!(
            "local: an embedded SQLite store under the storage root; nothing leaves this machine"
        )],
        ManagerClass::OpenViking => vec![
            "openviking: recall and capture only; fact management and import/export are not \
             supported (manage memories in OpenViking Studio)"
                .to_owned(),
        ],
        // Its notes name the backend themselves.
        ManagerClass::PowerContext => memgate_powercontext::doctor_notes()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        ManagerClass::Noop => vec!["noop: stores nothing and recalls nothing".to_owned()],
        ManagerClass::Postgres => vec![
            "postgres: the local store's contract on PostgreSQL; replicas share one database; \
             recall is full text, hybrid with pgvector when backend_config.embedder is set"
                .to_owned(),
        ],
    }
}

/// True when `path` exists or can be created, and a file can be written in it.
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    let probe = path.join(format!(".memgate-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"ok")?;
    std::fs::remove_file(&probe)
}
