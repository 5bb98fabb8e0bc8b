//! Hybrid recall's vectors through the binary: `memgate doctor`'s `vectors`
//! line and `memgate reembed`, on the real embedded store with the real
//! all-MiniLM-L6-v2 (`testkit/minilm` prints its directory) and
//! multilingual-e5-small (`testkit/e5` prints its file) and, for a model
//! change, the testkit's real model provider as the previous embedder.

use std::path::Path;
use std::process::Output;

mod common;

use common::memgate;

/// The local model's vector key: the model and the recipe of the text
/// embedded (`memgate_recall::vectors::vector_key`).
const LOCAL_MODEL: &str = "all-minilm-l6-v2/384; r3";

fn text(o: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `vectors` line of `memgate doctor` and its exit code.
fn doctor_vectors(home: &Path) -> (String, Option<i32>) {
    let o = memgate(home, &["doctor"]);
    let line = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.starts_with("vectors "))
        .unwrap_or_else(|| panic!("no vectors line: {}", text(&o)))
        .to_owned();
    (line, o.status.code())
}

fn use_embedder(home: &Path, embedder: &str) {
    std::fs::write(
        home.join("config.yaml"),
        format!("memory:\n  manager_class: local\n  backend_config:\n    embedder: {embedder}\n"),
    )
    .unwrap();
}

fn local_model() -> String {
    let [dir] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_MINILM_DIR"]);
    format!("{{kind: local, model_path: '{dir}'}}")
}

/// The e5 model's vector key and its `embedder` setting.
const E5_MODEL: &str = "multilingual-e5-small-q4/384; r3";

fn e5_model() -> String {
    let [file] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_E5_MODEL"]);
    format!("{{kind: local, model_path: '{file}'}}")
}

/// Four turns and one explicit memory: five items to embed.
fn seed(home: &Path) {
    let transcript = home.join("t.jsonl");
    let lines = [
        r#"{"type":"human","content":"My sister Ana lives in Porto and I visit her every August","id":"u1"}"#,
        r#"{"type":"ai","content":"Porto in August sounds lovely.","id":"a1"}"#,
        r#"{"type":"human","content":"I adopted a kitten last spring","id":"u2"}"#,
        r#"{"type":"ai","content":"What is the kitten called?","id":"a2"}"#,
    ];
    std::fs::write(&transcript, lines.join("\n")).unwrap();
    let o = memgate(
        home,
        &["capture", "--thread", "t1", transcript.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = memgate(home, &["remember", "Practising piano every evening"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `memgate reembed` embeds the five seeded items with the local model,
/// `doctor` then says all are embedded, and hybrid recall finds the kitten
/// through a word no turn uses (lexically "cat" matches nothing).
fn reembeds_the_seed_and_finds_the_kitten(h: &Path) {
    reembeds_the_seed_with(h, LOCAL_MODEL);
}

/// `memgate reembed` embeds the seed's five items with `model` (a vector
/// key), `doctor` then says all are, and a search by meaning finds them.
fn reembeds_the_seed_with(h: &Path, model: &str) {
    let o = memgate(h, &["reembed", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["model"], model);
    assert_eq!(
        (report["embedded"].as_u64(), report["total"].as_u64()),
        (Some(5), Some(5))
    );
    let (line, code) = doctor_vectors(h);
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.contains(&format!("5 / 5 items embedded with {model} (all embedded)")),
        "{line}"
    );
    let o = memgate(h, &["search", "cat", "--top-k", "1", "--json"]);
    let hits: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(hits.to_string().contains("kitten"), "{hits}");
}

#[test]
#[ignore = "real server: the MiniLM model (testkit/minilm) and the e5 model (testkit/e5)"]
fn switching_to_e5_is_a_model_change_that_reembed_adopts() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    use_embedder(h, &local_model());
    seed(h);
    reembeds_the_seed_and_finds_the_kitten(h);
    // The operator names e5's file: the MiniLM vectors are never compared
    // with e5's; doctor names both until reembed.
    use_embedder(h, &e5_model());
    let (line, code) = doctor_vectors(h);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains("the file's vectors are of all-minilm-l6-v2/384")
            && line.contains("the configured embedder makes multilingual-e5-small-q4/384"),
        "{line}"
    );
    reembeds_the_seed_with(h, E5_MODEL);
}

#[test]
fn without_an_embedder_doctor_says_lexical_and_reembed_says_what_to_configure() {
    let home = tempfile::tempdir().unwrap();
    let (line, code) = doctor_vectors(home.path());
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.contains("ok   off: no embedder configured, recall is lexical"),
        "{line}"
    );
    let o = memgate(home.path(), &["reembed"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no embedder is configured") && err.contains("backend_config.embedder"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn reembed_refuses_a_backend_without_vectors() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        "memory:\n  manager_class: noop\n",
    )
    .unwrap();
    let o = memgate(home.path(), &["reembed"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o)
            .contains("only the local and postgres stores keep vectors, and manager_class is noop"),
        "{}",
        text(&o)
    );
}

#[test]
#[ignore = "real server: the MiniLM model (testkit/minilm)"]
fn reembed_embeds_everything_and_doctor_shows_the_progress() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    use_embedder(h, &local_model());
    seed(h);
    let (line, code) = doctor_vectors(h);
    assert_eq!(code, Some(0), "{line}");
    // The background indexer may have embedded some already; the total is fixed.
    assert!(
        line.contains(&format!("/ 5 items embedded with {LOCAL_MODEL}")),
        "{line}"
    );

    reembeds_the_seed_and_finds_the_kitten(h);
}

#[test]
#[ignore = "real server: the MiniLM model (testkit/minilm) and the testkit model provider (testkit/up --only provider)"]
fn a_model_change_is_pending_in_doctor_until_reembed_adopts_the_new_model() {
    let [url] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_MODEL_PROVIDER_URL"]);
    let local = local_model();
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let endpoint = format!(
        "{{kind: endpoint, url: '{}', model: fake-embed, dimensions: 96}}",
        url.trim_end_matches('/')
    );
    use_embedder(h, &endpoint);
    seed(h);
    let o = memgate(h, &["reembed"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("re-embedded 5 / 5 items with fake-embed/96"),
        "{}",
        text(&o)
    );

    // The operator switches to the local model: nothing is re-embedded
    // silently, doctor fails naming both models and the command to run.
    use_embedder(h, &local);
    let (line, code) = doctor_vectors(h);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains(
            "FAIL model change pending: the file's vectors are of fake-embed/96 (recipe r3: "
        ),
        "{line}"
    );
    assert!(
        line.contains("the configured embedder makes all-minilm-l6-v2/384 (recipe r3: ")
            && line.ends_with("; recall stays lexical until `memgate reembed`"),
        "{line}"
    );
    // Recall still answers (lexically).
    let o = memgate(h, &["search", "Porto", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Porto"));

    let o = memgate(h, &["reembed"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("model change: fake-embed/96; r3 -> all-minilm-l6-v2/384; r3"),
        "{out}"
    );
    assert!(
        out.contains("re-embedded 5 / 5 items with all-minilm-l6-v2/384")
            && out.contains("(5 old vectors dropped)"),
        "{out}"
    );
    let (line, code) = doctor_vectors(h);
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.contains("5 / 5 items embedded with all-minilm-l6-v2/384; r3 (all embedded)"),
        "{line}"
    );
}

#[test]
#[ignore = "real servers: the MiniLM model (testkit/minilm) and PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
fn reembed_on_postgres_embeds_everything_and_doctor_shows_the_progress() {
    let [_dsn] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_PGVECTOR_DSN"]);
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let schema = memgate_testsupport::real::unique_schema("v_reembed");
    std::fs::write(
        h.join("config.yaml"),
        format!(
            "memory:\n  manager_class: postgres\n  backend_config:\n    \
             dsn_env: MEMGATE_TEST_PGVECTOR_DSN\n    schema: {schema}\n    embedder: {}\n",
            local_model()
        ),
    )
    .unwrap();
    seed(h);
    reembeds_the_seed_and_finds_the_kitten(h);
}
