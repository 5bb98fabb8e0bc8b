//! The host crate over memgate's one assembly: `MemoryHost` takes the
//! assembled backend, so a Rust agent loop gets the same gates, total
//! deadline and bounded drain as every other surface. The OpenViking server
//! is a named fake that never answers ([`BlackHole`]).

use memgate_assembly::{AssembledBackend, Deadlines, Gates};
use memgate_core::{BackendContext, Caller, Message};
use memgate_host::{HostSettings, MemoryHost};
use memgate_openviking::OpenVikingBackend;
use memgate_testsupport::BlackHole;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RECALL_DEADLINE: Duration = Duration::from_secs(1);
/// Slack for a loaded machine, far below the backend's 30-second timeout.
const SLACK: Duration = Duration::from_secs(4);

fn host(hole: &BlackHole, dir: &std::path::Path, gates: Gates) -> MemoryHost {
    let config = json!({"base_url": hole.url(), "owner_user_id": "default", "timeout_seconds": 30});
    let env: memgate_core::setup::EnvSource =
        Arc::new(|name: &str| (name == "OPENVIKING_API_KEY").then(|| "test-user-key".to_owned()));
    let ctx = BackendContext::new(dir).with_env(env);
    let backend =
        OpenVikingBackend::from_backend_config(config.as_object().unwrap(), &ctx).unwrap();
    let deadlines = Deadlines {
        recall_seconds: RECALL_DEADLINE.as_secs_f64(),
        ..Deadlines::default()
    };
    let assembled = AssembledBackend::new(Arc::new(backend), gates, deadlines);
    MemoryHost::new(Arc::new(assembled), HostSettings::default())
}

fn first_turn() -> Vec<Message> {
    vec![Message::human("Where do I live?").with_id("m1")]
}

#[tokio::test]
async fn first_turn_recall_returns_within_the_total_deadline() {
    let hole = BlackHole::start();
    let dir = tempfile::tempdir().unwrap();
    let host = host(&hole, dir.path(), Gates::default());
    let caller = Caller::new("default").with_thread("t1");
    let started = Instant::now();
    let mut transcript = first_turn();
    host.injector().prepare_turn(&caller, &mut transcript).await;
    assert!(
        started.elapsed() < RECALL_DEADLINE + SLACK,
        "{:?}",
        started.elapsed()
    );
    assert!(hole.connections() > 0, "the backend was asked");
}

#[tokio::test]
async fn gates_off_never_reach_the_backend() {
    let hole = BlackHole::start();
    let dir = tempfile::tempdir().unwrap();
    let off = Gates {
        enabled: false,
        injection_enabled: false,
    };
    let host = host(&hole, dir.path(), off);
    let caller = Caller::new("default").with_thread("t1");
    let mut transcript = first_turn();
    host.injector().prepare_turn(&caller, &mut transcript).await;
    host.capture().after_turn(&caller, &transcript).wait().await;
    assert_eq!(hole.connections(), 0);
}

#[tokio::test]
async fn drain_with_a_hung_capture_is_bounded_and_says_so() {
    let hole = BlackHole::start();
    let dir = tempfile::tempdir().unwrap();
    let host = host(&hole, dir.path(), Gates::default());
    let caller = Caller::new("default").with_thread("t1");
    let _running = host.capture().after_turn(&caller, &first_turn());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let report = host.drain(Duration::from_secs(1)).await;
    assert!(started.elapsed() < Duration::from_secs(1) + SLACK);
    assert_eq!(report.abandoned, 1, "{report:?}");
    assert!(!report.drained());
}
