//! Hybrid recall: vectors scoped like every row, model changes made
//! explicit, embedder failures falling back to lexical ranking, and the
//! endpoint embedder against the testkit's real model provider
//! (`MEMGATE_TEST_MODEL_PROVIDER_URL`, from `testkit/up --only provider`).

mod common;

use common::{alice, capture, cited, files_containing, files_containing_any, recall_of, TestStore};
use memgate_conformance::hybrid::{concept_turns, ConceptEmbedder};
use memgate_core::{Caller, ForgetTarget, Message, RememberRequest, SearchQuery};
use memgate_embed::{EmbedError, Embedder, EndpointConfig, EndpointEmbedder};
use memgate_recall::ranked::Among;
use memgate_store::vectors::ModelState;
use memgate_store::{LocalConfig, MemoryStore};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fake embedder for erasure tests (named as one): each text gets 16
/// floats drawn from its own hash, so one item's vector bytes can be looked
/// for in the files; it records every text it was given.
#[derive(Default)]
struct DigestEmbedder {
    seen: Mutex<Vec<String>>,
}

impl DigestEmbedder {
    fn vector(text: &str) -> Vec<f32> {
        let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut v: Vec<f32> = (0..16)
            .map(|_| {
                h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        memgate_embed::normalize(&mut v);
        v
    }

    /// The bytes the store writes for `text`'s vector.
    fn bytes(text: &str) -> Vec<u8> {
        Self::vector(text)
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect()
    }
}

impl Embedder for DigestEmbedder {
    fn model(&self) -> &str {
        "digest/16"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(texts.iter().map(|t| t.to_string()));
        Ok(texts.iter().map(|t| Self::vector(t)).collect())
    }
}

fn store_with(dir: &std::path::Path, embedder: Arc<dyn Embedder>) -> MemoryStore {
    MemoryStore::open(dir.join("memgate.sqlite3"), LocalConfig::default())
        .unwrap()
        .with_embedder(embedder)
}

fn seed(store: &MemoryStore, caller: &Caller) {
    store
        .capture(&capture(caller, "t1", concept_turns()))
        .unwrap();
}

fn texts(store: &MemoryStore, caller: &Caller, query: &str) -> Vec<String> {
    store
        .ranked(caller, query, 10, Among::All)
        .unwrap()
        .into_iter()
        .map(|r| r.text)
        .collect()
}

#[test]
fn dense_retrieval_finds_what_shares_no_word_and_stays_in_its_scope() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), ConceptEmbedder::new("concepts/5"));
    let bob = Caller::new("bob");
    seed(&store, &alice());
    store
        .capture(&capture(
            &bob,
            "b",
            vec![Message::human("Bob's feline is called Secret")],
        ))
        .unwrap();
    assert_eq!(store.index_all_vectors(2).unwrap(), 4);
    let got = texts(&store, &alice(), "Which cat do I own?");
    assert_eq!(got[0], "I adopted a kitten last spring", "{got:?}");
    assert!(got.iter().all(|t| !t.contains("Secret")), "{got:?}");
    // Search uses the same ranking, with its kind filter.
    let hits = store
        .search(
            &alice(),
            &SearchQuery {
                query: "cat".into(),
                top_k: 5,
                kind: Some("turn".into()),
            },
        )
        .unwrap();
    assert_eq!(hits[0].content, "I adopted a kitten last spring");
    // Bob's block never carries Alice's rows.
    let bob_got = texts(&store, &bob, "kitten");
    assert_eq!(bob_got, ["Bob's feline is called Secret"]);
    assert!(store.retrieval_counts().hybrid >= 3);
    // Every vector row carries the scope of its item.
    let progress = store.vector_progress().unwrap();
    assert_eq!((progress.embedded, progress.total), (4, 4));
}

#[test]
fn memories_are_embedded_again_when_revised_and_dropped_when_retired() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), ConceptEmbedder::new("concepts/5"));
    let id = match store
        .remember(
            &alice(),
            &RememberRequest::new("fact", "Drives an old vehicle").unwrap(),
        )
        .unwrap()
    {
        memgate_core::RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    };
    assert_eq!(store.index_all_vectors(8).unwrap(), 1);
    store
        .revise_fact(
            &alice(),
            &id,
            &memgate_core::FactPatch {
                text: Some("Plays piano".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        store.index_all_vectors(8).unwrap(),
        1,
        "the revision is embedded"
    );
    assert_eq!(texts(&store, &alice(), "music"), ["Plays piano"]);
    store.retire_fact(&alice(), &id).unwrap();
    assert!(texts(&store, &alice(), "music").is_empty());
    assert_eq!(
        vector_rows(&dir.path().join("memgate.sqlite3")),
        0,
        "a retired memory keeps no vector"
    );
}

#[test]
fn an_embedder_failure_falls_back_to_lexical_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = ConceptEmbedder::new("concepts/5");
    let store = store_with(dir.path(), embedder.clone());
    seed(&store, &alice());
    store.index_all_vectors(8).unwrap();
    embedder.failing.store(true, Ordering::Relaxed);
    // Lexical still answers what shares words; nothing errors.
    let got = texts(&store, &alice(), "piano evening");
    assert_eq!(got[0], "Practising piano every evening");
    let recall = store.recall(&recall_of(&alice(), Some("kitten"))).unwrap();
    assert_eq!(recall.items[0].text, "I adopted a kitten last spring");
    assert_eq!(store.retrieval_counts().embedder_failures, 2);
    // The indexer reports the failure and writes nothing.
    store
        .capture(&capture(&alice(), "t2", vec![Message::human("New car")]))
        .unwrap();
    assert!(store.index_vectors(8).is_err());
    assert_eq!(store.vector_progress().unwrap().embedded, 3);
}

#[test]
fn an_unreachable_endpoint_is_lexical_within_its_deadline() {
    // A port nobody listens on: connection refused, fast; a blackhole
    // address would show the deadline, which the unit tests cover.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let endpoint = EndpointEmbedder::new(EndpointConfig {
        url: format!("http://127.0.0.1:{port}/v1"),
        model: "fake-embed".into(),
        api_key: Some(memgate_core::Secret::new("sk-never-shown")),
        dimensions: None,
        deadline: Duration::from_millis(300),
        batch: 8,
    })
    .unwrap();
    let err = endpoint.embed(&["x"]).unwrap_err().to_string();
    assert!(!err.contains("sk-never-shown"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), Arc::new(endpoint));
    seed(&store, &alice());
    let started = Instant::now();
    let got = texts(&store, &alice(), "piano");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(got[0], "Practising piano every evening");
    assert_eq!(store.retrieval_counts().embedder_failures, 1);
}

#[test]
fn a_model_change_keeps_recall_lexical_until_reembed() {
    let dir = tempfile::tempdir().unwrap();
    let first = store_with(dir.path(), ConceptEmbedder::new("concepts/5"));
    seed(&first, &alice());
    first.index_all_vectors(8).unwrap();
    first.close().unwrap();

    let second = store_with(dir.path(), ConceptEmbedder::new("concepts-v2/5"));
    assert_eq!(
        second.model_state().unwrap(),
        ModelState::Mismatch {
            stored: "concepts/5; r3".into(),
            configured: "concepts-v2/5; r3".into()
        }
    );
    assert!(second.vector_progress().unwrap().model_mismatch);
    assert_eq!(
        second.index_vectors(8).unwrap(),
        0,
        "nothing re-embedded silently"
    );
    // Lexical: the kitten is not found through "cat".
    assert!(texts(&second, &alice(), "cat").is_empty());
    assert_eq!(second.retrieval_counts().hybrid, 0);

    second.reembed().unwrap();
    assert_eq!(second.model_state().unwrap(), ModelState::Current);
    assert_eq!(second.index_all_vectors(8).unwrap(), 3);
    assert_eq!(
        texts(&second, &alice(), "cat")[0],
        "I adopted a kitten last spring"
    );
}

#[test]
fn vectors_of_an_older_recipe_are_a_pending_change_that_reembed_redoes() {
    let dir = tempfile::tempdir().unwrap();
    let first = store_with(dir.path(), Arc::new(DigestEmbedder::default()));
    seed(&first, &alice());
    assert_eq!(first.index_all_vectors(8).unwrap(), 3);
    first.close().unwrap();
    // The file as memgate wrote it before recipes were named: the key was
    // the model alone, and turns were embedded alone.
    let conn = rusqlite::Connection::open(dir.path().join("memgate.sqlite3")).unwrap();
    conn.execute_batch(
        "UPDATE vectors SET model = 'digest/16'; UPDATE vector_model SET model = 'digest/16';",
    )
    .unwrap();
    drop(conn);

    let embedder = Arc::new(DigestEmbedder::default());
    let second = store_with(dir.path(), embedder.clone());
    assert_eq!(
        second.model_state().unwrap(),
        ModelState::Mismatch {
            stored: "digest/16".into(),
            configured: format!("digest/16; {}", memgate_recall::vectors::RECIPE),
        }
    );
    let progress = second.vector_progress().unwrap();
    assert!(progress.model_mismatch);
    let line = progress.diagnostic();
    assert!(!line.healthy, "{line:?}");
    assert!(
        line.detail
            .contains("digest/16 (recipe r1: each turn alone)")
            && line.detail.contains(
                "recipe r3: each turn after the previous turn of its thread, with its date"
            ),
        "{}",
        line.detail
    );
    assert_eq!(
        second.index_vectors(8).unwrap(),
        0,
        "nothing redone silently"
    );
    assert!(embedder.seen.lock().unwrap().is_empty());

    assert_eq!(second.reembed().unwrap(), 3);
    assert_eq!(second.index_all_vectors(8).unwrap(), 3);
    assert_eq!(second.model_state().unwrap(), ModelState::Current);
    let progress = second.vector_progress().unwrap();
    assert_eq!((progress.embedded, progress.total), (3, 3));
    assert!(progress.diagnostic().healthy);
    // Redone with the current recipe: each turn after the one before it.
    let seen = embedder.seen.lock().unwrap();
    assert!(
        seen.iter()
            .any(|t| t.starts_with("I adopted a kitten last spring\n")
                && t.ends_with("The garage fixed my vehicle")),
        "{seen:?}"
    );
}

#[test]
fn without_an_embedder_nothing_changes() {
    let t = TestStore::new();
    seed(&t.store, &alice());
    assert_eq!(t.store.model_state().unwrap(), ModelState::Off);
    assert_eq!(t.store.index_vectors(8).unwrap(), 0);
    assert!(texts(&t.store, &alice(), "cat").is_empty());
    let recall = t.store.recall(&recall_of(&alice(), Some("piano"))).unwrap();
    assert!(cited(&recall)[0].starts_with("turn_"));
    assert_eq!(recall.items[0].text, "Practising piano every evening");
    assert!(t.store.reembed().is_err());
}

#[test]
#[ignore = "real server: the testkit model provider (testkit/up --only provider)"]
fn the_endpoint_embedder_works_against_the_testkit_model_provider() {
    let [url] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_MODEL_PROVIDER_URL"]);
    let endpoint = EndpointEmbedder::new(EndpointConfig {
        // The testkit exports the base with its `/v1`.
        url: url.trim_end_matches('/').to_owned(),
        model: "fake-embed".into(),
        api_key: None,
        dimensions: Some(96),
        deadline: Duration::from_secs(5),
        batch: 2,
    })
    .unwrap();
    assert_eq!(endpoint.model(), "fake-embed/96");
    let vectors = endpoint
        .embed(&["my sister lives in Porto", "sister Porto", "piano lessons"])
        .unwrap();
    assert_eq!(vectors.len(), 3, "three inputs over two batches");
    assert!(vectors.iter().all(|v| v.len() == 96));
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(dot(&vectors[0], &vectors[1]) > dot(&vectors[0], &vectors[2]));

    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), Arc::new(endpoint));
    seed(&store, &alice());
    assert_eq!(store.index_all_vectors(2).unwrap(), 3);
    assert_eq!(
        texts(&store, &alice(), "piano")[0],
        "Practising piano every evening"
    );
    assert_eq!(store.retrieval_counts().embedder_failures, 0);
    assert!(store.retrieval_counts().hybrid >= 1);
}

/// Rows of the `vectors` table (read from the file on its own connection).
fn vector_rows(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM vectors", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn forgetting_erases_the_vectors_of_what_is_forgotten_from_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memgate.sqlite3");
    let store = store_with(dir.path(), Arc::new(DigestEmbedder::default()));
    let (erin, bob) = (Caller::new("erin"), Caller::new("bob"));
    let fact = "my locker code is quokka7731";
    let id = match store
        .remember(&erin, &RememberRequest::new("fact", fact).unwrap())
        .unwrap()
    {
        memgate_core::RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    };
    let (t1, t2, kept) = (
        "erin said platypus5519 in the first thread",
        "erin said koala3307 in the second thread",
        "bob said dingo1180 and stays",
    );
    store
        .capture(&capture(&erin, "t1", vec![Message::human(t1)]))
        .unwrap();
    store
        .capture(&capture(&erin, "t2", vec![Message::human(t2)]))
        .unwrap();
    store
        .capture(&capture(&bob, "t1", vec![Message::human(kept)]))
        .unwrap();
    let filler: Vec<Message> = (0..150)
        .map(|i| Message::human(format!("filler turn {i} about gardening")))
        .collect();
    store.capture(&capture(&bob, "t9", filler)).unwrap();
    assert_eq!(store.index_all_vectors(32).unwrap(), 154);
    // Hybrid recall reads the in-memory copies, which erasure must drop.
    assert!(!texts(&store, &erin, "locker code").is_empty());
    store.checkpoint().unwrap();
    // The scan finds each vector while it is stored.
    for text in [fact, t1, t2, kept] {
        assert!(
            !files_containing_any(&path, &[DigestEmbedder::bytes(text)]).is_empty(),
            "{text}"
        );
    }
    let gone = |text: &str| files_containing_any(&path, &[DigestEmbedder::bytes(text)]);

    store
        .forget(&erin, &ForgetTarget::Fact { id: id.clone() })
        .unwrap();
    assert_eq!(gone(fact), Vec::<String>::new());
    assert_eq!(vector_rows(&path), 153);
    let left = texts(&store, &erin, "locker code quokka7731");
    assert!(left.iter().all(|t| !t.contains("quokka")), "{left:?}");

    store
        .forget(&erin.clone().with_thread("t1"), &ForgetTarget::Thread)
        .unwrap();
    assert_eq!(gone(t1), Vec::<String>::new());
    assert!(!gone(t2).is_empty(), "the other thread keeps its vector");

    store.forget(&erin, &ForgetTarget::User).unwrap();
    assert_eq!(gone(t2), Vec::<String>::new());
    assert_eq!(files_containing(&path, "koala3307"), Vec::<String>::new());
    assert_eq!(vector_rows(&path), 151, "bob's vectors stay");
    assert!(!gone(kept).is_empty());

    store.forget(&bob, &ForgetTarget::Scope).unwrap();
    assert_eq!(gone(kept), Vec::<String>::new());
    assert_eq!(vector_rows(&path), 0);
    // Checked on a new connection: a pooled reader that last read before
    // the erasure can report the recall index stale under `quick_check`
    // (seen without vectors too; `MemoryStore::check_integrity` says why).
    let fresh = rusqlite::Connection::open(&path).unwrap();
    let verdict: String = fresh
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verdict, "ok");
}

#[test]
fn the_retention_sweep_erases_vectors_with_their_turns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memgate.sqlite3");
    let config = LocalConfig {
        max_turn_age: Some(Duration::from_secs(3600)),
        ..LocalConfig::default()
    };
    let store = MemoryStore::open(&path, config)
        .unwrap()
        .with_embedder(Arc::new(DigestEmbedder::default()));
    let old = "an old turn about wombat8842";
    store
        .capture(&capture(&alice(), "t1", vec![Message::human(old)]))
        .unwrap();
    store.index_all_vectors(8).unwrap();
    let later = std::time::SystemTime::now() + Duration::from_secs(7200);
    assert_eq!(store.sweep_expired_turns(later).unwrap(), 1);
    assert_eq!(vector_rows(&path), 0);
    assert_eq!(
        files_containing_any(&path, &[DigestEmbedder::bytes(old)]),
        Vec::<String>::new()
    );
}

#[test]
fn vectors_are_made_from_the_redacted_text_never_the_secret() {
    const KEY: &str = "sk-proj-q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_VnM3hPz8LcB2yAd5GfS0";
    let dir = tempfile::tempdir().unwrap();
    let embedder = Arc::new(DigestEmbedder::default());
    let store = store_with(dir.path(), embedder.clone());
    let said = format!("my OpenAI key is {KEY}, wire the billing job");
    store
        .capture(&capture(&alice(), "t1", vec![Message::human(said.clone())]))
        .unwrap();
    assert_eq!(store.index_all_vectors(8).unwrap(), 1);
    store
        .recall(&recall_of(&alice(), Some(&format!("billing {KEY}"))))
        .unwrap();
    let seen = embedder.seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|t| t.contains("[redacted:api_key]")),
        "{seen:?}"
    );
    // Neither the stored turn nor the query reaches the embedder with it.
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|t| !t.contains(KEY)), "{seen:?}");
    let path = dir.path().join("memgate.sqlite3");
    store.checkpoint().unwrap();
    assert_eq!(
        files_containing_any(&path, &[DigestEmbedder::bytes(&said)]),
        Vec::<String>::new()
    );
    assert!(!files_containing_any(&path, &[DigestEmbedder::bytes(&seen[0])]).is_empty());
}

#[test]
fn a_turn_is_embedded_with_the_turn_before_it_and_its_speaker() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Arc::new(DigestEmbedder::default());
    let store = store_with(dir.path(), embedder.clone());
    let messages = vec![
        Message::human("Did you go to Porto?").with_name("Ana"),
        Message::ai("Yes, last May!").with_name("Bob"),
    ];
    store.capture(&capture(&alice(), "t1", messages)).unwrap();
    // Another thread's turn is not the previous one.
    store
        .capture(&capture(
            &alice(),
            "t2",
            vec![Message::human("Hello again")],
        ))
        .unwrap();
    assert_eq!(store.index_all_vectors(8).unwrap(), 3);
    let seen = embedder.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "Ana: Did you go to Porto?",
            "Did you go to Porto?\nBob: Yes, last May!",
            "Hello again"
        ]
    );
}

/// Fake embedder for the prefilter test (named as one): 64 dimensions;
/// a text that mentions a cat (or a pet) points along one fixed direction, every other
/// text gets a vector drawn from its hash ([`DigestEmbedder`]'s, four
/// times over).
struct CatEmbedder;

impl Embedder for CatEmbedder {
    fn model(&self) -> &str {
        "cat/64"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                // The embedded text of a turn starts with the turn before it.
                let own = t.rsplit('\n').next().unwrap_or(t).to_lowercase();
                let mut v: Vec<f32> = if ["cat", "kitten", "pet"].iter().any(|w| own.contains(w)) {
                    (0..64)
                        .map(|d| if d % 3 == 0 { 1.0 } else { -0.5 })
                        .collect()
                } else {
                    (0..4)
                        .flat_map(|i| DigestEmbedder::vector(&format!("{i}{t}")))
                        .collect()
                };
                memgate_embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

#[test]
fn the_sign_prefilter_of_a_large_scope_finds_its_nearest_turn_and_no_other_scope() {
    // 3,400 turns: above the 3,200 the sign prefilter keeps for a recall
    // of 10 (50 × 4 × 16), so the pass runs; the one turn about a cat is
    // the 3,351st (past the first 3,200) and shares no word with the question. Bob's scope holds
    // a turn about a cat too, which Alice's recall must never see.
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), Arc::new(CatEmbedder));
    let filler: Vec<Message> = (0..3400)
        .map(|i| {
            if i == 3350 {
                Message::human("We adopted a kitten called Miso")
            } else {
                Message::human(format!("note number {i} about the weekly report"))
            }
            .with_id(format!("m{i}"))
        })
        .collect();
    store.capture(&capture(&alice(), "long", filler)).unwrap();
    let bob = Caller::new("bob");
    store
        .capture(&capture(
            &bob,
            "b",
            vec![Message::human("Bob's cat sleeps all day")],
        ))
        .unwrap();
    assert_eq!(store.index_all_vectors(500).unwrap(), 3401);
    let got = texts(&store, &alice(), "Which pet do I own?");
    assert_eq!(got[0], "We adopted a kitten called Miso", "{got:?}");
    assert!(got.iter().all(|t| !t.contains("Bob")), "{got:?}");
    assert_eq!(
        texts(&store, &bob, "Which pet?")[0],
        "Bob's cat sleeps all day"
    );
}

/// Fake embedder (named as one): [`ConceptEmbedder`]'s vectors, recording
/// the name of the thread each call ran on.
struct ThreadRecorder {
    inner: Arc<dyn Embedder>,
    threads: Mutex<Vec<Option<String>>>,
}

impl Embedder for ThreadRecorder {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let name = std::thread::current().name().map(str::to_owned);
        self.threads.lock().unwrap().push(name);
        self.inner.embed(texts)
    }
}

#[test]
fn a_recalls_query_is_embedded_on_its_own_thread_while_the_recall_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Arc::new(ThreadRecorder {
        inner: ConceptEmbedder::new("concepts/5"),
        threads: Mutex::default(),
    });
    let store = store_with(dir.path(), recorder.clone());
    seed(&store, &alice());
    store.index_all_vectors(2).unwrap();
    let indexed = recorder.threads.lock().unwrap().len();
    let got = texts(&store, &alice(), "Which cat do I own?");
    // The dense leg found what shares no word with the query ...
    assert_eq!(got[0], "I adopted a kitten last spring", "{got:?}");
    // ... from a vector made off the recall's thread.
    let threads = recorder.threads.lock().unwrap();
    assert_eq!(
        threads[indexed..],
        [Some("memgate-query-embed".to_owned())],
        "{threads:?}"
    );
}

/// Fake embedder (named as one): [`ConceptEmbedder`]'s documents, and a
/// panic for every query.
struct PanickingQueries(Arc<dyn Embedder>);

impl Embedder for PanickingQueries {
    fn model(&self) -> &str {
        self.0.model()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0.embed(texts)
    }

    fn embed_query(&self, _: &str) -> Result<Vec<f32>, EmbedError> {
        panic!("a broken model");
    }
}

#[test]
fn an_embedder_that_panics_on_a_query_is_a_counted_failure_and_recall_is_lexical() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(
        dir.path(),
        Arc::new(PanickingQueries(ConceptEmbedder::new("concepts/5"))),
    );
    seed(&store, &alice());
    store.index_all_vectors(8).unwrap();
    let got = texts(&store, &alice(), "piano evening");
    assert_eq!(got[0], "Practising piano every evening");
    assert_eq!(store.retrieval_counts().embedder_failures, 1);
    assert_eq!(store.retrieval_counts().hybrid, 0);
}
