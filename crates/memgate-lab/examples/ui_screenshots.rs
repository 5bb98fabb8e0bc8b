//! `cargo run -p memgate-lab --example ui_screenshots -- [DIR]`: screenshots
//! of the memory browser's main pages (default DIR `docs/ui`), taken in a
//! real headless Chromium (Debian's `chromium` and `chromium-driver`) over a
//! small local store filled through the JSON API.

use memgate_assembly::AssembledBackend;
use memgate_core::MemoryBackend;
use memgate_server::{router, ServerState};
use memgate_store::{LocalBackend, LocalConfig};
use memgate_testsupport::browser::Browser;
use memgate_testsupport::http::api;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

#[tokio::main]
async fn main() {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "docs/ui".to_owned()),
    );
    std::fs::create_dir_all(&out).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local =
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap();
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(ServerState::new(AssembledBackend::with_defaults(backend)));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let ada = json!({"user": "ada", "agent": "coding-assistant"});
    for (kind, text) in [
        (
            "preference",
            "Prefers pytest over unittest; runs tests with -x",
        ),
        (
            "decision",
            "Money amounts are integer cents in the order service",
        ),
        (
            "fact",
            "Works on the billing team; on call the first week of each month",
        ),
        (
            "preference",
            "Writes commit messages in the imperative mood",
        ),
    ] {
        api(
            &base,
            "/v1/remember",
            json!({"caller": ada, "kind": kind, "text": text}),
        )
        .await;
    }
    for (thread, turns) in [
        ("refunds-design", [
            "How should partial refunds be rounded?",
            "Round each line down to the cent and put the remainder on the last line, so the total matches the charge.",
        ]),
        ("ci-flake", [
            "The payment tests fail once in twenty runs on CI.",
            "The fixture shares a clock between tests; freezing time per test removes the flake.",
        ]),
    ] {
        let mut caller = ada.clone();
        caller["thread"] = json!(thread);
        api(&base, "/v1/capture", json!({"caller": caller, "messages": [
            {"type": "human", "content": turns[0]},
            {"type": "ai", "content": turns[1]},
        ]}))
        .await;
    }
    api(
        &base,
        "/v1/remember",
        json!({"caller": {"user": "grace"}, "text": "Prefers dark roast"}),
    )
    .await;

    let browser = Browser::start().await;
    let shoot = |name: &'static str| out.join(name);
    browser.client.goto(&format!("{base}/ui")).await.unwrap();
    browser.save_screenshot(&shoot("overview.png")).await;
    browser.press("li.user button.agent").await;
    browser.save_screenshot(&shoot("facts.png")).await;
    // The first fact, revised once: its page lists both versions.
    api(
        &base,
        "/v1/facts/revise",
        json!({"caller": ada, "id": "mem_1", "text": "Prefers pytest over unittest; runs tests with -x --ff"}),
    )
    .await;
    browser
        .client
        .goto(&format!("{base}/ui/facts/mem_1"))
        .await
        .unwrap();
    browser.save_screenshot(&shoot("fact.png")).await;
    browser
        .client
        .goto(&format!("{base}/ui/block"))
        .await
        .unwrap();
    browser.fill("input[name=query]", "refund rounding").await;
    browser.press("form[action='/ui/block'] button").await;
    browser.save_screenshot(&shoot("block.png")).await;
    browser
        .client
        .goto(&format!("{base}/ui/threads"))
        .await
        .unwrap();
    browser
        .client
        .goto(&format!("{base}/ui/threads/1"))
        .await
        .unwrap();
    browser.save_screenshot(&shoot("thread.png")).await;
    browser
        .client
        .goto(&format!("{base}/ui/threads/1/forget"))
        .await
        .unwrap();
    browser.save_screenshot(&shoot("forget.png")).await;
    browser
        .client
        .goto(&format!("{base}/ui/health"))
        .await
        .unwrap();
    browser.save_screenshot(&shoot("health.png")).await;
    browser.finish().await;
    println!("screenshots in {}", out.display());
}
