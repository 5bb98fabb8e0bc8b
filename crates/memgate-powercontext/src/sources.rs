//! Opt-in Source capture (RFC §7, memgate's addition): finished turns and
//! compaction heads become incremental `POST /v1/sources/content` writes.
//!
//! - **Off by default.** `backend_config.source_capture.enabled: true` turns
//!   it on; otherwise passive capture stays the explicit no-op.
//! - **One Source per message.** A host message id names one finished
//!   message, which never changes, so its Source never needs rewriting. A
//!   per-turn Source would grow as a turn gains tool results and replies,
//!   and a changed body under the same id is a `409 source_conflict`. Per
//!   message, a compaction head (the same messages, the same ids) maps to
//!   the very Sources its turns already sent: nothing is sent twice.
//! - **Identity.** `memgate-msg:` + SHA-256 of (installation, user, thread,
//!   host message id): stable across restarts, namespaced so two
//!   installations or threads never share an id, never a text hash. A
//!   message without a host id has no stable identity and is **not sent**
//!   (counted as filtered): a text-derived id would turn an edit into a new
//!   Source and a replay into a conflict.
//! - **Filter.** Hidden messages (unless the host's keep-hook keeps them),
//!   memgate's own injected memory, system text, compaction summaries,
//!   tool results unless `tool_results: true`, and messages with no text
//!   (an AI message that only calls tools). Only the readable text is sent:
//!   reasoning blocks, `additional_kwargs` and tool-call arguments never
//!   are. memgate-redact runs before anything is queued or sent.
//! - **Acceptance is not Memory.** A 202 means PowerContext took the Source;
//!   whether it ever becomes Memory depends on its model and scheduler.

use crate::owner;
use crate::settings::Settings;
use memgate_core::capture::is_captureable;
use memgate_core::signature::sha256_hex;
use memgate_core::{KeepHiddenHook, MemoryError, Message, Redactor, Result, RoleKind};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `backend_config` key of this feature.
pub const CONFIG_KEY: &str = "source_capture";
/// The server's limit on `content` (characters).
pub const MAX_CONTENT_CHARS: usize = 200_000;
/// The prefix of every Source id memgate writes.
pub const SOURCE_ID_PREFIX: &str = "memgate-msg:";

/// `backend_config.source_capture`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceCapture {
    pub enabled: bool,
    /// Queue bound: entries.
    pub max_entries: u64,
    /// Queue bound: age of the oldest entry.
    pub max_age: Duration,
    /// Send tool results (`tool` messages) too.
    pub tool_results: bool,
    /// The installation namespace of Source ids; generated once under the
    /// storage path when not configured.
    pub installation_id: Option<String>,
}

impl Default for SourceCapture {
    fn default() -> Self {
        Self {
            enabled: false,
            max_entries: 10_000,
            max_age: Duration::from_secs(604_800),
            tool_results: false,
            installation_id: None,
        }
    }
}

fn config_error(key: &str, rule: &str) -> MemoryError {
    MemoryError::Config(format!("backend_config.{CONFIG_KEY}.{key} {rule}"))
}

impl SourceCapture {
    /// Reads `backend_config.source_capture` (absent → off); every error
    /// names the key and the rule.
    pub fn from_config(value: Option<&Value>) -> Result<Self> {
        let mut out = Self::default();
        let Some(value) = value else {
            return Ok(out);
        };
        let Some(map) = value.as_object() else {
            return Err(MemoryError::Config(format!(
                "backend_config.{CONFIG_KEY} must be an object"
            )));
        };
        let bool_of = |key: &str, v: &Value| {
            v.as_bool()
                .ok_or_else(|| config_error(key, "must be true or false"))
        };
        let int_in = |key: &str, v: &Value, lo: u64, hi: u64| {
            v.as_u64()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| config_error(key, &format!("must be between {lo} and {hi}")))
        };
        for (key, v) in map {
            match key.as_str() {
                "enabled" => out.enabled = bool_of(key, v)?,
                "tool_results" => out.tool_results = bool_of(key, v)?,
                "max_entries" => out.max_entries = int_in(key, v, 1, 1_000_000)?,
                "max_age_seconds" => {
                    out.max_age = Duration::from_secs(int_in(key, v, 60, 31_536_000)?)
                }
                "installation_id" => {
                    let id = v
                        .as_str()
                        .filter(|s| valid_installation_id(s))
                        .ok_or_else(|| {
                            config_error(key, "must be 1-128 characters of A-Z a-z 0-9 . _ : -")
                        })?;
                    out.installation_id = Some(id.to_owned());
                }
                other => {
                    return Err(config_error(
                        other,
                        "is not a source_capture setting (known: enabled, max_entries, \
                         max_age_seconds, tool_results, installation_id)",
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The queue file under a storage root.
    pub fn outbox_path(storage_path: &Path) -> PathBuf {
        storage_path.join("powercontext").join("sources.sqlite3")
    }
}

fn valid_installation_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// The installation namespace: the configured one, else the one generated
/// at the first start under `storage_path` (`powercontext/installation_id`,
/// `0600`), so ids stay the same across restarts of this installation.
pub fn installation_id(config: &SourceCapture, storage_path: &Path) -> Result<String> {
    if let Some(id) = &config.installation_id {
        return Ok(id.clone());
    }
    let path = storage_path.join("powercontext").join("installation_id");
    let io = |e: std::io::Error| {
        MemoryError::Backend(format!("installation id {}: {e}", path.display()))
    };
    match std::fs::read_to_string(&path) {
        Ok(text) if valid_installation_id(text.trim()) => return Ok(text.trim().to_owned()),
        Ok(_) => {
            return Err(MemoryError::Corruption(format!(
                "installation id {} is not 1-128 characters of A-Z a-z 0-9 . _ : -; \
                 Source ids depend on it, so it is never replaced",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(io)?;
    let id = random_id().map_err(io)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(&path) {
        Ok(mut file) => {
            use std::io::Write;
            file.write_all(id.as_bytes()).map_err(io)?;
            file.sync_all().map_err(io)?;
            Ok(id)
        }
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            installation_id(config, storage_path)
        }
        Err(e) => Err(io(e)),
    }
}

fn random_id() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(memgate_core::signature::hex(&bytes))
}

/// Where a conversation's Sources live: installation, user and thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    installation: String,
    user: String,
    thread: String,
}

impl Namespace {
    pub fn new(installation: &str, user: &str, thread: &str) -> Self {
        Self {
            installation: installation.to_owned(),
            user: user.to_owned(),
            thread: thread.to_owned(),
        }
    }

    fn digest(&self, parts: &[&str]) -> String {
        let mut text = String::from("memgate-source-v1");
        for part in [&self.installation, &self.user, &self.thread]
            .into_iter()
            .map(String::as_str)
            .chain(parts.iter().copied())
        {
            // Length-prefixed: no two different tuples share a text.
            text.push_str(&format!("\u{0}{}:{part}", part.len()));
        }
        sha256_hex(text.as_bytes())
    }

    /// The queue's stream for this thread (order is kept per stream).
    pub fn stream(&self) -> String {
        format!("thread:{}", &self.digest(&[])[..32])
    }

    /// The Source id of one host message.
    pub fn source_id(&self, message_id: &str) -> String {
        format!("{SOURCE_ID_PREFIX}{}", self.digest(&[message_id]))
    }
}

/// One message turned into the exact `POST /v1/sources/content` body.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceWrite {
    pub source_id: String,
    pub body: Value,
    /// SHA-256 of the body: a changed body under a known id is detected
    /// locally, without a request.
    pub digest: String,
}

/// Why a message is not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    Hidden,
    InjectedMemory,
    System,
    Summary,
    ToolData,
    NoText,
    NoHostId,
    TooLong,
    Secret,
}

/// What capture sends and what it leaves out.
pub struct SourcePlan {
    pub writes: Vec<SourceWrite>,
    pub left_out: Vec<Left>,
}

/// Builds the Source writes for a capture's messages, filtered and redacted.
pub fn plan(
    messages: &[Message],
    namespace: &Namespace,
    scope_id: &str,
    config: &SourceCapture,
    keep_hidden: Option<&KeepHiddenHook>,
    redactor: &Redactor,
) -> SourcePlan {
    let mut out = SourcePlan {
        writes: Vec::new(),
        left_out: Vec::new(),
    };
    for message in messages {
        match source_write(message, namespace, scope_id, config, keep_hidden, redactor) {
            Ok(write) => out.writes.push(write),
            Err(why) => out.left_out.push(why),
        }
    }
    out
}

fn source_write(
    message: &Message,
    namespace: &Namespace,
    scope_id: &str,
    config: &SourceCapture,
    keep_hidden: Option<&KeepHiddenHook>,
    redactor: &Redactor,
) -> std::result::Result<SourceWrite, Left> {
    if message.is_injected_memory() {
        return Err(Left::InjectedMemory);
    }
    if !is_captureable(message, keep_hidden) {
        return Err(Left::Hidden);
    }
    if message.is_summary() {
        return Err(Left::Summary);
    }
    let role = match message.role.kind() {
        RoleKind::Human => "user",
        RoleKind::Ai => "assistant",
        RoleKind::Tool if config.tool_results => "tool",
        RoleKind::Tool => return Err(Left::ToolData),
        RoleKind::System | RoleKind::Other => return Err(Left::System),
    };
    let text = message.text();
    if text.trim().is_empty() {
        return Err(Left::NoText);
    }
    let Some(id) = message.id.as_deref().filter(|id| !id.trim().is_empty()) else {
        return Err(Left::NoHostId);
    };
    let redaction = redactor.redact(&text);
    if redaction.is_mostly_secret() {
        return Err(Left::Secret);
    }
    let content = format!("[{role}]\n{}", redaction.text);
    if content.chars().count() > MAX_CONTENT_CHARS {
        return Err(Left::TooLong);
    }
    let source_id = namespace.source_id(id);
    // Metadata holds only what is the same on every capture of this
    // message (never the capture kind): a different body is a conflict.
    let body = json!({
        "scope_id": scope_id,
        "source_id": source_id,
        "content": content,
        "metadata": {"origin": "memgate", "kind": "memgate-message", "role": role},
    });
    let digest = body_digest(&body);
    Ok(SourceWrite {
        source_id,
        body,
        digest,
    })
}

/// SHA-256 of a body as sent; the ledger keeps it per Source id.
pub fn body_digest(body: &Value) -> String {
    sha256_hex(serde_json::to_string(body).unwrap_or_default().as_bytes())
}

/// The namespace of a capture, or why it sends nothing: only the owner's
/// conversations with a thread id are captured.
pub fn namespace_for(
    settings: &Settings,
    installation: &str,
    caller: &memgate_core::Caller,
) -> Result<Option<Namespace>> {
    owner::admit(settings, &caller.user)?;
    Ok(caller
        .thread
        .as_deref()
        .filter(|t| !t.trim().is_empty())
        .map(|thread| Namespace::new(installation, caller.user.as_str(), thread)))
}

/// Whether a queued body reads back as a Source write.
pub fn check_body(body: &Value) -> std::result::Result<(), String> {
    let ok = body.as_object().is_some_and(|m: &Map<String, Value>| {
        ["scope_id", "source_id", "content"]
            .iter()
            .all(|k| m.get(*k).is_some_and(Value::is_string))
    });
    if ok {
        Ok(())
    } else {
        Err("the body must be a Source write (scope_id, source_id, content strings)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::ToolCall;

    fn ns() -> Namespace {
        Namespace::new("inst-a", "alice", "t1")
    }

    fn plan_of(messages: &[Message], config: &SourceCapture) -> SourcePlan {
        plan(messages, &ns(), "scope", config, None, &Redactor::default())
    }

    #[test]
    fn ids_are_namespaced_by_installation_user_and_thread() {
        let id = ns().source_id("m1");
        assert!(id.starts_with(SOURCE_ID_PREFIX) && id.len() <= 256, "{id}");
        assert_eq!(id, ns().source_id("m1"), "stable");
        for other in [
            Namespace::new("inst-b", "alice", "t1"),
            Namespace::new("inst-a", "bob", "t1"),
            Namespace::new("inst-a", "alice", "t2"),
        ] {
            assert_ne!(other.source_id("m1"), id, "{other:?}");
        }
        assert_ne!(ns().source_id("m2"), id);
        // Length-prefixed parts: shifting a separator changes the id.
        assert_ne!(
            Namespace::new("a", "b:c", "d").source_id("e"),
            Namespace::new("a", "b", "c:d").source_id("e")
        );
    }

    #[test]
    fn the_filter_leaves_out_hidden_injected_system_summary_tool_and_idless_messages() {
        let messages = vec![
            Message::system("You are helpful").with_id("s1"),
            Message::human("<memory>")
                .with_id("x__memory")
                .with_flag("hide_from_ui", true),
            Message::human("reminder")
                .with_id("r1")
                .with_flag("hide_from_ui", true),
            Message::human("summary of before")
                .with_id("sum")
                .with_name("summary"),
            Message::tool("tool output", "call-1").with_id("t1"),
            Message::ai("")
                .with_id("a0")
                .with_tool_calls(vec![ToolCall::new(
                    "search",
                    json!({"q": "x"}),
                    Some("call-1".into()),
                )]),
            Message::human("no id here"),
            Message::human("We deploy on Fridays").with_id("h1"),
            Message::ai("Noted").with_id("a1"),
        ];
        let p = plan_of(&messages, &SourceCapture::default());
        let contents: Vec<&str> = p
            .writes
            .iter()
            .map(|w| w.body["content"].as_str().unwrap())
            .collect();
        assert_eq!(
            contents,
            ["[user]\nWe deploy on Fridays", "[assistant]\nNoted"]
        );
        assert_eq!(
            p.left_out,
            [
                Left::System,
                Left::InjectedMemory,
                Left::Hidden,
                Left::Summary,
                Left::ToolData,
                Left::NoText,
                Left::NoHostId
            ]
        );
        let with_tools = SourceCapture {
            tool_results: true,
            ..Default::default()
        };
        let p = plan_of(&messages, &with_tools);
        assert!(p
            .writes
            .iter()
            .any(|w| w.body["content"] == "[tool]\ntool output"));
    }

    #[test]
    fn secrets_are_redacted_and_the_body_is_exact_and_stable() {
        let key = "sk-proj-Pc7vQ2mN7pL4kR8sT1wY6uB3cF5hJ0aDgEx9Zt3LmN0vXr5YpK2wHc9JbD4sFg";
        let m = Message::human(format!("the key {key} is in the vault")).with_id("h1");
        let a = plan_of(std::slice::from_ref(&m), &SourceCapture::default());
        let b = plan_of(&[m], &SourceCapture::default());
        let w = &a.writes[0];
        assert!(!w.body.to_string().contains(key), "{}", w.body);
        assert!(w.body["content"].as_str().unwrap().contains("[redacted:"));
        assert_eq!(w.body["metadata"]["kind"], "memgate-message");
        assert_ne!(w.body["metadata"]["kind"], "working_note");
        assert_eq!(
            a.writes, b.writes,
            "same message, same id, same body, same digest"
        );
        let edited = plan_of(
            &[Message::human("the key is elsewhere").with_id("h1")],
            &SourceCapture::default(),
        );
        assert_eq!(edited.writes[0].source_id, w.source_id);
        assert_ne!(edited.writes[0].digest, w.digest);
    }

    #[test]
    fn config_is_off_by_default_and_every_key_is_checked() {
        assert_eq!(
            SourceCapture::from_config(None).unwrap(),
            SourceCapture::default()
        );
        assert!(!SourceCapture::default().enabled);
        let on = SourceCapture::from_config(Some(&json!({
            "enabled": true, "max_entries": 5, "max_age_seconds": 60,
            "tool_results": true, "installation_id": "deerflow-prod"
        })))
        .unwrap();
        assert!(on.enabled && on.tool_results && on.max_entries == 5);
        for (bad, why) in [
            (
                json!({"enabled": "yes"}),
                "source_capture.enabled must be true or false",
            ),
            (
                json!({"max_entries": 0}),
                "source_capture.max_entries must be between",
            ),
            (
                json!({"max_age_seconds": 1}),
                "source_capture.max_age_seconds must be between",
            ),
            (
                json!({"installation_id": "a b"}),
                "source_capture.installation_id must be",
            ),
            (
                json!({"bogus": 1}),
                "source_capture.bogus is not a source_capture setting",
            ),
            (json!(true), "source_capture must be an object"),
        ] {
            let err = SourceCapture::from_config(Some(&bad)).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn the_generated_installation_id_is_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let config = SourceCapture::default();
        let first = installation_id(&config, dir.path()).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(installation_id(&config, dir.path()).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.path().join("powercontext").join("installation_id");
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let configured = SourceCapture {
            installation_id: Some("prod-1".into()),
            ..Default::default()
        };
        assert_eq!(installation_id(&configured, dir.path()).unwrap(), "prod-1");
    }
}
