//! Distillation end to end, on both stores memgate owns: a real store
//! (`local`'s SQLite file, or a schema of its own on the real PostgreSQL of
//! `testkit/postgres-up`) queues jobs with its captures, and the worker
//! runs them against testkit's scripted model (a real HTTP server on
//! loopback speaking the OpenAI chat protocol from a script, logging every
//! request body). Each behaviour runs as `local::<name>` and
//! `postgres::<name>` (ignored without the cluster).

use memgate_core::distill::{DistillQueue, Operation, ProposedFact, QueueDepth, QueueLimits};
use memgate_core::setup::EnvSource;
use memgate_core::work::WorkTracker;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, Fact, FactOrigin, FactState, ForgetTarget, MemoryBackend,
    Message, RecallRequest, RememberOutcome, RememberRequest, SearchQuery,
};
use memgate_distill::{DistillSettings, Distiller, Worker};
use memgate_postgres::{PostgresBackend, PostgresConfig};
use memgate_store::config::LocalConfig;
use memgate_store::LocalBackend;
use memgate_testsupport::scripted_model::ScriptedModel;
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMITS: QueueLimits = QueueLimits {
    max_turns_per_job: 32,
    max_queued_jobs: 100,
    lease: std::time::Duration::from_secs(300),
};

/// A store that distils, with what a test reads beyond the contract.
trait Subject: MemoryBackend + DistillQueue {
    /// Every recorded version of fact `id`, oldest first.
    fn history<'a>(
        &'a self,
        caller: &'a Caller,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Vec<Fact>> + Send + 'a>>;
}

impl Subject for LocalBackend {
    fn history<'a>(
        &'a self,
        caller: &'a Caller,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Vec<Fact>> + Send + 'a>> {
        Box::pin(async move { self.store().fact_history(caller, id).unwrap() })
    }
}

impl Subject for PostgresBackend {
    fn history<'a>(
        &'a self,
        caller: &'a Caller,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Vec<Fact>> + Send + 'a>> {
        Box::pin(async move { self.fact_history(caller, id).await.unwrap() })
    }
}

/// Where a test's store lives; [`Place::open`] opens it (again).
enum Place {
    Local(tempfile::TempDir),
    Postgres { dsn: String, schema: String },
}

impl Place {
    fn local() -> Self {
        Self::Local(tempfile::tempdir().unwrap())
    }

    fn postgres() -> Self {
        Self::Postgres {
            dsn: memgate_testsupport::real::postgres_dsn(),
            schema: memgate_testsupport::real::unique_schema("distill"),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Local(_) => "local",
            Self::Postgres { .. } => "postgres",
        }
    }

    async fn open(&self) -> Arc<dyn Subject> {
        match self {
            Self::Local(dir) => {
                let config = LocalConfig {
                    distill: Some(LIMITS),
                    ..LocalConfig::default()
                };
                Arc::new(LocalBackend::open(dir.path().join("memgate.sqlite3"), config).unwrap())
            }
            Self::Postgres { dsn, schema } => {
                let config = PostgresConfig::for_dsn(dsn)
                    .unwrap()
                    .with_schema(schema)
                    .unwrap();
                Arc::new(PostgresBackend::new(config).unwrap().with_distill(LIMITS))
            }
        }
    }
}

/// Each named behaviour as `local::<name>` and `postgres::<name>`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod local {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::Place::local()).await
            })*
        }
        mod postgres {
            $(#[tokio::test]
            #[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
            async fn $name() {
                super::$name(super::Place::postgres()).await
            })*
        }
    };
}

fn settings(model: &ScriptedModel) -> DistillSettings {
    DistillSettings::parse(Some(&json!({
        "enabled": true,
        "base_url": model.url,
        "model": "scripted",
        "timeout_ms": 400,
        "max_attempts": 2,
    })))
    .unwrap()
}

fn no_env() -> EnvSource {
    Arc::new(|_| None)
}

fn distiller(backend: &Arc<dyn Subject>, settings: &DistillSettings) -> Arc<Distiller> {
    let queue: Arc<dyn DistillQueue> = backend.clone();
    Arc::new(
        memgate_distill::distiller(queue, settings, &no_env())
            .unwrap()
            .with_backoff(Duration::ZERO),
    )
}

fn dana(thread: &str) -> Caller {
    Caller::new("dana").with_thread(thread)
}

async fn capture(backend: &dyn Subject, thread: &str, said: &[&str]) {
    let request = CaptureRequest {
        caller: dana(thread),
        messages: said.iter().map(|t| Message::human(*t)).collect(),
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    backend.capture(&request).await.unwrap();
}

/// True once Dana's `thread` lists a current fact.
async fn lists_facts(backend: &dyn Subject, thread: &str) -> bool {
    !backend
        .list_facts(&dana(thread), false)
        .await
        .unwrap()
        .is_empty()
}

/// The block Dana's recall of `query` injects, from a thread of its own.
async fn recall_text(backend: &dyn Subject, query: &str) -> String {
    let request = RecallRequest {
        caller: dana("another thread"),
        query: Some(query.into()),
    };
    backend.recall(&request).await.unwrap().text
}

/// An answer adding `text` resting on `sources`.
fn add(text: &str, sources: &[&str]) -> Value {
    json!({"op": "add", "fact": null, "kind": "fact", "text": text, "confidence": 0.9,
           "sources": sources})
}

fn answer(operations: Vec<Value>) -> String {
    json!({ "operations": operations }).to_string()
}

/// What a model call's prompt carries, as the worker sent it.
fn prompt_data(request: &Value) -> Value {
    serde_json::from_str(request["messages"][1]["content"].as_str().unwrap()).unwrap()
}

/// The texts of the current facts a model call's prompt showed.
fn facts_shown(request: &Value) -> Vec<String> {
    prompt_data(request)["current_facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["text"].as_str().unwrap().to_owned())
        .collect()
}

fn rule(needle: &str, content: String) -> Value {
    json!({"when": {"user_contains": needle}, "reply": {"content": content,
           "usage": {"prompt_tokens": 120, "completion_tokens": 30}}})
}

async fn a_capture_only_queues_and_a_good_answer_is_applied_with_its_provenance(place: Place) {
    let model = ScriptedModel::start(
        json!([rule(
            "Lisbon",
            answer(vec![add("Dana lives in Lisbon", &["turn_1"])])
        )]),
        &[],
    );
    let backend = place.open().await;
    capture(
        backend.as_ref(),
        "t1",
        &["Hi, I'm Dana and I live in Lisbon."],
    )
    .await;
    // The capture committed a job and called no model.
    assert!(model.requests().is_empty());
    let figures = backend.queue_figures("2000-01-01").await.unwrap();
    assert_eq!((figures.queued, figures.done), (1, 0));
    assert!(backend
        .list_facts(&dana("t1"), true)
        .await
        .unwrap()
        .is_empty());

    let report = distiller(&backend, &settings(&model))
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(
        (report.applied, report.parked, report.facts_added),
        (1, 0, 1)
    );

    let facts = backend.list_facts(&dana("t1"), true).await.unwrap();
    assert_eq!(facts.len(), 1);
    let fact = &facts[0];
    assert_eq!(fact.text, "Dana lives in Lisbon");
    assert_eq!(fact.origin, FactOrigin::Distilled);
    assert_eq!(fact.sources, vec!["turn_1".to_owned()]);
    assert_eq!(fact.thread.as_deref(), Some("t1"));
    assert_eq!(fact.confidence, 0.9);
    assert_eq!(fact.changed_by, memgate_core::ChangedBy::Model);
    assert!(fact.said_at.is_some() && fact.valid_to.is_none());

    // The request asked for structured output and carried the turn as data.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["response_format"]["type"], "json_schema");
    assert!(requests[0]["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("turn_1"));
    // The endpoint's usage is what is counted.
    let day = &memgate_core::time::now_rfc3339()[..10];
    assert_eq!(backend.tokens_used(day).await.unwrap(), 150);

    // With a query, the distilled fact ranks beside the turns.
    let hits = backend
        .search(&dana("t1"), &SearchQuery::new("where does Dana live"))
        .await
        .unwrap();
    let hit = hits
        .iter()
        .find(|h| h.id == fact.id)
        .expect("the fact is found");
    assert_eq!(hit.content, "Dana lives in Lisbon (from turn_1)");
    let recall = recall_text(backend.as_ref(), "Lisbon").await;
    assert!(
        recall.contains("Dana lives in Lisbon (from turn_1)"),
        "the fact's line names its source: {recall}"
    );
}

async fn supersede_closes_the_old_version_and_keeps_it_in_history(place: Place) {
    let supersede = json!({"op": "supersede", "fact": "mem_1", "kind": "fact",
        "text": "Dana lives in Porto", "confidence": 0.8, "sources": ["turn_2"]});
    let model = ScriptedModel::start(
        json!([
            rule("Porto", answer(vec![supersede])),
            rule(
                "Lisbon",
                answer(vec![add("Dana lives in Lisbon", &["turn_1"])])
            ),
        ]),
        &[],
    );
    let backend = place.open().await;
    let run = distiller(&backend, &settings(&model));
    capture(backend.as_ref(), "t1", &["I live in Lisbon."]).await;
    run.run_until_idle().await.unwrap();
    capture(
        backend.as_ref(),
        "t1",
        &[
            "I live in Lisbon.",
            "We moved to Porto, Lisbon is behind us.",
        ],
    )
    .await;
    let report = run.run_until_idle().await.unwrap();
    assert_eq!((report.applied, report.facts_superseded), (1, 1));

    let caller = dana("t1");
    let old = backend.get_fact(&caller, "mem_1").await.unwrap();
    assert_eq!(old.state, FactState::Retired);
    assert_eq!(old.superseded_by.as_deref(), Some("mem_2"));
    assert!(old.valid_to.is_some());
    assert!(!old.is_current());
    let new = backend.get_fact(&caller, "mem_2").await.unwrap();
    assert!(new.is_current());
    assert_eq!(new.valid_to, None);
    // The old fact's whole history is kept: the model closed it, never deleted it.
    let history = backend.history(&caller, "mem_1").await;
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].text, "Dana lives in Lisbon");
    assert_eq!(history[1].state, FactState::Retired);
    assert_eq!(history[1].changed_by, memgate_core::ChangedBy::Model);
    // Only the current fact is current: the superseded one is not searched.
    let current = backend.list_facts(&caller, false).await.unwrap();
    assert_eq!(
        current.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        ["mem_2"]
    );
    let hits = backend
        .search(&caller, &SearchQuery::new("Dana lives"))
        .await
        .unwrap();
    assert!(hits.iter().all(|h| h.id != "mem_1"), "{hits:?}");
    // Nor in a new conversation's block (no query): the current fact is
    // among the standing memories it opens with, the closed one is not.
    let block = backend
        .recall(&RecallRequest {
            caller: dana("t9"),
            query: None,
        })
        .await
        .unwrap();
    assert!(block.text.contains("[mem_2]"), "{}", block.text);
    assert!(!block.text.contains("[mem_1]"), "{}", block.text);
}

async fn answers_that_cannot_be_used_are_parked_with_their_reason_and_nothing_is_half_applied(
    place: Place,
) {
    let two_ops = |turn: &str, last: Value| answer(vec![add("Dana plays chess", &[turn]), last]);
    let model = ScriptedModel::start(
        json!([
            // The one repair round gets garbage again.
            rule("cannot be used", "still no idea".to_owned()),
            rule("GARBAGE", "I am not sure what you mean.".to_owned()),
            rule(
                "CHATTER",
                format!(
                    "Sure! ```json\n{}\n``` Done.",
                    answer(vec![add("Dana bakes bread", &["turn_2"])])
                )
            ),
            rule(
                "TRUNCATED",
                "{\"operations\": [{\"op\": \"add\", \"text\": \"Dana".to_owned()
            ),
            rule(
                "UNKNOWN-TURN",
                two_ops("turn_4", add("Dana swims", &["turn_999"]))
            ),
            rule(
                "MISSING-FACT",
                two_ops(
                    "turn_5",
                    json!({"op": "supersede", "fact": "mem_77",
                "kind": "fact", "text": "x", "confidence": 0.5, "sources": ["turn_5"]})
                )
            ),
        ]),
        &[],
    );
    let backend = place.open().await;
    for (thread, text) in [
        ("garbage", "GARBAGE I play chess."),
        ("chatter", "CHATTER I bake bread."),
        ("truncated", "TRUNCATED I play chess."),
        ("unknown", "UNKNOWN-TURN I play chess."),
        ("missing", "MISSING-FACT I play chess."),
    ] {
        capture(backend.as_ref(), thread, &[text]).await;
    }
    let report = distiller(&backend, &settings(&model))
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!((report.applied, report.parked), (1, 4), "{report:?}");

    let parked = backend.parked_jobs().await.unwrap();
    let reason = |thread: &str| {
        parked
            .iter()
            .find(|p| p.thread == thread)
            .map(|p| p.reason.clone())
            .unwrap_or_else(|| panic!("{thread} was not parked: {parked:?}"))
    };
    assert!(
        reason("garbage").contains("holds no JSON object), nor after one repair round"),
        "{}",
        reason("garbage")
    );
    assert!(
        reason("truncated").contains("not closed (truncated?)), nor after one repair round"),
        "{}",
        reason("truncated")
    );
    assert!(
        reason("unknown").contains("`turn_999` is not one of the new turns"),
        "{}",
        reason("unknown")
    );
    assert!(
        reason("missing").contains("`mem_77` is not one of the current facts shown"),
        "{}",
        reason("missing")
    );
    println!(
        "answer faults ({}): {} jobs, applied {}, parked {}",
        place.name(),
        report.applied + report.parked,
        report.applied,
        report.parked
    );
    for p in &parked {
        println!("  parked {}: {}", p.thread, p.reason);
    }
    // The first operation of a parked job was not applied either: the
    // scope holds the chatter job's fact only.
    let facts = backend.list_facts(&dana("any"), true).await.unwrap();
    let held: Vec<(&str, Option<&str>)> = facts
        .iter()
        .map(|f| (f.text.as_str(), f.thread.as_deref()))
        .collect();
    assert_eq!(held, [("Dana bakes bread", Some("chatter"))]);
    // Parked jobs are retryable: queued again, they are tried again.
    assert_eq!(backend.retry_parked(None).await.unwrap(), 4);
    assert_eq!(backend.queue_figures("x").await.unwrap().queued, 4);
}

async fn a_distilled_fact_never_overrides_an_explicit_one(place: Place) {
    let supersede = json!({"op": "supersede", "fact": "mem_1", "kind": "fact",
        "text": "Dana lives in Porto", "confidence": 0.8, "sources": ["turn_1"]});
    let model = ScriptedModel::start(
        json!([rule(
            "Porto",
            answer(vec![add("Dana has a cat", &["turn_1"]), supersede])
        )]),
        &[],
    );
    let backend = place.open().await;
    let saved = backend
        .remember(
            &dana("t1"),
            &RememberRequest::new("fact", "Dana lives in Lisbon").unwrap(),
        )
        .await
        .unwrap();
    assert!(matches!(saved, RememberOutcome::Stored { .. }));
    capture(
        backend.as_ref(),
        "t1",
        &["Dana moved from Lisbon to Porto."],
    )
    .await;
    let report = distiller(&backend, &settings(&model))
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(report.parked, 1);
    let reason = &backend.parked_jobs().await.unwrap()[0].reason;
    assert!(
        reason.contains("never overrides an explicit one"),
        "{reason}"
    );
    let explicit = backend.get_fact(&dana("t1"), "mem_1").await.unwrap();
    assert!(explicit.is_current() && explicit.version == 1);
    // The job's other operation was not applied either: one transaction.
    assert_eq!(
        backend.list_facts(&dana("t1"), true).await.unwrap().len(),
        1
    );
}

async fn transient_failures_are_retried_then_parked_and_a_hang_is_cut_at_the_timeout(place: Place) {
    let model = ScriptedModel::start(
        json!([
            {"when": {"user_contains": "RATE"}, "times": 1, "reply": {"status": 429}},
            rule("RATE", answer(vec![add("Dana runs", &["turn_1"])])),
            {"when": {"user_contains": "DOWN"}, "reply": {"status": 503}},
            {"when": {"user_contains": "HANG"}, "reply": {"content": "{}", "pause_seconds": 3}},
        ]),
        &[],
    );
    let backend = place.open().await;
    capture(backend.as_ref(), "rate", &["RATE I run every morning."]).await;
    capture(backend.as_ref(), "down", &["DOWN I like jazz."]).await;
    capture(backend.as_ref(), "hang", &["HANG I like rain."]).await;
    let started = Instant::now();
    let report = distiller(&backend, &settings(&model))
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(
        (report.applied, report.parked, report.retried),
        (1, 2, 3),
        "{report:?}"
    );
    let parked = backend.parked_jobs().await.unwrap();
    let reason = |thread: &str| {
        parked
            .iter()
            .find(|p| p.thread == thread)
            .unwrap()
            .reason
            .clone()
    };
    assert!(
        reason("down").contains("gave up after 2 attempts: endpoint answered 503"),
        "{}",
        reason("down")
    );
    assert!(
        reason("hang").contains("did not answer within 400 ms"),
        "{}",
        reason("hang")
    );
    println!(
        "transient faults ({}): {} jobs, applied {}, retried {}, parked {}",
        place.name(),
        report.applied + report.parked,
        report.applied,
        report.retried,
        report.parked
    );
    for p in &parked {
        println!(
            "  parked {} after {} attempts: {}",
            p.thread, p.attempts, p.reason
        );
    }
    assert_eq!(parked.iter().map(|p| p.attempts).max(), Some(2));
    assert_eq!(
        backend.list_facts(&dana("rate"), false).await.unwrap()[0].text,
        "Dana runs"
    );
    // Two hung calls of 400 ms, not two of 3 s.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

async fn a_job_replayed_after_a_crash_adds_nothing_twice(place: Place) {
    let model = ScriptedModel::start(
        json!([rule(
            "chess",
            answer(vec![add("Dana plays chess", &["turn_1"])])
        )]),
        &[],
    );
    let backend = place.open().await;
    capture(backend.as_ref(), "t1", &["I play chess."]).await;
    let job = backend.next_jobs(1, &[]).await.unwrap().remove(0);
    let run = distiller(&backend, &settings(&model));
    assert_eq!(run.run_until_idle().await.unwrap().applied, 1);
    // The same job, applied again (a worker that died after the commit and
    // before it knew), writes nothing.
    let ops = vec![memgate_core::distill::Operation::Add(
        memgate_core::distill::ProposedFact {
            kind: "fact".into(),
            text: "Dana plays chess in the park".into(),
            confidence: 0.5,
            sources: vec!["turn_1".into()],
        },
    )];
    let again = backend.apply(&job, &ops).await.unwrap();
    assert!(again.replayed && again.added == 0);
    assert_eq!(
        backend.list_facts(&dana("t1"), true).await.unwrap().len(),
        1
    );
    // Nothing is left to run, so a second run asks the model nothing.
    let calls = model.requests().len();
    assert_eq!(run.run_until_idle().await.unwrap().applied, 0);
    assert_eq!(model.requests().len(), calls);
}

async fn a_store_reopened_with_jobs_queued_runs_them_in_the_background(place: Place) {
    let model = ScriptedModel::start(
        json!([rule(
            "tea",
            answer(vec![add("Dana prefers tea", &["turn_1"])])
        )]),
        &[],
    );
    {
        let backend = place.open().await;
        capture(backend.as_ref(), "t1", &["I prefer tea."]).await;
        assert!(backend.shutdown(Duration::from_secs(5)).await);
    }
    let backend = place.open().await;
    assert_eq!(backend.queue_figures("x").await.unwrap().queued, 1);
    let mut worker = Worker::start(distiller(&backend, &settings(&model))).unwrap();
    let applied = |worker: &Worker| {
        worker
            .stats()
            .figures()
            .iter()
            .find(|f| f.name == "memgate_distill_jobs_applied_total")
            .unwrap()
            .value
    };
    // The fact is listed once the job's transaction commits; the worker
    // counts the job right after, so the count is waited for too (a stop
    // in between would cut the job's task before it counts).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lists_facts(backend.as_ref(), "t1").await || applied(&worker) == 0 {
        assert!(Instant::now() < deadline, "the queued job did not run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(worker.stop(Duration::from_secs(5)));
    assert_eq!(applied(&worker), 1);
    assert_eq!(backend.queue_figures("x").await.unwrap().queued, 0);
}

async fn secrets_in_a_captured_turn_and_the_endpoint_key_never_reach_the_prompt_or_a_reason(
    place: Place,
) {
    const SECRET: &str = "sk-proj-q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_VnM3hPz8LcB2yAd5GfS0";
    const KEY: &str = "sk-distill-wrong-key-7781";
    let model = ScriptedModel::start(
        json!([rule("deploy", answer(vec![]))]),
        &["--require-key", "the-right-key"],
    );
    let backend = place.open().await;
    capture(
        backend.as_ref(),
        "t1",
        &[&format!("Use {SECRET} to deploy the billing service.")],
    )
    .await;
    let mut settings = settings(&model);
    settings.api_key_env = Some("DISTILL_KEY".into());
    let env: EnvSource = Arc::new(|k| (k == "DISTILL_KEY").then(|| KEY.to_owned()));
    let queue: Arc<dyn DistillQueue> = backend.clone();
    let run = Arc::new(memgate_distill::distiller(queue, &settings, &env).unwrap());
    let report = run.run_until_idle().await.unwrap();
    // The server refuses the key (and echoes it in its error body): parked,
    // and the reason names the status only.
    assert_eq!(report.parked, 1);
    let reason = &backend.parked_jobs().await.unwrap()[0].reason;
    assert!(reason.contains("401") && !reason.contains(KEY), "{reason}");
    let sent = model.requests();
    assert_eq!(sent.len(), 1);
    let body = sent[0].to_string();
    assert!(!body.contains(SECRET) && !body.contains(KEY), "{body}");
    assert!(body.contains("[redacted:api_key]"), "{body}");
}

async fn erasure_follows_provenance(place: Place) {
    let supersede = json!({"op": "supersede", "fact": "mem_1", "kind": "fact",
        "text": "Dana's dog is called Rex and is two", "confidence": 0.8, "sources": ["turn_3"]});
    let model = ScriptedModel::start(
        json!([
            rule("two now", answer(vec![supersede])),
            // Keyed on the turns' words: the prompt also shows the newest facts.
            rule(
                "My dog",
                answer(vec![add("Dana's dog is called Rex", &["turn_1"])])
            ),
            rule(
                "I play the violin",
                answer(vec![add("Dana plays the violin", &["turn_2"])])
            ),
        ]),
        &[],
    );
    let backend = place.open().await;
    let run = distiller(&backend, &settings(&model));
    capture(backend.as_ref(), "pets", &["My dog is called Rex."]).await;
    capture(backend.as_ref(), "music", &["I play the violin."]).await;
    run.run_until_idle().await.unwrap();
    capture(
        backend.as_ref(),
        "pets",
        &["My dog is called Rex.", "Rex is two now."],
    )
    .await;
    run.run_until_idle().await.unwrap();
    let facts = backend.list_facts(&dana("x"), true).await.unwrap();
    assert_eq!(facts.len(), 3, "{facts:?}");

    // Forgetting a thread erases the distilled facts resting only on it,
    // each with its history; the other thread's fact stays.
    let report = backend
        .forget(&dana("pets"), &ForgetTarget::Thread)
        .await
        .unwrap();
    assert_eq!(report.facts, 2, "{report:?}");
    let left = backend.list_facts(&dana("x"), true).await.unwrap();
    assert_eq!(
        left.iter().map(|f| f.text.as_str()).collect::<Vec<_>>(),
        ["Dana plays the violin"]
    );

    // Forgetting a fact erases every version of it.
    let id = left[0].id.clone();
    let report = backend
        .forget(&dana("music"), &ForgetTarget::Fact { id: id.clone() })
        .await
        .unwrap();
    assert_eq!((report.facts, report.versions), (1, 1));
    assert!(backend.get_fact(&dana("music"), &id).await.is_err());
}

async fn the_prompt_carries_a_bounded_set_of_related_facts_never_the_whole_store(place: Place) {
    let model = ScriptedModel::start(json!([rule("garden", answer(vec![]))]), &[]);
    let backend = place.open().await;
    for i in 0..40 {
        let text = format!("Dana's garden plot {i} grows tomatoes");
        let request = RememberRequest::new("fact", &text).unwrap();
        backend.remember(&dana("t1"), &request).await.unwrap();
    }
    for i in 0..40 {
        let text = format!("Dana owns a bicycle number {i}");
        let request = RememberRequest::new("fact", &text).unwrap();
        backend.remember(&dana("t1"), &request).await.unwrap();
    }
    capture(backend.as_ref(), "t1", &["My garden tomatoes are ripe."]).await;
    let mut settings = settings(&model);
    settings.related_facts = 5;
    distiller(&backend, &settings)
        .run_until_idle()
        .await
        .unwrap();
    let shown = facts_shown(&model.requests()[0]);
    assert_eq!(shown.len(), 5, "{shown:?}");
    assert!(
        shown.iter().all(|f| f.contains("garden")),
        "the related facts, not the newest: {shown:?}"
    );
}

/// The facts a new turn may change are ranked among facts only: a heavy
/// user's turns, saying the job's own words many times over (the job's
/// own turns among them), must not crowd the one fact they may change out
/// of the prompt's bounded set.
async fn a_related_fact_is_found_however_many_turns_share_its_words(place: Place) {
    let model = ScriptedModel::start(json!([rule("violin", answer(vec![]))]), &[]);
    let backend = place.open().await;
    let teacher = "Dana's violin teacher is Marta";
    let request = RememberRequest::new("fact", teacher).unwrap();
    backend.remember(&dana("profile"), &request).await.unwrap();
    const LESSONS: usize = 60;
    for week in 0..LESSONS {
        let said = format!("My violin lesson with Marta went well, week {week}.");
        capture(backend.as_ref(), &format!("lesson {week}"), &[&said]).await;
    }
    let mut settings = settings(&model);
    settings.related_facts = 5;
    distiller(&backend, &settings)
        .run_until_idle()
        .await
        .unwrap();
    let sent = model.requests();
    assert_eq!(sent.len(), LESSONS);
    for request in sent {
        let shown = facts_shown(&request);
        assert!(
            shown.iter().any(|f| f == teacher),
            "the fact the lesson may change is shown: {shown:?}"
        );
    }
}

/// The job of the turn `news` in `thread` is shown `fact` alone as a related
/// fact, and a search of kind `fact` for `news` finds it alone.
async fn only_related_fact_is(backend: &dyn Subject, thread: &str, news: &str, fact: &str) {
    let jobs = backend.next_jobs(1_000, &[]).await.unwrap();
    let job = jobs
        .iter()
        .find(|j| j.caller.thread.as_deref() == Some(thread))
        .expect("the new turn's job");
    let related = backend.related_facts(job, 5).await.unwrap();
    assert_eq!(
        related.iter().map(|f| f.text.as_str()).collect::<Vec<_>>(),
        [fact]
    );
    let mut query = SearchQuery::new(news);
    query.kind = Some("fact".to_owned());
    let hits = backend.search(&dana(thread), &query).await.unwrap();
    assert_eq!(
        hits.iter().map(|h| h.content.as_str()).collect::<Vec<_>>(),
        [fact]
    );
}

/// A fact's words can be common in the scope only because its turns say
/// them (here in more documents than a lexical ranking walks, 2,000): the
/// rare words of a new turn are then turns' words alone, and a walk chosen
/// by the scope's counts found no memory. Among memories every term is
/// walked, for the facts a job may change and for a search of one kind.
async fn a_fact_whose_words_the_turns_made_common_is_still_found(place: Place) {
    let backend = place.open().await;
    let teacher = "Dana's violin teacher is Marta";
    let request = RememberRequest::new("fact", teacher).unwrap();
    backend.remember(&dana("profile"), &request).await.unwrap();
    for log in 0..21 {
        let said: Vec<String> = (0..100)
            .map(|i| format!("Violin practice with Marta, log {log} entry {i}."))
            .collect();
        let said: Vec<&str> = said.iter().map(String::as_str).collect();
        capture(backend.as_ref(), &format!("log {log}"), &said).await;
    }
    let news = "Marta moved my violin lesson to Friday.";
    capture(backend.as_ref(), "news", &[news]).await;
    only_related_fact_is(backend.as_ref(), "news", news, teacher).await;
}

/// "We moved to Porto" names nothing of "Dana lives in Lisbon", so recall
/// by words finds no related fact; the scope's newest distilled facts are
/// shown too, and the scripted model supersedes the old fact only when it
/// is shown (it adds a second residence otherwise, as a model would).
async fn a_change_that_does_not_name_the_old_value_supersedes_it(place: Place) {
    let supersede = json!({"op": "supersede", "fact": "mem_1", "kind": "fact",
        "text": "Dana lives in Porto", "confidence": 0.8, "sources": ["turn_2"]});
    let model = ScriptedModel::start(
        json!([
            rule("Dana lives in Lisbon", answer(vec![supersede])),
            rule(
                "Lisbon",
                answer(vec![add("Dana lives in Lisbon", &["turn_1"])])
            ),
            rule(
                "Porto",
                answer(vec![add("Dana lives in Porto", &["turn_2"])])
            ),
        ]),
        &[],
    );
    let backend = place.open().await;
    let mut settings = settings(&model);
    settings.related_facts = 3;
    let run = distiller(&backend, &settings);
    capture(backend.as_ref(), "march", &["I live in Lisbon."]).await;
    run.run_until_idle().await.unwrap();
    // Explicit facts the new turn's words do find: they come first, and the
    // prompt stays within `related_facts`.
    for text in [
        "We moved the piano",
        "Last week was busy",
        "Week plans: move",
    ] {
        let request = RememberRequest::new("fact", text).unwrap();
        backend.remember(&dana("x"), &request).await.unwrap();
    }
    capture(
        backend.as_ref(),
        "november",
        &["We moved to Porto last week."],
    )
    .await;
    let report = run.run_until_idle().await.unwrap();
    assert_eq!(
        (report.applied, report.facts_superseded),
        (1, 1),
        "{report:?}"
    );

    let sent = model.requests();
    let shown = facts_shown(&sent[1]);
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(
        shown.iter().any(|f| f == "Dana lives in Lisbon"),
        "{shown:?}"
    );
    assert!(!prompt_data(&sent[1])["new_turns"]
        .to_string()
        .contains("Lisbon"));

    let caller = dana("november");
    let old = backend.get_fact(&caller, "mem_1").await.unwrap();
    assert!(!old.is_current());
    assert!(old.valid_to.is_some());
    let new_id = old.superseded_by.clone().expect("closed by its successor");
    let new = backend.get_fact(&caller, &new_id).await.unwrap();
    assert_eq!(new.text, "Dana lives in Porto");
    assert!(new.is_current());
    let current: Vec<String> = backend
        .list_facts(&caller, false)
        .await
        .unwrap()
        .into_iter()
        .filter(|f| f.origin == FactOrigin::Distilled)
        .map(|f| f.text)
        .collect();
    assert_eq!(current, ["Dana lives in Porto"]);
    for query in [Some("where does Dana live".to_owned()), None] {
        let block = backend
            .recall(&RecallRequest {
                caller: dana("later"),
                query,
            })
            .await
            .unwrap();
        assert!(
            block.text.contains(&format!("[{new_id}]")),
            "{}",
            block.text
        );
        assert!(!block.text.contains("[mem_1]"), "{}", block.text);
    }
}

async fn the_token_budgets_park_an_oversized_job_and_hold_the_rest_for_another_day(place: Place) {
    let model = ScriptedModel::start(
        json!([{"when": {"always": true}, "reply": {"content": answer(vec![]),
                "usage": {"prompt_tokens": 1500, "completion_tokens": 0}}}]),
        &[],
    );
    let backend = place.open().await;
    capture(backend.as_ref(), "big", &[&"word ".repeat(3_000)]).await;
    capture(backend.as_ref(), "small1", &["I like tea."]).await;
    capture(backend.as_ref(), "small2", &["I like cake."]).await;
    let mut settings = settings(&model);
    settings.max_job_tokens = 1_000;
    settings.max_daily_tokens = 1_000;
    let report = distiller(&backend, &settings)
        .run_until_idle()
        .await
        .unwrap();
    // The oversized job is parked without a call; the first small one spends
    // the day's budget (the endpoint reported 1500), the second waits queued.
    assert_eq!((report.parked, report.applied), (1, 1), "{report:?}");
    assert!(report.over_budget);
    let parked = backend.parked_jobs().await.unwrap();
    assert_eq!(parked[0].thread, "big");
    assert!(
        parked[0].reason.contains("max_job_tokens"),
        "{}",
        parked[0].reason
    );
    assert_eq!(model.requests().len(), 1);
    assert_eq!(backend.queue_figures("x").await.unwrap().queued, 1);
}

/// A ranking never shows a distilled fact and the turn it rests on both
/// (the fact's line names that turn): the lower of the two is left out and
/// the next entry takes its place, so a search asked for two still answers
/// two.
async fn a_ranking_shows_a_fact_or_the_turn_it_rests_on_never_both(place: Place) {
    let model = ScriptedModel::start(
        json!([rule(
            "I live in Lisbon",
            answer(vec![add("Dana lives in Lisbon", &["turn_1"])])
        )]),
        &[],
    );
    let backend = place.open().await;
    capture(
        backend.as_ref(),
        "t1",
        &[
            "I live in Lisbon.",
            "The trams of Lisbon climb steep hills every single day of the week.",
            "We walked around the old town of Lisbon for hours this afternoon.",
        ],
    )
    .await;
    let report = distiller(&backend, &settings(&model))
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(report.facts_added, 1);
    let fact = backend.list_facts(&dana("t1"), true).await.unwrap()[0]
        .id
        .clone();

    let ids = |hits: Vec<memgate_core::SearchHit>| -> Vec<String> {
        hits.into_iter().map(|h| h.id).collect()
    };
    let search = |top_k: usize| {
        let backend = backend.clone();
        async move {
            let mut query = SearchQuery::new("Lisbon");
            query.top_k = top_k;
            backend.search(&dana("t1"), &query).await.unwrap()
        }
    };
    // Four entries match; the fact (boosted, shortest) leads and its
    // source turn is left out.
    let all = ids(search(10).await);
    assert_eq!(all, [fact.as_str(), "turn_2", "turn_3"], "{all:?}");
    // Asked for two, the two that show something different: the place the
    // source turn would have taken goes to the next entry.
    let two = ids(search(2).await);
    assert_eq!(two, [fact.as_str(), "turn_2"], "{two:?}");

    let recall = recall_text(backend.as_ref(), "Lisbon").await;
    assert!(
        recall.contains("Dana lives in Lisbon (from turn_1)"),
        "{recall}"
    );
    assert!(
        !recall.contains("I live in Lisbon."),
        "the source turn is not shown again: {recall}"
    );
    assert!(recall.contains("old town of Lisbon"), "{recall}");
    // A fact the query does not find still comes as a standing memory,
    // naming its source too.
    let recall = recall_text(backend.as_ref(), "trams").await;
    assert!(recall.contains("steep hills"), "{recall}");
    assert!(
        recall.contains("Dana lives in Lisbon (from turn_1)"),
        "{recall}"
    );
}

/// Turns captured while a job runs join it; applying the job ends what
/// it read, with operations or without (one statement on postgres), and
/// the joined turns are the next job.
async fn turns_that_join_a_running_job_stay_queued_after_it(place: Place) {
    let backend = place.open().await;
    for thread in ["quiet", "chatty"] {
        capture(backend.as_ref(), thread, &["I play chess."]).await;
    }
    let jobs = backend.next_jobs(2, &[]).await.unwrap();
    assert_eq!(jobs.len(), 2);
    for thread in ["quiet", "chatty"] {
        capture(backend.as_ref(), thread, &["I play chess.", "And I swim."]).await;
    }
    for job in &jobs {
        let operations = match job.thread() {
            "chatty" => vec![Operation::Add(ProposedFact {
                kind: "fact".into(),
                text: "Dana plays chess".into(),
                confidence: 0.9,
                sources: vec![job.turns[0].id.clone()],
            })],
            _ => Vec::new(),
        };
        assert!(!backend.apply(job, &operations).await.unwrap().replayed);
        assert!(backend.apply(job, &operations).await.unwrap().replayed);
    }
    let waiting = QueueDepth {
        queued: 2,
        parked: 0,
    };
    assert_eq!(backend.queue_depth().await.unwrap(), waiting);
    let next = backend.next_jobs(2, &[]).await.unwrap();
    assert_eq!(next.len(), 2);
    for job in &next {
        let texts: Vec<&str> = job.turns.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(texts, ["And I swim."], "{}", job.thread());
        assert!(!backend.apply(job, &[]).await.unwrap().replayed);
    }
    assert_eq!(backend.queue_depth().await.unwrap(), QueueDepth::default());
    assert_eq!(backend.queue_figures("x").await.unwrap().done, 2);
    assert_eq!(
        backend
            .list_facts(&dana("chatty"), false)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// What the serving worker re-reads for `/metrics`: queued and parked
/// jobs, the same counts `doctor`'s figures give, without the done ones.
async fn the_queue_depth_counts_the_jobs_still_waiting(place: Place) {
    let backend = place.open().await;
    for thread in ["a", "b", "c"] {
        capture(
            backend.as_ref(),
            thread,
            &[&format!("A note in thread {thread}.")],
        )
        .await;
    }
    let jobs = backend.next_jobs(3, &[]).await.unwrap();
    backend.park(jobs[0].id, "a test parked it").await.unwrap();
    backend.apply(&jobs[1], &[]).await.unwrap();
    let depth = backend.queue_depth().await.unwrap();
    assert_eq!(
        depth,
        QueueDepth {
            queued: 1,
            parked: 1
        }
    );
    let figures = backend.queue_figures("x").await.unwrap();
    assert_eq!(
        (figures.queued, figures.parked, figures.done),
        (depth.queued, depth.parked, 1)
    );
}

/// A serving worker yields to the requests its backend serves: it takes
/// no job while one is in flight, runs it once they pause, and under
/// requests that never pause still runs, one step per `at_most`.
async fn a_serving_worker_waits_for_a_pause_in_requests_but_not_forever(place: Place) {
    let model = ScriptedModel::start(
        json!([
            rule("tea", answer(vec![add("Dana prefers tea", &["turn_1"])])),
            rule("coffee", answer(vec![])),
        ]),
        &[],
    );
    let backend = place.open().await;
    capture(backend.as_ref(), "t1", &["I prefer tea."]).await;
    let requests = WorkTracker::new();
    let in_flight = requests.admit().unwrap();
    let queue: Arc<dyn DistillQueue> = backend.clone();
    let at_most = Duration::from_secs(2);
    let run = memgate_distill::distiller(queue, &settings(&model), &no_env())
        .unwrap()
        .yielding_to(Arc::clone(&requests), at_most);
    let mut worker = Worker::start(Arc::new(run)).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        model.requests().is_empty(),
        "the worker asked the model while a request was in flight"
    );
    assert_eq!(backend.queue_depth().await.unwrap().queued, 1);

    drop(in_flight);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lists_facts(backend.as_ref(), "t1").await {
        assert!(
            Instant::now() < deadline,
            "the job did not run in the pause"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let _steady = requests.admit().unwrap();
    capture(backend.as_ref(), "t2", &["I drink coffee."]).await;
    let started = Instant::now();
    while backend.queue_depth().await.unwrap().queued > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the worker never ran under steady requests"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        started.elapsed() >= at_most,
        "the job ran after {:?} of requests that never paused",
        started.elapsed()
    );
    assert!(worker.stop(Duration::from_secs(5)));
}

on_both_stores!(
    a_capture_only_queues_and_a_good_answer_is_applied_with_its_provenance,
    supersede_closes_the_old_version_and_keeps_it_in_history,
    answers_that_cannot_be_used_are_parked_with_their_reason_and_nothing_is_half_applied,
    a_distilled_fact_never_overrides_an_explicit_one,
    transient_failures_are_retried_then_parked_and_a_hang_is_cut_at_the_timeout,
    a_job_replayed_after_a_crash_adds_nothing_twice,
    a_store_reopened_with_jobs_queued_runs_them_in_the_background,
    secrets_in_a_captured_turn_and_the_endpoint_key_never_reach_the_prompt_or_a_reason,
    erasure_follows_provenance,
    the_prompt_carries_a_bounded_set_of_related_facts_never_the_whole_store,
    a_related_fact_is_found_however_many_turns_share_its_words,
    a_fact_whose_words_the_turns_made_common_is_still_found,
    a_change_that_does_not_name_the_old_value_supersedes_it,
    the_token_budgets_park_an_oversized_job_and_hold_the_rest_for_another_day,
    a_ranking_shows_a_fact_or_the_turn_it_rests_on_never_both,
    turns_that_join_a_running_job_stay_queued_after_it,
    the_queue_depth_counts_the_jobs_still_waiting,
    a_serving_worker_waits_for_a_pause_in_requests_but_not_forever,
);

/// Two replicas (two handles, each its own lease holder) running workers
/// over one PostgreSQL queue: every job is distilled, the model is asked
/// once per job, no fact twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn postgres_two_replicas_on_one_queue_ask_the_model_once_per_job() {
    const THREADS: usize = 8;
    let place = Place::postgres();
    let first = place.open().await;
    for k in 1..=THREADS {
        capture(
            first.as_ref(),
            &format!("t{k}"),
            &[&format!("Note marker-{k}-end.")],
        )
        .await;
    }
    // Turn ids follow the captures in a fresh schema: thread k holds turn k.
    let rules: Vec<Value> = (1..=THREADS)
        .map(|k| {
            let content = answer(vec![add(
                &format!("Dana owns item {k}"),
                &[&format!("turn_{k}")],
            )]);
            json!({"when": {"user_contains": format!("marker-{k}-end")},
                   "reply": {"content": content, "pause_seconds": 0.2}})
        })
        .collect();
    let model = ScriptedModel::start(Value::Array(rules), &[]);
    let second = place.open().await;
    let mut settings = settings(&model);
    settings.concurrency = 2;
    settings.timeout = Duration::from_secs(5);
    let (one, two) = (distiller(&first, &settings), distiller(&second, &settings));
    let (a, b) = tokio::join!(one.run_until_idle(), two.run_until_idle());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.applied + b.applied, THREADS, "{a:?} {b:?}");
    assert_eq!(model.requests().len(), THREADS, "each job asked once");
    let facts = first.list_facts(&dana("t1"), true).await.unwrap();
    let mut texts: Vec<&str> = facts.iter().map(|f| f.text.as_str()).collect();
    texts.sort_unstable();
    texts.dedup();
    assert_eq!((facts.len(), texts.len()), (THREADS, THREADS));
    assert_eq!(first.queue_figures("x").await.unwrap().done, THREADS as u64);
}

/// A worker that took a job and died holds it until its lease runs out;
/// then another replica takes it, and it is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn postgres_a_job_held_by_a_dead_worker_is_taken_after_its_lease() {
    let model = ScriptedModel::start(
        json!([rule(
            "chess",
            answer(vec![add("Dana plays chess", &["turn_1"])])
        )]),
        &[],
    );
    let Place::Postgres { dsn, schema } = Place::postgres() else {
        unreachable!()
    };
    let open = |lease: Duration| {
        let config = PostgresConfig::for_dsn(&dsn)
            .unwrap()
            .with_schema(&schema)
            .unwrap();
        let limits = QueueLimits { lease, ..LIMITS };
        Arc::new(PostgresBackend::new(config).unwrap().with_distill(limits)) as Arc<dyn Subject>
    };
    let dead = open(Duration::from_secs(2));
    capture(dead.as_ref(), "t1", &["I play chess."]).await;
    // The dead worker took the job (and never finished it).
    assert_eq!(dead.next_jobs(1, &[]).await.unwrap().len(), 1);
    let other = open(Duration::from_secs(2));
    let run = distiller(&other, &settings(&model));
    let report = run.run_until_idle().await.unwrap();
    assert_eq!(report.applied, 0, "the job is held by its lease");
    assert!(model.requests().is_empty());
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let report = run.run_until_idle().await.unwrap();
    assert_eq!((report.applied, report.facts_added), (1, 1));
    assert_eq!(model.requests().len(), 1);
    assert_eq!(other.list_facts(&dana("t1"), true).await.unwrap().len(), 1);
}

/// With an embedder, related facts are found by meaning: "We moved to
/// Porto" shares no word with "Dana lives in Lisbon", and three distilled
/// facts are newer than it, so without an embedder the two shown are the
/// newest (the old residence is not among them); with all-MiniLM-L6-v2
/// the hybrid ranking shows it, and the job supersedes it.
#[tokio::test]
#[ignore = "needs all-MiniLM-L6-v2: MEMGATE_TEST_MINILM_DIR=$(testkit/minilm)"]
async fn local_with_an_embedder_finds_the_fact_a_change_supersedes_by_meaning() {
    let supersede = json!({"op": "supersede", "fact": "mem_1", "kind": "fact",
        "text": "Dana lives in Porto", "confidence": 0.8, "sources": ["turn_5"]});
    let model = ScriptedModel::start(
        json!([
            rule("Dana lives in Lisbon", answer(vec![supersede])),
            rule(
                "Porto",
                answer(vec![add("Dana lives in Porto", &["turn_5"])])
            ),
        ]),
        &[],
    );
    let mut shown_by = Vec::new();
    for embedder in [None, Some(minilm())] {
        let dir = tempfile::tempdir().unwrap();
        let config = LocalConfig {
            distill: Some(LIMITS),
            ..LocalConfig::default()
        };
        let mut store =
            memgate_store::MemoryStore::open(dir.path().join("memgate.sqlite3"), config).unwrap();
        if let Some(embedder) = &embedder {
            store = store.with_embedder(Arc::clone(embedder));
        }
        let backend = Arc::new(LocalBackend::from_store(store));
        // The old residence first, then three newer, unrelated facts,
        // applied as a model would have.
        let said = [
            ("march", "I live in Lisbon.", "Dana lives in Lisbon"),
            (
                "chess",
                "I play chess on Sundays.",
                "Dana plays chess on Sundays",
            ),
            ("dog", "My dog is called Rex.", "Dana's dog is called Rex"),
            (
                "tea",
                "I drink green tea every morning.",
                "Dana drinks green tea",
            ),
        ];
        for (i, (thread, turn, fact)) in said.iter().enumerate() {
            capture(backend.as_ref(), thread, &[turn]).await;
            let job = backend.next_jobs(1, &[]).await.unwrap().remove(0);
            let op = memgate_core::distill::Operation::Add(memgate_core::distill::ProposedFact {
                kind: "fact".into(),
                text: (*fact).into(),
                confidence: 0.9,
                sources: vec![format!("turn_{}", i + 1)],
            });
            backend.apply(&job, &[op]).await.unwrap();
        }
        if embedder.is_some() {
            // Every turn and fact embedded now, not by the background indexer.
            backend.store().index_all_vectors(64).unwrap();
        }
        capture(
            backend.as_ref(),
            "november",
            &["We moved to Porto last week."],
        )
        .await;
        let queue: Arc<dyn DistillQueue> = backend.clone();
        let mut settings = settings(&model);
        settings.related_facts = 2;
        let report = Arc::new(
            memgate_distill::distiller(queue, &settings, &no_env())
                .unwrap()
                .with_backoff(Duration::ZERO),
        )
        .run_until_idle()
        .await
        .unwrap();
        let shown = facts_shown(model.requests().last().unwrap());
        shown_by.push((shown, report.facts_superseded));
    }
    let (without, superseded_without) = &shown_by[0];
    assert!(
        !without.contains(&"Dana lives in Lisbon".to_owned()),
        "{without:?}"
    );
    assert_eq!(*superseded_without, 0);
    let (with, superseded_with) = &shown_by[1];
    assert!(
        with.contains(&"Dana lives in Lisbon".to_owned()),
        "{with:?}"
    );
    assert_eq!(*superseded_with, 1);
}

/// all-MiniLM-L6-v2, the embedder of the tests that rank by meaning.
fn minilm() -> Arc<dyn memgate_embed::Embedder> {
    let [model_dir] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_MINILM_DIR"]);
    memgate_store::config::EmbedderSettings::parse(
        &json!({"kind": "local", "model_path": model_dir}),
    )
    .unwrap()
    .build()
    .unwrap()
}

/// The facts a new turn may change are found by meaning among facts only:
/// a heavy user's turns near the new one in meaning (here 200 about the
/// move it reports) must not crowd the one fact it changes out of the
/// nearest items, for the job's prompt and for a search of one kind.
async fn a_related_fact_is_found_by_meaning_however_many_turns_are_nearer(
    backend: Arc<dyn Subject>,
    index_all: impl AsyncFnOnce(),
) {
    let home = "Dana lives in Lisbon";
    let request = RememberRequest::new("fact", home).unwrap();
    backend.remember(&dana("profile"), &request).await.unwrap();
    for week in 0..10 {
        let said: Vec<String> = (0..20)
            .map(|day| {
                format!(
                    "Week {week}, day {day} of moving to Porto: packing boxes for the new flat."
                )
            })
            .collect();
        let said: Vec<&str> = said.iter().map(String::as_str).collect();
        capture(backend.as_ref(), &format!("move {week}"), &said).await;
    }
    let news = "We moved to Porto last week.";
    capture(backend.as_ref(), "news", &[news]).await;
    index_all().await;
    only_related_fact_is(backend.as_ref(), "news", news, home).await;
}

#[tokio::test]
#[ignore = "needs all-MiniLM-L6-v2: MEMGATE_TEST_MINILM_DIR=$(testkit/minilm)"]
async fn local_a_related_fact_is_found_by_meaning_however_many_turns_are_nearer() {
    let dir = tempfile::tempdir().unwrap();
    let config = LocalConfig {
        distill: Some(LIMITS),
        ..LocalConfig::default()
    };
    let store = memgate_store::MemoryStore::open(dir.path().join("memgate.sqlite3"), config)
        .unwrap()
        .with_embedder(minilm());
    let backend = Arc::new(LocalBackend::from_store(store));
    let indexed = Arc::clone(&backend);
    a_related_fact_is_found_by_meaning_however_many_turns_are_nearer(backend, async move || {
        indexed.store().index_all_vectors(64).unwrap();
    })
    .await;
}

#[tokio::test]
#[ignore = "needs all-MiniLM-L6-v2 and PostgreSQL with pgvector: MEMGATE_TEST_MINILM_DIR, MEMGATE_TEST_PGVECTOR_DSN"]
async fn postgres_a_related_fact_is_found_by_meaning_however_many_turns_are_nearer() {
    let [dsn] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_PGVECTOR_DSN"]);
    let config = PostgresConfig::for_dsn(&dsn)
        .unwrap()
        .with_schema(&memgate_testsupport::real::unique_schema("distill_dense"))
        .unwrap();
    let backend = Arc::new(
        PostgresBackend::new(config)
            .unwrap()
            .with_distill(LIMITS)
            .with_embedder(minilm()),
    );
    let indexed = Arc::clone(&backend);
    a_related_fact_is_found_by_meaning_however_many_turns_are_nearer(backend, async move || {
        indexed.index_all_vectors(64).await.unwrap();
    })
    .await;
}
