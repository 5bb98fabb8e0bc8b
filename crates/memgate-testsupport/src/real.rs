//! The real servers and tools `testkit/` starts for a run, as its env file
//! (`testkit/.run/env`) names them.
//!
//! A test that needs one is marked `#[ignore = "real server: …"]`, so a plain
//! `cargo test` lists it as *ignored* rather than counting it as passed.
//! `testkit/run-tests` runs them with `--include-ignored` after starting
//! everything; there, and whenever someone asks for ignored tests, a missing
//! server fails the test with the variable that is unset and the command
//! that starts it.

use std::process::{Command, Stdio};

/// How to get the variables these functions read.
pub const HOW_TO_START: &str =
    "run testkit/up and testkit/postgres-up, then `set -a; . testkit/.run/env; set +a`";

/// The values of `names` from the environment; panics naming every one that
/// is unset or empty.
pub fn env_vars<const N: usize>(names: [&str; N]) -> [String; N] {
    let values = names.map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
    let missing: Vec<&str> = names
        .iter()
        .zip(&values)
        .filter(|(_, value)| value.is_none())
        .map(|(name, _)| *name)
        .collect();
    assert!(
        missing.is_empty(),
        "this test needs a real server: {} unset ({HOW_TO_START})",
        missing.join(", ")
    );
    values.map(Option::unwrap_or_default)
}

/// The real OpenViking server.
#[derive(Clone, Debug)]
pub struct OpenViking {
    pub url: String,
    pub root_key: String,
    /// The account testkit created for the run.
    pub account: String,
}

pub fn openviking() -> OpenViking {
    let [url, root_key, account] = env_vars([
        "MEMGATE_TEST_OPENVIKING_URL",
        "MEMGATE_TEST_OPENVIKING_ROOT_KEY",
        "MEMGATE_TEST_OPENVIKING_ACCOUNT",
    ]);
    OpenViking {
        url,
        root_key,
        account,
    }
}

/// One real PowerContext generation.
#[derive(Clone, Debug)]
pub struct PowerContext {
    pub url: String,
    pub token: String,
    /// The testkit's pre-created Scope (1.4.x only).
    pub scope_id: Option<String>,
}

/// The generation whose variables start with `prefix` (`MEMGATE_TEST_PC002`
/// or `MEMGATE_TEST_PC14`).
pub fn powercontext(prefix: &str) -> PowerContext {
    let [url, token] = env_vars([&format!("{prefix}_URL"), &format!("{prefix}_TOKEN")]);
    PowerContext {
        url,
        token,
        scope_id: std::env::var(format!("{prefix}_SCOPE_ID"))
            .ok()
            .filter(|v| !v.is_empty()),
    }
}

/// The private PostgreSQL cluster's DSN.
pub fn postgres_dsn() -> String {
    let [dsn] = env_vars(["MEMGATE_TEST_POSTGRES_DSN"]);
    dsn
}

/// A PostgreSQL schema name no other test, process or earlier run uses
/// (tests share one database, each in a schema of its own).
pub fn unique_schema(label: &str) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos()
        % 1_000_000_000_000;
    format!(
        "t_{label}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Panics unless the program `name` runs (`name -V`), naming the package
/// that provides it.
pub fn tool(name: &str, package: &str) {
    let runs = Command::new(name)
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        runs,
        "this test needs {name} (apt-get install -y {package})"
    );
}
