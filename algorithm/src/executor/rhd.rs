//! Building blocks of the recursive halving/doubling (RHD) executors.
//!
//! RHD runs on the largest power of two m ≤ p ("the core"); rank r ≥ m is
//! paired with core rank r − m, which stands in for it (fold-in before, fold-
//! out after). The core's data is cut into m groups of bytes; recursive
//! halving leaves core rank r holding group r reduced over the core,
//! recursive doubling starts from that and leaves every core rank holding
//! every group. Every rank only ever talks to its fold partner and to
//! r XOR 2^b, whatever the op's root, so the links an RHD executor requests
//! do not depend on the root (op-base tags do not carry it).

use super::transfer::step;
use crate::template::Slice;
use crate::topo::SubCommInfo;
use hccl_platform::{DataType, DeviceMem, MemKind, ReduceOp, Result, Stream};

/// Largest power of two ≤ p.
pub(super) fn core_size(p: u32) -> u32 {
    1 << (31 - p.leading_zeros())
}

/// Peers rank `r` of `p` exchanges with.
pub(super) fn partners(r: u32, p: u32) -> Vec<u32> {
    let m = core_size(p);
    if r >= m {
        return vec![r - m];
    }
    let mut v: Vec<u32> = (0..m.trailing_zeros()).map(|b| r ^ (1 << b)).collect();
    if r + m < p {
        v.push(r + m);
    }
    v
}

/// The m groups of a core buffer: group g is bytes `[b[g], b[g + 1])`.
#[derive(Clone, Debug)]
pub(super) struct Groups(Vec<usize>);

impl Groups {
    /// Groups from consecutive slices.
    pub(super) fn from_slices(slices: &[Slice]) -> Self {
        Self::from_sizes(slices.iter().map(|s| s.len))
    }

    /// Consecutive groups of the given sizes.
    pub(super) fn from_sizes(sizes: impl IntoIterator<Item = usize>) -> Self {
        let mut b = vec![0];
        for len in sizes {
            b.push(b[b.len() - 1] + len);
        }
        Groups(b)
    }

    /// Offset and length of groups `lo..hi`.
    pub(super) fn range(&self, lo: u32, hi: u32) -> (usize, usize) {
        let (a, b) = (self.0[lo as usize], self.0[hi as usize]);
        (a, b - a)
    }

    /// Offset of group `g`.
    pub(super) fn start(&self, g: u32) -> usize {
        self.0[g as usize]
    }
}

/// Reduces `src` into `dst` unless there is nothing to reduce.
pub(super) fn reduce(
    s: &Stream,
    dst: &DeviceMem,
    src: &DeviceMem,
    dtype: DataType,
    op: ReduceOp,
) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    s.reduce_async(dst, src, dtype, op)
}

/// Recursive halving among the m core ranks, on steps `first..first + log2 m`:
/// at distance k = m/2, m/4, …, 1 core rank r keeps the half of its groups
/// whose index bit k matches its own, sends the other half into the
/// partner's `landing` (addressed by the peer as `landing_kind` at `base`
/// plus the same offsets as in `w`) and reduces the partner's half into
/// `w`. Afterwards group r of `w` is reduced over the core.
#[allow(clippy::too_many_arguments)]
pub(super) fn halving(
    s: &Stream,
    comm: &SubCommInfo,
    m: u32,
    groups: &Groups,
    w: &DeviceMem,
    landing: &DeviceMem,
    (landing_kind, base): (MemKind, usize),
    (dtype, op): (DataType, ReduceOp),
    first: u32,
) -> Result<()> {
    let r = comm.local_rank;
    let (mut lo, mut hi) = (0u32, m);
    let (mut k, mut at) = (m / 2, first);
    while k >= 1 {
        s.set_step(at);
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if r & k == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let (go, gl) = groups.range(give.0, give.1);
        let (ko, kl) = groups.range(keep.0, keep.1);
        let l = comm.link(r ^ k)?;
        step(
            s,
            Some(l),
            Some((l, &w.range(go, gl)?, landing_kind, base + go)),
        )?;
        reduce(s, &w.range(ko, kl)?, &landing.range(ko, kl)?, dtype, op)?;
        (lo, hi) = keep;
        k /= 2;
        at += 1;
    }
    Ok(())
}

/// Recursive doubling among the m core ranks, on steps `first..first + log2 m`:
/// core rank r starts holding group r of `w` and at distance k = 1, 2, …,
/// m/2 writes the groups it holds into the partner's copy of `w`
/// (addressed by the peer as `kind` at `base` plus the same offsets).
/// Afterwards every core rank holds every group.
pub(super) fn doubling(
    s: &Stream,
    comm: &SubCommInfo,
    m: u32,
    groups: &Groups,
    w: &DeviceMem,
    (kind, base): (MemKind, usize),
    first: u32,
) -> Result<()> {
    let r = comm.local_rank;
    let (mut lo, mut hi) = (r, r + 1);
    let (mut k, mut at) = (1u32, first);
    while k < m {
        s.set_step(at);
        let (o, l) = groups.range(lo, hi);
        let link = comm.link(r ^ k)?;
        step(s, Some(link), Some((link, &w.range(o, l)?, kind, base + o)))?;
        let size = hi - lo;
        lo = (lo / (2 * size)) * 2 * size;
        hi = lo + 2 * size;
        k *= 2;
        at += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_symmetric() {
        for p in 1..=40u32 {
            for r in 0..p {
                for q in partners(r, p) {
                    assert!(q < p, "p={p} r={r} q={q}");
                    assert!(partners(q, p).contains(&r), "p={p}: {r}->{q} not mirrored");
                }
            }
        }
        assert_eq!(core_size(33), 32);
    }

    #[test]
    fn groups_cover_their_sizes() {
        let g = Groups::from_sizes([3, 0, 5]);
        assert_eq!(g.range(0, 3), (0, 8));
        assert_eq!(g.range(1, 2), (3, 0));
        assert_eq!(g.start(2), 3);
    }
}
