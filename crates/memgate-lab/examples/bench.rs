//! `cargo run --profile profiling -p memgate-lab --example bench -- [--json] [--queries N] [--batch N]
//! [--embedder JSON] [SIZE...]`: the local store benchmark (what `memgate bench` runs);
//! `--embedder '{"kind":"local","model_path":"DIR"}'` measures hybrid recall.

use memgate_lab::store_bench::{run_bench, BenchOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let mut options = BenchOptions::default();
    if let Some(i) = args.iter().position(|a| a == "--queries") {
        options.recall_queries = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000);
    }
    if let Some(i) = args.iter().position(|a| a == "--embedder") {
        let parsed = args
            .get(i + 1)
            .ok_or_else(|| "needs a JSON object".to_owned())
            .and_then(|raw| serde_json::from_str(raw).map_err(|e| e.to_string()))
            .and_then(|v| {
                memgate_store::config::EmbedderSettings::parse(&v).map_err(|e| e.to_string())
            });
        match parsed {
            Ok(settings) => options.embedder = Some(settings),
            Err(e) => {
                eprintln!("error: --embedder: {e}");
                std::process::exit(2);
            }
        }
    }
    if let Some(i) = args.iter().position(|a| a == "--batch") {
        options.capture_batch = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(100);
    }
    let sizes: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            *i == 0 || !matches!(args[i - 1].as_str(), "--queries" | "--batch" | "--embedder")
        })
        .filter_map(|(_, a)| a.parse().ok())
        .collect();
    if !sizes.is_empty() {
        options.sizes = sizes;
    }
    match run_bench(&options) {
        Ok(report) if json => println!("{}", serde_json::to_string_pretty(&report).unwrap()),
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
