//! `cargo run --release -p memgate-lab --example distill_cost -- [--store local|postgres] [--queue-only] [--model-pause-ms N] [--pace-ms N] [FACTS...]`:
//! what distillation costs, against testkit's scripted model standing in
//! for the model (a real HTTP endpoint on loopback that answers every job
//! with no operations and reports `usage` estimated from the request,
//! characters / 4).
//!
//! For each store size (default 100, 1000 and 10000 current facts in the
//! scope) a fresh store captures 400 turns (40 threads, 5 captures each of
//! a user and an assistant message) with distillation off, then another
//! with it on and the background worker running. Both are served as
//! `memgate serve` serves them (the assembled backend behind the HTTP
//! router on a loopback port) and every capture and recall is a `POST` to
//! `/v1/capture` or `/v1/recall`: the boundary a user crosses. Printed per
//! size: model calls and prompt / completion tokens per 100 captured turns
//! (they should not grow with the facts: the prompt carries at most
//! `related_facts` of them), and capture and recall p50 / p99 with
//! distillation off and on in the same run.
//!
//! Each store is seeded, then opened again and warmed as `memgate serve`
//! does (the worker first, then the start-up check). Its first capture and
//! recall after that start are timed apart and printed on their own: they
//! prepare their statements (on `postgres`, the worker's first job
//! prepares its own too), a cost paid once per connection that would
//! otherwise be the p99 of the run.
//! The "on" store's worker finishes that first job before the timed
//! captures start, and its calls are not counted in the figures.
//!
//! `--store postgres` uses the cluster of `testkit/postgres-up`
//! (`MEMGATE_TEST_POSTGRES_DSN`), a schema of its own per store.
//! `--queue-only` runs no worker in the "on" store: its captures queue
//! jobs and nothing takes them, which tells the write path's own cost
//! from the load of the worker running beside it. `--model-pause-ms N`
//! makes the model answer after N ms, as a remote model does, so the
//! worker waits on it rather than running job after job. `--pace-ms N`
//! leaves N ms between timed requests (an agent host's requests come
//! with pauses between them; by default they come back to back).
//!
//! The worker yields to requests as in `memgate serve` (a store step
//! waits for a 20 ms pause, at most 1 s): "catch-up" is the time from the
//! last timed request until the queue is empty, what that costs the facts.

use memgate_assembly::{AssembledBackend, Deadlines, Gates};
use memgate_core::distill::{DistillQueue, QueueLimits};
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, MemoryExport, Message};
use memgate_distill::{DistillSettings, DistillStats};
use memgate_lab::process::percentile_ms;
use memgate_postgres::{PostgresBackend, PostgresConfig};
use memgate_server::{router, ServerState};
use memgate_store::config::LocalConfig;
use memgate_store::LocalBackend;
use memgate_testsupport::scripted_model::ScriptedModel;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: usize = 40;
const ROUNDS: usize = 5;
const RECALLS: usize = 200;
const TOPICS: [&str; 10] = [
    "garden", "bicycle", "violin", "Lisbon", "coffee", "chess", "python", "marathon", "bees",
    "painting",
];

/// Where the stores live.
enum Store {
    Local,
    Postgres { dsn: String },
}

/// One size's figures.
struct Row {
    facts: usize,
    /// The first capture after each store started, off and on.
    first_capture: (Duration, Duration),
    calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// Mean time of a job from its queue read to its outcome, model call
    /// included (the scripted model answers at once unless paused).
    job_ms: f64,
    capture_off: Vec<Duration>,
    capture_on: Vec<Duration>,
    recall_off: Vec<Duration>,
    recall_on: Vec<Duration>,
    /// From the last timed request until the worker emptied the queue.
    catch_up: Duration,
}

/// How the "on" store is run and the requests are sent.
struct Options {
    worker: bool,
    /// The pause before each timed request.
    pace: Duration,
}

/// A store with its queue.
struct Opened {
    backend: Arc<dyn MemoryBackend>,
    queue: Arc<dyn DistillQueue>,
}

/// Where one store lives (its file, or its schema), kept across a restart.
enum Place {
    Local(tempfile::TempDir),
    Postgres { dsn: String, schema: String },
}

impl Place {
    fn new(store: &Store) -> Self {
        match store {
            Store::Local => Self::Local(tempfile::tempdir().unwrap()),
            Store::Postgres { dsn } => Self::Postgres {
                dsn: dsn.clone(),
                schema: memgate_testsupport::real::unique_schema("distill_cost"),
            },
        }
    }

    fn open(&self, limits: Option<QueueLimits>) -> Opened {
        match self {
            Self::Local(dir) => {
                let config = LocalConfig {
                    distill: limits,
                    ..LocalConfig::default()
                };
                let backend = Arc::new(
                    LocalBackend::open(dir.path().join("memgate.sqlite3"), config).unwrap(),
                );
                Opened {
                    backend: backend.clone(),
                    queue: backend,
                }
            }
            Self::Postgres { dsn, schema } => {
                let config = PostgresConfig::for_dsn(dsn)
                    .unwrap()
                    .with_schema(schema)
                    .unwrap();
                let mut backend = PostgresBackend::new(config).unwrap();
                if let Some(limits) = limits {
                    backend = backend.with_distill(limits);
                }
                let backend = Arc::new(backend);
                Opened {
                    backend: backend.clone(),
                    queue: backend,
                }
            }
        }
    }
}

/// A store holding `facts` current facts, opened again after they were
/// seeded, so its first capture is a freshly started process's.
async fn seeded(store: &Store, facts: usize, limits: Option<QueueLimits>) -> (Place, Opened) {
    let place = Place::new(store);
    let seeding = place.open(limits);
    seed(seeding.backend.as_ref(), &Caller::new("dana"), facts).await;
    assert!(seeding.backend.shutdown(Duration::from_secs(10)).await);
    drop(seeding);
    let opened = place.open(limits);
    (place, opened)
}

/// Serves `assembled` as `memgate serve` does, on a loopback port.
async fn serve(assembled: Arc<AssembledBackend>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(ServerState::new(assembled));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// `n` current explicit facts in the scope, in one import.
async fn seed(store: &dyn MemoryBackend, caller: &Caller, n: usize) {
    let now = memgate_core::time::now_rfc3339();
    let facts = (1..=n)
        .map(|i| {
            let topic = TOPICS[i % TOPICS.len()];
            serde_json::from_value(json!({
                "id": format!("mem_{i}"), "kind": "fact",
                "text": format!("Dana's {topic} note number {i}: detail {}", i * 7),
                "state": "active", "version": 1, "created_at": now, "updated_at": now,
            }))
            .unwrap()
        })
        .collect();
    store
        .import(caller, &MemoryExport::new(facts, Vec::new()))
        .await
        .unwrap();
}

/// One timed `POST`; the answer must be a success.
async fn post(http: &reqwest::Client, url: &str, body: &impl serde::Serialize) -> Duration {
    let started = Instant::now();
    let response = http.post(url).json(body).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let took = started.elapsed();
    assert!(status.is_success(), "{url}: {status} {text}");
    took
}

/// 100 captured turns over HTTP; each capture's latency.
async fn capture_turns(
    http: &reqwest::Client,
    base: &str,
    user: &Caller,
    pace: Duration,
) -> Vec<Duration> {
    let mut history: Vec<Vec<Message>> = vec![Vec::new(); THREADS];
    let mut took = Vec::new();
    for round in 0..ROUNDS {
        for (t, said) in history.iter_mut().enumerate() {
            let topic = TOPICS[t % TOPICS.len()];
            said.push(Message::human(format!(
                "About my {topic}: update {round}, it went well this week."
            )));
            said.push(Message::ai(format!("Good to hear about the {topic}.")));
            let request = CaptureRequest {
                caller: user.clone().with_thread(format!("t{t}")),
                messages: said.clone(),
                kind: CaptureKind::AfterTurn,
                trace_id: None,
            };
            tokio::time::sleep(pace).await;
            took.push(post(http, &format!("{base}/v1/capture"), &request).await);
        }
    }
    took
}

async fn recalls(
    http: &reqwest::Client,
    base: &str,
    user: &Caller,
    pace: Duration,
) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..RECALLS {
        let request = memgate_core::RecallRequest {
            caller: user.clone().with_thread("recall"),
            query: Some(format!("what about my {}", TOPICS[i % TOPICS.len()])),
        };
        tokio::time::sleep(pace).await;
        took.push(post(http, &format!("{base}/v1/recall"), &request).await);
    }
    took
}

/// The first capture (timed) and recall after a store starts, in a thread
/// of its own: what opens the connections and prepares the statements.
async fn first_use(http: &reqwest::Client, base: &str, user: &Caller) -> Duration {
    let request = CaptureRequest {
        caller: user.clone().with_thread("first"),
        messages: vec![
            Message::human("Hello, I keep bees and paint on weekends."),
            Message::ai("Nice hobbies."),
        ],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    let took = post(http, &format!("{base}/v1/capture"), &request).await;
    let recall = memgate_core::RecallRequest {
        caller: user.clone().with_thread("first"),
        query: Some("bees".to_owned()),
    };
    post(http, &format!("{base}/v1/recall"), &recall).await;
    took
}

/// Waits until `queue` holds no job (the worker has run them all).
async fn drained(queue: &dyn DistillQueue) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while queue.queue_figures("-").await.unwrap().queued > 0 {
        assert!(Instant::now() < deadline, "the queue did not drain");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn measure(
    store: &Store,
    facts: usize,
    settings: &DistillSettings,
    options: &Options,
) -> Row {
    let Options { worker, pace } = *options;
    let user = Caller::new("dana");
    let http = reqwest::Client::new();
    // Off: no queue, no worker.
    let (_off_place, off) = seeded(store, facts, None).await;
    let assembled = Arc::new(AssembledBackend::new(
        off.backend.clone(),
        Gates::default(),
        Deadlines::default(),
    ));
    assembled.warm().await.unwrap();
    let base = serve(assembled).await;
    let first_off = first_use(&http, &base, &user).await;
    let capture_off = capture_turns(&http, &base, &user, pace).await;
    let recall_off = recalls(&http, &base, &user, pace).await;

    // On: the queue fills in the captures, the worker runs meanwhile.
    let (_on_place, on) = seeded(store, facts, settings.queue_limits()).await;
    let no_env: memgate_core::setup::EnvSource = Arc::new(|_| None);
    let distiller = memgate_distill::distiller(on.queue.clone(), settings, &no_env).unwrap();
    let stats: Arc<DistillStats> = Arc::clone(distiller.stats());
    let mut assembled =
        AssembledBackend::new(on.backend.clone(), Gates::default(), Deadlines::default());
    if worker {
        assembled = assembled.with_distiller(distiller).unwrap();
    }
    let assembled = Arc::new(assembled);
    // As `memgate serve`: the worker starts with the backend, then warm.
    assembled.warm().await.unwrap();
    let base = serve(Arc::clone(&assembled)).await;
    let first_on = first_use(&http, &base, &user).await;
    if worker {
        drained(on.queue.as_ref()).await;
    }
    let counted = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let before = (
        counted(&stats.calls),
        counted(&stats.prompt_tokens),
        counted(&stats.completion_tokens),
        counted(&stats.latency_ms_total),
        counted(&stats.jobs_timed),
    );
    let capture_on = capture_turns(&http, &base, &user, pace).await;
    let recall_on = recalls(&http, &base, &user, pace).await;
    let load_ended = Instant::now();
    if worker {
        drained(on.queue.as_ref()).await;
    }
    let catch_up = load_ended.elapsed();
    let figures = on.queue.queue_figures("-").await.unwrap();
    assert_eq!(figures.parked, 0, "a job was parked");
    assembled.drain(Duration::from_secs(10)).await;
    // Per 100 captured turns: each capture adds a user and an assistant turn.
    let per_100_turns = |n: u64| n * 100 / (2 * (THREADS * ROUNDS) as u64);
    Row {
        facts,
        first_capture: (first_off, first_on),
        calls: per_100_turns(counted(&stats.calls) - before.0),
        prompt_tokens: per_100_turns(counted(&stats.prompt_tokens) - before.1),
        completion_tokens: per_100_turns(counted(&stats.completion_tokens) - before.2),
        job_ms: (counted(&stats.latency_ms_total) - before.3) as f64
            / (counted(&stats.jobs_timed) - before.4).max(1) as f64,
        capture_off,
        capture_on,
        recall_off,
        recall_on,
        catch_up,
    }
}

fn p(samples: &[Duration], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort();
    percentile_ms(&sorted, q)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = match args.iter().position(|a| a == "--store") {
        None => Store::Local,
        Some(i) => match args.get(i + 1).map(String::as_str) {
            Some("local") => Store::Local,
            Some("postgres") => Store::Postgres {
                dsn: memgate_testsupport::real::postgres_dsn(),
            },
            _ => panic!("--store must be local or postgres"),
        },
    };
    // `--queue-only`: "on" queues jobs with each capture but runs no
    // worker, to tell the write path's own cost from the worker's load.
    let worker = !args.iter().any(|a| a == "--queue-only");
    let number_after = |flag: &str| {
        args.iter().position(|a| a == flag).map(|i| {
            args.get(i + 1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{flag} takes a number of milliseconds"))
        })
    };
    // `--model-pause-ms N`: the model answers after N ms, as a remote one
    // takes its time, instead of at once (the worker then waits on it).
    let pause_ms = number_after("--model-pause-ms").unwrap_or(0);
    let pace = Duration::from_millis(number_after("--pace-ms").unwrap_or(0));
    let mut sizes: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || !args[i - 1].ends_with("-ms"))
        .filter_map(|(_, a)| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![100, 1_000, 10_000];
    }
    let model = ScriptedModel::start(
        json!([{"when": {"always": true},
                "reply": {"content": "{\"operations\": []}", "usage": "estimated",
                          "pause_seconds": pause_ms as f64 / 1000.0}}]),
        &[],
    );
    let settings = DistillSettings::parse(Some(&json!({
        "enabled": true, "base_url": model.url, "model": "scripted",
    })))
    .unwrap();
    let name = match store {
        Store::Local => "local",
        Store::Postgres { .. } => "postgres",
    };
    println!(
        "distillation cost on {name} per 100 captured turns over HTTP ({THREADS} threads x \
         {ROUNDS} captures of 2 messages; related_facts {}; tokens = request chars / 4; \
         {} ms between requests){}",
        settings.related_facts,
        pace.as_millis(),
        if worker {
            format!("; the model answers after {pause_ms} ms")
        } else {
            "; on = queue only, no worker".to_owned()
        }
    );
    println!(
        "{:>7} {:>6} {:>10} {:>10} {:>6} | capture p50/p99 ms off -> on | recall p50/p99 ms off -> on | first capture ms off -> on | catch-up s",
        "facts", "calls", "prompt_tok", "compl_tok", "job_ms"
    );
    let options = Options { worker, pace };
    for facts in sizes {
        let r = measure(&store, facts, &settings, &options).await;
        println!(
            "{:>7} {:>6} {:>10} {:>10} {:>6.1} | {:.2}/{:.2} -> {:.2}/{:.2} | {:.2}/{:.2} -> {:.2}/{:.2} | {:.2} -> {:.2} | {:.2}",
            r.facts,
            r.calls,
            r.prompt_tokens,
            r.completion_tokens,
            r.job_ms,
            p(&r.capture_off, 0.50),
            p(&r.capture_off, 0.99),
            p(&r.capture_on, 0.50),
            p(&r.capture_on, 0.99),
            p(&r.recall_off, 0.50),
            p(&r.recall_off, 0.99),
            p(&r.recall_on, 0.50),
            p(&r.recall_on, 0.99),
            r.first_capture.0.as_secs_f64() * 1e3,
            r.first_capture.1.as_secs_f64() * 1e3,
            r.catch_up.as_secs_f64(),
        );
    }
}
