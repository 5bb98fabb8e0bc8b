//! How the CLI talks to people: logs to stderr, results to stdout.

use serde::Serialize;

/// Logs go to stderr; `MEMGATE_LOG` (an env-filter) overrides the default
/// level (info for `serve`, warn otherwise).
pub fn init_logging(verbose: bool) {
    let default = if verbose { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MEMGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("memgate: cannot render JSON: {e}"),
    }
}
