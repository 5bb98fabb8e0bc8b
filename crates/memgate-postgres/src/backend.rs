//! [`PostgresBackend`]: the `postgres` memory backend.
//!
//! Stateless apart from its pool: any number of replicas may serve the same
//! database. Correctness under concurrency comes from the database, never
//! from checks in this process: unique constraints with `ON CONFLICT` make
//! capture and remember idempotent, a per-(scope, thread) advisory lock
//! orders a thread's turns, and every statement names its (user, peer) scope.
//!
//! The schema is migrated before the first operation (and by `warm`), not in
//! the constructor, so building the backend does no network I/O.

use crate::config::PostgresConfig;
use crate::pool::{self, db_error, pool_error};
use crate::replica::{Replica, ReplicaState};
use crate::schema;
use crate::vectors::Vectors;
use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Object, Pool};
use memgate_core::{
    Acknowledgement, BackendContext, Caller, Capabilities, CaptureReport, CaptureRequest,
    CommitOutcome, Continuation, Diagnostic, Fact, FactPatch, Figure, ForgetReport, ForgetTarget,
    Handoff, HandoffContent, ImportReport, KeepHiddenHook, MemoryBackend, MemoryError,
    MemoryExport, Recall, RecallRequest, RememberOutcome, RememberRequest, Result, SearchHit,
    SearchQuery, StoredScope, WarmStatus,
};
use memgate_core::{PageRequest, ThreadList, ThreadTurns};
use memgate_embed::Embedder;
use memgate_recall::scope::ScopeKey;
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

/// The embedded default's contract on PostgreSQL (`manager_class: postgres`).
pub struct PostgresBackend {
    pub(crate) config: PostgresConfig,
    pub(crate) keep_hidden: Option<KeepHiddenHook>,
    /// Secrets in captured turns and explicit memories are replaced before
    /// they are stored (signatures stay over the original message).
    pub(crate) redactor: std::sync::Arc<memgate_core::Redactor>,
    pub(crate) pool: Pool,
    /// The read replica of recall and search, if configured ([`crate::replica`]).
    pub(crate) replica: Option<Arc<Replica>>,
    /// The embedder of hybrid recall, if configured ([`crate::vectors`]).
    pub(crate) vectors: Option<Arc<Vectors>>,
    /// `memory.distill`'s queue limits: a capture queues its new turns
    /// (`None`: distillation is off, nothing is queued).
    pub(crate) distill: Option<memgate_core::distill::QueueLimits>,
    /// Captures whose new turns were not queued because the queue was full.
    pub(crate) distill_skipped: std::sync::atomic::AtomicU64,
    /// Who this handle is when it holds distillation jobs (their lease,
    /// [`crate::distill`]): unique per handle, never shown.
    pub(crate) claimer: String,
    /// Set once the background vector indexer runs.
    indexer_started: AtomicBool,
    /// Set once the retention sweep runs in the background
    /// (`max_turn_age_days`); starts set for a backend that sweeps only
    /// when asked ([`Self::new`]).
    sweeper_started: AtomicBool,
    /// Set once every stored turn's first-turn excerpt follows this
    /// build's rules ([`crate::excerpts`]): blocks read the kept excerpts.
    pub(crate) excerpts_ready: AtomicBool,
    /// Set once stale excerpts are computed in the background; starts set
    /// for a backend that computes them only when asked ([`Self::new`]).
    backfill_started: AtomicBool,
    /// Dropped with the backend: the retention sweep and the excerpt
    /// backfill hold it weakly and end with it.
    alive: Arc<()>,
    /// Set once the schema is known to be current.
    migrated: OnceCell<()>,
    closing: AtomicBool,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What `memgate doctor` shows about the database (no secrets).
#[derive(Clone, Debug, Serialize)]
pub struct DoctorInfo {
    /// `server_version` as the server reports it.
    pub server_version: String,
    /// The memgate schema version in the database, and the one this code writes.
    pub schema_version: u32,
    pub schema_version_supported: u32,
    pub schema: String,
    pub pool: PoolState,
    /// Round trip of one query, in milliseconds.
    pub ping_ms: f64,
    /// True when this backend has an embedder (hybrid recall with pgvector).
    pub hybrid_vectors: bool,
}

/// The pool's state at one moment.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PoolState {
    pub max_size: usize,
    /// Connections open now.
    pub size: usize,
    /// Open connections not in use.
    pub available: usize,
    /// Operations waiting for a connection.
    pub waiting: usize,
}

/// `doctor`'s line about the read replica: used or dropped, and its counts.
fn replica_line(s: ReplicaState) -> Diagnostic {
    let counts = format!(
        "{} reads from the replica, {} from the primary ({} waited out a write, {} failed on the replica); dropped {} times, taken back {} times",
        s.replica_reads, s.primary_reads, s.waited_out, s.failed_reads, s.dropped, s.restored
    );
    match (s.up, s.lag_ms) {
        (true, Some(lag)) => Diagnostic::ok(
            "replica",
            format!("used for reads, lag {lag:.1} ms; {counts}"),
        ),
        _ => Diagnostic::problem(
            "replica",
            format!("not used for reads (lagging or unreachable); {counts}"),
        ),
    }
}

/// The scope key of a caller as statement parameters.
pub(crate) struct Scope {
    pub user: String,
    pub peer: String,
}

impl Scope {
    pub fn of(caller: &Caller) -> Self {
        let key = ScopeKey::of(caller);
        Self {
            user: key.user,
            peer: key.peer,
        }
    }
}

/// The scope id of (`$1` user, `$2` peer), for statements that read a scope.
/// Planned (never run: `WHERE false`) on each connection [`warm`] opens,
/// so it has read the catalog entries of the tables and indexes captures,
/// recalls and distillation jobs use before its first request does.
///
/// [`warm`]: MemoryBackend::warm
const WARM_STATEMENT: &str = "SELECT NULL FROM scopes, turns, memories, memory_sources, \
     term_docs, scope_docs, distill_jobs WHERE false";

pub(crate) const SCOPE_ID: &str = "(SELECT id FROM scopes WHERE user_id = $1 AND peer = $2)";

impl PostgresBackend {
    /// Builds the backend from `memory.backend_config` and the host context.
    pub fn from_backend_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        let settings = PostgresConfig::from_backend_config(config, ctx)?;
        let embedder = settings.embedder.as_ref().map(|e| e.build()).transpose()?;
        let mut backend = Self::new(settings)?.with_keep_hidden(ctx.keep_hidden.clone());
        backend.redactor = ctx.redactor.clone();
        backend.distill = ctx.distill;
        if let Some(embedder) = embedder {
            backend = backend.with_embedder(embedder);
        }
        backend.sweeper_started = AtomicBool::new(false);
        backend.backfill_started = AtomicBool::new(false);
        Ok(backend)
    }

    /// Builds the backend over validated settings; connects on first use.
    /// Unlike [`Self::from_backend_config`] (what every surface builds), it
    /// runs no retention sweep and computes no stale first-turn excerpt in
    /// the background: tests and tools call [`Self::sweep_expired_turns`]
    /// and [`Self::compute_stale_excerpts`] when they mean to.
    pub fn new(config: PostgresConfig) -> Result<Self> {
        let pool = pool::build(&config)?;
        let replica = config
            .replica
            .as_ref()
            .map(Replica::new)
            .transpose()?
            .map(Arc::new);
        Ok(Self {
            replica,
            config,
            keep_hidden: None,
            redactor: memgate_core::Redactor::shared_default(),
            pool,
            vectors: None,
            distill: None,
            distill_skipped: std::sync::atomic::AtomicU64::new(0),
            claimer: crate::distill::new_claimer(),
            indexer_started: AtomicBool::new(false),
            sweeper_started: AtomicBool::new(true),
            excerpts_ready: AtomicBool::new(false),
            backfill_started: AtomicBool::new(true),
            alive: Arc::new(()),
            migrated: OnceCell::new(),
            closing: AtomicBool::new(false),
        })
    }

    /// Turns on hybrid recall with `embedder` (see [`crate::vectors`]): the
    /// first use applies the vector migration (pgvector required) and
    /// starts the background indexer.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.vectors = Some(Arc::new(Vectors::new(embedder)));
        self
    }

    /// Queues captured turns for distillation within `limits` (what
    /// `memory.distill` sets through the factory).
    pub fn with_distill(mut self, limits: memgate_core::distill::QueueLimits) -> Self {
        self.distill = Some(limits);
        self
    }

    /// Sets the host's keep-hook for hidden messages.
    pub fn with_keep_hidden(mut self, hook: Option<KeepHiddenHook>) -> Self {
        self.keep_hidden = hook;
        self
    }

    pub fn config(&self) -> &PostgresConfig {
        &self.config
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub(crate) fn err(&self, e: tokio_postgres::Error) -> MemoryError {
        db_error(&self.config, &e)
    }

    /// Runs `sql` as a statement prepared once per connection (a cached
    /// statement saves the parse round trip on every later call).
    async fn prepared(&self, c: &impl GenericClient, sql: &str) -> Result<Statement> {
        c.prepare_cached(sql).await.map_err(|e| self.err(e))
    }

    pub(crate) async fn rows(
        &self,
        c: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        crate::pool::query(c, &self.config, sql, params).await
    }

    pub(crate) async fn row_opt(
        &self,
        c: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let statement = self.prepared(c, sql).await?;
        c.query_opt(&statement, params)
            .await
            .map_err(|e| self.err(e))
    }

    pub(crate) async fn row(
        &self,
        c: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row> {
        let statement = self.prepared(c, sql).await?;
        c.query_one(&statement, params)
            .await
            .map_err(|e| self.err(e))
    }

    pub(crate) async fn exec(
        &self,
        c: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let statement = self.prepared(c, sql).await?;
        c.execute(&statement, params).await.map_err(|e| self.err(e))
    }

    /// A pooled connection, after the schema is known to be current.
    pub(crate) async fn client(&self) -> Result<Object> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MemoryError::Closed("postgres".to_owned()));
        }
        let mut client = self
            .pool
            .get()
            .await
            .map_err(|e| pool_error(&self.config, e))?;
        self.migrated
            .get_or_try_init(|| async {
                schema::migrate_with(
                    &mut client,
                    &self.config,
                    schema::SCHEMA_VERSION,
                    self.vectors.is_some(),
                )
                .await?;
                self.settle_excerpts(&client).await
            })
            .await?;
        self.start_indexer();
        self.start_sweeper();
        self.start_backfill();
        Ok(client)
    }

    /// A connection for a read of `scope`: the replica's when it may serve
    /// it ([`crate::replica`]), else the primary's. The flag says which.
    pub(crate) async fn read_client(&self, scope: &Scope) -> Result<(Object, bool)> {
        let primary = self.client().await?;
        if let Some(r) = &self.replica {
            r.probe_if_due(&self.pool);
            if let Some(client) = r.reader(scope, &primary).await {
                return Ok((client, true));
            }
        }
        Ok((primary, false))
    }

    /// A second connection to the server a read placed by
    /// [`Self::read_client`] runs on (the replica when `on_replica`), when
    /// its pool has one to spare now ([`crate::pool::spare`]). A standby
    /// only replays forward, so it shows the scope's writes the first
    /// connection was placed for.
    pub(crate) async fn spare_reader(&self, on_replica: bool) -> Option<Object> {
        match &self.replica {
            Some(r) if on_replica => r.spare().await,
            _ => crate::pool::spare(&self.pool).await,
        }
    }

    /// The outcome of a read that ran on the replica when `on_replica`:
    /// `None` when it failed there and must run again on the primary.
    pub(crate) fn replica_outcome<T>(
        &self,
        on_replica: bool,
        read: Result<T>,
    ) -> Option<Result<T>> {
        match (read, &self.replica) {
            (Err(e), Some(r)) if on_replica => {
                r.read_failed(&e);
                None
            }
            (read, _) => Some(read),
        }
    }

    /// The read replica's health and counts, if one is configured.
    pub fn replica_state(&self) -> Option<ReplicaState> {
        self.replica.as_ref().map(|r| r.state())
    }

    /// Starts the background vector indexer and index builder once, after
    /// the migration.
    fn start_indexer(&self) {
        if let Some(v) = &self.vectors {
            if !self.indexer_started.swap(true, Ordering::AcqRel) {
                crate::vectors::spawn_indexer(
                    self.pool.clone(),
                    self.config.clone(),
                    Arc::downgrade(v),
                );
                crate::hnsw::spawn_builder(
                    self.pool.clone(),
                    self.config.clone(),
                    Arc::downgrade(v),
                );
            }
        }
    }

    /// Starts the retention sweep once, after the migration, when a
    /// maximum turn age is configured ([`crate::retention`]).
    fn start_sweeper(&self) {
        if let Some(age) = self.config.max_turn_age {
            if !self.sweeper_started.swap(true, Ordering::AcqRel) {
                crate::retention::spawn_sweeper(
                    self.pool.clone(),
                    self.config.clone(),
                    age,
                    Arc::downgrade(&self.alive),
                );
            }
        }
    }

    /// Notes whether every stored excerpt follows this build's rules
    /// ([`crate::excerpts::settle`]), after a migration.
    async fn settle_excerpts(&self, c: &impl GenericClient) -> Result<()> {
        let ready = crate::excerpts::settle(c, &self.config).await?;
        self.excerpts_ready.store(ready, Ordering::Release);
        Ok(())
    }

    /// Whether blocks may read the kept excerpts: known, or the marker set
    /// since on the primary (by this process's backfill or another's).
    pub(crate) async fn excerpts_ready(&self) -> Result<bool> {
        if self.excerpts_ready.load(Ordering::Acquire) {
            return Ok(true);
        }
        let ready = crate::excerpts::marked(&self.client().await?, &self.config).await?;
        if ready {
            self.excerpts_ready.store(true, Ordering::Release);
        }
        Ok(ready)
    }

    /// Starts computing stale and missing first-turn excerpts in the
    /// background once, after the migration ([`crate::excerpts`]).
    fn start_backfill(&self) {
        if !self.backfill_started.swap(true, Ordering::AcqRel) {
            crate::excerpts::spawn_backfill(
                self.pool.clone(),
                self.config.clone(),
                Arc::downgrade(&self.alive),
            );
        }
    }

    /// Computes every stale and every missing first-turn excerpt now (what
    /// the background backfill does; tools and tests); how many turns this
    /// call computed.
    pub async fn compute_stale_excerpts(&self) -> Result<usize> {
        drop(self.client().await?);
        let computed = crate::excerpts::backfill(&self.pool, &self.config, || true).await?;
        self.excerpts_ready.store(true, Ordering::Release);
        Ok(computed)
    }

    /// Applies pending migrations now (under the advisory lock); returns the
    /// version found before. Idempotent.
    pub async fn migrate(&self) -> Result<u32> {
        let mut client = self
            .pool
            .get()
            .await
            .map_err(|e| pool_error(&self.config, e))?;
        let before = schema::migrate_with(
            &mut client,
            &self.config,
            schema::SCHEMA_VERSION,
            self.vectors.is_some(),
        )
        .await?;
        self.settle_excerpts(&client).await?;
        let _ = self.migrated.set(());
        self.start_indexer();
        self.start_backfill();
        Ok(before)
    }

    /// Server version, schema version and pool state, for `memgate doctor`.
    pub async fn doctor(&self) -> Result<DoctorInfo> {
        let client = self.client().await?;
        let started = Instant::now();
        let row = self
            .row(&client, "SELECT current_setting('server_version')", &[])
            .await?;
        let ping_ms = started.elapsed().as_secs_f64() * 1000.0;
        let schema_version = schema::schema_version(&client, &self.config).await?;
        drop(client);
        Ok(DoctorInfo {
            server_version: row.get(0),
            schema_version,
            schema_version_supported: schema::SCHEMA_VERSION,
            schema: self.config.schema.clone(),
            pool: self.pool_state(),
            ping_ms,
            hybrid_vectors: self.vectors.is_some(),
        })
    }

    /// `doctor`'s lines: the server, the schema against the version this
    /// build writes, the pool. Built from [`DoctorInfo`] fields only, so
    /// nothing here can print the DSN or its password.
    async fn doctor_lines(&self) -> Vec<Diagnostic> {
        let info = match self.doctor().await {
            Ok(info) => info,
            Err(e) => return vec![Diagnostic::problem("postgres", e.to_string())],
        };
        let schema_state = if info.schema_version == info.schema_version_supported {
            "current".to_owned()
        } else {
            format!("this memgate writes {}", info.schema_version_supported)
        };
        let pool = &info.pool;
        let vectors = match self.vector_progress().await {
            Ok(p) if p.model.is_some() || p.stored_model.is_some() => Some(p.diagnostic()),
            Ok(_) => None,
            Err(e) => Some(Diagnostic::problem(
                "vectors",
                format!("cannot read the progress: {e}"),
            )),
        };
        let mut lines = vec![
            Diagnostic::ok(
                "postgres",
                format!(
                    "server {} (ping {:.2} ms)",
                    info.server_version, info.ping_ms
                ),
            ),
            Diagnostic::ok(
                "postgres",
                format!(
                    "schema {} at version {} ({schema_state})",
                    info.schema, info.schema_version
                ),
            ),
            Diagnostic::ok(
                "postgres",
                format!(
                    "pool {} of {} open, {} idle, {} waiting",
                    pool.size, pool.max_size, pool.available, pool.waiting
                ),
            ),
        ];
        lines.push(match self.excerpts_ready().await {
            Ok(true) => Diagnostic::ok("first-turn excerpts", "every stored turn's is current"),
            Ok(false) => Diagnostic::ok(
                "first-turn excerpts",
                "turns stored before this version are being excerpted in the background; \
                 first-turn blocks are built from the newest 1,000 turns meanwhile",
            ),
            Err(e) => {
                Diagnostic::problem("first-turn excerpts", format!("cannot read the state: {e}"))
            }
        });
        lines.extend(vectors);
        if self.distill.is_some() {
            lines.push(memgate_core::distill::doctor_line(self).await);
        }
        if self.vectors.is_some() {
            lines.push(match self.vector_index_state().await {
                Ok(state) => state.diagnostic(),
                Err(e) => {
                    Diagnostic::problem("vector index", format!("cannot read the state: {e}"))
                }
            });
        }
        if let Some(r) = &self.replica {
            r.probe(&self.pool).await;
            lines.push(replica_line(r.state()));
        }
        lines
    }

    pub fn pool_state(&self) -> PoolState {
        let s = self.pool.status();
        PoolState {
            max_size: s.max_size,
            size: s.size,
            available: s.available,
            waiting: s.waiting,
        }
    }

    /// Every scope that ever stored something, oldest first (for `memgate migrate`).
    pub async fn scopes(&self) -> Result<Vec<ScopeKey>> {
        let client = self.client().await?;
        let rows = self
            .rows(&client, "SELECT user_id, peer FROM scopes ORDER BY id", &[])
            .await?;
        Ok(rows
            .iter()
            .map(|r| ScopeKey {
                user: r.get(0),
                peer: r.get(1),
            })
            .collect())
    }
}

#[async_trait]
impl MemoryBackend for PostgresBackend {
    fn name(&self) -> &str {
        "postgres"
    }

    async fn diagnose(&self) -> Vec<Diagnostic> {
        self.doctor_lines().await
    }

    fn figures(&self) -> Vec<Figure> {
        self.replica_state()
            .map(|s| s.figures())
            .unwrap_or_default()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            recall: true,
            capture: true,
            remember: true,
            search: true,
            facts: true,
            import_export: true,
        }
    }

    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        self.recall_block(request).await
    }

    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        self.capture_turns(request).await
    }

    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        self.remember_fact(caller, request).await
    }

    async fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.search_hits(caller, query).await
    }

    async fn list_facts(&self, caller: &Caller, include_retired: bool) -> Result<Vec<Fact>> {
        self.facts_of(caller, include_retired).await
    }

    async fn get_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        self.fact(caller, id).await
    }

    async fn revise_fact(&self, caller: &Caller, id: &str, patch: &FactPatch) -> Result<Fact> {
        self.revise(caller, id, patch).await
    }

    async fn retire_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        self.retire(caller, id).await
    }

    async fn forget(&self, caller: &Caller, target: &ForgetTarget) -> Result<ForgetReport> {
        self.forget_target(caller, target).await
    }

    async fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        self.export_scope(caller).await
    }

    async fn stored_scopes(&self, limit: usize) -> Result<Vec<StoredScope>> {
        self.list_scopes(limit).await
    }

    async fn fact_history(&self, caller: &Caller, id: &str) -> Result<Vec<Fact>> {
        PostgresBackend::fact_history(self, caller, id).await
    }

    async fn list_threads(&self, caller: &Caller, page: PageRequest) -> Result<ThreadList> {
        self.thread_page(caller, page).await
    }

    async fn read_thread(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        self.thread_turns(caller, thread, page).await
    }

    async fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        self.import_scope(caller, data).await
    }

    /// Counted in the store (what DeerFlow's memory page shows), without
    /// reading the scope's export.
    async fn holdings(&self, caller: &Caller) -> Result<memgate_core::Holdings> {
        self.count_holdings(caller).await
    }

    async fn prepare_handoff(&self, caller: &Caller, content: &HandoffContent) -> Result<Handoff> {
        self.hold_handoff(caller, content).await
    }

    async fn get_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.held_handoff(caller, id).await
    }

    async fn correct_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        self.correct_held_handoff(caller, id, content).await
    }

    async fn finalize_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.change_handoff(caller, id, Handoff::finalize).await
    }

    async fn continue_handoff(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.continue_held_handoff(caller, id).await
    }

    async fn acknowledge_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.acknowledge_held_handoff(caller, id, acknowledgement)
            .await
    }

    async fn commit_handoff(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        self.commit_held_handoff(caller, id).await
    }

    /// Ready once the server answers and the schema is current (migrating
    /// it if needed); a foreign or newer schema is an error.
    ///
    /// Leaves two connections open in the pool (one where `pool_size` is
    /// 1), each having planned [`WARM_STATEMENT`]: a distillation worker's
    /// first queue read and the first request would otherwise each open a
    /// connection and load the tables' catalog entries in the same moment.
    async fn warm(&self) -> Result<WarmStatus> {
        let client = self.client().await?;
        let spare = pool::spare(&self.pool).await;
        for c in std::iter::once(&client).chain(spare.as_ref()) {
            c.simple_query(WARM_STATEMENT)
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(WarmStatus::Ready)
    }

    /// Refuses new work, waits up to `timeout` for every pooled connection to
    /// come back (each in-flight operation holds one), then closes the pool.
    async fn shutdown(&self, timeout: Duration) -> bool {
        self.closing.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        let drained = loop {
            let s = self.pool.status();
            if s.size == s.available {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        self.pool.close();
        if !drained {
            tracing::warn!("postgres shutdown: in-flight work did not finish in time");
        }
        drained
    }
}
