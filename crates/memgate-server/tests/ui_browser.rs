//! The memory browser in a real headless Chromium, driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`; chromedriver is started here
//! on a free loopback port). Memory goes in through the JSON API, as a host
//! would put it there; a person then finds, revises and erases it in the
//! browser, and hostile memory text renders as text with no script run.

use fantoccini::Locator;
use memgate_assembly::AssembledBackend;
use memgate_core::MemoryBackend;
use memgate_server::{router, ServerState};
use memgate_store::{LocalBackend, LocalConfig};
use memgate_testsupport::browser::Browser;
use memgate_testsupport::http::api;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};

mod ui_common;

/// Opens `path` of the UI served at `base`.
async fn open(browser: &Browser, base: &str, path: &str) {
    browser.client.goto(&format!("{base}{path}")).await.unwrap();
}

/// Chooses whose memory to browse, on the overview's form.
async fn browse(browser: &Browser, base: &str, user: &str, agent: &str) {
    open(browser, base, "/ui").await;
    browser.fill("#choose input[name=user]", user).await;
    browser.fill("#choose input[name=agent]", agent).await;
    browser.press("#choose button").await;
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
    Served {
        base: ui_common::serve(app).await,
        dir,
        requests,
    }
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
    open(&browser, base, "/ui").await;
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
    open(&browser, base, "/ui/block").await;
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
    open(&browser, base, "/ui/facts").await;
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
    // Both versions, newest first, with who saved each and what changed.
    let versions = browser.texts("#history li.version p.text").await;
    let versions: Vec<&str> = versions.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        versions,
        [
            "prefers jasmine tea in the morning",
            "prefers green tea in the morning"
        ]
    );
    let changes = browser.texts("#history li.version span.change").await;
    assert_eq!(
        (changes[0].0.as_str(), changes[1].0.as_str()),
        ("text", "saved")
    );
    let by = browser.texts("#history li.version b.by").await;
    assert!(by.iter().all(|(who, _)| who == "user"), "{by:?}");
    browser.assert_no_script_ran("revised fact").await;

    // Search across what was said.
    open(&browser, base, "/ui/threads").await;
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
    open(&browser, base, "/ui/threads").await;
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
    open(&browser, base, "/ui/threads").await;
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
    open(&browser, base, "/ui").await;
    let users = browser.texts("li.user b").await;
    assert!(users.contains(&(evil_user.to_owned(), 0)), "{users:?}");
    let agents = browser.texts("li.user button.agent").await;
    assert!(agents.contains(&(evil_agent.to_owned(), 0)), "{agents:?}");
    browser.assert_no_script_ran("overview").await;
    browse(&browser, base, "mallory", "a").await;
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

    open(&browser, base, "/ui/threads").await;
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

    open(&browser, base, "/ui/block").await;
    let block = browser.texts("pre#block").await;
    assert_eq!(block[0].1, 0, "the block is text");
    assert!(
        block[0].0.contains("<script>alert('s1')</script>"),
        "{block:?}"
    );
    browser.assert_no_script_ran("block").await;

    open(&browser, base, "/ui/threads").await;
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

/// A distilled fact's cited turns are one click away, and one more opens
/// each in its thread, on the page of a long thread that holds it. The
/// store distils for real; only the model's answer is given, as the
/// operations it would propose.
#[tokio::test]
#[ignore = "needs chromium and chromium-driver (Debian packages; .ci/run installs them)"]
async fn a_facts_source_turns_open_in_their_thread_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (local, cited) = ui_common::store_with_a_distilled_fact(
        dir.path(),
        "ferry-thread",
        "ferry plan turn",
        130,
        &[120],
        "alice takes the ferry",
    )
    .await;
    let cited = cited[0].clone();
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let base = ui_common::spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;

    let browser = Browser::start().await;
    browse(&browser, &base, "alice", "helper").await;
    browser.press("article.fact a.open").await;
    browser.press("a#sources").await;
    let turns = browser.texts("li.turn.cited p.text").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].0, "ferry plan turn 120");
    browser.press("a.in-thread").await;
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(url.fragment(), Some(cited.as_str()), "{url}");
    assert_eq!(url.query(), Some("page=1"), "turn 121 of 130 is on page 2");
    assert_eq!(browser.texts("#thread-name").await[0].0, "ferry-thread");
    let target = browser.texts(&format!("li#{cited} p.text")).await;
    assert_eq!(target[0].0, "ferry plan turn 120");
    browser.assert_no_script_ran("source turn").await;
    browser.finish().await;
}
