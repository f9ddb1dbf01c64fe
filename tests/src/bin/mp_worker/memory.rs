//! Scenarios of memory peers address, one rank per process
//! (`hccl-mp-worker <mode> <rank> <size> <dir> mem_<what>`):
//!
//! - `mem_direct`: `MEM_OP` (`allreduce`, `allgather`, `alltoall`, ...)
//!   of `MEM_COUNT` f32 per block, on registered buffers, then on
//!   unregistered ones, each checked (the parent forces the direct
//!   executor with `HCCL_RS_EXECUTOR`); prints `stats <registered|unregistered>
//!   mapped=<reads> cma=<reads>` after each: how this process reached
//!   its peers' buffers.
//! - `mem_window`: the symmetric-window round trip among the ranks listed
//!   in `MEM_HOST_PEERS` (this rank's host; default all); with
//!   `MEM_OTHER_HOST=<rank>` also checks that a peer pointer to that rank
//!   is `HCCL_E_NOT_SUPPORT` naming it and both hosts.
//! - `mem_bad`: private memory and overlaps refused, window sizes that
//!   differ by rank (rank 1's is twice the others') refused on every
//!   rank naming them, then a good window and a registered collective.
//! - `mem_exchange` (2 ranks): `exchange_mem` maps the peer's
//!   registration once; a direct AllReduce on ranges of it maps nothing
//!   more and reads through the mapping.
//! - `mem_registered`: AllReduce, AllGather, AllToAll, ReduceScatter and
//!   Broadcast on buffers registered with the communicator (1000 and
//!   70000 f32 per block), each checked, with whatever executor the
//!   selector picks (over RDMA the sends leave registered memory without
//!   a staging copy).
//! - `mem_bench`: 64 MiB (`BENCH_BYTES`) AllReduce, AllGather, AllToAll
//!   on registered and unregistered buffers, alternating, `BENCH_ITERS`
//!   timed runs each after a warm-up, and a memcpy of the same size;
//!   prints one `BENCH {json}` line per measurement (rank 0).

use hccl_adapter::{
    imports_mapped, peer_access_stats, DataType, DeviceMem, HcclComm, HcclError, HcclResult,
    ReduceOp, Result,
};
use hccl_tests::registered::{run_checked, sym_window_roundtrip};
use std::time::Instant;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn expect(e: &HcclError, code: HcclResult, needle: &str) -> Result<()> {
    if e.code() != code || !e.to_string().contains(needle) {
        return Err(HcclError::internal(format!(
            "expected {code:?} containing '{needle}', got: {e}"
        )));
    }
    Ok(())
}

/// Runs scenario `mem_<what>`.
pub(crate) fn run(c: &HcclComm, what: &str) -> Result<()> {
    match what {
        "direct" => direct(c),
        "window" => window(c),
        "bad" => bad(c),
        "exchange" => exchange(c),
        "bench" => bench(c),
        "registered" => registered(c),
        other => Err(HcclError::para(format!("unknown scenario mem_{other}"))),
    }
}

fn stats_line(what: &str) {
    let s = peer_access_stats();
    println!("stats {what} mapped={} cma={}", s.mapped_reads, s.cma_reads);
}

fn direct(c: &HcclComm) -> Result<()> {
    let op = std::env::var("MEM_OP").unwrap_or_else(|_| "allreduce".into());
    let count: usize = env_or("MEM_COUNT", 100_003);
    run_checked(c, &op, count, true)?;
    stats_line("registered");
    run_checked(c, &op, count, false)?;
    stats_line("unregistered");
    Ok(())
}

fn window(c: &HcclComm) -> Result<()> {
    let peers: Vec<u32> = match std::env::var("MEM_HOST_PEERS") {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => (0..c.size()).collect(),
    };
    sym_window_roundtrip(c, 64 << 10, &peers)?;
    if let Some(other) = std::env::var("MEM_OTHER_HOST")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        let w = c.sym_win_register(&DeviceMem::alloc_shareable(4096)?)?;
        let e = w.peer_ptr(0, other).unwrap_err();
        expect(
            &e,
            HcclResult::ENotSupport,
            &format!("rank {other} is on host"),
        )?;
        expect(
            &e,
            HcclResult::ENotSupport,
            &format!("this rank ({})", c.rank()),
        )?;
        c.sym_win_deregister(&w)?;
    }
    Ok(())
}

fn bad(c: &HcclComm) -> Result<()> {
    let r = c.rank();
    let e = c.register_mem(&DeviceMem::alloc(4096)?).unwrap_err();
    expect(
        &e,
        HcclResult::EPara,
        "only shareable memory can be registered",
    )?;
    let m = DeviceMem::alloc_shareable(1 << 16)?;
    let reg = c.register_mem(&m.range(0, 8192)?)?;
    let e = c.register_mem(&m.range(4096, 8192)?).unwrap_err();
    expect(&e, HcclResult::EPara, "overlaps [0, +8192)")?;
    c.deregister_mem(&reg)?;
    let size = if r == 1 { 8192 } else { 4096 };
    let e = c
        .sym_win_register(&DeviceMem::alloc_shareable(size)?)
        .unwrap_err();
    expect(&e, HcclResult::EPara, "rank 1: 8192 bytes")?;
    expect(&e, HcclResult::EPara, "rank 0: 4096 bytes")?;
    // nothing corrupted
    let all: Vec<u32> = (0..c.size()).collect();
    sym_window_roundtrip(c, 4096, &all)?;
    run_checked(c, "allreduce", 70_001, true)
}

fn exchange(c: &HcclComm) -> Result<()> {
    let r = c.rank();
    let peer = 1 - r;
    let n = 100_000usize;
    let m = DeviceMem::alloc_shareable(2 * n * 4)?;
    m.copy_from_host(
        &(0..n)
            .map(|i| (r as usize * n + i) as f32)
            .collect::<Vec<_>>(),
    )?;
    let reg = c.register_mem(&m)?;
    let before = imports_mapped();
    c.exchange_mem(&reg, &[peer])?;
    let peers = c.exchanged_peers(&reg);
    let theirs = match peers.as_slice() {
        [(q, mem)] if *q == peer => mem.clone(),
        other => {
            return Err(HcclError::internal(format!(
                "exchanged peers: {:?}",
                other.iter().map(|(q, _)| q).collect::<Vec<_>>()
            )))
        }
    };
    if theirs.to_vec::<f32>(1)? != vec![(peer as usize * n) as f32] {
        return Err(HcclError::internal(
            "the peer's mapped registration holds other data",
        ));
    }
    if imports_mapped() != before + 1 {
        return Err(HcclError::internal(format!(
            "exchange_mem mapped {} regions, expected 1",
            imports_mapped() - before
        )));
    }
    // an op on ranges of the registration: the links find the mapping cached
    let (send, recv) = (m.range(0, n * 4)?, m.range(n * 4, n * 4)?);
    let s = c.create_stream();
    let stats = peer_access_stats();
    c.all_reduce_raw(&send, &recv, n as u64, DataType::Fp32, ReduceOp::Sum, &s)?;
    s.synchronize()?;
    let got = recv.to_vec::<f32>(n)?;
    if let Some(i) = (0..n).find(|&i| got[i] != (i + n + i) as f32) {
        return Err(HcclError::internal(format!(
            "allreduce element {i} is {}",
            got[i]
        )));
    }
    let after = peer_access_stats();
    if imports_mapped() != before + 1 || after.mapped_reads == stats.mapped_reads {
        return Err(HcclError::internal(format!(
            "the op mapped {} more regions and read {} times through mappings",
            imports_mapped() - before - 1,
            after.mapped_reads - stats.mapped_reads
        )));
    }
    c.deregister_mem(&reg)
}

/// Seconds of the fastest of `iters` runs of `f` (after one warm-up).
fn best(iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut best = f64::MAX;
    for _ in 0..iters {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn bench(c: &HcclComm) -> Result<()> {
    let bytes: usize = env_or("BENCH_BYTES", 64 << 20);
    let iters: usize = env_or("BENCH_ITERS", 5);
    let (p, r) = (c.size() as usize, c.rank());
    let s = c.create_stream();
    let f = DataType::Fp32;
    let report = |what: &str, registered: Option<bool>, secs: f64, executor: String| {
        if r == 0 {
            println!(
                "BENCH {}",
                serde_json::json!({
                    "op": what,
                    "registered": registered,
                    "bytes": bytes,
                    "ranks": p,
                    "ms": secs * 1e3,
                    "gb_s": bytes as f64 / secs / 1e9,
                    "executor": executor,
                })
            );
        }
    };
    // the memcpy baseline: one copy of the same size
    let (a, b) = (
        DeviceMem::alloc_shareable(bytes)?,
        DeviceMem::alloc_shareable(bytes)?,
    );
    a.fill_bytes(1)?;
    let t = best(iters, || {
        s.memcpy_async(&b, &a)?;
        s.synchronize()
    })?;
    report("memcpy", None, t, String::new());
    let n = bytes / 4;
    for op in ["allreduce", "allgather", "alltoall"] {
        let (send_len, recv_len) = match op {
            "allreduce" => (n, n),
            "allgather" => (n / p, n),
            _ => (n, n),
        };
        let send = DeviceMem::alloc_shareable(send_len * 4)?;
        let recv = DeviceMem::alloc_shareable(recv_len * 4)?;
        send.fill_bytes(0)?;
        let run = || -> Result<()> {
            match op {
                "allreduce" => c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s)?,
                "allgather" => c.all_gather_raw(&send, &recv, (n / p) as u64, f, &s)?,
                _ => {
                    let k = (n / p) as u64;
                    c.all_to_all_raw(&send, k, f, &recv, k, f, &s)?
                }
            }
            s.synchronize()
        };
        // alternate: unregistered, registered, unregistered, registered
        for round in 0..2 {
            let t = best(iters, run)?;
            report(
                op,
                Some(false),
                t,
                c.communicator().last_executor().unwrap_or_default(),
            );
            let regs = [c.register_mem(&send)?, c.register_mem(&recv)?];
            let t = best(iters, run)?;
            report(
                op,
                Some(true),
                t,
                c.communicator().last_executor().unwrap_or_default(),
            );
            for reg in &regs {
                c.deregister_mem(reg)?;
            }
            let _ = round;
        }
    }
    Ok(())
}

/// `mem_registered`: the registered-memory ops, checked.
fn registered(c: &HcclComm) -> Result<()> {
    for op in [
        "allreduce",
        "allgather",
        "alltoall",
        "reducescatter",
        "broadcast",
    ] {
        for count in [1000, 70000] {
            run_checked(c, op, count, true)?;
        }
    }
    Ok(())
}
