//! Mesh executors: every rank writes straight into each peer's CCL output
//! buffer, one slot per sender, in as many rounds as the CCL buffer needs.
//!
//! One step per round, (p−1) transfers per rank; the right choice for small
//! and medium messages and for ops whose data has one source per block
//! (broadcast, scatter, gather, alltoall). Sends go directly from the user
//! input (no staging copy); receivers copy (or reduce) their slots into the
//! user output. Reductions run in rank order 0..p on every rank, so every
//! rank computes bit-identical results.
//!
//! Each op is registered under its own name (`AllGatherMeshExecutor`, ...);
//! one engine runs them all from the per-op table of
//! [`crate::template::mesh`]. The Star (rooted ops) and PairWise (alltoall,
//! one peer per step) executors are this engine too, so they live here.

use super::flat::{mesh_peers, mesh_variant, FlatExecutor, Named};
use crate::op::{OpParam, OpType};
use crate::prim::{self, Rx, Tx};
use crate::resource::AlgResourceResponse;
use crate::template::layout::{PIPELINE_CHUNK_BYTES, SLICE_ALIGN};
use crate::template::mesh::{window, Block, MeshPlan};
use crate::topo::{CommPlane, TopoInfo};
use hccl_platform::{HcclError, MemKind, Result};

// The registry builds from its own table; its tests and the simulator's
// check against this one, and nothing else needs it.
/// The mesh executors: (registered name, op).
#[cfg(test)]
pub(crate) const MESH_EXECUTORS: &[(&str, OpType)] = &[
    ("AllReduceMeshExecutor", OpType::AllReduce),
    ("AllGatherMeshExecutor", OpType::AllGather),
    ("AllGatherVMeshExecutor", OpType::AllGatherV),
    ("ReduceScatterMeshExecutor", OpType::ReduceScatter),
    ("ReduceScatterVMeshExecutor", OpType::ReduceScatterV),
    ("BroadcastMeshExecutor", OpType::Broadcast),
    ("ReduceMeshExecutor", OpType::Reduce),
    ("ScatterMeshExecutor", OpType::Scatter),
    ("GatherMeshExecutor", OpType::Gather),
    ("AllToAllMeshExecutor", OpType::AllToAll),
    ("AllToAllVMeshExecutor", OpType::AllToAllV),
    ("SendExecutor", OpType::Send),
    ("ReceiveExecutor", OpType::Receive),
];

/// The PairWise executors: (registered name, op).
#[cfg(test)]
pub(crate) const PAIRWISE_EXECUTORS: &[(&str, OpType)] = &[
    ("AllToAllPairWiseExecutor", OpType::AllToAll),
    ("AllToAllVPairWiseExecutor", OpType::AllToAllV),
];

/// The Star executors: (registered name, op). The root writes to (or is
/// written by) every rank directly in one step: the mesh plan of a rooted
/// op, with one difference where only the root writes to a rank
/// (Broadcast, Scatter): the receiver's whole CCL output is that one
/// sender's slot, so large messages take p times fewer op-base rounds than
/// with the mesh's slot per sender. Links are requested to every peer, as
/// for mesh: op-base tags do not carry the root, so resources cached for
/// one root must serve any other.
#[cfg(test)]
pub(crate) const STAR_EXECUTORS: &[(&str, OpType)] = &[
    ("BroadcastStarExecutor", OpType::Broadcast),
    ("ReduceStarExecutor", OpType::Reduce),
    ("ScatterStarExecutor", OpType::Scatter),
    ("GatherStarExecutor", OpType::Gather),
];

/// A mesh executor for one op.
#[derive(Debug)]
pub(crate) struct MeshExecutor {
    named: Named,
    pairwise: bool,
    star: bool,
}

impl MeshExecutor {
    /// The executor registered as `name` for `op`.
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        MeshExecutor {
            named: Named::new(name, op, topo),
            pairwise: false,
            star: false,
        }
    }

    /// The Star variant (rooted ops): see `STAR_EXECUTORS`.
    pub(crate) fn star(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        MeshExecutor {
            star: true,
            ..Self::new(name, op, topo)
        }
    }

    /// The PairWise variant (alltoall family): one peer per step.
    pub(crate) fn pairwise(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        MeshExecutor {
            pairwise: true,
            ..Self::new(name, op, topo)
        }
    }
}

impl FlatExecutor for MeshExecutor {
    fn named(&self) -> &Named {
        &self.named
    }

    fn peers(&self, r: u32, n: u32, param: &OpParam) -> Vec<u32> {
        mesh_peers(self.named.op, r, n, param)
    }

    fn variant(&self, param: &OpParam) -> Option<u32> {
        mesh_variant(self.named.op, param)
    }

    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me, op) = (
            self.named.topo.user_rank_size,
            self.named.topo.user_rank,
            self.named.op,
        );
        let u = param.dtype.size() as u64;
        let plan = MeshPlan::of(param, p, me)?;
        let longest = plan.longest();
        if longest == 0 {
            return Ok(());
        }
        let bytes = |b: Block| ((b.off * u) as usize, (b.len * u) as usize);
        let input = |b: Block| {
            let (o, l) = bytes(b);
            param.input.range(o, l)
        };
        let output = |b: Block| {
            let (o, l) = bytes(b);
            param.output.range(o, l)
        };
        // Non-reducing ops place their own block once, up front.
        if let (Some((src, dst)), false) = (plan.own, plan.reduce) {
            if src.len > 0 {
                let (src, dst) = (input(src)?, output(dst)?);
                if !src.same_range(&dst) {
                    s.memcpy_async(&dst, &src)?;
                }
            }
        }
        if p == 1 && !plan.reduce {
            return Ok(());
        }
        let comm = if p > 1 {
            Some(res.sub_comm(CommPlane::Combine, 0)?)
        } else {
            None
        };
        let link = |q: u32| {
            comm.as_ref()
                .ok_or_else(|| HcclError::internal("no links on a one-rank communicator"))?
                .link(q)
        };
        // One slot per sender in every receiver's CCL output, or a single
        // slot when only the root sends (star broadcast and scatter).
        let single = self.star && matches!(op, OpType::Broadcast | OpType::Scatter);
        let slots = if single { 1 } else { p as u64 };
        let n = res
            .ccl_output
            .len()
            .min(PIPELINE_CHUNK_BYTES.max(p as usize * (64 << 10))) as u64
            / (slots * u);
        if n == 0 {
            return Err(HcclError::para(format!(
                "the CCL buffer ({} bytes) cannot hold one {} element per rank for {p} ranks",
                res.ccl_output.len(),
                param.dtype
            )));
        }
        // Slots no wider than the longest block (in 128-byte lines) when
        // every rank's longest block is the same: small ops then touch a
        // few lines of the buffer rather than a page per slot (at 1,024
        // ranks, 4 MiB of every rank's buffer for 16 bytes). So it is for
        // AllGatherV and ReduceScatterV, whose every rank passes all ranks'
        // counts (the consistency check compares them by digest), but not
        // for AllToAllV, whose ranks each know only their own row.
        let uniform = op != OpType::AllToAllV;
        let n = if uniform {
            n.min(((longest * u).div_ceil(SLICE_ALIGN as u64) * SLICE_ALIGN as u64 / u).max(1))
        } else {
            n
        };
        let slot_at = |q: u32| {
            if single {
                0
            } else {
                (q as u64 * n * u) as usize
            }
        };
        let slot = |q: u32, len: u64| res.ccl_output.range(slot_at(q), (len * u) as usize);
        let rounds = longest.div_ceil(n);
        // Mesh: one phase with every peer. Pairwise: p−1 phases, phase k
        // sending to rank r+k and receiving from r−k (one peer at a time,
        // HCCL's PairWise for alltoall).
        let phases: Vec<(Vec<u32>, Vec<u32>)> = if self.pairwise {
            (1..p)
                .map(|k| (vec![(me + k) % p], vec![(me + p - k) % p]))
                .collect()
        } else {
            vec![((0..p).collect(), (0..p).collect())]
        };
        for i in 0..rounds {
            for (ph, (to, from)) in phases.iter().enumerate() {
                s.set_step((i as usize * phases.len() + ph) as u32);
                // this rank's window to each peer it sends to, from the user input
                let sources = to
                    .iter()
                    .filter_map(|&q| window(plan.sends[q as usize], i, n).map(|w| (q, w)))
                    .map(|(q, w)| Ok((link(q)?, input(w)?)))
                    .collect::<Result<Vec<_>>>()?;
                let sends: Vec<Tx<'_>> = sources
                    .iter()
                    .map(|(l, src)| Tx::new(l, src, MemKind::CclOutput, slot_at(me)))
                    .collect();
                let recvs = from
                    .iter()
                    .filter(|&&q| window(plan.recvs[q as usize], i, n).is_some())
                    .map(|&q| Ok(Rx::new(link(q)?)))
                    .collect::<Result<Vec<_>>>()?;
                prim::exchange(s, &recvs, &sends)?;
                if !plan.reduce {
                    for &q in from {
                        if let Some(w) = window(plan.recvs[q as usize], i, n) {
                            s.memcpy_async(&output(w)?, &slot(q, w.len)?)?;
                        }
                    }
                }
            }
            if !plan.reduce {
                continue;
            }
            // Reduce in rank order from the slots; this rank's own window is
            // first copied into its (otherwise unused) slot, which also makes
            // in-place operation safe.
            let Some((own_src, own_dst)) = plan.own else {
                continue;
            };
            let (Some(src_w), Some(dst_w)) =
                (window(Some(own_src), i, n), window(Some(own_dst), i, n))
            else {
                continue;
            };
            s.memcpy_async(&slot(me, src_w.len)?, &input(src_w)?)?;
            let out = output(dst_w)?;
            let mut first = true;
            for q in 0..p {
                if q != me && window(plan.recvs[q as usize], i, n).is_none() {
                    continue;
                }
                let from = slot(q, dst_w.len)?;
                if first {
                    s.memcpy_async(&out, &from)?;
                    first = false;
                } else {
                    s.reduce_async(&out, &from, param.dtype, param.reduce_op)?;
                }
            }
        }
        Ok(())
    }
}
