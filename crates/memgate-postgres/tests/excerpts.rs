//! Each turn's first-turn excerpt kept with it on a real PostgreSQL
//! (`memgate_postgres::excerpts`): computed at capture as `local` computes
//! it, computed again in the background for turns stored before (or under
//! older rules, or without one by an older process), and the block the
//! same whichever way its excerpts came.
//! Ignored without `testkit/postgres-up`.

mod common;

use memgate_core::{
    BackendContext, Caller, CaptureKind, CaptureRequest, MemoryBackend, Message, Recall,
    RecallRequest,
};
use memgate_postgres::excerpts::EXCERPT_RULES;
use memgate_postgres::PostgresBackend;
use memgate_recall::salience::{excerpt, SpeakerNames};
use serde_json::json;
use std::time::{Duration, Instant};

fn dana(thread: &str) -> Caller {
    Caller::new("dana").with_thread(thread)
}

async fn capture(b: &PostgresBackend, thread: &str, messages: Vec<Message>) {
    b.capture(&CaptureRequest {
        caller: dana(thread),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    })
    .await
    .unwrap();
}

async fn block(b: &PostgresBackend) -> Recall {
    b.recall(&RecallRequest {
        caller: dana("new"),
        query: None,
    })
    .await
    .unwrap()
}

/// Twelve short conversations as a host without speaker names sends them:
/// an introduction, preferences, questions with their answers, chatter.
fn conversations() -> Vec<(String, Vec<Message>)> {
    let mut out = vec![(
        "intro".to_owned(),
        vec![
            Message::human("Hi, I'm Dana."),
            Message::ai("Nice to meet you, Dana!"),
            Message::human("Keep answers short, bullet points preferred."),
            Message::ai("Understood."),
        ],
    )];
    let topics = [
        ("Berlin", "It is sunny (22C) in Berlin today."),
        ("Lisbon", "Lisbon has 300 days of sun a year."),
        ("Porto", "Porto is known for its port wine cellars."),
        ("Madrid", "Madrid sits on a plateau at 650 metres."),
    ];
    for k in 0..11 {
        let (city, answer) = topics[k % topics.len()];
        out.push((
            format!("t{k}"),
            vec![
                Message::human(format!(
                    "What should I know about {city} before my trip in March {}?",
                    2027 + k
                )),
                Message::ai(answer),
                Message::human(format!(
                    "I moved my flight to {city} to Friday the {}th.",
                    k + 3
                )),
                Message::ai("Noted."),
            ],
        ));
    }
    out
}

/// Every turn's excerpt columns, by id.
async fn excerpt_rows(
    c: &tokio_postgres::Client,
    schema: &str,
) -> Vec<(i64, Option<String>, Option<f64>, Option<String>, bool, i16)> {
    c.query(
        &format!(
            "SELECT id, excerpt, excerpt_score, excerpt_terms, excerpt_about, excerpt_rules
             FROM {schema}.turns ORDER BY id"
        ),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

async fn marker(c: &tokio_postgres::Client, schema: &str) -> Option<String> {
    c.query_opt(
        &format!("SELECT value FROM {schema}.memgate_meta WHERE key = 'excerpt_rules'"),
        &[],
    )
    .await
    .unwrap()
    .map(|r| r.get(0))
}

#[tokio::test]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn a_captured_turn_keeps_the_excerpt_local_computes_with_the_speakers_met_so_far() {
    let dsn = common::dsn();
    let schema = common::unique_schema("excerpt_capture");
    let b = common::backend(&dsn, &schema);
    let said = |name: &str, text: &str| Message::human(text).with_name(name);
    capture(
        &b,
        "s1",
        vec![
            said(
                "Caroline",
                "Hey Melanie! I went to the LGBTQ support group yesterday and it was so powerful.",
            ),
            said(
                "Melanie",
                "Caroline, that's great! I'm painting a lake sunrise for the Riverside show in May.",
            ),
            said("Caroline", "ok"),
            said(
                "Caroline",
                "My name is Caroline and I always prefer mornings for painting with Melanie.",
            ),
        ],
    )
    .await;
    let c = common::connect(&dsn).await;
    let rows = c
        .query(
            &format!(
                "SELECT speaker, text, excerpt, excerpt_score, excerpt_terms, excerpt_about,
                        excerpt_rules
                 FROM {schema}.turns ORDER BY seq"
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
    let mut names = SpeakerNames::default();
    let mut kept = 0;
    for r in &rows {
        names.add(r.get::<_, Option<&str>>(0));
        let expected = excerpt(r.get(1), names.as_slice());
        let stored: Option<String> = r.get(2);
        assert_eq!(stored, expected.as_ref().map(|e| e.text.clone()));
        assert_eq!(
            r.get::<_, Option<f64>>(3),
            expected.as_ref().map(|e| e.score)
        );
        assert_eq!(
            r.get::<_, Option<String>>(4),
            expected.as_ref().map(|e| e.terms.join(" "))
        );
        assert_eq!(
            r.get::<_, bool>(5),
            expected.as_ref().is_some_and(|e| e.about_speaker)
        );
        assert_eq!(r.get::<_, i16>(6), EXCERPT_RULES);
        kept += usize::from(expected.is_some());
    }
    // Not vacuous: some turns have an excerpt, "ok" has none.
    assert!(kept >= 2, "{kept} excerpts");
    assert!(rows[2].get::<_, Option<String>>(2).is_none());
    // A new schema has nothing to compute: its blocks read the kept excerpts.
    assert_eq!(marker(&c, &schema).await, Some(EXCERPT_RULES.to_string()));
}

#[tokio::test]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn turns_stored_without_current_excerpts_are_computed_in_the_background_and_the_block_is_the_same(
) {
    let dsn = common::dsn();
    let schema = common::unique_schema("excerpt_backfill");
    let first = common::backend(&dsn, &schema);
    for (thread, messages) in conversations() {
        capture(&first, &thread, messages).await;
    }
    let kept_block = block(&first).await;
    assert!(kept_block.text.contains("I'm Dana"), "{}", kept_block.text);
    let c = common::connect(&dsn).await;
    let computed_at_capture = excerpt_rows(&c, &schema).await;
    assert!(computed_at_capture.iter().filter(|r| r.1.is_some()).count() >= 20);

    // As an older memgate left them: no excerpt, or one under older rules,
    // and no marker.
    c.batch_execute(&format!(
        "UPDATE {schema}.turns SET excerpt = NULL, excerpt_score = NULL, excerpt_terms = NULL,
                excerpt_about = false, excerpt_rules = 0;
         UPDATE {schema}.turns SET excerpt = 'stale', excerpt_score = 9, excerpt_about = true
             WHERE id = (SELECT max(id) FROM {schema}.turns);
         DELETE FROM {schema}.memgate_meta WHERE key = 'excerpt_rules';"
    ))
    .await
    .unwrap();

    // A process started now builds the block from the turns' text, and the
    // same block (a backend of `new` computes nothing in the background).
    let upgraded = common::backend(&dsn, &schema);
    assert_eq!(block(&upgraded).await, kept_block);
    assert_eq!(marker(&c, &schema).await, None);
    let excerpts_line = |lines: Vec<memgate_core::Diagnostic>| {
        lines
            .into_iter()
            .find(|d| d.check == "first-turn excerpts")
            .expect("doctor says where the excerpts stand")
    };
    let line = excerpts_line(upgraded.diagnose().await);
    assert!(line.detail.contains("being excerpted"), "{line:?}");
    assert!(excerpt_rows(&c, &schema).await.iter().all(|r| r.5 == 0));

    // What every surface builds computes them in the background.
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"dsn": dsn, "schema": schema});
    let serving = PostgresBackend::from_backend_config(
        config.as_object().unwrap(),
        &BackendContext::new(dir.path()),
    )
    .unwrap();
    serving.warm().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while marker(&c, &schema).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the excerpts were not computed in the background"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(excerpt_rows(&c, &schema).await, computed_at_capture);
    assert_eq!(block(&serving).await, kept_block);
    let line = excerpts_line(serving.diagnose().await);
    assert!(line.healthy && line.detail.contains("current"), "{line:?}");
    // The process started before sees the marker and reads the kept
    // excerpts: still the same block.
    assert_eq!(block(&upgraded).await, kept_block);
    // Nothing is left, so computing again changes nothing.
    assert_eq!(upgraded.compute_stale_excerpts().await.unwrap(), 0);

    // A turn stored without an excerpt after that (by a process of an older
    // version still running in a rolling upgrade) is computed by the next
    // sweep, the marker notwithstanding.
    c.batch_execute(&format!(
        "UPDATE {schema}.turns SET excerpt = NULL, excerpt_score = NULL, excerpt_terms = NULL,
                excerpt_about = false, excerpt_rules = 0
             WHERE id = (SELECT max(id) FROM {schema}.turns WHERE excerpt IS NOT NULL)"
    ))
    .await
    .unwrap();
    assert_eq!(upgraded.compute_stale_excerpts().await.unwrap(), 1);
    assert_eq!(excerpt_rows(&c, &schema).await, computed_at_capture);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: testkit/postgres-up, then MEMGATE_TEST_POSTGRES_DSN"]
async fn what_the_user_said_of_themselves_stays_a_candidate_past_the_newest_excerpts() {
    let dsn = common::dsn();
    let schema = common::unique_schema("excerpt_older");
    let b = common::backend(&dsn, &schema);
    capture(
        &b,
        "intro",
        vec![Message::human(
            "Hi, I'm Dana and I live in Porto with my two cats.",
        )],
    )
    .await;
    // More than the newest excerpts a block reads, each without anything
    // of the user's own.
    let c = common::connect(&dsn).await;
    let task_turns = memgate_recall::first_turn::MAX_CANDIDATES + 20;
    let messages: Vec<Message> = (0..task_turns)
        .map(|k| {
            Message::human(format!(
                "Summarise the quarterly report of Acme Corporation number {k} for Berlin."
            ))
        })
        .collect();
    for (i, chunk) in messages.chunks(40).enumerate() {
        capture(&b, &format!("task{i}"), chunk.to_vec()).await;
    }
    let with_excerpt: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM {schema}.turns WHERE excerpt IS NOT NULL"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(with_excerpt as usize > memgate_recall::first_turn::MAX_CANDIDATES);
    let recall = block(&b).await;
    assert!(recall.text.contains("I'm Dana"), "{}", recall.text);
}
