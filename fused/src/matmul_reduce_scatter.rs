//! MatMul+ReduceScatter: rank r gets its rows of Σ_q A_q·B_q.
//!
//! Window path (CATCCOS's MM-RS on CPU terms): the rows every rank owns
//! are cut into blocks; for block c each rank computes, for every peer q
//! in the order r+1, r+2, …, its partial rows of q's block into slot
//! `[c mod stages][q]` of its own window, publishes `produced = c+1`,
//! computes its own partial straight into its output, then reduces block
//! c−1 (c with one stage) of its own rows out of every peer's window (peers in the order
//! r−1, r−2, …, so no two readers start on one peer) and publishes
//! `consumed`. A producer reuses a stage only once every peer consumed
//! the block that was in it. The reduction is done by the receiver,
//! straight from the peers' windows: no staging copy, and the tiles it
//! reads were written a block ago (in the shared cache when they fit).

use crate::gemm::{self, as_f32, block_rows, blocks_of, dense, f32_scratch, mm_into};
use crate::pipeline::{stopped, Counter, Waits};
use crate::shape::split_rows;
use crate::Ctx;
use hccl_adapter::{DataType, ReduceOp};
use hccl_platform::cube::{self, Mat};
use hccl_platform::Result;
use std::sync::mpsc;

/// The window pipeline; returns the blocks it used.
pub(crate) fn window(
    cx: &mut Ctx<'_>,
    w: &mut Waits<'_>,
    a: &Mat,
    b: &Mat,
    out: &Mat,
) -> Result<usize> {
    let (p, r, rb, stages) = (cx.p, cx.r, cx.block, cx.stages);
    let (m, n) = (a.row_count(), b.col_count());
    let parts: Vec<(usize, usize)> = (0..p).map(|q| split_rows(m, p, q)).collect();
    let blocks = blocks_of(parts[0].1, rb);
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let acc = if out.dtype() == DataType::Fp32 {
        out.clone()
    } else {
        f32_scratch(cx.scratch, "acc", parts[r].1, n)?
    };
    let ws = w.ws;
    let base = ws.base;
    // slot of `owner`'s window holding its partial of block c for rank q
    let slot = |owner: usize, c: usize, q: usize, rows: usize| -> Result<Mat> {
        let s = c % stages;
        let mem = ws.data(owner, (s * p + q) * rb * n * 4, rows * n * 4)?;
        dense(&mem, DataType::Fp32, rows, n)
    };
    let consume = |w: &mut Waits<'_>, c: usize| -> Result<()> {
        let (start, rows) = block_rows(parts[r].1, rb, c);
        let dst = acc.rows(start, rows)?;
        for i in 1..p {
            let q = (r + p - i) % p;
            w.wait(q, Counter::Produced, base + c as u64 + 1)?;
            if rows > 0 {
                cube::add(&dst, &slot(q, c, r, rows)?)?;
            }
        }
        ws.publish(Counter::Consumed, base + c as u64 + 1);
        if rows > 0 && out.dtype() != DataType::Fp32 {
            cube::convert(&out.rows(start, rows)?, &dst)?;
        }
        Ok(())
    };
    for c in 0..blocks {
        if c >= stages {
            // the stage's previous block: consumed by every peer
            let need = base + (c - stages) as u64 + 1;
            for i in 1..p {
                w.wait((r + i) % p, Counter::Consumed, need)?;
            }
        }
        for i in 1..p {
            let q = (r + i) % p;
            let (start, rows) = block_rows(parts[q].1, rb, c);
            if rows > 0 {
                let a_rows = a.rows(parts[q].0 + start, rows)?;
                gemm::mm_into(&slot(r, c, q, rows)?, &a_rows, &b32, cx.scratch, cx.threads)?;
            }
        }
        ws.publish(Counter::Produced, base + c as u64 + 1);
        let (start, rows) = block_rows(parts[r].1, rb, c);
        if rows > 0 {
            let a_rows = a.rows(parts[r].0 + start, rows)?;
            mm_into(
                &acc.rows(start, rows)?,
                &a_rows,
                &b32,
                cx.scratch,
                cx.threads,
            )?;
        }
        // consume a block late when a second stage lets the producer run
        // ahead (with one stage that would deadlock: the producer waits
        // for the consumer that waits for it)
        if stages == 1 {
            consume(w, c)?;
        } else if c >= 1 {
            consume(w, c - 1)?;
        }
    }
    if stages > 1 && blocks >= 1 {
        consume(w, blocks - 1)?;
    }
    Ok(blocks)
}

/// Counts and displacements (elements) of the per-rank parts of block c
/// in a stage laid out `[q][block rows × n]`.
fn v_layout(parts: &[(usize, usize)], rb: usize, n: usize, c: usize) -> (Vec<u64>, Vec<u64>) {
    let counts = parts
        .iter()
        .map(|&(_, rows)| (block_rows(rows, rb, c).1 * n) as u64)
        .collect();
    let displs = (0..parts.len()).map(|q| (q * rb * n) as u64).collect();
    (counts, displs)
}

/// The stream pipeline: block c's partials for every rank computed into a
/// stage, handed to a thread that runs the block's ReduceScatterV and
/// writes this rank's rows out, while the next block is computed.
pub(crate) fn stream(cx: &mut Ctx<'_>, a: &Mat, b: &Mat, out: &Mat) -> Result<usize> {
    let (p, r, rb) = (cx.p, cx.r, cx.block);
    let stages = cx.stages;
    let (m, n) = (a.row_count(), b.col_count());
    let parts: Vec<(usize, usize)> = (0..p).map(|q| split_rows(m, p, q)).collect();
    let blocks = blocks_of(parts[0].1, rb);
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let sends = cx.scratch.stages("rs_send", stages, p * rb * n * 4)?;
    let recvs = cx.scratch.stages("rs_recv", stages, rb * n * 4)?;
    let (comm, stream) = (cx.comm, cx.stream);
    let (work_tx, work_rx) = mpsc::channel::<(usize, usize)>();
    let (done_tx, done_rx) = mpsc::channel::<(usize, usize)>();
    std::thread::scope(|sc| {
        let parts = &parts;
        let (sends, recvs) = (&sends, &recvs);
        let comm_side = sc.spawn(move || -> Result<()> {
            // this thread mostly waits for the wire: it must not spin on
            // the core the GEMM needs
            let _quiet = comm.device().quiet_waits();
            // only collectives here, back to back: the copy-out is the
            // computing thread's, so the wire never waits for a copy
            for (c, s) in work_rx {
                let (counts, displs) = v_layout(parts, rb, n, c);
                let rows = block_rows(parts[r].1, rb, c).1;
                let recv = recvs[s].range(0, rows * n * 4)?;
                comm.reduce_scatter_v_raw(
                    &sends[s],
                    &counts,
                    &displs,
                    &recv,
                    (rows * n) as u64,
                    DataType::Fp32,
                    ReduceOp::Sum,
                    stream,
                )?;
                stream.synchronize()?;
                if done_tx.send((c, s)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        // this rank's rows of a reduced block, out of its stage
        let copy_out = |c: usize, s: usize| -> Result<()> {
            let (start, rows) = block_rows(parts[r].1, rb, c);
            if rows > 0 {
                let recv = recvs[s].range(0, rows * n * 4)?;
                cube::convert(
                    &out.rows(start, rows)?,
                    &dense(&recv, DataType::Fp32, rows, n)?,
                )?;
            }
            Ok(())
        };
        // the GEMM on a thread of its own, below the communication
        // thread's priority (see `yield_to_communication`)
        let compute = sc.spawn(move || -> Result<()> {
            crate::pipeline::yield_to_communication();
            for c in 0..blocks {
                let s = c % stages;
                if c >= stages {
                    let (done, ds) = done_rx.recv().map_err(|_| stopped())?;
                    copy_out(done, ds)?;
                }
                for i in 0..p {
                    let q = (r + 1 + i) % p;
                    let (start, rows) = block_rows(parts[q].1, rb, c);
                    if rows > 0 {
                        let dst = dense(
                            &sends[s].range(q * rb * n * 4, rows * n * 4)?,
                            DataType::Fp32,
                            rows,
                            n,
                        )?;
                        mm_into(
                            &dst,
                            &a.rows(parts[q].0 + start, rows)?,
                            &b32,
                            cx.scratch,
                            cx.threads,
                        )?;
                    }
                }
                work_tx.send((c, s)).map_err(|_| stopped())?;
            }
            for _ in 0..blocks.min(stages) {
                let (done, ds) = done_rx.recv().map_err(|_| stopped())?;
                copy_out(done, ds)?;
            }
            Ok(())
        });
        crate::pipeline::join_sides(compute, comm_side)
    })?;
    Ok(blocks)
}

/// The baseline: the whole product, then one ReduceScatterV.
pub(crate) fn unfused(cx: &mut Ctx<'_>, a: &Mat, b: &Mat, out: &Mat) -> Result<usize> {
    let (p, r) = (cx.p, cx.r);
    let (m, n) = (a.row_count(), b.col_count());
    let parts: Vec<(usize, usize)> = (0..p).map(|q| split_rows(m, p, q)).collect();
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let full = f32_scratch(cx.scratch, "full", m, n)?;
    mm_into(&full, a, &b32, cx.scratch, cx.threads)?;
    let counts: Vec<u64> = parts.iter().map(|&(_, rows)| (rows * n) as u64).collect();
    let displs: Vec<u64> = parts.iter().map(|&(off, _)| (off * n) as u64).collect();
    let rows = parts[r].1;
    let direct = out.dtype() == DataType::Fp32 && (out.ld() == n || rows <= 1);
    let recv = if direct {
        out.mem().range(0, rows * n * 4)?
    } else {
        cx.scratch.get("recv", rows * n * 4)?
    };
    cx.comm.reduce_scatter_v_raw(
        full.mem(),
        &counts,
        &displs,
        &recv,
        (rows * n) as u64,
        DataType::Fp32,
        ReduceOp::Sum,
        cx.stream,
    )?;
    cx.stream.synchronize()?;
    if !direct && rows > 0 {
        cube::convert(out, &dense(&recv, DataType::Fp32, rows, n)?)?;
    }
    Ok(1)
}
