//! # memgate-lab — what measures memgate, apart from memgate
//!
//! Benchmarks and evaluations that run the product's public API and print
//! figures; none of it ships in a product crate. `memgate bench` and
//! `memgate eval locomo` come from here (the `memgate` binary's default
//! `lab` feature), and so do the benchmark examples
//! (`cargo run --profile profiling -p memgate-lab --example NAME`).
//!
//! - [`store_bench`]: `memgate bench`, the embedded store's recall latency,
//!   capture throughput and resident memory at a given size;
//! - [`forget_bench`]: what erasure costs at each level, and the captures
//!   that wait meanwhile;
//! - [`locomo`]: `memgate eval locomo`, recall quality on LoCoMo-format
//!   conversations (lexical, hybrid and the first-turn block);
//! - [`workload`]: the synthetic conversations and queries they share;
//! - [`synthetic`]: an embedder without a model, for search cost at size;
//! - [`process`]: CPU clocks, peak memory, percentiles and overlaps.

pub mod forget_bench;
pub mod locomo;
pub mod process;
pub mod store_bench;
pub mod synthetic;
pub mod workload;
