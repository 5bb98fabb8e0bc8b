//! The `memgate` command: the HTTP service, the CLI over the configured
//! backend (or a running service with `--url`), `doctor`, `bench`, `eval`.
//!
//! Exit codes: 0 success, 2 bad input (one-line reason), 1 backend failure.

mod cli;
mod migrate;

fn main() -> std::process::ExitCode {
    cli::main()
}
