//! The durable outbox (memgate's addition, opt-in): a capture whose write
//! failed is acknowledged once its payloads are queued here, and delivered
//! later, in order per session.
//!
//! One SQLite file, `{storage_path}/openviking/outbox.sqlite3`, WAL with
//! `synchronous=FULL`: every enqueue, attempt mark and dequeue is fsynced
//! before it returns. An entry holds the payloads exactly as they would have
//! been sent (after memgate-redact), because they cannot be rebuilt once
//! the host's transcript is gone; the file is created `0600`.
//!
//! Exactly once: before an entry is sent, the session's server count is
//! recorded in it (`base_total`); a later attempt (after a crash or a lost
//! answer) first reads the server's count and sends only the batches that
//! did not arrive, as capture reconciles its cursor intent.
//!
//! Full policy: **refuse**. When `max_entries` entries are queued, or the
//! oldest is older than `max_age`, a new entry is refused with a clear error
//! and the capture falls back to the write policy (`log_and_drop` drops it,
//! counted in `dropped`). Dropping the oldest instead would silently lose
//! captures that were already acknowledged; refusing loses only the one the
//! caller is told about.

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
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The bounds of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboxLimits {
    pub max_entries: u64,
    pub max_age: Duration,
}

/// One queued capture of one session.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub id: i64,
    pub session_id: String,
    pub peer: String,
    /// The redacted payloads, in sending order.
    pub payloads: Vec<Value>,
    /// The session's server count just before this entry's first byte was
    /// (maybe) sent; `None` until an attempt starts.
    pub base_total: Option<u64>,
    /// When the last attempt started (ms since the epoch), for settling.
    pub attempt_ms: Option<u64>,
    /// The cursor intent (`written_ms`) this entry took over, if any.
    pub intent_ms: Option<u64>,
    pub attempts: u64,
    pub enqueued_ms: u64,
}

/// What `/metrics` and `doctor` show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxFigures {
    /// Entries queued now.
    pub depth: u64,
    /// Age of the oldest entry, in ms (0 when empty).
    pub oldest_age_ms: u64,
    /// Entries delivered since start.
    pub deliveries: u64,
    /// Failed delivery attempts since start (each is retried later).
    pub retries: u64,
    /// Captures refused by a full queue since start.
    pub dropped: u64,
}

impl OutboxFigures {
    /// The figures for `/metrics` and `doctor` (fixed names, numbers
    /// only: nothing from a message or a session can reach them).
    pub fn figures(&self) -> Vec<Figure> {
        vec![
            Figure::gauge(
                "memgate_outbox_depth",
                "Captures queued in the OpenViking outbox.",
                self.depth,
            ),
            Figure::gauge(
                "memgate_outbox_oldest_age_seconds",
                "Age of the oldest queued capture.",
                self.oldest_age_ms / 1000,
            ),
            Figure::counter(
                "memgate_outbox_deliveries_total",
                "Queued captures delivered since start.",
                self.deliveries,
            ),
            Figure::counter(
                "memgate_outbox_retries_total",
                "Failed delivery attempts since start (each retried later).",
                self.retries,
            ),
            Figure::counter(
                "memgate_outbox_dropped_total",
                "Captures refused by a full outbox since start.",
                self.dropped,
            ),
        ]
    }

    /// One line for `doctor`.
    pub fn summary(&self) -> String {
        format!(
            "outbox on: {} queued (oldest {} s), {} delivered, {} retries, {} refused when full",
            self.depth,
            self.oldest_age_ms / 1000,
            self.deliveries,
            self.retries,
            self.dropped
        )
    }
}

/// The queue. Cheap operations under one connection lock; call from a
/// blocking context.
pub struct Outbox {
    path: PathBuf,
    limits: OutboxLimits,
    conn: Mutex<Connection>,
    deliveries: AtomicU64,
    retries: AtomicU64,
    dropped: AtomicU64,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> MemoryError {
    MemoryError::Corruption(format!(
        "OpenViking outbox {} cannot be trusted ({why}); refusing to start capture delivery",
        path.display()
    ))
}

fn io_err(path: &Path, why: impl std::fmt::Display) -> MemoryError {
    MemoryError::Backend(format!("OpenViking outbox {}: {why}", path.display()))
}

/// Delay before retry number `attempts` (1-based).
pub fn backoff(attempts: u64) -> Duration {
    let shift = attempts.saturating_sub(1).min(16) as u32;
    FIRST_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

impl Outbox {
    /// The outbox file under a storage root.
    pub fn path_under(storage_path: &Path) -> PathBuf {
        storage_path.join("openviking").join("outbox.sqlite3")
    }

    /// Opens (or creates) the queue. A file that is not exactly this
    /// schema, or fails SQLite's check, is refused: nothing in it is
    /// delivered or replaced.
    pub fn open(path: &Path, limits: OutboxLimits) -> Result<Self> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| io_err(path, e))?;
        let existed = path.exists();
        let conn = Connection::open(path).map_err(|e| corrupt(path, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err(path, e))?;
        }
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| corrupt(path, e))?;
        if check != "ok" {
            return Err(corrupt(path, format!("quick_check: {check}")));
        }
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| corrupt(path, e))?;
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| corrupt(path, e))?;
        if version == 0 && tables == 0 {
            conn.execute_batch(
                "PRAGMA journal_mode=WAL;
                 CREATE TABLE entries (
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
                 CREATE INDEX entries_session ON entries(session_id, id);
                 PRAGMA user_version = 1;",
            )
            .map_err(|e| io_err(path, e))?;
        } else if version != SCHEMA_VERSION {
            return Err(corrupt(
                path,
                format!(
                    "schema_version is {version}, expected {SCHEMA_VERSION}{}",
                    if existed { "" } else { " (new file)" }
                ),
            ));
        }
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            .map_err(|e| io_err(path, e))?;
        let outbox = Self {
            path: path.to_path_buf(),
            limits,
            conn: Mutex::new(conn),
            deliveries: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        };
        // Every row must read back exactly; a hand-edited one fails here,
        // not halfway through a delivery.
        outbox.all_entries()?;
        Ok(outbox)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `payloads` behind the session's earlier entries. Refused when
    /// the queue is full (see the module doc); the refusal is counted.
    pub fn enqueue(
        &self,
        session_id: &str,
        peer: &str,
        payloads: &[Value],
        base_total: Option<u64>,
        intent_ms: Option<u64>,
    ) -> Result<i64> {
        let now = now_ms();
        let conn = self.conn();
        let (depth, oldest) = Self::depth_and_oldest(&conn).map_err(|e| io_err(&self.path, e))?;
        let too_old =
            oldest.is_some_and(|t| now.saturating_sub(t) > self.limits.max_age.as_millis() as u64);
        if depth >= self.limits.max_entries || too_old {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            let why = if too_old {
                format!(
                    "its oldest entry is older than outbox.max_age_seconds ({})",
                    self.limits.max_age.as_secs()
                )
            } else {
                format!(
                    "it holds outbox.max_entries ({}) entries",
                    self.limits.max_entries
                )
            };
            return Err(MemoryError::Backend(format!(
                "OpenViking outbox is full: {why}; the capture was not queued (session={session_id})"
            )));
        }
        let body = serde_json::to_string(payloads).map_err(|e| io_err(&self.path, e))?;
        conn.execute(
            "INSERT INTO entries (session_id, peer, payloads, base_total, attempt_ms, intent_ms, enqueued_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                session_id,
                peer,
                body,
                base_total.map(|v| v as i64),
                // An entry taken over from a cursor intent settles from the
                // intent's time.
                intent_ms.map(|v| v as i64),
                intent_ms.map(|v| v as i64),
                now as i64
            ],
        )
        .map_err(|e| io_err(&self.path, e))?;
        Ok(conn.last_insert_rowid())
    }

    fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawEntry> {
        Ok(RawEntry {
            id: row.get(0)?,
            session_id: row.get(1)?,
            peer: row.get(2)?,
            payloads: row.get(3)?,
            base_total: row.get(4)?,
            attempt_ms: row.get(5)?,
            intent_ms: row.get(6)?,
            attempts: row.get(7)?,
            enqueued_ms: row.get(8)?,
        })
    }

    fn select(&self, filter: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<Entry>> {
        let conn = self.conn();
        let sql = format!(
            "SELECT id, session_id, peer, payloads, base_total, attempt_ms, intent_ms, attempts, enqueued_ms
             FROM entries {filter} ORDER BY id"
        );
        let mut stmt = conn.prepare(&sql).map_err(|e| corrupt(&self.path, e))?;
        let rows = stmt
            .query_map(args, Self::read_row)
            .map_err(|e| corrupt(&self.path, e))?;
        let mut out = Vec::new();
        for row in rows {
            let raw = row.map_err(|e| corrupt(&self.path, e))?;
            out.push(raw.parse().map_err(|why| corrupt(&self.path, why))?);
        }
        Ok(out)
    }

    fn all_entries(&self) -> Result<Vec<Entry>> {
        self.select("", &[])
    }

    /// The session's entries, oldest first.
    pub fn session_entries(&self, session_id: &str) -> Result<Vec<Entry>> {
        self.select("WHERE session_id = ?1", &[&session_id])
    }

    /// Sessions whose oldest entry is due for an attempt at `now`.
    pub fn due_sessions(&self, now: u64) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT session_id FROM entries e WHERE id = (
                     SELECT min(id) FROM entries WHERE session_id = e.session_id)
                 AND next_ms <= ?1 ORDER BY id",
            )
            .map_err(|e| io_err(&self.path, e))?;
        let rows = stmt
            .query_map([now as i64], |r| r.get::<_, String>(0))
            .map_err(|e| io_err(&self.path, e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| io_err(&self.path, e))
    }

    /// Records, durably and before anything is sent, the server count the
    /// attempt starts from.
    pub fn mark_attempt(&self, id: i64, base_total: u64) -> Result<()> {
        self.conn()
            .execute(
                "UPDATE entries SET base_total = ?2, attempt_ms = ?3 WHERE id = ?1",
                params![id, base_total as i64, now_ms() as i64],
            )
            .map_err(|e| io_err(&self.path, e))?;
        Ok(())
    }

    /// The entry is on the server: remove it.
    pub fn delivered(&self, id: i64) -> Result<()> {
        self.conn()
            .execute("DELETE FROM entries WHERE id = ?1", [id])
            .map_err(|e| io_err(&self.path, e))?;
        self.deliveries.fetch_add(1, Ordering::Relaxed);
        Ok(())
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
            .map_err(|e| io_err(&self.path, e))?
            .unwrap_or(0);
        let next = now_ms() + backoff(attempts.max(0) as u64).as_millis() as u64;
        conn.execute(
            "UPDATE entries SET next_ms = ?2 WHERE id = ?1",
            params![id, next as i64],
        )
        .map_err(|e| io_err(&self.path, e))?;
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

    pub fn figures(&self) -> Result<OutboxFigures> {
        let (depth, oldest) =
            Self::depth_and_oldest(&self.conn()).map_err(|e| io_err(&self.path, e))?;
        Ok(OutboxFigures {
            depth,
            oldest_age_ms: oldest.map_or(0, |t| now_ms().saturating_sub(t)),
            deliveries: self.deliveries.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        })
    }
}

/// A row as stored, before it is checked.
struct RawEntry {
    id: i64,
    session_id: String,
    peer: String,
    payloads: String,
    base_total: Option<i64>,
    attempt_ms: Option<i64>,
    intent_ms: Option<i64>,
    attempts: i64,
    enqueued_ms: i64,
}

impl RawEntry {
    fn parse(self) -> std::result::Result<Entry, String> {
        let id = self.id;
        let count = |field: &str, v: i64| {
            u64::try_from(v)
                .map_err(|_| format!("entry {id}: {field} must be a non-negative integer"))
        };
        let payloads = match serde_json::from_str::<Value>(&self.payloads) {
            Ok(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_object) => {
                items
            }
            _ => {
                return Err(format!(
                    "entry {id}: payloads must be a non-empty JSON list of message objects"
                ))
            }
        };
        Ok(Entry {
            id,
            session_id: self.session_id,
            peer: self.peer,
            payloads,
            base_total: self
                .base_total
                .map(|v| count("base_total", v))
                .transpose()?,
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

    const ROOMY: OutboxLimits = OutboxLimits {
        max_entries: 100,
        max_age: Duration::from_secs(3600),
    };

    fn msg(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn entries_survive_reopen_in_order_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let path = Outbox::path_under(dir.path());
        {
            let outbox = Outbox::open(&path, ROOMY).unwrap();
            outbox.enqueue("s1", "p", &[msg("a")], None, None).unwrap();
            outbox
                .enqueue("s2", "p", &[msg("x")], Some(4), None)
                .unwrap();
            outbox
                .enqueue("s1", "p", &[msg("b"), msg("c")], None, Some(7))
                .unwrap();
        }
        let outbox = Outbox::open(&path, ROOMY).unwrap();
        let s1 = outbox.session_entries("s1").unwrap();
        assert_eq!(s1.len(), 2);
        assert_eq!(s1[0].payloads, vec![msg("a")]);
        assert_eq!(s1[1].payloads, vec![msg("b"), msg("c")]);
        assert_eq!((s1[1].intent_ms, s1[1].attempt_ms), (Some(7), Some(7)));
        assert_eq!(outbox.session_entries("s2").unwrap()[0].base_total, Some(4));
        assert_eq!(outbox.due_sessions(now_ms()).unwrap(), vec!["s1", "s2"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn delivery_and_failure_are_counted_and_backed_off() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(&Outbox::path_under(dir.path()), ROOMY).unwrap();
        let a = outbox.enqueue("s", "p", &[msg("a")], None, None).unwrap();
        let b = outbox.enqueue("s", "p", &[msg("b")], None, None).unwrap();
        outbox.mark_attempt(a, 3).unwrap();
        outbox.failed(a).unwrap();
        let entry = &outbox.session_entries("s").unwrap()[0];
        assert_eq!((entry.base_total, entry.attempts), (Some(3), 1));
        // The session waits behind its backed-off head, even though `b` is due.
        assert!(outbox.due_sessions(now_ms()).unwrap().is_empty());
        assert_eq!(outbox.due_sessions(now_ms() + 1_500).unwrap(), vec!["s"]);
        outbox.delivered(a).unwrap();
        outbox.delivered(b).unwrap();
        let f = outbox.figures().unwrap();
        assert_eq!((f.depth, f.deliveries, f.retries, f.dropped), (0, 2, 1, 0));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn figures_render_for_metrics_and_doctor() {
        let f = OutboxFigures {
            depth: 3,
            oldest_age_ms: 61_500,
            deliveries: 7,
            retries: 2,
            dropped: 1,
        };
        let text: String = f.figures().iter().map(Figure::prometheus).collect();
        for line in [
            "memgate_outbox_depth 3\n",
            "memgate_outbox_oldest_age_seconds 61\n",
            "memgate_outbox_deliveries_total 7\n",
            "memgate_outbox_retries_total 2\n",
            "memgate_outbox_dropped_total 1\n",
            "# TYPE memgate_outbox_depth gauge\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        assert!(f.summary().contains("3 queued (oldest 61 s)"));
    }

    #[test]
    fn a_full_queue_refuses_new_entries_and_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let limits = OutboxLimits {
            max_entries: 2,
            max_age: Duration::from_secs(3600),
        };
        let outbox = Outbox::open(&Outbox::path_under(dir.path()), limits).unwrap();
        outbox.enqueue("s", "p", &[msg("a")], None, None).unwrap();
        outbox.enqueue("s", "p", &[msg("b")], None, None).unwrap();
        let err = outbox
            .enqueue("s", "p", &[msg("c")], None, None)
            .unwrap_err();
        assert!(err.to_string().contains("outbox.max_entries (2)"), "{err}");
        let kept: Vec<_> = outbox
            .session_entries("s")
            .unwrap()
            .into_iter()
            .map(|e| e.payloads)
            .collect();
        assert_eq!(kept, vec![vec![msg("a")], vec![msg("b")]]);
        assert_eq!(outbox.figures().unwrap().dropped, 1);
    }

    #[test]
    fn a_queue_whose_oldest_entry_is_too_old_refuses_new_entries() {
        let dir = tempfile::tempdir().unwrap();
        let limits = OutboxLimits {
            max_entries: 100,
            max_age: Duration::ZERO,
        };
        let outbox = Outbox::open(&Outbox::path_under(dir.path()), limits).unwrap();
        outbox.enqueue("s", "p", &[msg("a")], None, None).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let err = outbox
            .enqueue("s", "p", &[msg("b")], None, None)
            .unwrap_err();
        assert!(err.to_string().contains("outbox.max_age_seconds"), "{err}");
        assert_eq!(outbox.figures().unwrap().depth, 1);
    }

    #[test]
    fn corrupted_files_fail_closed_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = Outbox::path_under(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();

        std::fs::write(
            &path,
            b"this is not a database, just text ..................",
        )
        .unwrap();
        let err = Outbox::open(&path, ROOMY).err().unwrap();
        assert!(matches!(err, MemoryError::Corruption(_)), "{err}");
        assert!(err.to_string().contains("outbox"), "{err}");
        // Refusing never replaces the file.
        assert!(std::fs::read(&path).unwrap().starts_with(b"this is not"));
        std::fs::remove_file(&path).unwrap();

        // Another schema version.
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t(x); PRAGMA user_version = 9;")
            .unwrap();
        let err = Outbox::open(&path, ROOMY).err().unwrap();
        assert!(err.to_string().contains("schema_version is 9"), "{err}");
        std::fs::remove_file(&path).unwrap();

        // A hand-edited row.
        drop(Outbox::open(&path, ROOMY).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO entries (session_id, peer, payloads, enqueued_ms) VALUES ('s','p','{}',1)",
                [],
            )
            .unwrap();
        let err = Outbox::open(&path, ROOMY).err().unwrap();
        assert!(err.to_string().contains("payloads must be"), "{err}");
    }
}
