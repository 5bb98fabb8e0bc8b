//! Issue 13 end to end through the `memgate` binary on the local store, with
//! every log line on (`MEMGATE_LOG=trace`): a transcript holding secrets is
//! captured, recalled, searched and forgotten, and a byte scan of every
//! file under the runtime home plus everything each command printed
//! (stdout and its logs on stderr) finds the secrets nowhere. And
//! `memory.redaction` from `config.yaml` reaches the backend through the
//! factory: a rule turned off keeps its text, an added pattern redacts, a
//! bad pattern stops start-up naming the field, never the pattern.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");
/// Shaped like an OpenAI project key (fake, never issued).
const API_KEY: &str = "sk-proj-q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_VnM3hPz8LcB2yAd5GfS0";
const DB_PASSWORD: &str = "Wq7!zP2xLm9#";
/// A JWT of the documented example shape (header.payload.signature).
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

fn command(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env("MEMGATE_LOG", "trace")
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_USER");
    cmd
}

/// Runs a command; returns what it printed, stdout then stderr (its logs).
fn run(home: &Path, args: &[&str]) -> (Output, String) {
    let out = command(home, args).output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, printed)
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Files under the runtime home whose bytes contain `needle`.
fn files_holding(home: &Path, needle: &str) -> Vec<PathBuf> {
    files_under(&home.join("state"))
        .into_iter()
        .filter(|p| {
            std::fs::read(p)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

fn write_transcript(home: &Path, text: &str) -> String {
    let path = home.join("t.json");
    let messages = serde_json::json!([
        {"type": "human", "content": text, "id": "h1"},
        {"type": "ai", "content": "Done: the billing job reads them from the environment.", "id": "a1"},
    ]);
    std::fs::write(&path, messages.to_string()).unwrap();
    path.display().to_string()
}

#[test]
fn secrets_reach_no_file_and_no_log_from_capture_to_forget() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let transcript = write_transcript(
        h,
        &format!(
            "my OpenAI key is {API_KEY}, the session token is {JWT} and the database is \
             postgres://app:{DB_PASSWORD}@db.internal:5432/prod; please wire the billing job"
        ),
    );
    let mut printed = String::new();
    let step = |printed: &mut String, args: &[&str]| {
        let (out, text) = run(h, args);
        assert!(out.status.success(), "{args:?}: {text}");
        printed.push_str(&text);
        text
    };
    let captured = step(&mut printed, &["capture", "--thread", "t1", &transcript]);
    assert!(captured.contains("captured: 2 new"), "{captured}");
    let recalled = step(
        &mut printed,
        &["recall", "--query", "billing job OpenAI key database"],
    );
    assert!(recalled.contains("[redacted:api_key]"), "{recalled}");
    assert!(recalled.contains("[redacted:jwt]"), "{recalled}");
    assert!(
        recalled.contains("postgres://app:[redacted:password]@db.internal"),
        "{recalled}"
    );
    step(&mut printed, &["search", "billing"]);
    step(&mut printed, &["facts", "export"]);
    // A remember that is a secret is refused, and says why without it.
    // (The CLI exits 0 with "Not saved: …", as for every `failed` outcome.)
    let (_, refused) = run(h, &["remember", API_KEY]);
    assert!(
        refused.contains("Not saved") && refused.contains("secret"),
        "{refused}"
    );
    printed.push_str(&refused);

    // The scan finds what is stored: the redacted turn is there.
    assert!(!files_holding(h, "billing job").is_empty());
    assert!(
        printed.contains("trace") || printed.contains("TRACE") || printed.contains("DEBUG"),
        "logging was on: {printed}"
    );
    for secret in [
        API_KEY,
        JWT,
        DB_PASSWORD,
        "q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx",
    ] {
        assert_eq!(files_holding(h, secret), Vec::<PathBuf>::new(), "{secret}");
        assert!(!printed.contains(secret), "printed {secret}: {printed}");
    }

    let forgot = step(&mut printed, &["forget", "thread", "t1"]);
    assert!(forgot.contains("2 captured turns"), "{forgot}");
    assert_eq!(files_holding(h, "billing job"), Vec::<PathBuf>::new());
}

#[test]
fn memory_redaction_in_the_config_reaches_the_backend() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::write(
        h.join("config.yaml"),
        "memory:\n  redaction:\n    disable: [jwt]\n    patterns:\n      employee_id: 'EMP-[0-9]{6}'\n",
    )
    .unwrap();
    let transcript = write_transcript(
        h,
        &format!("badge EMP-482913 opened the door; the session token was {JWT}"),
    );
    let (out, text) = run(h, &["capture", "--thread", "t1", &transcript]);
    assert!(out.status.success(), "{text}");
    let (_, exported) = run(h, &["facts", "export"]);
    assert!(
        exported.contains("badge [redacted:employee_id] opened"),
        "{exported}"
    );
    assert_eq!(files_holding(h, "EMP-482913"), Vec::<PathBuf>::new());
    // The jwt rule is off: its text is stored as typed.
    assert!(exported.contains(JWT), "{exported}");
    assert!(!files_holding(h, JWT).is_empty());

    // A bad pattern stops start-up; the message names the field, not the pattern.
    std::fs::write(
        h.join("config.yaml"),
        "memory:\n  redaction:\n    patterns:\n      vault: '(hunter2Zq81'\n",
    )
    .unwrap();
    let (out, text) = run(h, &["recall"]);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("memory.redaction.patterns.vault"), "{text}");
    assert!(text.contains("regular expression"), "{text}");
    assert!(!text.contains("hunter2Zq81"), "{text}");
}
