//! The PowerContext recall benchmark runs end to end against the
//! PowerContext crate's in-process FAKE servers (an instant one and a
//! slow-drip one) and never shows the token.

#[path = "../../memgate-powercontext/tests/common/fake.rs"]
mod fake;

use fake::*;
use memgate_lab::powercontext_bench::{run_bench, BenchConfig};
use memgate_powercontext::settings::*;
use memgate_powercontext::Settings;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "fake-secret-token-Zq9xW4";
const SCOPE: &str = "scp_0vbbw94ec67mzhrkkhgmeb5z6g";

/// A 1.4.x fake: probes answered, everything else scripted by `f`.
async fn current(f: impl Fn(&Seen) -> FakeReply + Send + Sync + 'static) -> Fake {
    Fake::start(move |seen| match seen.path.as_str() {
        "/v1/server-info" => server_info_current(),
        p if p.starts_with("/v1/scopes/") => FakeReply::Json(200, json!({"scope_id": SCOPE})),
        _ => f(seen),
    })
    .await
}

/// Settings bound to `fake`, with `overrides`.
fn settings(fake: &Fake, overrides: &[(&str, &str)]) -> Arc<Settings> {
    let mut vars: HashMap<&str, String> = HashMap::from([
        (ENV_BASE_URL, fake.base_url.clone()),
        (ENV_OWNER_USER_ID, "user-7f3a".to_owned()),
        (ENV_SCOPE_ID, SCOPE.to_owned()),
        (ENV_TOKEN, TOKEN.to_owned()),
    ]);
    for (name, value) in overrides {
        vars.insert(name, value.to_string());
    }
    Arc::new(Settings::from_env(|n| vars.get(n).cloned()).expect("valid settings"))
}

#[tokio::test]
async fn bench_reports_figures_without_the_token() {
    let instant =
        current(|_| prepared_ready("PowerContext prepared untrusted historical context.")).await;
    let slow = current(|_| FakeReply::SlowDrip {
        chunk: b" ".to_vec(),
        every: Duration::from_millis(50),
    })
    .await;
    let report = run_bench(&BenchConfig {
        real: None,
        instant: Some(settings(&instant, &[])),
        calls: 5,
        warmup: 1,
        query: "q".into(),
        slow_drip: Some(settings(&slow, &[(ENV_RECALL_TIMEOUT_SECONDS, "0.2")])),
        slow_drip_calls: 3,
    })
    .await
    .unwrap();
    let figures = report.instant_fake.as_ref().unwrap();
    assert_eq!(figures.calls, 5);
    assert!(
        figures.content_bytes > 0,
        "the measured path returned content"
    );
    assert_eq!(
        instant.count("/v1/context/prepare"),
        12,
        "6 rounds x (memgate + bare)"
    );
    let overshoot = report.deadline_overshoot.as_ref().unwrap();
    assert!(overshoot.all_empty);
    assert_eq!(overshoot.calls, 3);
    let shown = format!("{report}");
    assert!(
        shown.contains("instant fake") && shown.contains("deadline overshoot"),
        "{shown}"
    );
    for text in [&shown, &serde_json::to_string(&report).unwrap()] {
        assert!(!text.contains(TOKEN), "the token leaked into: {text}");
    }
}
