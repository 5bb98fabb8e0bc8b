//! Command-line parsing and dispatch.

mod chat;
mod commands;
mod distill;
mod error;
mod handoff;
mod heap;
#[cfg(feature = "lab")]
mod lab;
mod migrate;
mod output;
mod reembed;
mod serve;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "memgate",
    version,
    about = "Long-term memory for AI agent hosts",
    long_about = "Long-term memory for AI agent hosts.\n\nWithout a config file memgate uses the embedded `local` store under $MEMGATE_HOME (default ./.memgate)."
)]
pub struct Cli {
    /// Config file (else $MEMGATE_CONFIG, else ./config.yaml when present, else defaults).
    #[arg(long, global = true, env = "MEMGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The user whose memory this is (else $MEMGATE_USER, else the host fallback `default`).
    #[arg(long, global = true, env = "MEMGATE_USER")]
    user: Option<String>,
    /// The agent (peer) within the user's memory; omitted = the default agent.
    #[arg(long, global = true, env = "MEMGATE_AGENT")]
    agent: Option<String>,
    /// Use a running `memgate serve` at this URL instead of opening the backend here.
    #[arg(long, global = true, env = "MEMGATE_URL", value_name = "URL")]
    url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (JSON API, /health, /metrics, /openapi.json).
    Serve {
        /// HOST:PORT to listen on (default from config, 127.0.0.1:8765).
        #[arg(long)]
        addr: Option<String>,
    },
    /// Serve MCP over stdio (tools: remember, recall, search) for MCP clients
    /// such as Claude Code or Codex.
    Mcp,
    /// Chat with any OpenAI-compatible endpoint, with memory (MEMGATE_CHAT_BASE_URL,
    /// MEMGATE_CHAT_MODEL, optional MEMGATE_CHAT_API_KEY).
    Chat(chat::ChatArgs),
    /// Save one explicit memory and report the exact outcome.
    Remember {
        /// Memory kind (fact, preference, decision, constraint, …).
        #[arg(long, default_value = "fact")]
        kind: String,
        text: String,
        /// 0–1 (unset: 1, you said it).
        #[arg(long)]
        confidence: Option<f64>,
        #[arg(long)]
        json: bool,
    },
    /// Print the memory block a host would inject.
    Recall {
        /// The latest user input; without it the backend's fixed injection query is used.
        #[arg(long)]
        query: Option<String>,
        #[arg(long)]
        thread: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Search memory.
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        top_k: usize,
        /// Only entries of this kind/category.
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Capture a transcript (JSON array, {"messages": [...]}, or JSON Lines; `-` for stdin).
    Capture {
        #[arg(long)]
        thread: String,
        /// Capture as the head of a transcript about to be compacted.
        #[arg(long)]
        before_compaction: bool,
        file: PathBuf,
    },
    /// Manage explicit memories.
    Facts {
        #[command(subcommand)]
        action: FactsCommand,
    },
    /// Erase memory for good (local store): a fact with its history, a
    /// thread's captured turns, or everything of the user/agent. Export
    /// first if a copy is wanted; remote backends answer that erasure is the
    /// server's job.
    Forget {
        #[command(subcommand)]
        what: ForgetCommand,
    },
    /// Hand a running task to another thread: prepare, show, correct,
    /// finalize, continue, acknowledge, commit (`postgres`, or `--url`).
    Handoff {
        #[command(subcommand)]
        step: handoff::HandoffCommand,
    },
    /// Check configuration.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
    /// Check configuration, storage and backend health.
    Doctor,
    /// Embed every turn and memory again with the configured embedder (local
    /// store): the explicit step after its model changes, until which recall
    /// stays lexical. Prints progress to stderr.
    Reembed {
        #[arg(long)]
        json: bool,
    },
    /// Distil captured turns into facts now (local or postgres,
    /// `memory.distill` on): queues the turns no job covers yet and runs the
    /// queue, printing progress to stderr; `--parked` lists parked jobs and why, `--retry`
    /// queues them again.
    Distill {
        /// List the parked jobs with their reasons instead.
        #[arg(long, conflicts_with = "retry")]
        parked: bool,
        /// Queue parked jobs again (all, or the one given) and run them.
        #[arg(long, value_name = "JOB", num_args = 0..=1, default_missing_value = "0")]
        retry: Option<i64>,
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks and evaluations (`bench`, `eval`): the `lab` feature.
    #[cfg(feature = "lab")]
    #[command(flatten)]
    Lab(lab::LabCommand),
    /// Move every scope's memory between the local and postgres stores
    /// (export/import, checked per scope; re-runnable, never duplicates).
    Migrate {
        /// The store to read: local or postgres.
        #[arg(long)]
        from: String,
        /// The store to write: local or postgres.
        #[arg(long)]
        to: String,
        /// The environment variable holding the PostgreSQL DSN, when postgres is
        /// not the configured manager_class.
        #[arg(long, default_value = "MEMGATE_POSTGRES_DSN")]
        postgres_dsn_env: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ForgetCommand {
    /// One explicit memory and every recorded version of it.
    Fact { id: String },
    /// Every captured turn of a thread.
    Thread { thread: String },
    /// Everything stored for --user (and --agent).
    Scope {
        /// Required: confirms erasing the whole scope.
        #[arg(long)]
        yes: bool,
    },
    /// Everything stored for --user, under every agent.
    User {
        /// Required: confirms erasing all of the user's memory.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand)]
enum FactsCommand {
    /// List explicit memories.
    List {
        /// Include retired entries.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show one memory.
    Show { id: String },
    /// Revise a memory (its previous version is kept).
    Revise {
        id: String,
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        text: Option<String>,
        /// 0–1; alone, it is a revision too.
        #[arg(long)]
        confidence: Option<f64>,
    },
    /// Retire a memory: it is no longer recalled, but its history is kept.
    #[command(alias = "retire")]
    Delete { id: String },
    /// Export memory as JSON (to stdout, or --out FILE).
    Export {
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Merge an export into memory (never duplicates).
    Import { file: PathBuf },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a config file, including its backend_config (no network).
    Check { file: Option<PathBuf> },
}

/// Parses the command line, runs the command, and maps errors to exit codes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let verbose = matches!(cli.command, Command::Serve { .. });
    output::init_logging(verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("memgate: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("memgate: error: {}", one_line(&err.to_string()));
            ExitCode::from(err.exit_code())
        }
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
