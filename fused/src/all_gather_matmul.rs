//! AllGather+MatMul: every rank gets (A gathered by rows)·B.
//!
//! Window path (CATCCOS's AG-MM, pull instead of push): each rank copies
//! its shard of A into its own window block by block, publishing
//! `produced` after each, then multiplies its own shard (from the
//! caller's buffer: no wait), then the peers' shards in the order r+1,
//! r+2, … block by block, the GEMM reading each block straight out of the
//! peer's window as soon as its counter says it is there. The only copy
//! is a rank's own shard into its window; the opening agreement (a
//! barrier) guarantees nobody still reads the window it rewrites.

use crate::gemm::{as_f32, block_rows, blocks_of, mm_into};
use crate::pipeline::{stopped, Counter, Waits};
use crate::Ctx;
use hccl_platform::cube::{self, Mat};
use hccl_platform::Result;
use std::sync::mpsc;

/// Row offsets of every rank's shard in the gathered A, and the total.
fn offsets(cx: &Ctx<'_>) -> (Vec<usize>, usize) {
    let mut offs = Vec::with_capacity(cx.p);
    let mut total = 0;
    for rec in cx.recs {
        offs.push(total);
        total += rec.m as usize;
    }
    (offs, total)
}

/// The window pipeline; returns the blocks it used.
pub(crate) fn window(
    cx: &mut Ctx<'_>,
    w: &mut Waits<'_>,
    a: &Mat,
    b: &Mat,
    out: &Mat,
    gathered: Option<&Mat>,
) -> Result<usize> {
    let (p, r, rb) = (cx.p, cx.r, cx.block);
    let (offs, _) = offsets(cx);
    let rows_of = |q: usize| cx.recs[q].m as usize;
    let (k, dt) = (a.col_count(), a.dtype());
    let blocks = (0..p).map(|q| blocks_of(rows_of(q), rb)).max().unwrap_or(0);
    let ws = w.ws;
    let base = ws.base;
    let shard = |q: usize, start: usize, rows: usize| -> Result<Mat> {
        let es = dt.size();
        Mat::new(&ws.data(q, start * k * es, rows * k * es)?, dt, rows, k, k)
    };
    for c in 0..blocks {
        let (start, rows) = block_rows(rows_of(r), rb, c);
        if rows > 0 {
            cube::convert(&shard(r, start, rows)?, &a.rows(start, rows)?)?;
        }
        ws.publish(Counter::Produced, base + c as u64 + 1);
    }
    let b32 = as_f32(b, cx.scratch, "b32")?;
    mm_into(
        &out.rows(offs[r], rows_of(r))?,
        a,
        &b32,
        cx.scratch,
        cx.threads,
    )?;
    if let Some(g) = gathered {
        cube::convert(&g.rows(offs[r], rows_of(r))?, a)?;
    }
    for i in 1..p {
        let q = (r + i) % p;
        for c in 0..blocks_of(rows_of(q), rb) {
            w.wait(q, Counter::Produced, base + c as u64 + 1)?;
            let (start, rows) = block_rows(rows_of(q), rb, c);
            let src = shard(q, start, rows)?;
            mm_into(
                &out.rows(offs[q] + start, rows)?,
                &src,
                &b32,
                cx.scratch,
                cx.threads,
            )?;
            if let Some(g) = gathered {
                cube::convert(&g.rows(offs[q] + start, rows)?, &src)?;
            }
        }
    }
    Ok(blocks)
}

/// The stream pipeline: a thread gathers block after block of every
/// shard (AllGatherV into a stage) up to `stages` ahead, while this
/// thread multiplies its own shard and then each gathered block.
pub(crate) fn stream(
    cx: &mut Ctx<'_>,
    a: &Mat,
    b: &Mat,
    out: &Mat,
    gathered: Option<&Mat>,
) -> Result<usize> {
    let (p, r, rb) = (cx.p, cx.r, cx.block);
    let stages = cx.stages;
    let (offs, _) = offsets(cx);
    let rows: Vec<usize> = cx.recs.iter().map(|x| x.m as usize).collect();
    let (k, dt) = (a.col_count(), a.dtype());
    let es = dt.size();
    let blocks = rows.iter().map(|&m| blocks_of(m, rb)).max().unwrap_or(0);
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let sends = cx.scratch.stages("ag_send", stages, rb * k * es)?;
    let gathers = cx.scratch.stages("ag_gather", stages, p * rb * k * es)?;
    let (comm, stream) = (cx.comm, cx.stream);
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, usize)>();
    let (free_tx, free_rx) = mpsc::channel::<usize>();
    std::thread::scope(|sc| {
        let (rows, sends, gathers) = (&rows, &sends, &gathers);
        let comm_side = sc.spawn(move || -> Result<()> {
            // this thread mostly waits for the wire: it must not spin on
            // the core the GEMM needs
            let _quiet = comm.device().quiet_waits();
            for c in 0..blocks {
                let s = c % stages;
                if c >= stages && free_rx.recv().is_err() {
                    break;
                }
                let (start, mine) = block_rows(rows[r], rb, c);
                let send = sends[s].range(0, mine * k * es)?;
                if mine > 0 {
                    cube::convert(&Mat::new(&send, dt, mine, k, k)?, &a.rows(start, mine)?)?;
                }
                let counts: Vec<u64> = rows
                    .iter()
                    .map(|&m| (block_rows(m, rb, c).1 * k) as u64)
                    .collect();
                let displs: Vec<u64> = (0..p).map(|q| (q * rb * k) as u64).collect();
                comm.all_gather_v_raw(
                    &send,
                    (mine * k) as u64,
                    &gathers[s],
                    &counts,
                    &displs,
                    dt,
                    stream,
                )?;
                stream.synchronize()?;
                if ready_tx.send((c, s)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        // the GEMM on a thread of its own, below the communication
        // thread's priority (see `yield_to_communication`)
        let compute = sc.spawn(move || -> Result<()> {
            crate::pipeline::yield_to_communication();
            mm_into(
                &out.rows(offs[r], rows[r])?,
                a,
                &b32,
                cx.scratch,
                cx.threads,
            )?;
            if let Some(g) = gathered {
                cube::convert(&g.rows(offs[r], rows[r])?, a)?;
            }
            for _ in 0..blocks {
                let (c, s) = ready_rx.recv().map_err(|_| stopped())?;
                for i in 1..p {
                    let q = (r + i) % p;
                    let (start, n_rows) = block_rows(rows[q], rb, c);
                    if n_rows == 0 {
                        continue;
                    }
                    let src = Mat::new(
                        &gathers[s].range(q * rb * k * es, n_rows * k * es)?,
                        dt,
                        n_rows,
                        k,
                        k,
                    )?;
                    mm_into(
                        &out.rows(offs[q] + start, n_rows)?,
                        &src,
                        &b32,
                        cx.scratch,
                        cx.threads,
                    )?;
                    if let Some(g) = gathered {
                        cube::convert(&g.rows(offs[q] + start, n_rows)?, &src)?;
                    }
                }
                // the gatherer may be done already (its last blocks needed
                // no free stage): a closed channel is no reason to stop
                let _ = free_tx.send(s);
            }
            Ok(())
        });
        crate::pipeline::join_sides(compute, comm_side)
    })?;
    Ok(blocks)
}

/// The baseline: one AllGatherV of the whole shards, then the whole
/// product.
pub(crate) fn unfused(
    cx: &mut Ctx<'_>,
    a: &Mat,
    b: &Mat,
    out: &Mat,
    gathered: Option<&Mat>,
) -> Result<usize> {
    let (offs, total) = offsets(cx);
    let (k, dt) = (a.col_count(), a.dtype());
    let es = dt.size();
    let mine = a.row_count();
    let send = if a.ld() == k || mine <= 1 {
        a.mem().range(0, mine * k * es)?
    } else {
        let s = cx.scratch.get("agsend", mine * k * es)?;
        cube::convert(&Mat::new(&s, dt, mine, k, k)?, a)?;
        s
    };
    let direct = gathered.filter(|g| g.ld() == k || total <= 1);
    let gath = match direct {
        Some(g) => g.mem().range(0, total * k * es)?,
        None => cx.scratch.get("aggath", total * k * es)?,
    };
    let counts: Vec<u64> = cx.recs.iter().map(|x| x.m * k as u64).collect();
    let displs: Vec<u64> = offs.iter().map(|&o| (o * k) as u64).collect();
    cx.comm.all_gather_v_raw(
        &send,
        (mine * k) as u64,
        &gath,
        &counts,
        &displs,
        dt,
        cx.stream,
    )?;
    cx.stream.synchronize()?;
    let full = Mat::new(&gath, dt, total, k, k)?;
    let b32 = as_f32(b, cx.scratch, "b32")?;
    mm_into(out, &full, &b32, cx.scratch, cx.threads)?;
    if let (Some(g), None) = (gathered, direct) {
        cube::convert(g, &full)?;
    }
    Ok(1)
}
