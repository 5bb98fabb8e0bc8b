//! `memgate bench` and `memgate eval`: the lab's measurements, in the
//! binary by its default `lab` feature so the commands people already run
//! keep working (`--no-default-features` builds the product alone).

use super::error::{CliError, Result};
use super::output::print_json;
use clap::Subcommand;
use memgate_core::MemoryError;
use memgate_lab::distilled::DistillSource;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum LabCommand {
    /// Benchmark the embedded store (recall latency, capture throughput, RSS).
    Bench {
        /// Item counts to fill the store with.
        #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 100_000])]
        sizes: Vec<usize>,
        /// Recall calls measured per size.
        #[arg(long, default_value_t = 2000)]
        recalls: usize,
        #[arg(long)]
        json: bool,
    },
    /// Evaluate recall quality.
    Eval {
        #[command(subcommand)]
        dataset: EvalCommand,
    },
}

#[derive(Subcommand)]
pub enum EvalCommand {
    /// Recall quality on a LoCoMo-format file (recall@k, MRR per category).
    Locomo {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        /// Also measure hybrid recall with this embedder: the JSON object
        /// `backend_config.embedder` takes, e.g.
        /// '{"kind":"local","model_path":"DIR"}'.
        #[arg(long)]
        embedder: Option<String>,
        /// Also measure with distilled facts: `replay` answers the
        /// distillation prompts with the file's own facts (`observation`;
        /// the pipeline's ceiling, no model), `endpoint` with the configured
        /// `memory.distill` model (enabled; its key from `api_key_env`).
        #[arg(long, value_enum)]
        distill: Option<DistillArg>,
    },
}

/// `--distill`'s values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DistillArg {
    Replay,
    Endpoint,
}

/// Runs a lab command.
pub async fn run(command: LabCommand, config: Option<&Path>) -> Result<ExitCode> {
    match command {
        LabCommand::Bench {
            sizes,
            recalls,
            json,
        } => bench(&sizes, recalls, json).await,
        LabCommand::Eval {
            dataset:
                EvalCommand::Locomo {
                    file,
                    json,
                    embedder,
                    distill,
                },
        } => {
            let distill = match distill {
                None => None,
                Some(DistillArg::Replay) => Some(DistillSource::Replay),
                Some(DistillArg::Endpoint) => Some(configured_endpoint(config)?),
            };
            eval_locomo(file, json, embedder, distill).await
        }
    }
}

async fn bench(sizes: &[usize], recalls: usize, json: bool) -> Result<ExitCode> {
    let sizes = sizes.to_vec();
    let report = tokio::task::spawn_blocking(move || {
        memgate_lab::store_bench::run_bench(&memgate_lab::store_bench::BenchOptions {
            sizes,
            recall_queries: recalls,
            ..Default::default()
        })
    })
    .await
    .map_err(|e| CliError::Internal(format!("benchmark task failed: {e}")))??;
    if json {
        print_json(&report);
    } else {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `--distill endpoint`: the configured `memory.distill`, which must be on.
fn configured_endpoint(config: Option<&Path>) -> Result<DistillSource> {
    let (config, _) = memgate_assembly::config::Config::discover(config, None)?;
    let settings = config.memory.distill_settings()?;
    if !settings.enabled {
        return Err(CliError::Setting(
            "--distill endpoint: memory.distill.enabled is false (configure the endpoint in \
             memory.distill, or use --distill replay)"
                .to_owned(),
        ));
    }
    Ok(DistillSource::Endpoint {
        settings,
        env: memgate_core::setup::process_env(),
    })
}

async fn eval_locomo(
    file: PathBuf,
    json: bool,
    embedder: Option<String>,
    distill: Option<DistillSource>,
) -> Result<ExitCode> {
    let mut options = memgate_lab::locomo::LocomoOptions {
        distill,
        ..Default::default()
    };
    if let Some(raw) = embedder {
        let value: serde_json::Value = serde_json::from_str(&raw).map_err(|e| {
            MemoryError::invalid("--embedder", format!("must be a JSON object: {e}"))
        })?;
        options.embedder = Some(memgate_embed::EmbedderSettings::parse(&value)?);
    }
    let report =
        tokio::task::spawn_blocking(move || memgate_lab::locomo::run_locomo(&file, &options))
            .await
            .map_err(|e| CliError::Internal(format!("evaluation task failed: {e}")))??;
    if json {
        print_json(&report);
    } else {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}
