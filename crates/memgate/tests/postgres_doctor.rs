//! `memgate doctor` on `manager_class: postgres` against the real cluster
//! (`testkit/postgres-up`): server version, schema version and pool state are
//! printed, a newer schema and a refused login fail the check, and the
//! password shows up in none of it.

use memgate_testsupport::real::unique_schema;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");
const DSN_ENV: &str = "MEMGATE_TEST_POSTGRES_DSN";

/// The test cluster's DSN (the tests are `#[ignore]`d: a plain `cargo test`
/// lists them as ignored, `--include-ignored` runs them).
fn dsn() -> String {
    memgate_testsupport::real::postgres_dsn()
}

/// The password inside `dsn` (`postgres://user:password@host…`).
fn password(dsn: &str) -> String {
    let userinfo = dsn.split('@').next().unwrap();
    userinfo.rsplit(':').next().unwrap().to_owned()
}

/// `memgate doctor` with a postgres config whose DSN is read from `env`.
fn doctor(home: &Path, schema: &str, env: (&str, &str)) -> (Output, String) {
    let config = home.join(format!("{schema}.yaml"));
    std::fs::write(
        &config,
        format!(
            "memory:\n  manager_class: postgres\n  backend_config:\n    dsn_env: {}\n    schema: {schema}\n",
            env.0
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("doctor")
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env(env.0, env.1)
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn psql(dsn: &str, sql: &str) {
    let out = Command::new("psql")
        .args([dsn, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .expect("psql (Debian's postgresql-client, installed by testkit/postgres-up)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
fn doctor_shows_server_schema_and_pool_without_the_password() {
    let dsn = dsn();
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("ok");
    let (out, text) = doctor(home.path(), &schema, (DSN_ENV, &dsn));
    assert!(out.status.success(), "{text}");
    let server = text
        .lines()
        .find(|l| l.starts_with("postgres ok   server "))
        .unwrap_or_else(|| panic!("no server line: {text}"));
    assert!(
        server["postgres ok   server ".len()..].starts_with(|c: char| c.is_ascii_digit()),
        "{server}"
    );
    let current = format!(
        "postgres ok   schema {schema} at version {} (current)",
        memgate_postgres::SCHEMA_VERSION
    );
    assert!(text.contains(&current), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("postgres ok   pool ") && l.contains(" of 8 open")),
        "{text}"
    );
    assert!(!text.contains(&password(&dsn)), "password leaked: {text}");
    psql(&dsn, &format!("DROP SCHEMA {schema} CASCADE"));
}

#[test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
fn doctor_fails_on_a_newer_schema_and_on_a_refused_login_without_the_password() {
    let dsn = dsn();
    let home = tempfile::tempdir().unwrap();
    let schema = unique_schema("newer");
    let (out, text) = doctor(home.path(), &schema, (DSN_ENV, &dsn));
    assert!(out.status.success(), "{text}");
    psql(
        &dsn,
        &format!("UPDATE {schema}.memgate_meta SET value = '99' WHERE key = 'schema_version'"),
    );
    let (out, text) = doctor(home.path(), &schema, (DSN_ENV, &dsn));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("postgres FAIL") && l.contains("schema version 99")),
        "{text}"
    );
    assert!(!text.contains(&password(&dsn)), "password leaked: {text}");
    psql(&dsn, &format!("DROP SCHEMA {schema} CASCADE"));

    let wrong = "doctor-wrong-password-7f3a";
    let bad_dsn = dsn.replacen(&format!(":{}@", password(&dsn)), &format!(":{wrong}@"), 1);
    assert_ne!(bad_dsn, dsn);
    let (out, text) = doctor(
        home.path(),
        &unique_schema("login"),
        ("MEMGATE_DOCTOR_TEST_DSN", &bad_dsn),
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("postgres FAIL"), "{text}");
    assert!(!text.contains(wrong), "password leaked: {text}");
}
