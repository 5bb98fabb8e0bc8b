//! `memgate migrate`: moves every scope's memory between the `local` and
//! `postgres` stores, built on export/import.
//!
//! For each scope of the source (oldest first): export it, import it into
//! the target (import merges: what is already there is not added again),
//! then read the target back and check that every memory (kind, text,
//! state) and every turn (thread, signature) of the export is there. A
//! missing entry stops the run with an error naming the scope. Nothing is
//! deleted from the source, so a failed or interrupted run is simply run
//! again: entries already moved count as already present.
//!
//! Not carried (the `memgate.export.v1` format has no place for them): a
//! memory's earlier versions (it arrives as version 1 of its current text)
//! and a turn's speaker and date context.

use memgate_assembly::config::{ManagerClass, MemoryConfig};
use memgate_assembly::factory::BackendSetup;
use memgate_core::{BackendContext, Caller, FactState, MemoryBackend, MemoryError, Result};
use memgate_postgres::PostgresBackend;
use memgate_store::LocalBackend;
use memgate_store::ScopeKey;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// One end of a migration.
pub enum Store {
    Local(LocalBackend),
    Postgres(Box<PostgresBackend>),
}

/// Which store, by its `manager_class` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Local,
    Postgres,
}

impl StoreKind {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "local" => Ok(Self::Local),
            "postgres" => Ok(Self::Postgres),
            other => Err(MemoryError::invalid(
                "store",
                format!("`{other}` cannot be migrated; use local or postgres"),
            )),
        }
    }
}

impl Store {
    /// Opens one end. The configured backend's own `backend_config` is used
    /// when `kind` is the configured `manager_class`; otherwise `local` uses
    /// the storage root and `postgres` reads its DSN from `dsn_env`.
    pub fn open(
        kind: StoreKind,
        memory: &MemoryConfig,
        setup: &BackendSetup,
        dsn_env: &str,
    ) -> Result<Self> {
        let storage = setup.storage_path(memory)?;
        let mut ctx = BackendContext::new(&storage).with_env(setup.env.clone());
        if kind == StoreKind::Local {
            // The local store queues distillation work as configured.
            ctx = ctx.with_distill(memory.distill_settings()?.queue_limits());
        }
        let configured = match (kind, memory.manager_class) {
            (StoreKind::Local, ManagerClass::Local)
            | (StoreKind::Postgres, ManagerClass::Postgres) => memory.backend_config.clone(),
            (StoreKind::Postgres, _) => {
                let mut map = Map::new();
                map.insert("dsn_env".to_owned(), Value::String(dsn_env.to_owned()));
                map
            }
            (StoreKind::Local, _) => Map::new(),
        };
        let mut config = configured;
        config.insert(
            "storage_path".to_owned(),
            Value::String(storage.display().to_string()),
        );
        Ok(match kind {
            StoreKind::Local => Self::Local(LocalBackend::from_backend_config(&config, &ctx)?),
            StoreKind::Postgres => Self::Postgres(Box::new(PostgresBackend::from_backend_config(
                &config, &ctx,
            )?)),
        })
    }

    pub fn backend(&self) -> &dyn MemoryBackend {
        match self {
            Self::Local(b) => b,
            Self::Postgres(b) => b.as_ref(),
        }
    }

    /// Every scope that holds something.
    pub async fn scopes(&self) -> Result<Vec<ScopeKey>> {
        match self {
            Self::Local(b) => {
                let store = b.store().clone();
                tokio::task::spawn_blocking(move || store.scopes())
                    .await
                    .map_err(|e| MemoryError::backend(format!("scope listing failed: {e}")))?
            }
            Self::Postgres(b) => b.scopes().await,
        }
    }
}

/// What a migration moved, summed over scopes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    pub scopes: usize,
    pub facts_imported: usize,
    pub facts_already_present: usize,
    pub turns_imported: usize,
    pub turns_already_present: usize,
}

/// Moves every scope of `from` into `to`, verifying each one.
pub async fn migrate(from: &Store, to: &Store) -> Result<MigrationReport> {
    let mut report = MigrationReport::default();
    for scope in from.scopes().await? {
        let caller = scope.caller();
        let export = from.backend().export(&caller).await?;
        let imported = to.backend().import(&caller, &export).await?;
        verify(to.backend(), &caller, &export).await?;
        report.scopes += 1;
        report.facts_imported += imported.facts_imported;
        report.facts_already_present += imported.facts_already_present;
        report.turns_imported += imported.turns_imported;
        report.turns_already_present += imported.turns_already_present;
    }
    Ok(report)
}

/// Every entry of `export` is in `caller`'s scope of `target`.
async fn verify(
    target: &dyn MemoryBackend,
    caller: &Caller,
    export: &memgate_core::MemoryExport,
) -> Result<()> {
    let back = target.export(caller).await?;
    let facts: HashSet<(&str, &str, bool)> = back
        .facts
        .iter()
        .map(|f| {
            (
                f.kind.as_str(),
                f.text.as_str(),
                f.state == FactState::Active,
            )
        })
        .collect();
    let turns: HashSet<(&str, &str)> = back
        .turns
        .iter()
        .map(|t| (t.thread.as_str(), t.signature.as_str()))
        .collect();
    let missing_facts = export
        .facts
        .iter()
        .filter(|f| {
            !facts.contains(&(
                f.kind.as_str(),
                f.text.as_str(),
                f.state == FactState::Active,
            ))
        })
        .count();
    let missing_turns = export
        .turns
        .iter()
        .filter(|t| !turns.contains(&(t.thread.as_str(), t.signature.as_str())))
        .count();
    if missing_facts + missing_turns > 0 {
        return Err(MemoryError::Corruption(format!(
            "migration check failed for user {} agent {}: {missing_facts} memories and \
             {missing_turns} turns of the source are missing from the target \
             (the source is unchanged; run again)",
            caller.user.as_str(),
            caller.agent.as_deref().unwrap_or("(default)")
        )));
    }
    Ok(())
}
