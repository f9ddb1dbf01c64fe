//! A user crate's own executor on the plan simulator: the pipelined chain
//! AllReduce of `pipelined_chain.rs` is registered beside the built-ins
//! and run for several rank counts; every rank's result is checked
//! against the simulator's reference, and the steps and traffic against
//! the formulas in that file. Prints one row per rank count (the plain
//! ring beside it, for scale) and exits non-zero on any failure.
//!
//! ```text
//! cargo run --release
//! ```

mod pipelined_chain;

use hccl_algorithm::cost::{CostParams, LinkParams};
use hccl_algorithm::registry;
use hccl_algorithm::sim::{simulate, timeline_json, SimReport, SimSpec};
use hccl_platform::{DataType, ReduceOp};
use pipelined_chain::{NAME, SEGMENTS};
use std::process::ExitCode;

/// Rank counts of the table.
const RANKS: [u32; 5] = [2, 3, 5, 8, 64];
/// Elements of the table's AllReduce (f32): 256 KiB, eight 32 KiB segments.
const COUNT: u64 = 64 << 10;

/// What the pipelined chain must report for one round of `n` bytes cut
/// into `k` segments on `p` ≥ 2 ranks.
fn check_formulas(report: &SimReport, p: u64, n: u64, k: u64) -> Result<(), String> {
    let want_steps = 2 * p + k - 3;
    let want_max_sent = if p == 2 { n } else { 2 * n };
    let mut errors = Vec::new();
    if !report.checked {
        errors.push("results were not checked".to_string());
    }
    if report.steps != want_steps {
        errors.push(format!(
            "{} steps, expected 2p+k-3 = {want_steps}",
            report.steps
        ));
    }
    if report.max_rank_bytes_sent != want_max_sent {
        errors.push(format!(
            "busiest rank sent {} bytes, expected {want_max_sent}",
            report.max_rank_bytes_sent
        ));
    }
    if report.reduce_bytes != (p - 1) * n {
        errors.push(format!(
            "{} bytes reduced, expected (p-1)n = {}",
            report.reduce_bytes,
            (p - 1) * n
        ));
    }
    if report.link_bytes.len() as u64 != 2 * (p - 1) {
        errors.push(format!(
            "{} directed links used, expected the chain's {}",
            report.link_bytes.len(),
            2 * (p - 1)
        ));
    }
    for (&(from, to), &bytes) in &report.link_bytes {
        if from.abs_diff(to) != 1 || bytes != n {
            errors.push(format!(
                "{bytes} bytes over {from}->{to}, expected {n} between neighbours"
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Odd shapes, every reduction, and rounds smaller than the op (several
/// op-base rounds): each checked against the reference.
fn check_more(p: u32) -> Result<(), String> {
    let cases = [
        (1u64, DataType::Fp32, ReduceOp::Sum, None),
        (1001, DataType::Int32, ReduceOp::Max, None),
        (3 * 1024 + 7, DataType::Fp16, ReduceOp::Sum, None),
        (777, DataType::Int8, ReduceOp::Min, None),
        (10_000, DataType::Fp32, ReduceOp::Prod, Some(4096)), // 10 rounds of 4 KiB
    ];
    for (count, dtype, op, ccl) in cases {
        let mut spec = SimSpec::all_reduce(p, count, dtype, op);
        spec.ccl_buffer_size = ccl;
        let report = simulate(registry(), NAME, &spec)
            .map_err(|e| format!("{count} x {dtype:?} {op:?}: {e}"))?;
        if !report.checked {
            return Err(format!(
                "{count} x {dtype:?} {op:?}: results were not checked"
            ));
        }
    }
    Ok(())
}

/// The chain and the ring on two hosts of 4 ranks with 1 Gbit/s links
/// between them, timed with the cost model (`SimSpec::timed`): predicted
/// time, the busiest host link, and the chain's plan as a Perfetto
/// timeline.
fn timed_on_two_hosts() -> Result<(), String> {
    let cost = CostParams {
        level0: LinkParams::new(3.0, 10.0),
        level1: LinkParams::new(20.0, 0.125),
        gamma_us_per_byte: 1.0 / 16e3,
        host_gbps: Some(0.125),
    };
    let spec = SimSpec {
        timeline_events: 100_000,
        ..SimSpec::all_reduce(8, COUNT, DataType::Fp32, ReduceOp::Sum)
            .on_hosts(&[4, 4])
            .timed(cost)
    };
    let chain = simulate(registry(), NAME, &spec).map_err(|e| e.to_string())?;
    let ring = simulate(registry(), "AllReduceRingExecutor", &spec).map_err(|e| e.to_string())?;
    let ms = |r: &SimReport| r.predicted_ns.unwrap_or(0) as f64 / 1e6;
    let link = chain
        .busiest_host_link
        .clone()
        .ok_or("no host link reported")?;
    println!(
        "on 2 hosts x 4 ranks, 1 Gbit/s between them: predicted {:.2} ms (ring {:.2} ms); \
         busiest host link: host {} {}, {} bytes",
        ms(&chain),
        ms(&ring),
        link.host,
        link.direction,
        link.bytes
    );
    let sends = chain.timeline.iter().filter(|e| e.what == "send").count() as u64;
    let transfers: u64 = chain.link_transfers.values().sum();
    if sends != transfers || chain.predicted_ns.unwrap_or(0) == 0 {
        return Err(format!(
            "{sends} sends on the timeline, {transfers} transfers counted"
        ));
    }
    let path = std::env::temp_dir().join("custom-executor-timeline.json");
    std::fs::write(&path, timeline_json(&chain.timeline)).map_err(|e| e.to_string())?;
    println!(
        "the chain's plan: {} (open it at https://ui.perfetto.dev)",
        path.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    if let Err(e) = pipelined_chain::register(registry()) {
        eprintln!("registering {NAME}: {e}");
        return ExitCode::FAILURE;
    }
    let n = COUNT * 4;
    let k = SEGMENTS as u64;
    println!(
        "{NAME}: f32 sum AllReduce of {} KiB on the plan simulator, results checked",
        n >> 10
    );
    println!(
        "{:>5} {:>7} {:>13} {:>13} {:>11} | {:>10} {:>13}",
        "ranks", "steps", "max sent/rank", "bytes/link", "reduced", "ring steps", "ring max sent"
    );
    let mut failed = 0;
    for p in RANKS {
        let spec = SimSpec::all_reduce(p, COUNT, DataType::Fp32, ReduceOp::Sum);
        let row = simulate(registry(), NAME, &spec)
            .map_err(|e| e.to_string())
            .and_then(|report| {
                check_formulas(&report, p as u64, n, k)?;
                check_more(p)?;
                Ok(report)
            });
        let ring = simulate(registry(), "AllReduceRingExecutor", &spec);
        match (row, ring) {
            (Ok(r), Ok(ring)) => println!(
                "{p:>5} {:>7} {:>13} {:>13} {:>11} | {:>10} {:>13}",
                r.steps,
                r.max_rank_bytes_sent,
                r.link_bytes.values().max().copied().unwrap_or(0),
                r.reduce_bytes,
                ring.steps,
                ring.max_rank_bytes_sent
            ),
            (Err(e), _) => {
                failed += 1;
                println!("{p:>5} FAILED: {e}");
            }
            (_, Err(e)) => {
                failed += 1;
                println!("{p:>5} the ring FAILED: {e}");
            }
        }
    }
    // one rank: a copy, nothing sent
    let one = simulate(
        registry(),
        NAME,
        &SimSpec::all_reduce(1, 100, DataType::Fp32, ReduceOp::Sum),
    );
    match one {
        Ok(r) if r.checked && r.steps == 0 && r.max_rank_bytes_sent == 0 => {}
        Ok(r) => {
            failed += 1;
            println!(
                "    1 FAILED: {} steps, {} bytes sent",
                r.steps, r.max_rank_bytes_sent
            );
        }
        Err(e) => {
            failed += 1;
            println!("    1 FAILED: {e}");
        }
    }
    if let Err(e) = timed_on_two_hosts() {
        failed += 1;
        println!("timed on two hosts FAILED: {e}");
    }
    if failed > 0 {
        eprintln!("{failed} check(s) failed");
        return ExitCode::FAILURE;
    }
    println!(
        "every rank's result matched the reference (also: 1 rank, odd counts, int8/int32/fp16, \
         max/min/prod, 10 op-base rounds); steps = 2p+k-3 with k = {k} segments"
    );
    ExitCode::SUCCESS
}
