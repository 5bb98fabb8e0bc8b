//! The pure-Rust side of the Python boundary benchmark
//! (`python/bench/boundary.py`): the recall and capture the Python managers
//! make, on the same kind of backend (`local`, opened through the assembly
//! as the Python extension opens it) and the same transcript, timed with no
//! Python in the loop.
//!
//! ```text
//! cargo build --release -p memgate-lab --example boundary_baseline
//! target/release/examples/boundary_baseline --storage DIR --transcript FILE \
//!     [--user alice] [--thread bench] [--query TEXT]
//! ```
//!
//! `FILE` holds the transcript as a JSON list of messages (LangChain's
//! fields: `type`, `content`, `id`, `tool_calls`, …), converted once before
//! any timing. The thread is captured once, then `ready` is printed. Each
//! line read from stdin then runs one timed recall and one timed capture of
//! the whole (already captured) transcript and prints `RECALL CAPTURE` in
//! seconds, so the caller pairs each with a Python call of its own. End of
//! input drains the backend and exits.

use memgate_assembly::{open_backend, BackendSetup, ManagerClass, MemoryConfig};
use memgate_core::setup::process_env;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, RecallRequest, UserId,
};
use serde_json::{Map, Value};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let storage = arg(&args, "--storage").ok_or("--storage DIR is required")?;
    let transcript = arg(&args, "--transcript").ok_or("--transcript FILE is required")?;
    let user = arg(&args, "--user").unwrap_or_else(|| "alice".to_owned());
    let thread = arg(&args, "--thread").unwrap_or_else(|| "bench".to_owned());
    let query = arg(&args, "--query");
    let messages: Vec<Message> = serde_json::from_slice(&std::fs::read(&transcript)?)?;

    // The Python extension's runtime: one worker, calls blocked on from
    // the calling thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut backend_config = Map::new();
    backend_config.insert("storage_path".to_owned(), Value::String(storage.clone()));
    let memory = MemoryConfig {
        manager_class: ManagerClass::Local,
        backend_config,
        ..MemoryConfig::default()
    };
    let backend = {
        let _entered = runtime.enter();
        open_backend(&memory, &BackendSetup::new(&storage, process_env()))?
    };
    let caller = Caller {
        user: UserId::from_host(Some(&user)),
        agent: None,
        thread: Some(thread),
    };
    let capture = CaptureRequest {
        caller: caller.clone(),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    let recall = RecallRequest { caller, query };
    runtime.block_on(backend.capture(&capture))?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        line?;
        let start = Instant::now();
        runtime.block_on(backend.recall(&recall))?;
        let recall_s = start.elapsed().as_secs_f64();
        // A Rust host builds a new request each turn: a fresh copy, made
        // before the timer starts and dropped before it stops.
        let request = capture.clone();
        let start = Instant::now();
        runtime.block_on(backend.capture(&request))?;
        drop(request);
        let capture_s = start.elapsed().as_secs_f64();
        writeln!(out, "{recall_s} {capture_s}")?;
        out.flush()?;
    }
    runtime.block_on(backend.drain(Duration::from_secs(5)));
    Ok(())
}
