//! Prints the OpenViking adapter's own cost per capture and per recall
//! formatting, without network time.
//!
//! ```text
//! cargo run --release -p memgate-lab --example adapter_bench [-- --json] [-- --dir PATH]
//! ```
//!
//! `--dir` puts the cursor files on a chosen disk (fsync cost depends on it);
//! the default is a fresh directory under the system temp directory.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let report = match dir {
        Some(dir) => {
            let scratch = dir.join(format!("memgate-ov-bench-{}", std::process::id()));
            let report = memgate_lab::openviking_bench::run_adapter_bench_in(&scratch);
            let _ = std::fs::remove_dir_all(&scratch);
            report
        }
        None => memgate_lab::openviking_bench::run_adapter_bench(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        print!("{report}");
    }
}
