//! hccl-tools: the library behind the hccl-rs command-line tools.
//!
//! Its users are the tools' binaries and the integration tests, so its
//! public API is what they use: the items below and the `check` module.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Keeps this page the whole API: an item that is `pub` but not re-exported
// here must say `pub(crate)`.
#![warn(unreachable_pub)]

// The README's code is compiled and run as doc tests (`cargo test --doc`),
// so the page a registry shows cannot hold examples that no longer build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod args;
mod calibrate;
mod fused_bench;
mod fused_plot;
mod perf;
mod program;
mod strays;
mod sweep_plot;

// The input and expected value of every element of a checked op, which
// `hccl-test --check` and the integration tests compare results against:
// a small vocabulary of its own, so a public module.
pub mod check;

// `hccl-trace`: the flight-recorder dumps of all ranks, analysed.
pub mod trace;

// SVG charts of sweeps (`hccl-test --plot`, `hccl-plot`).
pub mod plot;

// Test hosts as network namespaces (`hccl-test --netns`), also what the
// integration tests make their hosts with.
pub mod netns;

// `hccl-test`: its flags (hccl_test's) and the sweep it runs.
pub use args::{Format, PerfArgs};
pub use perf::run_sweep;
// The whole `hccl-test` program (its binary and the tests' twin of it).
pub use program::hccl_test_main;
