//! `cargo run --profile profiling -p memgate-lab --example forget_bench -- [--json] [SIZE...]`:
//! the cost of `forget` at each level (fact, thread, scope, user) at each
//! store size (default 10000 and 100000 items), with captures running
//! meanwhile.

use memgate_lab::forget_bench::run_forget_bench;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let mut sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000];
    }
    match run_forget_bench(&sizes, None) {
        Ok(report) if json => println!("{}", serde_json::to_string_pretty(&report).unwrap()),
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
