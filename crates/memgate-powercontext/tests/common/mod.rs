//! Shared test helpers: injected environments, log capture, and the
//! skip/require rule for real servers.

#![allow(dead_code)]

pub mod fake;

use memgate_core::setup::EnvSource;
use memgate_core::BackendContext;
use memgate_powercontext::settings::*;
use memgate_powercontext::{PowerContextBackend, Settings};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

pub const OWNER: &str = "user-7f3a";

/// An environment source holding exactly `pairs`.
pub fn env_source(pairs: &[(&str, String)]) -> EnvSource {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    Arc::new(move |name: &str| map.get(name).cloned())
}

/// The binding variables for a server, plus any overrides.
pub fn binding(
    base_url: &str,
    token: &str,
    scope_id: &str,
    overrides: &[(&str, &str)],
) -> Vec<(&'static str, String)> {
    let mut pairs: Vec<(&'static str, String)> = vec![
        (ENV_BASE_URL, base_url.to_owned()),
        (ENV_OWNER_USER_ID, OWNER.to_owned()),
        (ENV_SCOPE_ID, scope_id.to_owned()),
        (ENV_TOKEN, token.to_owned()),
    ];
    for (k, v) in overrides {
        let name = ENV_VARS.iter().find(|n| *n == k).expect("known variable");
        pairs.retain(|(n, _)| n != name);
        pairs.push((name, v.to_string()));
    }
    pairs
}

pub fn context(pairs: &[(&'static str, String)]) -> BackendContext {
    BackendContext::new("/tmp/memgate-powercontext-tests").with_env(env_source(pairs))
}

/// A backend through the factory seam (`backend_config: {}`).
pub fn backend(pairs: &[(&'static str, String)]) -> PowerContextBackend {
    PowerContextBackend::from_backend_config(&serde_json::Map::new(), &context(pairs))
        .expect("backend builds")
}

pub fn settings(pairs: &[(&'static str, String)]) -> Arc<Settings> {
    let source = env_source(pairs);
    Arc::new(Settings::from_env(|n| source(n)).expect("valid settings"))
}

/// Captures every tracing event of the current thread into a string.
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone)]
struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl Write for BufferWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Starts capturing (TRACE and up, every target) on this thread; use with
    /// a current-thread runtime so spawned tasks log here too.
    pub fn start() -> Self {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = BufferWriter(buffer.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        LogCapture {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}

/// Fails the test if `secret` occurs in any of `texts`.
pub fn assert_no_secret(secret: &str, texts: &[&str]) {
    for text in texts {
        assert!(!text.contains(secret), "secret leaked into: {text}");
    }
}

/// A real PowerContext generation from testkit/ (tests that use it are
/// `#[ignore]`d, so a plain `cargo test` shows them as ignored).
#[allow(unused_imports)] // each test binary uses its own part of `common`
pub use memgate_testsupport::real::{powercontext as real_server, PowerContext as RealServer};

/// A name unique to this test run.
pub fn unique(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{label}-{}-{nanos}", std::process::id())
}
