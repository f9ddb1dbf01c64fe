//! The repeat path (issue 30): a call with exactly the arguments of the
//! previous call of its op runs the op its executor prepared, skipping
//! validation and the framework's full path. What it relies on, checked
//! exactly at every size class the small-op paths have (inline in a
//! header slot, a data entry, beyond the AIV kernel's reach):
//!
//! - **same buffers, new data**: every collective repeated on the same
//!   buffers with different input each time gives each time's result;
//! - **senders far ahead**: the ranks of a rooted op that only send
//!   (Broadcast and Scatter roots, Reduce and Gather non-roots) repeat it
//!   [`OPS`] times (past the 256 header slots) without waiting, while the
//!   receiving ranks sleep and then check every one of their repeats;
//! - **interleaved ops**: two ops alternating, each a repeat of its own
//!   last call, on their own buffers.
//!
//! Shared by the thread test (`tests/repeat.rs`, p = 2..9) and the rank
//! processes (`hccl-mp-worker ... repeat`).

use hccl_adapter::{DataType, DeviceMem, HcclComm, HcclError, ReduceOp, Result, Stream};
use std::time::Duration;

/// Repeats of a rooted op by its sending ranks before the receivers start.
pub const OPS: usize = 300;

/// Elements per rank of each size class: 2 (8 B: inline in the header
/// slot), 1000 (4 KB: a data entry), 20 000 (80 KB: past AIV_MAX_BYTES,
/// another executor and no repeat plan).
pub const SIZES: [usize; 3] = [2, 1000, 20_000];

/// The collectives without count vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    Scatter,
    Gather,
}

/// Every op, rooted ones last.
pub const OPS_ALL: [Op; 8] = [
    Op::AllReduce,
    Op::AllGather,
    Op::ReduceScatter,
    Op::AllToAll,
    Op::Broadcast,
    Op::Reduce,
    Op::Scatter,
    Op::Gather,
];

/// Element `k` of rank `r`'s whole input in round `i`.
pub fn val(i: usize, r: u32, k: usize) -> i32 {
    (i as i32)
        .wrapping_mul(1_000_003)
        .wrapping_add(r as i32 * 10_007)
        .wrapping_add(k as i32 * 7)
}

/// Buffers of one op at `n` elements per block, on rank `r` of `p`.
struct Bufs {
    send: DeviceMem,
    recv: DeviceMem,
    n: usize,
}

impl Op {
    /// (send, receive) elements on rank `r` of `p` with blocks of `n`.
    fn lens(self, r: u32, root: u32, p: usize, n: usize) -> (usize, usize) {
        match self {
            Op::AllReduce | Op::Broadcast => (n, n),
            Op::Reduce => (n, if r == root { n } else { 0 }),
            Op::AllGather => (n, n * p),
            Op::Gather => (n, if r == root { n * p } else { 0 }),
            Op::ReduceScatter => (n * p, n),
            Op::Scatter => (if r == root { n * p } else { 0 }, n),
            Op::AllToAll => (n * p, n * p),
        }
    }

    /// Whether rank `r` only sends (takes nothing from its peers).
    pub fn only_sends(self, r: u32, root: u32) -> bool {
        match self {
            Op::Broadcast | Op::Scatter => r == root,
            Op::Reduce | Op::Gather => r != root,
            _ => false,
        }
    }

    /// Issues the op once on `b`.
    fn issue(self, c: &HcclComm, b: &Bufs, root: u32, s: &Stream) -> Result<()> {
        let (t, n) = (DataType::Int32, b.n as u64);
        match self {
            Op::AllReduce => c.all_reduce_raw(&b.send, &b.recv, n, t, ReduceOp::Sum, s),
            Op::AllGather => c.all_gather_raw(&b.send, &b.recv, n, t, s),
            Op::ReduceScatter => c.reduce_scatter_raw(&b.send, &b.recv, n, t, ReduceOp::Sum, s),
            Op::AllToAll => c.all_to_all_raw(&b.send, n, t, &b.recv, n, t, s),
            Op::Broadcast => c.broadcast_raw(&b.send, n, t, root, s),
            Op::Reduce => c.reduce_raw(&b.send, &b.recv, n, t, ReduceOp::Sum, root, s),
            Op::Scatter => c.scatter_raw(&b.send, &b.recv, n, t, root, s),
            Op::Gather => c.gather_raw(&b.send, &b.recv, n, t, root, s),
        }
    }

    /// Rank `r`'s whole input in round `i` (the Broadcast's non-roots
    /// hold -1, overwritten by the op).
    fn input(self, i: usize, r: u32, root: u32, len: usize) -> Vec<i32> {
        if self == Op::Broadcast && r != root {
            return vec![-1; len];
        }
        (0..len).map(|k| val(i, r, k)).collect()
    }

    /// What rank `r` of `p` must hold after round `i` (`None`: nothing
    /// to check on this rank), with blocks of `n`.
    fn expected(self, i: usize, r: u32, root: u32, p: usize, n: usize) -> Option<Vec<i32>> {
        let sum = |k: usize| (0..p as u32).fold(0i32, |a, q| a.wrapping_add(val(i, q, k)));
        Some(match self {
            Op::AllReduce => (0..n).map(sum).collect(),
            Op::Reduce if r == root => (0..n).map(sum).collect(),
            Op::Broadcast => (0..n).map(|k| val(i, root, k)).collect(),
            Op::AllGather => (0..n * p).map(|k| val(i, (k / n) as u32, k % n)).collect(),
            Op::Gather if r == root => (0..n * p).map(|k| val(i, (k / n) as u32, k % n)).collect(),
            Op::ReduceScatter => (0..n).map(|k| sum(r as usize * n + k)).collect(),
            Op::Scatter => (0..n).map(|k| val(i, root, r as usize * n + k)).collect(),
            Op::AllToAll => (0..n * p)
                .map(|k| val(i, (k / n) as u32, r as usize * n + k % n))
                .collect(),
            Op::Reduce | Op::Gather => return None,
        })
    }
}

/// Allocates `op`'s buffers on rank `r` (at least one byte each: a rank
/// that moves nothing of a side still passes a buffer).
fn alloc(op: Op, r: u32, root: u32, p: usize, n: usize) -> Result<Bufs> {
    let (s, v) = op.lens(r, root, p, n);
    Ok(Bufs {
        send: DeviceMem::alloc((s * 4).max(4))?,
        recv: DeviceMem::alloc((v * 4).max(4))?,
        n,
    })
}

/// Writes round `i`'s input into `b` (and -1 into its output).
fn fill(op: Op, b: &Bufs, i: usize, r: u32, root: u32, p: usize) -> Result<()> {
    let (s, v) = op.lens(r, root, p, b.n);
    if s > 0 {
        b.send.copy_from_host(&op.input(i, r, root, s))?;
    }
    if v > 0 && op != Op::Broadcast {
        b.recv.copy_from_host(&vec![-1i32; v])?;
    }
    Ok(())
}

/// Checks rank `r`'s result of round `i`.
fn check(op: Op, b: &Bufs, i: usize, r: u32, root: u32, p: usize, what: &str) -> Result<()> {
    let Some(want) = op.expected(i, r, root, p, b.n) else {
        return Ok(());
    };
    let out = if op == Op::Broadcast {
        &b.send
    } else {
        &b.recv
    };
    let got: Vec<i32> = out.to_vec(want.len())?;
    if got != want {
        let k = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(HcclError::internal(format!(
            "rank {r} of {p}, root {root}, {op:?} of {} per rank, {what} {i}: element {k} is {} \
             but should be {}",
            b.n, got[k], want[k]
        )));
    }
    Ok(())
}

/// Every op at every size, repeated on the same buffers with new input
/// each round (a synchronize between rounds), `rounds` rounds.
pub fn same_buffers_new_data(c: &HcclComm, root: u32, rounds: usize) -> Result<()> {
    let (r, p) = (c.rank(), c.size() as usize);
    let s = c.create_stream();
    for op in OPS_ALL {
        for n in SIZES {
            let b = alloc(op, r, root, p, n)?;
            let repeated = c.communicator().repeated_ops();
            for i in 0..rounds {
                fill(op, &b, i, r, root, p)?;
                op.issue(c, &b, root, &s)?;
                s.synchronize()?;
                check(op, &b, i, r, root, p, "round")?;
            }
            // the small classes run on the AIV kernel, whose plan every
            // round after the first repeats; the large one has no plan
            let ran = c.communicator().repeated_ops() - repeated;
            let want = if n * 4 * p <= 16 * 1024 {
                rounds as u64 - 1
            } else {
                0
            };
            if n == SIZES[0] && ran != want {
                return Err(HcclError::internal(format!(
                    "rank {r} of {p}: {op:?} of {n} per rank took the repeat path {ran} times in \
                     {rounds} rounds, not {want}"
                )));
            }
        }
    }
    Ok(())
}

/// Each rooted op at every size: its sending ranks issue [`OPS`] repeats
/// at once (round 0's input, unchanged) and synchronize at the end; the
/// receiving ranks sleep `sleep` first, then check each of their
/// [`OPS`] repeats (output reset to -1 before each).
pub fn senders_ahead(c: &HcclComm, root: u32, sleep: Duration) -> Result<()> {
    let (r, p) = (c.rank(), c.size() as usize);
    let s = c.create_stream();
    for op in [Op::Broadcast, Op::Scatter, Op::Reduce, Op::Gather] {
        for n in SIZES {
            let b = alloc(op, r, root, p, n)?;
            fill(op, &b, 0, r, root, p)?;
            if op.only_sends(r, root) {
                for _ in 0..OPS {
                    op.issue(c, &b, root, &s)?;
                }
                s.synchronize()?;
                continue;
            }
            std::thread::sleep(sleep);
            for i in 0..OPS {
                fill(op, &b, 0, r, root, p)?;
                op.issue(c, &b, root, &s)?;
                s.synchronize()?;
                check(
                    op,
                    &b,
                    0,
                    r,
                    root,
                    p,
                    &format!("repeat (of {OPS}, senders ahead)"),
                )
                .map_err(|e| e.during(format!("repeat {i}")))?;
            }
        }
    }
    Ok(())
}

/// Two ops alternating, each on its own buffers with new input every
/// round, `rounds` rounds of each: each call repeats its op's last one.
pub fn interleaved(c: &HcclComm, root: u32, rounds: usize) -> Result<()> {
    let (r, p) = (c.rank(), c.size() as usize);
    let s = c.create_stream();
    for (x, y) in [
        (Op::AllReduce, Op::Broadcast),
        (Op::Reduce, Op::Scatter),
        (Op::Gather, Op::AllGather),
    ] {
        let n = SIZES[0];
        let (bx, by) = (alloc(x, r, root, p, n)?, alloc(y, r, root, p, n)?);
        for i in 0..rounds {
            fill(x, &bx, i, r, root, p)?;
            fill(y, &by, i + 1, r, root, p)?;
            x.issue(c, &bx, root, &s)?;
            y.issue(c, &by, root, &s)?;
            s.synchronize()?;
            check(x, &bx, i, r, root, p, "interleaved round")?;
            check(y, &by, i + 1, r, root, p, "interleaved round")?;
        }
    }
    Ok(())
}

/// The whole scenario: [`same_buffers_new_data`] (5 rounds),
/// [`senders_ahead`] and [`interleaved`] (20 rounds).
pub fn run(c: &HcclComm, root: u32, sleep: Duration) -> Result<()> {
    same_buffers_new_data(c, root, 5)?;
    senders_ahead(c, root, sleep)?;
    interleaved(c, root, 20)
}
