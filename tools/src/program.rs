//! The `hccl-test` program as one call, so that its binary and the
//! integration tests' build of it (hccl-tests' `hccl-test-twin`, which
//! Cargo hands to that package's tests) share their `main` through the
//! library instead of a source file outside either package.

use crate::{run_sweep, PerfArgs};
use clap::Parser;

/// Runs `hccl-test`: logging to stderr filtered by `HCCL_RS_LOG` (default
/// `warn`), hccl_test's flags from the command line, the sweep on stdout.
/// Exits the process with status 1 on failure.
pub fn hccl_test_main() {
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
