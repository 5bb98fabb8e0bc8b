//! Every surface of the `memgate` binary over the one assembly: the CLI
//! (local and `--url`), the HTTP service, MCP over stdio and `/mcp`. Each is
//! checked for the same three promises against an OpenViking backend whose
//! server is a named fake that accepts connections and never answers
//! ([`BlackHole`]):
//!
//! - gates off → an empty answer and not one connection to the backend;
//! - a recall returns within the configured total deadline
//!   (`memory.deadlines.recall_seconds`), not the backend's per-request
//!   timeout (30 s here);
//! - SIGTERM with a stuck client and a hung backend exits within
//!   `shutdown_flush_timeout_seconds` and says what was not drained.

use memgate_testsupport::BlackHole;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");

/// The total recall deadline the configs below set.
const RECALL_DEADLINE: Duration = Duration::from_secs(1);
/// Slack for process start-up and a loaded CI machine: the point is "about
/// the deadline", far below the backend's own 30-second request timeout.
const SLACK: Duration = Duration::from_secs(4);

/// A config whose OpenViking server is `hole`, with the given gates.
fn write_config(home: &Path, hole: &BlackHole, enabled: bool, injection: bool) {
    let config = format!(
        "memory:
  enabled: {enabled}
  injection_enabled: {injection}
  shutdown_flush_timeout_seconds: 2
  manager_class: openviking
  deadlines:
    recall_seconds: {recall}
    capture_seconds: 30
    other_seconds: 1
  backend_config:
    base_url: {url}
    owner_user_id: default
    startup_policy: warn
    timeout_seconds: 30
",
        recall = RECALL_DEADLINE.as_secs_f64(),
        url = hole.url()
    );
    std::fs::write(home.join("config.yaml"), config).unwrap();
}

fn command(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env("OPENVIKING_API_KEY", "test-user-key")
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_USER")
        .env_remove("MEMGATE_TOKEN");
    cmd
}

fn run(home: &Path, args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = command(home).args(args).output().unwrap();
    (out, started.elapsed())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn transcript(home: &Path) -> String {
    let path = home.join("t.json");
    std::fs::write(
        &path,
        r#"[{"type":"human","content":"I live in Lisbon","id":"h1"}]"#,
    )
    .unwrap();
    path.display().to_string()
}

/// A running `memgate serve`; killed if a test fails before stopping it.
struct Serve {
    child: Child,
    url: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Serve {
    fn start(home: &Path) -> Serve {
        let mut child = command(home)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let mut url = None;
        let mut seen = String::new();
        while url.is_none() {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "serve did not start: {seen}"
            );
            seen.push_str(&line);
            if let Some(rest) = line.split("on http://").nth(1) {
                url = Some(format!(
                    "http://{}",
                    rest.split_whitespace().next().unwrap()
                ));
            }
        }
        std::thread::spawn(move || {
            for line in reader.lines().map_while(|l| l.ok()) {
                let _ = tx.send(line);
            }
        });
        Serve {
            child,
            url: url.unwrap(),
            stderr: rx,
        }
    }

    /// SIGTERM, then the exit status, the time to exit and what it printed.
    fn terminate(mut self) -> (std::process::ExitStatus, Duration, String) {
        let pid = self.child.id().to_string();
        let started = Instant::now();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        let elapsed = started.elapsed();
        let mut printed = String::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(500)) {
            printed.push_str(&line);
            printed.push('\n');
        }
        (status, elapsed, printed)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// POST with curl (as a user would), bounded far above the deadline.
fn post(url: &str, path: &str, body: &str) -> (String, Duration) {
    let started = Instant::now();
    let out = Command::new("curl")
        .args(["-s", "-X", "POST", &format!("{url}{path}")])
        .args(["-H", "content-type: application/json", "--max-time", "20"])
        .args(["-d", body])
        .output()
        .unwrap();
    (text(&out.stdout), started.elapsed())
}

#[test]
fn cli_recall_returns_within_the_total_deadline() {
    let hole = BlackHole::start();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path(), &hole, true, true);
    let (out, elapsed) = run(home.path(), &["recall", "--query", "where do I live"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing recalled"));
    assert!(hole.connections() > 0, "the backend was asked");
    assert!(elapsed < RECALL_DEADLINE + SLACK, "took {elapsed:?}");
}

#[test]
fn cli_gates_off_never_reach_the_backend() {
    let hole = BlackHole::start();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path(), &hole, true, false);
    let (out, _) = run(home.path(), &["recall"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing recalled"));

    write_config(home.path(), &hole, false, true);
    let file = transcript(home.path());
    let (out, _) = run(home.path(), &["capture", "--thread", "t1", &file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("captured: 0 new"),
        "{}",
        text(&out.stdout)
    );
    let (out, _) = run(home.path(), &["recall"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(hole.connections(), 0, "gated-off calls reached the backend");
}

#[test]
fn http_and_cli_url_recall_within_the_deadline_and_gates_hold() {
    let hole = BlackHole::start();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path(), &hole, true, true);
    let serve = Serve::start(home.path());

    let (body, elapsed) = post(
        &serve.url,
        "/v1/recall",
        r#"{"caller":{"user":"default"},"query":"x"}"#,
    );
    assert!(body.contains(r#""text":"""#), "{body}");
    assert!(elapsed < RECALL_DEADLINE + SLACK, "took {elapsed:?}");

    let started = Instant::now();
    let out = command(home.path())
        .args(["--url", &serve.url, "recall", "--query", "x"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(started.elapsed() < RECALL_DEADLINE + SLACK);
    let (status, _, _) = serve.terminate();
    assert!(status.success());

    // Gates off on the service: empty, and the backend never asked.
    let quiet = BlackHole::start();
    write_config(home.path(), &quiet, false, false);
    let serve = Serve::start(home.path());
    let (body, _) = post(&serve.url, "/v1/recall", r#"{"caller":{"user":"default"}}"#);
    assert!(body.contains(r#""text":"""#), "{body}");
    let (body, _) = post(
        &serve.url,
        "/v1/capture",
        r#"{"caller":{"user":"default","thread":"t"},"messages":[{"type":"human","content":"hi"}]}"#,
    );
    assert!(body.contains(r#""stored":0"#), "{body}");
    let out = command(home.path())
        .args(["--url", &serve.url, "recall"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The only connection is the start-up check (warm), never an operation.
    let after_start = quiet.connections();
    assert!(after_start <= 1, "{after_start}");
    let (status, _, _) = serve.terminate();
    assert!(status.success());
    assert_eq!(quiet.connections(), after_start);
}

#[test]
fn slash_mcp_recall_within_the_deadline() {
    let hole = BlackHole::start();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path(), &hole, true, true);
    let serve = Serve::start(home.path());
    let mcp = format!("{}/mcp", serve.url);
    let curl = |session: Option<&str>, body: &str| -> (String, Duration) {
        let started = Instant::now();
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-i", "-X", "POST", &mcp, "--max-time", "20"])
            .args(["-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream"]);
        if let Some(id) = session {
            cmd.args(["-H", &format!("mcp-session-id: {id}")]);
            cmd.args(["-H", "mcp-protocol-version: 2025-06-18"]);
        }
        let out = cmd.args(["-d", body]).output().unwrap();
        (text(&out.stdout), started.elapsed())
    };
    let (hello, _) = curl(
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#,
    );
    let session = hello
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {hello}"));
    curl(
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let (answer, elapsed) = curl(
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"recall","arguments":{"query":"x"}}}"#,
    );
    assert!(
        answer.contains(r#"\"text\":\"\""#) || answer.contains(r#""text":"""#),
        "{answer}"
    );
    assert!(elapsed < RECALL_DEADLINE + SLACK, "took {elapsed:?}");
    let (status, _, _) = serve.terminate();
    assert!(status.success());
}

#[tokio::test]
async fn mcp_stdio_recall_within_the_deadline_and_gates_hold() {
    for (gated, injection) in [(false, true), (true, false)] {
        let hole = BlackHole::start();
        let home = tempfile::tempdir().unwrap();
        write_config(home.path(), &hole, true, injection);
        let mut cmd = tokio::process::Command::from(command(home.path()));
        cmd.arg("mcp");
        let client = ClientConfig::default()
            .serve(TokioChildProcess::new(cmd).unwrap())
            .await
            .expect("MCP handshake");
        let started = Instant::now();
        let result = client
            .call_tool(CallToolRequestParams::new("recall"))
            .await
            .expect("recall answered");
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let content = result.structured_content.unwrap();
        assert_eq!(content["text"], "", "{content}");
        assert!(started.elapsed() < RECALL_DEADLINE + SLACK);
        client.cancel().await.unwrap();
        if gated {
            assert_eq!(hole.connections(), 0);
        } else {
            assert!(hole.connections() > 0);
        }
    }
}

#[test]
fn sigterm_with_stuck_clients_and_a_hung_backend_exits_within_the_budget() {
    let hole = BlackHole::start();
    let home = tempfile::tempdir().unwrap();
    // Recall may wait 30 s for the backend: it is still in flight at SIGTERM.
    let config = format!(
        "memory:
  shutdown_flush_timeout_seconds: 2
  manager_class: openviking
  deadlines:
    recall_seconds: 30
    other_seconds: 1
  backend_config:
    base_url: {}
    owner_user_id: default
    startup_policy: warn
    timeout_seconds: 30
",
        hole.url()
    );
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    let serve = Serve::start(home.path());
    let addr = serve.url.trim_start_matches("http://").to_owned();

    // A client that announces a body and never finishes sending it.
    let mut stuck = std::net::TcpStream::connect(&addr).unwrap();
    stuck
        .write_all(
            b"POST /v1/recall HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"caller\":",
        )
        .unwrap();
    // A recall the hung backend holds; curl appends the status code.
    let url = serve.url.clone();
    let hung = std::thread::spawn(move || {
        let out = Command::new("curl")
            .args(["-s", "-X", "POST", &format!("{url}/v1/recall")])
            .args(["-H", "content-type: application/json", "--max-time", "20"])
            .args(["-d", r#"{"caller":{"user":"default"},"query":"x"}"#])
            .args(["-w", "\n%{http_code}"])
            .output()
            .unwrap();
        text(&out.stdout)
    });
    std::thread::sleep(Duration::from_millis(500));

    let (status, elapsed, printed) = serve.terminate();
    assert!(status.success(), "{printed}");
    assert!(
        elapsed < Duration::from_secs(2) + SLACK,
        "exit took {elapsed:?} with a 2 s budget: {printed}"
    );
    assert!(printed.contains("NOT fully drained"), "{printed}");
    assert!(printed.contains("cut off"), "{printed}");
    assert!(!printed.contains("all work drained"), "{printed}");
    assert!(!printed.contains("test-user-key"), "{printed}");
    drop(stuck);
    // The held request is answered 503 at the deadline, not dropped.
    let answered = hung.join().unwrap();
    let (body, status) = answered.rsplit_once('\n').unwrap();
    assert_eq!(status, "503", "{answered}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"]["code"], "closed", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("still running at the end of the shutdown budget"),
        "{body}"
    );
    let last = printed.lines().last().unwrap_or_default();
    assert!(
        last.contains(
            "2 HTTP requests still open at the deadline were cut off (2 × POST /v1/recall); "
        ),
        "{printed}"
    );
}

/// A client that never finishes its body holds the whole budget while the
/// backend is idle: the last line names the cut-off request (method and
/// route) and does not blame the backend.
#[test]
fn a_stalled_client_is_named_on_the_last_line_and_the_idle_backend_is_not_blamed() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        "memory:\n  shutdown_flush_timeout_seconds: 1\n",
    )
    .unwrap();
    let serve = Serve::start(home.path());
    let addr = serve.url.trim_start_matches("http://").to_owned();
    let mut stuck = std::net::TcpStream::connect(&addr).unwrap();
    stuck
        .write_all(
            b"POST /v1/recall HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"caller\":",
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (status, _, printed) = serve.terminate();
    assert!(status.success(), "{printed}");
    let last = printed.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "memgate: stopped within the 1 s shutdown budget, NOT fully drained: \
         1 HTTP request still open at the deadline was cut off (POST /v1/recall); \
         the backend had nothing left running and was released",
        "{printed}"
    );
    drop(stuck);
}
