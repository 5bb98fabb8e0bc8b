//! Running the real `memgate` binary in a test's own home, shared by the
//! binary's test suites.

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_memgate");

/// Runs `memgate` in `home` (whose `config.yaml`, if any, is the config) with
/// its state under `home/state` and none of the caller's memgate variables.
pub fn memgate(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_USER")
        .env_remove("MEMGATE_AGENT")
        .output()
        .expect("run memgate")
}
