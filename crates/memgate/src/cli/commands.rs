//! One function per command. Commands other than `serve`, `doctor`,
//! `config`, `bench`, `eval`, `migrate` and `reembed` open the configured backend (or the service
//! named by `--url`), run one operation and shut the backend down cleanly.

use super::error::{CliError, Result};
use super::output::print_json;
use super::{Cli, Command, ConfigCommand, FactsCommand, ForgetCommand};
use memgate_assembly::config::{Config, ConfigSource};
use memgate_assembly::factory::{
    assemble, backend_notes, check_writable, open_backend, BackendSetup,
};
use memgate_assembly::AssembledBackend;
use memgate_core::message::parse_transcript;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, FactPatch, ForgetTarget, MemoryBackend, MemoryError,
    MemoryExport, RecallRequest, RememberRequest, SearchQuery, UserId, WarmStatus,
};
use memgate_server::client::HttpBackend;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub async fn run(cli: Cli) -> Result<ExitCode> {
    let caller = Caller {
        user: UserId::from_host(cli.user.as_deref()),
        agent: cli.agent.clone(),
        thread: None,
    };
    match cli.command {
        Command::Serve { addr } => {
            super::serve::run(cli.config.as_deref(), addr.as_deref(), &caller).await
        }
        Command::Mcp => mcp_stdio(cli.config.as_deref(), &caller).await,
        Command::Chat(args) => chat(args, cli.config.as_deref(), cli.url.as_deref(), caller).await,
        Command::Doctor => doctor(cli.config.as_deref()).await,
        Command::Reembed { json } => super::reembed::run(cli.config.as_deref(), json).await,
        Command::Distill {
            parked,
            retry,
            json,
        } => {
            let action = match (parked, retry) {
                (true, _) => super::distill::Action::Parked,
                (false, Some(0)) => super::distill::Action::Retry(None),
                (false, Some(job)) => super::distill::Action::Retry(Some(job)),
                (false, None) => super::distill::Action::Backfill,
            };
            super::distill::run(cli.config.as_deref(), action, json).await
        }
        Command::Config {
            action: ConfigCommand::Check { file },
        } => check_config(file.as_deref().or(cli.config.as_deref())),
        #[cfg(feature = "lab")]
        Command::Lab(command) => super::lab::run(command, cli.config.as_deref()).await,
        Command::Migrate {
            from,
            to,
            postgres_dsn_env,
            json,
        } => Ok(
            super::migrate::run(cli.config.as_deref(), &from, &to, &postgres_dsn_env, json).await?,
        ),
        command @ Command::Capture { .. } => {
            let (backend, timeout) =
                open(cli.config.as_deref(), cli.url.as_deref(), Setup::OneShot).await?;
            capture_until_terminated(backend, timeout, caller, command).await
        }
        command => {
            let (backend, budget) =
                open(cli.config.as_deref(), cli.url.as_deref(), Setup::OneShot).await?;
            let result = operate(&*backend, caller, command).await;
            backend.drain(budget).await;
            Ok(result.map(|()| ExitCode::SUCCESS)?)
        }
    }
}

/// Exit status after SIGTERM (128 + 15, what a shell reports).
const TERMINATED: u8 = 143;

/// `memgate capture` under SIGTERM: stop waiting for the capture, give the
/// write already on its way the shutdown budget to finish and save its
/// outcome, then exit with 143. A write still running at the deadline is
/// abandoned; its intent is on disk and the next capture reconciles it with
/// the server, so nothing is sent twice.
async fn capture_until_terminated(
    backend: Arc<dyn MemoryBackend>,
    timeout: Duration,
    caller: Caller,
    command: Command,
) -> Result<ExitCode> {
    let terminated = terminated();
    tokio::pin!(terminated);
    let capture = operate(&*backend, caller, command);
    tokio::select! {
        result = capture => {
            backend.shutdown(timeout).await;
            Ok(result.map(|()| ExitCode::SUCCESS)?)
        }
        () = &mut terminated => {
            eprintln!(
                "memgate: SIGTERM: finishing the write in flight (at most {:.1}s)",
                timeout.as_secs_f64()
            );
            if backend.shutdown(timeout).await {
                eprintln!("memgate: stopped; nothing left in flight");
            } else {
                eprintln!("memgate: stopped at the deadline; the next capture reconciles the write left in flight");
            }
            Ok(ExitCode::from(TERMINATED))
        }
    }
}

/// Resolves on SIGTERM (never, where there are no Unix signals or the
/// handler cannot be installed).
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            term.recv().await;
            return;
        }
    }
    std::future::pending::<()>().await
}

/// Who MCP tool calls run as: `mcp.user`/`mcp.agent` from the config, else
/// the CLI's `--user`/`--agent` (or their environment variables).
pub fn mcp_principal(config: &Config, cli: &Caller) -> Caller {
    match &config.mcp.user {
        Some(user) => Caller {
            user: UserId::from_host(Some(user)),
            agent: config.mcp.agent.clone(),
            thread: None,
        },
        None => Caller {
            agent: config.mcp.agent.clone().or_else(|| cli.agent.clone()),
            ..cli.clone()
        },
    }
}

/// `memgate mcp`: the configured backend as an MCP server on stdin/stdout.
/// Logs stay on stderr; stdout carries only the protocol.
async fn mcp_stdio(config_path: Option<&Path>, cli: &Caller) -> Result<ExitCode> {
    let (config, _) = Config::discover(config_path, None)?;
    let backend = open_backend(
        &config.memory,
        &BackendSetup::from_process()?.running_distiller(),
    )?;
    let server =
        memgate_server::mcp::MemoryMcp::new(Arc::clone(&backend), mcp_principal(&config, cli))
            .with_forget_tool(config.mcp.forget_tool)
            .with_handoff_tools(config.mcp.handoff_tools);
    let result = memgate_server::mcp::serve_stdio(server).await;
    backend.drain(shutdown_budget(&config)).await;
    Ok(result.map(|()| ExitCode::SUCCESS)?)
}

/// `memgate chat`: the terminal host over the configured backend (or the
/// service at `--url`), with the config's memory switches.
async fn chat(
    args: super::chat::ChatArgs,
    config_path: Option<&Path>,
    url: Option<&str>,
    caller: Caller,
) -> Result<ExitCode> {
    let (config, _) = Config::discover(config_path, None)?;
    let settings = memgate_host::HostSettings {
        enabled: config.memory.enabled,
        injection_enabled: config.memory.injection_enabled,
        ..Default::default()
    };
    // A chat session is long-running: it distils what it captures.
    let (backend, budget) = open(config_path, url, Setup::LongRunning).await?;
    let result = super::chat::run_with_settings(args, backend.clone(), caller, settings).await;
    backend.drain(budget).await;
    result.map(|()| ExitCode::SUCCESS)
}

fn shutdown_budget(config: &Config) -> Duration {
    Duration::from_secs_f64(config.memory.shutdown_flush_timeout_seconds)
}

/// How long the command using a backend runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// One operation: distillation work is only queued.
    OneShot,
    /// A session (`chat`): runs the distillation worker while it lasts
    /// (stopped by the drain), when `memory.distill` is on.
    LongRunning,
}

/// Opens the configured backend here, or connects to `--url`; either way
/// assembled with this config's gates and deadlines. With `--url` the bearer
/// token is read from the variable `server.bearer_token_env` names, as
/// `memgate serve` does (the service distils, not this process).
async fn open(
    config: Option<&Path>,
    url: Option<&str>,
    setup: Setup,
) -> Result<(Arc<AssembledBackend>, Duration)> {
    let (config, _) = Config::discover(config, None)?;
    let backend = match url {
        Some(url) => {
            let token = memgate_core::Secret::from_setting(
                std::env::var(&config.server.bearer_token_env).ok(),
            );
            let limit = config
                .memory
                .deadlines
                .of(memgate_assembly::Operation::Capture);
            let remote = HttpBackend::connect(url, token, limit).await?;
            assemble(Arc::new(remote), &config.memory)?
        }
        None => {
            let mut here = BackendSetup::from_process()?;
            if setup == Setup::LongRunning {
                here = here.running_distiller();
            }
            open_backend(&config.memory, &here)?
        }
    };
    Ok((backend, shutdown_budget(&config)))
}

async fn operate(backend: &dyn MemoryBackend, caller: Caller, command: Command) -> Result<()> {
    match command {
        Command::Remember {
            kind,
            text,
            confidence,
            json,
        } => {
            let request = RememberRequest::new(&kind, &text)?.with_confidence(confidence)?;
            let outcome = backend.remember(&caller, &request).await?;
            if json {
                print_json(&outcome);
            } else {
                println!("{}", outcome.describe());
            }
        }
        Command::Recall {
            query,
            thread,
            json,
        } => {
            let request = RecallRequest {
                caller: Caller { thread, ..caller },
                query,
            };
            let recall = backend.recall(&request).await?;
            if json {
                print_json(&recall);
            } else if recall.is_empty() {
                eprintln!("(nothing recalled)");
            } else {
                println!("{}", recall.text);
            }
        }
        Command::Search {
            query,
            top_k,
            kind,
            json,
        } => {
            if !(1..=100).contains(&top_k) {
                return Err(MemoryError::invalid("--top-k", "must be between 1 and 100").into());
            }
            let hits = backend
                .search(&caller, &SearchQuery { query, top_k, kind })
                .await?;
            if json {
                print_json(&hits);
            } else if hits.is_empty() {
                eprintln!("(no results)");
            } else {
                for hit in hits {
                    let score = hit.score.map(|s| format!(" {s:.3}")).unwrap_or_default();
                    println!("{}\t[{}]{score}\t{}", hit.id, hit.category, hit.content);
                }
            }
        }
        Command::Capture {
            thread,
            before_compaction,
            file,
        } => {
            let messages = parse_transcript(&read_input(&file)?)?;
            let request = CaptureRequest {
                caller: Caller {
                    thread: Some(thread),
                    ..caller
                },
                messages,
                kind: if before_compaction {
                    CaptureKind::BeforeCompaction
                } else {
                    CaptureKind::AfterTurn
                },
                trace_id: None,
            };
            request.caller.require_thread()?;
            let report = backend.capture(&request).await?;
            println!(
                "captured: {} new, {} already known, {} left out (hidden, injected or system)",
                report.stored, report.already_known, report.filtered
            );
            for cut in &report.cut {
                let id = cut
                    .message_id
                    .as_deref()
                    .map(|id| format!(" (id {id})"))
                    .unwrap_or_default();
                println!(
                    "cut: message {}{id} kept its first {} of {} bytes",
                    cut.index, cut.kept_bytes, cut.text_bytes
                );
            }
        }
        Command::Facts { action } => facts(backend, &caller, action).await?,
        Command::Forget { what } => forget(backend, caller, what).await?,
        Command::Handoff { step } => super::handoff::run(backend, caller, step).await?,
        _ => unreachable!("handled in run()"),
    }
    Ok(())
}

/// `memgate forget …`: erases, then says what was erased.
async fn forget(backend: &dyn MemoryBackend, caller: Caller, what: ForgetCommand) -> Result<()> {
    let (caller, target) = match what {
        ForgetCommand::Fact { id } => (caller, ForgetTarget::Fact { id }),
        ForgetCommand::Thread { thread } => (caller.with_thread(thread), ForgetTarget::Thread),
        ForgetCommand::Scope { yes: false } | ForgetCommand::User { yes: false } => {
            return Err(
                MemoryError::invalid("--yes", "is required to erase a whole scope or user").into(),
            )
        }
        ForgetCommand::Scope { yes: true } => (caller, ForgetTarget::Scope),
        ForgetCommand::User { yes: true } => (caller, ForgetTarget::User),
    };
    let report = backend.forget(&caller, &target).await?;
    println!(
        "erased {} memories ({} versions) and {} captured turns",
        report.facts, report.versions, report.turns
    );
    Ok(())
}

async fn facts(backend: &dyn MemoryBackend, caller: &Caller, action: FactsCommand) -> Result<()> {
    match action {
        FactsCommand::List { all, json } => {
            let facts = backend.list_facts(caller, all).await?;
            if json {
                print_json(&facts);
            } else if facts.is_empty() {
                eprintln!("(no memories)");
            } else {
                for f in facts {
                    let state = match (&f.superseded_by, f.state) {
                        (Some(by), _) => format!(" (superseded by {by})"),
                        (None, memgate_core::FactState::Active) => String::new(),
                        (None, memgate_core::FactState::Retired) => " (retired)".to_owned(),
                    };
                    let sources = if f.sources.is_empty() {
                        String::new()
                    } else {
                        format!(" from {}", f.sources.join(","))
                    };
                    println!(
                        "{}\t[{}] v{}{state}\t{}{sources}\t{}",
                        f.id,
                        f.kind,
                        f.version,
                        f.origin.as_str(),
                        f.text
                    );
                }
            }
        }
        FactsCommand::Show { id } => print_json(&backend.get_fact(caller, &id).await?),
        FactsCommand::Revise {
            id,
            kind,
            text,
            confidence,
        } => {
            if kind.is_none() && text.is_none() && confidence.is_none() {
                return Err(MemoryError::invalid(
                    "revision",
                    "give --kind, --text or --confidence",
                )
                .into());
            }
            let fact = backend
                .revise_fact(
                    caller,
                    &id,
                    &FactPatch {
                        kind,
                        text,
                        confidence,
                    },
                )
                .await?;
            println!("revised {} to version {}", fact.id, fact.version);
        }
        FactsCommand::Delete { id } => {
            let fact = backend.retire_fact(caller, &id).await?;
            println!("retired {} (kept in history, no longer recalled)", fact.id);
        }
        FactsCommand::Export { out } => {
            let export = backend.export(caller).await?;
            let text = serde_json::to_string_pretty(&export)
                .map_err(|e| CliError::Internal(format!("cannot render the export: {e}")))?;
            match out {
                Some(path) => std::fs::write(&path, text + "\n")
                    .map_err(|e| CliError::io(format!("cannot write {}", path.display()), e))?,
                None => println!("{text}"),
            }
        }
        FactsCommand::Import { file } => {
            let bytes = read_input(&file)?;
            let data: MemoryExport = serde_json::from_slice(&bytes).map_err(|e| {
                MemoryError::invalid(
                    file.display().to_string(),
                    format!("not a memgate export: {e}"),
                )
            })?;
            if data.format != memgate_core::facts::EXPORT_FORMAT {
                return Err(MemoryError::invalid(
                    "format",
                    format!(
                        "must be {:?} (got {:?})",
                        memgate_core::facts::EXPORT_FORMAT,
                        data.format
                    ),
                )
                .into());
            }
            let report = backend.import(caller, &data).await?;
            println!(
                "imported {} memories ({} already present), {} turns ({} already present)",
                report.facts_imported,
                report.facts_already_present,
                report.turns_imported,
                report.turns_already_present
            );
        }
    }
    Ok(())
}

/// A file's bytes, or stdin for `-`.
fn read_input(path: &Path) -> Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|source| CliError::Input {
                what: "stdin".into(),
                source,
            })?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|source| CliError::Input {
        what: path.display().to_string(),
        source,
    })
}

fn check_config(file: Option<&Path>) -> Result<ExitCode> {
    let (config, source) = match file {
        Some(f) => (Config::from_file(f)?, ConfigSource::File(f.to_path_buf())),
        None => Config::discover(None, None)?,
    };
    let setup = BackendSetup::from_process()?;
    open_backend(&config.memory, &setup)?;
    println!(
        "config OK ({source}): manager_class={}, mode={}, storage={}",
        config.memory.manager_class,
        config.memory.mode.as_str(),
        setup.storage_path(&config.memory)?.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn doctor(config_path: Option<&Path>) -> Result<ExitCode> {
    let mut healthy = true;
    let (config, source) = match Config::discover(config_path, None) {
        Ok(found) => found,
        Err(e) => {
            println!("config   FAIL {e}");
            return Ok(ExitCode::from(2));
        }
    };
    println!("config   ok   {source}");
    println!(
        "memory   ok   manager_class={} mode={} enabled={} injection_enabled={}",
        config.memory.manager_class,
        config.memory.mode.as_str(),
        config.memory.enabled,
        config.memory.injection_enabled
    );
    let setup = BackendSetup::from_process()?;
    let storage: PathBuf = setup.storage_path(&config.memory)?;
    match check_writable(&storage) {
        Ok(()) => println!("storage  ok   {} (writable)", storage.display()),
        Err(e) => {
            healthy = false;
            println!("storage  FAIL {}: {e}", storage.display());
        }
    }
    let backend = match open_backend(&config.memory, &setup) {
        Ok(b) => b,
        Err(e) => {
            println!("backend  FAIL {e}");
            return Ok(ExitCode::from(if e.is_caller_error() { 2 } else { 1 }));
        }
    };
    let caps = backend.capabilities();
    println!(
        "backend  ok   {} (recall={} capture={} remember={} search={} facts={} import_export={})",
        backend.name(),
        caps.recall,
        caps.capture,
        caps.remember,
        caps.search,
        caps.facts,
        caps.import_export
    );
    match backend.warm().await {
        Ok(WarmStatus::Ready) => println!("health   ok   ready"),
        Ok(WarmStatus::NothingToWarm) => println!("health   ok   nothing to check"),
        Ok(WarmStatus::Degraded { reason }) => {
            healthy = false;
            println!("health   WARN degraded (startup_policy warn): {reason}");
        }
        Err(e) => {
            healthy = false;
            println!("health   FAIL {e}");
        }
    }
    for line in backend.diagnose().await {
        healthy &= line.healthy;
        let status = if line.healthy { "ok  " } else { "FAIL" };
        println!("{:<8} {status} {}", line.check, line.detail);
    }
    // The same figures `/metrics` shows, as numbers.
    for figure in backend.figures() {
        println!("figure   ok   {} {}", figure.name, figure.value);
    }
    for note in backend_notes(config.memory.manager_class) {
        println!("note     {note}");
    }
    backend.drain(shutdown_budget(&config)).await;
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
