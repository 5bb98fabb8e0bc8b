//! What read-your-writes costs on `postgres`: capture rates, and recall
//! latency through a read replica.
//!
//! ```text
//! cargo run -p memgate-lab --example replica_bench -- [--captures 2000] [--clients 8]
//!     [--recalls 1000] [--rounds 2]
//! ```
//!
//! Needs `MEMGATE_TEST_POSTGRES_DSN` (`testkit/postgres-up`); the recall
//! phase also `MEMGATE_TEST_POSTGRES_REPLICA_DSN` (`testkit/postgres-up
//! --replica`), else it is skipped. Each round, in a fresh schema:
//!
//! - captures of one new exchange (a human and an AI turn) from one client;
//! - the same from `--clients` concurrent clients writing to one scope (each
//!   its own thread): the hot scope, where a per-scope row lock serialises
//!   the writes;
//! - the same from `--clients` clients each writing to a scope of its own;
//! - with the replica: `--recalls` recalls of a scope with nothing written
//!   since (the replica answers), and `--recalls` pairs of a capture then a
//!   recall of it through a second backend (another process's pool), p50 and
//!   p99, with how many reads the replica and the primary served.
//!
//! Figures are printed, never asserted, with the load average before and
//! after each round. Each round's schema is dropped at its end.

use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, RecallRequest};
use memgate_lab::process::{drop_schema, load_average};
use memgate_postgres::{PostgresBackend, PostgresConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Options {
    captures: usize,
    clients: usize,
    recalls: usize,
    rounds: usize,
}

fn options() -> Options {
    let mut o = Options {
        captures: 2000,
        clients: 8,
        recalls: 1000,
        rounds: 2,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        let n: usize = value
            .parse()
            .unwrap_or_else(|_| panic!("{flag} must be a count"));
        match flag.as_str() {
            "--captures" => o.captures = n,
            "--clients" => o.clients = n.max(1),
            "--recalls" => o.recalls = n,
            "--rounds" => o.rounds = n,
            _ => panic!("unknown flag {flag}"),
        }
    }
    o
}

fn backend(dsn: &str, replica: Option<&str>, schema: &str, pool: usize) -> PostgresBackend {
    let mut config = json!({ "dsn": dsn, "pool_size": pool });
    if let Some(replica) = replica {
        config["replica_dsn"] = json!(replica);
        config["replica_max_lag_ms"] = json!(1000);
        config["replica_wait_ms"] = json!(500);
    }
    let settings = PostgresConfig::from_backend_config(
        config.as_object().unwrap(),
        &memgate_core::BackendContext::new("/x"),
    )
    .unwrap()
    .with_schema(schema)
    .unwrap();
    PostgresBackend::new(settings).unwrap()
}

/// One exchange of `thread`, new text each time (`n` makes it unique).
fn exchange(caller: &Caller, n: usize) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone(),
        messages: vec![
            Message::human(format!("question {n}: what about the tangerine{n}x plan"))
                .with_id(format!("h{n}")),
            Message::ai(format!(
                "answer {n}: the tangerine{n}x plan ships on day {}",
                n % 31
            ))
            .with_id(format!("a{n}")),
        ],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

/// Captures `total` exchanges from `clients` concurrent callers;
/// `caller(i)` is client i's identity. Returns captures per second.
async fn capture_rate(
    b: &Arc<PostgresBackend>,
    total: usize,
    clients: usize,
    caller: impl Fn(usize) -> Caller,
) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (b, who) = (Arc::clone(b), caller(i));
            tokio::spawn(async move {
                for n in (i..total).step_by(clients) {
                    let report = b.capture(&exchange(&who, n)).await.unwrap();
                    assert_eq!(report.stored, 2);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

fn latency(mut timings: Vec<Duration>) -> String {
    timings.sort_unstable();
    format!(
        "p50={:.2} ms p99={:.2} ms",
        percentile_ms(&timings, 0.5),
        percentile_ms(&timings, 0.99)
    )
}

async fn recall(b: &PostgresBackend, caller: &Caller, query: &str) -> String {
    b.recall(&RecallRequest {
        caller: caller.clone(),
        query: Some(query.to_owned()),
    })
    .await
    .unwrap()
    .text
}

async fn round(o: &Options, dsn: &str, replica: Option<&str>, r: usize) {
    let schema = memgate_testsupport::real::unique_schema("replica_bench");
    println!("round {r}: load average {}", load_average());
    let writer = Arc::new(backend(dsn, None, &schema, o.clients));
    writer.migrate().await.unwrap();
    let one = capture_rate(&writer, o.captures, 1, |_| {
        Caller::new("solo").with_agent("a").with_thread("t")
    })
    .await;
    let hot = capture_rate(&writer, o.captures, o.clients, |i| {
        Caller::new("hot")
            .with_agent("a")
            .with_thread(format!("t{i}"))
    })
    .await;
    let spread = capture_rate(&writer, o.captures, o.clients, |i| {
        Caller::new(format!("u{i}"))
            .with_agent("a")
            .with_thread("t")
    })
    .await;
    println!(
        "  captures/s (one exchange each): 1 client {one:.0}; {c} clients on one scope {hot:.0}; {c} clients on {c} scopes {spread:.0}",
        c = o.clients
    );
    if let Some(replica) = replica {
        let a = backend(dsn, Some(replica), &schema, 4);
        let b = backend(dsn, Some(replica), &schema, 4);
        let quiet = Caller::new("solo").with_agent("a").with_thread("t");
        let writer_of_b = Caller::new("ryw").with_agent("a").with_thread("t");
        // A read starts the lag probe that lets the replica serve reads.
        let up = Instant::now();
        while !a.replica_state().unwrap().up || !b.replica_state().unwrap().up {
            assert!(up.elapsed() < Duration::from_secs(15), "replica never up");
            recall(&a, &quiet, "tangerine1x").await;
            recall(&b, &quiet, "tangerine1x").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = b.replica_state().unwrap();
        let mut quiet_reads = Vec::with_capacity(o.recalls);
        for n in 0..o.recalls {
            let started = Instant::now();
            recall(&b, &quiet, &format!("tangerine{}x", n % o.captures)).await;
            quiet_reads.push(started.elapsed());
        }
        let mid = b.replica_state().unwrap();
        let mut own_reads = Vec::with_capacity(o.recalls);
        let mut missed = 0;
        for n in 0..o.recalls {
            a.capture(&exchange(&writer_of_b, o.captures + n))
                .await
                .unwrap();
            let started = Instant::now();
            let text = recall(&b, &writer_of_b, &format!("tangerine{}x", o.captures + n)).await;
            own_reads.push(started.elapsed());
            missed += usize::from(!text.contains(&format!("tangerine{}x", o.captures + n)));
        }
        let after = b.replica_state().unwrap();
        println!(
            "  recall, no write since: {} (replica {}, primary {})",
            latency(quiet_reads),
            mid.replica_reads - before.replica_reads,
            mid.primary_reads - before.primary_reads
        );
        println!(
            "  recall right after a capture through another backend: {} (replica {}, primary {}, waited out {}); {missed} of {} missed the capture",
            latency(own_reads),
            after.replica_reads - mid.replica_reads,
            after.primary_reads - mid.primary_reads,
            after.waited_out - mid.waited_out,
            o.recalls
        );
    }
    println!("  load average after: {}", load_average());
    drop_schema(dsn, &schema).await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = options();
    let dsn = memgate_testsupport::real::postgres_dsn();
    let replica = std::env::var("MEMGATE_TEST_POSTGRES_REPLICA_DSN").ok();
    if replica.is_none() {
        println!("no MEMGATE_TEST_POSTGRES_REPLICA_DSN: recall through a replica skipped");
    }
    for r in 1..=o.rounds {
        round(&o, &dsn, replica.as_deref(), r).await;
    }
}
