//! Recursive halving/doubling (RHD) templates (seed 002's RHD).
//!
//! RHD runs on the largest power of two m ≤ p ("the core"); rank r ≥ m is
//! paired with core rank r − m, which stands in for it (fold-in before, fold-
//! out after). The core's data is cut into m groups of bytes; recursive
//! halving leaves core rank r holding group r reduced over the core,
//! recursive doubling starts from that and leaves every core rank holding
//! every group. Broadcast and reduce are binomial trees over the core in
//! XOR space. Every rank only ever talks to its fold partner and to
//! r XOR 2^b, whatever the op's root, so the links an RHD executor requests
//! do not depend on the root (op-base tags do not carry it).

use crate::prim::{self, Rx, Tx};
use crate::template::layout::Groups;
use crate::topo::SubCommInfo;
use hccl_platform::{DataType, DeviceMem, MemKind, ReduceOp, Result, Stream};

/// Largest power of two ≤ p.
pub fn core_size(p: u32) -> u32 {
    1 << (31 - p.leading_zeros())
}

/// Peers rank `r` of `p` exchanges with.
pub fn partners(r: u32, p: u32) -> Vec<u32> {
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

/// One RHD allreduce among `comm`'s ranks of the bytes in `w` (this rank's
/// CCL input at `base`, the same place on every rank), with `landing` (the
/// CCL output at `base`, as long as `w`) taking the partner's halves:
/// fold-in, halving, doubling, fold-out, 2·log2(m) (+2) steps. The result
/// ends in `w`.
pub fn all_reduce(
    s: &Stream,
    comm: &SubCommInfo,
    (w, landing, base): (&DeviceMem, &DeviceMem, usize),
    how: (DataType, ReduceOp),
) -> Result<()> {
    let at = ((MemKind::CclInput, base), (MemKind::CclOutput, base));
    all_reduce_in(s, comm, (w, landing), at, how)
}

/// [`all_reduce`] with `w` and `landing` wherever peers address them
/// (`w_at`, `landing_at`: buffer and offset of their first byte): in
/// graph mode `w` is the user output (`ParamOutput`) and the landing the
/// CCL output.
pub fn all_reduce_in(
    s: &Stream,
    comm: &SubCommInfo,
    (w, landing): (&DeviceMem, &DeviceMem),
    ((w_kind, w_base), (landing_kind, landing_base)): ((MemKind, usize), (MemKind, usize)),
    how: (DataType, ReduceOp),
) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    if p <= 1 {
        return Ok(());
    }
    let m = core_size(p);
    let log = m.trailing_zeros();
    let n = w.len();
    // fold-in
    s.set_step(0);
    if r >= m {
        let l = comm.link(r - m)?;
        prim::send(s, Tx::new(l, w, landing_kind, landing_base))?;
        // wait for the result to be written back into W
        s.set_step(1 + 2 * log);
        return prim::recv(s, Rx::new(l));
    }
    if r + m < p {
        let into = (w, &landing.range(0, n)?);
        prim::recv_reduce(s, Rx::new(comm.link(r + m)?), into, how)?;
    }
    let groups = Groups::split(n, m as usize);
    let landing_at = (landing_kind, landing_base);
    halving(s, comm, m, &groups, w, landing, landing_at, how, 1)?;
    doubling(s, comm, m, &groups, w, (w_kind, w_base), 1 + log)?;
    // fold-out
    s.set_step(1 + 2 * log);
    if r + m < p {
        prim::send(s, Tx::new(comm.link(r + m)?, w, w_kind, w_base))?;
    }
    Ok(())
}

/// Recursive halving among the m core ranks, on steps `first..first + log2 m`:
/// at distance k = m/2, m/4, …, 1 core rank r keeps the half of its groups
/// whose index bit k matches its own, sends the other half into the
/// partner's `landing` (addressed by the peer as `landing_kind` at `base`
/// plus the same offsets as in `w`) and reduces the partner's half into
/// `w`. Afterwards group r of `w` is reduced over the core.
#[allow(clippy::too_many_arguments)]
pub fn halving(
    s: &Stream,
    comm: &SubCommInfo,
    m: u32,
    groups: &Groups,
    w: &DeviceMem,
    landing: &DeviceMem,
    (landing_kind, base): (MemKind, usize),
    how: (DataType, ReduceOp),
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
        prim::send_recv_reduce(
            s,
            Tx::new(l, &w.range(go, gl)?, landing_kind, base + go),
            Rx::new(l),
            (&w.range(ko, kl)?, &landing.range(ko, kl)?),
            how,
        )?;
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
pub fn doubling(
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
        let held = w.range(o, l)?;
        prim::send_recv(s, Tx::new(link, &held, kind, base + o), Rx::new(link))?;
        let size = hi - lo;
        lo = (lo / (2 * size)) * 2 * size;
        hi = lo + 2 * size;
        k *= 2;
        at += 1;
    }
    Ok(())
}

/// Binomial-tree broadcast over the core in XOR space from `root`, of
/// `w` (this rank's CCL input at offset 0; the root's holds the data):
/// a root outside the core first hands the data to its core rank, core
/// ranks hand it on to their fold partners last, log2 m (+1, +1) steps.
pub fn broadcast(s: &Stream, comm: &SubCommInfo, w: &DeviceMem, root: u32) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    let m = core_size(p);
    // the root's stand-in in the core
    let (core_root, outside) = (root % m, root >= m);
    let to = |q: u32| comm.link(q).map(|l| Tx::new(l, w, MemKind::CclInput, 0));
    // fold-in: a root outside the core hands the data in
    s.set_step(0);
    if outside && r == root {
        prim::send(s, to(r - m)?)?;
    } else if outside && r == core_root {
        prim::recv(s, Rx::new(comm.link(r + m)?))?;
    }
    let first = outside as u32;
    if r < m {
        let v = r ^ core_root;
        let (mut k, mut at) = (m / 2, first);
        while k >= 1 {
            s.set_step(at);
            if v & (2 * k - 1) == 0 {
                prim::send(s, to(r ^ k)?)?;
            } else if v & (2 * k - 1) == k {
                prim::recv(s, Rx::new(comm.link(r ^ k)?))?;
            }
            k /= 2;
            at += 1;
        }
    }
    // fold-out to every rank outside the core but the root
    s.set_step(first + m.trailing_zeros());
    if r < m && r + m < p && r + m != root {
        prim::send(s, to(r + m)?)?;
    } else if r >= m && r != root {
        prim::recv(s, Rx::new(comm.link(r - m)?))?;
    }
    Ok(())
}

/// The broadcast tree backwards: reduce of `w` (this rank's CCL input at
/// offset 0) towards `root`, partials landing in `landing` (the CCL
/// output at offset 0, as long as `w`): a fold-in, distance doubling
/// towards the root's core rank, and for a root outside the core a
/// fold-out to it. The result ends at the root, in `w`, or in `landing`
/// when the root is outside the core.
pub fn reduce(
    s: &Stream,
    comm: &SubCommInfo,
    (w, landing): (&DeviceMem, &DeviceMem),
    root: u32,
    how: (DataType, ReduceOp),
) -> Result<()> {
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    let m = core_size(p);
    let (core_root, outside) = (root % m, root >= m);
    let to = |q: u32| comm.link(q).map(|l| Tx::new(l, w, MemKind::CclOutput, 0));
    // fold-in: ranks outside the core hand their data in
    s.set_step(0);
    if r >= m {
        prim::send(s, to(r - m)?)?;
    } else if r + m < p {
        prim::recv_reduce(s, Rx::new(comm.link(r + m)?), (w, landing), how)?;
    }
    let first = (p > m) as u32;
    if r < m {
        let v = r ^ core_root;
        let (mut k, mut at) = (1u32, first);
        while k < m {
            s.set_step(at);
            if v & (2 * k - 1) == k {
                prim::send(s, to(r ^ k)?)?;
            } else if v & (2 * k - 1) == 0 {
                prim::recv_reduce(s, Rx::new(comm.link(r ^ k)?), (w, landing), how)?;
            }
            k *= 2;
            at += 1;
        }
    }
    // fold-out to a root outside the core
    s.set_step(first + m.trailing_zeros());
    if outside && r == core_root {
        prim::send(s, to(root)?)?;
    } else if outside && r == root {
        prim::recv(s, Rx::new(comm.link(core_root)?))?;
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
}
