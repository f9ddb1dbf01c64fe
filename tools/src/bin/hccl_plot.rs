//! hccl-plot: several `hccl-test --format json` runs on one chart.
//!
//! ```text
//! hccl-test all_reduce -p 4 --algo AllReduceRingExecutor --format json > ring.json
//! hccl-test all_reduce -p 4 --algo AllReduceMeshExecutor --format json > mesh.json
//! hccl-plot -o ring-vs-mesh.svg ring.json mesh.json
//! hccl-plot -o cmp.svg --label hccl-rs --label "Open MPI" hccl.json mpi.json
//! ```
//! One line per file (bus bandwidth left, average time right), labelled
//! with the file's stem or its `--label`. Rows of another library convert
//! to the same shape: one JSON object per line with `bytes`, `time_us`
//! and `busbw_gbps` (see tools/bench/compare.sh, `PLOT=`).

#![forbid(unsafe_code)]

use clap::Parser;
use hccl_tools::plot::{check_writable, compare_chart, read_rows, write_svg};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hccl-plot",
    about = "Draw several hccl-test --format json runs on one SVG chart"
)]
struct Args {
    /// Files of `hccl-test --format json` rows (one JSON object per line).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The SVG file to write.
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    output: PathBuf,
    /// A line's label, once per file in the files' order (files without
    /// one are labelled with their file stem).
    #[arg(long = "label", value_name = "TEXT")]
    labels: Vec<String>,
    /// The chart's title (default: the rows' ops, rank counts and data
    /// types, and today's date).
    #[arg(long = "title")]
    title: Option<String>,
}

fn run(args: &Args) -> Result<(), String> {
    if args.labels.len() > args.files.len() {
        return Err(format!(
            "{} --label given for {} file(s): one per file at most",
            args.labels.len(),
            args.files.len()
        ));
    }
    check_writable(&args.output)?;
    let mut runs = Vec::with_capacity(args.files.len());
    for (i, f) in args.files.iter().enumerate() {
        let label = match args.labels.get(i) {
            Some(l) => l.clone(),
            None => f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| f.display().to_string()),
        };
        runs.push((label, read_rows(f)?));
    }
    let chart = compare_chart(&runs, args.title.as_deref());
    write_svg(&chart, &args.output)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hccl-plot: {e}");
            ExitCode::from(2)
        }
    }
}
