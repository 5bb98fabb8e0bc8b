//! `memgate distill`: distillation as an operator's step (`local` or
//! `postgres`, `memory.distill` on). Without options it queues every
//! captured turn no job covers yet (threads captured before distillation
//! was turned on) and runs the queue until it is empty, printing progress
//! to stderr (a bar redrawn in place on a terminal, plain lines otherwise);
//! `--parked` lists the jobs parked with their reasons, `--retry [JOB]`
//! queues parked jobs again and runs them.

use super::error::{CliError, Result};
use super::output::print_json;
use memgate_assembly::config::Config;
use memgate_assembly::factory::{open_distill_queue, BackendSetup};
use memgate_distill::{DistillStats, RunReport};
use std::io::IsTerminal;
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
    if !settings.enabled {
        return Err(CliError::Setting(
            "memgate distill: memory.distill.enabled is false (nothing distils)".to_owned(),
        ));
    }
    let setup = BackendSetup::from_process()?;
    let (backend, queue) = open_distill_queue(&config.memory, &setup)
        .map_err(|e| CliError::Setting(format!("memgate distill: {e}")))?;
    match action {
        Action::Parked => {
            let parked = queue.parked_jobs().await?;
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
            backend.shutdown(SHUTDOWN).await;
            return Ok(ExitCode::SUCCESS);
        }
        Action::Retry(job) => {
            let queued = queue.retry_parked(job).await?;
            eprintln!("queued {queued} parked job(s) again");
        }
        Action::Backfill => {
            let threads = queue.queue_backfill().await?;
            eprintln!("queued the not yet distilled turns of {threads} thread(s)");
        }
    }
    let total = queue.queue_figures(&today()).await?.queued;
    let distiller = Arc::new(memgate_distill::distiller(
        Arc::clone(&queue),
        &settings,
        &setup.env,
    )?);
    let stats = Arc::clone(distiller.stats());
    let terminal = std::io::stderr().is_terminal();
    let progress = tokio::spawn(async move {
        // A terminal gets one line redrawn in place; a log gets a line now
        // and then.
        let every = if terminal {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(5)
        };
        loop {
            tokio::time::sleep(every).await;
            let line = progress_line(&Progress::of(&stats), total);
            if terminal {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
        }
    });
    let report = distiller.run_until_idle().await;
    progress.abort();
    if terminal {
        eprint!("\r\x1b[2K");
    }
    let report: RunReport = report?;
    backend.shutdown(SHUTDOWN).await;
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

/// How long the store gets to close after the run.
const SHUTDOWN: Duration = Duration::from_secs(10);

fn today() -> String {
    memgate_core::time::now_rfc3339()[..10].to_owned()
}

/// The worker's counts at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Progress {
    applied: u64,
    parked: u64,
    retried: u64,
    calls: u64,
}

impl Progress {
    fn of(stats: &DistillStats) -> Self {
        Self {
            applied: stats.applied.load(Ordering::Relaxed),
            parked: stats.parked.load(Ordering::Relaxed),
            retried: stats.retried.load(Ordering::Relaxed),
            calls: stats.calls.load(Ordering::Relaxed),
        }
    }
}

/// `[#####-----] 12/40 jobs: 11 applied, 1 parked, 0 retried, 13 model
/// calls`; the bar counts finished jobs (applied or parked) out of those
/// queued when the run started (more may join while it runs).
fn progress_line(p: &Progress, total: u64) -> String {
    const WIDTH: u64 = 20;
    let finished = p.applied + p.parked;
    let shown = total.max(finished);
    let filled = (finished * WIDTH).checked_div(shown).unwrap_or(WIDTH);
    format!(
        "[{}{}] {finished}/{shown} jobs: {} applied, {} parked, {} retried, {} model calls",
        "#".repeat(filled as usize),
        "-".repeat((WIDTH - filled) as usize),
        p.applied,
        p.parked,
        p.retried,
        p.calls
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_fills_its_bar_with_finished_jobs() {
        let p = Progress {
            applied: 9,
            parked: 1,
            retried: 2,
            calls: 12,
        };
        assert_eq!(
            progress_line(&p, 40),
            "[#####---------------] 10/40 jobs: 9 applied, 1 parked, 2 retried, 12 model calls"
        );
        // Jobs that joined after the start never overflow the bar.
        assert!(progress_line(&p, 4).starts_with("[####################] 10/10 jobs"));
        assert!(progress_line(&Progress::default(), 0).starts_with("[####################] 0/0"));
    }
}
