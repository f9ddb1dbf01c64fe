//! hccl-sim: run a registered executor on the plan simulator.
//!
//! ```text
//! hccl-sim --executor AllReduceRingExecutor --ranks 1024 --count 4096 --dtype fp32 --op sum
//! ```
//! Prints steps, traffic and reduce volume, and how long the simulation took.

#![forbid(unsafe_code)]

use clap::Parser;
use hccl_adapter::{DataType, ReduceOp};
use hccl_algorithm::sim::{simulate, SimSpec};
use hccl_algorithm::{registry, CommPlane};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "hccl-sim", about = "Run an executor on the plan simulator")]
struct Args {
    /// Registered executor name (see --list).
    #[arg(long, default_value = "AllReduceRingExecutor")]
    executor: String,
    /// Ranks (all on one server unless --servers is given).
    #[arg(long, default_value_t = 8)]
    ranks: u32,
    /// Ranks per server, comma-separated (e.g. 4,4,3): overrides --ranks.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<u32>,
    /// Element count.
    #[arg(long, default_value_t = 4096)]
    count: u64,
    /// Data type.
    #[arg(long, default_value = "fp32")]
    dtype: String,
    /// Reduction.
    #[arg(long, default_value = "sum")]
    op: String,
    /// CCL buffer bytes per rank (default: large enough for the op).
    #[arg(long)]
    ccl_bytes: Option<usize>,
    /// List registered executors and exit.
    #[arg(long)]
    list: bool,
}

fn main() {
    let args = Args::parse();
    if args.list {
        for n in registry().names() {
            println!("{n}");
        }
        return;
    }
    if let Err(e) = run(&args) {
        eprintln!("hccl-sim: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let dtype = DataType::from_name(&args.dtype)?;
    let op = ReduceOp::from_name(&args.op)?;
    let mut spec = SimSpec::all_reduce(args.ranks, args.count, dtype, op);
    if !args.servers.is_empty() {
        spec.rank_to_server = args
            .servers
            .iter()
            .enumerate()
            .flat_map(|(s, &n)| std::iter::repeat_n(s as u32, n as usize))
            .collect();
    }
    spec.ccl_buffer_size = args.ccl_bytes;
    let start = Instant::now();
    let r = simulate(registry(), &args.executor, &spec)?;
    let took = start.elapsed();
    println!("executor:        {}", args.executor);
    println!("ranks:           {}", r.ranks);
    println!("bytes per rank:  {}", args.count * dtype.size() as u64);
    println!(
        "result check:    {}",
        if r.checked {
            "success"
        } else {
            "not checked (no reference for this op)"
        }
    );
    println!("steps (α count): {}", r.steps);
    println!(
        "max bytes sent by one rank (β volume): {}",
        r.max_rank_bytes_sent
    );
    println!("total link bytes: {}", r.link_bytes.values().sum::<u64>());
    for (i, plane) in ["level0", "level1", "level2", "combine"].iter().enumerate() {
        if r.plane_bytes[i] > 0 {
            println!("  {plane:8} bytes: {}", r.plane_bytes[i]);
        }
    }
    let _ = CommPlane::COUNT;
    println!("reduce bytes (γ volume, all ranks): {}", r.reduce_bytes);
    println!("tasks run:       {}", r.tasks);
    println!("simulation time: {:.3} s", took.as_secs_f64());
    Ok(())
}
