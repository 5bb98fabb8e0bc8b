//! # memgate-testsupport — shared by memgate's own tests, never shipped
//!
//! Named fakes for faults a real server cannot be made to produce on
//! demand (each one binds loopback only and stops when dropped), and the
//! one way tests find the real servers testkit starts ([`real`]), and a
//! seeded generator ([`SplitMix`]) for tests and the lab's benchmarks;
//! testkit's scripted model, started per test (`scripted_model`, feature
//! `scripted-model`);
//! with the `http` feature, JSON posts to a served memgate ([`http`]);
//! with the `browser` feature, a real headless Chromium ([`browser`]).

pub mod black_hole;
#[cfg(feature = "browser")]
pub mod browser;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod real;
pub mod rng;
#[cfg(feature = "scripted-model")]
pub mod scripted_model;

pub use black_hole::BlackHole;
pub use rng::SplitMix;
