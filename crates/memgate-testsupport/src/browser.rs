//! A real headless Chromium behind its own chromedriver (Debian's
//! `chromium` and `chromium-driver`), driven over WebDriver: for the memory
//! browser's tests and the lab's screenshots. chromedriver runs in its own
//! process group on a free loopback port and is killed, with every browser
//! process it started, when the [`Browser`] is dropped.

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NEEDS_BROWSER: &str =
    "needs chromium and chromium-driver (Debian packages; .ci/run installs them)";

/// A headless Chromium behind its own chromedriver.
pub struct Browser {
    pub client: Client,
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
    pub async fn start() -> Browser {
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
    pub async fn console_errors(&self) -> Vec<String> {
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
    pub async fn assert_no_script_ran(&self, page: &str) {
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
    pub async fn texts(&self, selector: &str) -> Vec<(String, u64)> {
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

    /// A PNG of the window as it is now.
    pub async fn save_screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(path, png).unwrap();
    }

    pub async fn finish(self) {
        let _ = self.client.clone().close().await;
    }

    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Clicks a form's button and waits for the page it leads to (a new
    /// document: the old one's marker is gone and the new one has loaded).
    pub async fn press(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap();
        self.click_and_wait(element).await;
    }

    /// Clicks `element` (a link or a form's button) and waits for the new page.
    pub async fn click_and_wait(&self, element: fantoccini::elements::Element) {
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

    pub async fn body_text(&self) -> String {
        self.client
            .find(Locator::Css("main"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
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
