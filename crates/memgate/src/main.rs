//! The `memgate` command: the HTTP service, the CLI over the configured
//! backend (or a running service with `--url`), `doctor`, `bench`, `eval`.
//!
//! Exit codes: 0 success, 2 bad input (one-line reason), 1 backend failure.

mod cli;
mod migrate;

/// jemalloc serves the whole process, the bundled SQLite included: under 200
/// concurrent recalls glibc's malloc kept what a burst freed in per-thread
/// arenas (idle RSS +60–80% over the pre-load RSS even capped and trimmed)
/// and served fewer requests; jemalloc's background thread returns freed
/// pages by itself (docs/design/heap-after-bursts.md).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
