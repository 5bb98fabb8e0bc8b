//! The fault suite: three `memgate serve` processes behind a load balancer
//! on one PostgreSQL, 200 clients that each behave as a host does (a user,
//! threads, a recall before each turn, a capture of the growing transcript
//! after it). First their throughput at 1, 2 and 3 processes without
//! faults; then 60 s with kill -9 of one process at random moments (each
//! restarted) and one PostgreSQL restart. Every acknowledged capture must be
//! stored once, and no call may fail outside the restart window except the
//! ones a kill cut off at the connection, which the balancer retries on
//! another process.

use super::{
    capture, config_file, direct, dsn, in_restart_window, restart_postgres, transcript, Replica,
    CLUSTER,
};
use memgate_core::{Caller, MemoryBackend, RecallRequest};
use memgate_testsupport::real::unique_schema;
use memgate_testsupport::rng::SplitMix;
use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PROCESSES: usize = 3;
const CLIENTS: usize = 200;
/// `pool_size` of each process (the backend's default).
const POOL_SIZE: usize = 8;
/// Each fault-free throughput phase; each process count runs twice, in the
/// order 1, 2, 3, 3, 2, 1, so a drift in the machine's load over the phases
/// weighs on every count alike.
const PHASE: Duration = Duration::from_secs(5);
const PHASES: [(usize, &str); 6] = [
    (1, "n1a"),
    (2, "n2a"),
    (3, "n3a"),
    (3, "n3b"),
    (2, "n2b"),
    (1, "n1b"),
];
/// The run with faults.
const FAULT_RUN: Duration = Duration::from_secs(60);
const MIN_KILLS: usize = 20;
/// The backends of a process just killed, which PostgreSQL ends only when
/// it next reads their closed sockets (a statement in progress finishes
/// first): for that moment they count beside the replacement's pool.
const KILLED_POOL: usize = POOL_SIZE;
/// The most connections the processes may hold at once.
const TOTAL_BOUND: usize = PROCESSES * POOL_SIZE + KILLED_POOL;
/// memgate's recall deadline and pool wait in this suite (see where the
/// config is written).
const SATURATED_WAIT_MS: u64 = 20_000;
/// One call, retries on another process included: longer than memgate's
/// own deadlines, so memgate answers first.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// Turns per thread before the client starts a new one (two messages each).
const TURNS_PER_THREAD: usize = 6;
/// The variable that carries a process's DSN, with an `application_name`
/// of its own, so `pg_stat_activity` tells its connections apart.
const FLEET_DSN_ENV: &str = "MEMGATE_TEST_FLEET_DSN";
/// Repeats a run's kill schedule; unset, the seed comes from the clock.
const SEED_ENV: &str = "MEMGATE_FLEET_SEED";

/// The load balancer's view of the process slots: each slot's client while
/// the process is up. The fault schedule takes a slot down as it kills the
/// process (a health check would notice a moment later); that moves the
/// slot's generation on, so a caller tells a call cut off by a kill from any
/// other failure.
struct Balancer {
    slots: Vec<Mutex<Slot>>,
}

struct Slot {
    generation: u64,
    backend: Option<Arc<dyn MemoryBackend>>,
}

impl Balancer {
    fn new(backends: Vec<Arc<dyn MemoryBackend>>) -> Self {
        let slots = backends
            .into_iter()
            .map(|b| {
                Mutex::new(Slot {
                    generation: 0,
                    backend: Some(b),
                })
            })
            .collect();
        Self { slots }
    }

    /// The first live slot from `from` on, round the ring.
    fn pick(&self, from: usize) -> Option<(usize, u64, Arc<dyn MemoryBackend>)> {
        (0..self.slots.len()).find_map(|step| {
            let i = (from + step) % self.slots.len();
            let slot = self.slots[i].lock().unwrap();
            slot.backend
                .as_ref()
                .map(|b| (i, slot.generation, Arc::clone(b)))
        })
    }

    fn generation(&self, i: usize) -> u64 {
        self.slots[i].lock().unwrap().generation
    }

    fn take_down(&self, i: usize) -> Option<Arc<dyn MemoryBackend>> {
        let mut slot = self.slots[i].lock().unwrap();
        slot.generation += 1;
        slot.backend.take()
    }

    fn bring_up(&self, i: usize, backend: Arc<dyn MemoryBackend>) {
        self.slots[i].lock().unwrap().backend = Some(backend);
    }
}

/// A call that failed, by when it ran (since its phase started).
#[derive(Debug)]
struct Failed {
    from: Duration,
    to: Duration,
    op: &'static str,
    error: String,
}

/// One thread of a client: how much of its transcript was sent, and how
/// much a capture acknowledged.
struct ThreadLog {
    name: String,
    sent: usize,
    acknowledged: usize,
}

/// What one client saw.
#[derive(Default)]
struct ClientLog {
    user: String,
    captures: usize,
    recalls: usize,
    /// Calls a kill cut off at the connection, retried on another process.
    interrupted: usize,
    failed: Vec<Failed>,
    threads: Vec<ThreadLog>,
    capture_ms: Vec<f64>,
    recall_ms: Vec<f64>,
}

/// Runs `op` through the balancer, from slot `home` on: a call a kill cut
/// off at the connection runs again on the next live process (captures are
/// idempotent by message id); any other failure is returned. The whole call,
/// retries included, is bounded by [`CALL_DEADLINE`].
async fn balanced<T, F, Fut>(
    balancer: &Balancer,
    home: usize,
    interrupted: &mut usize,
    op: F,
) -> Result<T, String>
where
    F: Fn(Arc<dyn MemoryBackend>) -> Fut,
    Fut: Future<Output = memgate_core::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + CALL_DEADLINE;
    let mut from = home;
    loop {
        let Some((slot, generation, backend)) = balancer.pick(from) else {
            return Err("no live process".to_owned());
        };
        match tokio::time::timeout_at(deadline, op(backend)).await {
            Err(_) => {
                let killed = balancer.generation(slot) != generation;
                return Err(format!(
                    "no answer within {CALL_DEADLINE:?} (process {slot}, killed meanwhile: {killed})"
                ));
            }
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => {
                let error = e.to_string();
                let cut_by_kill = balancer.generation(slot) != generation
                    && error.contains("cannot reach memgate");
                if !cut_by_kill {
                    return Err(error);
                }
                *interrupted += 1;
                from = slot + 1;
            }
        }
    }
}

/// One host-like client until `until`: user `{label}-host{c}`, threads of
/// [`TURNS_PER_THREAD`] turns; before each turn a recall asking about a turn
/// already acknowledged, after it a capture of the transcript so far.
async fn host(
    balancer: Arc<Balancer>,
    label: &'static str,
    c: usize,
    started: Instant,
    until: Instant,
) -> ClientLog {
    let mut log = ClientLog {
        user: format!("{label}-host{c}"),
        ..ClientLog::default()
    };
    let user = Caller::new(log.user.as_str());
    let home = c % PROCESSES;
    let mut any_acknowledged = false;
    'threads: for k in 0.. {
        let name = format!("{label}-c{c}-t{k}");
        let messages = transcript(&name, 2 * TURNS_PER_THREAD);
        log.threads.push(ThreadLog {
            name: name.clone(),
            sent: 0,
            acknowledged: 0,
        });
        for turn in 0..TURNS_PER_THREAD {
            if Instant::now() >= until {
                break 'threads;
            }
            // Before the turn: recall what the user said earlier. The
            // subject asked about is in an acknowledged turn, so an empty
            // answer would be a failure passed off as "no memory".
            let thread = log.threads.last().unwrap();
            let asked = any_acknowledged.then(|| thread.acknowledged.saturating_sub(1));
            let request = RecallRequest {
                caller: user.clone().with_thread(&name),
                query: Some(match asked {
                    Some(i) => format!("what did we say about subject{i}?"),
                    None => "hello again".to_owned(),
                }),
            };
            let (from, at) = (started.elapsed(), Instant::now());
            let answer = balanced(&balancer, home, &mut log.interrupted, |b| {
                let request = request.clone();
                async move { b.recall(&request).await }
            })
            .await;
            match answer {
                Ok(recall) if asked.is_some() && recall.is_empty() => log.failed.push(Failed {
                    from,
                    to: started.elapsed(),
                    op: "recall",
                    error: "an empty answer, though a stored turn matches".to_owned(),
                }),
                Ok(_) => {
                    log.recalls += 1;
                    log.recall_ms.push(at.elapsed().as_secs_f64() * 1000.0);
                }
                Err(error) => log.failed.push(Failed {
                    from,
                    to: started.elapsed(),
                    op: "recall",
                    error,
                }),
            }
            // After the turn: capture the transcript so far.
            let len = 2 * (turn + 1);
            let call = capture(&user, &name, messages[..len].to_vec());
            log.threads.last_mut().unwrap().sent = len;
            let (from, at) = (started.elapsed(), Instant::now());
            let answer = balanced(&balancer, home, &mut log.interrupted, |b| {
                let call = call.clone();
                async move { b.capture(&call).await }
            })
            .await;
            match answer {
                Ok(_) => {
                    log.captures += 1;
                    log.capture_ms.push(at.elapsed().as_secs_f64() * 1000.0);
                    log.threads.last_mut().unwrap().acknowledged = len;
                    any_acknowledged = true;
                }
                Err(error) => log.failed.push(Failed {
                    from,
                    to: started.elapsed(),
                    op: "capture",
                    error,
                }),
            }
        }
    }
    log
}

/// [`CLIENTS`] clients until `until`; their logs.
async fn load(
    balancer: &Arc<Balancer>,
    label: &'static str,
    started: Instant,
    until: Instant,
) -> Vec<ClientLog> {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(host(Arc::clone(balancer), label, c, started, until)))
        .collect();
    // A client may start a turn (a recall and a capture) just before `until`.
    let ended = tokio::time::Instant::from_std(until) + 2 * CALL_DEADLINE + Duration::from_secs(5);
    let mut logs = Vec::new();
    for task in tasks {
        let log = tokio::time::timeout_at(ended, task)
            .await
            .expect("a client ended within its calls' deadlines")
            .unwrap();
        logs.push(log);
    }
    logs
}

/// Counts of a phase: acknowledged captures and answered recalls per second
/// of the phase, and their latencies.
fn rates(logs: &[ClientLog], took: Duration) -> String {
    let captures: usize = logs.iter().map(|l| l.captures).sum();
    let recalls: usize = logs.iter().map(|l| l.recalls).sum();
    let secs = took.as_secs_f64();
    let mut capture_ms: Vec<f64> = logs.iter().flat_map(|l| l.capture_ms.clone()).collect();
    let mut recall_ms: Vec<f64> = logs.iter().flat_map(|l| l.recall_ms.clone()).collect();
    format!(
        "{:.0} captures/s, {:.0} recalls/s (capture p50 {:.0} / p99 {:.0} ms, recall p50 {:.0} / p99 {:.0} ms)",
        captures as f64 / secs,
        recalls as f64 / secs,
        percentile(&mut capture_ms, 0.50),
        percentile(&mut capture_ms, 0.99),
        percentile(&mut recall_ms, 0.50),
        percentile(&mut recall_ms, 0.99),
    )
}

/// Failed calls grouped by operation and the start of their error.
fn kinds(failed: &[&Failed]) -> String {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for f in failed {
        let head: String = f.error.chars().take(90).collect();
        *counts.entry(format!("{}: {head}", f.op)).or_default() += 1;
    }
    counts
        .iter()
        .map(|(kind, n)| format!("\n    {n} x {kind}"))
        .collect()
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * p).round() as usize]
}

/// The most connections seen at once: all the processes' together, and
/// any one process's.
#[derive(Default)]
struct Connections {
    total: i64,
    one_process: i64,
    samples: usize,
}

/// The processes' connections to PostgreSQL, sampled every 50 ms from
/// `pg_stat_activity` by their `application_name`s, which all start with
/// `prefix` (the sampler's own connection has none); it reconnects after
/// the restart.
async fn sample_connections(dsn: String, prefix: String, stop: Arc<AtomicBool>) -> Connections {
    let mut peak = Connections::default();
    while !stop.load(Ordering::Relaxed) {
        let Ok(Ok((client, connection))) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio_postgres::connect(&dsn, tokio_postgres::NoTls),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let driver = tokio::spawn(connection);
        while !stop.load(Ordering::Relaxed) {
            let Ok(rows) = client
                .query(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE left(application_name, length($1)) = $1
                     GROUP BY application_name",
                    &[&prefix],
                )
                .await
            else {
                break;
            };
            let counts: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
            peak.total = peak.total.max(counts.iter().sum());
            peak.one_process = peak.one_process.max(counts.into_iter().max().unwrap_or(0));
            peak.samples += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        driver.abort();
    }
    peak
}

/// What the fault schedule did; times since the fault run started.
struct Faults {
    kills: usize,
    /// How long a killed process's replacement took to serve.
    restart_ms: Vec<f64>,
    postgres_down: Duration,
    postgres_up: Duration,
}

/// Until `until`: at a random moment (0.2–1.2 s apart) kill -9 one process
/// at random and start a new one in its slot; once, half way, restart
/// PostgreSQL instead.
async fn faults(
    balancer: Arc<Balancer>,
    mut replicas: Vec<Replica>,
    spawn: Arc<dyn Fn() -> Child + Send + Sync>,
    seed: u64,
    started: Instant,
    until: Instant,
) -> (Faults, Vec<Replica>) {
    let half_way = until - FAULT_RUN / 2;
    let mut rng = SplitMix::new(seed);
    let mut done = Faults {
        kills: 0,
        restart_ms: Vec::new(),
        postgres_down: Duration::ZERO,
        postgres_up: Duration::ZERO,
    };
    let mut restarted = false;
    loop {
        tokio::time::sleep(Duration::from_millis(200 + rng.below(1000) as u64)).await;
        if Instant::now() >= until {
            break;
        }
        if !restarted && Instant::now() >= half_way {
            done.postgres_down = started.elapsed();
            restart_postgres().await;
            done.postgres_up = started.elapsed();
            restarted = true;
            continue;
        }
        let i = rng.below(PROCESSES);
        balancer.take_down(i);
        replicas[i].kill9();
        done.kills += 1;
        let at = Instant::now();
        let spawn = Arc::clone(&spawn);
        let replica = tokio::task::spawn_blocking(move || Replica::ready(spawn()))
            .await
            .unwrap();
        balancer.bring_up(i, replica.client().await);
        done.restart_ms.push(at.elapsed().as_secs_f64() * 1000.0);
        replicas[i] = replica;
    }
    (done, replicas)
}

/// What is stored against what was acknowledged, read straight from the
/// database: acknowledged messages missing, messages stored twice, and
/// messages stored though their capture's answer never came.
#[derive(Default)]
struct Tally {
    acknowledged: usize,
    lost: usize,
    duplicated: usize,
    stored_unacknowledged: usize,
}

async fn tally(
    db: &memgate_postgres::PostgresBackend,
    logs: impl IntoIterator<Item = &ClientLog>,
) -> Tally {
    let mut tally = Tally::default();
    for log in logs {
        let export = db.export(&Caller::new(log.user.as_str())).await.unwrap();
        for thread in &log.threads {
            let stored: Vec<&str> = export
                .turns
                .iter()
                .filter(|t| t.thread == thread.name)
                .map(|t| t.text.as_str())
                .collect();
            let distinct: HashSet<&str> = stored.iter().copied().collect();
            tally.duplicated += stored.len() - distinct.len();
            let expected: Vec<String> = transcript(&thread.name, thread.sent)
                .iter()
                .map(|m| m.text())
                .collect();
            tally.acknowledged += thread.acknowledged;
            tally.lost += expected[..thread.acknowledged]
                .iter()
                .filter(|m| !distinct.contains(m.as_str()))
                .count();
            tally.stored_unacknowledged += distinct.len().saturating_sub(thread.acknowledged);
            assert!(
                distinct.iter().all(|s| expected.iter().any(|e| e == s)),
                "{}: a stored message that was never sent",
                thread.name
            );
        }
    }
    tally
}

/// The fault suite (see the module's doc). Prints one summary block.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_fleet_of_three_loses_no_acknowledged_capture_under_kill9_and_a_postgres_restart() {
    let dsn = dsn();
    let _cluster = CLUSTER.write().await;
    let seed = std::env::var(SEED_ENV)
        .ok()
        .map(|s| s.parse().expect("MEMGATE_FLEET_SEED is an integer"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("fleet: kill schedule seed {seed} (repeat with {SEED_ENV}={seed})");
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("fleet");
    // Each process started gets `application_name` `{prefix}-p{n}`.
    let prefix = format!("memgate-{schema}");
    // Clients call back to back, so the processes run saturated and a call
    // waits its turn behind the others: memgate's own deadlines (a recall's,
    // and the wait for a pooled connection, 5 s each by default) are raised
    // so that a slow machine shows as latency, not as failures.
    let config = config_file(
        home.path(),
        &schema,
        FLEET_DSN_ENV,
        &format!("    pool_size: {POOL_SIZE}\n    connect_timeout_ms: {SATURATED_WAIT_MS}\n"),
        &format!(
            "  deadlines:\n    recall_seconds: {}\n",
            SATURATED_WAIT_MS / 1000
        ),
    );
    let spawn: Arc<dyn Fn() -> Child + Send + Sync> = {
        let (home, config): (PathBuf, PathBuf) = (home.path().to_owned(), config.clone());
        let separator = if dsn.contains('?') { '&' } else { '?' };
        let (dsn, prefix) = (dsn.clone(), prefix.clone());
        let started = AtomicUsize::new(0);
        Arc::new(move || {
            let n = started.fetch_add(1, Ordering::Relaxed);
            let dsn = format!("{dsn}{separator}application_name={prefix}-p{n}");
            Replica::spawn_with(&home, &config, &[(FLEET_DSN_ENV, dsn.as_str())])
        })
    };
    // Started together, so their migrations race.
    let children: Vec<Child> = (0..PROCESSES).map(|_| spawn()).collect();
    let replicas: Vec<Replica> = children.into_iter().map(Replica::ready).collect();
    let mut backends = Vec::new();
    for r in &replicas {
        backends.push(r.client().await);
    }
    let balancer = Arc::new(Balancer::new(backends));
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_connections(
        dsn.clone(),
        prefix,
        Arc::clone(&stop_sampling),
    ));
    let mut logs = Vec::new();

    // Throughput without faults at 1, 2 and 3 processes: the balancer
    // routes to the first n only (the others stay up, idle).
    let mut by_count: Vec<(Vec<ClientLog>, Duration)> = (0..PROCESSES)
        .map(|_| (Vec::new(), Duration::ZERO))
        .collect();
    for (n, label) in PHASES {
        let parked: Vec<_> = (n..PROCESSES)
            .map(|i| (i, balancer.take_down(i).unwrap()))
            .collect();
        let at = Instant::now();
        let phase = load(&balancer, label, at, at + PHASE).await;
        by_count[n - 1].1 += at.elapsed();
        by_count[n - 1].0.extend(phase);
        for (i, backend) in parked {
            balancer.bring_up(i, backend);
        }
    }
    let throughput: Vec<String> = by_count
        .iter()
        .enumerate()
        .map(|(i, (phases, took))| format!("  {} process(es): {}", i + 1, rates(phases, *took)))
        .collect();
    logs.extend(by_count.into_iter().flat_map(|(phases, _)| phases));

    // The fault run: the load and the fault schedule side by side.
    let at = Instant::now();
    let schedule = tokio::spawn(faults(
        Arc::clone(&balancer),
        replicas,
        spawn,
        seed,
        at,
        at + FAULT_RUN,
    ));
    let fault_logs = load(&balancer, "faults", at, at + FAULT_RUN).await;
    let fault_took = at.elapsed();
    let (faults, _replicas) = schedule.await.unwrap();
    stop_sampling.store(true, Ordering::Relaxed);
    let peak = sampler.await.unwrap();

    let interrupted: usize = fault_logs.iter().map(|l| l.interrupted).sum();
    let failed: Vec<&Failed> = fault_logs.iter().flat_map(|l| &l.failed).collect();
    let outside: Vec<&&Failed> = failed
        .iter()
        .filter(|f| !in_restart_window(f.from, f.to, faults.postgres_down, faults.postgres_up))
        .collect();
    let fault_rates = rates(&fault_logs, fault_took);
    let fault_free: Vec<&Failed> = logs.iter().flat_map(|l| &l.failed).collect();

    let db = direct(&dsn, &schema);
    let tally = tally(&db, logs.iter().chain(&fault_logs)).await;
    let mut restart_ms = faults.restart_ms.clone();
    println!(
        "fleet: {PROCESSES} memgate serve processes (pool_size {POOL_SIZE}) on one PostgreSQL, \
         {CLIENTS} clients\n\
         throughput without faults (2 x {} s each, in the order 1, 2, 3, 3, 2, 1):\n{}\n  failed calls: {}{}\n\
         fault run ({:.0} s): {} kill -9 (replacement serving after p50 {:.0} / max {:.0} ms), \
         PostgreSQL restarted {:.1} s into it, back at {:.1} s\n  {fault_rates}\n\
         captures acknowledged {} (all phases), lost {}, stored twice {}, \
         stored though unacknowledged {}\n\
         calls interrupted by a kill and retried on another process: {interrupted}\n\
         failed calls: {} in the restart window (+{:?} grace), {} outside it{}\n\
         connections at peak: {} in all (bound {PROCESSES} x {POOL_SIZE} + {KILLED_POOL} = {}), \
         {} of one process (bound {POOL_SIZE}); {} samples",
        PHASE.as_secs(),
        throughput.join("\n"),
        fault_free.len(),
        kinds(&fault_free),
        fault_took.as_secs_f64(),
        faults.kills,
        percentile(&mut restart_ms, 0.5),
        percentile(&mut restart_ms, 1.0),
        faults.postgres_down.as_secs_f64(),
        faults.postgres_up.as_secs_f64(),
        tally.acknowledged,
        tally.lost,
        tally.duplicated,
        tally.stored_unacknowledged,
        failed.len() - outside.len(),
        super::RESTART_GRACE,
        outside.len(),
        kinds(&failed),
        peak.total,
        TOTAL_BOUND,
        peak.one_process,
        peak.samples,
    );
    assert_eq!(tally.lost, 0, "acknowledged captures lost");
    assert_eq!(tally.duplicated, 0, "messages stored twice");
    assert!(
        fault_free.is_empty(),
        "calls failed without faults: {fault_free:?}"
    );
    assert!(
        outside.is_empty(),
        "errors outside the restart window: {outside:?}"
    );
    assert!(
        faults.kills >= MIN_KILLS,
        "{} kills, fewer than {MIN_KILLS}",
        faults.kills
    );
    assert!(
        faults.postgres_up > faults.postgres_down,
        "PostgreSQL was restarted"
    );
    assert!(peak.samples > 0, "pg_stat_activity was sampled");
    assert!(
        peak.one_process as usize <= POOL_SIZE,
        "{} connections of one process, beyond its pool of {POOL_SIZE}",
        peak.one_process
    );
    assert!(
        peak.total as usize <= TOTAL_BOUND,
        "{} connections, beyond the pools' {TOTAL_BOUND}",
        peak.total
    );
}
