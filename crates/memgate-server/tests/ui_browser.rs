//! The memory browser in a real headless Chromium, driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`; chromedriver is started here
//! on a free loopback port). Memory goes in through the JSON API, as a host
//! would put it there; a person then finds, revises and erases it in the
//! browser, and hostile memory text renders as text with no script run.

use fantoccini::{Client, ClientBuilder, Locator};
use memgate_assembly::AssembledBackend;
use memgate_core::MemoryBackend;
use memgate_server::{router, ServerState};
use memgate_store::{LocalBackend, LocalConfig};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NEEDS_BROWSER: &str =
    "needs chromium and chromium-driver (Debian packages; .ci/run installs them)";

/// A headless Chromium behind its own chromedriver.
struct Browser {
    client: Client,
    driver: Child,
    driver_url: String,
    _profile: tempfile::TempDir,
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    async fn start() -> Browser {
        let chromedriver = on_path("chromedriver").unwrap_or_else(|| panic!("{NEEDS_BROWSER}"));
        let port = free_port();
        // Its own process group, so the browser it starts goes with it.
        let driver = Command::new(chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver_url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = reqwest::get(format!("{driver_url}/status")).await;
            if up.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut options = json!({
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--window-size=1280,900", "--disable-breakpad",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        });
        if let Some(chromium) = on_path("chromium") {
            options["binary"] = json!(chromium);
        }
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL"},
            // An alert stays open, so the test sees it rather than the driver dismissing it.
            "unhandledPromptBehavior": "ignore",
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver_url)
            .await
            .expect("a Chromium session");
        Browser {
            client,
            driver,
            driver_url,
            _profile: profile,
        }
    }

    /// The browser console's errors since the last call (a blocked inline
    /// script shows here as a Content-Security-Policy violation).
    async fn console_errors(&self) -> Vec<String> {
        let id = self.client.session_id().await.unwrap().unwrap();
        let logs: Value = reqwest::Client::new()
            .post(format!("{}/session/{id}/se/log", self.driver_url))
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        logs["value"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].to_string())
            .collect()
    }

    /// No alert is open and nothing the page should not hold is in it.
    async fn assert_no_script_ran(&self, page: &str) {
        if let Ok(text) = self.client.get_alert_text().await {
            panic!("{page}: an alert opened: {text}");
        }
        let dangerous = self
            .client
            .execute(
                "return Array.from(document.querySelectorAll(\
                 'script, iframe, object, embed, svg, math, base, meta[http-equiv], body style, \
                  img:not([src^=\"/ui/\"]), a[href^=\"javascript\"], form[action^=\"javascript\"], \
                  [onerror], [onload], [onfocus], [ontoggle], [onclick], [style]'))\
                 .map(e => e.outerHTML)",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(
            dangerous,
            json!([]),
            "{page}: elements memory text must not create"
        );
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "{page}: console errors: {errors:?}");
    }

    /// `textContent` of every element matching `selector`, and how many
    /// child elements each has (memory text rendered as text has none).
    async fn texts(&self, selector: &str) -> Vec<(String, u64)> {
        let found = self
            .client
            .execute(
                "return Array.from(document.querySelectorAll(arguments[0]))\
                 .map(e => [e.textContent, e.children.length])",
                vec![json!(selector)],
            )
            .await
            .unwrap();
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| {
                (
                    pair[0].as_str().unwrap().to_owned(),
                    pair[1].as_u64().unwrap(),
                )
            })
            .collect()
    }

    async fn finish(self) {
        let _ = self.client.clone().close().await;
    }

    async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Clicks a form's button and waits for the page it leads to (a new
    /// document: the old one's marker is gone and the new one has loaded).
    async fn press(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap();
        self.click_and_wait(element).await;
    }

    /// Clicks `element` (a link or a form's button) and waits for the new page.
    async fn click_and_wait(&self, element: fantoccini::elements::Element) {
        self.client
            .execute("window.__memgateOldPage = true", vec![])
            .await
            .unwrap();
        element.click().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let loaded = self
                .client
                .execute(
                    "return window.__memgateOldPage === undefined && document.readyState === 'complete'",
                    vec![],
                )
                .await;
            if loaded.is_ok_and(|v| v == json!(true)) {
                return;
            }
            assert!(Instant::now() < deadline, "no new page within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn body_text(&self) -> String {
        self.client
            .find(Locator::Css("main"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Chooses whose memory to browse, on the overview.
    async fn browse(&self, base: &str, user: &str, agent: &str) {
        self.client.goto(&format!("{base}/ui")).await.unwrap();
        self.fill("#choose input[name=user]", user).await;
        self.fill("#choose input[name=agent]", agent).await;
        self.press("#choose button").await;
    }
}

/// Ends chromedriver and every browser process it started, also when a
/// test fails half-way.
impl Drop for Browser {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
    }
}

/// A served local store whose every request line is recorded (what an
/// access log would write).
struct Served {
    base: String,
    dir: tempfile::TempDir,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn serve_local() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let local =
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap();
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&requests);
    let app = router(ServerState::new(AssembledBackend::with_defaults(backend))).layer(
        axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                log.lock()
                    .unwrap()
                    .push(format!("{} {}", request.method(), request.uri()));
                next.run(request)
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Served {
        base: format!("http://{addr}"),
        dir,
        requests,
    }
}

async fn api(base: &str, path: &str, body: Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// Files under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).ok()?;
            bytes
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
                .then(|| path.display().to_string())
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver (Debian packages; .ci/run installs them)"]
async fn a_person_finds_revises_and_erases_memory_in_a_real_browser() {
    let served = serve_local().await;
    let base = served.base.as_str();
    let alice = json!({"user": "alice-7731", "agent": "helper-4410"});
    let mut in_thread = alice.clone();
    in_thread["thread"] = json!("trip-thread-5512");
    api(
        base,
        "/v1/capture",
        json!({"caller": in_thread, "messages": [
            {"type": "human", "content": "we planned the trip to Lisbon in May, platypus5519"},
            {"type": "ai", "content": "Noted: Lisbon in May."},
        ]}),
    )
    .await;
    api(
        base,
        "/v1/remember",
        json!({"caller": alice, "kind": "preference", "text": "prefers green tea in the morning"}),
    )
    .await;
    api(
        base,
        "/v1/remember",
        json!({"caller": alice, "text": "works on the harbour project"}),
    )
    .await;

    let browser = Browser::start().await;
    // Who: the store's users and their agents, chosen with a click.
    browser.client.goto(&format!("{base}/ui")).await.unwrap();
    let users = browser.texts("li.user b").await;
    assert_eq!(users, vec![("alice-7731".to_owned(), 0)]);
    browser.press("li.user button.agent").await;
    assert_eq!(browser.texts("#principal-agent").await[0].0, "helper-4410");
    let facts = browser.texts("article.fact p.text").await;
    let texts: Vec<&str> = facts.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        texts.contains(&"prefers green tea in the morning"),
        "{texts:?}"
    );
    assert!(texts.contains(&"works on the harbour project"), "{texts:?}");
    browser.assert_no_script_ran("facts").await;

    // What a new conversation starts with, and the block for a query.
    browser
        .client
        .goto(&format!("{base}/ui/block"))
        .await
        .unwrap();
    let block = browser.texts("pre#block").await;
    assert_eq!(block.len(), 1, "a no-query block is shown");
    assert!(block[0].0.contains("green tea"), "{block:?}");
    let recall = api(base, "/v1/recall", json!({"caller": alice})).await;
    assert_eq!(
        block[0].0,
        recall["text"].as_str().unwrap(),
        "the same text /v1/recall returns"
    );
    browser.fill("input[name=query]", "Lisbon trip").await;
    browser.press("form[action='/ui/block'] button").await;
    let block = browser.texts("pre#block").await;
    assert!(block[0].0.contains("Lisbon"), "{block:?}");

    // Revise a fact; the page shows the new version.
    browser
        .client
        .goto(&format!("{base}/ui/facts"))
        .await
        .unwrap();
    let cards = browser
        .client
        .find_all(Locator::Css("article.fact"))
        .await
        .unwrap();
    let mut opened = false;
    for card in cards {
        if card.text().await.unwrap().contains("green tea") {
            let open = card.find(Locator::Css("a.open")).await.unwrap();
            browser.click_and_wait(open).await;
            opened = true;
            break;
        }
    }
    assert!(opened);
    browser
        .fill("textarea[name=text]", "prefers jasmine tea in the morning")
        .await;
    browser.press("form[action$='/revise'] button").await;
    assert_eq!(
        browser.texts("article.fact p.text").await[0].0,
        "prefers jasmine tea in the morning"
    );
    assert_eq!(browser.texts("article.fact dd.version").await[0].0, "2");
    browser.assert_no_script_ran("revised fact").await;

    // Search across what was said.
    browser
        .client
        .goto(&format!("{base}/ui/threads"))
        .await
        .unwrap();
    browser
        .fill("form[action='/ui/search'] input[name=query]", "Lisbon")
        .await;
    browser.press("form[action='/ui/search'] button").await;
    let hits = browser.texts("tr.hit td.text").await;
    assert!(
        hits.iter().any(|(t, _)| t.contains("platypus5519")),
        "{hits:?}"
    );

    // The thread, its turns, then forget it: gone from the page and the files.
    browser
        .client
        .goto(&format!("{base}/ui/threads"))
        .await
        .unwrap();
    let link = browser
        .client
        .find(Locator::LinkText("trip-thread-5512"))
        .await
        .unwrap();
    browser.click_and_wait(link).await;
    let turns = browser.texts("li.turn p.text").await;
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert!(turns[0].0.contains("platypus5519"));
    let link = browser
        .client
        .find(Locator::LinkText("Forget this thread"))
        .await
        .unwrap();
    browser.click_and_wait(link).await;
    let confirm = browser.body_text().await;
    assert!(
        confirm.contains("trip-thread-5512"),
        "the confirmation names the thread: {confirm}"
    );
    browser.press("button.danger").await;
    assert!(browser.body_text().await.contains("2 captured turns"));
    browser
        .client
        .goto(&format!("{base}/ui/threads"))
        .await
        .unwrap();
    assert!(!browser.body_text().await.contains("trip-thread-5512"));
    assert_eq!(
        files_containing(served.dir.path(), "platypus5519"),
        Vec::<String>::new()
    );
    browser.assert_no_script_ran("threads").await;
    browser.finish().await;

    // No identity or memory text went into a URL (nor so an access log).
    let requests = served.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r.starts_with("POST /ui/facts/")),
        "{requests:?}"
    );
    for secret in [
        "alice",
        "helper",
        "trip-thread",
        "Lisbon",
        "tea",
        "harbour",
        "platypus",
    ] {
        let leaked: Vec<_> = requests
            .iter()
            .filter(|r| r.starts_with("GET /ui") || r.starts_with("POST /ui"))
            .filter(|r| r.contains(secret))
            .collect();
        assert!(leaked.is_empty(), "{secret} in {leaked:?}");
    }
}

/// Hostile texts a captured turn or a saved memory could hold.
const HOSTILE: [&str; 24] = [
    "<script>alert('s1')</script>",
    "<img src=x onerror=alert('s2')>",
    "<svg onload=alert('s3')>",
    "<a href=\"javascript:alert('s4')\">click me</a>",
    "[click me](javascript:alert('s5'))",
    "![pic](x\" onerror=\"alert('s6'))",
    "\"><script>alert('s7')</script>",
    "'><img src=x onerror=alert('s8')>",
    "</textarea><script>alert('s9')</script>",
    "</pre><script>alert('s10')</script>",
    "<iframe src=\"javascript:alert('s11')\"></iframe>",
    "<body onload=alert('s12')>",
    "<style>body{display:none}</style>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert('s14')>",
    "&lt;script&gt;alert('s15')&lt;/script&gt;",
    "<!-- the rest of the page is a comment",
    "<base href=\"javascript:alert('s17')//\">",
    "<meta http-equiv=\"refresh\" content=\"0;url=javascript:alert('s18')\">",
    "<form action=\"javascript:alert('s19')\"><button>go</button></form>",
    "<object data=\"javascript:alert('s20')\"></object>",
    "<details open ontoggle=alert('s21')>",
    "{{constructor.constructor('alert(22)')()}}",
    "<input autofocus onfocus=alert('s23')>",
    "<div style=\"background:url(javascript:alert('s24'))\">x</div>",
];

#[tokio::test]
#[ignore = "needs chromium and chromium-driver (Debian packages; .ci/run installs them)"]
async fn hostile_memory_renders_as_text_and_runs_nothing() {
    let served = serve_local().await;
    let base = served.base.as_str();
    let mallory = json!({"user": "mallory", "agent": "a"});
    let mut thread = mallory.clone();
    thread["thread"] = json!("xss");
    let messages: Vec<Value> = HOSTILE
        .iter()
        .map(|text| json!({"type": "human", "content": text}))
        .collect();
    api(
        base,
        "/v1/capture",
        json!({"caller": thread, "messages": messages}),
    )
    .await;
    for text in HOSTILE {
        api(
            base,
            "/v1/remember",
            json!({"caller": mallory, "text": text}),
        )
        .await;
    }
    let mut expected: Vec<String> = HOSTILE.iter().map(|t| t.to_string()).collect();
    expected.sort();

    // Hostile names too: ids are host-chosen text.
    let (evil_user, evil_agent) = (
        "<script>alert('u1')</script>",
        "\"><img src=x onerror=alert('a1')>",
    );
    api(
        base,
        "/v1/remember",
        json!({"caller": {"user": evil_user, "agent": evil_agent}, "text": "x"}),
    )
    .await;

    let browser = Browser::start().await;
    browser.client.goto(&format!("{base}/ui")).await.unwrap();
    let users = browser.texts("li.user b").await;
    assert!(users.contains(&(evil_user.to_owned(), 0)), "{users:?}");
    let agents = browser.texts("li.user button.agent").await;
    assert!(agents.contains(&(evil_agent.to_owned(), 0)), "{agents:?}");
    browser.assert_no_script_ran("overview").await;
    browser.browse(base, "mallory", "a").await;
    let mut shown: Vec<(String, u64)> = browser.texts("article.fact p.text").await;
    shown.sort();
    assert_eq!(
        shown.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
        expected
    );
    assert!(
        shown.iter().all(|(_, children)| *children == 0),
        "{shown:?}"
    );
    browser.assert_no_script_ran("facts").await;

    // Each fact's own page puts the text in a textarea too.
    let links = browser
        .client
        .execute(
            "return Array.from(document.querySelectorAll('a.open')).map(a => a.href)",
            vec![],
        )
        .await
        .unwrap();
    for link in links.as_array().unwrap() {
        browser.client.goto(link.as_str().unwrap()).await.unwrap();
        let text = browser.texts("article.fact p.text").await[0].0.clone();
        let textarea = browser
            .client
            .execute(
                "return document.querySelector('textarea[name=text]').value",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(
            textarea,
            json!(text),
            "the revise form holds the text as text"
        );
        browser.assert_no_script_ran(&text).await;
    }

    browser
        .client
        .goto(&format!("{base}/ui/threads"))
        .await
        .unwrap();
    let link = browser.client.find(Locator::LinkText("xss")).await.unwrap();
    browser.click_and_wait(link).await;
    let mut turns = browser.texts("li.turn p.text").await;
    turns.sort();
    assert_eq!(
        turns.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
        expected
    );
    assert!(turns.iter().all(|(_, children)| *children == 0));
    browser.assert_no_script_ran("thread").await;

    browser
        .client
        .goto(&format!("{base}/ui/block"))
        .await
        .unwrap();
    let block = browser.texts("pre#block").await;
    assert_eq!(block[0].1, 0, "the block is text");
    assert!(
        block[0].0.contains("<script>alert('s1')</script>"),
        "{block:?}"
    );
    browser.assert_no_script_ran("block").await;

    browser
        .client
        .goto(&format!("{base}/ui/threads"))
        .await
        .unwrap();
    browser
        .fill(
            "form[action='/ui/search'] input[name=query]",
            "alert onerror script",
        )
        .await;
    browser.press("form[action='/ui/search'] button").await;
    let hits = browser.texts("tr.hit td.text").await;
    assert!(!hits.is_empty());
    assert!(hits.iter().all(|(_, children)| *children == 0), "{hits:?}");
    browser.assert_no_script_ran("search").await;
    browser.finish().await;
}
