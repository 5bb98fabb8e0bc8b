//! `memgate distill`: distillation as an operator's step (local store,
//! `memory.distill` on). Without options it queues every captured turn no
//! job covers yet (threads captured before distillation was turned on) and
//! runs the queue until it is empty, printing progress to stderr;
//! `--parked` lists the jobs parked with their reasons, `--retry [JOB]`
//! queues parked jobs again and runs them.

use super::error::{CliError, Result};
use super::output::print_json;
use memgate_assembly::config::{Config, ManagerClass};
use memgate_assembly::factory::BackendSetup;
use memgate_core::distill::DistillQueue;
use memgate_distill::RunReport;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What `memgate distill` was asked to do.
pub enum Action {
    Backfill,
    Parked,
    Retry(Option<i64>),
}

pub async fn run(config_path: Option<&Path>, action: Action, json: bool) -> Result<ExitCode> {
    let (config, _) = Config::discover(config_path, None)?;
    let settings = config.memory.distill_settings()?;
    if config.memory.manager_class != ManagerClass::Local {
        return Err(CliError::Setting(format!(
            "memgate distill: distillation works with the local store, and manager_class is {}",
            config.memory.manager_class
        )));
    }
    if !settings.enabled {
        return Err(CliError::Setting(
            "memgate distill: memory.distill.enabled is false (nothing distils)".to_owned(),
        ));
    }
    let setup = BackendSetup::from_process()?;
    let opened = crate::migrate::Store::open(
        crate::migrate::StoreKind::Local,
        &config.memory,
        &setup,
        "MEMGATE_POSTGRES_DSN",
    )?;
    let crate::migrate::Store::Local(local) = opened else {
        return Err(CliError::Internal("expected the local store".to_owned()));
    };
    let local = Arc::new(local);
    match action {
        Action::Parked => {
            let parked = local.parked_jobs().await?;
            if json {
                print_json(&parked);
            } else if parked.is_empty() {
                eprintln!("(no parked jobs)");
            } else {
                for p in parked {
                    println!(
                        "job {}\tthread {}\t{} turns, {} attempts, parked {}\t{}",
                        p.id, p.thread, p.turns, p.attempts, p.parked_at, p.reason
                    );
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        Action::Retry(job) => {
            let queued = local.retry_parked(job).await?;
            eprintln!("queued {queued} parked job(s) again");
        }
        Action::Backfill => {
            let store = Arc::clone(local.store());
            let threads = tokio::task::spawn_blocking(move || store.queue_backfill())
                .await
                .map_err(|e| CliError::Internal(e.to_string()))??;
            eprintln!("queued the not yet distilled turns of {threads} thread(s)");
        }
    }
    let queue: Arc<dyn DistillQueue> = local.clone();
    let distiller = Arc::new(memgate_distill::distiller(queue, &settings, &setup.env)?);
    let stats = Arc::clone(distiller.stats());
    let progress = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            eprintln!(
                "distilling: {} applied, {} parked, {} retried, {} model calls",
                stats.applied.load(Ordering::Relaxed),
                stats.parked.load(Ordering::Relaxed),
                stats.retried.load(Ordering::Relaxed),
                stats.calls.load(Ordering::Relaxed),
            );
        }
    });
    let report = distiller.run_until_idle().await;
    progress.abort();
    let report: RunReport = report?;
    local.store().checkpoint()?;
    if json {
        print_json(&serde_json::json!({
            "applied": report.applied,
            "parked": report.parked,
            "retried": report.retried,
            "facts_added": report.facts_added,
            "facts_superseded": report.facts_superseded,
            "over_budget": report.over_budget,
        }));
    } else {
        println!(
            "{} job(s) applied: {} fact(s) added, {} superseded; {} parked{}",
            report.applied,
            report.facts_added,
            report.facts_superseded,
            report.parked,
            if report.parked > 0 {
                " (memgate distill --parked lists why)"
            } else {
                ""
            }
        );
        if report.over_budget {
            println!("stopped: memory.distill.max_daily_tokens is spent for today");
        }
    }
    Ok(ExitCode::SUCCESS)
}
