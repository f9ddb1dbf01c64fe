//! hccl-trace: what the flight-recorder dumps of a job's ranks say.
//!
//! ```text
//! hccl-trace /tmp/fr            # a directory of hccl_fr_*.json dumps
//! hccl-trace --json a.json b.json
//! hccl-trace merge -o job.json /tmp/trace   # HCCL_RS_TRACE timelines, one file
//! ```
//! For each communicator: the first op not completed on every rank, the
//! ranks that never entered it, where the others wait (step, verb, peer)
//! or why they failed, and ops whose arguments differ between ranks.

#![forbid(unsafe_code)]

use clap::Parser;
use hccl_tools::trace::{analyse, late_ranks, load_dumps, merge_timelines, render, render_late};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hccl-trace",
    about = "Read the flight-recorder dumps of all ranks, or merge their timelines",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Dump files, or directories holding `hccl_fr_*.json` (HCCL_RS_FR_DUMP_DIR).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print the analysis as JSON (one object per communicator, in an array).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Merge the ranks' timelines (HCCL_RS_TRACE: `hccl_trace_*.json`)
    /// into one Chrome trace / Perfetto file, and say which ranks entered
    /// the ops last (a slow rank is last in most).
    Merge {
        /// Where to write the merged timeline.
        #[arg(short = 'o', long = "output", required = true)]
        output: PathBuf,
        /// Timeline files, or directories holding `hccl_trace_*.json`.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::Merge { output, inputs }) = &args.cmd {
        let merged = match merge_timelines(inputs) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("hccl-trace: {e}");
                return ExitCode::from(2);
            }
        };
        let n = merged["traceEvents"].as_array().map_or(0, Vec::len);
        let written = serde_json::to_vec(&merged)
            .map_err(|e| e.to_string())
            .and_then(|b| std::fs::write(output, b).map_err(|e| e.to_string()));
        return match written {
            Ok(()) => {
                println!("hccl-trace: {n} events -> {}", output.display());
                print!("{}", render_late(&late_ranks(&merged)));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hccl-trace: writing {}: {e}", output.display());
                ExitCode::from(2)
            }
        };
    }
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
