//! Opt-in Source capture against the in-process FAKE PowerContext
//! (tests/common/fake.rs) for what a real server does not do on demand: an
//! outage (scripted 503s), a restart with a queue on disk, a recorded
//! 409. The real servers' idempotence and conflicts are pinned in
//! real_servers.rs.

mod common;

use common::fake::*;
use common::*;
use memgate_core::{BackendContext, Caller, CaptureKind, CaptureRequest, MemoryBackend, Message};
use memgate_powercontext::sources::{Namespace, SourceCapture};
use memgate_powercontext::PowerContextBackend;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "fake-secret-token-Sx41";
const SCOPE: &str = "scp_0vbbw94ec67mzhrkkhgmeb5z6g";
const SOURCES: &str = "/v1/sources/content";

/// A fake whose Source route is down while `down` is set, and records the
/// ids it accepted (202, position = order of first acceptance).
struct Server {
    fake: Fake,
    down: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<String>>>,
}

async fn server(conflict: bool) -> Server {
    let down = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(Mutex::new(Vec::<String>::new()));
    let (d, a) = (down.clone(), accepted.clone());
    let fake = Fake::start(move |seen| {
        if seen.path != SOURCES {
            return FakeReply::Json(404, error_body("not_found"));
        }
        if d.load(Ordering::SeqCst) {
            return FakeReply::Json(503, error_body("unavailable"));
        }
        if conflict {
            return FakeReply::Json(409, error_body("source_conflict"));
        }
        let id = seen.body["source_id"].as_str().unwrap().to_owned();
        let mut ids = a.lock().unwrap();
        let position = match ids.iter().position(|x| *x == id) {
            Some(p) => p + 1,
            None => {
                ids.push(id.clone());
                ids.len()
            }
        };
        FakeReply::Json(
            202,
            json!({"status": "accepted", "source": {"name": "content", "source_id": id},
                   "position": position}),
        )
    })
    .await;
    Server {
        fake,
        down,
        accepted,
    }
}

fn build(url: &str, storage: &Path, source_capture: Option<Value>) -> PowerContextBackend {
    let mut config = Map::new();
    if let Some(sc) = source_capture {
        config.insert("source_capture".into(), sc);
    }
    try_build(url, storage, &config).expect("backend builds")
}

fn try_build(
    url: &str,
    storage: &Path,
    config: &Map<String, Value>,
) -> memgate_core::Result<PowerContextBackend> {
    let ctx = BackendContext::new(storage).with_env(env_source(&binding(url, TOKEN, SCOPE, &[])));
    PowerContextBackend::from_backend_config(config, &ctx)
}

fn on() -> Option<Value> {
    Some(json!({"enabled": true, "installation_id": "test-install"}))
}

fn turn(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Message::human(format!("question {i}")).with_id(format!("h{i}"))
            } else {
                Message::ai(format!("answer {i}")).with_id(format!("a{i}"))
            }
        })
        .collect()
}

fn request(messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: Caller::new(OWNER).with_thread("thread-1"),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

fn ids(messages: &[Message]) -> Vec<String> {
    let ns = Namespace::new("test-install", OWNER, "thread-1");
    messages
        .iter()
        .map(|m| ns.source_id(m.id.as_deref().unwrap()))
        .collect()
}

fn depth(b: &PowerContextBackend) -> u64 {
    b.source_outbox().unwrap().figures().unwrap().depth
}

async fn wait_empty(b: &PowerContextBackend, within: Duration) {
    let start = Instant::now();
    while depth(b) > 0 {
        assert!(start.elapsed() < within, "the source outbox did not drain");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_outage_is_queued_acknowledged_and_delivered_once_in_order() {
    let s = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = build(&s.fake.base_url, dir.path(), on());
    s.down.store(true, Ordering::SeqCst);
    let report = backend.capture(&request(turn(2))).await.unwrap();
    assert_eq!((report.stored, report.already_known), (2, 0));
    assert_eq!(depth(&backend), 2, "acknowledged because queued");
    // The transcript grows during the outage: only the new message queues.
    let report = backend.capture(&request(turn(3))).await.unwrap();
    assert_eq!((report.stored, report.already_known), (1, 2));
    // At least one delivery attempt met the outage before it ends.
    let start = Instant::now();
    while backend.source_outbox().unwrap().figures().unwrap().retries == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no attempt was made"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.down.store(false, Ordering::SeqCst);
    wait_empty(&backend, Duration::from_secs(15)).await;
    assert_eq!(*s.accepted.lock().unwrap(), ids(&turn(3)), "in order");
    let sent_ok = s.fake.count(SOURCES);
    // Nothing is sent again: not the whole conversation, not one message.
    let report = backend.capture(&request(turn(3))).await.unwrap();
    assert_eq!((report.stored, report.already_known), (0, 3));
    assert_eq!(s.fake.count(SOURCES), sent_ok);
    let f = backend.source_outbox().unwrap().figures().unwrap();
    assert_eq!((f.depth, f.deliveries, f.conflicts), (0, 3, 0));
    // Every accepted body is one message, exactly as planned.
    let bodies = s.fake.bodies(SOURCES);
    assert!(bodies.iter().all(|b| b["scope_id"] == SCOPE
        && b["metadata"]["origin"] == "memgate"
        && b["content"].as_str().unwrap().starts_with('[')));
    backend.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_queue_on_disk_survives_a_restart_and_is_delivered_once_under_the_same_ids() {
    let s = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    s.down.store(true, Ordering::SeqCst);
    // No installation_id configured: the generated one is kept on disk.
    let cfg = Some(json!({"enabled": true}));
    let first = build(&s.fake.base_url, dir.path(), cfg.clone());
    first.capture(&request(turn(2))).await.unwrap();
    let installation = first.source_outbox().unwrap().installation().to_owned();
    assert!(first.shutdown(Duration::from_secs(2)).await);
    drop(first);

    s.down.store(false, Ordering::SeqCst);
    let again = build(&s.fake.base_url, dir.path(), cfg);
    assert_eq!(again.source_outbox().unwrap().installation(), installation);
    assert_eq!(depth(&again), 2, "the queue survived");
    // The same transcript after the restart: nothing new is queued, the
    // queued writes are delivered.
    let report = again.capture(&request(turn(2))).await.unwrap();
    assert_eq!((report.stored, report.already_known), (0, 2));
    wait_empty(&again, Duration::from_secs(15)).await;
    let ns = Namespace::new(&installation, OWNER, "thread-1");
    let expected: Vec<String> = ["h0", "a1"].iter().map(|id| ns.source_id(id)).collect();
    assert_eq!(*s.accepted.lock().unwrap(), expected);
    again.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_conflict_is_recorded_counted_and_never_resent() {
    let s = server(true).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = build(&s.fake.base_url, dir.path(), on());
    backend.capture(&request(turn(1))).await.unwrap();
    wait_empty(&backend, Duration::from_secs(10)).await;
    assert_eq!(s.fake.count(SOURCES), 1);
    backend.capture(&request(turn(1))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(s.fake.count(SOURCES), 1, "not resent");
    let f = backend.source_outbox().unwrap().figures().unwrap();
    assert_eq!((f.conflicts, f.deliveries), (1, 0));
    let metrics: String = backend
        .figures()
        .iter()
        .map(memgate_core::Figure::prometheus)
        .collect();
    assert!(
        metrics.contains("memgate_source_outbox_conflicts_total 1\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("memor"),
        "Sources are not Memory: {metrics}"
    );
    backend.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_message_changed_after_it_was_sent_is_a_local_conflict_without_a_request() {
    let s = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = build(&s.fake.base_url, dir.path(), on());
    backend.capture(&request(turn(1))).await.unwrap();
    wait_empty(&backend, Duration::from_secs(10)).await;
    assert_eq!(s.fake.count(SOURCES), 1);
    let edited = vec![Message::human("question 0, edited").with_id("h0")];
    let report = backend.capture(&request(edited)).await.unwrap();
    assert_eq!((report.stored, report.filtered), (0, 1));
    assert_eq!(s.fake.count(SOURCES), 1, "changed evidence is not sent");
    let f = backend.source_outbox().unwrap().figures().unwrap();
    assert_eq!(f.conflicts, 1);
    backend.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn off_by_default_nothing_is_sent_and_no_queue_is_created() {
    let s = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = build(&s.fake.base_url, dir.path(), None);
    assert!(backend.source_outbox().is_none());
    let report = backend.capture(&request(turn(4))).await.unwrap();
    assert_eq!((report.stored, report.filtered), (0, 4));
    assert_eq!(s.fake.total(), 0);
    assert!(backend.figures().is_empty());
    assert!(!SourceCapture::outbox_path(dir.path()).exists());
    let doctor = backend.diagnose().await;
    assert!(
        doctor[0].detail.contains("source capture off"),
        "{doctor:?}"
    );
    // Explicitly off is the same.
    let off = build(
        &s.fake.base_url,
        dir.path(),
        Some(json!({"enabled": false})),
    );
    off.capture(&request(turn(4))).await.unwrap();
    assert_eq!(s.fake.total(), 0);
}

#[tokio::test]
async fn filtered_messages_never_reach_the_recording_fake() {
    let s = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = build(&s.fake.base_url, dir.path(), on());
    let messages = vec![
        Message::system("SYSTEM-TEXT").with_id("s1"),
        Message::human("RECALLED-MEMORY")
            .with_id("x__memory")
            .with_flag("hide_from_ui", true),
        Message::tool("TOOL-RESULT", "call-1").with_id("t1"),
        Message::human("NO-HOST-ID"),
        Message::human("the visible question").with_id("h1"),
    ];
    let report = backend.capture(&request(messages)).await.unwrap();
    assert_eq!((report.stored, report.filtered), (1, 4));
    wait_empty(&backend, Duration::from_secs(10)).await;
    let sent = serde_json::to_string(&s.fake.bodies(SOURCES)).unwrap();
    for hidden in [
        "SYSTEM-TEXT",
        "RECALLED-MEMORY",
        "TOOL-RESULT",
        "NO-HOST-ID",
    ] {
        assert!(!sent.contains(hidden), "{hidden} was sent: {sent}");
    }
    assert!(sent.contains("the visible question"));
    let doctor = backend.diagnose().await;
    assert!(doctor[0].detail.contains("source capture on"), "{doctor:?}");
    assert!(doctor[0].detail.contains("(not Memory)"), "{doctor:?}");
    backend.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn bad_source_capture_settings_and_other_keys_fail_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let url = "http://127.0.0.1:9";
    let mut bad = Map::new();
    bad.insert(
        "source_capture".into(),
        json!({"enabled": true, "max_entries": 0}),
    );
    let err = try_build(url, dir.path(), &bad).unwrap_err();
    assert!(
        err.to_string()
            .contains("source_capture.max_entries must be between"),
        "{err}"
    );
    let mut other = Map::new();
    other.insert("source_capture".into(), json!({"enabled": false}));
    other.insert("base_url".into(), json!("http://elsewhere"));
    let err = try_build(url, dir.path(), &other).unwrap_err();
    assert!(err.to_string().contains("backend_config.base_url"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_captures_of_a_thread_queue_each_source_once() {
    let s = server(false).await;
    s.down.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(build(&s.fake.base_url, dir.path(), on()));
    let captures: Vec<_> = (0..4)
        .map(|_| {
            let b = backend.clone();
            tokio::spawn(async move { b.capture(&request(turn(6))).await.unwrap() })
        })
        .collect();
    let mut queued = 0;
    for c in captures {
        queued += c.await.unwrap().stored;
    }
    assert_eq!(queued, 6, "each message queued by exactly one capture");
    assert_eq!(depth(&backend), 6);
    s.down.store(false, Ordering::SeqCst);
    wait_empty(&backend, Duration::from_secs(15)).await;
    assert_eq!(*s.accepted.lock().unwrap(), ids(&turn(6)));
    assert_eq!(
        backend
            .source_outbox()
            .unwrap()
            .figures()
            .unwrap()
            .deliveries,
        6
    );
    backend.shutdown(Duration::from_secs(2)).await;
}
