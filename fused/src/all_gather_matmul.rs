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
use crate::matmul_reduce_scatter::stage_buffers;
use crate::pipeline::{Counter, Waits};
use crate::Ctx;
use hccl_platform::cube::{self, Mat};
use hccl_platform::{HcclError, Result};
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

const SEND_NAMES: [&str; 16] = [
    "agsend0", "agsend1", "agsend2", "agsend3", "agsend4", "agsend5", "agsend6", "agsend7",
    "agsend8", "agsend9", "agsend10", "agsend11", "agsend12", "agsend13", "agsend14", "agsend15",
];
const GATHER_NAMES: [&str; 16] = [
    "aggat0", "aggat1", "aggat2", "aggat3", "aggat4", "aggat5", "aggat6", "aggat7", "aggat8",
    "aggat9", "aggat10", "aggat11", "aggat12", "aggat13", "aggat14", "aggat15",
];

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
    let stages = cx.stages.min(16);
    let (offs, _) = offsets(cx);
    let rows: Vec<usize> = cx.recs.iter().map(|x| x.m as usize).collect();
    let (k, dt) = (a.col_count(), a.dtype());
    let es = dt.size();
    let blocks = rows.iter().map(|&m| blocks_of(m, rb)).max().unwrap_or(0);
    let b32 = as_f32(b, cx.scratch, "b32")?;
    let sends = stage_buffers(cx, &SEND_NAMES, rb * k * es)?;
    let gathers = stage_buffers(cx, &GATHER_NAMES, p * rb * k * es)?;
    let (comm, stream) = (cx.comm, cx.stream);
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, usize)>();
    let (free_tx, free_rx) = mpsc::channel::<usize>();
    std::thread::scope(|sc| {
        let (rows, sends, gathers) = (&rows, &sends, &gathers);
        let comm_side = sc.spawn(move || -> Result<()> {
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
        let compute = (|| -> Result<()> {
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
                let (c, s) = ready_rx
                    .recv()
                    .map_err(|_| HcclError::internal("the communication thread stopped"))?;
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
                // the communication thread is gone once it has gathered
                // its last block (it owns `free_rx`): later blocks are
                // still to be multiplied, so a failed send is not an end
                let _ = free_tx.send(s);
            }
            Ok(())
        })();
        drop(free_tx);
        drop(ready_rx);
        let comm_res = comm_side
            .join()
            .unwrap_or_else(|_| Err(HcclError::internal("the communication thread panicked")));
        comm_res.and(compute)
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
