//! Checks of memory peers address, shared by the thread tests
//! (`tests/registered_memory.rs`) and the rank processes
//! (`hccl-mp-worker ... mem_*`): a collective on registered (or
//! unregistered) shareable buffers checked against a host reference, and
//! a symmetric window that every rank writes into at each host peer's.

use hccl_adapter::{DataType, DeviceMem, HcclComm, HcclError, ReduceOp, Result};

/// Rank `r`'s element `i`: distinct per (rank, element), exact in f32.
pub fn val(r: u32, i: usize) -> f32 {
    ((r as usize * 7919 + i * 13) % 4096) as f32
}

/// Shareable memory holding `data`.
fn shareable(data: &[f32]) -> Result<DeviceMem> {
    let m = DeviceMem::alloc_shareable(data.len() * 4)?;
    m.copy_from_host(data)?;
    Ok(m)
}

fn fail(what: String) -> HcclError {
    HcclError::internal(what)
}

/// Runs `op` (`allreduce`, `allgather`, `alltoall`, `reducescatter`,
/// `broadcast`) with `count` f32 per block on shareable buffers,
/// registered with the communicator for the op when `register` (and
/// deregistered after), and checks the output on every element.
pub fn run_checked(comm: &HcclComm, op: &str, count: usize, register: bool) -> Result<()> {
    let (r, p) = (comm.rank(), comm.size());
    let pu = p as usize;
    let s = comm.create_stream();
    let f = DataType::Fp32;
    let (send_len, recv_len) = match op {
        "allreduce" | "broadcast" => (count, count),
        "allgather" => (count, count * pu),
        "alltoall" => (count * pu, count * pu),
        "reducescatter" => (count * pu, count),
        other => return Err(fail(format!("unknown op {other}"))),
    };
    let send = shareable(&(0..send_len).map(|i| val(r, i)).collect::<Vec<_>>())?;
    let recv = DeviceMem::alloc_shareable(recv_len * 4)?;
    let regs = if register {
        vec![comm.register_mem(&send)?, comm.register_mem(&recv)?]
    } else {
        vec![]
    };
    let c = count as u64;
    match op {
        "allreduce" => comm.all_reduce_raw(&send, &recv, c, f, ReduceOp::Sum, &s)?,
        "allgather" => comm.all_gather_raw(&send, &recv, c, f, &s)?,
        "alltoall" => comm.all_to_all_raw(&send, c, f, &recv, c, f, &s)?,
        "reducescatter" => comm.reduce_scatter_raw(&send, &recv, c, f, ReduceOp::Sum, &s)?,
        _ => {
            // broadcast from rank 0, in place: the root's buffer is the data
            let buf = if r == 0 { &send } else { &recv };
            comm.broadcast_raw(buf, c, f, 0, &s)?
        }
    }
    s.synchronize()?;
    let got = if op == "broadcast" && r == 0 {
        send.to_vec::<f32>(recv_len)?
    } else {
        recv.to_vec::<f32>(recv_len)?
    };
    let want = |i: usize| -> f32 {
        match op {
            "allreduce" => (0..p).map(|q| val(q, i)).sum(),
            "allgather" => val((i / count) as u32, i % count),
            // block q of this rank's output is block r of rank q's input
            "alltoall" => val((i / count) as u32, r as usize * count + i % count),
            "reducescatter" => (0..p).map(|q| val(q, r as usize * count + i)).sum(),
            _ => val(0, i),
        }
    };
    if let Some(i) = (0..recv_len).find(|&i| got[i] != want(i)) {
        return Err(fail(format!(
            "{op} of {count} on rank {r}: element {i} is {}, expected {}",
            got[i],
            want(i)
        )));
    }
    for reg in &regs {
        comm.deregister_mem(reg)?;
    }
    Ok(())
}

/// Every rank registers a window of `size` bytes (shareable), writes
/// `r * 1000 + q` at word `r` of each host peer q's window through its
/// mapping, and after a barrier finds `q * 1000 + r` at word q of its own
/// from every host peer q; peer pointers are the mapped windows'
/// addresses. `host_peers` are the ranks on this rank's host. Deregisters
/// the window at the end.
pub fn sym_window_roundtrip(comm: &HcclComm, size: usize, host_peers: &[u32]) -> Result<()> {
    let (r, p) = (comm.rank(), comm.size());
    let s = comm.create_stream();
    let mine = DeviceMem::alloc_shareable(size)?;
    let win = comm.sym_win_register(&mine)?;
    if win.size() != size || !comm.is_registered(&mine) {
        return Err(fail("the window is not registered whole".into()));
    }
    for &q in host_peers.iter().filter(|&&q| q != r) {
        let at = r as usize * 4;
        let theirs = win.peer_mem(q)?;
        let ptr = win.peer_ptr(at, q)?;
        if ptr as u64 != theirs.addr() + at as u64 {
            return Err(fail(format!(
                "peer pointer of rank {q} is not its mapped window"
            )));
        }
        theirs.range(at, 4)?.copy_from_host(&[r * 1000 + q])?;
    }
    // every rank has written before anyone reads
    comm.barrier(&s)?;
    s.synchronize()?;
    let got = mine.to_vec::<u32>(p as usize)?;
    for &q in host_peers.iter().filter(|&&q| q != r) {
        if got[q as usize] != q * 1000 + r {
            return Err(fail(format!(
                "rank {r}'s window word {q} is {}, rank {q} wrote {}",
                got[q as usize],
                q * 1000 + r
            )));
        }
    }
    match comm.sym_window_of(&mine.range(8, 8)?) {
        Some((w, 8)) if w.size() == size => {}
        _ => return Err(fail("sym_window_of does not find the window".into())),
    }
    // collective: no rank unmaps before every rank has arrived
    comm.sym_win_deregister(&win)?;
    if win.is_live() || comm.is_registered(&mine) {
        return Err(fail("the window outlived its deregistration".into()));
    }
    Ok(())
}
