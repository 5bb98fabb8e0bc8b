//! The durable writes one capture makes, counted exactly (this binary holds
//! one test, so no other test shares the process-wide fsync counter), against
//! the FAKE OpenViking of `common/fake.rs`. Prints the figures for
//! BENCHMARKS.md (`cargo test -p memgate-openviking --test capture_fsyncs --
//! --nocapture`); wall times are printed, never asserted.
//!
//! - a capture that sends: the intent, saved as the outcome with the way
//!   back (body + directory), then confirmed in place without an fsync: 2
//!   fsyncs, those of a plain durable cursor save;
//! - an unchanged re-capture: no write at all (0 fsyncs, file untouched).

mod common;

use common::fake::FakeOpenViking;
use common::*;
use memgate_core::{Caller, MemoryBackend};
use memgate_openviking::cursor::fsync_count;
use std::time::{Duration, Instant};

#[tokio::test]
async fn capture_fsyncs_are_two_when_sending_and_zero_when_unchanged() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), |_| {});
    println!("situation            N   fsyncs   wall (fake server on loopback)");
    for n in [100usize, 1_000] {
        let caller = Caller::new("alice")
            .with_agent("research")
            .with_thread(format!("fsync-{n}"));
        let mut messages = conversation(n, "m");
        let run = |label: &'static str, messages: Vec<_>, expected: u64| {
            let backend = &backend;
            let caller = caller.clone();
            async move {
                let before = fsync_count();
                let started = Instant::now();
                backend
                    .capture(&capture_request(&caller, messages))
                    .await
                    .unwrap();
                let wall: Duration = started.elapsed();
                let spent = fsync_count() - before;
                println!(
                    "{label:<18} {n:>5} {spent:>8}   {:>8.2} ms",
                    wall.as_secs_f64() * 1e3
                );
                assert_eq!(spent, expected, "{label} at {n}");
            }
        };
        run("first capture", messages.clone(), 2).await;
        run("unchanged", messages.clone(), 0).await;
        messages.extend(conversation(2, &format!("new{n}-")));
        run("+2 messages", messages.clone(), 2).await;
        run("unchanged", messages, 0).await;
    }
    backend.shutdown(Duration::from_secs(5)).await;
}
