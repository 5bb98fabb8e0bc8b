//! `memgate migrate` between `local` and a real PostgreSQL, through the
//! binary: everything arrives, a re-run adds nothing, and the way back
//! yields the same memory.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");
const DSN_ENV: &str = "MEMGATE_TEST_POSTGRES_DSN";

/// The test cluster's DSN (the tests are `#[ignore]`d: a plain `cargo test`
/// lists them as ignored, `--include-ignored` runs them).
fn dsn() -> String {
    memgate_testsupport::real::postgres_dsn()
}

/// Runs memgate with `home` as MEMGATE_HOME; `config` selects the backend.
fn memgate(home: &Path, config: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let out = cmd
        .args(args)
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .env_remove("MEMGATE_AGENT")
        .env("MEMGATE_USER", "mia")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "memgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
fn local_to_postgres_and_back_loses_and_duplicates_nothing() {
    dsn(); // the config reads DSN_ENV itself; this fails clearly when it is unset
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let schema = memgate_testsupport::real::unique_schema("m_cli");
    let pg = h.join("postgres.yaml");
    std::fs::write(
        &pg,
        format!("memory:\n  manager_class: postgres\n  backend_config:\n    dsn_env: {DSN_ENV}\n    schema: {schema}\n"),
    )
    .unwrap();
    // Local memory: three facts (one retired) and a captured thread.
    for text in [
        "prefers metric units",
        "works on the billing team",
        "lives in Porto",
    ] {
        memgate(h, None, &["remember", text]);
    }
    let listed = json(&memgate(h, None, &["facts", "list", "--json"]));
    let porto = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["text"] == "lives in Porto")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    memgate(h, None, &["facts", "retire", &porto]);
    let transcript = h.join("t.json");
    std::fs::write(
        &transcript,
        r#"[{"type":"human","content":"what units do I use","id":"1"},
            {"type":"ai","content":"metric, always","id":"2"}]"#,
    )
    .unwrap();
    memgate(
        h,
        None,
        &["capture", "--thread", "th1", transcript.to_str().unwrap()],
    );

    let first = json(&memgate(
        h,
        Some(&pg),
        &["migrate", "--from", "local", "--to", "postgres", "--json"],
    ));
    assert_eq!(first["scopes"], 1);
    assert_eq!(
        (
            first["facts_imported"].as_u64(),
            first["turns_imported"].as_u64()
        ),
        (Some(3), Some(2))
    );
    let again = json(&memgate(
        h,
        Some(&pg),
        &["migrate", "--from", "local", "--to", "postgres", "--json"],
    ));
    assert_eq!(
        (
            again["facts_imported"].as_u64(),
            again["turns_imported"].as_u64()
        ),
        (Some(0), Some(0))
    );
    assert_eq!(
        (
            again["facts_already_present"].as_u64(),
            again["turns_already_present"].as_u64()
        ),
        (Some(3), Some(2))
    );
    let in_pg = json(&memgate(
        h,
        Some(&pg),
        &["facts", "list", "--all", "--json"],
    ));
    assert_eq!(in_pg.as_array().unwrap().len(), 3);
    let recalled =
        String::from_utf8(memgate(h, Some(&pg), &["recall", "--query", "which units"]).stdout)
            .unwrap();
    assert!(recalled.contains("metric"), "{recalled}");

    // And back, into an empty local store.
    let back = tempfile::tempdir().unwrap();
    std::fs::copy(&pg, back.path().join("postgres.yaml")).unwrap();
    let pg_back = back.path().join("postgres.yaml");
    let returned = json(&memgate(
        back.path(),
        Some(&pg_back),
        &["migrate", "--from", "postgres", "--to", "local", "--json"],
    ));
    assert_eq!(
        (
            returned["facts_imported"].as_u64(),
            returned["turns_imported"].as_u64()
        ),
        (Some(3), Some(2))
    );
    let local_export = json(&memgate(back.path(), None, &["facts", "export"]));
    assert_eq!(local_export["facts"].as_array().unwrap().len(), 3);
    assert_eq!(local_export["turns"].as_array().unwrap().len(), 2);
    let retired: Vec<&Value> = local_export["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["state"] == "retired")
        .collect();
    assert_eq!(retired.len(), 1);
    assert_eq!(retired[0]["text"], "lives in Porto");
}
