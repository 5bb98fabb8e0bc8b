//! Recall benchmark: latency added by memgate over the bare HTTP round trip
//! against a real PowerContext 1.4.x server and against an instant-answer
//! in-process FAKE (memgate's own cost without server jitter), and deadline
//! overshoot against an in-process slow-drip FAKE server.
//!
//! ```text
//! testkit/up --only pc14 && source testkit/.run/env
//! cargo run --release -p memgate-lab --example recall_bench -- [--calls 300] [--json]
//! ```
//!
//! Reads MEMGATE_TEST_PC14_URL / _TOKEN and creates a scratch Scope holding
//! six matching memories. Without them only the fakes are measured.

#[path = "../../memgate-powercontext/tests/common/fake.rs"]
mod fake;

use memgate_core::{Caller, MemoryBackend, RememberRequest};
use memgate_lab::powercontext_bench::{run_bench, BenchConfig};
use memgate_powercontext::settings::*;
use memgate_powercontext::{PowerContextBackend, Settings};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const OWNER: &str = "bench-owner";
const QUERY: &str = "order service money amounts conventions";
const SEED: [&str; 6] = [
    "The order service stores money amounts as integer cents.",
    "The order service uses pytest for backend tests.",
    "Refunds in the order service are computed in integer cents and never in floats.",
    "The order service money amounts are validated at the API boundary.",
    "Order service conventions: currency codes follow ISO 4217.",
    "The order service rounds money amounts half-even only at display time.",
];

fn settings(url: &str, token: &str, scope: &str, recall_timeout: &str) -> Arc<Settings> {
    let vars: HashMap<&str, String> = HashMap::from([
        (ENV_BASE_URL, url.to_owned()),
        (ENV_TOKEN, token.to_owned()),
        (ENV_SCOPE_ID, scope.to_owned()),
        (ENV_OWNER_USER_ID, OWNER.to_owned()),
        (ENV_RECALL_TIMEOUT_SECONDS, recall_timeout.to_owned()),
    ]);
    Arc::new(Settings::from_env(|n| vars.get(n).cloned()).expect("valid bench settings"))
}

/// A Scope of the benchmark's own (the testkit's shared Scope is left alone).
/// 1.4.1 answers 409 `binding-version` when a creation races another
/// binding change; creation is idempotent per key, so it is repeated.
async fn scratch_scope(url: &str, token: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let request = serde_json::json!({"title": "memgate recall bench", "summary": "benchmark scope",
                                     "idempotency_key": format!("memgate-bench-{nanos}")});
    for _ in 0..40 {
        let response = reqwest::Client::new()
            .post(format!("{url}/v1/scopes"))
            .bearer_auth(token)
            .json(&request)
            .send()
            .await
            .expect("scope creation");
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.expect("scope JSON");
        match status {
            201 => return body["scope_id"].as_str().expect("scope_id").to_owned(),
            409 => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => panic!("scope creation: HTTP {status} {body}"),
        }
    }
    panic!("scope creation kept conflicting")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let calls = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let json = args.iter().any(|a| a == "--json");

    let real = match (
        std::env::var("MEMGATE_TEST_PC14_URL"),
        std::env::var("MEMGATE_TEST_PC14_TOKEN"),
    ) {
        (Ok(url), Ok(token)) => {
            let scope = scratch_scope(&url, &token).await;
            let s = settings(&url, &token, &scope, "2.0");
            let seeder = PowerContextBackend::from_settings(s.clone()).expect("backend");
            for text in SEED {
                let request = RememberRequest::new("fact", text).unwrap();
                let outcome = seeder
                    .remember(&Caller::new(OWNER), &request)
                    .await
                    .unwrap();
                assert!(outcome.is_saved(), "seeding failed: {outcome:?}");
            }
            Some(s)
        }
        _ => {
            eprintln!("MEMGATE_TEST_PC14_URL/_TOKEN unset: measuring the overshoot only");
            None
        }
    };

    // The slow-drip FAKE: 1.4.x probes answer at once; prepare sends headers,
    // then one byte every 100 ms of a body that would take minutes.
    let slow = fake::Fake::start(|seen| match seen.path.as_str() {
        "/v1/server-info" => fake::server_info_current(),
        p if p.starts_with("/v1/scopes/") => {
            fake::FakeReply::Json(200, serde_json::json!({"scope_id": "scp_bench"}))
        }
        _ => fake::FakeReply::SlowDrip {
            chunk: b" ".to_vec(),
            every: Duration::from_millis(100),
        },
    })
    .await;
    let slow_settings = settings(&slow.base_url, "bench-fake-token", "scp_bench", "2.0");

    // An instant-answer FAKE with content of the same size as the real one.
    let content = format!(
        "PowerContext prepared untrusted historical context.\n{}",
        "x".repeat(1750)
    );
    let instant = fake::Fake::start(move |seen| match seen.path.as_str() {
        "/v1/server-info" => fake::server_info_current(),
        p if p.starts_with("/v1/scopes/") => {
            fake::FakeReply::Json(200, serde_json::json!({"scope_id": "scp_bench"}))
        }
        _ => fake::prepared_ready(&content),
    })
    .await;
    let instant_settings = settings(&instant.base_url, "bench-fake-token", "scp_bench", "2.0");

    let report = run_bench(&BenchConfig {
        real,
        instant: Some(instant_settings),
        calls,
        warmup: 20,
        query: QUERY.to_owned(),
        slow_drip: Some(slow_settings),
        slow_drip_calls: 10,
    })
    .await
    .expect("benchmark run");
    if json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    } else {
        print!("{report}");
    }
}
