//! `memgate reembed`: the explicit step after the embedder's model changes.
//! Until it runs, a file whose vectors are of another model keeps recall
//! lexical (nothing is re-embedded silently); it drops every vector and
//! embeds each turn and active memory again with the configured model,
//! printing progress. Interrupted, it leaves a file the background indexer
//! finishes the next time memgate opens it.

use super::error::{CliError, Result};
use super::output::print_json;
use memgate_assembly::config::{Config, ManagerClass};
use memgate_assembly::factory::BackendSetup;
use memgate_core::MemoryBackend;
use memgate_store::vectors::ModelState;
use memgate_store::MemoryStore;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows embedded per transaction (the background indexer's batch too).
const BATCH: usize = 32;
/// At most one progress line this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What one run did.
#[derive(Serialize)]
struct Report {
    model: String,
    /// Vectors dropped (of the old model, or of this one when re-run).
    dropped: usize,
    embedded: u64,
    total: u64,
    seconds: f64,
}

pub async fn run(config_path: Option<&Path>, json: bool) -> Result<ExitCode> {
    let (config, _) = Config::discover(config_path, None)?;
    if config.memory.manager_class == ManagerClass::Postgres {
        return reembed_postgres(&config, json).await;
    }
    if config.memory.manager_class != ManagerClass::Local {
        return Err(CliError::Setting(format!(
            "memgate reembed: only the local and postgres stores keep vectors, and manager_class is {}",
            config.memory.manager_class
        )));
    }
    // The store itself, as `migrate` opens it: re-embedding is maintenance
    // of the file, not an operation of the memory contract.
    let opened = crate::migrate::Store::open(
        crate::migrate::StoreKind::Local,
        &config.memory,
        &BackendSetup::from_process()?,
        "MEMGATE_POSTGRES_DSN",
    )?;
    let crate::migrate::Store::Local(local) = &opened else {
        return Err(CliError::Internal("expected the local store".to_owned()));
    };
    let store = Arc::clone(local.store());
    let result = tokio::task::spawn_blocking(move || reembed(&store, json))
        .await
        .map_err(|e| CliError::Internal(format!("re-embedding task failed: {e}")));
    let budget = Duration::from_secs_f64(config.memory.shutdown_flush_timeout_seconds);
    local.shutdown(budget).await;
    let report = result??;
    print_report(&report, json);
    Ok(ExitCode::SUCCESS)
}

fn reembed(store: &MemoryStore, quiet: bool) -> Result<Report> {
    let model =
        match store.model_state()? {
            ModelState::Off => return Err(CliError::Setting(
                "memgate reembed: no embedder is configured; set memory.backend_config.embedder \
                 (e.g. {\"kind\": \"local\", \"model_path\": \"DIR\"}) to the model to embed with"
                    .to_owned(),
            )),
            ModelState::Mismatch { stored, configured } => {
                if !quiet {
                    eprintln!("model change: {stored} -> {configured}");
                }
                configured
            }
            ModelState::Current => store.vector_progress()?.model.unwrap_or_default(),
        };
    let started = Instant::now();
    let dropped = store.reembed()?;
    let mut shown = Instant::now();
    let progress = loop {
        let written = store.index_vectors(BATCH).map_err(|e| {
            let done = store.vector_progress().map_or(0, |p| p.embedded);
            CliError::Internal(format!(
                "re-embedding stopped after {done} items: {e}; the background indexer embeds \
                 the rest whenever memgate next opens the store, or run `memgate reembed` again"
            ))
        })?;
        let progress = store.vector_progress()?;
        if written == 0 {
            break progress;
        }
        if !quiet && shown.elapsed() >= PROGRESS_EVERY {
            shown = Instant::now();
            let rate = progress.embedded as f64 / started.elapsed().as_secs_f64().max(1e-3);
            eprintln!(
                "embedded {} / {} items ({rate:.0} items/s)",
                progress.embedded, progress.total
            );
        }
    };
    Ok(Report {
        model,
        dropped,
        embedded: progress.embedded,
        total: progress.total,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `reembed` on `postgres`: the same steps against the database (any
/// replica's background indexer helps; the advisory lock keeps one at a time).
async fn reembed_postgres(config: &Config, json: bool) -> Result<ExitCode> {
    let store = crate::migrate::Store::open(
        crate::migrate::StoreKind::Postgres,
        &config.memory,
        &BackendSetup::from_process()?,
        "MEMGATE_POSTGRES_DSN",
    )?;
    let crate::migrate::Store::Postgres(pg) = &store else {
        return Err(CliError::Internal("expected the postgres store".to_owned()));
    };
    let before = pg.vector_progress().await?;
    let Some(model) = before.model.clone() else {
        return Err(CliError::Setting(
            "memgate reembed: no embedder is configured; set memory.backend_config.embedder \
             (e.g. {\"kind\": \"local\", \"model_path\": \"DIR\"}) to the model to embed with"
                .to_owned(),
        ));
    };
    if let (false, Some(stored)) = (json, before.stored_model.as_deref()) {
        if stored != model {
            eprintln!("model change: {stored} -> {model}");
        }
    }
    let started = Instant::now();
    let dropped = pg.reembed().await?;
    pg.index_all_vectors(BATCH).await.map_err(|e| {
        CliError::Internal(format!(
            "re-embedding stopped: {e}; the background indexer of any memgate on this \
             database embeds the rest, or run `memgate reembed` again"
        ))
    })?;
    let after = pg.vector_progress().await?;
    let report = Report {
        model,
        dropped,
        embedded: after.embedded,
        total: after.total,
        seconds: started.elapsed().as_secs_f64(),
    };
    pg.shutdown(Duration::from_secs(5)).await;
    print_report(&report, json);
    Ok(ExitCode::SUCCESS)
}

/// What was re-embedded, as JSON or one line.
fn print_report(report: &Report, json: bool) {
    if json {
        print_json(report);
    } else {
        println!(
            "re-embedded {} / {} items with {} in {:.1} s ({} old vectors dropped)",
            report.embedded, report.total, report.model, report.seconds, report.dropped
        );
    }
}
