//! The database file: how it is recognised, opened and migrated.
//!
//! A memgate database carries `PRAGMA application_id` = [`APPLICATION_ID`] and
//! `PRAGMA user_version` = the number of migration steps applied. Opening
//! checks both *before* anything is written (WAL mode itself writes the
//! header), so a file that is not SQLite, a foreign SQLite database or a
//! database from a newer memgate is refused with [`MemoryError::Corruption`]
//! and left byte-for-byte untouched. Pending steps run in order, each in its
//! own `BEGIN IMMEDIATE` transaction that also bumps `user_version`.

use crate::first_turn::cache_all_excerpts;
use crate::index::IndexWrites;
use crate::lengths::DocLengths;
use memgate_core::{MemoryError, Result};

pub use crate::error::db_error;
pub use crate::scope::write_generation;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// `MGAT` in ASCII: marks the file as a memgate store.
pub const APPLICATION_ID: i32 = 0x4D47_4154;

/// One ordered schema step.
struct Migration {
    name: &'static str,
    apply: fn(&Connection) -> Result<()>,
}

/// Ordered schema steps; `user_version` = how many have been applied.
const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "scopes, explicit memories with history, captured turns",
        apply: create_tables,
    },
    Migration {
        name: "full-text recall index over memories and turns",
        apply: create_recall_index,
    },
    Migration {
        name: "dense vectors for hybrid recall; each turn's first-turn excerpt",
        apply: create_vectors,
    },
    Migration {
        name: "per-scope write generations (what a cached first-turn block is checked against)",
        apply: create_write_generations,
    },
    Migration {
        name: "recall index kept in few segments; turn places indexed by id",
        apply: compact_recall_reads,
    },
    Migration {
        name: "first-turn excerpts again, with introductions and preferences; \
               turns about their speaker marked",
        apply: mark_turns_about_their_speaker,
    },
    Migration {
        name: "facts with provenance, time and confidence; the distillation queue",
        apply: create_fact_provenance,
    },
    Migration {
        name: "a memory's vector goes when it stops being current",
        apply: drop_vectors_of_retired_memories,
    },
    Migration {
        name: "removals of turns whose ids may come back counted \
               (what remembered turn lengths are checked against)",
        apply: count_index_removals,
    },
];

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn create_tables(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE scopes (
             id      INTEGER PRIMARY KEY,
             user_id TEXT NOT NULL,
             peer    TEXT NOT NULL,
             UNIQUE (user_id, peer)
         );
         CREATE TABLE memories (
             id         INTEGER PRIMARY KEY,
             scope_id   INTEGER NOT NULL REFERENCES scopes(id),
             kind       TEXT NOT NULL,
             text       TEXT NOT NULL,
             state      TEXT NOT NULL CHECK (state IN ('active', 'retired')),
             version    INTEGER NOT NULL,
             created_at TEXT NOT NULL,
             updated_at TEXT NOT NULL
         );
         CREATE UNIQUE INDEX memories_one_active_copy
             ON memories (scope_id, kind, text) WHERE state = 'active';
         CREATE INDEX memories_by_scope ON memories (scope_id, id);
         CREATE TABLE memory_history (
             id          INTEGER PRIMARY KEY,
             memory_id   INTEGER NOT NULL REFERENCES memories(id),
             version     INTEGER NOT NULL,
             kind        TEXT NOT NULL,
             text        TEXT NOT NULL,
             state       TEXT NOT NULL,
             recorded_at TEXT NOT NULL,
             UNIQUE (memory_id, version)
         );
         CREATE TABLE turns (
             id          INTEGER PRIMARY KEY,
             scope_id    INTEGER NOT NULL REFERENCES scopes(id),
             thread      TEXT NOT NULL,
             seq         INTEGER NOT NULL,
             signature   TEXT NOT NULL,
             message_id  TEXT,
             role        TEXT NOT NULL CHECK (role IN ('human', 'ai')),
             speaker     TEXT,
             occurred_at TEXT,
             text        TEXT NOT NULL,
             captured_at TEXT NOT NULL,
             UNIQUE (scope_id, thread, signature)
         );
         CREATE INDEX turns_by_thread ON turns (scope_id, thread, seq);",
    )
    .map_err(db_error)
}

/// The recall index is contentless (texts live in `memories` / `turns`):
/// rowid `n > 0` is turn `n`, rowid `-n` is memory `n`. Column `body` holds
/// the text, `context` the speaker, date or memory kind (weighted lower).
/// Segments are merged as soon as two share a level (`automerge=2`), which keeps the
/// number of segments a term lookup visits low under many small commits.
fn create_recall_index(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE VIRTUAL TABLE recall_index USING fts5(
             body, context, content='', contentless_delete=1,
             tokenize='porter ascii'
         );
         INSERT INTO recall_index(recall_index, rank) VALUES ('automerge', 2);",
    )
    .map_err(db_error)?;
    reindex_all(conn)
}

/// Vectors of recall-index rows (turn `n`, memory `-n`) per model, in
/// write order (`seq`, which the in-memory copies top up from); the one
/// model they belong to. Each turn's salience excerpt, computed once at
/// capture (turns never change) so the first-turn block reads instead of
/// scoring: the columns stay NULL for a turn with nothing worth keeping,
/// and the partial index lists the others newest first per scope. Turns
/// already in the file get theirs in [`mark_turns_about_their_speaker`].
fn create_vectors(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE vectors (
             seq      INTEGER PRIMARY KEY,
             item     INTEGER NOT NULL,
             scope_id INTEGER NOT NULL REFERENCES scopes(id),
             model    TEXT NOT NULL,
             version  INTEGER NOT NULL,
             vector   BLOB NOT NULL,
             UNIQUE (item, model)
         );
         CREATE INDEX vectors_by_scope ON vectors (scope_id, model, seq);
         CREATE TABLE vector_model (
             id    INTEGER PRIMARY KEY CHECK (id = 1),
             model TEXT NOT NULL,
             dims  INTEGER NOT NULL
         );
         ALTER TABLE turns ADD COLUMN excerpt TEXT;
         ALTER TABLE turns ADD COLUMN excerpt_score REAL;
         ALTER TABLE turns ADD COLUMN excerpt_terms TEXT;
         CREATE INDEX turns_with_excerpt ON turns (scope_id, id) WHERE excerpt IS NOT NULL;",
    )
    .map_err(db_error)
}

/// A scope's write generation changes in the same transaction as any write
/// to its turns or memories, so a reader holding a snapshot knows whether
/// something computed from an earlier snapshot of the scope still holds
/// (the cached first-turn block). Kept by triggers, so every write path —
/// capture, import, remember, revise, retire, forget, the retention sweep,
/// another process on the same file — bumps it without code of its own.
///
/// A write adds one to its scope's generation (one row update per written
/// row: about 7 µs of a turn's capture). A scope created again after it
/// was forgotten (possibly under the same row id) starts above every
/// generation a forgotten scope reached (`forgotten_generations`), so it
/// can never show a generation an earlier scope of that id had.
fn create_write_generations(conn: &Connection) -> Result<()> {
    let mut sql = String::from(
        "ALTER TABLE scopes ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
         UPDATE scopes SET generation = 1;
         CREATE TABLE forgotten_generations (
             id      INTEGER PRIMARY KEY CHECK (id = 1),
             highest INTEGER NOT NULL
         );
         INSERT INTO forgotten_generations (id, highest) VALUES (1, 1);
         CREATE TRIGGER scopes_start_above_forgotten_generations AFTER INSERT ON scopes
         BEGIN
             UPDATE scopes SET generation = (SELECT highest FROM forgotten_generations) + 1
                 WHERE id = NEW.id;
         END;
         CREATE TRIGGER scopes_remember_their_last_generation AFTER DELETE ON scopes
         BEGIN
             UPDATE forgotten_generations SET highest = max(highest, OLD.generation);
         END;",
    );
    for table in ["turns", "memories"] {
        for (event, scopes) in [
            ("INSERT", "NEW.scope_id"),
            ("UPDATE", "OLD.scope_id, NEW.scope_id"),
            ("DELETE", "OLD.scope_id"),
        ] {
            sql.push_str(&format!(
                "CREATE TRIGGER {table}_{event}_bumps_generation AFTER {event} ON {table}
                 BEGIN
                     UPDATE scopes SET generation = generation + 1 WHERE id IN ({scopes});
                 END;"
            ));
        }
    }
    conn.execute_batch(&sql).map_err(db_error)
}

/// Fewer pages per recall, same results (the bench at 100k items: 742 page
/// fetches and 8 cache misses per recall, against 1,093 and 36 without).
///
/// - `crisismerge = 2`: a level of the recall index with two segments is
///   merged at once, not only incrementally (`automerge`). Under many small
///   commits the incremental merges left 18 segments at 100k items; every
///   term lookup visits each segment. Now 4, at no visible capture cost (the
///   same merges, done sooner).
/// - `turns_places`: the candidates' thread and position come from this
///   covering index instead of the table's rows (each on its own page with
///   its text), so placing 50 candidates reads a few compact pages.
fn compact_recall_reads(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "INSERT INTO recall_index(recall_index, rank) VALUES ('crisismerge', 2);
         CREATE INDEX turns_places ON turns (id, scope_id, thread, seq);",
    )
    .map_err(db_error)
}

/// Whether a turn's excerpt states something of its speaker
/// ([`memgate_recall::salience::Excerpt::about_speaker`]): what the user
/// said about themselves is read beyond the newest excerpts, however many
/// conversations came since (partial index `turns_about_speaker`). The
/// excerpt rules now keep introductions and preferences, so every turn's
/// excerpt is computed again.
fn mark_turns_about_their_speaker(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "ALTER TABLE turns ADD COLUMN excerpt_about INTEGER NOT NULL DEFAULT 0;
         CREATE INDEX turns_about_speaker ON turns (scope_id, id) WHERE excerpt_about = 1;
         UPDATE turns SET excerpt = NULL, excerpt_score = NULL, excerpt_terms = NULL
             WHERE excerpt IS NOT NULL;",
    )
    .map_err(db_error)?;
    cache_all_excerpts(conn)
}

/// Facts carry where they came from (`origin`, the turns they rest on in
/// `memory_sources`, their thread and when they were said), their
/// confidence, and when they stopped being true (`valid_to`,
/// `superseded_by`); each history row says who wrote it. Existing memories
/// are explicit, confidence 1, written by the user.
///
/// `distill_jobs` is the durable distillation queue: one row per thread's
/// run of new turns (turn ids `first_turn..=last_turn` of that thread),
/// committed with the capture that stored them; `done` and `parked` rows
/// stay so a replay adds nothing and a parked job keeps its reason.
/// `distill_usage` keeps the endpoint's reported tokens per UTC day (the
/// daily budget).
fn create_fact_provenance(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "ALTER TABLE memories ADD COLUMN origin TEXT NOT NULL DEFAULT 'explicit'
             CHECK (origin IN ('explicit', 'distilled'));
         ALTER TABLE memories ADD COLUMN confidence REAL NOT NULL DEFAULT 1.0;
         ALTER TABLE memories ADD COLUMN thread TEXT;
         ALTER TABLE memories ADD COLUMN said_at TEXT;
         ALTER TABLE memories ADD COLUMN valid_to TEXT;
         ALTER TABLE memories ADD COLUMN superseded_by INTEGER;
         ALTER TABLE memories ADD COLUMN job_id INTEGER;
         ALTER TABLE memory_history ADD COLUMN confidence REAL NOT NULL DEFAULT 1.0;
         ALTER TABLE memory_history ADD COLUMN changed_by TEXT NOT NULL DEFAULT 'user';
         CREATE TABLE memory_sources (
             memory_id INTEGER NOT NULL REFERENCES memories(id),
             turn_id   INTEGER NOT NULL,
             PRIMARY KEY (memory_id, turn_id)
         ) WITHOUT ROWID;
         CREATE INDEX memory_sources_by_turn ON memory_sources (turn_id, memory_id);
         CREATE TABLE distill_jobs (
             id         INTEGER PRIMARY KEY,
             scope_id   INTEGER NOT NULL REFERENCES scopes(id),
             thread     TEXT NOT NULL,
             first_turn INTEGER NOT NULL,
             last_turn  INTEGER NOT NULL,
             state      TEXT NOT NULL CHECK (state IN ('queued', 'done', 'parked')),
             attempts   INTEGER NOT NULL DEFAULT 0,
             reason     TEXT,
             created_at TEXT NOT NULL,
             updated_at TEXT NOT NULL
         );
         CREATE INDEX distill_jobs_by_state ON distill_jobs (state, id);
         CREATE INDEX distill_jobs_by_thread ON distill_jobs (scope_id, thread, state);
         CREATE TABLE distill_usage (
             day               TEXT PRIMARY KEY,
             calls             INTEGER NOT NULL,
             prompt_tokens     INTEGER NOT NULL,
             completion_tokens INTEGER NOT NULL
         );",
    )
    .map_err(db_error)
}

/// A retired or superseded memory is never recalled, so its vector is
/// dead weight, and worse among memories alone: a fact superseded week
/// after week leaves versions nearer to the next change than the current
/// facts, and they would take the nearest places. A trigger drops the
/// vector whichever write path retires the memory (as `postgres`'s does);
/// a memory made current again is embedded again like any other without
/// one.
fn drop_vectors_of_retired_memories(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TRIGGER memory_vector_retired AFTER UPDATE OF state ON memories
         WHEN NEW.state <> 'active'
         BEGIN
             DELETE FROM vectors WHERE item = -NEW.id;
         END;
         DELETE FROM vectors
         WHERE item < 0 AND -item IN (SELECT id FROM memories WHERE state <> 'active');",
    )
    .map_err(db_error)
}

/// One count of the transactions that removed a turn whose id may be
/// given out again from the recall index ([`crate::lengths`]: a turn's
/// length in the index holds while it is unchanged).
fn count_index_removals(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE index_removals (
             id INTEGER PRIMARY KEY CHECK (id = 1),
             n  INTEGER NOT NULL
         );
         INSERT INTO index_removals (id, n) VALUES (1, 0);",
    )
    .map_err(db_error)
}

/// Indexes every active memory and every turn (used when the index is created
/// over existing rows).
fn reindex_all(conn: &Connection) -> Result<()> {
    let memories: Vec<(i64, i64, String, String)> = conn
        .prepare("SELECT id, scope_id, kind, text FROM memories WHERE state = 'active'")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(db_error)?;
    let mut index = IndexWrites::default();
    for (id, scope, kind, text) in memories {
        index.add_memory(scope, id, &kind, &text);
    }
    type TurnRow = (i64, i64, String, Option<String>, Option<String>);
    let turns: Vec<TurnRow> = conn
        .prepare("SELECT id, scope_id, text, speaker, occurred_at FROM turns")
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect()
        })
        .map_err(db_error)?;
    for (id, scope, text, speaker, occurred_at) in turns {
        index.add_turn(scope, id, &text, speaker.as_deref(), occurred_at.as_deref());
    }
    index.apply(conn)
}

/// What an existing file holds, judged without writing to it.
fn inspect_existing(path: &Path) -> Result<()> {
    let shown = path.display();
    let untouched = "it was left untouched";
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| MemoryError::Corruption(format!("cannot open {shown} ({e}); {untouched}")))?;
    let header = (|| -> rusqlite::Result<(i32, u32, i64)> {
        let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let objects: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        Ok((app, version, objects))
    })();
    let (app, version, objects) = match header {
        Ok(h) => h,
        Err(e) => {
            return Err(MemoryError::Corruption(format!(
                "{shown} is not a readable memgate database ({e}); {untouched}"
            )))
        }
    };
    if app == APPLICATION_ID {
        if version > SCHEMA_VERSION {
            return Err(MemoryError::Corruption(format!(
                "{shown} has schema version {version}, newer than this memgate understands \
                 ({SCHEMA_VERSION}); upgrade memgate (the file was left untouched, never downgraded)"
            )));
        }
        return Ok(());
    }
    if app == 0 && version == 0 && objects == 0 {
        return Ok(()); // an empty SQLite file: ours to initialise
    }
    Err(MemoryError::Corruption(format!(
        "{shown} is a SQLite database of another application (application_id {app:#x}, \
         {objects} schema objects); {untouched}"
    )))
}

/// Applies connection settings every connection of the store uses.
pub fn configure(
    conn: &Connection,
    busy_timeout: Duration,
    lengths: &Arc<DocLengths>,
) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout)?;
    crate::bm25::register(conn, Arc::clone(lengths))?;
    conn.set_prepared_statement_cache_capacity(64);
    // Plans never depend on bound values (the query planner stability
    // guarantee). Without it, a statement whose planning looked at a bound
    // value — STAT4 estimates, matching `scope_id = ?1` against a partial
    // index's WHERE — is marked to be re-prepared whenever that parameter is
    // bound again, i.e. on every call: perf at 100k items put
    // `sqlite3Reprepare` at 10.7% of a recall (candidates, standing
    // memories, postings counts) and of capture's next-seq lookup. Every
    // plan here is on an index chosen by shape, not by value.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    // Durable on return: WAL fsyncs on every commit with synchronous=FULL.
    // Reads go through a 16 MiB page cache, not a memory map: with WAL on,
    // every mapped page fetch first searches the WAL index and re-parses the
    // page (perf: walFindFrame alone was 19% of a recall at 100k items), while
    // a cached page is a hash lookup. Measured at 100k items: on-CPU recall
    // p50 1.61 ms and peak RSS 45 MB, against 2.03 ms and 113 MB with a map
    // (docs/design/lexical-recall.md).
    conn.execute_batch(
        "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA mmap_size = 0;
         PRAGMA cache_size = -16384; PRAGMA wal_autocheckpoint = 4000;",
    )
}

/// Opens (creating if needed) the writer connection of the database at
/// `path`, refusing foreign or newer files, and applies pending migrations.
pub fn open_writer(
    path: &Path,
    busy_timeout: Duration,
    lengths: &Arc<DocLengths>,
) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            MemoryError::Backend(format!("cannot create directory {}: {e}", dir.display()))
        })?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        inspect_existing(path)?;
    }
    let mut conn = Connection::open(path).map_err(db_error)?;
    configure(&conn, busy_timeout, lengths).map_err(db_error)?;
    // Deleted content is overwritten with zeros (cells, freed pages), so an
    // erased memory leaves no copy in free space of the file.
    conn.execute_batch("PRAGMA secure_delete = ON")
        .map_err(db_error)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(db_error)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(MemoryError::Backend(format!(
            "{} cannot use write-ahead logging (journal_mode is {mode})",
            path.display()
        )));
    }
    migrate(&mut conn, SCHEMA_VERSION)?;
    Ok(conn)
}

/// Applies migration steps up to `target` (tests use a lower target to build
/// an old-version file).
pub fn migrate(conn: &mut Connection, target: u32) -> Result<()> {
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_error)?;
        // Re-read inside the write lock: another process may have migrated.
        let (app, version): (i32, u32) = tx
            .query_row(
                "SELECT (SELECT application_id FROM pragma_application_id),
                        (SELECT user_version FROM pragma_user_version)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(db_error)?;
        if app != 0 && app != APPLICATION_ID {
            return Err(MemoryError::Corruption(
                "database was claimed by another application while opening".to_owned(),
            ));
        }
        if version > SCHEMA_VERSION {
            return Err(MemoryError::Corruption(format!(
                "database schema version {version} is newer than this memgate understands ({SCHEMA_VERSION})"
            )));
        }
        if version >= target {
            return Ok(());
        }
        let step = &MIGRATIONS[version as usize];
        (step.apply)(&tx).map_err(|e| match e {
            MemoryError::Corruption(_) => e,
            other => MemoryError::Backend(format!(
                "schema migration {} ({}) failed: {other}",
                version + 1,
                step.name
            )),
        })?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .and_then(|_| tx.pragma_update(None, "user_version", version + 1))
            .and_then(|_| tx.commit())
            .map_err(db_error)?;
        tracing::info!(
            step = version + 1,
            name = step.name,
            "applied local store migration"
        );
    }
}

/// Reads the schema version (for tests and diagnostics).
pub fn schema_version(conn: &Connection) -> Result<u32> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db_error)
}
