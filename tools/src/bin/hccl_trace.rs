//! hccl-trace: what the flight-recorder dumps of a job's ranks say.
//!
//! ```text
//! hccl-trace /tmp/fr            # a directory of hccl_fr_*.json dumps
//! hccl-trace --json a.json b.json
//! ```
//! For each communicator: the first op not completed on every rank, the
//! ranks that never entered it, where the others wait (step, verb, peer)
//! or why they failed, and ops whose arguments differ between ranks.

#![forbid(unsafe_code)]

use clap::Parser;
use hccl_tools::trace::{analyse, load_dumps, render};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hccl-trace",
    about = "Read the flight-recorder dumps of all ranks"
)]
struct Args {
    /// Dump files, or directories holding `hccl_fr_*.json` (HCCL_RS_FR_DUMP_DIR).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print the analysis as JSON (one object per communicator, in an array).
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let dumps = match load_dumps(&args.paths) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hccl-trace: {e}");
            return ExitCode::from(2);
        }
    };
    let reports = analyse(&dumps);
    if args.json {
        match serde_json::to_string_pretty(&reports) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("hccl-trace: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", render(&reports));
    }
    ExitCode::SUCCESS
}
