//! What the host surfaces cost a turn, in figures.
//!
//! ```text
//! cargo run --profile profiling -p memgate-lab --example host_overhead [MEMORIES]
//! ```
//!
//! Measures, on the real local store filled with MEMORIES explicit memories
//! (default 1000) for one user:
//!
//! - a frozen turn's `prepare_turn` on a 200-message transcript (no recall);
//! - a first turn's `prepare_turn` (recall as a task under the deadline,
//!   then the id swap), on the noop backend and on the local store;
//! - how long `after_turn` takes to hand a capture off, against how long
//!   the capture itself takes (awaited through its handle).

use memgate_core::noop::NoopBackend;
use memgate_core::{BackendContext, Caller, MemoryBackend, Message, RememberRequest};
use memgate_host::{CaptureOutcome, HostSettings, MemoryHost};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> memgate_core::Result<()> {
    let memories: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("MEMORIES must be a number"))
        .unwrap_or(1000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let local = memgate_store::LocalBackend::from_backend_config(
        &serde_json::Map::new(),
        &BackendContext::new(dir.path()),
    )?;
    let alice = Caller::new("alice");
    for i in 0..memories {
        let text =
            format!("Convention {i}: order service module {i} keeps amounts in integer cents");
        local
            .remember(&alice, &RememberRequest::new("fact", &text)?)
            .await?;
    }
    let local: Arc<dyn MemoryBackend> = Arc::new(local);
    println!("memgate-host overhead ({memories} memories in the local store)");

    // A frozen turn: the transcript already has today's reminder.
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(local.clone()),
        HostSettings::default(),
    );
    let mut frozen = long_thread(200);
    host.injector()
        .prepare_turn(&alice.clone().with_thread("t"), &mut frozen)
        .await;
    // Nothing changes a frozen transcript, so one copy serves every run.
    let caller = alice.clone().with_thread("t");
    let mut figures = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        let start = Instant::now();
        let outcome = host.injector().prepare_turn(&caller, &mut frozen).await;
        figures.push(start.elapsed());
        assert!(matches!(outcome, memgate_host::InjectionOutcome::Frozen));
    }
    report("frozen turn, 200 messages", &figures);

    for (name, backend) in [
        (
            "first turn, noop backend",
            Arc::new(NoopBackend) as Arc<dyn MemoryBackend>,
        ),
        ("first turn, local store", local.clone()),
    ] {
        let host = MemoryHost::new(
            memgate_assembly::AssembledBackend::with_defaults(backend),
            HostSettings::default(),
        );
        let figures = measure(2_000, || {
            let host = host.clone();
            async move {
                let mut transcript = vec![Message::human(
                    "Add a refund calculation to the order service.",
                )];
                host.injector()
                    .prepare_turn(&Caller::new("alice").with_thread("t"), &mut transcript)
                    .await;
            }
        })
        .await;
        report(name, &figures);
    }

    // Capture: the hand-off the caller waits for, and the capture itself.
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(local),
        HostSettings::default(),
    );
    let mut handoff = Vec::new();
    let mut total = Vec::new();
    for i in 0..500 {
        let caller = Caller::new("alice").with_thread(format!("capture-{i}"));
        let snapshot = vec![
            Message::human(format!("Question {i} about refunds")).with_id(format!("h{i}")),
            Message::ai(format!("Answer {i}: amounts are integer cents")),
        ];
        let start = Instant::now();
        let handle = host.capture().after_turn(&caller, &snapshot);
        handoff.push(start.elapsed());
        let outcome = handle.wait().await;
        total.push(start.elapsed());
        assert!(
            matches!(outcome, CaptureOutcome::Captured(_)),
            "{outcome:?}"
        );
    }
    report("after_turn hand-off (caller's wait)", &handoff);
    report("after_turn capture (awaited)", &total);
    Ok(())
}

/// A thread with `n` alternating messages, the last one from the user.
fn long_thread(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Message::human(format!("user message {i}")).with_id(format!("m{i}"))
            } else {
                Message::ai(format!("assistant message {i}"))
            }
        })
        .collect()
}

async fn measure<F, Fut>(runs: usize, mut op: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        op().await;
        times.push(start.elapsed());
    }
    times
}

fn report(name: &str, times: &[Duration]) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let pick = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<40} n={:<6} p50={:>9.1?} p99={:>9.1?} max={:>9.1?}",
        sorted.len(),
        pick(0.5),
        pick(0.99),
        pick(1.0)
    );
}
