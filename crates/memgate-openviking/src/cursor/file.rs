//! The cursor on disk: read (a missing file is no cursor yet) and saved
//! durably through a temp file, or optimistically with a confirmation slot
//! that success fills in place.

use super::intent::Rollback;
use super::{CursorError, TranscriptCursor};
use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

/// Reads the cursor at `path`; a missing file is "no cursor yet".
pub fn load_cursor(path: &Path) -> Result<TranscriptCursor, CursorError> {
    match fs::read(path) {
        Ok(bytes) => TranscriptCursor::from_json(&bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(TranscriptCursor::default()),
        Err(e) => Err(CursorError::Io(e)),
    }
}

static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);
/// Temp files this process is writing right now: the only ones of our pid
/// that are not leftovers.
static WRITING: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Default::default);
/// Cursors whose leftovers this process has swept (once each: a leftover
/// is made by a process that died, and ours saves under the session lock).
static SWEPT: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Default::default);
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// fsync calls made by cursor saves in this process (for tests and the
/// capture bench).
pub fn fsync_count() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}

/// The temp file a save writes first:
/// `<dir>/<stem>.<pid>.<sequence>.<random>.tmp` (the `.json` suffix
/// replaced, not appended to). The random part keeps a later process that
/// got the same pid (pid 1 in a restarted container) off the temp files an
/// earlier, killed one left behind.
pub fn temp_path_for(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cursor".to_owned());
    let seq = TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(seq);
    let random = hasher.finish();
    path.with_file_name(format!(
        "{stem}.{}.{seq}.{random:016x}.tmp",
        std::process::id()
    ))
}

/// How much of a save must be on disk before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveMode {
    /// Body and rename both durable: an intent, or a state nothing else
    /// on disk describes.
    Durable,
    /// Body durable, rename left to the file system: the outcome of a write
    /// whose intent is already durable. Losing the rename in a power cut
    /// leaves the intent, which the next capture reconciles.
    CoveredByIntent,
}

/// Writes `cursor` to `path` durably: parent directories created, body
/// written to a temp file and fsynced, renamed over the target, and the
/// directory fsynced so the rename itself survives a crash. The temp file is
/// removed if anything fails; the previous cursor is then left untouched.
pub fn save_cursor(path: &Path, cursor: &TranscriptCursor) -> io::Result<()> {
    save_cursor_with(path, cursor, SaveMode::Durable)
}

/// [`save_cursor`] with the durability of the rename chosen by `mode`.
pub fn save_cursor_with(path: &Path, cursor: &TranscriptCursor, mode: SaveMode) -> io::Result<()> {
    save_body(path, cursor.to_json().as_bytes(), mode).map(drop)
}

/// A write saved by [`save_optimistic`], not confirmed yet.
#[derive(Debug)]
pub struct Confirmation {
    /// The saved file (open from before its rename, so a later save of the
    /// same path is never written into).
    file: fs::File,
    offset: u64,
    token: String,
}

impl Confirmation {
    /// Records that the write succeeded: the token goes into the slot, in
    /// place. Not fsynced: lost in a power cut, the file reads as before
    /// the write with its intent, which the next capture reconciles.
    pub fn confirm(self) -> io::Result<()> {
        write_at(&self.file, self.token.as_bytes(), self.offset)
    }
}

/// Saves `outcome` (the cursor once its write succeeds, with that write as
/// its intent) durably, as [`save_cursor`] does, with `rollback` to the
/// state the write started from and the unconfirmed slot; see the module
/// documentation.
pub fn save_optimistic(
    path: &Path,
    outcome: &TranscriptCursor,
    rollback: &Rollback,
) -> io::Result<Confirmation> {
    let (body, offset) = outcome.to_json_with(Some(rollback));
    let Some(offset) = offset else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an optimistic cursor needs its intent",
        ));
    };
    let file = save_body(path, body.as_bytes(), SaveMode::Durable)?;
    Ok(Confirmation {
        file,
        offset: offset as u64,
        token: rollback.token.clone(),
    })
}

#[cfg(unix)]
fn write_at(file: &fs::File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(not(unix))]
fn write_at(mut file: &fs::File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(bytes)
}

/// Writes `body` to `path` through a temp file (see [`save_cursor`]) and
/// returns the file, still open.
fn save_body(path: &Path, body: &[u8], mode: SaveMode) -> io::Result<fs::File> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir)?;
    let mut attempts = 0;
    let result = loop {
        let temp = temp_path_for(path);
        let result = write_and_rename(&temp, path, body);
        match result {
            // A leftover with this very name (not ours: never removed).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if attempts == 8 {
                    break Err(e);
                }
                attempts += 1;
            }
            Err(e) => {
                if let Err(e) = fs::remove_file(&temp) {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::debug!(error = %e, "could not remove cursor temp file");
                    }
                }
                break Err(e);
            }
            Ok(file) => break Ok(file),
        }
    };
    let file = result?;
    if mode == SaveMode::Durable {
        sync_dir(dir)?;
    }
    let first = SWEPT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(path.to_owned());
    if first {
        sweep_leftovers(path, dir);
    }
    Ok(file)
}

fn write_and_rename(temp: &Path, target: &Path, body: &[u8]) -> io::Result<fs::File> {
    let writing = || WRITING.lock().unwrap_or_else(|p| p.into_inner());
    writing().insert(temp.to_owned());
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp)?;
        file.write_all(body)?;
        file.sync_all()?;
        FSYNCS.fetch_add(1, Ordering::Relaxed);
        fs::rename(temp, target)?;
        Ok(file)
    })();
    writing().remove(temp);
    result
}

/// Removes the temp files of `path`'s saves (`<stem>.<pid>.<seq>[.<random>].tmp`)
/// that no live writer holds: a process killed mid-save leaves one, and
/// nothing else would ever remove it. A file of our own pid is a leftover
/// unless this process is writing it now; one of another pid only once
/// that process is gone (where that cannot be known, it stays).
fn sweep_leftovers(path: &Path, dir: &Path) {
    let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
        return;
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let own = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| leftover_pid(stem, n)) else {
            continue;
        };
        let temp = entry.path();
        let held = if pid == own {
            WRITING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&temp)
        } else {
            process_may_live(pid)
        };
        if held {
            continue;
        }
        match fs::remove_file(&temp) {
            Ok(()) => tracing::info!(
                file = %temp.display(),
                "removed a cursor temp file a stopped process left behind"
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::debug!(error = %e, "could not remove a cursor temp file"),
        }
    }
}

/// The writer's pid when `name` is a temp file of the cursor `stem`.
fn leftover_pid(stem: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(stem)?.strip_prefix('.')?;
    let rest = rest.strip_suffix(".tmp")?;
    let mut parts = rest.split('.');
    let pid = parts.next()?.parse().ok()?;
    let seq = parts.next()?;
    let random = parts.next();
    let well_formed = !seq.is_empty()
        && seq.bytes().all(|b| b.is_ascii_digit())
        && random.is_none_or(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_hexdigit()))
        && parts.next().is_none();
    well_formed.then_some(pid)
}

/// False only when `pid` is known to have no process.
fn process_may_live(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()?;
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::format::{KEYS, UNCONFIRMED};
    use super::super::testing::{headed, optimistic, sigs, FINGERPRINT};
    use super::*;
    use memgate_core::signature::SequenceHasher;
    use serde_json::{json, Value};

    #[test]
    fn a_cursor_that_cannot_be_read_keeps_the_io_error_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: the read itself fails.
        let err = load_cursor(dir.path()).unwrap_err();
        assert!(matches!(err, CursorError::Io(_)), "{err:?}");
        let source = std::error::Error::source(&err).expect("the I/O error");
        assert!(source.downcast_ref::<io::Error>().is_some());
        assert!(
            err.to_string().starts_with("cursor is unreadable: "),
            "{err}"
        );
    }

    #[test]
    fn an_optimistic_save_reads_as_its_base_until_confirmed_then_as_its_outcome() {
        let all = sigs("o", 40);
        // (window cap, base prefix, transcript): room left, a window that
        // pushes two out, a write longer than the whole window.
        for (max_seen, before, after) in [(512, 3, 7), (16, 16, 18), (16, 4, 30)] {
            let mut base = headed(&all[..before]);
            base = base.advanced(Some(&all[..before]), &[] as &[String], max_seen, false);
            let mut running = SequenceHasher::default();
            running.absorb(&all[..before]);
            base = base.with_prefix_head(FINGERPRINT.into(), &running);
            base.server_total = Some(before as u64);
            let (outcome, rollback) = optimistic(&base, &all[..after], max_seen);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.json");
            // (Its fsyncs are counted exactly by the openviking crate's
            // `capture_fsyncs`, alone in its process.)
            let confirmation = save_optimistic(&path, &outcome, &rollback).unwrap();

            // DeerFlow's keys already hold the outcome.
            let file: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            let expected: Value = serde_json::from_str(&outcome.to_json()).unwrap();
            for key in &KEYS[..5] {
                assert_eq!(file[key], expected[key], "{key}");
            }
            // Unconfirmed: the base, exactly, with the intent.
            let with_intent = TranscriptCursor {
                in_flight: outcome.in_flight.clone(),
                ..base.clone()
            };
            assert_eq!(
                load_cursor(&path).unwrap(),
                with_intent,
                "{max_seen}/{before}/{after}"
            );

            confirmation.confirm().unwrap();
            let confirmed = TranscriptCursor {
                in_flight: None,
                ..outcome.clone()
            };
            assert_eq!(load_cursor(&path).unwrap(), confirmed);
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "one file");
        }
    }

    #[test]
    fn a_confirmation_slot_that_is_not_the_token_reads_as_the_base_and_a_malformed_one_is_refused()
    {
        let all = sigs("t", 6);
        let mut base = headed(&all[..2]);
        base.server_total = Some(2);
        let (outcome, rollback) = optimistic(&base, &all, 512);
        let (body, offset) = outcome.to_json_with(Some(&rollback));
        let offset = offset.unwrap();
        let with_slot = |slot: &str| {
            let mut b = body.clone();
            b.replace_range(offset..offset + 32, slot);
            b
        };
        let read = |b: &str| TranscriptCursor::from_json(b.as_bytes());
        let token = rollback.token.clone();
        let torn = format!("{}{}", &token[..10], &UNCONFIRMED[10..]);
        let other = "0".repeat(32);
        for slot in [UNCONFIRMED, torn.as_str(), other.as_str()] {
            let c = read(&with_slot(slot)).unwrap();
            assert_eq!(c.submitted_prefix_count, Some(2), "{slot:?}");
            assert!(c.in_flight.is_some() && c.prefix_head == base.prefix_head);
        }
        assert!(read(&with_slot(&token)).unwrap().in_flight.is_none());

        let refused = |b: String, why: &str| match read(&b) {
            Err(CursorError::Invalid(m)) => assert!(m.contains(why), "{m}"),
            other => panic!("{why}: {other:?}"),
        };
        refused(with_slot(&token.to_uppercase()), "memgate_confirmed");
        refused(
            with_slot(&format!("{}x", &token[..31])),
            "memgate_confirmed",
        );
        let mut v: Value = serde_json::from_str(&body).unwrap();
        v.as_object_mut().unwrap().remove("memgate_confirmed");
        refused(v.to_string(), "both be present");
        let mut v: Value = serde_json::from_str(&body).unwrap();
        let intent = v["memgate_in_flight"].as_object_mut().unwrap();
        intent.remove("rollback");
        refused(v.to_string(), "window_tail needs a rollback");
        v["memgate_in_flight"]
            .as_object_mut()
            .unwrap()
            .remove("window_tail");
        v["memgate_in_flight"]["signatures"] = json!(all[2..].concat());
        refused(v.to_string(), "both be present");
        let mut v: Value = serde_json::from_str(&body).unwrap();
        v["memgate_in_flight"]["window_tail"] = json!(7);
        refused(v.to_string(), "window_tail");
        for (field, value, why) in [
            ("window_len", json!(9), "window_len"),
            ("window_len", json!(-1), "window_len"),
            ("evicted", json!(vec!["a".repeat(64); 3]), "evicted"),
            ("evicted", json!(["A".repeat(64)]), "evicted"),
            ("token", json!("12"), "token"),
            ("prefix_count", Value::Null, "prefix_count"),
            ("prefix_head", json!({}), "prefix_head"),
            ("commit_pending", json!(0), "commit_pending"),
            ("surprise", json!(1), "surprise"),
        ] {
            let mut v: Value = serde_json::from_str(&body).unwrap();
            v["memgate_in_flight"]["rollback"][field] = value;
            refused(v.to_string(), why);
        }
    }

    #[test]
    fn a_stale_temp_file_never_blocks_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_s.json");
        // Leftovers of a killed process that had our pid, for the next
        // sequence numbers, under the old naming and the new one.
        let pid = std::process::id();
        let next = TEMP_SEQUENCE.load(Ordering::Relaxed);
        for seq in next..next + 4 {
            fs::write(dir.path().join(format!("df_s.{pid}.{seq}.tmp")), b"{").unwrap();
        }
        let c = TranscriptCursor::default().advanced(
            Some(&sigs("h", 1)[..]),
            &sigs("h", 1)[..],
            512,
            false,
        );
        save_cursor(&path, &c).unwrap();
        assert_eq!(load_cursor(&path).unwrap(), c);
        // Two temp names are never the same, even for one sequence number.
        assert_ne!(temp_path_for(&path), temp_path_for(&path));
        let stale = dir.path().join(format!("df_s.{pid}.{next}.tmp"));
        assert!(!stale.exists(), "a leftover no save of ours holds is swept");
    }

    /// A process killed while its temp file is written (a shell that writes
    /// a partial body under its own pid, then waits) leaves the file; the
    /// next save of that cursor removes it, and never the file of a process
    /// still alive, of a save this process is making, or of another cursor.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_next_save_removes_the_temp_file_of_a_killed_writer_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_k.json");
        let writer = |dir: &Path, stem: &str| {
            let script = format!("printf '{{\"partial' > {stem}.$$.7.00ab.tmp; exec sleep 60");
            let child = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(dir)
                .spawn()
                .unwrap();
            let temp = dir.join(format!("{stem}.{}.7.00ab.tmp", child.id()));
            let started = std::time::Instant::now();
            while !temp.exists() {
                assert!(started.elapsed().as_secs() < 10, "the writer did not start");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            (child, temp)
        };
        let (mut killed, killed_temp) = writer(dir.path(), "df_k");
        let (mut alive, alive_temp) = writer(dir.path(), "df_k");
        let (mut other, other_temp) = writer(dir.path(), "df_other");
        killed.kill().unwrap(); // SIGKILL
        killed.wait().unwrap();
        other.kill().unwrap();
        other.wait().unwrap();
        let ours = dir
            .path()
            .join(format!("df_k.{}.99.00cd.tmp", std::process::id()));
        fs::write(&ours, b"{").unwrap();
        WRITING.lock().unwrap().insert(ours.clone());

        let c = TranscriptCursor::default().advanced(
            Some(&sigs("h", 1)[..]),
            &sigs("h", 1)[..],
            512,
            false,
        );
        save_cursor(&path, &c).unwrap();
        WRITING.lock().unwrap().remove(&ours);
        assert!(!killed_temp.exists(), "the killed writer's file is removed");
        assert!(alive_temp.exists(), "a live writer's file stays");
        assert!(ours.exists(), "a save in progress here stays");
        assert!(
            other_temp.exists(),
            "another cursor's file is its own save's to sweep"
        );
        assert_eq!(load_cursor(&path).unwrap(), c);
        alive.kill().unwrap();
        alive.wait().unwrap();
    }

    #[test]
    fn only_temp_names_of_the_cursor_are_leftovers() {
        assert_eq!(leftover_pid("df_a", "df_a.41.7.tmp"), Some(41));
        assert_eq!(leftover_pid("df_a", "df_a.41.7.00ff.tmp"), Some(41));
        for name in [
            "df_a.json",
            "df_ab.41.7.tmp",
            "df_a.41.tmp",
            "df_a.x.7.tmp",
            "df_a.41.7.zz.tmp",
            "df_a.41.7.00ff.1.tmp",
        ] {
            assert_eq!(leftover_pid("df_a", name), None, "{name}");
        }
    }

    #[test]
    fn durable_saves_fsync_twice_and_covered_saves_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_f.json");
        let c = TranscriptCursor::default().advanced(
            Some(&sigs("h", 1)[..]),
            &sigs("h", 1)[..],
            512,
            false,
        );
        let before = fsync_count();
        save_cursor(&path, &c).unwrap();
        let durable = fsync_count() - before;
        save_cursor_with(&path, &c, SaveMode::CoveredByIntent).unwrap();
        let covered = fsync_count() - before - durable;
        // Other tests save in parallel; they can only add.
        assert!(durable >= 2 && covered >= 1, "{durable} {covered}");
        assert_eq!(load_cursor(&path).unwrap(), c);
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
        assert!(parts[3].len() == 16 && parts[3].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(parts[4], "tmp");
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
