//! `memgate handoff …` on `postgres`: each step is its own process, as a
//! user at a terminal (or two agents) would run it, and the handoff goes
//! from a draft in one thread to a milestone committed from another.

use memgate_testsupport::real::unique_schema;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_memgate");

fn memgate(home: &Path, config: &Path, user: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(["--user", user, "handoff"])
        .args(args)
        .current_dir(home)
        .env("MEMGATE_HOME", home.join("state"))
        .env(
            "MEMGATE_TEST_POSTGRES_DSN",
            memgate_testsupport::real::postgres_dsn(),
        )
        .env_remove("MEMGATE_CONFIG")
        .env_remove("MEMGATE_URL")
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
fn the_handoff_cli_runs_the_flow_across_processes_and_threads_on_postgres() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("memgate.yaml");
    std::fs::write(
        &config,
        format!(
            "memory:\n  manager_class: postgres\n  backend_config:\n    dsn_env: MEMGATE_TEST_POSTGRES_DSN\n    schema: {}\n",
            unique_schema("hcli")
        ),
    )
    .unwrap();
    let run = |user: &str, args: &[&str]| memgate(home.path(), &config, user, args);

    let draft: serde_json::Value = serde_json::from_str(&ok(run(
        "alice",
        &[
            "prepare",
            "--objective",
            "finish the zephyr migration",
            "--progress",
            "schema migrated on staging",
            "--next-action",
            "run it on prod",
            "--thread",
            "t-1",
        ],
    )))
    .unwrap();
    let id = draft["id"].as_str().unwrap().to_owned();
    assert_eq!(draft["stage"], "draft");
    let corrected: serde_json::Value = serde_json::from_str(&ok(run(
        "alice",
        &[
            "correct",
            &id,
            "--objective",
            "finish the zephyr migration",
            "--next-action",
            "run it on prod after review",
        ],
    )))
    .unwrap();
    assert_eq!(corrected["revision"], 2);

    // Another user cannot see it, and a draft cannot be continued.
    let refused = run("bob", &["show", &id]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!run("alice", &["continue", &id]).status.success());

    ok(run("alice", &["finalize", &id]));
    let block = ok(run("alice", &["continue", &id, "--thread", "t-2"]));
    assert!(block.contains("trust=\"untrusted_history\""), "{block}");
    assert!(
        block.contains("Next action: run it on prod after review"),
        "{block}"
    );

    let bad = run("alice", &["acknowledge", &id, "--decision", "declined"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("message: is required when decision is declined"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let acked: serde_json::Value =
        serde_json::from_str(&ok(run("alice", &["acknowledge", &id]))).unwrap();
    assert_eq!(acked["stage"], "acknowledged");
    let committed = ok(run("alice", &["commit", &id]));
    assert!(
        committed.starts_with("Handoff committed as a milestone"),
        "{committed}"
    );
    let shown: serde_json::Value = serde_json::from_str(&ok(run("alice", &["show", &id]))).unwrap();
    assert_eq!(shown["stage"], "committed");
}
