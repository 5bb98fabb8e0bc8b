//! Secrets never reach the REAL OpenViking server: a captured transcript
//! with an API key, a connection-string password and a bearer token is
//! committed through memgate, then the stored session is read back from the
//! server (session archive over the content API), and the server's whole
//! workspace and its logs are byte-scanned for the secrets. `#[ignore]`d:
//! `testkit/run-tests` runs it with `--include-ignored`.

mod common;

use common::*;
use memgate_core::{BackendContext, Caller, MemoryBackend};
use memgate_openviking::OpenVikingBackend;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const API_KEY: &str = "sk-proj-R4nd0mK3yF0rT3st1ngOnlyQ9vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_Vn";
const DB_PASSWORD: &str = "Zr8!kQ3vWm6#";
const BEARER: &str =
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJtZW1nYXRlLXRlc3QifQ.c2lnbmF0dXJlLW9mLXRlc3Q";

async fn get(url: &str, key: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(url)
        .header("X-API-Key", key)
        .send()
        .await
        .expect("OpenViking answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every regular file under `root` whose bytes contain `needle`.
fn files_containing(root: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(path);
                }
            }
        }
    }
    hits
}

#[tokio::test]
#[ignore = "real server: OpenViking (testkit/up)"]
async fn real_server_receives_placeholders_never_the_secrets() {
    let server = real_server();
    let user = std::env::var("MEMGATE_TEST_OPENVIKING_USER").expect("testkit env");
    let key = std::env::var("MEMGATE_TEST_OPENVIKING_USER_KEY").expect("testkit env");
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "base_url": server.url,
        "owner_user_id": user,
        "startup_policy": "fail_fast",
        "timeout_seconds": 30,
        "failure_policy": {"read": "raise", "write": "raise"}
    });
    let ctx: BackendContext = context(dir.path(), &[("OPENVIKING_API_KEY", &key)]);
    let backend =
        OpenVikingBackend::from_backend_config(config.as_object().unwrap(), &ctx).unwrap();
    let thread = format!("secrets{}", std::process::id());
    let caller = Caller::new(user.as_str())
        .with_agent("privacy")
        .with_thread(&thread);
    let transcript = vec![
        human(
            "s1",
            &format!(
                "my key is {API_KEY}, the db is postgres://app:{DB_PASSWORD}@db.internal/prod \
                 and the API wants Authorization: Bearer {BEARER}"
            ),
        ),
        ai(
            "s2",
            "Thanks, I will read them from the vault instead of this chat.",
        ),
    ];
    let report = backend
        .capture(&capture_request(&caller, transcript.clone()))
        .await
        .unwrap();
    assert_eq!(report.stored, 2);
    // Idempotency is unchanged: the cursor holds the original signatures.
    let again = backend
        .capture(&capture_request(&caller, transcript))
        .await
        .unwrap();
    assert_eq!((again.stored, again.already_known), (0, 2));

    // Read the stored session back from the server: its first archive.
    let sid = backend.session_id(&caller).unwrap();
    let (status, session) = get(&format!("{}/api/v1/sessions/{sid}", server.url), &key).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["result"]["commit_count"], 1, "{session}");
    let archive = format!("viking://user/{user}/sessions/{sid}/history/archive_001/messages.jsonl");
    let (status, read) = get(
        &format!(
            "{}/api/v1/content/read?uri={}&raw=true",
            server.url,
            archive.replace(':', "%3A").replace('/', "%2F")
        ),
        &key,
    )
    .await;
    assert_eq!(status, 200, "{read}");
    let stored = read["result"].as_str().unwrap_or_default().to_owned();
    println!("stored session archive:\n{stored}");
    assert!(stored.contains("[redacted:api_key]"), "{stored}");
    assert!(
        stored.contains("postgres://app:[redacted:password]@db.internal"),
        "{stored}"
    );
    for secret in [API_KEY, DB_PASSWORD, BEARER] {
        assert!(!stored.contains(secret), "the server stored a secret");
    }

    // Nothing on the server's disk or in any log holds a secret.
    let mut roots = Vec::new();
    if let Ok(ws) = std::env::var("MEMGATE_TEST_OPENVIKING_WORKSPACE") {
        roots.push(PathBuf::from(ws));
    }
    if let Ok(run) = std::env::var("MEMGATE_TESTKIT_RUN_DIR") {
        roots.push(PathBuf::from(run).join("logs"));
    }
    assert!(!roots.is_empty(), "testkit env names the workspace");
    for root in &roots {
        for secret in [API_KEY, DB_PASSWORD, BEARER] {
            let hits = files_containing(root, secret);
            assert!(hits.is_empty(), "a secret is on disk in {hits:?}");
        }
    }
    // The scan does find what was sent (the placeholder text).
    assert!(roots
        .iter()
        .any(|r| !files_containing(r, "[redacted:api_key]").is_empty()));
}
