//! hccl-tools: the library behind the hccl-rs command-line tools.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod args;
pub mod calibrate;
pub mod check;
pub mod perf;
