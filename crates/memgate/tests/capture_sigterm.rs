//! `memgate capture` under SIGTERM, against a FAKE OpenViking (a std-only
//! HTTP responder on 127.0.0.1) that holds the message batch until the test
//! lets it go: a stuck write is a fault a real server cannot be made to
//! produce on demand. The crash suite (`testkit/crash-suite`) does the same
//! against the real server at random moments.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");
const BUDGET_SECONDS: u64 = 1;

/// What the fake tells the test, and how it treats the batch.
struct Fake {
    port: u16,
    batch_arrived: mpsc::Receiver<()>,
    release_batch: mpsc::Sender<()>,
}

fn answer(stream: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Reads one request; returns its request line.
fn read_request(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap_or(0);
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    line
}

fn start_fake() -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (arrived_tx, batch_arrived) = mpsc::channel();
    let (release_batch, release_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let line = read_request(&mut stream);
            if line.contains("/messages/batch") {
                let _ = arrived_tx.send(());
                // Held until released (or the test ends).
                if release_rx.recv().is_ok() {
                    answer(
                        &mut stream,
                        "200 OK",
                        r#"{"status":"ok","result":{"message_count":2,"added":2,"pending_tokens":4}}"#,
                    );
                }
            } else if line.contains("/commit") {
                answer(
                    &mut stream,
                    "200 OK",
                    r#"{"status":"ok","result":{"status":"accepted","archived":true}}"#,
                );
            } else if line.starts_with("GET /api/v1/sessions/") {
                answer(
                    &mut stream,
                    "404 Not Found",
                    r#"{"status":"error","error":{"code":"NOT_FOUND","message":"Session not found"}}"#,
                );
            } else {
                answer(
                    &mut stream,
                    "200 OK",
                    r#"{"status":"ok","healthy":true,"version":"0.5.2"}"#,
                );
            }
        }
    });
    Fake {
        port,
        batch_arrived,
        release_batch,
    }
}

fn start_capture(home: &Path, port: u16) -> Child {
    let storage = home.join("storage");
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "memory:\n  manager_class: openviking\n  shutdown_flush_timeout_seconds: {BUDGET_SECONDS}\n  backend_config:\n    base_url: http://127.0.0.1:{port}\n    owner_user_id: alice\n    storage_path: {}\n    timeout_seconds: 30\n    failure_policy:\n      write: raise\n",
            storage.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["capture", "--thread", "t1", "-"])
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env("OPENVIKING_API_KEY", "test-user-key")
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env("MEMGATE_USER", "alice")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let transcript = r#"[{"type":"human","id":"h1","content":"hello"},{"type":"ai","id":"a1","content":"hi there"}]"#;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(transcript.as_bytes())
        .unwrap();
    child
}

/// Waits until the capture's batch reaches the fake (the process is then
/// inside its write); fails at once if the process exits before that.
fn wait_for_batch(fake: &Fake, child: &mut Child) {
    let started = Instant::now();
    while fake
        .batch_arrived
        .recv_timeout(Duration::from_millis(50))
        .is_err()
    {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("memgate capture exited ({status}) before writing: {err}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no batch within 60 s"
        );
    }
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the exit; the limit only keeps a broken build from hanging.
fn wait_exit(child: &mut Child, limit: Duration) -> (Option<i32>, Duration, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), started.elapsed(), err);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("memgate capture did not exit within {limit:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cursor_file(home: &Path) -> PathBuf {
    let dir = home.join("storage/openviking/sessions");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// The cursor as a capture reads it (an unconfirmed optimistic file is the
/// state before its write, with the intent).
fn cursor(home: &Path) -> memgate_openviking::cursor::TranscriptCursor {
    memgate_openviking::cursor::load_cursor(&cursor_file(home)).unwrap()
}

#[test]
fn sigterm_during_a_stuck_write_exits_at_the_budget_and_leaves_the_intent() {
    let home = tempfile::tempdir().unwrap();
    let fake = start_fake();
    let mut child = start_capture(home.path(), fake.port);
    wait_for_batch(&fake, &mut child);
    sigterm(&child);
    let (code, took, err) = wait_exit(&mut child, Duration::from_secs(BUDGET_SECONDS + 10));
    assert_eq!(code, Some(143), "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(err.contains("the next capture reconciles"), "{err}");
    println!("exit {took:?} after SIGTERM with a {BUDGET_SECONDS}s budget");
    assert!(
        took >= Duration::from_millis(BUDGET_SECONDS * 1000 - 100),
        "it waited for the write: {took:?}"
    );
    let c = cursor(home.path());
    assert_eq!(c.in_flight.as_ref().map(|i| i.base_total), Some(0), "{c:?}");
    assert_eq!(c.submitted_prefix_count, None, "{c:?}");
    drop(fake.release_batch);
}

#[test]
fn sigterm_with_a_write_that_finishes_in_the_budget_records_it() {
    let home = tempfile::tempdir().unwrap();
    let fake = start_fake();
    let mut child = start_capture(home.path(), fake.port);
    wait_for_batch(&fake, &mut child);
    sigterm(&child);
    std::thread::sleep(Duration::from_millis(200));
    fake.release_batch.send(()).unwrap();
    let (code, _, err) = wait_exit(&mut child, Duration::from_secs(BUDGET_SECONDS + 10));
    assert_eq!(code, Some(143), "{err}");
    assert!(err.contains("nothing left in flight"), "{err}");
    let c = cursor(home.path());
    assert!(c.in_flight.is_none(), "{c:?}");
    assert_eq!(c.submitted_prefix_count, Some(2), "{c:?}");
    assert_eq!(c.server_total, Some(2), "{c:?}");
}
