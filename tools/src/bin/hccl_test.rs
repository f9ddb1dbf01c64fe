//! hccl-test: collective performance test with hccl_test's flags and output.
//!
//! ```text
//! hccl-test all_reduce -p 4 -b 8 -e 64M -f 2 -n 20 -w 5 -o sum -d fp32 -c 1
//! ```
//! Ranks are threads of this process (one communicator per rank).

#![forbid(unsafe_code)]

use clap::Parser;
use hccl_tools::{run_sweep, PerfArgs};

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HCCL_RS_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = PerfArgs::parse();
    if let Err(e) = run_sweep(&args, &mut std::io::stdout()) {
        eprintln!("hccl-test: {e}");
        std::process::exit(1);
    }
}
