//! `cargo run --profile profiling -p memgate-lab --example locomo -- FILE [--json]
//! [--embedder JSON]`: the LoCoMo recall evaluation (what `memgate eval
//! locomo` runs); `--embedder '{"kind":"local","model_path":"DIR"}'` adds
//! hybrid recall.

use memgate_lab::locomo::{run_locomo, LocomoOptions};
use memgate_store::config::EmbedderSettings;
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let embedder = args
        .iter()
        .position(|a| a == "--embedder")
        .and_then(|i| args.get(i + 1));
    let Some(file) = args
        .iter()
        .find(|a| !a.starts_with("--") && Some(*a) != embedder)
    else {
        eprintln!("usage: locomo FILE [--json] [--embedder JSON]");
        std::process::exit(2);
    };
    let mut options = LocomoOptions::default();
    if let Some(raw) = embedder {
        let parsed = serde_json::from_str(raw)
            .map_err(|e| e.to_string())
            .and_then(|v| EmbedderSettings::parse(&v).map_err(|e| e.to_string()));
        match parsed {
            Ok(settings) => options.embedder = Some(settings),
            Err(e) => {
                eprintln!("error: --embedder: {e}");
                std::process::exit(2);
            }
        }
    }
    match run_locomo(&PathBuf::from(file), &options) {
        Ok(report) if json => println!("{}", serde_json::to_string_pretty(&report).unwrap()),
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
