//! An HTTP client's view of the memory browser for the tests that need no
//! browser: pages, the session cookie, the CSRF token, form posts.
#![allow(dead_code)]

use memgate_server::{router, ServerState};

pub async fn spawn(state: ServerState) -> String {
    serve(router(state)).await
}

/// Serves `app` on a free loopback port; returns its base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

pub struct Page {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    /// The session cookie the server set, as a `Cookie` header value.
    pub fn cookie(&self) -> String {
        let set = self.headers["set-cookie"].to_str().unwrap();
        set.split(';').next().unwrap().to_owned()
    }

    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a CSRF field")
            + 19;
        self.body[at..at + 64].to_owned()
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

pub async fn read(response: reqwest::Response) -> Page {
    Page {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

pub async fn get(base: &str, path: &str, cookie: Option<&str>) -> Page {
    let mut request = client().get(format!("{base}{path}"));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    read(request.send().await.unwrap()).await
}

pub async fn post(
    base: &str,
    path: &str,
    cookie: Option<&str>,
    fields: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> Page {
    let mut request = client().post(format!("{base}{path}")).form(fields);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    read(request.send().await.unwrap()).await
}

/// A signed-in session that browses alice/helper: (cookie, csrf).
pub async fn browse_alice(base: &str) -> (String, String) {
    let first = get(base, "/ui", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let (cookie, csrf) = (first.cookie(), first.csrf());
    let chosen = post(
        base,
        "/ui/principal",
        Some(&cookie),
        &[("csrf", &csrf), ("user", "alice"), ("agent", "helper")],
        &[],
    )
    .await;
    assert_eq!(chosen.status, 303, "{}", chosen.body);
    (cookie, csrf)
}

/// A local store in `dir` holding one distilled fact: a thread of `turns`
/// human lines (`"{line} 000"`, `"{line} 001"`, ...) is captured and queued
/// for distillation for real; only the model's answer is given, as the
/// operation it would propose, citing the turns at `cited`. Returns the
/// store and the cited turns' ids.
pub async fn store_with_a_distilled_fact(
    dir: &std::path::Path,
    thread: &str,
    line: &str,
    turns: usize,
    cited: &[usize],
    fact: &str,
) -> (memgate_store::LocalBackend, Vec<String>) {
    use memgate_core::distill::{DistillQueue, Operation, ProposedFact, QueueLimits};
    use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message};
    let config = memgate_store::LocalConfig {
        distill: Some(QueueLimits {
            max_turns_per_job: 1000,
            max_queued_jobs: 10,
            lease: std::time::Duration::from_secs(300),
        }),
        ..memgate_store::LocalConfig::default()
    };
    let local = memgate_store::LocalBackend::open(dir.join("memgate.sqlite3"), config).unwrap();
    let messages = (0..turns)
        .map(|i| Message::human(format!("{line} {i:03}")))
        .collect();
    local
        .capture(&CaptureRequest {
            caller: Caller::new("alice")
                .with_agent("helper")
                .with_thread(thread),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
        .await
        .unwrap();
    let job = local.next_jobs(1, &[]).await.unwrap().remove(0);
    let sources: Vec<String> = cited.iter().map(|&i| job.turns[i].id.clone()).collect();
    let proposed = ProposedFact {
        kind: "travel".into(),
        text: fact.into(),
        confidence: 0.8,
        sources: sources.clone(),
    };
    local
        .apply(&job, &[Operation::Add(proposed)])
        .await
        .unwrap();
    (local, sources)
}
