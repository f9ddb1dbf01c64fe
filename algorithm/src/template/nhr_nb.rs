//! NHR and NB templates (seed 002 §3.7, §3.8): a reduce-scatter in
//! ⌈log2 p⌉ steps for any rank count p, its mirror allgather, the
//! allreduce made of both, and the scatter that follows the
//! reduce-scatter's trees backwards from a root.
//!
//! The data is cut into p blocks, block b ending at rank b. Every step k is
//! a ring at distance δ: rank x sends to x + δ and receives from x − δ
//! (mod p), so a rank talks to at most 2⌈log2 p⌉ peers whatever the root.
//! What a rank sends at a step is decided by each block's offset from the
//! sender, d = (b − x) mod p:
//!
//! - **NHR** (nonuniform hierarchical ring) halves the distance,
//!   δ = 2^(K−1), …, 2, 1, and sends the window of offsets [δ, δ + c) with
//!   c = min(δ, p − δ): afterwards the rank keeps offsets [0, δ). Windows
//!   are contiguous (at most one wrap), the slicing is nonuniform when p is
//!   not a power of two (p = 5: 1, 2, 1 blocks), and every block's path
//!   from rank x is the binary expansion of d: a spanning tree per block.
//! - **NB** (nonuniform Bruck) doubles the distance, δ = 2^k, and sends the
//!   offsets whose lowest set bit is k: ⌊(p − 1 + 2^k) / 2^(k+1)⌋ blocks
//!   at step k (the seed's volume rule; they sum to p − 1 for any p),
//!   strided in memory.
//!
//! Either way each rank sends p − 1 blocks in total, the optimum. The
//! allgather runs the reduce-scatter's steps backwards with every transfer
//! reversed (the transpose of a valid reduce-scatter is a valid allgather),
//! so it sends exactly what the reduce-scatter received.

use crate::prim::{self, Piece, Rx, Tx};
use crate::template::layout::Groups;
use crate::topo::SubCommInfo;
use hccl_platform::{DataType, DeviceMem, MemKind, ReduceOp, Result, Stream};

/// Which nonuniform algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Distance halving, contiguous windows.
    Nhr,
    /// Distance doubling, blocks by lowest set bit of their offset.
    Nb,
}

/// ⌈log2 p⌉: the number of steps of one reduce-scatter or allgather.
pub fn steps(p: u32) -> u32 {
    if p <= 1 {
        0
    } else {
        32 - (p - 1).leading_zeros()
    }
}

/// Every peer rank `r` of `p` talks to: x ± 2^k for k < ⌈log2 p⌉.
pub fn peers(r: u32, p: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..steps(p))
        .flat_map(|k| {
            let d = (1u32 << k) % p;
            [(r + d) % p, (r + p - d) % p]
        })
        .filter(|&q| q != r)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl Family {
    /// The ring distance of reduce-scatter step `k` (of `steps(p)`).
    pub fn delta(self, k: u32, p: u32) -> u32 {
        match self {
            Family::Nhr => 1 << (steps(p) - 1 - k),
            Family::Nb => 1 << k,
        }
    }

    /// Whether, at reduce-scatter step `k`, a rank sends its partial of the
    /// block at offset `d` (from itself) on to the rank δ ahead.
    pub fn sends(self, k: u32, p: u32, d: u32) -> bool {
        let delta = self.delta(k, p);
        match self {
            Family::Nhr => d >= delta && d < delta + delta.min(p - delta),
            Family::Nb => d != 0 && d.trailing_zeros() == k,
        }
    }

    /// Blocks rank `x` sends (to x + δ) and receives (from x − δ) at
    /// reduce-scatter step `k`, as ascending, disjoint ranges of block
    /// indices.
    fn blocks(self, k: u32, p: u32, x: u32) -> (Blocks, Blocks) {
        let delta = self.delta(k, p);
        let from = (x + p - delta) % p;
        // the blocks at the offsets `sends` picks, enumerated directly
        // rather than by testing all p offsets, and as ranges: an NHR
        // window is at most two ranges, where a list of its blocks cost
        // O(p) per step (a 65,536-rank plan calls this p⌈log2 p⌉ times)
        let pick = |who: u32| -> Blocks {
            let v: Blocks = match self {
                // one window of c blocks from lo, unwrapped: the wrapped
                // part [0, lo + c − p) comes first
                Family::Nhr => {
                    let c = delta.min(p - delta);
                    let lo = (who + delta) % p;
                    if lo + c <= p {
                        std::iter::once(lo..lo + c).collect()
                    } else {
                        vec![0..lo + c - p, lo..p]
                    }
                }
                // offsets d = (2j + 1)·2^k; the blocks who + d that wrap
                // (d ≥ p − who) are below who, so listing them first keeps
                // the blocks ascending without a sort
                Family::Nb => {
                    let offs = (0..)
                        .map(|j: u64| (2 * j + 1) << k)
                        .take_while(|&d| d < p as u64);
                    let (who, p) = (who as u64, p as u64);
                    let wrapped = offs.clone().filter(|&d| who + d >= p).map(|d| who + d - p);
                    let straight = offs.filter(|&d| who + d < p).map(|d| who + d);
                    wrapped
                        .chain(straight)
                        .map(|b| b as u32..b as u32 + 1)
                        .collect()
                }
            };
            debug_assert!(v.windows(2).all(|w| w[0].end <= w[1].start));
            debug_assert!(v.iter().flat_map(Clone::clone).all(|b| self.sends(
                k,
                p,
                (b + p - who) % p
            )));
            v
        };
        (pick(x), pick(from))
    }

    /// The blocks rank `x` sends and receives at reduce-scatter step `k`
    /// when a scatter from `root` follows the reduce-scatter trees
    /// backwards: block b travels from the root along the path the
    /// reduce-scatter takes from the root to b, so it moves once per hop
    /// and the root sends each other block once.
    ///
    /// Block b's path depends only on its offset D = b − root (mod p):
    /// NHR strips D's bits from the top (at step k the holder is D with
    /// its bits below 2δ cleared, and moves when bit δ is set), NB from
    /// the bottom (the holder is D mod δ, and moves when bit δ is set). So
    /// the rank at offset e from the root holds, at step k, the offsets
    /// whose prefix is e: NHR one range of them, NB one stride. Computed
    /// from e, a rank's blocks cost O(its blocks) per step, where walking
    /// every block's path was O(p log p) per rank.
    fn scatter_step(self, k: u32, p: u32, root: u32, x: u32) -> (Blocks, Blocks) {
        let delta = self.delta(k, p);
        let e = (x + p - root) % p;
        // offsets sent (by the holder at offset e) and received (by the
        // rank at offset e, from the holder at e − δ): at most one
        // sequence of D each, (first, end, stride)
        type Seq = Option<(u32, u32, u32)>;
        let span = 2 * delta;
        let (send, recv): (Seq, Seq) = match self {
            // one range each
            Family::Nhr => (
                (e % span == 0 && e + delta < p).then(|| (e + delta, (e + span).min(p), 1)),
                (e % span == delta).then(|| (e, (e + delta).min(p), 1)),
            ),
            // one stride each
            Family::Nb => (
                (e < delta && e + delta < p).then_some((e + delta, p, span)),
                (delta..span).contains(&e).then_some((e, p, span)),
            ),
        };
        let blocks = |seq: Seq| -> Blocks {
            let Some((lo, hi, stride)) = seq else {
                return Blocks::new();
            };
            // block b = root + D (mod p); those that wrap (D ≥ cut) are
            // the lower blocks, so they come first
            let cut = p - root;
            let mut out = Blocks::new();
            for wrapped in [true, false] {
                let (a, z) = if wrapped {
                    (lo.max(cut), hi)
                } else {
                    (lo, hi.min(cut))
                };
                if a >= z {
                    continue;
                }
                // first D ≥ a on the stride from lo
                let a = lo + (a - lo).div_ceil(stride) * stride;
                let b = |d: u32| if wrapped { d - cut } else { d + root };
                if stride == 1 {
                    out.push(b(a)..b(z - 1) + 1);
                } else {
                    out.extend((a..z).step_by(stride as usize).map(|d| b(d)..b(d) + 1));
                }
            }
            out
        };
        (blocks(send), blocks(recv))
    }
}

/// Ascending, disjoint ranges of block indices.
type Blocks = Vec<std::ops::Range<u32>>;

/// Byte ranges of `blocks` (ascending, disjoint) in the layout `groups`:
/// adjacent block ranges merge into one byte range, empty ranges are
/// dropped (the peer computes the same blocks, so both sides agree on the
/// count).
fn ranges(groups: &Groups, blocks: &[std::ops::Range<u32>]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut run: Option<std::ops::Range<u32>> = None;
    let mut flush = |r: std::ops::Range<u32>| {
        let (off, len) = groups.range(r.start, r.end);
        if len > 0 {
            out.push((off, len));
        }
    };
    for b in blocks.iter().filter(|b| !b.is_empty()) {
        run = match run {
            Some(r) if r.end == b.start => Some(r.start..b.end),
            Some(r) => {
                flush(r);
                Some(b.clone())
            }
            None => Some(b.clone()),
        };
    }
    if let Some(r) = run {
        flush(r);
    }
    out
}

/// Blocks one at a time, as [`Blocks`] (the tests' reference lists).
#[cfg(test)]
fn singles(blocks: Vec<u32>) -> Blocks {
    blocks.into_iter().map(|b| b..b + 1).collect()
}

/// One step of a plan: the ring distance, whether data flows to x + δ
/// (reduce-scatter, scatter) or to x − δ (allgather), the blocks sent and
/// the blocks received.
type PlanStep = (u32, bool, Blocks, Blocks);

/// Where peers write: their `kind` buffer at `base` plus the offset the
/// data has in `w` (every rank keeps `w` at the same place).
pub type At = (MemKind, usize);

/// Enqueues `plan` on steps `first..`: each step sends its blocks of `w`
/// into the peer's buffer at `at` (same offsets) and receives its blocks
/// from the other side; `after` gets the byte ranges (in `w`) that arrived.
#[allow(clippy::too_many_arguments)]
fn run_plan(
    s: &Stream,
    comm: &SubCommInfo,
    groups: &Groups,
    w: &DeviceMem,
    (kind, base): At,
    first: u32,
    plan: impl Iterator<Item = PlanStep>,
    mut after: impl FnMut(&[(usize, usize)]) -> Result<()>,
) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    for (i, (delta, forward, send, recv)) in plan.enumerate() {
        s.set_step(first + i as u32);
        let (ahead, behind) = ((r + delta) % p, (r + p - delta) % p);
        let (to, from) = if forward {
            (ahead, behind)
        } else {
            (behind, ahead)
        };
        let recv = ranges(groups, &recv);
        let pieces = ranges(groups, &send)
            .into_iter()
            .map(|(off, len)| Ok((w.range(off, len)?, kind, base + off)))
            .collect::<Result<Vec<Piece>>>()?;
        let from = if recv.is_empty() {
            None
        } else {
            Some(Rx::transfers(comm.link(from)?, recv.len()))
        };
        let to = if pieces.is_empty() {
            None
        } else {
            Some(Tx::pieces(comm.link(to)?, &pieces))
        };
        prim::step(s, from, to)?;
        after(&recv)?;
    }
    Ok(())
}

/// The reduce-scatter over the blocks `groups` of `w`, on steps
/// `first..first + ⌈log2 p⌉`: partials land in the receiver's `landing`
/// (same offsets as `w`; addressed by the peer at `landing_at`) and are
/// reduced into `w`. Afterwards block r of `w` is reduced over all ranks.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter(
    s: &Stream,
    comm: &SubCommInfo,
    fam: Family,
    groups: &Groups,
    w: &DeviceMem,
    (landing, landing_at): (&DeviceMem, At),
    how: (DataType, ReduceOp),
    first: u32,
) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    let plan = (0..steps(p)).map(|k| {
        let (send, recv) = fam.blocks(k, p, r);
        (fam.delta(k, p), true, send, recv)
    });
    run_plan(s, comm, groups, w, landing_at, first, plan, |got| {
        for &(off, len) in got {
            prim::reduce(s, &w.range(off, len)?, &landing.range(off, len)?, how)?;
        }
        Ok(())
    })
}

/// The allgather over the blocks `groups` of `w` (addressed by peers at
/// `at`), on steps `first..first + ⌈log2 p⌉`: rank r starts holding
/// block r and ends holding every block.
pub fn all_gather(
    s: &Stream,
    comm: &SubCommInfo,
    fam: Family,
    groups: &Groups,
    w: &DeviceMem,
    at: At,
    first: u32,
) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    // the reduce-scatter backwards: send what it received, receive what it sent
    let plan = (0..steps(p)).rev().map(|k| {
        let (rs_send, rs_recv) = fam.blocks(k, p, r);
        (fam.delta(k, p), false, rs_recv, rs_send)
    });
    run_plan(s, comm, groups, w, at, first, plan, |_| Ok(()))
}

/// The allreduce of the bytes in `w` (this rank's CCL input at `base`,
/// the same place on every rank) cut into p slices: reduce-scatter with
/// partials landing in `landing` (the CCL output at `base`, as long as
/// `w`), then allgather, 2⌈log2 p⌉ steps. The result ends in `w`. The
/// flat AllReduce and the hierarchical executors' level 1 both run this.
pub fn all_reduce(
    s: &Stream,
    comm: &SubCommInfo,
    fam: Family,
    (w, landing, base): (&DeviceMem, &DeviceMem, usize),
    how: (DataType, ReduceOp),
) -> Result<()> {
    let at = ((MemKind::CclInput, base), (MemKind::CclOutput, base));
    all_reduce_in(s, comm, fam, (w, landing), at, how)
}

/// [`all_reduce`] with `w` and `landing` wherever peers address them
/// (`w_at`, `landing_at`): in graph mode `w` is the user output
/// (`ParamOutput`) and the landing the CCL output.
pub fn all_reduce_in(
    s: &Stream,
    comm: &SubCommInfo,
    fam: Family,
    (w, landing): (&DeviceMem, &DeviceMem),
    (w_at, landing_at): (At, At),
    how: (DataType, ReduceOp),
) -> Result<()> {
    let p = comm.local_rank_size;
    let groups = Groups::split(w.len(), p as usize);
    reduce_scatter(s, comm, fam, &groups, w, (landing, landing_at), how, 0)?;
    all_gather(s, comm, fam, &groups, w, w_at, steps(p))
}

/// The scatter from `root` over the blocks `groups` of `w` (addressed by
/// peers at `at`), on steps `first..first + ⌈log2 p⌉`: the root starts
/// holding every block, rank r ends holding (at least) block r.
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    s: &Stream,
    comm: &SubCommInfo,
    fam: Family,
    groups: &Groups,
    w: &DeviceMem,
    at: At,
    root: u32,
    first: u32,
) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    let plan = (0..steps(p)).map(|k| {
        let (send, recv) = fam.scatter_step(k, p, root, r);
        (fam.delta(k, p), true, send, recv)
    });
    run_plan(s, comm, groups, w, at, first, plan, |_| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block offset 1..p is sent exactly once along each block's
    /// path, so each rank sends p − 1 blocks in total; NB follows the
    /// seed's per-step volume rule.
    #[test]
    fn volumes_and_paths() {
        for p in 2..=70u32 {
            for fam in [Family::Nhr, Family::Nb] {
                let n = steps(p);
                let mut total = 0;
                for k in 0..n {
                    let (send, recv) = fam.blocks(k, p, 0);
                    let count = |b: &Blocks| b.iter().map(|r| r.len() as u32).sum::<u32>();
                    assert_eq!(count(&send), count(&recv), "{fam:?} p={p} k={k}");
                    assert!(count(&send) > 0, "{fam:?} p={p} k={k}: an idle step");
                    if fam == Family::Nb {
                        let want = (p - 1 + (1 << k)) / (1 << (k + 1));
                        assert_eq!(count(&send), want, "NB p={p} k={k}");
                    }
                    total += count(&send);
                }
                assert_eq!(total, p - 1, "{fam:?} p={p}");
                // the path of every offset from 0 reaches it
                for d in 1..p {
                    let mut at = 0u32;
                    for k in 0..n {
                        if fam.sends(k, p, (d + p - at) % p) {
                            at = (at + fam.delta(k, p)) % p;
                        }
                    }
                    assert_eq!(at, d, "{fam:?} p={p}: offset {d} never arrives");
                }
            }
        }
    }

    #[test]
    fn peers_are_symmetric_and_few() {
        for p in 1..=40u32 {
            for r in 0..p {
                let v = peers(r, p);
                assert!(v.len() as u32 <= 2 * steps(p));
                for q in v {
                    assert!(peers(q, p).contains(&r), "p={p}: {r}->{q} not mirrored");
                }
            }
        }
        assert_eq!(steps(1), 0);
        assert_eq!(steps(5), 3);
        assert_eq!(steps(8), 3);
        assert_eq!(steps(1000), 10);
    }

    #[test]
    fn ranges_merge_runs_and_drop_empties() {
        let g = Groups::from_sizes([4, 4, 0, 4]);
        assert_eq!(ranges(&g, &singles(vec![0, 1, 3])), vec![(0, 8), (8, 4)]);
        assert_eq!(ranges(&g, &[0..2, 3..4]), vec![(0, 8), (8, 4)]);
        assert_eq!(ranges(&g, &[0..1, 1..2, 2..2, 3..4]), vec![(0, 8), (8, 4)]);
        assert_eq!(ranges(&g, &singles(vec![2])), vec![]);
        assert_eq!(ranges(&g, &[]), vec![]);
    }

    /// The scatter's blocks per step are those of walking every block's
    /// path from the root (the definition), for every p ≤ 40, root, rank
    /// and step.
    #[test]
    fn scatter_steps_are_the_walked_paths() {
        for p in 2..=40u32 {
            for fam in [Family::Nhr, Family::Nb] {
                let n = steps(p);
                for root in 0..p {
                    for x in 0..p {
                        let mut want = vec![(Vec::new(), Vec::new()); n as usize];
                        for b in 0..p {
                            let mut holder = root;
                            for k in 0..n {
                                if fam.sends(k, p, (b + p - holder) % p) {
                                    let next = (holder + fam.delta(k, p)) % p;
                                    if holder == x {
                                        want[k as usize].0.push(b);
                                    }
                                    if next == x {
                                        want[k as usize].1.push(b);
                                    }
                                    holder = next;
                                }
                            }
                        }
                        for k in 0..n {
                            let (send, recv) = fam.scatter_step(k, p, root, x);
                            let (ws, wr) = &want[k as usize];
                            let g = Groups::split(p as usize * 256 - 300, p as usize);
                            let at = format!("{fam:?} p={p} root={root} x={x} k={k}");
                            let flat =
                                |b: &Blocks| b.iter().flat_map(Clone::clone).collect::<Vec<_>>();
                            assert_eq!(flat(&send), *ws, "send {at}");
                            assert_eq!(flat(&recv), *wr, "recv {at}");
                            assert_eq!(ranges(&g, &send), ranges(&g, &singles(ws.clone())), "{at}");
                        }
                    }
                }
            }
        }
    }

    /// The block ranges of every step are exactly the blocks `sends`
    /// picks (the definition), ascending: what each rank sends and
    /// receives, hence every transfer, is what testing all p offsets gave.
    #[test]
    fn block_ranges_are_the_blocks_sends_picks() {
        for p in 2..=70u32 {
            for fam in [Family::Nhr, Family::Nb] {
                for k in 0..steps(p) {
                    let delta = fam.delta(k, p);
                    let want = |who: u32| -> Vec<u32> {
                        (0..p)
                            .filter(|&b| fam.sends(k, p, (b + p - who) % p))
                            .collect()
                    };
                    for x in 0..p {
                        let (send, recv) = fam.blocks(k, p, x);
                        let flat = |b: &Blocks| b.iter().flat_map(Clone::clone).collect::<Vec<_>>();
                        assert_eq!(flat(&send), want(x), "{fam:?} p={p} k={k} x={x}");
                        assert_eq!(
                            flat(&recv),
                            want((x + p - delta) % p),
                            "{fam:?} p={p} k={k} x={x}"
                        );
                        // and the byte ranges are those of the block lists
                        let g = Groups::split(p as usize * 256 - 300, p as usize);
                        assert_eq!(ranges(&g, &send), ranges(&g, &singles(want(x))));
                    }
                }
            }
        }
    }
}
