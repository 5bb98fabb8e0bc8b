//! `cargo run --release -p memgate-embed --example embed -- MODEL_DIR [TEXT...]`:
//! loads all-MiniLM-L6-v2 from MODEL_DIR, prints the load time, then each
//! text's embedding time and vector (JSON, one line per text).

use memgate_embed::{Embedder, MiniLm};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: embed MODEL_DIR [TEXT...]");
        std::process::exit(2);
    };
    let started = Instant::now();
    let model = match MiniLm::load(std::path::Path::new(dir)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    eprintln!(
        "{}: loaded in {:.3} s",
        model.model(),
        started.elapsed().as_secs_f64()
    );
    for text in &args[1..] {
        let started = Instant::now();
        let v = model.embed_one(text);
        eprintln!("{:.2} ms", started.elapsed().as_secs_f64() * 1000.0);
        println!("{}", serde_json::to_string(&v).unwrap());
    }
}
