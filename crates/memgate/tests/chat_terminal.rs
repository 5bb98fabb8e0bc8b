//! `memgate chat` as a person uses it: the real binary in a terminal (tmux:
//! keys sent, the screen read back), and with piped input, against
//! `testkit/scripted_model.py` (a scripted OpenAI-compatible server that
//! logs every request body) and the real local store.
//!
//! The terminal tests need tmux: they are `#[ignore]`d (listed as ignored by
//! a plain `cargo test`), and run with `--include-ignored` as testkit/run-tests
//! does, where a missing tmux fails them.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");
const KEY: &str = "sk-chat-test-3c9e71";
const SAVE: &str =
    "Remember this for the order service: money amounts are integer cents; use pytest for backend tests.";
const REFUND: &str = "Add a refund calculation to the order service, following its conventions.";

/// The scripted model server, stopped on drop.
struct ScriptedModel {
    child: Child,
    url: String,
    log: PathBuf,
}

impl ScriptedModel {
    /// Starts on a free port; the port comes back through `--port-file`.
    fn start(dir: &Path) -> Self {
        let script = dir.join("script.json");
        let rules = json!([
            {"when": {"last_role": "tool"}, "reply": {"content": "Done: {{tool_result}}"}},
            {"when": {"user_contains": "remember this"},
             "reply": {"tool_calls": [{"name": "memgate_remember",
                 "arguments": {"text": "Order service conventions: money amounts are integer cents; use pytest for backend tests."}}]}},
            {"when": {"user_contains": "refund"},
             "reply": {"content": "Refunds in integer cents, tested with pytest."}},
            {"when": {"user_contains": "slowly"},
             "reply": {"content": "Thinking about it at great length...", "pause_seconds": 60}},
            {"when": {"user_contains": "lisbon"}, "reply": {"content": "Noted: Lisbon."}}
        ]);
        std::fs::write(&script, rules.to_string()).unwrap();
        let log = dir.join("requests.jsonl");
        let port_file = dir.join("port");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testkit/scripted_model.py");
        let child = Command::new("python3")
            .arg(server)
            .args(["--script", script.to_str().unwrap()])
            .args(["--log", log.to_str().unwrap()])
            .args(["--port-file", port_file.to_str().unwrap()])
            .args(["--require-key", KEY])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs testkit/scripted_model.py");
        let port = wait_for(Duration::from_secs(20), || {
            std::fs::read_to_string(&port_file)
                .ok()
                .filter(|p| p.ends_with('\n'))
        })
        .expect("scripted_model wrote its port");
        Self {
            child,
            url: format!("http://127.0.0.1:{}/v1", port.trim()),
            log,
        }
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `probe` until it gives a value or `limit` passes.
fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The environment `memgate chat` runs with: a fresh home, no config.
fn chat_env(home: &Path, url: &str, key: &str) -> Vec<(&'static str, String)> {
    vec![
        ("MEMGATE_HOME", home.join("state").display().to_string()),
        ("MEMGATE_USER", "alice".to_owned()),
        ("MEMGATE_CHAT_BASE_URL", url.to_owned()),
        ("MEMGATE_CHAT_MODEL", "scripted".to_owned()),
        ("MEMGATE_CHAT_API_KEY", key.to_owned()),
    ]
}

/// Runs `memgate chat` with `input` piped in.
fn piped_chat(home: &Path, env: &[(&str, String)], input: &str) -> Output {
    use std::io::Write;
    let mut command = Command::new(BIN);
    command
        .arg("chat")
        .current_dir(home)
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_AGENT")
        .env_remove("MEMGATE_CHAT_BASE_URL")
        .env_remove("MEMGATE_CHAT_MODEL")
        .env_remove("MEMGATE_CHAT_API_KEY")
        .env("MEMGATE_HOME", home.join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("run memgate chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn without_an_endpoint_chat_says_what_to_set_and_exits_2() {
    let home = tempfile::tempdir().unwrap();
    let o = piped_chat(home.path(), &[], "hello\n");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("MEMGATE_CHAT_BASE_URL"), "{err}");
    assert!(err.contains("MEMGATE_CHAT_MODEL"), "{err}");
    assert!(err.contains("http://localhost:11434/v1"), "{err}");
}

#[test]
fn a_rejected_api_key_is_reported_without_the_key() {
    let home = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(home.path());
    let wrong = "sk-wrong-key-90d1e2";
    let env = chat_env(home.path(), &model.url, wrong);
    let o = piped_chat(home.path(), &env, &format!("{REFUND}\n/quit\n"));
    let out = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("error: model endpoint answered HTTP 401"),
        "{out}"
    );
    assert!(out.contains("[redacted]"), "{out}");
    assert!(!out.contains(wrong), "{out}");
}

#[test]
fn piped_input_runs_the_rfc_scenario() {
    let home = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(home.path());
    let env = chat_env(home.path(), &model.url, KEY);
    let o = piped_chat(home.path(), &env, &format!("{SAVE}\n/new\n{REFUND}\n"));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("saved: stored (mem_"), "{out}");
    assert!(out.contains(" chars from local\n"), "{out}");
    assert!(!out.contains(KEY));
    let last = model.requests().pop().unwrap();
    let memory = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("<memory>"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no memory message in {last}"));
    assert_eq!(memory["role"], "user");
    assert!(memory["content"]
        .as_str()
        .unwrap()
        .contains("integer cents"));
}

/// tmux on a private socket, for one test; the server is killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-t", "chat", "-S", "-500"])
    }

    fn type_line(&self, line: &str) {
        self.run(&["send-keys", "-t", "chat", "-l", line]);
        self.run(&["send-keys", "-t", "chat", "Enter"]);
    }

    /// Waits until the screen shows `pattern` `times` times.
    fn wait_for_screen(&self, pattern: &str, times: usize) -> String {
        wait_for(Duration::from_secs(30), || {
            let screen = self.screen();
            (screen.matches(pattern).count() >= times).then_some(screen)
        })
        .unwrap_or_else(|| panic!("screen never showed {pattern:?}:\n{}", self.screen()))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `memgate chat` in a tmux pane (200x60) with a fresh home; the shell
/// around it prints `memgate-exit=<status>` when it ends.
fn chat_in_tmux(home: &Path, model: &ScriptedModel, name: &str) -> Tmux {
    let mut command =
        String::from("env -u MEMGATE_CONFIG -u MEMGATE_URL -u MEMGATE_AGENT TERM=xterm");
    for (k, v) in chat_env(home, &model.url, KEY) {
        command.push_str(&format!(" {k}={}", quote(&v)));
    }
    command.push_str(&format!(" {} chat; echo memgate-exit=$?", quote(BIN)));
    let tmux = Tmux {
        socket: format!("memgate-{name}-{}", std::process::id()),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "chat",
        "-x",
        "200",
        "-y",
        "60",
        "-c",
        home.to_str().unwrap(),
        &command,
    ]);
    tmux.run(&["set-option", "-t", "chat", "remain-on-exit", "on"]);
    tmux
}

#[test]
#[ignore = "needs tmux (apt-get install -y tmux)"]
fn chat_in_a_terminal_shows_what_it_recalled_and_saved() {
    memgate_testsupport::real::tool("tmux", "tmux");
    let home = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(home.path());
    let tmux = chat_in_tmux(home.path(), &model, "chat-test");

    let screen = tmux.wait_for_screen("you> ", 1);
    assert!(
        screen.contains("memory: local backend, user alice, remember tool on"),
        "{screen}"
    );
    tmux.type_line(SAVE);
    let screen = tmux.wait_for_screen("you> ", 2);
    assert!(screen.contains("recalled: nothing"), "{screen}");
    assert!(screen.contains("saved: stored (mem_1)"), "{screen}");

    tmux.type_line("/new");
    tmux.wait_for_screen("thread chat-", 2);
    tmux.type_line(REFUND);
    let screen = tmux.wait_for_screen("you> ", 4);
    let recalled = screen
        .lines()
        .find(|l| l.starts_with("recalled: ") && l.ends_with(" chars from local"))
        .unwrap_or_else(|| panic!("no recall line:\n{screen}"));
    let chars: usize = recalled
        .trim_start_matches("recalled: ")
        .trim_end_matches(" chars from local")
        .parse()
        .unwrap();
    assert!(chars > 0);
    assert!(
        screen.contains("Refunds in integer cents, tested with pytest."),
        "{screen}"
    );

    tmux.type_line("/quit");
    // The shell around `memgate chat` prints its exit status; tmux's own
    // pane_dead_status is not reliable (tmux 3.3a sometimes never sets it).
    let screen = tmux.wait_for_screen("memgate-exit=", 1);
    assert!(
        screen.contains("memgate-exit=0"),
        "exit status 0:\n{screen}"
    );
    let screen = tmux.screen();
    assert!(!screen.contains(KEY), "{screen}");

    // What the model server received: the memory as a user-role message.
    let last = model.requests().pop().unwrap();
    let carrying: Vec<_> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("integer cents"))
        })
        .collect();
    assert_eq!(carrying.len(), 1, "{last}");
    assert_eq!(carrying[0]["role"], "user");
    assert!(carrying[0]["content"]
        .as_str()
        .unwrap()
        .starts_with("<memory>\n"));
}

#[test]
#[ignore = "needs tmux (apt-get install -y tmux)"]
fn ctrl_c_drops_a_running_turn_and_at_the_prompt_leaves_after_the_capture() {
    memgate_testsupport::real::tool("tmux", "tmux");
    let home = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(home.path());
    let tmux = chat_in_tmux(home.path(), &model, "chat-ctrl-c");
    tmux.wait_for_screen("you> ", 1);

    // Mid-answer: the model has sent its first piece and then goes quiet.
    tmux.type_line("Answer slowly: what is a good name for a cat?");
    tmux.wait_for_screen("Thinking", 1);
    tmux.run(&["send-keys", "-t", "chat", "C-c"]);
    let screen = tmux.wait_for_screen("you> ", 2);
    assert!(
        screen.contains("(interrupted: this turn was dropped)"),
        "{screen}"
    );

    // The chat goes on without the dropped turn.
    tmux.type_line("I moved to Lisbon last spring.");
    tmux.wait_for_screen("Noted: Lisbon.", 1);
    tmux.wait_for_screen("you> ", 3);
    let last = model.requests().pop().unwrap();
    assert!(!last.to_string().contains("Answer slowly"), "{last}");

    // At the prompt, Ctrl-C leaves cleanly once the turn's capture is done.
    tmux.run(&["send-keys", "-t", "chat", "C-c"]);
    let screen = tmux.wait_for_screen("memgate-exit=", 1);
    assert!(screen.contains("memgate-exit=0"), "{screen}");

    let search = |query: &str| {
        let o = Command::new(BIN)
            .args(["search", query])
            .env_remove("MEMGATE_CONFIG")
            .env_remove("MEMGATE_URL")
            .env_remove("MEMGATE_AGENT")
            .env("MEMGATE_HOME", home.path().join("state"))
            .env("MEMGATE_USER", "alice")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(search("Lisbon").contains("I moved to Lisbon last spring."));
    assert!(!search("good name for a cat").contains("Answer slowly"));
}
