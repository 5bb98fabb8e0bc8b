//! The hash-only transcript cursor.
//!
//! Hosts hand a backend the *whole* transcript after every turn (and the head
//! about to be compacted away before compaction). A backend that forwards
//! turns to a server must send each message once, so it remembers what it has
//! already submitted, per conversation, in a small JSON file that holds only
//! message signatures and counters — never message text:
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "submitted_signatures": ["…64 hex…", …],
//!   "commit_pending": false,
//!   "submitted_prefix_count": 12,
//!   "submitted_prefix_digest": "…64 hex…"
//! }
//! ```
//!
//! - `submitted_signatures` is a sliding window of the last N confirmed
//!   signatures, oldest first (N = the backend's `max_seen_message_ids`);
//! - `submitted_prefix_count` / `submitted_prefix_digest` describe the
//!   transcript prefix known to be fully handled ([`sequence_digest`]);
//! - `commit_pending` says messages were written but their commit did not
//!   complete, so the next capture retries the commit first.
//!
//! The format and the matching rules are DeerFlow's OpenViking cursor
//! (`deerflow-memory-contract` §5.8–5.9), so files are interchangeable with
//! it. Unlike the original, a save is durable before it returns: temp file,
//! fsync, rename, fsync of the directory. A cursor that cannot be read fails
//! closed ([`CursorError`]): replaying an unknown prefix would copy a private
//! conversation again.

use crate::message::truthy;
use crate::signature::sequence_digest;
use serde_json::{Map, Value};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The only schema version this code reads and writes.
pub const CURSOR_SCHEMA_VERSION: u64 = 1;

/// What a cursor file records about one conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TranscriptCursor {
    /// False for "no cursor yet": a missing file or an empty JSON object.
    pub recorded: bool,
    /// The last confirmed signatures, oldest first.
    pub submitted_signatures: Vec<String>,
    /// Messages were written but their commit did not complete.
    pub commit_pending: bool,
    /// Length of the transcript prefix known to be fully handled.
    pub submitted_prefix_count: Option<u64>,
    /// [`sequence_digest`] of that prefix.
    pub submitted_prefix_digest: Option<String>,
}

/// Why a cursor file cannot be trusted. Either way the caller must refuse to
/// capture rather than guess what was already sent.
#[derive(Debug)]
pub enum CursorError {
    /// The file exists but cannot be read or is not JSON.
    Unreadable(String),
    /// The file is JSON but not a cursor (not an object, or another schema).
    Invalid(String),
}

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorError::Unreadable(why) => write!(f, "cursor is unreadable: {why}"),
            CursorError::Invalid(why) => write!(f, "cursor is invalid: {why}"),
        }
    }
}

impl std::error::Error for CursorError {}

impl TranscriptCursor {
    /// Parses a cursor file's bytes. Fields of an unexpected type are read the
    /// way the original reads them: non-string window entries are skipped, a
    /// prefix count that is not a non-negative integer or a digest that is
    /// not a string counts as absent, and `commit_pending` is truthiness.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CursorError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| CursorError::Unreadable(format!("not JSON ({e})")))?;
        let Value::Object(obj) = value else {
            return Err(CursorError::Invalid("not a JSON object".into()));
        };
        Self::from_object(&obj)
    }

    fn from_object(obj: &Map<String, Value>) -> Result<Self, CursorError> {
        match obj.get("schema_version") {
            None => {}
            Some(Value::Number(n)) if n.as_u64() == Some(CURSOR_SCHEMA_VERSION) => {}
            Some(other) => {
                return Err(CursorError::Invalid(format!(
                    "schema_version {other} is not {CURSOR_SCHEMA_VERSION}"
                )))
            }
        }
        let submitted_signatures = match obj.get("submitted_signatures") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Self {
            recorded: !obj.is_empty(),
            submitted_signatures,
            commit_pending: obj.get("commit_pending").is_some_and(truthy),
            submitted_prefix_count: obj.get("submitted_prefix_count").and_then(Value::as_u64),
            submitted_prefix_digest: obj
                .get("submitted_prefix_digest")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// The file body: two-space indented JSON with the keys in schema order.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(160 + self.submitted_signatures.len() * 72);
        out.push_str("{\n  \"schema_version\": 1,\n  \"submitted_signatures\": ");
        if self.submitted_signatures.is_empty() {
            out.push_str("[]");
        } else {
            out.push('[');
            for (i, sig) in self.submitted_signatures.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("\n    ");
                push_json_string(&mut out, sig);
            }
            out.push_str("\n  ]");
        }
        out.push_str(",\n  \"commit_pending\": ");
        out.push_str(if self.commit_pending { "true" } else { "false" });
        out.push_str(",\n  \"submitted_prefix_count\": ");
        match self.submitted_prefix_count {
            Some(n) => out.push_str(&n.to_string()),
            None => out.push_str("null"),
        }
        out.push_str(",\n  \"submitted_prefix_digest\": ");
        match &self.submitted_prefix_digest {
            Some(d) => push_json_string(&mut out, d),
            None => out.push_str("null"),
        }
        out.push_str("\n}");
        out
    }

    /// How much of `signatures` (the current transcript) was already
    /// submitted, or `None` when that cannot be told from the prefix, which
    /// sends the caller to the set-difference fallback.
    ///
    /// 1. A recorded prefix that fits the transcript decides alone: its
    ///    length when the digest matches, else `None`.
    /// 2. Otherwise (the transcript shrank through compaction, or there is no
    ///    prefix) the window is searched as one contiguous run, right-most
    ///    offset first; a match ends at the returned count.
    /// 3. No cursor yet: 0. Anything else: `None`.
    pub fn matching_prefix_count<S: AsRef<str>>(&self, signatures: &[S]) -> Option<usize> {
        if let (Some(count), Some(digest)) =
            (self.submitted_prefix_count, &self.submitted_prefix_digest)
        {
            if let Ok(count) = usize::try_from(count) {
                if count <= signatures.len() {
                    return (sequence_digest(&signatures[..count]) == *digest).then_some(count);
                }
            }
        }
        let window = &self.submitted_signatures;
        if !window.is_empty() && window.len() <= signatures.len() {
            let w = window.len();
            for start in (0..=signatures.len() - w).rev() {
                let candidate = &signatures[start..start + w];
                if candidate
                    .iter()
                    .zip(window)
                    .all(|(a, b)| a.as_ref() == b.as_str())
                {
                    return Some(start + w);
                }
            }
        }
        if self.recorded {
            None
        } else {
            Some(0)
        }
    }

    /// The cursor after a capture confirmed `newly_submitted`: the window
    /// grows by them and keeps its last `max_seen` entries; with
    /// `Some(prefix)` the prefix fields describe `prefix`, with `None` they are
    /// kept as they were (even when null).
    pub fn advanced<S: AsRef<str>>(
        &self,
        prefix: Option<&[S]>,
        newly_submitted: &[S],
        max_seen: usize,
        commit_pending: bool,
    ) -> Self {
        let total = self.submitted_signatures.len() + newly_submitted.len();
        let skip = total.saturating_sub(max_seen);
        let window: Vec<String> = self
            .submitted_signatures
            .iter()
            .map(String::as_str)
            .chain(newly_submitted.iter().map(AsRef::as_ref))
            .skip(skip)
            .map(str::to_owned)
            .collect();
        let (count, digest) = match prefix {
            Some(p) => (Some(p.len() as u64), Some(sequence_digest(p))),
            None => (
                self.submitted_prefix_count,
                self.submitted_prefix_digest.clone(),
            ),
        };
        Self {
            recorded: true,
            submitted_signatures: window,
            commit_pending,
            submitted_prefix_count: count,
            submitted_prefix_digest: digest,
        }
    }

    /// The same cursor with `commit_pending` set as given.
    pub fn with_commit_pending(&self, commit_pending: bool) -> Self {
        Self {
            recorded: true,
            commit_pending,
            ..self.clone()
        }
    }
}

/// A JSON string; signatures (hex) are copied as they are.
fn push_json_string(out: &mut String, s: &str) {
    if s.bytes().all(|b| b.is_ascii_alphanumeric()) {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::String(s.to_owned()).to_string());
    }
}

/// Reads the cursor at `path`; a missing file is "no cursor yet".
pub fn load_cursor(path: &Path) -> Result<TranscriptCursor, CursorError> {
    match fs::read(path) {
        Ok(bytes) => TranscriptCursor::from_json(&bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(TranscriptCursor::default()),
        Err(e) => Err(CursorError::Unreadable(e.kind().to_string())),
    }
}

static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The temp file a save writes first: `<dir>/<stem>.<pid>.<sequence>.tmp`
/// (the `.json` suffix replaced, not appended to). The sequence number is
/// unique within the process, so concurrent writers never share a temp file.
pub fn temp_path_for(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cursor".to_owned());
    let seq = TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!("{stem}.{}.{seq}.tmp", std::process::id()))
}

/// Writes `cursor` to `path` durably: parent directories created, body
/// written to a temp file and fsynced, renamed over the target, and the
/// directory fsynced so the rename itself survives a crash. The temp file is
/// removed if anything fails; the previous cursor is then left untouched.
pub fn save_cursor(path: &Path, cursor: &TranscriptCursor) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir)?;
    let temp = temp_path_for(path);
    let result = write_and_rename(&temp, path, cursor.to_json().as_bytes());
    if result.is_err() {
        if let Err(e) = fs::remove_file(&temp) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::debug!(error = %e, "could not remove cursor temp file");
            }
        }
        return result;
    }
    sync_dir(dir)
}

fn write_and_rename(temp: &Path, target: &Path, body: &[u8]) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)?;
    file.write_all(body)?;
    file.sync_all()?;
    drop(file);
    fs::rename(temp, target)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigs(prefix: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| crate::signature::sha256_hex(format!("{prefix}{i}").as_bytes()))
            .collect()
    }

    #[test]
    fn no_cursor_matches_nothing_yet() {
        let c = TranscriptCursor::default();
        assert_eq!(c.matching_prefix_count(&sigs("h", 3)), Some(0));
        let empty_object = TranscriptCursor::from_json(b"{}").unwrap();
        assert!(!empty_object.recorded);
        assert_eq!(empty_object.matching_prefix_count(&sigs("h", 3)), Some(0));
    }

    #[test]
    fn recorded_prefix_decides_alone() {
        let all = sigs("h", 5);
        let c = TranscriptCursor::default().advanced(Some(&all[..3]), &all[..3], 512, false);
        assert_eq!(c.matching_prefix_count(&all), Some(3));
        // An edited message inside the prefix: no match and no window search.
        let mut edited = all.clone();
        edited[1] = "x".repeat(64);
        assert_eq!(c.matching_prefix_count(&edited), None);
    }

    #[test]
    fn window_is_searched_right_most_first_after_compaction() {
        let all = sigs("h", 20);
        // A prefix longer than the transcript falls through to the window.
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 4, false);
        assert_eq!(c.submitted_signatures, all[16..].to_vec());
        let mut compacted = all[14..].to_vec();
        compacted.extend(sigs("new", 1));
        assert!(c.submitted_prefix_count.unwrap() as usize > compacted.len());
        assert_eq!(c.matching_prefix_count(&compacted), Some(6));
        // Repeated runs: the right-most occurrence wins.
        let w = vec!["a".to_owned(), "b".to_owned()];
        let c = TranscriptCursor {
            recorded: true,
            submitted_signatures: w,
            ..Default::default()
        };
        let t: Vec<String> = ["a", "b", "c", "a", "b", "d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(c.matching_prefix_count(&t), Some(5));
        let none: Vec<String> = ["c", "d"].iter().map(|s| s.to_string()).collect();
        assert_eq!(c.matching_prefix_count(&none), None);
    }

    #[test]
    fn window_keeps_the_last_max_seen() {
        let all = sigs("h", 40);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 16, false);
        assert_eq!(c.submitted_signatures, all[24..].to_vec());
        let more = sigs("m", 3);
        let c2 = c.advanced(None, &more, 16, true);
        assert_eq!(c2.submitted_signatures.len(), 16);
        assert_eq!(c2.submitted_signatures[13..], more[..]);
        assert_eq!(c2.submitted_prefix_count, Some(40));
        assert_eq!(c2.submitted_prefix_digest, c.submitted_prefix_digest);
        assert!(c2.commit_pending);
    }

    #[test]
    fn file_body_has_schema_key_order() {
        let all = sigs("h", 2);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        let body = c.to_json();
        let keys = [
            "schema_version",
            "submitted_signatures",
            "commit_pending",
            "submitted_prefix_count",
            "submitted_prefix_digest",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| body.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body}");
        assert!(
            body.starts_with("{\n  \"schema_version\": 1,\n  \"submitted_signatures\": [\n    \"")
        );
        let back = TranscriptCursor::from_json(body.as_bytes()).unwrap();
        assert_eq!(back, c);
        let odd = TranscriptCursor {
            submitted_signatures: vec!["a\"b\\é".into()],
            ..c.clone()
        };
        assert_eq!(
            TranscriptCursor::from_json(odd.to_json().as_bytes()).unwrap(),
            odd
        );
        let empty = TranscriptCursor::default().to_json();
        assert!(empty.contains("\"submitted_signatures\": []"));
        assert!(empty.contains("\"submitted_prefix_count\": null"));
    }

    #[test]
    fn unreadable_and_invalid_files_are_told_apart() {
        assert!(matches!(
            TranscriptCursor::from_json(b"not-json"),
            Err(CursorError::Unreadable(_))
        ));
        assert!(matches!(
            TranscriptCursor::from_json(b"[1,2]"),
            Err(CursorError::Invalid(_))
        ));
        assert!(matches!(
            TranscriptCursor::from_json(br#"{"schema_version": 2}"#),
            Err(CursorError::Invalid(_))
        ));
        let odd = TranscriptCursor::from_json(
            br#"{"submitted_signatures": ["a", 3, null], "submitted_prefix_count": -1, "commit_pending": 1}"#,
        )
        .unwrap();
        assert_eq!(odd.submitted_signatures, ["a"]);
        assert_eq!(odd.submitted_prefix_count, None);
        assert!(odd.commit_pending && odd.recorded);
    }

    #[test]
    fn save_is_atomic_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/df_x.json");
        assert_eq!(load_cursor(&path).unwrap(), TranscriptCursor::default());
        let all = sigs("h", 3);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        save_cursor(&path, &c).unwrap();
        assert_eq!(load_cursor(&path).unwrap(), c);
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["df_x.json"]);
        let temp = temp_path_for(&path);
        let name = temp.file_name().unwrap().to_str().unwrap().to_owned();
        let parts: Vec<&str> = name.split('.').collect();
        assert_eq!(parts[0], "df_x");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(parts[2].chars().all(|c| c.is_ascii_digit()));
        assert_eq!(parts[3], "tmp");
    }

    #[cfg(unix)]
    #[test]
    fn failed_save_removes_its_temp_file_and_keeps_the_old_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_y.json");
        let all = sigs("h", 2);
        let old = TranscriptCursor::default().advanced(Some(&all[..1]), &all[..1], 512, false);
        save_cursor(&path, &old).unwrap();
        // Make the rename fail: the target becomes a non-empty directory.
        let blocked = dir.path().join("df_z.json");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("keep"), b"x").unwrap();
        assert!(save_cursor(&blocked, &old).is_err());
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        assert_eq!(load_cursor(&path).unwrap(), old);
    }
}
