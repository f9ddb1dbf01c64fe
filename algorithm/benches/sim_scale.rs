//! How long the plan simulator takes to run each scalable algorithm's
//! AllReduce at 1,024 ranks (issue goal: ≤ 2 s each on a 2-core machine).
//!
//! `cargo bench -p hccl-algorithm --bench sim_scale [-- RANKS [COUNT [NAME]]]`
//! prints one line per executor (only those whose name contains NAME, if
//! given, to profile one alone): wall time, tasks, steps, and tasks per
//! second, plus a same-run baseline (the time to enqueue and run the same
//! number of trivial tasks on one stream) so that figures from different
//! (noisy, shared) machines can be compared as ratios.

use hccl_algorithm::registry;
use hccl_algorithm::sim::{simulate, SimSpec};
use hccl_platform::{DataType, Device, DeviceMem, ReduceOp, Stream};
use std::time::Instant;

/// The AllReduce executors meant for scale (Mesh is O(p²) by design).
const SCALABLE: &[&str] = &[
    "AllReduceRingExecutor",
    "AllReduceRHDExecutor",
    "AllReduceNHRExecutor",
    "AllReduceNBExecutor",
];

/// Seconds to enqueue and run `n` one-byte copies on one stream.
fn baseline(n: u64) -> f64 {
    let dev = Device::new(0, Default::default());
    let s = Stream::new(&dev);
    let (a, b) = (DeviceMem::alloc(1).unwrap(), DeviceMem::alloc(1).unwrap());
    let t = Instant::now();
    let batch = 4096;
    let mut left = n;
    while left > 0 {
        for _ in 0..left.min(batch) {
            s.memcpy_async(&b, &a).unwrap();
        }
        s.synchronize().unwrap();
        left = left.saturating_sub(batch);
    }
    t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let ranks: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let count: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4096);
    let only = args.get(2).cloned().unwrap_or_default();
    let reg = registry();
    println!("plan simulator, AllReduce of {count} fp32 at {ranks} ranks");
    for name in SCALABLE.iter().filter(|n| n.contains(only.as_str())) {
        if !reg.contains(name) {
            println!("{name:<28} not registered");
            continue;
        }
        let spec = SimSpec::all_reduce(ranks, count, DataType::Fp32, ReduceOp::Sum);
        let t = Instant::now();
        match simulate(reg, name, &spec) {
            Ok(r) => {
                let secs = t.elapsed().as_secs_f64();
                let base = baseline(r.tasks);
                println!(
                    "{name:<28} {secs:>7.3} s  {:>10} tasks  {:>6} steps  {:>6.2} Mtasks/s  ({:.2}x the time of {} bare stream tasks)",
                    r.tasks,
                    r.steps,
                    r.tasks as f64 / secs / 1e6,
                    secs / base,
                    r.tasks
                );
            }
            Err(e) => println!("{name:<28} FAILED: {e}"),
        }
    }
}
