//! Reads from a real streaming replica (`testkit/postgres-up --replica`, a
//! hot standby made with `pg_basebackup`): read-your-writes, and the replica
//! taken away and brought back mid-run (`testkit/postgres-replica`).

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
    reads_until(b, within, done, async || {
        recall(b, caller, "kiwi").await.unwrap();
    })
    .await;
}

/// Runs `read` every 20 ms until `done` holds of the replica's state, failing
/// after `within`; returns how many reads ran and the slowest of them.
async fn reads_until(
    b: &PostgresBackend,
    within: Duration,
    done: impl Fn(&ReplicaState) -> bool,
    mut read: impl AsyncFnMut(),
) -> (u32, Duration) {
    let started = Instant::now();
    let (mut reads, mut slowest) = (0u32, Duration::ZERO);
    while !done(&state(b)) {
        assert!(
            started.elapsed() < within,
            "replica state not reached in {within:?}: {:?}",
            state(b)
        );
        let read_started = Instant::now();
        read().await;
        slowest = slowest.max(read_started.elapsed());
        reads += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (reads, slowest)
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

/// Replay paused on the standby (`pg_wal_replay_pause()`) and resumed on drop
/// unless `resume` did it, so a failing test never leaves the shared standby
/// stuck.
struct PausedReplay {
    client: tokio_postgres::Client,
    resumed: bool,
}

impl PausedReplay {
    async fn start() -> Self {
        let (client, connection) = tokio_postgres::connect(&replica_dsn(), tokio_postgres::NoTls)
            .await
            .expect("connect to the standby");
        tokio::spawn(connection);
        client
            .execute("SELECT pg_wal_replay_pause()", &[])
            .await
            .expect("pause replay (the testkit's role may)");
        Self {
            client,
            resumed: false,
        }
    }

    async fn resume(mut self) {
        self.client
            .execute("SELECT pg_wal_replay_resume()", &[])
            .await
            .expect("resume replay");
        self.resumed = true;
    }
}

impl Drop for PausedReplay {
    fn drop(&mut self) {
        if self.resumed {
            return;
        }
        let _ = std::process::Command::new("psql")
            .args([&replica_dsn(), "-qc", "SELECT pg_wal_replay_resume()"])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica)"]
async fn replica_lagging_past_the_bound_is_dropped_reads_go_on_and_it_is_taken_back() {
    let _one = ONE_AT_A_TIME.lock().await;
    let b = backend(&common::unique_schema("rlag"));
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    let bob = Caller::new("bob").with_agent("coder").with_thread("t1");
    capture(&b, &alice, "m-seed", "the seed turn mentions kiwi").await;
    capture(&b, &bob, "b-seed", "bob's turn mentions kiwi too").await;
    read_until(&b, &alice, Duration::from_secs(15), |s| {
        s.up && s.replica_reads > 0
    })
    .await;

    // The standby stops replaying; the primary moves on.
    let paused = PausedReplay::start().await;
    capture(&b, &alice, "m-new", "the new turn mentions a quince").await;
    let lagging = Instant::now();
    // Alice reads her own write (from the primary); bob's reads go on.
    let (reads, slowest) = reads_until(
        &b,
        Duration::from_secs(15),
        |s| !s.up,
        async || {
            let block = recall(&b, &alice, "quince").await.unwrap();
            assert!(block.contains("quince"), "a read missed alice's write");
            assert!(recall(&b, &bob, "kiwi").await.unwrap().contains("kiwi"));
        },
    )
    .await;
    let down = state(&b);
    eprintln!(
        "standby lagging: dropped after {:?}, {reads} read pairs, slowest {slowest:?}, {down:?}",
        lagging.elapsed()
    );
    assert!(down.dropped >= 1 && down.waited_out >= 1, "{down:?}");
    assert_eq!(down.failed_reads, 0, "{down:?}");
    let doctor = b.diagnose().await;
    assert!(
        doctor
            .iter()
            .any(|d| d.detail.contains("not used for reads")),
        "{doctor:?}"
    );
    // While dropped, reads are the primary's.
    let before = state(&b);
    assert!(recall(&b, &bob, "kiwi").await.unwrap().contains("kiwi"));
    let after = state(&b);
    assert_eq!(after.replica_reads, before.replica_reads, "{after:?}");
    assert!(after.primary_reads > before.primary_reads, "{after:?}");

    paused.resume().await;
    read_until(&b, &bob, Duration::from_secs(30), |s| {
        s.up && s.restored >= 1 && s.replica_reads > after.replica_reads
    })
    .await;
    eprintln!("standby caught up and back: {:?}", state(&b));
}
