//! # memgate-lab — benchmarks and profilers (not published)
//!
//! Measurements of the shipped crates that the shipped crates do not carry:
//! the OpenViking adapter's own cost ([`openviking_bench`]), PowerContext
//! recall's added latency and deadline overshoot ([`powercontext_bench`]),
//! and the examples that print them (`cargo run --release -p memgate-lab
//! --example …`: `adapter_bench`, `value_writer`, `recall_bench`,
//! `boundary_baseline`). Figures are printed, never asserted.

pub mod openviking_bench;
pub mod powercontext_bench;
