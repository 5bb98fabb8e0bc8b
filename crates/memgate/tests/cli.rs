//! The `memgate` binary end to end: each test runs the real command in a
//! fresh `MEMGATE_HOME`, on the real embedded SQLite store.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

mod common;

use common::{memgate, BIN};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn remember_recall_search_and_facts_round_trip() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let o = memgate(
        h,
        &[
            "remember",
            "--kind",
            "preference",
            "Prefers dark roast coffee",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Saved to memory (mem_"),
        "{}",
        stdout(&o)
    );

    let again = memgate(
        h,
        &[
            "remember",
            "--kind",
            "preference",
            "  Prefers dark roast coffee ",
        ],
    );
    assert!(
        stdout(&again).starts_with("Already in memory"),
        "{}",
        stdout(&again)
    );

    let recall = memgate(h, &["recall", "--query", "what coffee does she like?"]);
    assert!(recall.status.success());
    assert!(
        stdout(&recall).contains("Prefers dark roast coffee"),
        "{}",
        stdout(&recall)
    );

    let search = memgate(h, &["search", "coffee", "--json"]);
    let hits: Value = serde_json::from_slice(&search.stdout).unwrap();
    assert_eq!(hits[0]["content"], "Prefers dark roast coffee");

    let list = memgate(h, &["facts", "list", "--json"]);
    let facts: Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = facts[0]["id"].as_str().unwrap().to_owned();
    let revised = memgate(
        h,
        &[
            "facts",
            "revise",
            &id,
            "--text",
            "Prefers light roast coffee",
        ],
    );
    assert!(
        stdout(&revised).contains("version 2"),
        "{}",
        stdout(&revised)
    );
    let deleted = memgate(h, &["facts", "delete", &id]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let active = memgate(h, &["facts", "list", "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&active.stdout).unwrap(),
        Value::Array(vec![])
    );
    let all = memgate(h, &["facts", "list", "--all", "--json"]);
    let all: Value = serde_json::from_slice(&all.stdout).unwrap();
    assert_eq!(all[0]["state"], "retired");
    assert_eq!(all[0]["text"], "Prefers light roast coffee");
}

#[test]
fn users_and_agents_do_not_see_each_other() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    memgate(h, &["--user", "alice", "remember", "alice keeps bees"]);
    memgate(
        h,
        &[
            "--user",
            "alice",
            "--agent",
            "coder",
            "remember",
            "coder uses tabs",
        ],
    );
    let bob = memgate(h, &["--user", "bob", "search", "bees"]);
    assert!(stdout(&bob).is_empty(), "{}", stdout(&bob));
    let alice_default = memgate(h, &["--user", "alice", "search", "tabs"]);
    assert!(
        stdout(&alice_default).is_empty(),
        "{}",
        stdout(&alice_default)
    );
    let coder = memgate(
        h,
        &["--user", "alice", "--agent", "coder", "search", "tabs"],
    );
    assert!(stdout(&coder).contains("coder uses tabs"));
}

#[test]
fn capture_is_idempotent_and_leaves_hidden_messages_out() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let transcript = h.join("t.jsonl");
    let lines = [
        r#"{"type":"system","content":"<system-reminder>date</system-reminder>","id":"x","additional_kwargs":{"hide_from_ui":true}}"#,
        r#"{"type":"human","content":"<memory>\nold\n</memory>","id":"x__memory","additional_kwargs":{"hide_from_ui":true,"dynamic_context_reminder":true}}"#,
        r#"{"type":"human","content":"I am planning a trip to Lisbon in May","id":"x__user"}"#,
        r#"{"type":"ai","content":"Lisbon in May is lovely.","id":"a1"}"#,
    ];
    std::fs::write(&transcript, lines.join("\n")).unwrap();
    let path = transcript.to_str().unwrap();
    let first = memgate(h, &["capture", "--thread", "t1", path]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stdout(&first).contains("2 new"), "{}", stdout(&first));
    assert!(stdout(&first).contains("2 left out"), "{}", stdout(&first));
    let replay = memgate(h, &["capture", "--thread", "t1", path]);
    assert!(
        stdout(&replay).contains("0 new, 2 already known"),
        "{}",
        stdout(&replay)
    );
    let hits = memgate(h, &["search", "Lisbon", "--json"]);
    let hits: Value = serde_json::from_slice(&hits.stdout).unwrap();
    assert!(!hits.as_array().unwrap().is_empty());
    assert!(!hits.to_string().contains("<memory>"), "{hits}");
}

#[test]
fn export_then_import_into_another_user_never_duplicates() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    memgate(h, &["remember", "uses pytest for backend tests"]);
    let out = h.join("export.json");
    let e = memgate(h, &["facts", "export", "--out", out.to_str().unwrap()]);
    assert!(e.status.success(), "{}", stderr(&e));
    for expected in [
        "imported 1 memories (0 already present)",
        "imported 0 memories (1 already present)",
    ] {
        let i = memgate(
            h,
            &["--user", "carol", "facts", "import", out.to_str().unwrap()],
        );
        assert!(stdout(&i).contains(expected), "{}", stdout(&i));
    }
    std::fs::write(&out, b"{\"format\":\"something-else\"}").unwrap();
    let bad = memgate(
        h,
        &["--user", "carol", "facts", "import", out.to_str().unwrap()],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    let still = memgate(h, &["--user", "carol", "facts", "list", "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&still.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    memgate(h, &["remember", "kept"]);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["remember", "   "], "invalid text"),
        (vec!["remember", "--kind", "", "x"], "invalid kind"),
        (vec!["search", "x", "--top-k", "0"], "--top-k"),
        (
            vec!["capture", "--thread", "t", "missing.json"],
            "missing.json",
        ),
        (vec!["facts", "show", "mem_999"], "not found"),
        (
            vec!["--config", "nope.yaml", "recall"],
            "cannot read config file",
        ),
    ];
    for (args, needle) in cases {
        let o = memgate(h, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let garbage = h.join("bad.json");
    std::fs::write(
        &garbage,
        b"[{\"type\":\"human\",\"content\":\"a\"},{\"content\":1}]",
    )
    .unwrap();
    let o = memgate(h, &["capture", "--thread", "t", garbage.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("messages[1]"), "{}", stderr(&o));
    // What was stored before survives every refusal.
    let list = memgate(h, &["facts", "list", "--json"]);
    assert!(stdout(&list).contains("kept"));
}

/// Runs `memgate config check` on `yaml` and asserts a one-line refusal
/// (exit 2) containing `needle`; returns stderr.
fn assert_config_refused(home: &Path, yaml: &str, needle: &str, env: &[(&str, &str)]) -> String {
    let f = home.join("check.yaml");
    std::fs::write(&f, yaml).unwrap();
    let o = Command::new(BIN)
        .args(["config", "check", f.to_str().unwrap()])
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{yaml}: {err}");
    assert!(err.contains(needle), "{yaml}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{yaml}: {err}");
    err
}

#[test]
fn config_check_names_the_key_and_rule() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let cases = [
        (
            "memory:\n  manager_class: deermem\n",
            "memory.manager_class",
        ),
        (
            "memory:\n  shutdown_flush_timeout_seconds: 0\n",
            "between 1 and 300",
        ),
        (
            "memory:\n  enabled: true\n  colour: blue\n",
            "unknown field `colour`",
        ),
        (
            "memory:\n  backend_config:\n    max_injection_chars: 10\n",
            "max_injection_chars",
        ),
        (
            "memory:\n  manager_class: noop\n  backend_config:\n    x: 1\n",
            "unknown: x",
        ),
        ("memory: [\n", "invalid YAML"),
    ];
    for (yaml, needle) in cases {
        assert_config_refused(h, yaml, needle, &[]);
    }
    let f = h.join("ok.yaml");
    std::fs::write(
        &f,
        "memory:\n  backend_config:\n    max_injection_chars: 4000\n",
    )
    .unwrap();
    let o = memgate(h, &["config", "check", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("manager_class=local"));
}

#[test]
fn doctor_reports_each_check() {
    let home = tempfile::tempdir().unwrap();
    let o = memgate(home.path(), &["doctor"]);
    assert!(o.status.success(), "{}", stdout(&o));
    let text = stdout(&o);
    for line in [
        "config   ok",
        "storage  ok",
        "backend  ok   local",
        "health   ok",
    ] {
        assert!(text.contains(line), "{text}");
    }
}

/// A running `memgate serve`: `stop` sends SIGTERM; dropping it kills it.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(home: &Path, extra: &[&str]) -> Result<Server, String> {
        let child = Command::new(BIN)
            .arg("serve")
            .args(["--addr", "127.0.0.1:0"])
            .args(extra)
            .current_dir(home)
            .env("MEMGATE_HOME", home.join("state"))
            .env_remove("MEMGATE_CONFIG")
            .env_remove("MEMGATE_TOKEN")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut server = Server {
            child,
            url: String::new(),
        };
        let mut reader = BufReader::new(server.child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return Err(seen);
            }
            seen.push_str(&line);
            if let Some(rest) = line.split("on http://").nth(1) {
                let addr = rest.split_whitespace().next().unwrap().to_owned();
                std::thread::spawn(move || for _ in reader.lines() {});
                server.url = format!("http://{addr}");
                return Ok(server);
            }
        }
    }

    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    /// A failed test must not leave a server running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn serve_then_cli_against_it() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let server = Server::start(h, &[]).expect("server starts");
    let remote = |args: &[&str]| {
        let mut full = vec!["--url", server.url.as_str()];
        full.extend_from_slice(args);
        memgate(h, &full)
    };
    let saved = remote(&["remember", "the staging database is read-only on Fridays"]);
    assert!(
        stdout(&saved).starts_with("Saved to memory"),
        "{}",
        stderr(&saved)
    );
    let recall = remote(&["recall", "--query", "can I write to staging on friday?"]);
    assert!(
        stdout(&recall).contains("read-only on Fridays"),
        "{}",
        stderr(&recall)
    );
    let unsupported_top_k = remote(&["search", "x", "--top-k", "500"]);
    assert_eq!(unsupported_top_k.status.code(), Some(2));
    let health: Value = serde_json::from_str(
        &String::from_utf8(
            Command::new("curl")
                .args(["-sf", &format!("{}/health", server.url)])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(health["backend"], "local");
    let status = server.stop();
    assert!(
        status.success(),
        "serve exits cleanly on SIGTERM: {status:?}"
    );
    // The service's writes are in the same store the CLI opens directly.
    let local = memgate(h, &["facts", "list", "--json"]);
    assert!(stdout(&local).contains("read-only on Fridays"));
}

#[test]
fn serve_refuses_a_public_address_without_a_token() {
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(["serve", "--addr", "0.0.0.0:0"])
        .current_dir(home.path())
        .env("MEMGATE_HOME", home.path().join("state"))
        .env_remove("MEMGATE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("needs a bearer token"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn serve_refuses_to_start_when_a_fail_fast_backend_is_unhealthy() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // Nothing listens on this port: the start-up health check must fail.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut f = std::fs::File::create(h.join("config.yaml")).unwrap();
    writeln!(
        f,
        "memory:\n  manager_class: openviking\n  backend_config:\n    base_url: http://127.0.0.1:{port}\n    owner_user_id: default\n    startup_policy: fail_fast\n    timeout_seconds: 2"
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .current_dir(h)
        .env("MEMGATE_HOME", h.join("state"))
        .env("OPENVIKING_API_KEY", "test-user-key")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("refusing to start") && err.contains("openviking"),
        "{err}"
    );
    assert!(
        !err.contains("test-user-key"),
        "the key must not leak: {err}"
    );
}

#[test]
fn serve_speaks_mcp_on_slash_mcp() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let server = Server::start(h, &[]).expect("server starts");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
    let out = Command::new("curl")
        .args([
            "-s",
            "-i",
            "-X",
            "POST",
            &format!("{}/mcp", server.url),
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/json, text/event-stream",
            "--max-time",
            "5",
            "-d",
            initialize,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("mcp-session-id"), "{text}");
    assert!(text.contains("\"name\":\"memgate\""), "{text}");
    assert!(server.stop().success());
}

#[test]
fn config_check_shows_the_openviking_rules() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let cases = [
        (
            "    auth_mode: trusted\n",
            "OpenViking trusted mode is no longer supported by this backend",
        ),
        (
            "    max_retries: 3\n",
            "OpenViking custom HTTP client fields are no longer supported: max_retries",
        ),
        (
            "    base_url: http://10.0.0.5:1933\n",
            "OpenViking plain HTTP is allowed only for localhost/openviking",
        ),
        (
            "    retrieval:\n      top_k: 0\n",
            "OpenViking retrieval.top_k must be between 1 and 100",
        ),
        (
            "    colour: blue\n",
            "Unknown OpenViking backend_config fields: colour",
        ),
    ];
    for (extra, needle) in cases {
        let yaml = format!(
            "memory:\n  manager_class: openviking\n  backend_config:\n    owner_user_id: alice\n{extra}"
        );
        let err = assert_config_refused(
            h,
            &yaml,
            needle,
            &[("OPENVIKING_API_KEY", "user-key-for-config-check")],
        );
        assert!(!err.contains("user-key-for-config-check"));
    }
    let f = h.join("tool.yaml");
    std::fs::write(&f, "memory:\n  manager_class: openviking\n  mode: tool\n").unwrap();
    let o = memgate(h, &["config", "check", f.to_str().unwrap()]);
    assert!(stderr(&o).contains("use OpenViking MCP"), "{}", stderr(&o));
}

#[test]
fn doctor_says_powercontext_does_not_capture() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // Nothing listens here: the health check fails, the notes still print.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        h.join("config.yaml"),
        "memory:\n  manager_class: powercontext\n  backend_config: {}\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .arg("doctor")
        .current_dir(h)
        .env("MEMGATE_HOME", h.join("state"))
        .env(
            "POWERCONTEXT_DEERFLOW_BASE_URL",
            format!("http://127.0.0.1:{port}"),
        )
        .env("POWERCONTEXT_DEERFLOW_OWNER_USER_ID", "user-7f3a")
        .env("POWERCONTEXT_DEERFLOW_SCOPE_ID", "scope-a")
        .env("POWERCONTEXT_DEERFLOW_TOKEN", "pc-token-for-doctor")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("capture=false"), "{out}");
    assert!(out.contains("health   FAIL"), "{out}");
    assert!(out.to_lowercase().contains("passive capture"), "{out}");
    // Source capture is off by default, and doctor says so.
    assert!(out.contains("source capture off"), "{out}");
    assert!(!out.contains("memgate_source_outbox"), "{out}");
    // The host may pass no query: doctor names the opt-in profile query.
    assert!(out.contains("POWERCONTEXT_DEERFLOW_PROFILE_QUERY"), "{out}");
    // Each note names its backend once.
    assert!(!out.contains("powercontext: powercontext:"), "{out}");
    assert!(!out.contains("pc-token-for-doctor") && !stderr(&o).contains("pc-token-for-doctor"));
}

/// One rule per field (`memgate_core::fields`) on the command line too:
/// control characters and over-long kinds are refused with exit 2 and one
/// line naming the field and the rule, and what was stored is intact. NUL
/// cannot travel in an argument, so it comes in through an imported file.
#[test]
fn cli_refuses_each_field_rule_naming_the_field_and_keeps_what_was_stored() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let kept = memgate(h, &["remember", "the harbour office opens at nine"]);
    assert!(kept.status.success(), "{}", stderr(&kept));
    let exported = h.join("export.json");
    let e = memgate(h, &["facts", "export", "--out", exported.to_str().unwrap()]);
    assert!(e.status.success(), "{}", stderr(&e));
    let before = stdout(&memgate(h, &["facts", "list", "--json"]));

    let mut nul_text: Value = serde_json::from_slice(&std::fs::read(&exported).unwrap()).unwrap();
    nul_text["facts"][0]["text"] = Value::from("fa\u{0}ct about the harbour");
    let nul_text_file = h.join("nul-text.json");
    std::fs::write(&nul_text_file, nul_text.to_string()).unwrap();
    let mut nul_kind: Value = serde_json::from_slice(&std::fs::read(&exported).unwrap()).unwrap();
    nul_kind["facts"][0]["kind"] = Value::from("fa\u{0}ct");
    let nul_kind_file = h.join("nul-kind.json");
    std::fs::write(&nul_kind_file, nul_kind.to_string()).unwrap();

    let long_kind = "k".repeat(129);
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (
            vec!["remember", "a bell \u{7} rings"],
            "text",
            "must not contain control characters other than tab and line breaks (found U+0007)",
        ),
        (
            vec!["remember", "--kind", "fa\u{1}ct", "a plain fact"],
            "kind",
            "must not contain control characters (found U+0001)",
        ),
        (
            vec!["remember", "--kind", &long_kind, "a plain fact"],
            "kind",
            "must be at most 128 characters (got 129)",
        ),
        (
            vec!["search", "harbour", "--kind", &long_kind],
            "kind",
            "must be at most 128 characters (got 129)",
        ),
        (
            vec!["search", "harbour", "--kind", "fa\u{1}ct"],
            "kind",
            "must not contain control characters (found U+0001)",
        ),
        (
            vec!["facts", "import", nul_text_file.to_str().unwrap()],
            "text",
            "(found U+0000)",
        ),
        (
            vec!["facts", "import", nul_kind_file.to_str().unwrap()],
            "kind",
            "(found U+0000)",
        ),
    ];
    for (args, field, rule) in cases {
        let mut with_user = vec!["--user", "carol"];
        with_user.extend(&args);
        for args in [args.clone(), with_user] {
            let o = memgate(h, &args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.contains(&format!("{field}: ")) && err.contains(rule),
                "{args:?}: {err}"
            );
        }
    }
    assert_eq!(
        stdout(&memgate(h, &["facts", "list", "--json"])),
        before,
        "stored data intact"
    );
    let carol = memgate(h, &["--user", "carol", "facts", "list", "--json"]);
    assert_eq!(stdout(&carol).trim(), "[]", "nothing half-imported");
}

/// A capture that keeps only the start of a long message says which one
/// and how much, on the command line as over HTTP.
#[test]
fn capture_names_a_message_it_cut_and_how_much_it_kept() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let transcript = h.join("t.json");
    let messages = serde_json::json!([
        {"type": "human", "content": "the harbour office opens at nine", "id": "h1"},
        {"type": "human", "content": "x".repeat(1_000_000), "id": "pasted-log"},
    ]);
    std::fs::write(&transcript, messages.to_string()).unwrap();
    let path = transcript.to_str().unwrap();
    let first = memgate(h, &["capture", "--thread", "t1", path]);
    assert!(first.status.success(), "{}", stderr(&first));
    let out = stdout(&first);
    assert!(out.contains("2 new"), "{out}");
    assert!(
        out.contains("cut: message 1 (id pasted-log) kept its first 65536 of 1000000 bytes"),
        "{out}"
    );
    let again = stdout(&memgate(h, &["capture", "--thread", "t1", path]));
    assert!(again.contains("0 new, 2 already known"), "{again}");
    assert!(!again.contains("cut:"), "nothing new was cut: {again}");
}
