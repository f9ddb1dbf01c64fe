//! Scenario `flap` (op retry over a flapping link, issue 32): a loop of
//! checked AllReduces while the parent takes a namespace host's
//! interface down and up (`hccl-mp-worker <mode> <rank> <size> <dir> flap`).
//!
//! Each op sums `FLAP_BYTES` (default 16 MiB) of f32 whose values change
//! with the op's number (`(rank + 1) * (op % 7 + 1)` plus the element's
//! index mod 5), so an op that returned a stale or partial result is
//! caught. After its first op a rank creates `<dir>/ready.<rank>`; the
//! ranks stop together after the op before which some rank saw
//! `<dir>/stop` (a one-element AllReduce of the flags decides). It prints one
//! line `FLAP {json}`: `{"rank", "ops", "recoveries", "max_ms", "p50_ms"}`
//! when every op completed with the right sum, or `{"rank", "ops", "code",
//! "message"}` on the first error (then exits 2, 1.5 s later, so a peer
//! still failing sees the link's error, not this process's exit).
//! `recoveries` counts the communicator's rebuilds: op retries, when
//! `HCCL_OP_RETRY_ENABLE` is on.

use hccl_adapter::{DataType, DeviceMem, HcclComm, HcclError, ReduceOp, Result};
use std::path::Path;
use std::time::Instant;

fn line(fields: serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "FLAP {fields}");
    let _ = out.flush();
}

fn value(rank: u32, op: u64, i: usize) -> f32 {
    ((rank + 1) as u64 * (op % 7 + 1) + (i % 5) as u64) as f32
}

/// Runs the scenario; never returns.
pub fn run(c: Result<HcclComm>, rank: u32, size: u32, dir: &str) -> ! {
    let mut ops = 0u64;
    let fail = |ops: u64, e: HcclError| -> ! {
        line(serde_json::json!({
            "rank": rank, "ops": ops, "code": e.code().code(), "message": e.to_string(),
        }));
        // a process that lives on, as a real one would: its exit must not
        // be what a slower peer reports instead of the link
        std::thread::sleep(std::time::Duration::from_millis(1500));
        std::process::exit(2)
    };
    let c = c.unwrap_or_else(|e| fail(0, e));
    let bytes: usize = std::env::var("FLAP_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16 << 20);
    let n = bytes / 4;
    let s = c.create_stream();
    let send = DeviceMem::alloc(bytes).unwrap_or_else(|e| fail(0, e));
    let recv = DeviceMem::alloc(bytes).unwrap_or_else(|e| fail(0, e));
    let mut host = vec![0f32; n];
    let mut times = Vec::new();
    let stop = Path::new(dir).join("stop");
    let flag = DeviceMem::alloc(4).unwrap_or_else(|e| fail(0, e));
    let any = DeviceMem::alloc(4).unwrap_or_else(|e| fail(0, e));
    loop {
        // every rank stops after the same op: the one during which some
        // rank saw the stop file (a one-element sum decides)
        flag.copy_from_host(&[if stop.exists() { 1f32 } else { 0.0 }])
            .unwrap_or_else(|e| fail(ops, e));
        if let Err(e) = c
            .all_reduce_raw(&flag, &any, 1, DataType::Fp32, ReduceOp::Sum, &s)
            .and_then(|()| s.synchronize())
        {
            fail(ops, e);
        }
        let stopping = any.to_vec::<f32>(1).unwrap_or_else(|e| fail(ops, e))[0] > 0.0;
        for (i, v) in host.iter_mut().enumerate() {
            *v = value(rank, ops, i);
        }
        send.copy_from_host(&host).unwrap_or_else(|e| fail(ops, e));
        let t = Instant::now();
        if let Err(e) = c
            .all_reduce_raw(&send, &recv, n as u64, DataType::Fp32, ReduceOp::Sum, &s)
            .and_then(|()| s.synchronize())
        {
            fail(ops, e);
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        recv.copy_to_host(&mut host)
            .unwrap_or_else(|e| fail(ops, e));
        for (i, &got) in host.iter().enumerate() {
            let want: f32 = (0..size).map(|r| value(r, ops, i)).sum();
            if got != want {
                fail(
                    ops,
                    HcclError::internal(format!(
                        "op {ops}: element {i} is {got}, the sum over the ranks is {want}"
                    )),
                );
            }
        }
        ops += 1;
        if ops == 1 {
            let _ = std::fs::write(Path::new(dir).join(format!("ready.{rank}")), b"");
        }
        if stopping {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    line(serde_json::json!({
        "rank": rank,
        "ops": ops,
        "recoveries": c.recoveries(),
        "max_ms": times.last().copied().unwrap_or(0.0),
        "p50_ms": times[times.len() / 2],
    }));
    std::process::exit(0)
}
