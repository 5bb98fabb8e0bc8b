//! The schema on a real PostgreSQL: created once under the advisory lock
//! when replicas start together, a foreign or newer schema refused with
//! nothing changed, doctor figures, no password in any error, and fresh
//! planner statistics after a bulk import.

mod common;

use memgate_core::{Caller, MemoryBackend, MemoryError, RememberRequest};
use memgate_postgres::{PostgresBackend, PostgresConfig, SCHEMA_VERSION};

async fn sql(dsn: &str, statements: &str) {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    client.batch_execute(statements).await.unwrap();
    drop(client);
    let _ = task.await;
}

async fn count(dsn: &str, query: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let n = client.query_one(query, &[]).await.unwrap().get(0);
    drop(client);
    let _ = task.await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn migrations_raced_by_eight_backends_apply_once() {
    let dsn = common::dsn();
    let schema = common::unique_schema("race");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let b = common::backend(&dsn, &schema);
        tasks.push(tokio::spawn(async move { b.migrate().await.unwrap() }));
    }
    let mut before = Vec::new();
    for t in tasks {
        before.push(t.await.unwrap());
    }
    // Exactly one saw the empty schema; the others waited and found it current.
    assert_eq!(before.iter().filter(|v| **v == 0).count(), 1, "{before:?}");
    assert!(before.iter().all(|v| *v == 0 || *v == SCHEMA_VERSION));
    let b = common::backend(&dsn, &schema);
    let info = b.doctor().await.unwrap();
    assert_eq!(info.schema_version, SCHEMA_VERSION);
    assert!(
        info.server_version.starts_with(char::is_numeric),
        "{info:?}"
    );
    assert!(info.pool.size >= 1 && info.pool.max_size == 8, "{info:?}");
    assert!(!info.hybrid_vectors);
    println!("doctor: {}", serde_json::to_string(&info).unwrap());
}

/// A distillation worker's first queue read and the first request find a
/// connection each already open, instead of opening two at once.
#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn warm_leaves_two_connections_open_for_the_first_requests() {
    let dsn = common::dsn();
    let b = common::backend(&dsn, &common::unique_schema("warm"));
    assert_eq!(b.warm().await.unwrap(), memgate_core::WarmStatus::Ready);
    let info = b.doctor().await.unwrap();
    assert_eq!(info.pool.size, 2, "{info:?}");
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_foreign_schema_is_refused_and_left_untouched() {
    let dsn = common::dsn();
    let schema = common::unique_schema("foreign");
    sql(&dsn, &format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id int); INSERT INTO {schema}.orders VALUES (1);")).await;
    let b = common::backend(&dsn, &schema);
    let e = b.warm().await.unwrap_err();
    assert!(matches!(e, MemoryError::Corruption(_)), "{e}");
    assert!(e.to_string().contains("another application"), "{e}");
    let e = b
        .remember(
            &Caller::new("u"),
            &RememberRequest::new("fact", "x").unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, MemoryError::Corruption(_)), "{e}");
    let tables = count(
        &dsn,
        &format!("SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}'"),
    )
    .await;
    assert_eq!(tables, 1, "nothing was added to the foreign schema");
    assert_eq!(
        count(&dsn, &format!("SELECT count(*) FROM {schema}.orders")).await,
        1
    );
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_newer_schema_is_refused_and_never_downgraded() {
    let dsn = common::dsn();
    let schema = common::unique_schema("newer");
    let b = common::backend(&dsn, &schema);
    b.remember(
        &Caller::new("u"),
        &RememberRequest::new("fact", "kept").unwrap(),
    )
    .await
    .unwrap();
    sql(
        &dsn,
        &format!("UPDATE {schema}.memgate_meta SET value = '99' WHERE key = 'schema_version'"),
    )
    .await;
    let fresh = common::backend(&dsn, &schema);
    let e = fresh.warm().await.unwrap_err();
    assert!(matches!(e, MemoryError::Corruption(_)), "{e}");
    assert!(
        e.to_string()
            .contains("newer than this memgate understands"),
        "{e}"
    );
    let version: String = {
        let (client, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let v = client
            .query_one(
                &format!("SELECT value FROM {schema}.memgate_meta WHERE key = 'schema_version'"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        drop(client);
        let _ = task.await;
        v
    };
    assert_eq!(version, "99");
    assert_eq!(
        count(&dsn, &format!("SELECT count(*) FROM {schema}.memories")).await,
        1
    );
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn the_password_reaches_no_error_and_no_debug_output() {
    let dsn = common::dsn();
    let config = PostgresConfig::for_dsn(&dsn).unwrap();
    let password = String::from_utf8(config.connection.get_password().unwrap().to_vec()).unwrap();
    assert!(!format!("{config:?}").contains(&password));
    // A wrong password: the server refuses; the message names no secret.
    let wrong = dsn.replacen(&password, "not-the-password-xyz", 1);
    let b = PostgresBackend::new(PostgresConfig::for_dsn(&wrong).unwrap()).unwrap();
    let e = b.warm().await.unwrap_err();
    let shown = format!("{e} {e:?} {b:?}");
    assert!(shown.contains("password authentication failed"), "{shown}");
    assert!(!shown.contains("not-the-password-xyz"), "{shown}");
    assert!(!shown.contains(&password), "{shown}");
    // Nothing listening: a connection error, still without the password.
    let closed = dsn.replacen(
        &format!("@127.0.0.1:{}", config.connection.get_ports()[0]),
        "@127.0.0.1:1",
        1,
    );
    let b = PostgresBackend::new(PostgresConfig::for_dsn(&closed).unwrap()).unwrap();
    let e = b.warm().await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains(&password), "{e}");
}

/// Two memgate schemas in one database share `btree_gin`; dropping one
/// schema must leave the extension, and the other schema's GIN indexes, in
/// place (it used to be created in the first schema's namespace).
#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn dropping_one_memgate_schema_leaves_the_others_indexes() {
    let dsn = common::dsn();
    let (first, second) = (
        common::unique_schema("drop_first"),
        common::unique_schema("drop_second"),
    );
    for schema in [&first, &second] {
        common::backend(&dsn, schema).migrate().await.unwrap();
    }
    let gin_indexes = |schema: &str| {
        format!(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = '{schema}' \
             AND indexdef LIKE '%USING gin%'"
        )
    };
    let before = count(&dsn, &gin_indexes(&second)).await;
    assert!(before > 0, "the schema has GIN indexes");
    sql(&dsn, &format!("DROP SCHEMA {first} CASCADE")).await;
    assert_eq!(count(&dsn, &gin_indexes(&second)).await, before);
    assert_eq!(
        count(
            &dsn,
            "SELECT count(*) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace \
             WHERE e.extname = 'btree_gin' AND n.nspname = 'public'"
        )
        .await,
        1
    );
    let b = common::backend(&dsn, &second);
    b.remember(
        &Caller::new("alice"),
        &RememberRequest::new("fact", "the hive is on the roof").unwrap(),
    )
    .await
    .unwrap();
    sql(&dsn, &format!("DROP SCHEMA {second} CASCADE")).await;
}

/// When `table` of `schema` was last analysed by a statement (not by
/// autovacuum), if ever.
async fn analysed(dsn: &str, schema: &str, table: &str) -> bool {
    common::connect(dsn)
        .await
        .query_one(
            "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables
             WHERE schemaname = $1 AND relname = $2",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_bulk_import_refreshes_the_planners_statistics_and_a_small_one_does_not() {
    let dsn = common::dsn();
    let schema = common::unique_schema("analyse");
    let b = common::backend(&dsn, &schema);
    let alice = Caller::new("alice").with_agent("coder");
    let messages = (0..1_000)
        .map(|i| {
            memgate_core::Message::human(format!("turn {i} about kettles")).with_id(format!("m{i}"))
        })
        .collect();
    b.capture(&memgate_core::CaptureRequest {
        caller: alice.clone().with_thread("t1"),
        messages,
        kind: memgate_core::CaptureKind::AfterTurn,
        trace_id: None,
    })
    .await
    .unwrap();
    let mut export = b.export(&alice).await.unwrap();
    let bulk = export.clone();
    export.turns.truncate(2);
    b.import(&Caller::new("bob").with_agent("coder"), &export)
        .await
        .unwrap();
    for table in ["memories", "turns"] {
        assert!(
            !analysed(&dsn, &schema, table).await,
            "{table} after 2 rows"
        );
    }
    let report = b
        .import(&Caller::new("carol").with_agent("coder"), &bulk)
        .await
        .unwrap();
    assert_eq!(report.turns_imported, 1_000);
    for table in ["memories", "turns"] {
        assert!(
            analysed(&dsn, &schema, table).await,
            "{table} after 1,000 rows"
        );
    }
}

/// Every search reads a GIN index's whole pending list, so the schema keeps
/// the recall indexes' lists at 256 kB (32 pages) instead of the default
/// 4 MB: after ~900 kB of new postings, each list is still within it
/// (`pgstattuple`'s `pgstatginindex`; at the default 4 MB, 182 pages).
#[tokio::test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn the_recall_indexes_pending_lists_stay_within_256_kb() {
    let dsn = common::dsn();
    let schema = common::unique_schema("pending");
    let b = common::backend(&dsn, &schema);
    let alice = Caller::new("alice").with_agent("coder");
    common::capture_numbered(&b, &alice, 20, 200, |n| {
        memgate_core::Message::human(format!(
            "turn{n} names place{n} person{n} colour{n} animal{n} tool{n} \
             river{n} city{n} dish{n} song{n} book{n} game{n}"
        ))
    })
    .await;
    for n in 0..200 {
        b.remember(
            &alice,
            &RememberRequest::new("fact", &format!("fact{n} about harbour{n} and quay{n}"))
                .unwrap(),
        )
        .await
        .unwrap();
    }
    sql(
        &dsn,
        "CREATE EXTENSION IF NOT EXISTS pgstattuple SCHEMA public",
    )
    .await;
    for index in ["turns_terms", "memories_search"] {
        let pending = count(
            &dsn,
            &format!("SELECT pending_pages::int8 FROM public.pgstatginindex('{schema}.{index}'::regclass)"),
        )
        .await;
        println!("{index}: {pending} pending pages");
        assert!(pending <= 32, "{index}: {pending} pending pages");
    }
    let turns_pages = count(
        &dsn,
        &format!("SELECT pg_relation_size('{schema}.turns_terms') / 8192"),
    )
    .await;
    assert!(
        turns_pages > 64,
        "the postings outgrew a short list ({turns_pages} pages)"
    );
    sql(&dsn, &format!("DROP SCHEMA {schema} CASCADE")).await;
}
