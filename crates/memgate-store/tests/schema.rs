//! The database file: WAL, migrations, refusal of foreign, corrupt and newer
//! files (left untouched), directories created on demand.

mod common;

use common::{alice, TestStore};
use memgate_core::{MemoryError, RememberRequest};
use memgate_store::schema::{migrate, APPLICATION_ID, SCHEMA_VERSION};
use memgate_store::{LocalConfig, MemoryStore};
use rusqlite::Connection;

#[test]
fn a_new_file_is_wal_with_the_current_schema() {
    let t = TestStore::new();
    assert_eq!(t.store.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = Connection::open(t.path()).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let app: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(app, APPLICATION_ID);
}

#[test]
fn missing_directories_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/local/memgate.sqlite3");
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    store
        .remember(&alice(), &RememberRequest::new("fact", "x").unwrap())
        .unwrap();
    assert!(path.exists());
}

#[test]
fn an_old_schema_is_migrated_in_order_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    {
        // A file written by a memgate that only knew the first migration.
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 1).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', '');
             INSERT INTO memories (scope_id, kind, text, state, version, created_at, updated_at)
             VALUES (1, 'preference', 'prefers vim keybindings', 'active', 1, 'x', 'x');",
        )
        .unwrap();
        let v: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 1);
    }
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    // The migration that created the recall index indexed the old row.
    let hits = store
        .search(&alice(), &memgate_core::SearchQuery::new("vim"))
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].content, "prefers vim keybindings");
}

fn assert_refused_and_untouched(path: &std::path::Path, expect: &str) {
    let before = std::fs::read(path).unwrap();
    let err = MemoryStore::open(path, LocalConfig::default()).unwrap_err();
    assert!(matches!(err, MemoryError::Corruption(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(expect), "{msg}");
    assert!(msg.contains("untouched"), "{msg}");
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "the file was modified"
    );
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    assert!(
        !std::path::Path::new(&wal).exists(),
        "a WAL file was created"
    );
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memgate.sqlite3");
    std::fs::write(&path, b"these are my notes, not a database\n".repeat(200)).unwrap();
    assert_refused_and_untouched(&path, "not a readable memgate database");
}

#[test]
fn a_foreign_sqlite_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memgate.sqlite3");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE accounts (id INTEGER, balance REAL); INSERT INTO accounts VALUES (1, 9.5);")
            .unwrap();
    }
    assert_refused_and_untouched(&path, "another application");
}

#[test]
fn a_newer_schema_is_refused_not_downgraded() {
    let t = TestStore::new();
    let path = t.path();
    t.store.close().unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
            .unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = MemoryStore::open(&path, LocalConfig::default()).unwrap_err();
    assert!(matches!(err, MemoryError::Corruption(_)), "{err:?}");
    assert!(err.to_string().contains("newer"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_damaged_database_fails_its_integrity_check() {
    let t = TestStore::new();
    for i in 0..300 {
        t.store
            .remember(
                &alice(),
                &RememberRequest::new("fact", &format!("fact number {i} {}", "x".repeat(200)))
                    .unwrap(),
            )
            .unwrap();
    }
    let path = t.path();
    t.store.close().unwrap();
    // Scribble over interior pages, keeping the header intact.
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert!(bytes.len() > 6 * page);
    let end = bytes.len() - page;
    for b in &mut bytes[2 * page..end] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let outcome = MemoryStore::open(&path, LocalConfig::default()).and_then(|s| {
        s.check_integrity()?;
        s.list_facts(&alice(), true).map(|_| ())
    });
    let err = outcome.unwrap_err();
    assert!(matches!(err, MemoryError::Corruption(_)), "{err:?}");
}

#[test]
fn a_file_left_by_a_crash_reopens_with_every_committed_write() {
    let t = TestStore::new();
    for i in 0..20 {
        t.store
            .remember(
                &alice(),
                &RememberRequest::new("fact", &format!("committed {i}")).unwrap(),
            )
            .unwrap();
    }
    // Copy the files while the store is still open (nothing checkpointed):
    // what a killed process leaves on disk.
    for keep_shm in [true, false] {
        let crash = tempfile::tempdir().unwrap();
        for suffix in ["", "-wal", "-shm"] {
            if suffix == "-shm" && !keep_shm {
                continue;
            }
            let mut from = t.path().into_os_string();
            from.push(suffix);
            let to = crash.path().join(format!("memgate.sqlite3{suffix}"));
            std::fs::copy(&from, &to).unwrap();
        }
        let wal = crash.path().join("memgate.sqlite3-wal");
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "the image has a WAL to replay"
        );
        let store = MemoryStore::open(crash.path().join("memgate.sqlite3"), LocalConfig::default())
            .unwrap();
        assert_eq!(
            store.list_facts(&alice(), false).unwrap().len(),
            20,
            "shm kept: {keep_shm}"
        );
        store.check_integrity().unwrap();
    }
}

/// The write generation of every scope, by user.
fn generations(path: &std::path::Path) -> Vec<(String, i64)> {
    let conn = Connection::open(path).unwrap();
    let mut s = conn
        .prepare("SELECT user_id, generation FROM scopes ORDER BY id")
        .unwrap();
    s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn a_version_3_file_is_migrated_and_every_write_advances_only_its_scope_generation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.sqlite3");
    {
        // A file written by a memgate whose schema stopped at version 3.
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 3).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', ''), (2, 'bob', '');
             INSERT INTO turns (scope_id, thread, seq, signature, role, text, captured_at)
             VALUES (1, 't', 1, 'a', 'human', 'My sister moved to Porto', '2024-05-01T10:00:00Z'),
                    (2, 't', 1, 'b', 'human', 'I bought a boat', '2024-05-01T10:00:00Z');",
        )
        .unwrap();
    }
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let migrated = generations(&path);
    assert_eq!(migrated.len(), 2);
    assert!(migrated.iter().all(|(_, g)| *g > 0), "{migrated:?}");
    // A write to alice's scope advances hers and leaves bob's as it was.
    store
        .remember(&alice(), &RememberRequest::new("fact", "x").unwrap())
        .unwrap();
    let after = generations(&path);
    assert!(after[0].1 > migrated[0].1, "{after:?}");
    assert_eq!(after[1], migrated[1]);
    // Alice's scope, forgotten and created again under the same row id,
    // never shows a generation the forgotten one had.
    let mut last = after[0].1;
    for text in ["y", "z", "w"] {
        store
            .remember(&alice(), &RememberRequest::new("fact", text).unwrap())
            .unwrap();
    }
    last = last.max(generations(&path)[0].1);
    store
        .forget(&alice(), &memgate_core::ForgetTarget::Scope)
        .unwrap();
    store
        .remember(&alice(), &RememberRequest::new("fact", "v").unwrap())
        .unwrap();
    let again = generations(&path);
    let alice_now = again.iter().find(|(u, _)| u == "alice").unwrap().1;
    assert!(alice_now > last, "{again:?} after {last}");
}

/// The recall index's merge setting and the turn-places index, as a reader
/// of `path` sees them.
fn recall_read_layout(path: &std::path::Path) -> (Option<i64>, bool) {
    let conn = Connection::open(path).unwrap();
    let crisis = conn
        .query_row(
            "SELECT v FROM recall_index_config WHERE k = 'crisismerge'",
            [],
            |r| r.get(0),
        )
        .ok();
    let places: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'index' AND name = 'turns_places'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    (crisis, places)
}

#[test]
fn a_version_4_file_is_migrated_to_few_index_segments_and_indexed_turn_places() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.sqlite3");
    {
        // A file written by a memgate whose schema stopped at version 4,
        // with a turn captured (and indexed) by it.
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 4).unwrap();
    }
    assert_eq!(recall_read_layout(&path), (None, false));
    {
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', '');
             INSERT INTO turns (id, scope_id, thread, seq, signature, role, text, captured_at)
             VALUES (7, 1, 't', 1, 'a', 'human', 'My sister moved to Porto', '2024-05-01T10:00:00Z');
             INSERT INTO recall_index (rowid, body, context)
             VALUES (7, 'q1xsister q1xmoved q1xporto', '');",
        )
        .unwrap();
        migrate(&mut conn, 4).unwrap();
    }
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(recall_read_layout(&path), (Some(2), true));
    // What the old file held is still recalled, through the new index.
    let recall = store
        .recall(&common::recall_of(
            &alice(),
            Some("where did my sister move?"),
        ))
        .unwrap();
    assert_eq!(common::cited(&recall), ["turn_7"]);
}

/// A file from before retired memories lost their vectors: migrated, the
/// retired memory's vector is gone and the current one's is kept; from then
/// on retiring a memory drops its vector in the same write.
#[test]
fn a_version_7_file_is_migrated_and_no_memory_that_stopped_being_current_keeps_a_vector() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.sqlite3");
    let vectors = |path: &std::path::Path| -> Vec<i64> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT item FROM vectors ORDER BY item")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    {
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 7).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', '');
             INSERT INTO memories (id, scope_id, kind, text, state, version, created_at, updated_at)
             VALUES (1, 1, 'fact', 'lives in Lisbon', 'retired', 2, 'x', 'x'),
                    (2, 1, 'fact', 'lives in Porto', 'active', 1, 'x', 'x');
             INSERT INTO vectors (item, scope_id, model, version, vector)
             VALUES (-1, 1, 'm', 1, x'0000803f'), (-2, 1, 'm', 1, x'0000803f');",
        )
        .unwrap();
    }
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(vectors(&path), [-2]);
    store.retire_fact(&alice(), "mem_2").unwrap();
    assert!(vectors(&path).is_empty());
}

/// A file from before removals from the recall index were counted:
/// migrated, it counts from 0. A capture counts nothing, nor does
/// forgetting a thread older than a remaining turn (its ids never come
/// back); forgetting the newest thread counts one removal (what
/// remembered turn lengths are checked against).
#[test]
fn a_version_8_file_is_migrated_and_counts_the_removals_of_turns_from_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.sqlite3");
    let removals = |path: &std::path::Path| -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT n FROM index_removals", [], |r| r.get(0))
            .unwrap()
    };
    {
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, 8).unwrap();
    }
    let store = MemoryStore::open(&path, LocalConfig::default()).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(removals(&path), 0);
    for thread in ["t1", "t2"] {
        let hello = vec![memgate_core::Message::human(format!("hello in {thread}"))];
        store
            .capture(&common::capture(&alice(), thread, hello))
            .unwrap();
    }
    assert_eq!(removals(&path), 0);
    let forget = |thread: &str| {
        store
            .forget(
                &alice().with_thread(thread),
                &memgate_core::ForgetTarget::Thread,
            )
            .unwrap()
    };
    assert_eq!(forget("t1").turns, 1);
    assert_eq!(removals(&path), 0);
    assert_eq!(forget("t2").turns, 1);
    assert_eq!(removals(&path), 1);
}

/// Many small captures (a host captures after every turn) leave the recall
/// index in few segments: each term lookup of a recall visits every
/// segment. With incremental merging alone, 300 one-turn captures left 16.
#[test]
fn many_small_captures_leave_the_recall_index_in_few_segments() {
    let t = TestStore::new();
    for i in 0..300 {
        let message = memgate_core::Message::human(format!(
            "turn {i} about gardening plans topic{} and word{}",
            i % 17,
            i % 29
        ))
        .with_id(format!("m{i}"));
        t.store
            .capture(&common::capture(&alice(), "t", vec![message]))
            .unwrap();
    }
    let conn = Connection::open(t.path()).unwrap();
    let segments: i64 = conn
        .query_row(
            "SELECT count(DISTINCT segid) FROM recall_index_idx",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(segments <= 5, "{segments} segments after 300 captures");
    assert_eq!(recall_read_layout(&t.path()), (Some(2), true));
}
