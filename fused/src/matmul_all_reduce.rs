//! MatMul+AllReduce: every rank gets Σ_q A_q·B_q.
//!
//! Window path: the output's rows are cut into blocks; for block c every
//! rank computes its partial into stage `c mod stages` of its window and
//! publishes `produced`; it reduces its share of the block's rows (split
//! as `split_rows`) out of every peer's partial into the stage's "final"
//! rows of its own window and publishes `reduced`; it copies every rank's
//! final rows into its output and publishes `consumed`: a ReduceScatter
//! and an AllGather per block, both pulled straight out of the peers'
//! windows, each running a block or two behind the computation.

use crate::gemm::{as_f32, block_rows, blocks_of, dense, f32_scratch, mm_into};
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
    let blocks = blocks_of(m, rb);
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let ws = w.ws;
    let base = ws.base;
    // stage s of `owner`'s window: partial rows, then final rows
    let part = |owner: usize, c: usize, row0: usize, rows: usize, fin: bool| -> Result<Mat> {
        let s = c % stages;
        let at = ((2 * s + usize::from(fin)) * rb + row0) * n * 4;
        dense(&ws.data(owner, at, rows * n * 4)?, DataType::Fp32, rows, n)
    };
    let tag = |c: usize| base + c as u64 + 1;
    let produce = |cx: &mut Ctx<'_>, w: &mut Waits<'_>, c: usize| -> Result<()> {
        if c >= stages {
            for i in 1..p {
                w.wait((r + i) % p, Counter::Consumed, tag(c - stages))?;
            }
        }
        let (start, rows) = block_rows(m, rb, c);
        mm_into(
            &part(r, c, 0, rows, false)?,
            &a.rows(start, rows)?,
            &b32,
            cx.scratch,
            cx.threads,
        )?;
        ws.publish(Counter::Produced, tag(c));
        Ok(())
    };
    // this rank's share of block c, summed out of every peer's partial
    let reduce = |w: &mut Waits<'_>, c: usize| -> Result<()> {
        let rows = block_rows(m, rb, c).1;
        let (o, nr) = split_rows(rows, p, r);
        let fin = part(r, c, o, nr, true)?;
        if nr > 0 {
            cube::convert(&fin, &part(r, c, o, nr, false)?)?;
        }
        for i in 1..p {
            let q = (r + p - i) % p;
            w.wait(q, Counter::Produced, tag(c))?;
            if nr > 0 {
                cube::add(&fin, &part(q, c, o, nr, false)?)?;
            }
        }
        ws.publish(Counter::Reduced, tag(c));
        Ok(())
    };
    // every rank's share of block c into the output
    let gather = |w: &mut Waits<'_>, c: usize| -> Result<()> {
        let (start, rows) = block_rows(m, rb, c);
        for i in 0..p {
            let q = (r + i) % p;
            let (oq, nq) = split_rows(rows, p, q);
            if q != r {
                w.wait(q, Counter::Reduced, tag(c))?;
            }
            if nq > 0 {
                cube::convert(&out.rows(start + oq, nq)?, &part(q, c, oq, nq, true)?)?;
            }
        }
        ws.publish(Counter::Consumed, tag(c));
        Ok(())
    };
    // The phases of a block run behind its computation by as many blocks
    // as the stages allow, so a rank rarely waits for a peer still
    // computing the same block: with one stage in lockstep, with two the
    // reduction and the copy-out one block behind, with three or more
    // the copy-out two behind (more would deadlock: a producer waits for
    // consumers that wait for it).
    let (lag_reduce, lag_gather) = match stages {
        1 => (0, 0),
        2 => (1, 1),
        _ => (1, 2),
    };
    for it in 0..blocks + lag_gather {
        if it < blocks {
            produce(cx, w, it)?;
        }
        if let Some(c) = it.checked_sub(lag_reduce).filter(|&c| c < blocks) {
            reduce(w, c)?;
        }
        if let Some(c) = it.checked_sub(lag_gather).filter(|&c| c < blocks) {
            gather(w, c)?;
        }
    }
    Ok(blocks)
}

/// The stream pipeline: block c's partial computed into a stage, handed
/// to a thread that all-reduces it in place and writes it out, while the
/// next block is computed.
pub(crate) fn stream(cx: &mut Ctx<'_>, a: &Mat, b: &Mat, out: &Mat) -> Result<usize> {
    let rb = cx.block;
    let stages = cx.stages;
    let (m, n) = (a.row_count(), b.col_count());
    let blocks = blocks_of(m, rb);
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let bufs = cx.scratch.stages("ar_stage", stages, rb * n * 4)?;
    let (comm, stream) = (cx.comm, cx.stream);
    let (work_tx, work_rx) = mpsc::channel::<(usize, usize)>();
    let (done_tx, done_rx) = mpsc::channel::<(usize, usize)>();
    std::thread::scope(|sc| {
        let bufs = &bufs;
        let comm_side = sc.spawn(move || -> Result<()> {
            // this thread mostly waits for the wire: it must not spin on
            // the core the GEMM needs
            let _quiet = comm.device().quiet_waits();
            // only collectives here, back to back: the copy-out is the
            // computing thread's, so the wire never waits for a copy
            for (c, s) in work_rx {
                let rows = block_rows(m, rb, c).1;
                let buf = bufs[s].range(0, rows * n * 4)?;
                comm.all_reduce_raw(
                    &buf,
                    &buf,
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
        let copy_out = |c: usize, s: usize| -> Result<()> {
            let (start, rows) = block_rows(m, rb, c);
            let buf = bufs[s].range(0, rows * n * 4)?;
            cube::convert(
                &out.rows(start, rows)?,
                &dense(&buf, DataType::Fp32, rows, n)?,
            )
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
                let (start, rows) = block_rows(m, rb, c);
                let dst = dense(&bufs[s].range(0, rows * n * 4)?, DataType::Fp32, rows, n)?;
                mm_into(&dst, &a.rows(start, rows)?, &b32, cx.scratch, cx.threads)?;
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

/// The baseline: the whole product, then one AllReduce in place.
pub(crate) fn unfused(cx: &mut Ctx<'_>, a: &Mat, b: &Mat, out: &Mat) -> Result<usize> {
    let (m, n) = (a.row_count(), b.col_count());
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let direct = out.dtype() == DataType::Fp32 && (out.ld() == n || m <= 1);
    let full = if direct {
        dense(&out.mem().range(0, m * n * 4)?, DataType::Fp32, m, n)?
    } else {
        f32_scratch(cx.scratch, "full", m, n)?
    };
    mm_into(&full, a, &b32, cx.scratch, cx.threads)?;
    cx.comm.all_reduce_raw(
        full.mem(),
        full.mem(),
        (m * n) as u64,
        DataType::Fp32,
        ReduceOp::Sum,
        cx.stream,
    )?;
    cx.stream.synchronize()?;
    if !direct {
        cube::convert(out, &full)?;
    }
    Ok(1)
}
