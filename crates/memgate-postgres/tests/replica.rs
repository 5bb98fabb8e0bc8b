//! Reads from a real streaming replica (`testkit/postgres-up --replica`, a
//! hot standby made with `pg_basebackup`): read-your-writes, and the replica
//! taken away and brought back mid-run (`testkit/postgres-replica`), and its
//! replay held back past `replica_max_lag_ms` (`pg_wal_replay_pause()`).

mod common;

use memgate_core::{
    BackendContext, Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, RecallRequest,
};
use memgate_postgres::{PostgresBackend, PostgresConfig, ReplicaState};
use serde_json::json;
use std::time::{Duration, Instant};

/// The tests here share one replica, and one of them stops it.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn replica_dsn() -> String {
    let [dsn] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_POSTGRES_REPLICA_DSN"]);
    dsn
}

/// A backend writing to the test cluster and reading from its hot standby.
fn backend(schema: &str) -> PostgresBackend {
    let config = json!({
        "dsn": common::dsn(),
        "replica_dsn": replica_dsn(),
        "replica_max_lag_ms": 1000,
        "replica_wait_ms": 500,
        "connect_timeout_ms": 1000,
    });
    let settings = PostgresConfig::from_backend_config(
        config.as_object().unwrap(),
        &BackendContext::new("/x"),
    )
    .unwrap()
    .with_schema(schema)
    .unwrap();
    PostgresBackend::new(settings).unwrap()
}

fn state(b: &PostgresBackend) -> ReplicaState {
    b.replica_state().expect("a replica is configured")
}

async fn capture(b: &PostgresBackend, caller: &Caller, id: &str, text: &str) {
    b.capture(&CaptureRequest {
        caller: caller.clone(),
        messages: vec![Message::human(text).with_id(id)],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    })
    .await
    .unwrap();
}

async fn recall(b: &PostgresBackend, caller: &Caller, query: &str) -> memgate_core::Result<String> {
    b.recall(&RecallRequest {
        caller: caller.clone(),
        query: Some(query.to_owned()),
    })
    .await
    .map(|r| r.text)
}

/// Reads until `done` holds of the replica's state (a read starts the lag
/// probe that takes a replica back); every read must succeed.
async fn read_until(
    b: &PostgresBackend,
    caller: &Caller,
    within: Duration,
    done: impl Fn(&ReplicaState) -> bool,
) {
    let started = Instant::now();
    while !done(&state(b)) {
        assert!(
            started.elapsed() < within,
            "replica state not reached in {within:?}: {:?}",
            state(b)
        );
        recall(b, caller, "kiwi").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn replica_ctl(action: &str) -> std::io::Result<std::process::ExitStatus> {
    std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testkit/postgres-replica"
    ))
    .arg(action)
    .status()
}

/// Starts the replica again if a test stopped it and then failed.
struct StartOnDrop(bool);

impl Drop for StartOnDrop {
    fn drop(&mut self) {
        if self.0 {
            let _ = replica_ctl("start");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica)"]
async fn replica_read_your_writes_holds_over_1000_captures() {
    let _one = ONE_AT_A_TIME.lock().await;
    let b = backend(&common::unique_schema("ryw"));
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    capture(&b, &alice, "m-seed", "the seed turn mentions kiwi").await;
    read_until(&b, &alice, Duration::from_secs(15), |s| s.up).await;
    let before = state(&b);
    for i in 0..1000 {
        let token = format!("pomelo{i}x");
        capture(
            &b,
            &alice,
            &format!("m{i}"),
            &format!("today's fruit is {token}"),
        )
        .await;
        let block = recall(&b, &alice, &token).await.unwrap();
        assert!(
            block.contains(&token),
            "read {i} missed its own write {token}: {:?}",
            state(&b)
        );
    }
    let after = state(&b);
    eprintln!("read-your-writes over 1000 captures: {before:?} -> {after:?}");
    // The replica served the reads (else this checked only the primary).
    assert!(
        after.replica_reads - before.replica_reads >= 500,
        "{after:?}"
    );
    assert_eq!(after.failed_reads, 0, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica)"]
async fn replica_stopped_mid_run_reads_fall_back_and_it_is_used_again_when_back() {
    let _one = ONE_AT_A_TIME.lock().await;
    let b = std::sync::Arc::new(backend(&common::unique_schema("rstop")));
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    capture(&b, &alice, "m-seed", "the seed turn mentions kiwi").await;
    read_until(&b, &alice, Duration::from_secs(15), |s| {
        s.up && s.replica_reads > 0
    })
    .await;

    // Reads run without pause while the replica is stopped under them.
    let mut restart = StartOnDrop(true);
    let stopping = tokio::task::spawn_blocking(|| replica_ctl("stop"));
    let deadline = Duration::from_millis(1000);
    let (mut reads, mut slowest) = (0u32, Duration::ZERO);
    let mut stopped_at = None;
    while stopped_at.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(2)) {
        let started = Instant::now();
        let block = recall(&b, &alice, "kiwi").await;
        slowest = slowest.max(started.elapsed());
        reads += 1;
        assert!(
            block.unwrap().contains("kiwi"),
            "read {reads} lost the turn"
        );
        if stopped_at.is_none() && stopping.is_finished() {
            stopped_at = Some(Instant::now());
        }
    }
    assert!(stopping.await.unwrap().unwrap().success());
    let down = state(&b);
    eprintln!("replica stopped: {reads} reads, slowest {slowest:?}, {down:?}");
    assert!(!down.up && down.dropped >= 1, "{down:?}");
    assert!(slowest <= deadline, "a read took {slowest:?}");
    let figures = b.figures();
    let dropped = figures
        .iter()
        .find(|f| f.name == "memgate_postgres_replica_dropped_total")
        .expect("the drop is a metric");
    assert!(dropped.value >= 1, "{figures:?}");
    let doctor = b.diagnose().await;
    assert!(
        doctor
            .iter()
            .any(|d| d.detail.contains("not used for reads")),
        "{doctor:?}"
    );

    assert!(replica_ctl("start").unwrap().success());
    restart.0 = false;
    let before = down.replica_reads;
    read_until(&b, &alice, Duration::from_secs(30), |s| {
        s.up && s.restored >= 1 && s.replica_reads > before
    })
    .await;
    eprintln!("replica back: {:?}", state(&b));
}

/// Pauses or resumes the standby's WAL replay (the test role is a superuser).
async fn hold_replay(paused: bool) {
    let sql = if paused {
        "SELECT pg_wal_replay_pause()"
    } else {
        "SELECT pg_wal_replay_resume()"
    };
    common::connect(&replica_dsn())
        .await
        .execute(sql, &[])
        .await
        .unwrap();
}

/// Resumes the standby's replay if a test paused it and then failed, so the
/// other tests do not find it held back.
struct ResumeOnDrop(bool);

impl Drop for ResumeOnDrop {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::process::Command::new("psql")
                .arg(replica_dsn())
                .args(["-Atc", "SELECT pg_wal_replay_resume()"])
                .status();
        }
    }
}

/// Captures one turn naming `token` and reads it straight back.
async fn write_then_read(b: &PostgresBackend, caller: &Caller, id: &str, token: &str) {
    capture(b, caller, id, &format!("today's fruit is {token}")).await;
    let block = recall(b, caller, token).await.unwrap();
    assert!(
        block.contains(token),
        "the read missed its own write {token}: {:?}",
        state(b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica)"]
async fn replica_replay_held_past_the_bound_sends_reads_to_the_primary_until_it_resumes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let b = backend(&common::unique_schema("rlag"));
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    capture(&b, &alice, "m-seed", "the seed turn mentions kiwi").await;
    read_until(&b, &alice, Duration::from_secs(15), |s| {
        s.up && s.replica_reads > 0
    })
    .await;

    // Replay held back while writes go on: the standby falls behind them,
    // and the lag probe drops it once the lag passes the 1 s bound.
    let mut resume = ResumeOnDrop(true);
    hold_replay(true).await;
    let held_at = Instant::now();
    let mut i = 0;
    while state(&b).up {
        assert!(
            held_at.elapsed() < Duration::from_secs(15),
            "a standby held back was never dropped: {:?}",
            state(&b)
        );
        write_then_read(&b, &alice, &format!("m{i}"), &format!("pomelo{i}x")).await;
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let down = state(&b);
    eprintln!(
        "standby held back: dropped after {:?}, {down:?}",
        held_at.elapsed()
    );
    assert!(down.dropped >= 1, "{down:?}");

    // While it is dropped, every read goes to the primary and sees its write.
    for j in 0..20 {
        write_then_read(&b, &alice, &format!("h{j}"), &format!("quince{j}x")).await;
    }
    let held = state(&b);
    assert!(!held.up, "{held:?}");
    assert_eq!(held.replica_reads, down.replica_reads, "{held:?}");
    assert!(held.primary_reads >= down.primary_reads + 20, "{held:?}");
    assert_eq!(
        held.failed_reads, 0,
        "a lagging standby is not a failed read: {held:?}"
    );
    let figures = b.figures();
    let dropped = figures
        .iter()
        .find(|f| f.name == "memgate_postgres_replica_dropped_total")
        .expect("the drop is a metric");
    assert!(dropped.value >= 1, "{figures:?}");
    let doctor = b.diagnose().await;
    assert!(
        doctor
            .iter()
            .any(|d| d.detail.contains("not used for reads")),
        "{doctor:?}"
    );

    // Replay resumed: the standby catches up and serves reads again.
    hold_replay(false).await;
    resume.0 = false;
    read_until(&b, &alice, Duration::from_secs(30), |s| {
        s.up && s.restored >= 1 && s.replica_reads > held.replica_reads
    })
    .await;
    write_then_read(&b, &alice, "m-back", "lychee").await;
    eprintln!("standby back: {:?}", state(&b));
}
