//! Distillation through the `memgate` binary: the real command, the real
//! embedded store, testkit's scripted model as the endpoint.

use memgate_testsupport::scripted_model::ScriptedModel;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;

mod common;

use common::memgate;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn config(home: &Path, model: &ScriptedModel) {
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "memory:\n  distill:\n    enabled: true\n    base_url: {}\n    model: scripted\n    \
             timeout_ms: 2000\n    max_attempts: 1\n",
            model.url
        ),
    )
    .unwrap();
}

fn capture(home: &Path, thread: &str, said: &[&str]) {
    let messages: Vec<Value> = said
        .iter()
        .map(|t| json!({"type": "human", "content": t}))
        .collect();
    let file = home.join(format!("{thread}.json"));
    std::fs::write(&file, serde_json::to_string(&messages).unwrap()).unwrap();
    let o = memgate(
        home,
        &["capture", "--thread", thread, file.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn distill_runs_the_queue_and_facts_list_shows_origin_and_sources() {
    let add = json!({"operations": [{"op": "add", "fact": null, "kind": "preference",
        "text": "Dana prefers short answers", "confidence": 0.8, "sources": ["turn_1"]}]});
    let model = ScriptedModel::start(
        json!([
            {"when": {"user_contains": "bullet points"}, "reply": {"content": add.to_string()}},
            {"when": {"user_contains": "cannot be used"}, "reply": {"content": "no"}},
            {"when": {"user_contains": "weather"}, "reply": {"content": "It is sunny."}},
        ]),
        &[],
    );
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    config(h, &model);
    capture(h, "t1", &["Keep answers short, bullet points preferred."]);
    capture(h, "t2", &["What is the weather?"]);
    // Capturing queued the work and asked no model.
    assert!(model.requests().is_empty());
    let doctor = memgate(h, &["doctor"]);
    assert!(
        stdout(&doctor).contains("distill  ok   2 queued, 0 parked"),
        "{}",
        stdout(&doctor)
    );

    let run = memgate(h, &["distill"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout(&run).contains("1 job(s) applied: 1 fact(s) added, 0 superseded; 1 parked"),
        "{}",
        stdout(&run)
    );
    let list = memgate(h, &["facts", "list"]);
    assert!(
        stdout(&list)
            .contains("[preference] v1\tdistilled from turn_1\tDana prefers short answers"),
        "{}",
        stdout(&list)
    );
    let parked = memgate(h, &["distill", "--parked", "--json"]);
    let parked: Value = serde_json::from_slice(&parked.stdout).unwrap();
    assert_eq!(parked[0]["thread"], "t2");
    assert!(parked[0]["reason"]
        .as_str()
        .unwrap()
        .contains("holds no JSON object"));
    let doctor = memgate(h, &["doctor"]);
    assert!(
        stdout(&doctor).contains("distill  FAIL 0 queued, 1 parked, 1 done"),
        "{}",
        stdout(&doctor)
    );
}

#[test]
fn distillation_on_a_backend_that_cannot_distil_is_a_config_error() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        "memory:\n  manager_class: noop\n  distill:\n    enabled: true\n    base_url: http://127.0.0.1:9/v1\n    model: m\n",
    )
    .unwrap();
    let o = memgate(home.path(), &["recall"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("memory.distill.enabled") && err.contains("local"),
        "{err}"
    );
}

#[test]
fn remember_and_revise_take_a_confidence_and_refuse_one_out_of_range() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let saved = memgate(
        h,
        &[
            "remember",
            "--confidence",
            "0.4",
            "Dana is on call this week",
        ],
    );
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let revised = memgate(h, &["facts", "revise", "mem_1", "--confidence", "0.2"]);
    assert!(
        stdout(&revised).contains("revised mem_1 to version 2"),
        "{}",
        stdout(&revised)
    );
    let shown: Value =
        serde_json::from_slice(&memgate(h, &["facts", "show", "mem_1"]).stdout).unwrap();
    assert_eq!(
        (shown["confidence"].as_f64(), shown["version"].as_u64()),
        (Some(0.2), Some(2))
    );
    let bad = memgate(h, &["remember", "--confidence", "2", "x"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("confidence"));
}

#[test]
fn a_distill_killed_mid_job_loses_nothing_and_the_next_run_applies_it_once() {
    let add = json!({"operations": [{"op": "add", "fact": null, "kind": "fact",
        "text": "Dana keeps bees", "confidence": 0.9, "sources": ["turn_1"]}]});
    let model = ScriptedModel::start(
        json!([
            // The first call hangs until the process is killed under it.
            {"when": {"user_contains": "bees"}, "times": 1,
             "reply": {"content": add.to_string(), "pause_seconds": 30}},
            {"when": {"user_contains": "bees"}, "reply": {"content": add.to_string()}},
        ]),
        &[],
    );
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::write(
        h.join("config.yaml"),
        format!(
            "memory:\n  distill:\n    enabled: true\n    base_url: {}\n    model: scripted\n",
            model.url
        ),
    )
    .unwrap();
    capture(h, "t1", &["I keep bees on the roof."]);
    let mut running = std::process::Command::new(common::BIN)
        .arg("distill")
        .current_dir(h)
        .env("MEMGATE_HOME", h.join("state"))
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_USER")
        .env_remove("MEMGATE_AGENT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while model.requests().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the model was never asked"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    running.kill().unwrap(); // SIGKILL, mid-call
    running.wait().unwrap();
    let doctor = memgate(h, &["doctor"]);
    assert!(
        stdout(&doctor).contains("distill  ok   1 queued, 0 parked, 0 done"),
        "{}",
        stdout(&doctor)
    );

    let run = memgate(h, &["distill"]);
    assert!(
        stdout(&run).contains("1 job(s) applied: 1 fact(s) added"),
        "{}",
        stdout(&run)
    );
    let again = memgate(h, &["distill"]);
    assert!(
        stdout(&again).contains("0 job(s) applied"),
        "{}",
        stdout(&again)
    );
    let facts: Value =
        serde_json::from_slice(&memgate(h, &["facts", "list", "--all", "--json"]).stdout).unwrap();
    assert_eq!(facts.as_array().unwrap().len(), 1, "{facts}");
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn a_chat_session_distils_what_it_captures_in_the_background() {
    let add = json!({"operations": [{"op": "add", "fact": null, "kind": "fact",
        "text": "Dana keeps bees on the roof", "confidence": 0.9, "sources": ["turn_1"]}]});
    let distiller = ScriptedModel::start(
        json!([{"when": {"user_contains": "bees"}, "reply": {"content": add.to_string()}}]),
        &[],
    );
    // The chat model takes its time over the second line, so the session
    // is still open while the first turn's job runs.
    let chat = ScriptedModel::start(
        json!([
            {"when": {"user_contains": "anything else"},
             "reply": {"content": "Not yet.", "pause_seconds": 4}},
            {"when": {"always": true}, "reply": {"content": "Noted."}},
        ]),
        &[],
    );
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    config(h, &distiller);
    let mut session = std::process::Command::new(common::BIN)
        .arg("chat")
        .current_dir(h)
        .env("MEMGATE_HOME", h.join("state"))
        .env("MEMGATE_USER", "dana")
        .env("MEMGATE_CHAT_BASE_URL", &chat.url)
        .env("MEMGATE_CHAT_MODEL", "scripted")
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_AGENT")
        .env_remove("MEMGATE_CHAT_API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = session.stdin.take().unwrap();
        stdin
            .write_all(b"I keep bees on the roof.\nAnything else to do today?\n")
            .unwrap();
    }
    let out = session.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The session's own worker asked the distillation endpoint, and the
    // fact is stored, resting on the turn that said it.
    assert_eq!(distiller.requests().len(), 1);
    let facts = std::process::Command::new(common::BIN)
        .args(["facts", "list", "--json"])
        .current_dir(h)
        .env("MEMGATE_HOME", h.join("state"))
        .env("MEMGATE_USER", "dana")
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_AGENT")
        .output()
        .unwrap();
    let facts: Value = serde_json::from_slice(&facts.stdout).unwrap();
    assert_eq!(facts[0]["text"], "Dana keeps bees on the roof", "{facts}");
    assert_eq!(facts[0]["origin"], "distilled", "{facts}");
}
