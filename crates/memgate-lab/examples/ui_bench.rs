//! `cargo run -p memgate-lab --example ui_bench -- [ITEMS]`: the memory
//! browser's page weight (bytes of HTML) and time per page, measured over
//! loopback HTTP against the local store filled with ITEMS items (default
//! 100000; the store bench's workload: one explicit memory per 100 items,
//! turns in new threads of 100). The time is the client's, from request to
//! the last byte, so it includes loopback and the client.

use memgate_assembly::AssembledBackend;
use memgate_core::MemoryBackend;
use memgate_lab::workload::Workload;
use memgate_server::{router, ServerState};
use memgate_store::{LocalBackend, LocalConfig};
use memgate_testsupport::rng::SplitMix;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Timed requests per page (after one untimed warm-up).
const RUNS: usize = 20;

#[tokio::main]
async fn main() {
    let items: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let local =
        LocalBackend::open(dir.path().join("memgate.sqlite3"), LocalConfig::default()).unwrap();
    let mut rng = SplitMix::new(7);
    let mut workload = Workload::new(&mut rng, items, 100, 100);
    let started = Instant::now();
    while let Some(capture) = workload.next_capture(&mut rng) {
        local.capture(&capture).await.unwrap();
    }
    for i in 0..workload.memories {
        let memory = workload.memory(&mut rng, i).unwrap();
        local.remember(&workload.user, &memory).await.unwrap();
    }
    eprintln!(
        "filled {items} items ({} turns, {} facts) in {:.1} s",
        workload.turns,
        workload.memories,
        started.elapsed().as_secs_f64()
    );
    let backend: Arc<dyn MemoryBackend> = Arc::new(local);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(ServerState::new(AssembledBackend::with_defaults(backend)));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let first = client.get(format!("{base}/ui")).send().await.unwrap();
    let cookie = first.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = first.text().await.unwrap();
    let at = page.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = page[at..at + 64].to_owned();
    let user = workload.user.user.as_str().to_owned();
    let agent = workload.user.agent.clone().unwrap_or_default();
    client
        .post(format!("{base}/ui/principal"))
        .header("cookie", &cookie)
        .form(&[("csrf", &csrf), ("user", &user), ("agent", &agent)])
        .send()
        .await
        .unwrap();
    let query = workload
        .query(&mut rng)
        .unwrap_or_else(|| "note".to_owned());

    println!("memory browser at {items} items ({RUNS} requests per page after one warm-up)");
    println!(
        "{:<34} {:>10} {:>9} {:>9}",
        "page", "bytes", "p50 ms", "max ms"
    );
    let pages: Vec<Page> = vec![
        ("overview", "/ui", vec![]),
        ("facts (first page of 100)", "/ui/facts", vec![]),
        ("one fact", "/ui/facts/mem_1", vec![]),
        ("no-query block", "/ui/block", vec![]),
        ("block for a query", "/ui/block", vec![("query", &query)]),
        ("threads (first page of 100)", "/ui/threads", vec![]),
        ("one thread", "/ui/threads/0", vec![]),
        ("search", "/ui/search", vec![("query", &query)]),
        ("health", "/ui/health", vec![]),
    ];
    for (name, path, form) in pages {
        let mut times = Vec::with_capacity(RUNS);
        let mut bytes = 0;
        for run in 0..=RUNS {
            let request = if form.is_empty() {
                client.get(format!("{base}{path}"))
            } else {
                let mut fields = form.clone();
                fields.push(("csrf", &csrf));
                client.post(format!("{base}{path}")).form(&fields)
            };
            let started = Instant::now();
            let response = request.header("cookie", &cookie).send().await.unwrap();
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            bytes = response.bytes().await.unwrap().len();
            if run > 0 {
                times.push(started.elapsed());
            }
        }
        times.sort_unstable();
        println!(
            "{name:<34} {bytes:>10} {:>9.2} {:>9.2}",
            ms(times[RUNS / 2]),
            ms(times[RUNS - 1])
        );
    }
}

/// A page's name, its path, and the form it is posted with (none: a GET).
type Page<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
