//! Reads from a real streaming replica (`testkit/postgres-up --replica`, a
//! hot standby made with `pg_basebackup`): read-your-writes, within one
//! backend and across two (two pools, as two `memgate serve` processes
//! have), and the replica taken away and brought back mid-run
//! (`testkit/postgres-replica`).

mod common;

use memgate_core::{
    BackendContext, Caller, CaptureKind, CaptureRequest, FactPatch, ForgetTarget, MemoryBackend,
    Message, RecallRequest, RememberOutcome, RememberRequest,
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

/// Two backends on one primary and its replica, each with its own pool and
/// no state shared in memory: what two `memgate serve` processes behind a
/// load balancer are. Both have seen the replica caught up.
async fn two_processes(schema: &str, caller: &Caller) -> (PostgresBackend, PostgresBackend) {
    let (a, b) = (backend(schema), backend(schema));
    capture(&a, caller, "m-seed", "the seed turn mentions kiwi").await;
    read_until(&a, caller, Duration::from_secs(15), |s| s.up).await;
    read_until(&b, caller, Duration::from_secs(15), |s| s.up).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica)"]
async fn replica_read_your_writes_holds_across_two_backends_over_1000_writes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    let (a, b) = two_processes(&common::unique_schema("ryw_two"), &alice).await;
    let before = state(&b);
    for i in 0..1000 {
        // Captures and explicit memories, each written through `a` and
        // read straight after through `b`.
        let token = format!("pomelo{i}x");
        if i % 2 == 0 {
            capture(
                &a,
                &alice,
                &format!("m{i}"),
                &format!("today's fruit is {token}"),
            )
            .await;
        } else {
            let fact = RememberRequest::new("fact", &format!("likes the {token}")).unwrap();
            a.remember(&alice, &fact).await.unwrap();
        }
        let block = recall(&b, &alice, &token).await.unwrap();
        assert!(
            block.contains(&token),
            "read {i} through the other backend missed the write {token}: {:?}",
            state(&b)
        );
    }
    let after = state(&b);
    let (replica, primary) = (
        after.replica_reads - before.replica_reads,
        after.primary_reads - before.primary_reads,
    );
    eprintln!(
        "read-your-writes across two backends, 1000 writes: the replica served {replica} reads, the primary {primary} ({} waited out the wait); {after:?}",
        after.waited_out - before.waited_out
    );
    // The replica served the reads (else this checked only the primary).
    assert!(replica >= 500, "{after:?}");
    assert_eq!(after.failed_reads, 0, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica)"]
async fn replica_a_forget_through_one_backend_is_never_read_back_through_another() {
    let _one = ONE_AT_A_TIME.lock().await;
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    let (a, b) = two_processes(&common::unique_schema("ryw_forget"), &alice).await;
    let before = state(&b);
    for i in 0..100 {
        // A thread forget keeps the scope's row; a scope forget deletes it,
        // and the next capture creates it again.
        let (target, what) = if i % 4 == 3 {
            (ForgetTarget::Scope, "scope")
        } else {
            (ForgetTarget::Thread, "thread")
        };
        let caller = alice.clone().with_thread(format!("t{i}"));
        let token = format!("plum{i}x");
        capture(
            &a,
            &caller,
            &format!("p{i}"),
            &format!("the secret fruit is {token}"),
        )
        .await;
        assert!(recall(&b, &caller, &token).await.unwrap().contains(&token));
        a.forget(&caller, &target).await.unwrap();
        let block = recall(&b, &caller, &token).await.unwrap();
        assert!(
            !block.contains(&token),
            "read {i} through the other backend still showed {token} after its {what} was forgotten: {:?}",
            state(&b)
        );
    }
    let after = state(&b);
    eprintln!(
        "forget across two backends, 100 rounds: the replica served {} reads, the primary {}; {after:?}",
        after.replica_reads - before.replica_reads,
        after.primary_reads - before.primary_reads
    );
    assert!(
        after.replica_reads - before.replica_reads >= 100,
        "{after:?}"
    );
    assert_eq!(after.failed_reads, 0, "{after:?}");
}

/// `caller`'s scope's write mark on the primary (`None`: no scope row).
async fn write_mark(db: &tokio_postgres::Client, schema: &str, caller: &Caller) -> Option<i64> {
    let key = memgate_recall::scope::ScopeKey::of(caller);
    db.query_opt(
        &format!("SELECT write_mark FROM {schema}.scopes WHERE user_id = $1 AND peer = $2"),
        &[&key.user, &key.peer],
    )
    .await
    .unwrap()
    .map(|r| r.get(0))
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn replica_every_write_recall_can_see_moves_its_scopes_write_mark() {
    let schema = common::unique_schema("ryw_mark");
    let b = common::backend(&common::dsn(), &schema);
    let db = common::connect(&common::dsn()).await;
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    let bob = Caller::new("bob").with_agent("coder").with_thread("t1");
    capture(&b, &bob, "b1", "bob's own turn").await;
    let bobs = write_mark(&db, &schema, &bob).await;
    let mut last = write_mark(&db, &schema, &alice).await;
    assert_eq!(last, None, "a scope never written has no mark");
    let mut moved = |what: &str, now: Option<i64>| {
        assert!(
            now.is_some() && now > last,
            "{what} did not move the mark: {last:?} -> {now:?}"
        );
        last = now;
    };

    capture(&b, &alice, "m1", "the first turn mentions kiwi").await;
    moved("a capture", write_mark(&db, &schema, &alice).await);
    let fact = RememberRequest::new("fact", "likes kiwi").unwrap();
    let RememberOutcome::Stored { citation } = b.remember(&alice, &fact).await.unwrap() else {
        panic!("not stored")
    };
    moved("a remember", write_mark(&db, &schema, &alice).await);
    let patch = FactPatch {
        text: Some("likes green kiwi".to_owned()),
        ..FactPatch::default()
    };
    b.revise_fact(&alice, citation.as_str(), &patch)
        .await
        .unwrap();
    moved("a revision", write_mark(&db, &schema, &alice).await);
    b.retire_fact(&alice, citation.as_str()).await.unwrap();
    moved("a retire", write_mark(&db, &schema, &alice).await);
    let fact = RememberRequest::new("fact", "likes plums").unwrap();
    let RememberOutcome::Stored { citation } = b.remember(&alice, &fact).await.unwrap() else {
        panic!("not stored")
    };
    moved("a second remember", write_mark(&db, &schema, &alice).await);
    let forget_fact = ForgetTarget::Fact {
        id: citation.as_str().to_owned(),
    };
    b.forget(&alice, &forget_fact).await.unwrap();
    moved("a fact's forget", write_mark(&db, &schema, &alice).await);
    b.forget(&alice, &ForgetTarget::Thread).await.unwrap();
    moved("a thread's forget", write_mark(&db, &schema, &alice).await);

    // What writes nothing marks nothing: the same snapshot again, the same memory again.
    capture(&b, &alice, "m2", "the second turn").await;
    moved(
        "a capture after the forget",
        write_mark(&db, &schema, &alice).await,
    );
    capture(&b, &alice, "m2", "the second turn").await;
    b.remember(
        &alice,
        &RememberRequest::new("fact", "likes pears").unwrap(),
    )
    .await
    .unwrap();
    let unchanged = write_mark(&db, &schema, &alice).await;
    b.remember(
        &alice,
        &RememberRequest::new("fact", "likes pears").unwrap(),
    )
    .await
    .unwrap();
    capture(&b, &alice, "m2", "the second turn").await;
    assert_eq!(write_mark(&db, &schema, &alice).await, unchanged);

    // A scope's forget takes its row (and so its mark) away; the next write
    // marks it above every mark it had.
    b.forget(&alice, &ForgetTarget::Scope).await.unwrap();
    assert_eq!(write_mark(&db, &schema, &alice).await, None);
    capture(&b, &alice, "m3", "a turn after the scope's forget").await;
    let again = write_mark(&db, &schema, &alice).await;
    assert!(again > unchanged, "{unchanged:?} -> {again:?}");
    // Another scope's mark never moved.
    assert_eq!(write_mark(&db, &schema, &bob).await, bobs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn replica_write_marks_grow_in_commit_order_when_a_writer_waits_for_the_scope() {
    // A writer that waits on the scope's row draws its mark again once the
    // row is free (PostgreSQL re-evaluates the update on the row's new
    // version): were the draw made before the wait, the first writer's later
    // mark would be above it, and a standby showing that mark would pass for
    // having replayed the waiting writer's commit.
    let schema = common::unique_schema("ryw_order");
    let b = common::backend(&common::dsn(), &schema);
    let alice = Caller::new("alice").with_agent("coder").with_thread("t1");
    for text in ["likes kiwi", "likes plums"] {
        let fact = RememberRequest::new("fact", text).unwrap();
        b.remember(&alice, &fact).await.unwrap();
    }
    let open = || async {
        let c = common::connect(&common::dsn()).await;
        c.batch_execute(&format!("SET search_path = {schema}"))
            .await
            .unwrap();
        c
    };
    let (first, second, watcher) = (open().await, open().await, open().await);
    let touch =
        |text: &str| format!("UPDATE memories SET updated_at = updated_at WHERE text = '{text}'");
    let mark = "SELECT write_mark FROM scopes WHERE user_id = 'alice'";

    first.batch_execute("BEGIN").await.unwrap();
    first.batch_execute(&touch("likes kiwi")).await.unwrap();
    // The second writer changes another memory of the scope and waits for
    // the scope's row inside its trigger.
    let waiting = tokio::spawn(async move {
        second.batch_execute(&touch("likes plums")).await.unwrap();
    });
    common::until_a_statement_waits_for_a_lock(&watcher, "likes plums").await;
    // The first writer marks again, after the waiting writer's first draw.
    first.batch_execute(&touch("likes kiwi")).await.unwrap();
    let first_mark: i64 = first.query_one(mark, &[]).await.unwrap().get(0);
    first.batch_execute("COMMIT").await.unwrap();
    waiting.await.unwrap();
    let last: i64 = watcher.query_one(mark, &[]).await.unwrap().get(0);
    assert!(
        last > first_mark,
        "the writer that committed last left mark {last}, below the first writer's {first_mark}"
    );
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
