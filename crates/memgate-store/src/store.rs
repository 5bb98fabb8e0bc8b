//! [`MemoryStore`]: the synchronous store the async backend wraps (and that
//! language bindings can call directly).
//!
//! Every method of the store is here, and each is short: it takes the lock
//! or snapshot it needs from `db` (one writer connection behind a mutex,
//! pooled readers, durable commits) and hands the connection to the module
//! of its concern, with the state that module
//! needs: [`crate::capture`], [`crate::facts`], [`crate::forget`],
//! [`crate::transfer`], [`crate::recall`] with [`crate::hybrid`] and
//! [`crate::ranking`], [`crate::first_turn`], [`crate::vectors`]. Those
//! modules never see the store, so the imports point one way: from here to
//! them.

use crate::capture::{self, Intake, Streamed};
use crate::config::LocalConfig;
use crate::db::Db;
use crate::distill;
use crate::facts::{self, MemoryId};
use crate::first_turn::BlockCache;
use crate::forget::{self, SWEEP_BATCH, SWEEP_MAX_BATCHES};
use crate::hybrid::{self, QueryVector, Ranker, Ranking};
use crate::ranking::{self, TermCounts};
use crate::recall;
use crate::schema;
use crate::scope::{self, ScopeRow};
use crate::threads;
use crate::transfer;
use crate::vectors::{self, ModelState, Vectorizer};
use memgate_core::distill::{Applied, DistillJob, Operation, ParkedJob, QueueDepth, QueueFigures};
use memgate_core::redaction::redact_remember;
use memgate_core::time::now_rfc3339;
use memgate_core::{
    Caller, CaptureReport, CaptureRequest, Fact, FactPatch, ForgetReport, ForgetTarget,
    ImportReport, KeepHiddenHook, MemoryError, MemoryExport, Recall, RecallRequest, Redactor,
    RememberOutcome, RememberRequest, Result, SearchHit, SearchQuery, StoredScope,
};
use memgate_core::{PageRequest, ThreadList, ThreadTurns};
use memgate_embed::Embedder;
use memgate_recall::block::assemble;
use memgate_recall::citation::named_by;
use memgate_recall::ranked::{Among, Ranked};
use memgate_recall::scope::ScopeKey;
use memgate_recall::turns::NewTurn;
use memgate_recall::vectors::{RetrievalCounts, VectorProgress};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::SystemTime;

/// The embedded memory store over one SQLite file.
pub struct MemoryStore {
    db: Db,
    config: LocalConfig,
    keep_hidden: Option<KeepHiddenHook>,
    /// Applied to turn and memory text after signatures are computed.
    redactor: Arc<Redactor>,
    /// Query terms' postings counts already read (see [`TermCounts`]).
    common_terms: TermCounts,
    /// First-turn blocks of scopes not written to since they were built.
    first_turn_blocks: BlockCache,
    /// The embedder of hybrid recall, if one is configured.
    vectorizer: Option<Vectorizer>,
    /// Captures whose new turns found the distillation queue full.
    distill_skipped: AtomicU64,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("path", &self.db.path())
            .field("config", &self.config)
            .field("closed", &self.db.is_closed())
            .finish_non_exhaustive()
    }
}

/// The file and its settings.
impl MemoryStore {
    /// Opens (or creates) the database file at `path` with `config`.
    pub fn open(path: impl AsRef<Path>, config: LocalConfig) -> Result<Self> {
        let db = Db::open(path.as_ref().to_path_buf(), config.busy_timeout)?;
        Ok(Self {
            db,
            config,
            keep_hidden: None,
            redactor: Redactor::shared_default(),
            common_terms: TermCounts::default(),
            first_turn_blocks: BlockCache::default(),
            vectorizer: None,
            distill_skipped: AtomicU64::new(0),
        })
    }

    /// Sets the host's keep-hook for hidden messages (captured only when it
    /// says so).
    pub fn with_keep_hidden(mut self, hook: Option<KeepHiddenHook>) -> Self {
        self.keep_hidden = hook;
        self
    }

    /// The redactor applied before anything is stored or held.
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// Sets the redactor applied before anything is stored (the default
    /// has every built-in rule on).
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// Turns on hybrid recall with `embedder` (see [`crate::vectors`]).
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.vectorizer = Some(Vectorizer::new(embedder));
        self
    }

    /// The model the configured embedder makes vectors of (`None`: recall
    /// is lexical).
    pub fn embedder_model(&self) -> Option<&str> {
        self.vectorizer.as_ref().map(|v| v.embedder.model())
    }

    pub fn path(&self) -> &Path {
        self.db.path()
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// Frees the page caches of idle connections (see [`Db::release_idle_memory`]).
    pub fn release_idle_memory(&self) {
        self.db.release_idle_memory();
    }

    /// Page cache hits and misses of a reader connection since the last call
    /// (the counters are reset): how much of a recall the cache answers.
    pub fn page_cache_counts(&self) -> Result<(u64, u64)> {
        self.db.page_cache_counts()
    }

    /// Runs SQLite's quick integrity check (on a connection of its own);
    /// corruption is an error.
    pub fn check_integrity(&self) -> Result<()> {
        self.db.check_integrity()
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32> {
        self.db.read(schema::schema_version)
    }

    /// Copies the write-ahead log into the database file and truncates it
    /// (SQLite also does this on its own every few thousand pages).
    pub fn checkpoint(&self) -> Result<()> {
        self.db.checkpoint()
    }

    /// Stops accepting work, checkpoints the WAL into the main file and
    /// closes every connection. Later calls answer `Closed`. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.db.close()
    }

    pub fn is_closed(&self) -> bool {
        self.db.is_closed()
    }

    /// Every scope that ever stored something, in creation order (what
    /// `memgate migrate` walks).
    pub fn scopes(&self) -> Result<Vec<ScopeKey>> {
        self.db.read(scope::all_scopes)
    }
}

/// Capture ([`crate::capture`]).
impl MemoryStore {
    /// Stores the new turns of a snapshot (or compaction head) in one
    /// transaction. Requires a thread.
    pub fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        request.caller.require_thread()?;
        let captured_at = now_rfc3339();
        let seen = Cell::new(0);
        // Signatures are computed before the write lock is taken.
        let turns: Vec<Result<NewTurn>> = self
            .intake()
            .turns(request.messages.iter().map(Ok), &captured_at, &seen)
            .collect();
        self.store_turns(
            &request.caller,
            request.trace_id.as_deref(),
            turns.into_iter(),
            &seen,
        )
    }

    /// [`Self::capture`] for a transcript that arrives one message at a time
    /// (a host still converting it): each new turn is written as it arrives,
    /// so the host's conversion and the store's work overlap. The write lock
    /// is held from the first storable turn to [`Streamed::End`]. A
    /// [`Streamed::Failed`] item, or a sender gone before the end, stores
    /// nothing.
    pub fn capture_streamed(
        &self,
        caller: &Caller,
        trace_id: Option<&str>,
        items: Receiver<Streamed>,
    ) -> Result<CaptureReport> {
        let captured_at = now_rfc3339();
        let seen = Cell::new(0);
        let turns = self
            .intake()
            .turns(capture::feed(items), &captured_at, &seen);
        self.store_turns(caller, trace_id, turns, &seen)
    }

    fn intake(&self) -> Intake<'_> {
        Intake {
            keep: self.keep_hidden.as_ref(),
            redactor: &self.redactor,
        }
    }

    /// Writes `turns` in one transaction, opened by the first of them (none:
    /// no transaction); an `Err` turn rolls it back.
    fn store_turns(
        &self,
        caller: &Caller,
        trace_id: Option<&str>,
        turns: impl Iterator<Item = Result<NewTurn>>,
        seen: &Cell<usize>,
    ) -> Result<CaptureReport> {
        let thread = caller.require_thread()?;
        let mut turns = turns.peekable();
        let mut report = CaptureReport::default();
        if turns.peek().is_none() {
            // A closed store refuses even a capture that would store nothing.
            if self.is_closed() {
                return Err(MemoryError::Closed("local".to_owned()));
            }
        } else {
            let key = ScopeKey::of(caller);
            let queued = self.db.write(|tx, index| {
                let after = match self.config.distill {
                    Some(_) => distill::last_turn_id(tx)?,
                    None => 0,
                };
                capture::store_turns(tx, index, &key, thread, turns, &mut report)?;
                match (self.config.distill, key.find(tx)?) {
                    (Some(limits), Some(scope)) if report.stored > 0 => {
                        distill::queue_new_turns(tx, scope, thread, after, limits)
                    }
                    _ => Ok(distill::Queued::Nothing),
                }
            })?;
            if queued == distill::Queued::Skipped {
                self.distill_skipped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "distillation queue full: new turns were not queued (`memgate distill` queues them later)"
                );
            }
        }
        report.filtered = seen.get() - report.stored - report.already_known;
        tracing::debug!(
            stored = report.stored,
            already_known = report.already_known,
            filtered = report.filtered,
            trace_id = trace_id.unwrap_or(""),
            "local store capture"
        );
        Ok(report)
    }
}

/// Explicit memories ([`crate::facts`]).
impl MemoryStore {
    /// Stores one explicit memory, or reports the identical active one.
    pub fn remember(&self, caller: &Caller, request: &RememberRequest) -> Result<RememberOutcome> {
        // Re-validate: the request's fields are public and may be hand-built.
        let request = RememberRequest::new(&request.kind, &request.text)?
            .with_confidence(request.confidence)?;
        let request = match redact_remember(&self.redactor, &request) {
            Ok(redacted) => redacted,
            Err(refused) => return Ok(refused),
        };
        let key = ScopeKey::of(caller);
        self.db
            .write(|tx, index| facts::remember(tx, index, &key, &request))
    }

    /// The caller's memories, oldest first; retired ones only on request.
    pub fn list_facts(&self, caller: &Caller, include_retired: bool) -> Result<Vec<Fact>> {
        let key = ScopeKey::of(caller);
        self.db
            .read(|conn| facts::list(conn, &key, include_retired))
    }

    pub fn get_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let key = ScopeKey::of(caller);
        let id = MemoryId::parse(id)?;
        self.db.read(|conn| facts::get(conn, &key, id))
    }

    /// Every recorded version of a memory, oldest first.
    pub fn fact_history(&self, caller: &Caller, id: &str) -> Result<Vec<Fact>> {
        let current = self.get_fact(caller, id)?;
        let id = MemoryId::parse(id)?;
        self.db.read(|conn| facts::history_of(conn, id, &current))
    }

    /// Revises kind and/or text; the old version stays in the history.
    /// Retired memories cannot be revised; a revision that would duplicate
    /// another active memory is a conflict.
    pub fn revise_fact(&self, caller: &Caller, id: &str, patch: &FactPatch) -> Result<Fact> {
        memgate_core::facts::history::check_patch(patch)?;
        let key = ScopeKey::of(caller);
        let id = MemoryId::parse(id)?;
        self.db
            .write(|tx, index| facts::revise(tx, index, &key, id, patch, &self.redactor))
    }

    /// Retires a memory: no longer recalled or searched, never erased.
    /// Retiring a retired memory changes nothing.
    pub fn retire_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let key = ScopeKey::of(caller);
        let id = MemoryId::parse(id)?;
        self.db
            .write(|tx, index| facts::retire(tx, index, &key, id))
    }
}

/// Erasure and retention ([`crate::forget`]).
impl MemoryStore {
    /// Erases `target` in the caller's scope and every recoverable copy of
    /// it in the database files. Forgetting what is not there erases nothing
    /// and says so with zero counts; a fact id of another scope is not found.
    pub fn forget(&self, caller: &Caller, target: &ForgetTarget) -> Result<ForgetReport> {
        let key = ScopeKey::of(caller);
        let (fact, thread) = named_by(caller, target)?;
        if *target == ForgetTarget::User {
            return self.forget_user(caller);
        }
        let report = self.db.write(|tx, index| {
            forget::erase_target(tx, index, &key, target, fact, thread.as_deref())
        })?;
        self.finish_erasure(target, report)
    }

    /// What every erasure ends with, on its own: the recall index's removed
    /// entries purged and the WAL emptied. Safe at any time; it erases
    /// nothing that is still stored.
    pub fn scrub(&self) -> Result<()> {
        self.db.write(|_, index| {
            index.purge_removed();
            Ok(())
        })?;
        self.db.truncate_wal_fully()
    }

    /// Every scope of the caller's user, whatever the agent.
    fn forget_user(&self, caller: &Caller) -> Result<ForgetReport> {
        let user = caller.user.as_str().to_owned();
        let report = self
            .db
            .write(|tx, index| forget::erase_user(tx, index, &user))?;
        self.finish_erasure(&ForgetTarget::User, report)
    }

    /// Drops the in-memory vector copies, empties the WAL (it still holds
    /// the erased pages) and reports.
    fn finish_erasure(&self, target: &ForgetTarget, report: ForgetReport) -> Result<ForgetReport> {
        self.forget_vector_copies();
        self.db.truncate_wal_fully()?;
        tracing::info!(
            target_kind = target.as_str(),
            facts = report.facts,
            versions = report.versions,
            turns = report.turns,
            "local store forget"
        );
        Ok(report)
    }

    /// One retention sweep: erases captured turns older than
    /// `max_turn_age` at `now`, in batches of [`SWEEP_BATCH`] and at most
    /// [`SWEEP_MAX_BATCHES`] of them. Returns how many turns were erased;
    /// nothing to do when no maximum age is configured.
    pub fn sweep_expired_turns(&self, now: SystemTime) -> Result<usize> {
        let Some(age) = self.config.max_turn_age else {
            return Ok(0);
        };
        let before = memgate_core::forget::retention_cutoff(now, age);
        let mut erased = 0;
        for _ in 0..SWEEP_MAX_BATCHES {
            let batch = self
                .db
                .write(|tx, index| forget::erase_expired_batch(tx, index, &before))?;
            erased += batch;
            if batch < SWEEP_BATCH {
                break;
            }
        }
        if erased > 0 {
            self.forget_vector_copies();
            self.db.truncate_wal_fully()?;
            tracing::info!(erased, "local store retention sweep");
        }
        Ok(erased)
    }
}

/// Captured threads a page at a time ([`crate::threads`]).
impl MemoryStore {
    /// One page of the caller's threads, by name.
    pub fn list_threads(&self, caller: &Caller, page: PageRequest) -> Result<ThreadList> {
        let key = ScopeKey::of(caller);
        self.db.read(|conn| threads::list(conn, &key, page))
    }

    /// One page of one of the caller's threads, in order.
    pub fn read_thread(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        let key = ScopeKey::of(caller);
        self.db.read(|conn| threads::read(conn, &key, thread, page))
    }
}

/// Export and import ([`crate::transfer`]).
impl MemoryStore {
    /// The (user, agent) scopes this file holds, by user then agent.
    pub fn stored_scopes(&self, limit: usize) -> Result<Vec<StoredScope>> {
        self.db.read(|conn| transfer::stored_scopes(conn, limit))
    }

    /// Everything the caller's scope holds, in storage order.
    pub fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        let key = ScopeKey::of(caller);
        self.db.read(|conn| transfer::export(conn, &key))
    }

    /// What the caller's scope holds, counted without reading it.
    pub fn holdings(&self, caller: &Caller) -> Result<memgate_core::Holdings> {
        let key = ScopeKey::of(caller);
        self.db.read(|conn| transfer::holdings(conn, &key))
    }

    /// Merges an export into the caller's scope in one transaction; nothing
    /// is written unless every entry is valid.
    pub fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        let data = transfer::validate(data, &self.redactor)?;
        let key = ScopeKey::of(caller);
        self.db
            .write(|tx, index| transfer::import(tx, index, &key, &data))
    }
}

/// Recall, search and rankings ([`crate::recall`], [`crate::hybrid`],
/// [`crate::ranking`], [`crate::first_turn`]).
impl MemoryStore {
    fn ranker(&self) -> Ranker<'_> {
        Ranker {
            counts: &self.common_terms,
            vectorizer: self.vectorizer.as_ref(),
            distils: self.config.distill.is_some(),
        }
    }

    /// The bounded, cited block for the caller.
    ///
    /// With a query (or, when the caller gives none, a configured
    /// `injection_query`): the ranked items, then the newest
    /// `standing_memories` explicit memories not already among them, while
    /// the budget lasts. With neither: the [first-turn block](crate::first_turn),
    /// which opens with the same standing memories.
    pub fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        let settings = &self.config.recall;
        let key = ScopeKey::of(&request.caller);
        let Some(query) = recall::query_of(request, settings) else {
            let today = now_rfc3339();
            return self.db.read(|conn| match key.find(conn)? {
                Some(scope) => self.first_turn_blocks.block(
                    conn,
                    scope,
                    settings.standing_memories,
                    settings.max_injection_chars,
                    &today[..10],
                ),
                None => Ok(Recall::empty()),
            });
        };
        let vector = self.query_vector(query);
        let ranker = self.ranker();
        let ranked = self.db.read(|conn| match key.find(conn)? {
            Some(scope) => {
                recall::ranked_with_standing(conn, &ranker, scope, query, &vector, settings)
            }
            None => Ok(Vec::new()),
        })?;
        Ok(assemble(&ranked, settings.max_injection_chars))
    }

    /// How many first-turn blocks were served from the cache (unchanged
    /// scopes) since the store was opened.
    pub fn first_turn_cache_hits(&self) -> u64 {
        self.first_turn_blocks.hits()
    }

    /// Full-text search; `kind` (a memory kind, or `turn`) filters before
    /// the `top_k` cut.
    pub fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        let kind = recall::search_kind(query)?;
        let key = ScopeKey::of(caller);
        let vector = self.query_vector(&query.query);
        let ranker = self.ranker();
        let ranked = self.db.read(|conn| match key.find(conn)? {
            Some(scope) => ranker.ranked_in(
                conn,
                scope,
                &query.query,
                &vector,
                query.top_k,
                Among::of_kind(kind),
            ),
            None => Ok(Vec::new()),
        })?;
        Ok(ranked.into_iter().map(SearchHit::from).collect())
    }

    /// Ranked entries of the caller's scope for `query` among `category`,
    /// every match kept (a distilled fact under the turn it rests on too,
    /// which recall would leave out): what the search for a job's related
    /// facts reads, among memories.
    pub fn ranked(
        &self,
        caller: &Caller,
        query: &str,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        let vector = self.query_vector(query);
        let ranker = self.ranker();
        self.db.read(|conn| match key.find(conn)? {
            Some(scope) => ranker.every_match_in(conn, scope, query, &vector, top_k, category),
            None => Ok(Vec::new()),
        })
    }

    /// The caller's ranking of `query` made as `ranking` says, at most
    /// `top_k`: what recall ranks with under [`Ranking::DEFAULT`], and
    /// lexical alone with [`QueryVector::lexical`].
    pub fn ranked_with(
        &self,
        caller: &Caller,
        query: &str,
        vector: &QueryVector,
        top_k: usize,
        ranking: &Ranking,
    ) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        let ranker = self.ranker();
        self.db.read(|conn| match key.find(conn)? {
            Some(scope) => ranker.ranked_with(conn, scope, query, vector, top_k, ranking),
            None => Ok(Vec::new()),
        })
    }

    /// The caller's lexical ranking of `query` with `budget` postings scored
    /// at most (recall's is [`memgate_recall::ranked::MAXSCORE_BUDGET`]) and
    /// `counts` kept for that budget: what the budget costs in quality is
    /// measured with it.
    pub fn ranked_within(
        &self,
        caller: &Caller,
        counts: &TermCounts,
        budget: usize,
        query: &str,
        top_k: usize,
    ) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        self.db.read(|conn| match key.find(conn)? {
            Some(scope) => {
                ranking::rank_within(conn, counts, budget, scope, query, top_k, Among::All)
            }
            None => Ok(Vec::new()),
        })
    }

    /// The caller's turns and memories named by `citations` (`turn_<n>`,
    /// `mem_<n>`), in that order; one that is not the caller's, or no
    /// longer active, is left out.
    pub fn by_citation(&self, caller: &Caller, citations: &[String]) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        let items = recall::cited_items(citations);
        self.db.read(|conn| match key.find(conn)? {
            Some(scope) => recall::load_items(conn, scope, &items),
            None => Ok(Vec::new()),
        })
    }

    /// The newest `limit` turns of the caller's scope, newest first,
    /// unscored: the baseline the first-turn block is measured against.
    pub fn newest_turns(&self, caller: &Caller, limit: usize) -> Result<Vec<Ranked>> {
        let key = ScopeKey::of(caller);
        self.db.read(|conn| match key.find(conn)? {
            Some(scope) => ranking::newest_turns(conn, scope, limit),
            None => Ok(Vec::new()),
        })
    }

    /// Starts embedding `query` for a ranking on a thread of its own,
    /// redacted first (an endpoint embedder is another service; stored text
    /// is redacted too, so nothing is lost); an embedder failure is counted
    /// and logged, and ranking stays lexical. Where no thread can be
    /// started, the query is embedded here.
    pub fn query_vector(&self, query: &str) -> QueryVector {
        hybrid::query_vector(self.vectorizer.as_ref(), &self.redactor, query)
    }

    /// [`Self::query_vector`] by the embedder's full-precision query path
    /// ([`Embedder::embed_query_exact`], float32 for the local models): the
    /// reference the cheaper query path recall uses is measured against;
    /// embedded here.
    pub fn reference_query_vector(&self, query: &str) -> QueryVector {
        hybrid::reference_query_vector(self.vectorizer.as_ref(), &self.redactor, query)
    }
}

/// Dense vectors ([`crate::vectors`]).
impl MemoryStore {
    /// How the file's vectors relate to the configured embedder.
    pub fn model_state(&self) -> Result<ModelState> {
        let Some(v) = &self.vectorizer else {
            return Ok(ModelState::Off);
        };
        Ok(v.model_state(self.db.read(vectors::stored_model)?))
    }

    /// Embeds up to `batch` rows that have no vector of the current model
    /// and stores them; returns how many were written (0: caught up, no
    /// embedder, or a model mismatch). An embedder failure is an error and
    /// writes nothing.
    pub fn index_vectors(&self, batch: usize) -> Result<usize> {
        let Some(v) = &self.vectorizer else {
            return Ok(0);
        };
        let _step = v.indexing.lock().unwrap_or_else(|p| p.into_inner());
        let model = v.key();
        let (stored, work) = self.db.read(|conn| {
            Ok((
                vectors::stored_model(conn)?,
                vectors::pending(conn, model, batch.max(1))?,
            ))
        })?;
        if stored.as_deref().is_some_and(|s| s != model) || work.is_empty() {
            return Ok(0);
        }
        // Embedded outside the write lock: capture never waits for it.
        let embedded = v.embed_pending(&work)?;
        let written = self
            .db
            .write(|tx, _| vectors::store_pending(tx, model, &work, &embedded))?;
        v.stats
            .vectors_written
            .fetch_add(written as u64, Ordering::Relaxed);
        Ok(written)
    }

    /// Runs [`Self::index_vectors`] until nothing is left (evaluations,
    /// benchmarks, `memgate reindex`); returns the rows written.
    pub fn index_all_vectors(&self, batch: usize) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self.index_vectors(batch)?;
            if n == 0 {
                return Ok(total);
            }
            total += n;
        }
    }

    /// Adopts the configured model: drops every stored vector (of any
    /// model) so the indexer embeds everything again. The explicit step a
    /// model change needs; returns how many vectors were dropped.
    pub fn reembed(&self) -> Result<usize> {
        let Some(v) = &self.vectorizer else {
            return Err(MemoryError::invalid(
                "backend_config.embedder",
                "must be configured to re-embed",
            ));
        };
        let _step = v.indexing.lock().unwrap_or_else(|p| p.into_inner());
        let dropped = self.db.write(|tx, _| vectors::drop_all(tx))?;
        v.cache.invalidate(None);
        Ok(dropped)
    }

    /// What the indexer has done and has left.
    pub fn vector_progress(&self) -> Result<VectorProgress> {
        let configured = self.vectorizer.as_ref().map(|v| v.key().to_owned());
        self.db.read(|conn| vectors::progress(conn, configured))
    }

    /// Counts of how recalls were answered.
    pub fn retrieval_counts(&self) -> RetrievalCounts {
        self.vectorizer
            .as_ref()
            .map_or_else(RetrievalCounts::default, Vectorizer::retrieval_counts)
    }

    /// Drops the in-memory vector copies of every scope, so erased items
    /// are never compared again (erasure is rare; reloading is cheap).
    pub fn forget_vector_copies(&self) {
        if let Some(v) = &self.vectorizer {
            v.cache.invalidate(None);
        }
    }

    /// The caller's `limit` items nearest to `query` (a unit vector of the
    /// current model) as recall's dense side finds them, best first, with
    /// their cosine. The sign prefilter keeps `prefilter` items per int8
    /// candidate (recall: [`vectors::PREFILTER_FACTOR`]; `usize::MAX`: every
    /// item is int8-scanned, the search before the prefilter).
    pub fn nearest_items(
        &self,
        caller: &Caller,
        query: &[f32],
        limit: usize,
        prefilter: usize,
    ) -> Result<Vec<(i64, f32)>> {
        let key = ScopeKey::of(caller);
        self.db
            .read(|conn| match (key.find(conn)?, &self.vectorizer) {
                (Some(scope), Some(v)) => {
                    let wanted = vectors::Wanted {
                        limit,
                        prefilter,
                        among: Among::All,
                    };
                    Ok(v.nearest_items(conn, scope, query, wanted, &[])?.0)
                }
                _ => Ok(Vec::new()),
            })
    }

    /// The caller's `k` items nearest to `query` by the exact cosine over
    /// every stored vector of the scope (no int8, no prefilter), best first:
    /// the reference the int8 scan and the sign prefilter are measured
    /// against (`memgate bench`, `memgate eval locomo`).
    pub fn exact_nearest(&self, caller: &Caller, query: &[f32], k: usize) -> Result<Vec<i64>> {
        let key = ScopeKey::of(caller);
        self.db
            .read(|conn| match (key.find(conn)?, &self.vectorizer) {
                (Some(scope), Some(v)) => v.exact_nearest(conn, scope, query, k),
                _ => Ok(Vec::new()),
            })
    }
}

/// The distillation queue ([`crate::distill`]).
impl MemoryStore {
    /// Queued jobs, oldest first, one per thread, none of `running`'s threads.
    pub fn next_distill_jobs(&self, limit: usize, running: &[i64]) -> Result<Vec<DistillJob>> {
        self.db
            .read(|conn| distill::next_jobs(conn, limit, running))
    }

    /// At most `limit` current facts of the job's scope related to its
    /// turns: those this store's own ranking finds with the turns' text as
    /// the query (hybrid with an embedder, else by words), and the newest
    /// current distilled facts.
    pub fn related_facts(&self, job: &DistillJob, limit: usize) -> Result<Vec<Fact>> {
        let query = job.related_query();
        if query.trim().is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        // Among memories only: the scope's turns say the job's words too
        // (its own turns first of all) and would fill the pool.
        let ranked = self.ranked(
            &job.caller,
            &query,
            memgate_recall::ranked::candidate_pool(limit),
            Among::Memories(None),
        )?;
        let ids: Vec<i64> = ranked
            .iter()
            .filter(|r| r.origin == memgate_recall::ranked::Origin::Memory)
            .filter_map(|r| memgate_recall::citation::parse_memory_citation(&r.citation))
            .take(limit)
            .collect();
        let key = ScopeKey::of(&job.caller);
        self.db.read(|conn| match key.find(conn)? {
            Some(scope) => {
                distill::related_facts(conn, scope, &ids, limit, self.vectorizer.is_some())
            }
            None => Ok(Vec::new()),
        })
    }

    /// Applies a job's operations in one transaction, or nothing.
    pub fn apply_distilled(&self, job: &DistillJob, operations: &[Operation]) -> Result<Applied> {
        self.db
            .write(|tx, index| distill::apply(tx, index, job, operations, &self.redactor))
    }

    pub fn park_job(&self, job: i64, reason: &str) -> Result<()> {
        self.db.write(|tx, _| distill::park(tx, job, reason))
    }

    pub fn job_attempt_failed(&self, job: i64, reason: &str) -> Result<()> {
        self.db
            .write(|tx, _| distill::attempt_failed(tx, job, reason))
    }

    pub fn record_distill_usage(&self, day: &str, prompt: u64, completion: u64) -> Result<()> {
        self.db
            .write(|tx, _| distill::record_usage(tx, day, prompt, completion))
    }

    pub fn distill_tokens_used(&self, day: &str) -> Result<u64> {
        self.db.read(|conn| distill::tokens_used(conn, day))
    }

    pub fn parked_jobs(&self) -> Result<Vec<ParkedJob>> {
        self.db.read(distill::parked_jobs)
    }

    pub fn retry_parked(&self, job: Option<i64>) -> Result<usize> {
        self.db.write(|tx, _| distill::retry_parked(tx, job))
    }

    pub fn distill_figures(&self, day: &str) -> Result<QueueFigures> {
        self.db.read(|conn| distill::figures(conn, day))
    }

    pub fn distill_depth(&self) -> Result<QueueDepth> {
        self.db.read(distill::depth)
    }

    /// Captures whose new turns found the queue full since the store opened.
    pub fn distill_skipped(&self) -> u64 {
        self.distill_skipped.load(Ordering::Relaxed)
    }

    /// Queues every thread's turns not yet covered by a job (`memgate
    /// distill`); how many threads got work. Needs `memory.distill` on.
    pub fn queue_backfill(&self) -> Result<usize> {
        let limits = self.config.distill.ok_or_else(|| {
            MemoryError::Config("memory.distill.enabled is false: nothing distils".to_owned())
        })?;
        self.db.write(|tx, _| distill::queue_backfill(tx, limits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::{CaptureKind, Message};

    /// Every statement of a recall is prepared once per connection and then
    /// reused: a re-prepare on every call (what a bound LIMIT, or a bound
    /// value the planner had looked at, caused) doubles the planning work of
    /// a recall.
    #[test]
    fn no_statement_of_a_recall_is_re_prepared_on_every_call() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            MemoryStore::open(dir.path().join("m.sqlite3"), LocalConfig::default()).unwrap();
        let user = Caller::new("u");
        let messages = (0..200)
            .map(|i| {
                Message::human(format!("word{} topic{} tomatoes", i % 37, i % 11))
                    .with_id(format!("m{i}"))
            })
            .collect();
        let request = CaptureRequest {
            caller: user.clone().with_thread("t"),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        };
        store.capture(&request).unwrap();
        for i in 0..5 {
            let fact = format!("fact number {i} about tomatoes");
            store
                .remember(
                    &user,
                    &memgate_core::RememberRequest::new("fact", &fact).unwrap(),
                )
                .unwrap();
        }
        let recall = |query: Option<String>| {
            store
                .recall(&memgate_core::RecallRequest {
                    caller: user.clone(),
                    query,
                })
                .unwrap()
        };
        for i in 0..20 {
            // Scored plans, a plan of common terms only, no query at all.
            assert!(!recall(Some(format!("word{} topic{}", i % 37, i % 11))).is_empty());
            assert!(!recall(Some("tomatoes".into())).is_empty());
            assert!(!recall(None).is_empty());
        }
        store
            .db
            .read(|conn| {
                let mut seen = 0;
                // SAFETY: walks the statements of a connection this thread
                // holds; nothing is prepared or finalized meanwhile.
                unsafe {
                    use rusqlite::ffi;
                    let db = conn.handle();
                    let mut stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
                    while !stmt.is_null() {
                        let sql = std::ffi::CStr::from_ptr(ffi::sqlite3_sql(stmt))
                            .to_string_lossy()
                            .into_owned();
                        let runs = ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_RUN, 0);
                        let again =
                            ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_REPREPARE, 0);
                        assert!(
                            again <= 1,
                            "{sql}: re-prepared {again} times in {runs} runs"
                        );
                        seen += usize::from(runs >= 20);
                        stmt = ffi::sqlite3_next_stmt(db, stmt);
                    }
                }
                assert!(seen >= 5, "only {seen} statements ran on every recall");
                Ok(())
            })
            .unwrap();
    }

    /// A busy spell leaves a filled page cache in every pooled reader;
    /// releasing them once it has ended gives that memory back and changes
    /// no answer.
    #[test]
    fn idle_readers_give_their_page_caches_back_and_recall_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            MemoryStore::open(dir.path().join("m.sqlite3"), LocalConfig::default()).unwrap();
        let user = Caller::new("u");
        let words = [
            "refund", "invoice", "lisbon", "piano", "schema", "budget", "garden",
        ];
        for t in 0..4 {
            let messages = (0..500)
                .map(|i| {
                    let text = (0..12)
                        .map(|j| {
                            words[(i * 7 + j * 3 + t) % words.len()].to_owned()
                                + &format!("{}", (i + j) % 97)
                        })
                        .collect::<Vec<_>>()
                        .join(" ");
                    Message::human(text).with_id(format!("t{t}-m{i}"))
                })
                .collect();
            store
                .capture(&CaptureRequest {
                    caller: user.clone().with_thread(format!("t{t}")),
                    messages,
                    kind: CaptureKind::AfterTurn,
                    trace_id: None,
                })
                .unwrap();
        }
        let queries: Vec<String> = (0..40)
            .map(|i| {
                format!(
                    "{}{} {}{}",
                    words[i % 7],
                    i % 97,
                    words[(i + 3) % 7],
                    (i * 5) % 97
                )
            })
            .collect();
        let recall_all = || {
            queries
                .iter()
                .map(|q| {
                    store
                        .recall(&memgate_core::RecallRequest {
                            caller: user.clone(),
                            query: Some(q.clone()),
                        })
                        .unwrap()
                })
                .collect::<Vec<_>>()
        };
        let answers = recall_all();
        // Readers recalling at once each take a pooled connection of their own.
        let start = std::sync::Barrier::new(crate::db::MAX_IDLE_READERS);
        std::thread::scope(|s| {
            for _ in 0..crate::db::MAX_IDLE_READERS {
                s.spawn(|| {
                    start.wait();
                    recall_all();
                });
            }
        });
        let (readers, filled) = store.db.idle_cache_bytes();
        assert!(
            readers >= 2,
            "only {readers} pooled readers after a busy spell"
        );

        store.release_idle_memory();
        let (_, left) = store.db.idle_cache_bytes();
        assert!(
            left * 4 < filled,
            "{readers} idle readers still hold {left} of {filled} bytes of page cache"
        );
        assert_eq!(
            recall_all(),
            answers,
            "recall answers the same after the release"
        );
    }
}
