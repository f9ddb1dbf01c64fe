//! HCCL's 1-byte FP8 types (HIF8, FP8E4M3, FP8E5M2, FP8E8M0) on one rank
//! of a communicator: every op that moves data without reducing it carries
//! each type byte for byte, and every reducing op refuses it with
//! `HCCL_E_NOT_SUPPORT` naming the type and the op, enqueuing nothing.
//! Shared by the thread tests and the rank processes (`mp_worker fp8`).

use hccl_adapter::{
    DataType, DeviceMem, HcclComm, HcclError, HcclResult, ReduceOp, Result, SendRecvItem,
    SendRecvKind,
};

/// Byte `i` of rank `rank`'s data of type `d`: 0x01..=0x65, a positive
/// finite number in every FP8 format (no NaN or infinity pattern), that
/// differs between types, ranks and positions.
pub fn byte(d: DataType, rank: u32, i: usize) -> u8 {
    1 + ((d.code() as usize * 7 + rank as usize * 31 + i * 13) % 101) as u8
}

fn bytes(d: DataType, rank: u32, from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| byte(d, rank, i)).collect()
}

fn displs(counts: &[u64]) -> Vec<u64> {
    counts
        .iter()
        .scan(0, |a, c| {
            let d = *a;
            *a += c;
            Some(d)
        })
        .collect()
}

fn check(what: &str, got: Vec<u8>, want: Vec<u8>) -> Result<()> {
    match got.iter().zip(&want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => Ok(()),
        at => Err(HcclError::internal(format!(
            "{what}: wrong bytes (first difference at {at:?} of {})",
            want.len()
        ))),
    }
}

/// Runs every moving op with each FP8 type on `sizes` elements, checks the
/// bytes, then checks that every reducing op refuses each type and the
/// stream still runs an op. Every rank of `c` must call it.
pub fn run(c: &HcclComm, sizes: &[usize]) -> Result<()> {
    let s = c.create_stream();
    let (r, p) = (c.rank(), c.size());
    let pu = p as usize;
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    for d in DataType::FP8 {
        for &n in sizes {
            let w = |what: &str| format!("{d} {what} n={n} p={p} rank {r}");
            let src = DeviceMem::alloc(pu * n)?;
            src.copy_from_host(&bytes(d, r, 0, pu * n))?;
            let nn = n as u64;
            // AllGather
            let ag = DeviceMem::alloc(pu * n)?;
            c.all_gather_raw(&src, &ag, nn, d, &s)?;
            // AllGatherV: rank q sends n - q elements (at least 1)
            let gc: Vec<u64> = (0..p as u64).map(|q| nn.saturating_sub(q).max(1)).collect();
            let agv = DeviceMem::alloc(gc.iter().sum::<u64>() as usize)?;
            c.all_gather_v_raw(&src, gc[r as usize], &agv, &gc, &displs(&gc), d, &s)?;
            // Broadcast from the last rank
            let bc = DeviceMem::alloc(n)?;
            if r == p - 1 {
                bc.copy_from_host(&bytes(d, r, 0, n))?;
            }
            c.broadcast_raw(&bc, nn, d, p - 1, &s)?;
            // AllToAll
            let a2a = DeviceMem::alloc(pu * n)?;
            c.all_to_all_raw(&src, nn, d, &a2a, nn, d, &s)?;
            // AllToAllV: r sends n - (r + q) % 3 (at least 1) to q
            let m = |from: u32, to: u32| nn.saturating_sub(((from + to) % 3) as u64).max(1);
            let sc: Vec<u64> = (0..p).map(|q| m(r, q)).collect();
            let rc: Vec<u64> = (0..p).map(|q| m(q, r)).collect();
            let a2av = DeviceMem::alloc(rc.iter().sum::<u64>() as usize)?;
            c.all_to_all_v_raw(&src, &sc, &displs(&sc), d, &a2av, &rc, &displs(&rc), d, &s)?;
            // Scatter and Gather, rooted at rank 1 and rank 0
            let sco = DeviceMem::alloc(n)?;
            c.scatter_raw(&src, &sco, nn, d, 1 % p, &s)?;
            let ga = DeviceMem::alloc(pu * n)?;
            c.gather_raw(&src, &ga, nn, d, 0, &s)?;
            // Send/Recv forwards, BatchSendRecv backwards
            let got = DeviceMem::alloc(n)?;
            if r % 2 == 0 {
                c.send_raw(&src, nn, d, next, &s)?;
                c.recv_raw(&got, nn, d, prev, &s)?;
            } else {
                c.recv_raw(&got, nn, d, prev, &s)?;
                c.send_raw(&src, nn, d, next, &s)?;
            }
            let batch = DeviceMem::alloc(n)?;
            let item = |kind, buf: &DeviceMem, peer| SendRecvItem {
                kind,
                buf: buf.clone(),
                count: nn,
                dtype: d,
                peer,
            };
            c.batch_send_recv(
                &[
                    item(SendRecvKind::Send, &src, prev),
                    item(SendRecvKind::Recv, &batch, next),
                ],
                &s,
            )?;
            s.synchronize()?;

            let all = |len: &dyn Fn(u32) -> usize, at: &dyn Fn(u32) -> usize| -> Vec<u8> {
                (0..p).flat_map(|q| bytes(d, q, at(q), len(q))).collect()
            };
            check(&w("AllGather"), ag.to_vec(pu * n)?, all(&|_| n, &|_| 0))?;
            let total = gc.iter().sum::<u64>() as usize;
            check(
                &w("AllGatherV"),
                agv.to_vec(total)?,
                all(&|q| gc[q as usize] as usize, &|_| 0),
            )?;
            check(&w("Broadcast"), bc.to_vec(n)?, bytes(d, p - 1, 0, n))?;
            check(
                &w("AllToAll"),
                a2a.to_vec(pu * n)?,
                all(&|_| n, &|_| r as usize * n),
            )?;
            let total = rc.iter().sum::<u64>() as usize;
            let at = |q: u32| displs(&(0..p).map(|j| m(q, j)).collect::<Vec<_>>())[r as usize];
            check(
                &w("AllToAllV"),
                a2av.to_vec(total)?,
                all(&|q| rc[q as usize] as usize, &|q| at(q) as usize),
            )?;
            check(
                &w("Scatter"),
                sco.to_vec(n)?,
                bytes(d, 1 % p, r as usize * n, n),
            )?;
            if r == 0 {
                check(&w("Gather"), ga.to_vec(pu * n)?, all(&|_| n, &|_| 0))?;
            }
            check(&w("Send/Recv"), got.to_vec(n)?, bytes(d, prev, 0, n))?;
            check(&w("BatchSendRecv"), batch.to_vec(n)?, bytes(d, next, 0, n))?;
        }
        refusals(c, &s, d)?;
    }
    c.barrier(&s)?;
    s.synchronize()
}

/// Every reducing op refuses `d` with `HCCL_E_NOT_SUPPORT`, naming the type
/// and the op; the output is untouched and the stream runs an op after.
fn refusals(c: &HcclComm, s: &hccl_adapter::Stream, d: DataType) -> Result<()> {
    let (p, n) = (c.size() as usize, 64usize);
    let src = DeviceMem::alloc(p * n)?;
    src.copy_from_host(&bytes(d, c.rank(), 0, p * n))?;
    let out = DeviceMem::alloc(p * n)?;
    out.copy_from_host(&vec![0xEEu8; p * n])?;
    let nn = n as u64;
    let counts = vec![nn; p];
    let at = displs(&counts);
    type Call<'a> = Box<dyn Fn() -> Result<()> + 'a>;
    let calls: Vec<(&str, Call<'_>)> = vec![
        (
            "HcclAllReduce",
            Box::new(|| c.all_reduce_raw(&src, &out, nn, d, ReduceOp::Sum, s)),
        ),
        (
            "HcclAllReduce",
            Box::new(|| c.all_reduce_raw(&out, &out, nn, d, ReduceOp::Max, s)),
        ),
        (
            "HcclReduce",
            Box::new(|| c.reduce_raw(&src, &out, nn, d, ReduceOp::Min, 0, s)),
        ),
        (
            "HcclReduceScatter",
            Box::new(|| c.reduce_scatter_raw(&src, &out, nn, d, ReduceOp::Prod, s)),
        ),
        (
            "HcclReduceScatterV",
            Box::new(|| c.reduce_scatter_v_raw(&src, &counts, &at, &out, nn, d, ReduceOp::Sum, s)),
        ),
    ];
    for (api, call) in calls {
        let e = match call() {
            Ok(()) => {
                return Err(HcclError::internal(format!("{api} accepted {d}")));
            }
            Err(e) => e,
        };
        let msg = e.to_string();
        if e.code() != HcclResult::ENotSupport
            || !msg.contains(d.hccl_name())
            || !msg.contains(api)
            || !msg.contains("reducing op")
        {
            return Err(HcclError::internal(format!(
                "{api} {d}: expected HCCL_E_NOT_SUPPORT naming the type and op, got {:?}: {msg}",
                e.code()
            )));
        }
    }
    // nothing was enqueued: a following op runs, the output is untouched
    let after = DeviceMem::alloc(p * n)?;
    c.all_gather_raw(&src, &after, nn, d, s)?;
    s.synchronize()?;
    check(
        &format!("{d} output after refusals"),
        out.to_vec(p * n)?,
        vec![0xEE; p * n],
    )?;
    let want: Vec<u8> = (0..c.size()).flat_map(|q| bytes(d, q, 0, n)).collect();
    check(
        &format!("{d} AllGather after refusals"),
        after.to_vec(p * n)?,
        want,
    )
}
