//! `cargo run --release -p memgate-lab --example distill_cost -- [FACTS...]`:
//! what distillation costs, against testkit's scripted model (a real HTTP
//! endpoint on loopback that answers every job with no operations and
//! reports `usage` estimated from the request, characters / 4).
//!
//! For each store size (default 100, 1000 and 10000 current facts in the
//! scope) a local store captures 100 turns (10 threads, 5 captures each of
//! a user and an assistant message) with distillation off, then a fresh
//! one with it on and the background worker running, as `memgate serve`
//! runs it. Printed per size: model calls and prompt / completion tokens
//! per 100 captured turns (they should not grow with the facts: the prompt
//! carries at most `related_facts` of them), and capture latency and
//! recall p50 / p99 with distillation off and on in the same run.

use memgate_core::distill::{DistillQueue, QueueLimits};
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, MemoryBackend, MemoryExport, Message, RecallRequest,
};
use memgate_distill::{DistillSettings, Worker};
use memgate_lab::process::percentile_ms;
use memgate_store::config::LocalConfig;
use memgate_store::LocalBackend;
use memgate_testsupport::scripted_model::ScriptedModel;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: usize = 10;
const ROUNDS: usize = 5;
const RECALLS: usize = 200;
const TOPICS: [&str; 10] = [
    "garden", "bicycle", "violin", "Lisbon", "coffee", "chess", "python", "marathon", "bees",
    "painting",
];

/// One size's figures.
struct Row {
    facts: usize,
    calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    capture_off: Vec<Duration>,
    capture_on: Vec<Duration>,
    recall_off: Vec<Duration>,
    recall_on: Vec<Duration>,
}

fn open(dir: &std::path::Path, distill: bool) -> Arc<LocalBackend> {
    let config = LocalConfig {
        distill: distill.then_some(QueueLimits {
            max_turns_per_job: 32,
            max_queued_jobs: 10_000,
            lease: std::time::Duration::from_secs(300),
        }),
        ..LocalConfig::default()
    };
    Arc::new(LocalBackend::open(dir.join("memgate.sqlite3"), config).unwrap())
}

/// `n` current explicit facts in the scope, in one import.
async fn seed(store: &LocalBackend, caller: &Caller, n: usize) {
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

/// 100 captured turns; each capture's latency.
async fn capture_turns(store: &LocalBackend, user: &Caller) -> Vec<Duration> {
    let mut history: Vec<Vec<Message>> = vec![Vec::new(); THREADS];
    let mut took = Vec::new();
    for round in 0..ROUNDS {
        for (t, said) in history.iter_mut().enumerate() {
            let topic = TOPICS[t];
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
            let started = Instant::now();
            store.capture(&request).await.unwrap();
            took.push(started.elapsed());
        }
    }
    took
}

async fn recalls(store: &LocalBackend, user: &Caller) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..RECALLS {
        let request = RecallRequest {
            caller: user.clone().with_thread("recall"),
            query: Some(format!("what about my {}", TOPICS[i % TOPICS.len()])),
        };
        let started = Instant::now();
        store.recall(&request).await.unwrap();
        took.push(started.elapsed());
    }
    took
}

async fn measure(facts: usize, settings: &DistillSettings) -> Row {
    let user = Caller::new("dana");
    // Off: no queue, no worker.
    let off_dir = tempfile::tempdir().unwrap();
    let off = open(off_dir.path(), false);
    seed(&off, &user, facts).await;
    let capture_off = capture_turns(&off, &user).await;
    let recall_off = recalls(&off, &user).await;

    // On: the queue fills in the captures, the worker runs meanwhile.
    let on_dir = tempfile::tempdir().unwrap();
    let on = open(on_dir.path(), true);
    seed(&on, &user, facts).await;
    let queue: Arc<dyn DistillQueue> = on.clone();
    let no_env: memgate_core::setup::EnvSource = Arc::new(|_| None);
    let distiller = Arc::new(memgate_distill::distiller(queue, settings, &no_env).unwrap());
    let stats = Arc::clone(distiller.stats());
    let mut worker = Worker::start(distiller).unwrap();
    let capture_on = capture_turns(&on, &user).await;
    let recall_on = recalls(&on, &user).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while on.queue_figures("-").await.unwrap().queued > 0 {
        assert!(Instant::now() < deadline, "the queue did not drain");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(worker.stop(Duration::from_secs(10)));
    let figures = on.queue_figures("-").await.unwrap();
    assert_eq!(figures.parked, 0, "a job was parked");
    Row {
        facts,
        calls: stats.calls.load(Ordering::Relaxed),
        prompt_tokens: stats.prompt_tokens.load(Ordering::Relaxed),
        completion_tokens: stats.completion_tokens.load(Ordering::Relaxed),
        capture_off,
        capture_on,
        recall_off,
        recall_on,
    }
}

fn p(samples: &[Duration], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort();
    percentile_ms(&sorted, q)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![100, 1_000, 10_000];
    }
    let model = ScriptedModel::start(
        json!([{"when": {"always": true},
                "reply": {"content": "{\"operations\": []}", "usage": "estimated"}}]),
        &[],
    );
    let settings = DistillSettings::parse(Some(&json!({
        "enabled": true, "base_url": model.url, "model": "scripted",
    })))
    .unwrap();
    println!(
        "distillation cost per 100 captured turns ({THREADS} threads x {ROUNDS} captures of 2 \
         messages; related_facts {}; tokens = request chars / 4)",
        settings.related_facts
    );
    println!(
        "{:>7} {:>6} {:>10} {:>10} | capture p50/p99 ms off -> on | recall p50/p99 ms off -> on",
        "facts", "calls", "prompt_tok", "compl_tok"
    );
    for facts in sizes {
        let r = measure(facts, &settings).await;
        println!(
            "{:>7} {:>6} {:>10} {:>10} | {:.2}/{:.2} -> {:.2}/{:.2} | {:.2}/{:.2} -> {:.2}/{:.2}",
            r.facts,
            r.calls,
            r.prompt_tokens,
            r.completion_tokens,
            p(&r.capture_off, 0.50),
            p(&r.capture_off, 0.99),
            p(&r.capture_on, 0.50),
            p(&r.capture_on, 0.99),
            p(&r.recall_off, 0.50),
            p(&r.recall_off, 0.99),
            p(&r.recall_on, 0.50),
            p(&r.recall_on, 0.99),
        );
    }
}
