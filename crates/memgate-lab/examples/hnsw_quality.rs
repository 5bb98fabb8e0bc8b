//! How close `postgres`'s HNSW index comes to the exact dense ranking, on
//! real embeddings of real text.
//!
//! ```text
//! testkit/postgres-up --pgvector; . testkit/.run/env
//! cargo run --release -p memgate-lab --example hnsw_quality -- "$(testkit/minilm)" \
//!     ../shared/data/locomo/locomo-dev.json [40,100,200] [--sentences] [--text FILE]...
//! ```
//!
//! Every turn of the LoCoMo file (each of its sentences with `--sentences`)
//! and every sentence of each `--text` file (real English prose, so the graph
//! is large enough for `ef_search` to matter; repeated sentences kept once)
//! is captured into one scope through the backend's own capture and embedded
//! by its own indexer with the model (MiniLM), then the HNSW index is built
//! (time and size printed). Each
//! question (category 5 left out) is embedded by the query path recall
//! uses and answered by the backend's own nearest-items statement twice:
//! exactly (index scans off) and through the index (scans and sorts priced
//! out, since at this size the planner would rightly scan; the plan is
//! printed), at each `ef_search`.
//! Printed: recall@10 and recall@50 (50 is hybrid recall's dense pool at
//! top-k 10) of the approximate lists against the exact ones, and the
//! statement's p50/p99 from here. The schema is dropped at the end.

use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, Message};
use memgate_postgres::vectors::{hnsw_nearest_sql, VectorParam};
use memgate_postgres::{PostgresBackend, PostgresConfig};
use std::collections::HashSet;
use std::time::Instant;

/// The turns of each conversation session, and the questions.
fn locomo(path: &str) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read the LoCoMo file"))
            .expect("LoCoMo JSON");
    let (mut sessions, mut questions) = (Vec::new(), Vec::new());
    for (i, sample) in data.as_array().into_iter().flatten().enumerate() {
        let conversation = sample["conversation"].as_object().expect("conversation");
        for (key, turns) in conversation {
            let Some(turns) = turns.as_array().filter(|_| key.starts_with("session_")) else {
                continue;
            };
            let texts = turns
                .iter()
                .filter_map(|t| t["text"].as_str())
                .map(str::to_owned)
                .collect();
            sessions.push((format!("{i}-{key}"), texts));
        }
        for qa in sample["qa"].as_array().into_iter().flatten() {
            if qa["category"].as_u64() != Some(5) {
                if let Some(q) = qa["question"].as_str() {
                    questions.push(q.to_owned());
                }
            }
        }
    }
    (sessions, questions)
}

/// The sentences of `text`: split after `.`, `!` or `?` before whitespace and
/// at blank lines, whitespace collapsed. Fragments under 20 characters
/// (headings, list markers) carry no meaning to rank and are left out.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for paragraph in text.split("\n\n") {
        let words: Vec<&str> = paragraph.split_whitespace().collect();
        let mut sentence = String::new();
        for word in words {
            if !sentence.is_empty() {
                sentence.push(' ');
            }
            sentence.push_str(word);
            if word.ends_with(['.', '!', '?']) {
                out.push(std::mem::take(&mut sentence));
            }
        }
        out.push(sentence);
    }
    out.retain(|s| s.chars().count() >= 20);
    out
}

/// The sessions to capture: the LoCoMo ones (split into sentences when
/// asked), then each text file's sentences in captures of 200, every
/// sentence once.
fn corpus(
    locomo: Vec<(String, Vec<String>)>,
    split: bool,
    texts: &[String],
) -> Vec<(String, Vec<String>)> {
    let mut seen = HashSet::new();
    let mut sessions = Vec::new();
    for (thread, turns) in locomo {
        let parts: Vec<String> = if split {
            turns.iter().flat_map(|t| sentences(t)).collect()
        } else {
            turns
        };
        let parts: Vec<String> = parts
            .into_iter()
            .filter(|p| seen.insert(p.clone()))
            .collect();
        if !parts.is_empty() {
            sessions.push((thread, parts));
        }
    }
    for (i, path) in texts.iter().enumerate() {
        let text = std::fs::read_to_string(path).expect("read a --text file");
        let parts: Vec<String> = sentences(&text)
            .into_iter()
            .filter(|p| seen.insert(p.clone()))
            .collect();
        for (j, chunk) in parts.chunks(200).enumerate() {
            sessions.push((format!("text-{i}-{j}"), chunk.to_vec()));
        }
    }
    sessions
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `|approximate ∩ exact| / |exact|` over the first `k` of each.
fn overlap(approximate: &[i64], exact: &[i64], k: usize) -> f64 {
    let exact: HashSet<i64> = exact.iter().take(k).copied().collect();
    let found = approximate
        .iter()
        .take(k)
        .filter(|i| exact.contains(i))
        .count();
    found as f64 / exact.len().max(1) as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.iter().any(|a| a == "--sentences");
    args.retain(|a| a != "--sentences");
    let mut texts = Vec::new();
    while let Some(i) = args.iter().position(|a| a == "--text") {
        args.remove(i);
        texts.push(args.remove(i));
    }
    let (model_dir, locomo_path) = (&args[0], &args[1]);
    let efs: Vec<u64> = args
        .get(2)
        .map_or("40,100,200", String::as_str)
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    let dsn = std::env::var("MEMGATE_TEST_PGVECTOR_DSN").expect("testkit/postgres-up --pgvector");
    let schema = format!("hnsw_quality_{}", std::process::id());
    let embedder = memgate_embed::load_local(model_dir.as_ref()).expect("load the model");
    let config = PostgresConfig::for_dsn(&dsn)
        .unwrap()
        .with_schema(&schema)
        .unwrap();
    let backend = PostgresBackend::new(config)
        .unwrap()
        .with_embedder(embedder.clone());
    let (sessions, questions) = locomo(locomo_path);
    let sessions = corpus(sessions, split, &texts);
    println!(
        "corpus: {} items in {} captures",
        sessions.iter().map(|(_, t)| t.len()).sum::<usize>(),
        sessions.len()
    );
    let caller = Caller::new("locomo");
    for (thread, texts) in &sessions {
        backend
            .capture(&CaptureRequest {
                caller: caller.clone().with_thread(thread),
                messages: texts.iter().map(|t| Message::human(t.clone())).collect(),
                kind: CaptureKind::AfterTurn,
                trace_id: None,
            })
            .await
            .unwrap();
    }
    let started = Instant::now();
    let embedded = backend.index_all_vectors(64).await.unwrap();
    println!(
        "{} sessions captured; the last {embedded} turns embedded in {:.1}s \
         (the background indexer embedded the rest meanwhile)",
        sessions.len(),
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    backend.build_vector_index().await.unwrap();
    println!(
        "HNSW index built in {:.2}s: {:?}",
        started.elapsed().as_secs_f64(),
        backend.vector_index_state().await.unwrap()
    );

    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "SET search_path = {schema}; SET plan_cache_mode = force_generic_plan;
             SET hnsw.iterative_scan = relaxed_order"
        ))
        .await
        .unwrap();
    let scope = client
        .query_one("SELECT user_id, peer FROM scopes", &[])
        .await
        .unwrap();
    let (user, peer): (String, String) = (scope.get(0), scope.get(1));
    let key = memgate_recall::vectors::vector_key(embedder.model());
    let dims = embedder.embed_query("dimension").unwrap().len() as i32;
    let statement = client
        .prepare(&hnsw_nearest_sql(&key, dims, 0))
        .await
        .unwrap();
    let queries: Vec<Vec<f32>> = questions
        .iter()
        .map(|q| embedder.embed_query(q).unwrap())
        .collect();
    let run = |label: String| {
        let (client, statement, queries) = (&client, &statement, &queries);
        let (user, peer, key) = (&user, &peer, &key);
        async move {
            let mut lists = Vec::new();
            let mut times = Vec::new();
            for q in queries {
                let started = Instant::now();
                let rows = client
                    .query(statement, &[user, peer, &VectorParam(q), key, &50_i64])
                    .await
                    .unwrap();
                times.push(started.elapsed().as_secs_f64() * 1e3);
                lists.push(rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>());
            }
            times.sort_by(f64::total_cmp);
            println!(
                "{label:<22} statement p50 {:.2} / p99 {:.2} ms",
                percentile(&times, 0.5),
                percentile(&times, 0.99)
            );
            lists
        }
    };
    client
        .batch_execute("SET enable_indexscan = off")
        .await
        .unwrap();
    let exact = run("exact scan".to_owned()).await;
    client
        .batch_execute(
            "RESET enable_indexscan; SET enable_seqscan = off; SET enable_bitmapscan = off;
             SET enable_sort = off",
        )
        .await
        .unwrap();
    println!(
        "{} questions, {} vectors of {dims} dimensions",
        queries.len(),
        backend.vector_progress().await.unwrap().embedded
    );
    // Which index serves the approximate run (the scope's btree would
    // also avoid the scan, and then nothing approximate would be measured);
    // `hnsw_min_items` 0: the index's branch for any scope.
    let plan = client
        .query(
            &format!("EXPLAIN {}", hnsw_nearest_sql(&key, dims, 0)),
            &[&user, &peer, &VectorParam(&queries[0]), &key, &50_i64],
        )
        .await
        .unwrap();
    let scan: Vec<String> = plan
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|l| l.contains("Scan"))
        .collect();
    println!("approximate plan: {}", scan.join(" | ").trim());
    for ef in efs {
        client
            .batch_execute(&format!("SET hnsw.ef_search = {ef}"))
            .await
            .unwrap();
        let approximate = run(format!("hnsw ef_search {ef}")).await;
        let mean = |k: usize| {
            approximate
                .iter()
                .zip(&exact)
                .map(|(a, e)| overlap(a, e, k))
                .sum::<f64>()
                / exact.len() as f64
        };
        println!(
            "hnsw ef_search {ef:<7} recall@10 {:.4}  recall@50 {:.4}",
            mean(10),
            mean(50)
        );
    }
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}
