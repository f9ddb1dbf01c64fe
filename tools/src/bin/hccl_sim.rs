//! hccl-sim: run a registered executor on the plan simulator.
//!
//! ```text
//! hccl-sim --executor AllReduceRingExecutor --ranks 1024 --count 4096 --dtype fp32 --op sum
//! ```
//! Prints steps, traffic and reduce volume, and how long the simulation took.
//! The op is the one the executor's name starts with (`AllGatherNHRExecutor`
//! runs AllGather); `--data` chooses bytes or symbols (default: by size).
//! The V ops (AllGatherV, ReduceScatterV, AllToAllV) run uneven per-rank
//! counts: `--count` + (rank mod 3), and `--count` + ((rank + peer) mod 3).
//!
//! ```text
//! hccl-sim --executor AllReduceTwoLevelExecutor --servers 2,1,3 --count 65536 \
//!          --tuning-file tuning.json --host-gbps 0.125 --timeline plan.json
//! ```
//! also predicts the op's time with the cost model's parameters (from a
//! tuning file `hccl-test --calibrate` wrote, else the built-in ones),
//! names the busiest host link and writes the plan as a Perfetto timeline.
//!
//! ```text
//! hccl-sim --scale-table            # ranks × executor: time, memory, tasks/s
//! ```
//! runs each row in a child process (so each row's peak memory is its own)
//! and prints the table with a baseline measured in the same run.

#![forbid(unsafe_code)]

use clap::Parser;
use hccl_adapter::{DataType, ReduceOp};
use hccl_algorithm::sim::{simulate, DataMode, ProgressHook, SimSpec};
use hccl_algorithm::{registry, CommPlane, OpType};
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
    /// How data is kept and checked: auto (by size), bytes or symbolic.
    #[arg(long, default_value = "auto")]
    data: String,
    /// Skip the result check.
    #[arg(long)]
    no_check: bool,
    /// Threads that drive the plan, each over a shard of the ranks
    /// (default: one per core from 1,024 ranks, else one; a timed run
    /// uses one).
    #[arg(long)]
    drivers: Option<usize>,
    /// Print how far the simulation got to stderr every this many seconds
    /// (0: never).
    #[arg(long, default_value_t = 5.0)]
    progress: f64,
    /// Predict the op's time with the α-β-γ parameters of this tuning file
    /// (`hccl-test --calibrate`); `--predict` uses the built-in ones.
    #[arg(long)]
    tuning_file: Option<std::path::PathBuf>,
    /// Predict the op's time (with --tuning-file's parameters, else the
    /// built-in ones).
    #[arg(long)]
    predict: bool,
    /// Capacity of each host's link per direction, GB/s, shared by the
    /// flows that cross it (overrides the tuning file's host_gbps).
    #[arg(long)]
    host_gbps: Option<f64>,
    /// Write the timed plan's transfers and reduces as a Perfetto /
    /// Chrome trace JSON file (implies --predict).
    #[arg(long)]
    timeline: Option<std::path::PathBuf>,
    /// Most events the timeline keeps.
    #[arg(long, default_value_t = 1 << 20)]
    timeline_events: usize,
    /// List registered executors and exit.
    #[arg(long)]
    list: bool,
    /// Print the scale table (ranks × executor: time, peak memory, tasks
    /// per second) instead of one run.
    #[arg(long)]
    scale_table: bool,
    /// Rank counts of the scale table, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384,65536")]
    table_ranks: Vec<u32>,
    /// Executors of the scale table, comma-separated (default: the NHR,
    /// NB and RHD AllReduce, AllGather and ReduceScatter, and the ring
    /// AllReduce up to 16,384 ranks).
    #[arg(long, value_delimiter = ',')]
    table_executors: Vec<String>,
    /// Seconds after which a table row is stopped (reported as a timeout).
    #[arg(long, default_value_t = 300)]
    table_timeout: u64,
}

/// The op an executor serves (its declaration; AllReduce for one that
/// declared nothing).
fn op_of(name: &str) -> OpType {
    registry().op_of(name).unwrap_or(OpType::AllReduce)
}

/// This process's peak resident memory (VmHWM), bytes.
fn max_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

fn main() {
    let args = Args::parse();
    if args.list {
        for n in registry().names() {
            println!("{n}");
        }
        return;
    }
    let result = if args.scale_table {
        scale_table(&args)
    } else {
        run(&args)
    };
    if let Err(e) = result {
        eprintln!("hccl-sim: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let dtype = DataType::from_name(&args.dtype)?;
    let op = ReduceOp::from_name(&args.op)?;
    let collective = op_of(&args.executor);
    let mut spec = SimSpec::op(collective, args.ranks, args.count, dtype, op);
    spec.data = match args.data.as_str() {
        "auto" => DataMode::Auto,
        "bytes" => DataMode::Bytes,
        "symbolic" => DataMode::Symbolic,
        d => return Err(format!("--data {d}: expected auto, bytes or symbolic").into()),
    };
    spec.check = !args.no_check;
    spec.drivers = args.drivers;
    if args.progress > 0.0 {
        let every = std::time::Duration::try_from_secs_f64(args.progress)
            .map_err(|e| format!("--progress {}: {e}", args.progress))?;
        spec.progress = Some(ProgressHook {
            every,
            tell: std::sync::Arc::new(|p| eprintln!("hccl-sim: {p}")),
        });
    }
    if !args.servers.is_empty() {
        spec.rank_to_server = args
            .servers
            .iter()
            .enumerate()
            .flat_map(|(s, &n)| std::iter::repeat_n(s as u32, n as usize))
            .collect();
    }
    spec.ccl_buffer_size = args.ccl_bytes;
    // the V ops need per-rank counts: uneven ones around --count, so a
    // plan that assumes equal blocks is caught
    let p = spec.ranks() as u64;
    let uneven = |r: u64| args.count + r % 3;
    match collective {
        OpType::AllGatherV | OpType::ReduceScatterV => {
            spec.v_counts = Some((0..p).map(uneven).collect());
        }
        OpType::AllToAllV => {
            spec.matrix = Some(
                (0..p)
                    .map(|r| (0..p).map(|q| uneven(r + q)).collect())
                    .collect(),
            );
        }
        _ => {}
    }
    let timed = args.predict
        || args.tuning_file.is_some()
        || args.host_gbps.is_some()
        || args.timeline.is_some();
    if timed {
        let mut cost = match &args.tuning_file {
            Some(path) => hccl_adapter::Tuning::load(path)?.cost_params(),
            None => Default::default(),
        };
        if let Some(g) = args.host_gbps {
            if !(g.is_finite() && g > 0.0) {
                return Err(format!("--host-gbps {g}: expected a positive rate in GB/s").into());
            }
            cost.host_gbps = Some(g);
        }
        spec.cost = Some(cost);
        if args.timeline.is_some() {
            spec.timeline_events = args.timeline_events;
        }
    }
    let start = Instant::now();
    let r = simulate(registry(), &args.executor, &spec)?;
    let took = start.elapsed();
    println!("executor:        {} ({collective})", args.executor);
    println!("ranks:           {}", r.ranks);
    println!("bytes per rank:  {}", args.count * dtype.size() as u64);
    println!(
        "result check:    {}",
        if r.checked {
            if r.symbolic {
                "success (symbolic)"
            } else {
                "success (bytes)"
            }
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
    if let Some(((from, to), bytes)) = r
        .link_bytes
        .iter()
        .max_by_key(|(k, b)| (**b, std::cmp::Reverse(**k)))
    {
        println!(
            "busiest link:    rank {from} -> rank {to}, {bytes} bytes in {} transfers",
            r.link_transfers.get(&(*from, *to)).copied().unwrap_or(0)
        );
    }
    for (i, plane) in ["level0", "level1", "level2", "combine"].iter().enumerate() {
        if r.plane_bytes[i] > 0 {
            println!("  {plane:8} bytes: {}", r.plane_bytes[i]);
        }
    }
    let _ = CommPlane::COUNT;
    println!("reduce bytes (γ volume, all ranks): {}", r.reduce_bytes);
    if let (Some(ns), Some(c)) = (r.predicted_ns, &spec.cost) {
        println!(
            "predicted time:  {:.1} us (level 0 alpha {:.2} us, {:.3} GB/s; level 1 alpha {:.2} us, {:.3} GB/s per flow; host link {}; reduce {:.3} GB/s)",
            ns as f64 / 1e3,
            c.level0.alpha_us,
            1.0 / (c.level0.beta_us_per_byte * 1e3),
            c.level1.alpha_us,
            1.0 / (c.level1.beta_us_per_byte * 1e3),
            c.host_gbps
                .map_or("unlimited".to_owned(), |g| format!("{g:.3} GB/s")),
            1.0 / (c.gamma_us_per_byte * 1e3),
        );
        match &r.busiest_host_link {
            Some(l) => println!(
                "busiest host link: host {} {}, {} bytes, busy {:.1} us ({:.0}% of the op)",
                l.host,
                l.direction,
                l.bytes,
                l.busy_ns as f64 / 1e3,
                100.0 * l.busy_ns as f64 / ns.max(1) as f64
            ),
            None => println!("busiest host link: none (one host)"),
        }
    }
    if let Some(path) = &args.timeline {
        std::fs::write(path, hccl_algorithm::sim::timeline_json(&r.timeline))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!(
            "timeline:        {} ({} events{})",
            path.display(),
            r.timeline.len(),
            if r.timeline_dropped > 0 {
                format!(
                    ", {} more not kept: raise --timeline-events",
                    r.timeline_dropped
                )
            } else {
                String::new()
            }
        );
    }
    println!("tasks run:       {}", r.tasks);
    println!("simulation time: {:.3} s", took.as_secs_f64());
    println!(
        "tasks per second: {:.0}",
        r.tasks as f64 / took.as_secs_f64().max(1e-9)
    );
    println!("max RSS:         {} MiB", max_rss() >> 20);
    Ok(())
}

/// One row of the scale table, from a child `hccl-sim` run.
struct Row {
    secs: f64,
    rss: u64,
    tasks: u64,
    data: &'static str,
}

/// Runs one simulation in a child process (so its peak memory is its
/// own) and reads its report; `Err` says why there is no row.
fn child_row(args: &Args, exe: &str, ranks: u32) -> Result<Row, String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(["--executor", exe, "--ranks", &ranks.to_string()])
        .args(["--count", &args.count.to_string(), "--dtype", &args.dtype])
        .args(["--op", &args.op, "--data", &args.data])
        .args(args.drivers.map(|d| format!("--drivers={d}")))
        // the row's stderr is read when it ends: no progress lines
        .arg("--progress=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + std::time::Duration::from_secs(args.table_timeout);
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("stopped after {} s", args.table_timeout));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(if err.trim().is_empty() {
            format!("exit {} (out of memory?)", out.status)
        } else {
            err.trim().chars().take(120).collect()
        });
    }
    let field = |key: &str| -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(key))
            .map(|l| l[key.len()..].trim().to_owned())
    };
    let num = |key: &str| -> Option<f64> { field(key)?.split_whitespace().next()?.parse().ok() };
    Ok(Row {
        secs: num("simulation time:").ok_or("no time in the report")?,
        rss: num("max RSS:").ok_or("no memory in the report")? as u64,
        tasks: num("tasks run:").ok_or("no task count")? as u64,
        data: if field("result check:").is_some_and(|c| c.contains("symbolic")) {
            "sym"
        } else {
            "bytes"
        },
    })
}

/// A memcpy rate of this machine now (GB/s): the table's baseline.
fn memcpy_rate() -> f64 {
    let src = vec![1u8; 64 << 20];
    let mut dst = vec![0u8; 64 << 20];
    let start = Instant::now();
    for _ in 0..8 {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (8.0 * src.len() as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn scale_table(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let executors: Vec<String> = if args.table_executors.is_empty() {
        [
            "AllReduceNHRExecutor",
            "AllReduceNBExecutor",
            "AllReduceRHDExecutor",
            "AllGatherNHRExecutor",
            "AllGatherNBExecutor",
            "AllGatherRHDExecutor",
            "ReduceScatterNHRExecutor",
            "ReduceScatterNBExecutor",
            "ReduceScatterRHDExecutor",
            "AllReduceRingExecutor",
        ]
        .map(String::from)
        .to_vec()
    } else {
        args.table_executors.clone()
    };
    let gbs = memcpy_rate();
    println!("baseline: memcpy {gbs:.1} GB/s (64 MiB buffers, measured now)");
    println!(
        "count {} {} per rank, data {}; ratio = time / time of the same executor at {} ranks",
        args.count, args.dtype, args.data, args.table_ranks[0]
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match args.drivers {
        Some(d) => println!("driver threads: {d} ({cores} cores)"),
        None => println!("driver threads: one per core from 1,024 ranks ({cores} cores)"),
    }
    println!(
        "| executor | ranks | data | time (s) | max RSS (MiB) | tasks | tasks/s | time ratio |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for exe in &executors {
        let mut base: Option<f64> = None;
        for &ranks in &args.table_ranks {
            // the ring's p² tasks: its row stops at 16,384 ranks
            if exe.contains("Ring") && ranks > 16384 {
                continue;
            }
            match child_row(args, exe, ranks) {
                Ok(row) => {
                    let b = *base.get_or_insert(row.secs);
                    println!(
                        "| {exe} | {ranks} | {} | {:.2} | {} | {} | {:.2e} | {:.1} |",
                        row.data,
                        row.secs,
                        row.rss,
                        row.tasks,
                        row.tasks as f64 / row.secs.max(1e-9),
                        row.secs / b.max(1e-9)
                    );
                }
                Err(e) => println!("| {exe} | {ranks} | — | {e} | | | | |"),
            }
        }
    }
    Ok(())
}
