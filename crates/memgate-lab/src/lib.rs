//! # memgate-lab — what measures memgate, apart from memgate
//!
//! Benchmarks, profilers and evaluations that run the product's public API
//! and print figures (never assert them); none of it ships in a product
//! crate. `memgate bench` and `memgate eval locomo` come from here (the
//! `memgate` binary's default `lab` feature), and so do the benchmark
//! examples (`cargo run --profile profiling -p memgate-lab --example NAME`:
//! `bench`, `locomo`, `forget_bench`, `encode`, `postgres_bench`,
//! `redact_bench`, `host_overhead`, `adapter_bench`, `value_writer`,
//! `recall_bench`, `boundary_baseline`).
//!
//! - [`store_bench`]: `memgate bench`, the embedded store's recall latency,
//!   capture throughput and resident memory at a given size;
//! - [`forget_bench`]: what erasure costs at each level, and the captures
//!   that wait meanwhile;
//! - [`locomo`]: `memgate eval locomo`, recall quality on LoCoMo-format
//!   conversations (lexical, hybrid and the first-turn block);
//! - [`distilled`]: `--distill replay|endpoint`, the same conversations
//!   distilled by the real worker, facts counted through their source turns;
//! - [`replay`]: the replay extractor, LoCoMo's own facts served as a chat
//!   endpoint's answers;
//! - [`openviking_bench`]: the OpenViking adapter's own cost;
//! - [`powercontext_bench`]: PowerContext recall's added latency and
//!   deadline overshoot;
//! - [`workload`]: the synthetic conversations and queries the store
//!   benchmarks share;
//! - [`synthetic`]: an embedder without a model, for search cost at size;
//! - [`process`]: CPU clocks, peak memory, percentiles and overlaps.

pub mod distilled;
pub mod forget_bench;
pub mod locomo;
pub mod openviking_bench;
pub mod powercontext_bench;
pub mod process;
pub mod replay;
pub mod store_bench;
pub mod synthetic;
pub mod workload;
