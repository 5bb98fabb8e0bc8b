//! The durable outbox (memgate's addition, opt-in) against the in-process
//! FAKE OpenViking (`tests/common/fake.rs`): "server down" is a closed
//! loopback port or scripted 5xx answers, faults a real server does not
//! produce on demand.

mod common;

use common::fake::{FakeOpenViking, Reply};
use common::*;
use memgate_core::{Caller, MemoryBackend, MemoryError};
use memgate_openviking::cursor::load_cursor;
use memgate_openviking::outbox::Outbox;
use memgate_openviking::scope::session_id;
use memgate_openviking::OpenVikingBackend;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn alice(thread: &str) -> Caller {
    Caller::new("alice")
        .with_agent("research")
        .with_thread(thread)
}

fn sid(thread: &str) -> String {
    session_id("alice", "research", thread)
}

/// Outbox on, writes that fail raise: a capture that returns `Ok` was
/// acknowledged by the outbox, not swallowed by `log_and_drop`.
fn with_outbox(max_entries: u64) -> impl FnOnce(&mut Map<String, Value>) {
    move |c| {
        set(
            c,
            "outbox",
            json!({"enabled": true, "max_entries": max_entries}),
        );
        set(c, "failure_policy.write", json!("raise"));
        set(c, "timeout_seconds", json!(1));
    }
}

/// A loopback URL nothing listens on: the server is down.
async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

fn texts(fake: &FakeOpenViking, thread: &str) -> Vec<String> {
    fake.session_messages(&sid(thread))
        .iter()
        .map(common::fake::payload_text)
        .collect()
}

fn depth(backend: &OpenVikingBackend) -> u64 {
    backend.outbox_figures().unwrap().unwrap().depth
}

async fn wait_empty(backend: &OpenVikingBackend, within: Duration) {
    let start = Instant::now();
    while depth(backend) > 0 {
        assert!(start.elapsed() < within, "the outbox did not drain");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn server_down_queues_and_acknowledges_and_a_restart_delivers_in_order_once() {
    let dir = tempfile::tempdir().unwrap();
    let down = backend_with(&dead_url().await, dir.path(), with_outbox(100));
    let caller = alice("t1");
    let first = conversation(2, "m");
    let report = down
        .capture(&capture_request(&caller, first.clone()))
        .await
        .expect("queued captures are acknowledged");
    assert_eq!(report.stored, 2);
    // Grown transcript while still down: queued behind, only the new part.
    let grown = conversation(4, "m");
    let report = down
        .capture(&capture_request(&caller, grown.clone()))
        .await
        .unwrap();
    assert_eq!((report.stored, report.already_known), (2, 2));
    let figures = down.outbox_figures().unwrap().unwrap();
    assert_eq!((figures.depth, figures.deliveries), (2, 0));
    assert!(down.shutdown(Duration::from_secs(2)).await);

    // The process restarts against a live server with the queue on disk.
    let fake = FakeOpenViking::start().await;
    let up = backend_with(&fake.url, dir.path(), with_outbox(100));
    assert_eq!(depth(&up), 2);
    let report = up
        .capture(&capture_request(&caller, grown.clone()))
        .await
        .unwrap();
    assert_eq!((report.stored, report.already_known), (0, 4));
    assert_eq!(
        fake.batches(),
        vec![
            vec!["m question 0".to_owned(), "m answer 1".to_owned()],
            vec!["m question 2".to_owned(), "m answer 3".to_owned()],
        ]
    );
    assert_eq!(fake.commits(&sid("t1")), 2);
    let figures = up.outbox_figures().unwrap().unwrap();
    assert_eq!((figures.depth, figures.deliveries), (0, 2));

    // And the cursor goes on from there: one more message, sent directly.
    up.capture(&capture_request(&caller, conversation(5, "m")))
        .await
        .unwrap();
    assert_eq!(
        texts(&fake, "t1"),
        [
            "m question 0",
            "m answer 1",
            "m question 2",
            "m answer 3",
            "m question 4"
        ]
    );
}

#[tokio::test]
async fn server_back_is_delivered_by_the_background_task_exactly_once() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), with_outbox(100));
    fake.plan("batch", [Reply::Error(503, "UNAVAILABLE")]);
    let report = backend
        .capture(&capture_request(&alice("t1"), conversation(2, "m")))
        .await
        .expect("a 5xx write is queued and acknowledged");
    assert_eq!(report.stored, 2);
    assert_eq!(depth(&backend), 1);
    // The cursor moved past the queued messages and holds no intent.
    let cursor = load_cursor(&backend.config().cursor_path(&sid("t1"))).unwrap();
    assert_eq!(cursor.submitted_prefix_count, Some(2));
    assert!(cursor.in_flight.is_none());
    // No further capture: the background task delivers it.
    wait_empty(&backend, Duration::from_secs(15)).await;
    assert_eq!(texts(&fake, "t1"), ["m question 0", "m answer 1"]);
    assert_eq!(fake.commits(&sid("t1")), 1);
    let figures = backend.outbox_figures().unwrap().unwrap();
    assert_eq!(figures.deliveries, 1);
    assert!(backend.shutdown(Duration::from_secs(3)).await);
}

#[tokio::test]
async fn a_write_whose_answer_was_lost_is_not_sent_again() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), with_outbox(100));
    // The server applies the batch but answers after the 1 s deadline.
    fake.plan("batch", [Reply::Late(Duration::from_millis(1_500))]);
    backend
        .capture(&capture_request(&alice("t1"), conversation(2, "m")))
        .await
        .expect("queued");
    assert_eq!(depth(&backend), 1);
    wait_empty(&backend, Duration::from_secs(15)).await;
    // Delivery read the server's count and found the batch there.
    assert_eq!(texts(&fake, "t1"), ["m question 0", "m answer 1"]);
    assert_eq!(fake.batches().len(), 1);
    assert_eq!(fake.commits(&sid("t1")), 1);
    backend.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_full_outbox_refuses_the_capture_with_a_clear_error_and_keeps_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&dead_url().await, dir.path(), with_outbox(1));
    backend
        .capture(&capture_request(&alice("t1"), conversation(2, "a")))
        .await
        .unwrap();
    let err = backend
        .capture(&capture_request(&alice("t2"), conversation(2, "b")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outbox is full"), "{err}");
    assert!(err.to_string().contains("outbox.max_entries (1)"), "{err}");
    // The refused capture's cursor did not move: a later capture retries it.
    assert!(
        !backend.config().cursor_path(&sid("t2")).exists()
            || load_cursor(&backend.config().cursor_path(&sid("t2")))
                .unwrap()
                .submitted_signatures
                .is_empty()
    );
    let figures = backend.outbox_figures().unwrap().unwrap();
    assert_eq!((figures.depth, figures.dropped), (1, 1));
    backend.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_corrupted_outbox_file_fails_closed_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = Outbox::path_under(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let mut config = base_config("http://127.0.0.1:9", dir.path());
    with_outbox(10)(&mut config);
    let err = OpenVikingBackend::from_backend_config(
        &config,
        &context(dir.path(), &[("OPENVIKING_API_KEY", USER_KEY)]),
    )
    .unwrap_err();
    assert!(matches!(err, MemoryError::Corruption(_)), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 4096]);
}

#[tokio::test]
async fn the_outbox_is_off_by_default_and_its_keys_are_checked() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), |_| {});
    assert!(backend.outbox_figures().is_none());
    fake.plan("batch", [Reply::Error(503, "UNAVAILABLE")]);
    backend
        .capture(&capture_request(&alice("t1"), conversation(2, "m")))
        .await
        .unwrap();
    assert!(!outbox_file(dir.path()).exists(), "no outbox file when off");

    for (key, value, why) in [
        (
            "outbox.max_entries",
            json!(0),
            "outbox.max_entries must be between",
        ),
        (
            "outbox.max_age_seconds",
            json!(1),
            "outbox.max_age_seconds must be between",
        ),
        ("outbox.bogus", json!(1), "outbox.bogus"),
    ] {
        let mut config = base_config(&fake.url, dir.path());
        set(&mut config, key, value);
        let err = OpenVikingBackend::from_backend_config(
            &config,
            &context(dir.path(), &[("OPENVIKING_API_KEY", USER_KEY)]),
        )
        .unwrap_err();
        assert!(err.to_string().contains(why), "{key}: {err}");
    }
}

fn outbox_file(storage: &Path) -> std::path::PathBuf {
    Outbox::path_under(storage)
}

#[tokio::test]
async fn shutdown_stops_the_background_delivery_and_leaves_the_queue_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let down = backend_with(&dead_url().await, dir.path(), with_outbox(100));
    down.capture(&capture_request(&alice("t1"), conversation(2, "m")))
        .await
        .unwrap();
    // Let the background task make attempts against the dead server.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // `true`: stopped within the budget (the backend's own deadline; a
    // wall-clock check here only measured the machine's load).
    assert!(down.shutdown(Duration::from_secs(2)).await);
    assert!(down.resources_closed());
    let figures = down.outbox_figures().unwrap().unwrap();
    assert_eq!((figures.depth, figures.deliveries), (1, 0));
    assert!(figures.retries >= 1, "{figures:?}");
    drop(down);
    let fake = FakeOpenViking::start().await;
    let again = backend_with(&fake.url, dir.path(), with_outbox(100));
    assert_eq!(depth(&again), 1, "the queue survives the shutdown");
}

/// The expected texts of `conversation(n, tag)`, in order.
fn expected(n: usize, tag: &str) -> Vec<String> {
    conversation(n, tag).iter().map(|m| m.text()).collect()
}

#[tokio::test]
async fn a_later_batch_that_fails_queues_from_that_batch_on_and_delivers_it_once() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), with_outbox(100));
    // 250 messages go out as batches of 100, 100 and 50; the second fails.
    fake.plan("batch", [Reply::Normal, Reply::Error(503, "UNAVAILABLE")]);
    let report = backend
        .capture(&capture_request(&alice("t1"), conversation(250, "m")))
        .await
        .expect("the failed part is queued and acknowledged");
    assert_eq!(report.stored, 250);
    assert_eq!(
        depth(&backend),
        1,
        "one entry: the failed batch and the rest"
    );
    wait_empty(&backend, Duration::from_secs(15)).await;
    // The server holds every message exactly once, in order.
    assert_eq!(texts(&fake, "t1"), expected(250, "m"));
    // The first batch was sent once: never part of a retry.
    let batches = fake.batches();
    let first = expected(100, "m");
    let sent_first: usize = batches
        .iter()
        .flatten()
        .filter(|t| first.contains(t))
        .count();
    assert_eq!(sent_first, 100, "{} batch requests", batches.len());
    assert_eq!(
        batches.iter().map(Vec::len).collect::<Vec<_>>(),
        [100, 100, 100, 50],
        "first, the failed second, then the queue: second and third"
    );
    assert_eq!(backend.outbox_figures().unwrap().unwrap().deliveries, 1);
    // Captured again: nothing more is sent.
    backend
        .capture(&capture_request(&alice("t1"), conversation(250, "m")))
        .await
        .unwrap();
    assert_eq!(fake.batches().len(), 4);
    backend.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_crash_between_queueing_and_the_cursor_save_delivers_once_on_the_next_start() {
    let fake = FakeOpenViking::start().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend_with(&fake.url, dir.path(), with_outbox(100));
    let cursor_path = backend.config().cursor_path(&sid("t1"));
    // The batch hangs past the 1 s deadline and is never applied.
    fake.plan("batch", [Reply::Blocked]);
    let capture = {
        let request = capture_request(&alice("t1"), conversation(2, "m"));
        let backend = backend.clone();
        tokio::spawn(async move { backend.capture(&request).await })
    };
    fake.wait_blocked().await;
    // The cursor as it was durably saved before the first byte: the intent.
    let with_intent = std::fs::read(&cursor_path).unwrap();
    assert!(load_cursor(&cursor_path).unwrap().in_flight.is_some());
    capture.await.unwrap().expect("queued and acknowledged");
    assert_eq!(depth(&backend), 1);
    assert!(backend.shutdown(Duration::from_secs(2)).await);
    drop(backend);
    // The process "died" after the entry was queued and before the cursor
    // save reached the disk: the cursor still holds the intent.
    std::fs::write(&cursor_path, &with_intent).unwrap();

    let again = backend_with(&fake.url, dir.path(), with_outbox(100));
    let report = again
        .capture(&capture_request(&alice("t1"), conversation(2, "m")))
        .await
        .unwrap();
    assert_eq!(report.stored, 0, "nothing new: the queue holds the intent");
    wait_empty(&again, Duration::from_secs(15)).await;
    assert_eq!(texts(&fake, "t1"), expected(2, "m"));
    assert_eq!(fake.commits(&sid("t1")), 1);
    again.shutdown(Duration::from_secs(3)).await;
}
