//! The distillation queue in the file: bounded, in turn order per thread,
//! durable with the capture that fills it, and the schema step that
//! brought it (existing memories stay explicit, confidence 1).

mod common;

use common::{alice, capture, TestStore};
use memgate_core::distill::QueueLimits;
use memgate_core::{FactOrigin, Message, RememberRequest};
use memgate_store::schema::migrate;
use memgate_store::{LocalConfig, MemoryStore};
use rusqlite::Connection;

fn queued(max_turns_per_job: usize, max_queued_jobs: usize) -> TestStore {
    TestStore::with_config(LocalConfig {
        distill: Some(QueueLimits {
            max_turns_per_job,
            max_queued_jobs,
            lease: std::time::Duration::from_secs(300),
        }),
        ..LocalConfig::default()
    })
}

fn say(t: &TestStore, thread: &str, said: &[&str]) {
    let messages = said.iter().map(|s| Message::human(*s)).collect();
    t.store
        .capture(&capture(&alice(), thread, messages))
        .unwrap();
}

fn turn_ids(job: &memgate_core::distill::DistillJob) -> Vec<&str> {
    job.turns.iter().map(|t| t.id.as_str()).collect()
}

#[test]
fn without_distillation_a_capture_queues_nothing() {
    let t = TestStore::new();
    say(&t, "t1", &["I like tea."]);
    assert!(t.store.next_distill_jobs(10, &[]).unwrap().is_empty());
    assert_eq!(t.store.distill_figures("x").unwrap().queued, 0);
}

#[test]
fn new_turns_join_their_threads_queued_job_up_to_its_limit_and_threads_run_in_order() {
    let t = queued(3, 100);
    say(&t, "t1", &["a"]);
    say(&t, "t1", &["a", "b"]);
    say(&t, "t1", &["a", "b", "c", "d"]);
    say(&t, "t2", &["x"]);
    // t1: turns 1-2 joined one job; 3-4 would overfill it, so they start the next.
    assert_eq!(t.store.distill_figures("x").unwrap().queued, 3);
    let jobs = t.store.next_distill_jobs(10, &[]).unwrap();
    assert_eq!(jobs.len(), 2, "one job per thread at a time");
    assert_eq!(jobs[0].thread(), "t1");
    assert_eq!(turn_ids(&jobs[0]), ["turn_1", "turn_2"]);
    assert_eq!(turn_ids(&jobs[1]), ["turn_5"]);
    // While t1's first job runs, its second is not handed out.
    let others = t.store.next_distill_jobs(10, &[jobs[0].id]).unwrap();
    assert_eq!(
        others.iter().map(|j| j.thread()).collect::<Vec<_>>(),
        ["t2"]
    );
    t.store.apply_distilled(&jobs[0], &[]).unwrap();
    let next = t.store.next_distill_jobs(10, &[]).unwrap();
    assert_eq!(turn_ids(&next[0]), ["turn_3", "turn_4"]);
}

#[test]
fn turns_captured_while_a_job_runs_stay_queued_after_it() {
    let t = queued(10, 100);
    say(&t, "t1", &["a"]);
    let job = t.store.next_distill_jobs(1, &[]).unwrap().remove(0);
    say(&t, "t1", &["a", "b"]);
    let applied = t.store.apply_distilled(&job, &[]).unwrap();
    assert!(!applied.replayed);
    let left = t.store.next_distill_jobs(1, &[]).unwrap();
    assert_eq!(turn_ids(&left[0]), ["turn_2"]);
    // Applying the old read again is a replay: nothing moves.
    assert!(t.store.apply_distilled(&job, &[]).unwrap().replayed);
    let still = t.store.next_distill_jobs(1, &[]).unwrap();
    assert_eq!(turn_ids(&still[0]), ["turn_2"]);
}

#[test]
fn a_full_queue_takes_no_more_and_counts_it_and_the_backfill_catches_up() {
    let t = queued(1, 1);
    say(&t, "t1", &["a"]);
    say(&t, "t2", &["x"]);
    assert_eq!(t.store.distill_figures("x").unwrap().queued, 1);
    assert_eq!(t.store.distill_skipped(), 1);
    // The capture itself was stored as ever.
    assert_eq!(t.store.export(&alice()).unwrap().turns.len(), 2);
    assert_eq!(t.store.queue_backfill().unwrap(), 1);
    assert_eq!(t.store.distill_figures("x").unwrap().queued, 2);
    // Run again, the backfill finds nothing new.
    assert_eq!(t.store.queue_backfill().unwrap(), 0);
}

#[test]
fn the_queue_survives_a_restart() {
    let t = queued(10, 100);
    say(&t, "t1", &["I prefer tea."]);
    let t = t.reopen();
    let jobs = t.store.next_distill_jobs(10, &[]).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].caller.user.as_str(), "alice");
    assert_eq!(jobs[0].turns[0].text, "I prefer tea.");
}

#[test]
fn a_file_from_before_provenance_keeps_its_memories_as_explicit_facts_of_confidence_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.sqlite3");
    {
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 6).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', '');
             INSERT INTO memories (scope_id, kind, text, state, version, created_at, updated_at)
             VALUES (1, 'preference', 'prefers vim keybindings', 'active', 1, 'x', 'x');
             INSERT INTO memory_history (memory_id, version, kind, text, state, recorded_at)
             VALUES (1, 1, 'preference', 'prefers vim keybindings', 'active', 'x');",
        )
        .unwrap();
    }
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    let facts = store.list_facts(&alice(), true).unwrap();
    assert_eq!(facts.len(), 1);
    let fact = &facts[0];
    assert_eq!(fact.origin, FactOrigin::Explicit);
    assert_eq!(fact.confidence, 1.0);
    assert!(fact.sources.is_empty() && fact.superseded_by.is_none());
    assert_eq!(fact.changed_by, memgate_core::ChangedBy::User);
    // And the file takes new facts with a confidence.
    let req = RememberRequest::new("fact", "uses helix")
        .unwrap()
        .with_confidence(Some(0.25))
        .unwrap();
    store.remember(&alice(), &req).unwrap();
    assert_eq!(
        store.list_facts(&alice(), false).unwrap()[1].confidence,
        0.25
    );
}

#[test]
fn the_retention_sweep_takes_the_distilled_facts_resting_only_on_expired_turns() {
    let t = TestStore::with_config(LocalConfig {
        distill: Some(QueueLimits {
            max_turns_per_job: 10,
            max_queued_jobs: 10,
            lease: std::time::Duration::from_secs(300),
        }),
        max_turn_age: Some(std::time::Duration::from_secs(86_400)),
        ..LocalConfig::default()
    });
    say(&t, "t1", &["I keep bees."]);
    let job = t.store.next_distill_jobs(1, &[]).unwrap().remove(0);
    let add = memgate_core::distill::Operation::Add(memgate_core::distill::ProposedFact {
        kind: "fact".into(),
        text: "Alice keeps bees".into(),
        confidence: 0.8,
        sources: vec!["turn_1".into()],
    });
    assert_eq!(t.store.apply_distilled(&job, &[add]).unwrap().added, 1);
    let explicit = RememberRequest::new("fact", "Alice likes honey").unwrap();
    t.store.remember(&alice(), &explicit).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3 * 86_400);
    assert_eq!(t.store.sweep_expired_turns(later).unwrap(), 1);
    let left: Vec<String> = t
        .store
        .list_facts(&alice(), true)
        .unwrap()
        .into_iter()
        .map(|f| f.text)
        .collect();
    assert_eq!(left, ["Alice likes honey"]);
}
