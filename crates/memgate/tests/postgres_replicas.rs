//! Several `memgate serve` processes on one PostgreSQL database: the
//! replicas a load balancer spreads a host's calls over. Real processes, a
//! real cluster (`testkit/postgres-up`), real HTTP on loopback.
//!
//! Bounded (a fixed number of calls, every wait with a deadline), and each
//! test prints its figures. `#[ignore]`d: a plain `cargo test` lists them as
//! ignored; `--include-ignored` (as testkit/run-tests does) runs them.

use memgate_core::{
    Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, RememberOutcome, RememberRequest,
};
use memgate_postgres::{PostgresBackend, PostgresConfig};
use memgate_server::client::HttpBackend;
use memgate_testsupport::real::unique_schema;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fault suite: three processes, 200 clients, kill -9 and a restart.
#[path = "postgres_replicas/fleet.rs"]
mod fleet;

const BIN: &str = env!("CARGO_BIN_EXE_memgate");
const DSN_ENV: &str = "MEMGATE_TEST_POSTGRES_DSN";

/// The restart test takes the cluster away under every other test here:
/// it holds this for writing, the others for reading.
static CLUSTER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The test cluster's DSN (the tests are `#[ignore]`d: a plain `cargo test`
/// lists them as ignored, `--include-ignored` runs them).
fn dsn() -> String {
    memgate_testsupport::real::postgres_dsn()
}

/// Writes a config for `schema` under `home`.
fn write_config(home: &Path, schema: &str) -> std::path::PathBuf {
    config_file(home, schema, DSN_ENV, "    pool_size: 4\n", "")
}

/// Writes a config for `schema` under `home` that reads its DSN from
/// `dsn_env`; `backend` and `memory` are further YAML lines under
/// `backend_config` and `memory`.
fn config_file(
    home: &Path,
    schema: &str,
    dsn_env: &str,
    backend: &str,
    memory: &str,
) -> std::path::PathBuf {
    let path = home.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "memory:\n{memory}  manager_class: postgres\n  backend_config:\n    dsn_env: {dsn_env}\n    schema: {schema}\n{backend}"
        ),
    )
    .unwrap();
    path
}

/// One `memgate serve` replica; killed when dropped.
struct Replica {
    child: Child,
    url: String,
}

impl Replica {
    fn spawn(home: &Path, config: &Path) -> Child {
        Self::spawn_with(home, config, &[])
    }

    /// Spawns with `env` set on top of the test's own environment.
    fn spawn_with(home: &Path, config: &Path, env: &[(&str, &str)]) -> Child {
        Command::new(BIN)
            .args(["serve", "--addr", "127.0.0.1:0", "--config"])
            .arg(config)
            .current_dir(home)
            .env("MEMGATE_HOME", home.join("state"))
            .envs(env.iter().copied())
            .env_remove("MEMGATE_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits (at most 30 s) for the serving line.
    fn ready(mut child: Child) -> Replica {
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut seen = String::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap().to_owned();
                    let _ = tx.send(Ok(format!("http://{addr}")));
                } else {
                    seen.push_str(&line);
                    seen.push('\n');
                }
            }
            let _ = tx.send(Err(seen));
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(url)) => Replica { child, url },
            other => {
                let _ = child.kill();
                panic!("replica did not start: {other:?}")
            }
        }
    }

    fn start_all(home: &Path, config: &Path, n: usize) -> Vec<Replica> {
        // Spawned together, so their migrations race.
        let children: Vec<Child> = (0..n).map(|_| Self::spawn(home, config)).collect();
        children.into_iter().map(Self::ready).collect()
    }

    async fn client(&self) -> Arc<dyn MemoryBackend> {
        Arc::new(
            HttpBackend::connect(&self.url, None, Duration::from_secs(30))
                .await
                .unwrap(),
        )
    }

    fn kill9(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill9();
        }
    }
}

fn direct(dsn: &str, schema: &str) -> PostgresBackend {
    PostgresBackend::new(
        PostgresConfig::for_dsn(dsn)
            .unwrap()
            .with_schema(schema)
            .unwrap(),
    )
    .unwrap()
}

fn transcript(prefix: &str, n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!("{prefix} turn {i} mentions subject{i}");
            let m = if i % 2 == 0 {
                Message::human(text)
            } else {
                Message::ai(text)
            };
            m.with_id(format!("{prefix}-{i}"))
        })
        .collect()
}

fn capture(caller: &Caller, thread: &str, messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone().with_thread(thread),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

/// Restarts the test cluster in place (`testkit/postgres-restart`:
/// `pg_ctl restart -m fast`, waiting until it accepts connections again).
async fn restart_postgres() {
    let restart = tokio::task::spawn_blocking(|| {
        Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testkit/postgres-restart"
        ))
        .status()
    });
    assert!(
        restart.await.unwrap().unwrap().success(),
        "the restart failed"
    );
}

/// After the cluster is back, how long a call may still fail: a pooled
/// connection the server closed is found dead by the statement that uses it.
const RESTART_GRACE: Duration = Duration::from_secs(1);

/// Whether a call that ran `from`..`to` overlapped a restart that took the
/// cluster down at `down_at` and had it back at `up_at` (plus the grace).
fn in_restart_window(from: Duration, to: Duration, down_at: Duration, up_at: Duration) -> bool {
    to >= down_at && from <= up_at + RESTART_GRACE
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn four_replicas_race_their_migrations_at_start_up() {
    let _cluster = CLUSTER.read().await;
    let dsn = dsn();
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("mig");
    let config = write_config(home.path(), &schema);
    let started = Instant::now();
    let replicas = Replica::start_all(home.path(), &config, 4);
    let elapsed = started.elapsed();
    let db = direct(&dsn, &schema);
    let info = db.doctor().await.unwrap();
    assert_eq!(info.schema_version, memgate_postgres::SCHEMA_VERSION);
    // Every replica serves the one schema: a memory from one is seen by all.
    let first = replicas[0].client().await;
    let RememberOutcome::Stored { citation } = first
        .remember(
            &Caller::new("u"),
            &RememberRequest::new("fact", "shared by all").unwrap(),
        )
        .await
        .unwrap()
    else {
        panic!()
    };
    for r in &replicas {
        let facts = r
            .client()
            .await
            .list_facts(&Caller::new("u"), false)
            .await
            .unwrap();
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0].id, citation.0);
    }
    println!(
        "migrations raced: 4 replicas up in {:.0} ms, schema version {} applied once ({})",
        elapsed.as_secs_f64() * 1000.0,
        info.schema_version,
        info.server_version
    );
}

/// Concurrent captures of one shared thread (overlapping snapshots from every
/// replica) and of one thread per replica, then concurrent remembers of one
/// text: no duplicate, no loss, every caller told stored or already present.
async fn replicas_share_one_memory(n: usize) {
    let _cluster = CLUSTER.read().await;
    let dsn = dsn();
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema(&format!("rep{n}"));
    let config = write_config(home.path(), &schema);
    let replicas = Replica::start_all(home.path(), &config, n);
    let mut clients = Vec::new();
    for r in &replicas {
        clients.push(r.client().await);
    }
    let user = Caller::new("team").with_agent("support");
    const SHARED_TURNS: usize = 40;
    const OWN_TURNS: usize = 20;
    let shared = transcript("shared", SHARED_TURNS);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        // Each replica sends the shared thread as it grows, from its own offset.
        for step in 0..10 {
            let len = (SHARED_TURNS * (step + 1) / 10).min(SHARED_TURNS - i % 2);
            let (client, user, snapshot) = (client.clone(), user.clone(), shared[..len].to_vec());
            tasks.push(tokio::spawn(async move {
                client
                    .capture(&capture(&user, "shared", snapshot))
                    .await
                    .unwrap()
                    .stored
            }));
        }
        let own = transcript(&format!("own{i}"), OWN_TURNS);
        let (client, user) = (client.clone(), user.clone());
        tasks.push(tokio::spawn(async move {
            let mut stored = 0;
            for len in [5, 10, 15, OWN_TURNS, OWN_TURNS] {
                stored += client
                    .capture(&capture(&user, &format!("own{i}"), own[..len].to_vec()))
                    .await
                    .unwrap()
                    .stored;
            }
            stored
        }));
    }
    let mut reported = 0;
    for t in tasks {
        reported += t.await.unwrap();
    }
    let capture_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Concurrent remembers of the same text through every replica.
    let mut remembers = Vec::new();
    for round in 0..3 {
        for client in &clients {
            let (client, user) = (client.clone(), user.clone());
            remembers.push(tokio::spawn(async move {
                let _ = round;
                client
                    .remember(
                        &user,
                        &RememberRequest::new("fact", "escalate billing issues to Dana").unwrap(),
                    )
                    .await
                    .unwrap()
            }));
        }
    }
    let mut stored = Vec::new();
    let mut present = Vec::new();
    for t in remembers {
        match t.await.unwrap() {
            RememberOutcome::Stored { citation } => stored.push(citation.0),
            RememberOutcome::AlreadyPresent {
                citation: Some(c), ..
            } => present.push(c.0),
            other => panic!("remember through a replica: {other:?}"),
        }
    }
    assert_eq!(stored.len(), 1, "exactly one replica stored it");
    assert_eq!(present.len(), 3 * n - 1);
    assert!(present.iter().all(|c| *c == stored[0]));

    // Counts read back, through a replica and straight from the database.
    let export = clients[n - 1].export(&user).await.unwrap();
    let shared_back: Vec<&str> = export
        .turns
        .iter()
        .filter(|t| t.thread == "shared")
        .map(|t| t.text.as_str())
        .collect();
    let expected: Vec<String> = shared.iter().map(|m| m.text()).collect();
    assert_eq!(
        shared_back, expected,
        "the shared thread: every turn once, in order"
    );
    let signatures: HashSet<&str> = export.turns.iter().map(|t| t.signature.as_str()).collect();
    assert_eq!(signatures.len(), export.turns.len(), "no duplicate turn");
    assert_eq!(
        export.turns.len(),
        SHARED_TURNS + n * OWN_TURNS,
        "no lost turn"
    );
    assert_eq!(
        reported,
        export.turns.len(),
        "each stored turn reported once"
    );
    assert_eq!(export.facts.len(), 1);
    let db = direct(&dsn, &schema);
    assert_eq!(
        db.export(&user).await.unwrap().turns.len(),
        export.turns.len()
    );
    println!(
        "{n} replicas: {} captures of 1 shared + {n} own threads in {capture_ms:.0} ms; \
         {} turns stored, 0 duplicates; {} remembers -> 1 stored, {} already present",
        n * 15,
        export.turns.len(),
        3 * n,
        present.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn two_replicas_share_one_memory() {
    replicas_share_one_memory(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn four_replicas_share_one_memory() {
    replicas_share_one_memory(4).await;
}

/// A word no other turn holds, in letters only (folding splits digits off).
fn marker(i: usize) -> String {
    let mut word = String::from("zq");
    let mut n = i;
    loop {
        word.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            return word;
        }
    }
}

/// A `memgate_postgres_replica_*` counter of a process, from its `/metrics`.
async fn replica_counter(r: &Replica, name: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", r.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let key = format!("memgate_postgres_replica_{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no {key} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// Read-your-writes across processes on a hot standby, as a load balancer
/// spreads one user's calls: two `memgate serve` processes share the
/// primary and the standby; a capture through one is recalled through the
/// other straight after, 1,000 times, the two directions in turn. Every
/// recall finds its capture, and the standby serves reads (the scope's
/// write mark tells each process when it has replayed the write).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up --replica)"]
async fn two_processes_on_a_standby_read_their_own_writes_1000_times() {
    let _cluster = CLUSTER.read().await;
    let _ = memgate_testsupport::real::env_vars(["MEMGATE_TEST_POSTGRES_REPLICA_DSN"]);
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("ryw_serve");
    let config = config_file(
        home.path(),
        &schema,
        DSN_ENV,
        "    pool_size: 4\n    replica_dsn_env: MEMGATE_TEST_POSTGRES_REPLICA_DSN\n",
        "",
    );
    let replicas = Replica::start_all(home.path(), &config, 2);
    let clients = [replicas[0].client().await, replicas[1].client().await];
    let user = Caller::new("ryw");
    const ROUNDS: usize = 1_000;
    let started = Instant::now();
    let mut missed = Vec::new();
    for i in 0..ROUNDS {
        let (writer, reader) = (&clients[i % 2], &clients[1 - i % 2]);
        let word = marker(i);
        let note =
            Message::human(format!("remember the code word {word}")).with_id(format!("m{i}"));
        writer
            .capture(&capture(&user, &format!("t{}", i % 10), vec![note]))
            .await
            .unwrap();
        let recall = reader
            .recall(&memgate_core::RecallRequest {
                caller: user.clone().with_thread("reader"),
                query: Some(word.clone()),
            })
            .await
            .unwrap();
        if !recall.text.contains(&word) {
            missed.push(i);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (mut standby, mut primary, mut waited_out) = (0, 0, 0);
    for r in &replicas {
        standby += replica_counter(r, "reads_total").await;
        primary += replica_counter(r, "primary_reads_total").await;
        waited_out += replica_counter(r, "waited_out_total").await;
    }
    println!(
        "two serve processes on a standby: {ROUNDS} captures each recalled through the other \
         process in {elapsed:.1} s; missed {}; reads served by the standby {standby}, by the \
         primary {primary} ({waited_out} after waiting out a write)",
        missed.len()
    );
    assert!(
        missed.is_empty(),
        "recalls that missed their capture: {missed:?}"
    );
    // Not vacuous: the standby was read (else the primary alone passed it).
    assert!(
        standby >= ROUNDS as u64 / 2,
        "only {standby} of {ROUNDS} reads came from the standby"
    );
}

/// A replica is killed (SIGKILL) while captures through it are in flight:
/// every capture it acknowledged is stored in full, nothing is half-stored,
/// and the surviving replica completes the thread without duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_replica_killed_mid_capture_loses_nothing_it_acknowledged() {
    let _cluster = CLUSTER.read().await;
    dsn(); // the config reads DSN_ENV itself; this fails clearly when it is unset
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("kill");
    let config = write_config(home.path(), &schema);
    let mut replicas = Replica::start_all(home.path(), &config, 2);
    let (doomed, survivor) = (replicas[0].client().await, replicas[1].client().await);
    let user = Caller::new("ops");
    const TURNS: usize = 200;
    let full = transcript("long", TURNS);
    let mut tasks = Vec::new();
    for thread in 0..4 {
        let (client, user, full) = (doomed.clone(), user.clone(), full.clone());
        tasks.push(tokio::spawn(async move {
            let mut acknowledged = 0;
            for len in (10..=TURNS).step_by(10) {
                match client
                    .capture(&capture(&user, &format!("t{thread}"), full[..len].to_vec()))
                    .await
                {
                    Ok(_) => acknowledged = len,
                    Err(_) => break,
                }
            }
            acknowledged
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    replicas[0].kill9();
    let mut acknowledged = Vec::new();
    for t in tasks {
        acknowledged.push(t.await.unwrap());
    }
    let after_kill = survivor.export(&user).await.unwrap();
    for (thread, acked) in acknowledged.iter().enumerate() {
        let stored = after_kill
            .turns
            .iter()
            .filter(|t| t.thread == format!("t{thread}"))
            .count();
        assert!(
            stored >= *acked,
            "thread t{thread}: acknowledged {acked}, stored {stored}"
        );
        assert_eq!(
            stored % 10,
            0,
            "a capture is stored whole or not at all ({stored})"
        );
    }
    for thread in 0..4 {
        survivor
            .capture(&capture(&user, &format!("t{thread}"), full.clone()))
            .await
            .unwrap();
    }
    let end = survivor.export(&user).await.unwrap();
    for thread in 0..4 {
        let texts: Vec<&str> = end
            .turns
            .iter()
            .filter(|t| t.thread == format!("t{thread}"))
            .map(|t| t.text.as_str())
            .collect();
        let expected: Vec<String> = full.iter().map(|m| m.text()).collect();
        assert_eq!(texts, expected, "thread t{thread} complete, once, in order");
    }
    println!(
        "replica killed mid-capture: acknowledged prefixes {acknowledged:?} of {TURNS} were all \
         stored; the survivor completed 4 threads to {} turns with no duplicate",
        end.turns.len()
    );
}

/// PostgreSQL restarted (`testkit/postgres-restart`) under 16 clients
/// capturing through two replicas: every call ends within its 10 s deadline,
/// calls fail only while the cluster is down (and shortly after, while
/// pools drop their dead connections), every acknowledged capture is stored
/// once, and both replicas capture again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_postgres_restart_under_load_loses_no_acknowledged_capture() {
    dsn();
    let _cluster = CLUSTER.write().await;
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("pgrestart");
    let config = write_config(home.path(), &schema);
    let replicas = Replica::start_all(home.path(), &config, 2);
    let clients = [replicas[0].client().await, replicas[1].client().await];
    let user = Caller::new("ops");
    let started = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..16 {
        let (client, user, stop) = (clients[c % 2].clone(), user.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut acked, mut failed) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let thread = format!("c{c}-{i}");
                let call = capture(&user, &thread, transcript(&thread, 1));
                let at = started.elapsed();
                match tokio::time::timeout(Duration::from_secs(10), client.capture(&call)).await {
                    Ok(Ok(_)) => acked.push(thread),
                    Ok(Err(e)) => failed.push((at, started.elapsed(), e.to_string())),
                    Err(_) => panic!("a capture hung past its 10 s deadline at {at:?}"),
                }
                i += 1;
            }
            (acked, failed)
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let down_at = started.elapsed();
    restart_postgres().await;
    let up_at = started.elapsed();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for t in tasks {
        let (a, f) = tokio::time::timeout(Duration::from_secs(15), t)
            .await
            .expect("a client ended within its deadline")
            .unwrap();
        acked.extend(a);
        failed.extend(f);
    }
    let outside: Vec<_> = failed
        .iter()
        .filter(|(from, to, _)| !in_restart_window(*from, *to, down_at, up_at))
        .collect();
    for client in &clients {
        client
            .capture(&capture(&user, "after", transcript("after", 1)))
            .await
            .expect("a replica captures after the restart");
    }
    let stored = direct(&dsn(), &schema).export(&user).await.unwrap();
    let mut per_thread = std::collections::HashMap::<&str, usize>::new();
    for t in &stored.turns {
        *per_thread.entry(t.thread.as_str()).or_default() += 1;
    }
    let lost = acked
        .iter()
        .filter(|t| !per_thread.contains_key(t.as_str()))
        .count();
    let duplicated = per_thread.values().filter(|n| **n > 1).count();
    println!(
        "postgres restarted under load: down at {down_at:?}, up at {up_at:?}; {} captures \
         acknowledged, {lost} lost, {duplicated} threads duplicated; {} calls failed, {} of \
         them outside the restart window",
        acked.len(),
        failed.len(),
        outside.len()
    );
    assert_eq!(lost, 0, "acknowledged captures lost");
    assert_eq!(duplicated, 0, "a capture stored twice");
    assert!(
        outside.is_empty(),
        "errors outside the restart window: {outside:?}"
    );
    assert!(acked.len() > 100, "the load ran ({} captures)", acked.len());
}
