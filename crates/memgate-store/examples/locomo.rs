//! `cargo run --release -p memgate-store --example locomo -- FILE [--json]`:
//! the LoCoMo recall evaluation (what `memgate eval locomo` runs).

use memgate_store::locomo::{run_locomo, LocomoOptions};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let Some(file) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: locomo FILE [--json]");
        std::process::exit(2);
    };
    match run_locomo(&PathBuf::from(file), &LocomoOptions::default()) {
        Ok(report) if json => println!("{}", serde_json::to_string_pretty(&report).unwrap()),
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
