//! What the observability costs (issue 20), measured in one run:
//!
//! 1. `FlightRecorder::record` alone, ns per op (the ring full and
//!    wrapping, as in a long job), against an empty loop;
//! 2. the check a driver makes for a timeline when none is on
//!    (`Device::timeline`), ns per call;
//! 3. p=2 8 B fp32-sum AllReduce (ranks as threads, op + nothing else,
//!    one synchronize per block), µs per op with the recorder off, on
//!    (default 2000 entries) and with a timeline on: blocks of ops
//!    alternating between the three set-ups, p50 / p99 / max over the
//!    blocks, and the difference of the p50s.
//!
//! `cargo bench -p hccl-tests --bench observability_cost [-- BLOCKS OPS]`.
//! No timing is asserted anywhere: these are figures to read.

use hccl_adapter::{DataType, DeviceMem, HcclComm, ReduceOp};
use hccl_algorithm::{OpParam, OpType, WorkflowMode};
use hccl_framework::FlightRecorder;
use hccl_platform::{Device, DeviceConfig, OpLabel, Stream};
use std::borrow::Cow;
use std::sync::{Arc, Barrier};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let blocks: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(15);
    let ops: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    record_alone();
    timeline_check_when_off();
    allreduce_blocks(blocks, ops);
}

/// ns per call of `f` over `n` calls, best of 5.
fn ns_per(n: u64, mut f: impl FnMut(u64)) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                f(i);
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn record_alone() {
    let device = Device::new(0, DeviceConfig::default());
    let stream = Stream::new(&device);
    let mem = DeviceMem::alloc(8).expect("alloc");
    let tag: Arc<str> = Arc::from("AllReduce_bench");
    let param = OpParam {
        tag: Cow::Owned(tag),
        op_type: OpType::AllReduce,
        stream: Cow::Borrowed(&stream),
        input: Cow::Borrowed(&mem),
        output: Cow::Borrowed(&mem),
        count: 2,
        dtype: DataType::Fp32,
        reduce_op: ReduceOp::Sum,
        root: 0,
        mode: WorkflowMode::OpBase,
        send_v: None,
        recv_v: None,
        peer: 0,
    };
    let label = Arc::new(OpLabel {
        tag: "AllReduce_bench".into(),
        algorithm: "AllReduceMeshAivExecutor".into(),
        rank: 0,
    });
    let fr = FlightRecorder::new(2000, "bench", (0, 2), &device, None).expect("on");
    let n = 2_000_000;
    let empty = ns_per(n, |i| {
        std::hint::black_box(i);
    });
    let mut w = hccl_framework::FrWriter::default();
    let rec = ns_per(n, |_| {
        fr.record(&mut w, std::hint::black_box(&param), &label, 0)
    });
    println!("flight recorder: record() {rec:.1} ns per op (empty loop {empty:.2} ns; ring of 2000, wrapping)");
}

fn timeline_check_when_off() {
    let device = Device::new(0, DeviceConfig::default());
    let n = 20_000_000;
    let ns = ns_per(n, |_| {
        std::hint::black_box(device.timeline());
    });
    println!("timeline off: the drivers' check {ns:.2} ns per run of tasks (one relaxed load)");
}

/// p50, p99, max of `v` (sorted in place).
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.5), at(0.99), v[v.len() - 1])
}

fn allreduce_blocks(blocks: usize, ops: usize) {
    let trace_dir = std::env::temp_dir().join(format!("hccl-obs-bench-{}", std::process::id()));
    let trace = trace_dir.to_string_lossy().into_owned();
    // enough events for every traced op's tasks: the timeline keeps what fits
    let setups: [(&str, Vec<(&str, &str)>); 3] = [
        ("recorder off", vec![("HCCL_RS_FR_BUFFER_SIZE", "0")]),
        (
            "recorder on (2000)",
            vec![("HCCL_RS_FR_BUFFER_SIZE", "2000")],
        ),
        (
            "recorder off, timeline on",
            vec![("HCCL_RS_FR_BUFFER_SIZE", "0"), ("HCCL_RS_TRACE", &trace)],
        ),
    ];
    let comms: Vec<Arc<Vec<HcclComm>>> = setups
        .iter()
        .map(|(_, env)| hccl_tests::comms_with_env(2, env))
        .collect();
    let n_setups = comms.len();
    let barrier = Arc::new(Barrier::new(2));
    let per_rank: Vec<_> = (0..2)
        .map(|r| {
            let (comms, barrier) = (comms.clone(), barrier.clone());
            std::thread::spawn(move || {
                let streams: Vec<_> = comms.iter().map(|c| c[r].create_stream()).collect();
                let a = DeviceMem::alloc(8).expect("alloc");
                let b = DeviceMem::alloc(8).expect("alloc");
                let run = |k: usize, n: usize| {
                    let c = &comms[k][r];
                    for _ in 0..n {
                        c.all_reduce_raw(&a, &b, 2, DataType::Fp32, ReduceOp::Sum, &streams[k])
                            .expect("allreduce");
                    }
                    streams[k].synchronize().expect("sync");
                };
                for k in 0..n_setups {
                    run(k, 2000);
                }
                let mut times = vec![Vec::new(); n_setups];
                for blk in 0..blocks {
                    for j in 0..n_setups {
                        // rotate the order so no set-up always runs first
                        let k = (j + blk) % n_setups;
                        barrier.wait();
                        let t = Instant::now();
                        run(k, ops);
                        times[k].push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
                    }
                }
                times
            })
        })
        .collect();
    let times: Vec<Vec<Vec<f64>>> = per_rank
        .into_iter()
        .map(|h| h.join().expect("rank"))
        .collect();
    println!(
        "p=2 8 B fp32 sum AllReduce, threads, {blocks} blocks of {ops} ops per set-up, µs per op:"
    );
    let mut p50s = Vec::new();
    for (k, (name, _)) in setups.iter().enumerate() {
        // a block's time is the slower rank's
        let mut v: Vec<f64> = (0..blocks)
            .map(|b| times[0][k][b].max(times[1][k][b]))
            .collect();
        let (p50, p99, max) = spread(&mut v);
        p50s.push(p50);
        println!("  {name:<28} p50 {p50:.4}  p99 {p99:.4}  max {max:.4}");
    }
    println!(
        "  recorder on - off: {:+.1} ns per op (p50s; ratio {:.3}); timeline on - off: {:+.1} ns per op (ratio {:.3})",
        (p50s[1] - p50s[0]) * 1e3,
        p50s[1] / p50s[0],
        (p50s[2] - p50s[0]) * 1e3,
        p50s[2] / p50s[0]
    );
    drop(comms);
    let _ = std::fs::remove_dir_all(&trace_dir);
}
