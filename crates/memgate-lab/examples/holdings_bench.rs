//! `cargo run --release -p memgate-lab --example holdings_bench -- [SIZE]`:
//! what DeerFlow's `GET /api/memory` costs memgate on `local` at SIZE
//! items (default 100000): the `holdings` count it uses against the
//! whole-export path a backend without `holdings` takes (export, then
//! count), both on the same filled store, alternating, one user.

use memgate_core::{Caller, MemoryBackend};
use memgate_lab::workload;
use memgate_store::{LocalBackend, LocalConfig, MemoryStore};
use memgate_testsupport::SplitMix;
use std::time::{Duration, Instant};

const ROUNDS: usize = 20;

fn p50_ms(times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    times[times.len() / 2].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let items: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().expect("SIZE is a number of items"));
    let mut rng = SplitMix::new(0x686f_6c64);
    let mut w = workload::Workload::new(&mut rng, items, 100, 100);
    let dir = tempfile::tempdir().unwrap();
    let store =
        MemoryStore::open(dir.path().join("bench.sqlite3"), LocalConfig::default()).unwrap();
    let backend = LocalBackend::from_store(store);
    let user: Caller = w.user.clone();
    while let Some(capture) = w.next_capture(&mut rng) {
        backend.capture(&capture).await.unwrap();
    }
    for i in 0..w.memories {
        backend
            .remember(&user, &w.memory(&mut rng, i).unwrap())
            .await
            .unwrap();
    }
    let (mut counted, mut exported) = (Vec::new(), Vec::new());
    let mut held = None;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let h = backend.holdings(&user).await.unwrap();
        counted.push(started.elapsed());
        let started = Instant::now();
        let export = backend.export(&user).await.unwrap();
        let turns = export.turns.len() as u64;
        exported.push(started.elapsed());
        assert_eq!(h.turns, turns, "both paths count the same turns");
        held = Some(h);
    }
    let held = held.unwrap();
    println!(
        "items={items} turns={} threads={} rounds={ROUNDS}: holdings p50 {:.2} ms, export-then-count p50 {:.2} ms",
        held.turns,
        held.threads,
        p50_ms(&mut counted),
        p50_ms(&mut exported)
    );
    backend.shutdown(Duration::from_secs(30)).await;
}
