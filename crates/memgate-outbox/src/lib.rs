//! # memgate-outbox — the durable queue behind opt-in delivery guarantees
//!
//! A write a remote memory server did not take (down, 5xx, deadline) is
//! acknowledged once it is queued here, and delivered later, in order per
//! stream (an OpenViking session, a PowerContext thread), with backoff.
//! Both remote backends use this one queue; what an entry's body means and
//! how it is delivered stays with the backend.
//!
//! One SQLite file per backend under the storage path, WAL with
//! `synchronous=FULL`: every enqueue, attempt mark and dequeue is fsynced
//! before it returns. Bodies are kept exactly as they would be sent (after
//! memgate-redact), because they cannot be rebuilt once the host's
//! transcript is gone; the file is created `0600`.
//!
//! Full policy: **refuse**. When `max_entries` entries are queued, or the
//! oldest is older than `max_age`, a new entry is refused with an error
//! naming the bound, and counted (`dropped`). Dropping the oldest instead
//! would silently lose writes that were already acknowledged; refusing
//! loses only the one the caller is told about.
//!
//! An optional **ledger** records, per key, what was delivered (a digest of
//! the body and the server's answer), so a producer whose writes carry their
//! own identity (PowerContext Source ids) never sends the same key twice and
//! can tell a changed body under an old key.

use memgate_core::{Figure, MemoryError, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The schema this code reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;
/// First retry delay; doubled per failed attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What a queue is called in errors, config and metrics. Fixed by the
/// backend's code: none of it comes from user text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// In errors and doctor: `OpenViking outbox`.
    pub name: &'static str,
    /// The config section holding the bounds: `outbox`.
    pub config_key: &'static str,
    /// Prefix of the metric names: `memgate_outbox`.
    pub metric_prefix: &'static str,
    /// What one entry is, plural, for help texts: `captures`.
    pub entries: &'static str,
    /// What one stream is, for errors: `session`.
    pub stream: &'static str,
    /// Keep a ledger of delivered keys (and count conflicts).
    pub ledger: bool,
}

/// The bounds of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_entries: u64,
    pub max_age: Duration,
}

/// Checks one entry's body as read back; the message names the rule.
pub type BodyCheck = fn(&Value) -> std::result::Result<(), String>;

/// One queued write.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub id: i64,
    /// Order is kept per stream (column `session_id`).
    pub stream: String,
    /// A short backend-defined label: the OpenViking peer, a Source id
    /// (column `peer`).
    pub tag: String,
    /// Exactly what is sent (column `payloads`).
    pub body: Value,
    /// A number the delivery recorded durably before its first attempt (the
    /// OpenViking session's count; column `base_total`).
    pub mark: Option<u64>,
    /// When the last attempt started (ms since the epoch), for settling.
    pub attempt_ms: Option<u64>,
    /// The cursor intent (`written_ms`) this entry took over, if any.
    pub intent_ms: Option<u64>,
    pub attempts: u64,
    pub enqueued_ms: u64,
}

/// What the ledger remembers about one delivered key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Digest of the body that was delivered under the key.
    pub digest: String,
    /// The server's answer (a journal position), if any.
    pub position: Option<u64>,
    /// The server refused the body as conflicting with what it holds.
    pub conflict: bool,
}

/// What `/metrics` and `doctor` show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueFigures {
    /// Entries queued now.
    pub depth: u64,
    /// Age of the oldest entry, in ms (0 when empty).
    pub oldest_age_ms: u64,
    /// Entries delivered since start.
    pub deliveries: u64,
    /// Failed delivery attempts since start (each is retried later).
    pub retries: u64,
    /// Writes refused by a full queue since start.
    pub dropped: u64,
    /// Entries the server refused as conflicting since start (not resent).
    pub conflicts: u64,
}

impl QueueFigures {
    /// The figures for `/metrics` and `doctor` (fixed names, numbers only:
    /// nothing from a message or a stream can reach them).
    pub fn figures(&self, spec: &QueueSpec) -> Vec<Figure> {
        let (p, what, name) = (spec.metric_prefix, spec.entries, spec.name);
        let mut out = vec![
            Figure::gauge(
                format!("{p}_depth"),
                format!("Queued {what} in the {name}."),
                self.depth,
            ),
            Figure::gauge(
                format!("{p}_oldest_age_seconds"),
                format!("Age of the oldest queued entry in the {name}."),
                self.oldest_age_ms / 1000,
            ),
            Figure::counter(
                format!("{p}_deliveries_total"),
                format!("Queued {what} delivered since start."),
                self.deliveries,
            ),
            Figure::counter(
                format!("{p}_retries_total"),
                "Failed delivery attempts since start (each retried later).",
                self.retries,
            ),
            Figure::counter(
                format!("{p}_dropped_total"),
                format!("{what} refused by a full {name} since start."),
                self.dropped,
            ),
        ];
        if spec.ledger {
            out.push(Figure::counter(
                format!("{p}_conflicts_total"),
                "Entries the server refused as conflicting since start (not resent).",
                self.conflicts,
            ));
        }
        out
    }

    /// One line for `doctor`.
    pub fn summary(&self, spec: &QueueSpec) -> String {
        let conflicts = if spec.ledger {
            format!(", {} conflicts", self.conflicts)
        } else {
            String::new()
        };
        format!(
            "{} queued (oldest {} s), {} delivered, {} retries, {} refused when full{conflicts}",
            self.depth,
            self.oldest_age_ms / 1000,
            self.deliveries,
            self.retries,
            self.dropped,
        )
    }
}

/// The queue. Cheap operations under one connection lock; call from a
/// blocking context.
pub struct Queue {
    path: PathBuf,
    spec: QueueSpec,
    limits: Limits,
    check: BodyCheck,
    conn: Mutex<Connection>,
    deliveries: AtomicU64,
    retries: AtomicU64,
    dropped: AtomicU64,
    conflicts: AtomicU64,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Delay before retry number `attempts` (1-based).
pub fn backoff(attempts: u64) -> Duration {
    let shift = attempts.saturating_sub(1).min(16) as u32;
    FIRST_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

const ENTRIES: &str = "CREATE TABLE entries (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     session_id TEXT NOT NULL,
     peer TEXT NOT NULL,
     payloads TEXT NOT NULL,
     base_total INTEGER,
     attempt_ms INTEGER,
     intent_ms INTEGER,
     attempts INTEGER NOT NULL DEFAULT 0,
     next_ms INTEGER NOT NULL DEFAULT 0,
     enqueued_ms INTEGER NOT NULL
 );
 CREATE INDEX entries_session ON entries(session_id, id);";

const LEDGER: &str = "CREATE TABLE ledger (
     key TEXT PRIMARY KEY,
     digest TEXT NOT NULL,
     position INTEGER,
     conflict INTEGER NOT NULL,
     recorded_ms INTEGER NOT NULL
 );";

impl Queue {
    /// Opens (or creates) the queue. A file that is not exactly this
    /// schema, or fails SQLite's check, is refused: nothing in it is
    /// delivered or replaced.
    pub fn open(path: &Path, spec: QueueSpec, limits: Limits, check: BodyCheck) -> Result<Self> {
        let corrupt = |why: String| corrupt(&spec, path, why);
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| io_err(&spec, path, e))?;
        let existed = path.exists();
        let conn = Connection::open(path).map_err(|e| corrupt(e.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err(&spec, path, e))?;
        }
        let one = |sql: &str| -> Result<i64> {
            conn.query_row(sql, [], |r| r.get(0))
                .map_err(|e| corrupt(e.to_string()))
        };
        let check_text: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| corrupt(e.to_string()))?;
        if check_text != "ok" {
            return Err(corrupt(format!("quick_check: {check_text}")));
        }
        let version = one("PRAGMA user_version")?;
        let tables = one("SELECT count(*) FROM sqlite_master")?;
        if version == 0 && tables == 0 {
            let ledger = if spec.ledger { LEDGER } else { "" };
            conn.execute_batch(&format!(
                "PRAGMA journal_mode=WAL; {ENTRIES} {ledger} PRAGMA user_version = {SCHEMA_VERSION};"
            ))
            .map_err(|e| io_err(&spec, path, e))?;
        } else if version != SCHEMA_VERSION {
            return Err(corrupt(format!(
                "schema_version is {version}, expected {SCHEMA_VERSION}{}",
                if existed { "" } else { " (new file)" }
            )));
        } else if spec.ledger
            && one("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ledger'")?
                != 1
        {
            return Err(corrupt("the ledger table is missing".into()));
        }
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            .map_err(|e| io_err(&spec, path, e))?;
        let queue = Self {
            path: path.to_path_buf(),
            spec,
            limits,
            check,
            conn: Mutex::new(conn),
            deliveries: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
        };
        // Every row must read back exactly; a hand-edited one fails here,
        // not halfway through a delivery.
        queue.select("", &[])?;
        Ok(queue)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn spec(&self) -> &QueueSpec {
        &self.spec
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn io(&self, why: impl std::fmt::Display) -> MemoryError {
        io_err(&self.spec, &self.path, why)
    }

    fn corrupt(&self, why: impl std::fmt::Display) -> MemoryError {
        corrupt(&self.spec, &self.path, why)
    }

    /// Queues `body` behind the stream's earlier entries. Refused when the
    /// queue is full (see the crate doc); the refusal is counted.
    pub fn enqueue(
        &self,
        stream: &str,
        tag: &str,
        body: &Value,
        mark: Option<u64>,
        intent_ms: Option<u64>,
    ) -> Result<i64> {
        let now = now_ms();
        let conn = self.conn();
        let (depth, oldest) = Self::depth_and_oldest(&conn).map_err(|e| self.io(e))?;
        let too_old =
            oldest.is_some_and(|t| now.saturating_sub(t) > self.limits.max_age.as_millis() as u64);
        if depth >= self.limits.max_entries || too_old {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            let key = self.spec.config_key;
            let why = if too_old {
                format!(
                    "its oldest entry is older than {key}.max_age_seconds ({})",
                    self.limits.max_age.as_secs()
                )
            } else {
                format!(
                    "it holds {key}.max_entries ({}) entries",
                    self.limits.max_entries
                )
            };
            return Err(MemoryError::Backend(format!(
                "{} is full: {why}; the write was not queued ({}={stream})",
                self.spec.name, self.spec.stream
            )));
        }
        let text = serde_json::to_string(body).map_err(|e| self.io(e))?;
        conn.execute(
            "INSERT INTO entries (session_id, peer, payloads, base_total, attempt_ms, intent_ms, enqueued_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                stream,
                tag,
                text,
                mark.map(|v| v as i64),
                // An entry taken over from a cursor intent settles from the
                // intent's time.
                intent_ms.map(|v| v as i64),
                intent_ms.map(|v| v as i64),
                now as i64
            ],
        )
        .map_err(|e| self.io(e))?;
        Ok(conn.last_insert_rowid())
    }

    fn select(&self, filter: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<Entry>> {
        let conn = self.conn();
        let sql = format!(
            "SELECT id, session_id, peer, payloads, base_total, attempt_ms, intent_ms, attempts, enqueued_ms
             FROM entries {filter} ORDER BY id"
        );
        let mut stmt = conn.prepare(&sql).map_err(|e| self.corrupt(e))?;
        let rows = stmt
            .query_map(args, RawEntry::read)
            .map_err(|e| self.corrupt(e))?;
        let mut out = Vec::new();
        for row in rows {
            let raw = row.map_err(|e| self.corrupt(e))?;
            out.push(raw.parse(self.check).map_err(|why| self.corrupt(why))?);
        }
        Ok(out)
    }

    /// The stream's entries, oldest first.
    pub fn stream_entries(&self, stream: &str) -> Result<Vec<Entry>> {
        self.select("WHERE session_id = ?1", &[&stream])
    }

    /// Whether an entry with this tag is queued in the stream.
    pub fn is_queued(&self, stream: &str, tag: &str) -> Result<bool> {
        self.conn()
            .query_row(
                "SELECT 1 FROM entries WHERE session_id = ?1 AND peer = ?2 LIMIT 1",
                params![stream, tag],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| self.io(e))
    }

    /// Streams whose oldest entry is due for an attempt at `now`.
    pub fn due_streams(&self, now: u64) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT session_id FROM entries e WHERE id = (
                     SELECT min(id) FROM entries WHERE session_id = e.session_id)
                 AND next_ms <= ?1 ORDER BY id",
            )
            .map_err(|e| self.io(e))?;
        let rows = stmt
            .query_map([now as i64], |r| r.get::<_, String>(0))
            .map_err(|e| self.io(e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| self.io(e))
    }

    /// Records, durably and before anything is sent, the number the attempt
    /// starts from.
    pub fn mark_attempt(&self, id: i64, mark: u64) -> Result<()> {
        self.conn()
            .execute(
                "UPDATE entries SET base_total = ?2, attempt_ms = ?3 WHERE id = ?1",
                params![id, mark as i64, now_ms() as i64],
            )
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    /// The entry is on the server: remove it.
    pub fn delivered(&self, id: i64) -> Result<()> {
        self.conn()
            .execute("DELETE FROM entries WHERE id = ?1", [id])
            .map_err(|e| self.io(e))?;
        self.deliveries.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The server answered the entry (taken, or refused as a conflict):
    /// remove it and record the key's outcome, in one transaction.
    pub fn settle(&self, id: i64, key: &str, recorded: &Recorded) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.io(e))?;
        tx.execute("DELETE FROM entries WHERE id = ?1", [id])
            .map_err(|e| self.io(e))?;
        tx.execute(
            "INSERT OR REPLACE INTO ledger (key, digest, position, conflict, recorded_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                key,
                recorded.digest,
                recorded.position.map(|v| v as i64),
                recorded.conflict,
                now_ms() as i64
            ],
        )
        .map_err(|e| self.io(e))?;
        tx.commit().map_err(|e| self.io(e))?;
        let counter = if recorded.conflict {
            &self.conflicts
        } else {
            &self.deliveries
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// What the ledger holds for `key`.
    pub fn recorded(&self, key: &str) -> Result<Option<Recorded>> {
        self.conn()
            .query_row(
                "SELECT digest, position, conflict FROM ledger WHERE key = ?1",
                [key],
                |r| {
                    Ok(Recorded {
                        digest: r.get(0)?,
                        position: r.get::<_, Option<i64>>(1)?.map(|v| v.max(0) as u64),
                        conflict: r.get(2)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.io(e))
    }

    /// Counts a conflict found without asking the server (a changed body
    /// under a key the ledger holds); nothing is queued or sent.
    pub fn count_conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt failed: the entry stays, retried after a backoff.
    pub fn failed(&self, id: i64) -> Result<()> {
        let conn = self.conn();
        let attempts: i64 = conn
            .query_row(
                "UPDATE entries SET attempts = attempts + 1 WHERE id = ?1 RETURNING attempts",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.io(e))?
            .unwrap_or(0);
        let next = now_ms() + backoff(attempts.max(0) as u64).as_millis() as u64;
        conn.execute(
            "UPDATE entries SET next_ms = ?2 WHERE id = ?1",
            params![id, next as i64],
        )
        .map_err(|e| self.io(e))?;
        self.retries.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn depth_and_oldest(conn: &Connection) -> rusqlite::Result<(u64, Option<u64>)> {
        let (depth, oldest): (i64, Option<i64>) =
            conn.query_row("SELECT count(*), min(enqueued_ms) FROM entries", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        Ok((depth.max(0) as u64, oldest.map(|t| t.max(0) as u64)))
    }

    pub fn figures(&self) -> Result<QueueFigures> {
        let (depth, oldest) = Self::depth_and_oldest(&self.conn()).map_err(|e| self.io(e))?;
        Ok(QueueFigures {
            depth,
            oldest_age_ms: oldest.map_or(0, |t| now_ms().saturating_sub(t)),
            deliveries: self.deliveries.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
        })
    }
}

fn corrupt(spec: &QueueSpec, path: &Path, why: impl std::fmt::Display) -> MemoryError {
    MemoryError::Corruption(format!(
        "{} {} cannot be trusted ({why}); refusing to start delivery",
        spec.name,
        path.display()
    ))
}

fn io_err(spec: &QueueSpec, path: &Path, why: impl std::fmt::Display) -> MemoryError {
    MemoryError::Backend(format!("{} {}: {why}", spec.name, path.display()))
}

/// A row as stored, before it is checked.
struct RawEntry {
    id: i64,
    stream: String,
    tag: String,
    body: String,
    mark: Option<i64>,
    attempt_ms: Option<i64>,
    intent_ms: Option<i64>,
    attempts: i64,
    enqueued_ms: i64,
}

impl RawEntry {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            stream: row.get(1)?,
            tag: row.get(2)?,
            body: row.get(3)?,
            mark: row.get(4)?,
            attempt_ms: row.get(5)?,
            intent_ms: row.get(6)?,
            attempts: row.get(7)?,
            enqueued_ms: row.get(8)?,
        })
    }

    fn parse(self, check: BodyCheck) -> std::result::Result<Entry, String> {
        let id = self.id;
        let count = |field: &str, v: i64| {
            u64::try_from(v)
                .map_err(|_| format!("entry {id}: {field} must be a non-negative integer"))
        };
        let body = serde_json::from_str::<Value>(&self.body)
            .map_err(|_| format!("entry {id}: the body is not JSON"))?;
        check(&body).map_err(|why| format!("entry {id}: {why}"))?;
        Ok(Entry {
            id,
            stream: self.stream,
            tag: self.tag,
            body,
            mark: self.mark.map(|v| count("base_total", v)).transpose()?,
            attempt_ms: self
                .attempt_ms
                .map(|v| count("attempt_ms", v))
                .transpose()?,
            intent_ms: self.intent_ms.map(|v| count("intent_ms", v)).transpose()?,
            attempts: count("attempts", self.attempts)?,
            enqueued_ms: count("enqueued_ms", self.enqueued_ms)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SPEC: QueueSpec = QueueSpec {
        name: "test outbox",
        config_key: "outbox",
        metric_prefix: "memgate_test_outbox",
        entries: "writes",
        stream: "stream",
        ledger: true,
    };
    const ROOMY: Limits = Limits {
        max_entries: 100,
        max_age: Duration::from_secs(3600),
    };

    fn objects(body: &Value) -> std::result::Result<(), String> {
        if body.is_object() {
            Ok(())
        } else {
            Err("the body must be an object".into())
        }
    }

    fn open(path: &Path, limits: Limits) -> Result<Queue> {
        Queue::open(path, SPEC, limits, objects)
    }

    fn body(text: &str) -> Value {
        json!({"content": text})
    }

    #[test]
    fn entries_survive_reopen_in_order_per_stream_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q").join("outbox.sqlite3");
        {
            let q = open(&path, ROOMY).unwrap();
            q.enqueue("s1", "a", &body("a"), None, None).unwrap();
            q.enqueue("s2", "x", &body("x"), Some(4), None).unwrap();
            q.enqueue("s1", "b", &body("b"), None, Some(7)).unwrap();
        }
        let q = open(&path, ROOMY).unwrap();
        let s1 = q.stream_entries("s1").unwrap();
        assert_eq!(
            s1.iter().map(|e| e.body.clone()).collect::<Vec<_>>(),
            [body("a"), body("b")]
        );
        assert_eq!((s1[1].intent_ms, s1[1].attempt_ms), (Some(7), Some(7)));
        assert_eq!(q.stream_entries("s2").unwrap()[0].mark, Some(4));
        assert_eq!(q.due_streams(now_ms()).unwrap(), vec!["s1", "s2"]);
        assert!(q.is_queued("s1", "b").unwrap() && !q.is_queued("s2", "b").unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn delivery_failure_and_conflicts_are_counted_and_backed_off() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir.path().join("o.sqlite3"), ROOMY).unwrap();
        let a = q.enqueue("s", "a", &body("a"), None, None).unwrap();
        let b = q.enqueue("s", "b", &body("b"), None, None).unwrap();
        q.mark_attempt(a, 3).unwrap();
        q.failed(a).unwrap();
        let entry = &q.stream_entries("s").unwrap()[0];
        assert_eq!((entry.mark, entry.attempts), (Some(3), 1));
        // The stream waits behind its backed-off head, even though `b` is due.
        assert!(q.due_streams(now_ms()).unwrap().is_empty());
        assert_eq!(q.due_streams(now_ms() + 1_500).unwrap(), vec!["s"]);
        let taken = Recorded {
            digest: "d1".into(),
            position: Some(8),
            conflict: false,
        };
        q.settle(a, "a", &taken).unwrap();
        let refused = Recorded {
            digest: "d2".into(),
            position: None,
            conflict: true,
        };
        q.settle(b, "b", &refused).unwrap();
        assert_eq!(q.recorded("a").unwrap(), Some(taken));
        assert_eq!(q.recorded("b").unwrap(), Some(refused));
        assert_eq!(q.recorded("c").unwrap(), None);
        let f = q.figures().unwrap();
        assert_eq!(
            (f.depth, f.deliveries, f.retries, f.dropped, f.conflicts),
            (0, 1, 1, 0, 1)
        );
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn figures_render_for_metrics_and_doctor() {
        let f = QueueFigures {
            depth: 3,
            oldest_age_ms: 61_500,
            deliveries: 7,
            retries: 2,
            dropped: 1,
            conflicts: 4,
        };
        let text: String = f.figures(&SPEC).iter().map(Figure::prometheus).collect();
        for line in [
            "memgate_test_outbox_depth 3\n",
            "memgate_test_outbox_oldest_age_seconds 61\n",
            "memgate_test_outbox_deliveries_total 7\n",
            "memgate_test_outbox_retries_total 2\n",
            "memgate_test_outbox_dropped_total 1\n",
            "memgate_test_outbox_conflicts_total 4\n",
            "# TYPE memgate_test_outbox_depth gauge\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        let without = QueueSpec {
            ledger: false,
            ..SPEC
        };
        assert_eq!(
            f.figures(&without).len(),
            5,
            "no conflicts without a ledger"
        );
        assert!(f.summary(&SPEC).contains("3 queued (oldest 61 s)"));
        assert!(f.summary(&SPEC).ends_with("4 conflicts"));
        assert!(!f.summary(&without).contains("conflicts"));
    }

    #[test]
    fn a_full_queue_refuses_new_entries_and_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_entries: 2,
            max_age: Duration::from_secs(3600),
        };
        let q = open(&dir.path().join("o.sqlite3"), limits).unwrap();
        q.enqueue("s", "a", &body("a"), None, None).unwrap();
        q.enqueue("s", "b", &body("b"), None, None).unwrap();
        let err = q.enqueue("s", "c", &body("c"), None, None).unwrap_err();
        assert!(err.to_string().contains("outbox.max_entries (2)"), "{err}");
        assert!(err.to_string().contains("stream=s"), "{err}");
        let kept: Vec<Value> = q
            .stream_entries("s")
            .unwrap()
            .into_iter()
            .map(|e| e.body)
            .collect();
        assert_eq!(kept, vec![body("a"), body("b")]);
        assert_eq!(q.figures().unwrap().dropped, 1);
    }

    #[test]
    fn a_queue_whose_oldest_entry_is_too_old_refuses_new_entries() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_entries: 100,
            max_age: Duration::ZERO,
        };
        let q = open(&dir.path().join("o.sqlite3"), limits).unwrap();
        q.enqueue("s", "a", &body("a"), None, None).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let err = q.enqueue("s", "b", &body("b"), None, None).unwrap_err();
        assert!(err.to_string().contains("outbox.max_age_seconds"), "{err}");
        assert_eq!(q.figures().unwrap().depth, 1);
    }

    #[test]
    fn corrupted_files_fail_closed_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.sqlite3");
        std::fs::write(&path, b"this is not a database, just text ...............").unwrap();
        let err = open(&path, ROOMY).err().unwrap();
        assert!(matches!(err, MemoryError::Corruption(_)), "{err}");
        assert!(err.to_string().contains("test outbox"), "{err}");
        // Refusing never replaces the file.
        assert!(std::fs::read(&path).unwrap().starts_with(b"this is not"));
        std::fs::remove_file(&path).unwrap();

        // Another schema version.
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t(x); PRAGMA user_version = 9;")
            .unwrap();
        let err = open(&path, ROOMY).err().unwrap();
        assert!(err.to_string().contains("schema_version is 9"), "{err}");
        std::fs::remove_file(&path).unwrap();

        // A queue without the ledger this spec needs.
        let plain = QueueSpec {
            ledger: false,
            ..SPEC
        };
        drop(Queue::open(&path, plain, ROOMY, objects).unwrap());
        let err = open(&path, ROOMY).err().unwrap();
        assert!(err.to_string().contains("ledger table is missing"), "{err}");
        std::fs::remove_file(&path).unwrap();

        // A hand-edited row.
        drop(open(&path, ROOMY).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO entries (session_id, peer, payloads, enqueued_ms) VALUES ('s','p','[]',1)",
                [],
            )
            .unwrap();
        let err = open(&path, ROOMY).err().unwrap();
        assert!(
            err.to_string().contains("the body must be an object"),
            "{err}"
        );
    }
}
