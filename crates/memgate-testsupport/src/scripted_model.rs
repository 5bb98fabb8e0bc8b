//! `testkit/scripted_model.py` (a real HTTP server speaking the OpenAI chat
//! protocol from a script, logging every request body) on a free loopback
//! port, stopped on drop: the model of `memgate chat`'s and distillation's
//! tests.

use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// See the module doc.
pub struct ScriptedModel {
    child: Child,
    /// The API base, `http://127.0.0.1:PORT/v1`.
    pub url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ScriptedModel {
    /// Starts the server with `script` (its rules; see the script's
    /// docstring) and `extra` command-line options.
    pub fn start(script: Value, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let log = dir.path().join("requests.jsonl");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testkit/scripted_model.py");
        let mut child = Command::new("python3")
            .arg(server)
            .arg("--script")
            .arg(&script_path)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs testkit/scripted_model.py");
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first
            .trim()
            .rsplit(' ')
            .next()
            .filter(|u| u.starts_with("http://"))
            .unwrap_or_else(|| panic!("scripted_model did not start: {first:?}"))
            .to_owned();
        Self {
            child,
            url,
            log,
            _dir: dir,
        }
    }

    /// Every request body the server received, in order.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON body per line"))
            .collect()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
