//! # memgate-testsupport — shared by memgate's own tests, never shipped
//!
//! Named fakes for faults a real server cannot be made to produce on
//! demand. Each one binds loopback only and stops when dropped.

pub mod black_hole;

pub use black_hole::BlackHole;
