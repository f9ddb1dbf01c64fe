//! Direct-read executors: ranks on one host read each other's *user*
//! buffers (cross-memory attach, [`LinkHandle::read_peer`]) instead of
//! staging the data through the CCL buffers. Every byte crosses once, from
//! the peer's buffer into its final place (reductions go through a small
//! staging window that stays in cache).
//!
//! The blocks each rank reads from each peer are the mesh executors' table
//! ([`MeshPlan`]) seen from the peer: what peer `q` would send to this rank
//! is where this rank reads in `q`'s input. AllReduce is the exception: a
//! one-shot read of every peer's whole buffer would cost p−1 times the data
//! per rank, so it is reduce-scatter + allgather on the user buffers (rank
//! `r` reduces slice `r` reading every peer's input, then reads every
//! peer's reduced slice from its output): 2(p−1)/p of the data per rank.
//!
//! Protocol per op (all on the master stream):
//! 1. every rank sends where its buffers are to the peers that read them
//!    and receives the addresses of the peers it reads (`expose_param_mem`,
//!    `rx_param_mem`);
//! 2. reads (and, for AllReduce, a "slice reduced" ack before the
//!    allgather reads, which also tells the reader that the peer has
//!    finished reading the reader's input);
//! 3. a "done reading you" ack to every peer read, and a wait for the same
//!    from every peer that reads this rank — so no rank returns, and lets
//!    its user touch the buffers, while a peer still reads them.

use super::flat::{check_op, mesh_peers, mesh_variant, FlatExecutor, Named};
use crate::op::{OpParam, OpType};
use crate::resource::AlgResourceResponse;
use crate::template::mesh::{Block, MeshPlan};
use crate::template::Slice;
use crate::topo::{CommPlane, TopoInfo};
use hccl_platform::{DeviceMem, HcclError, LinkHandle, MemKind, Result, Stream};

// The registry builds from its own table; its tests and the simulator's
// check against this one, and nothing else needs it.
/// The direct-read executors: (registered name, op).
#[cfg(test)]
pub(crate) const DIRECT_EXECUTORS: &[(&str, OpType)] = &[
    ("AllReduceDirectExecutor", OpType::AllReduce),
    ("AllGatherDirectExecutor", OpType::AllGather),
    ("ReduceScatterDirectExecutor", OpType::ReduceScatter),
    ("AllToAllDirectExecutor", OpType::AllToAll),
    ("BroadcastDirectExecutor", OpType::Broadcast),
    ("ReduceDirectExecutor", OpType::Reduce),
    ("ScatterDirectExecutor", OpType::Scatter),
    ("GatherDirectExecutor", OpType::Gather),
    ("AllGatherVDirectExecutor", OpType::AllGatherV),
    ("ReduceScatterVDirectExecutor", OpType::ReduceScatterV),
    ("SendDirectExecutor", OpType::Send),
    ("ReceiveDirectExecutor", OpType::Receive),
];

/// Bytes of the staging window a reduction reads a peer's block into: small
/// enough to stay in L2 between the read and the reduce.
pub(crate) const DIRECT_STAGE_BYTES: usize = 256 << 10;

/// A direct-read executor for one op (see the module docs).
#[derive(Debug)]
pub(crate) struct DirectExecutor {
    named: Named,
}

impl DirectExecutor {
    /// The executor registered as `name`, running `op` on `topo`.
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        DirectExecutor {
            named: Named::new(name, op, topo),
        }
    }
}

/// Who reads whom in one op: `reads[q]` = this rank reads peer q;
/// `read_by[q]` = peer q reads this rank.
struct Readers {
    reads: Vec<bool>,
    read_by: Vec<bool>,
}

/// Peers in the order this rank visits them: r+1, r+2, ... so that ranks
/// start on different peers instead of all reading rank 0 first.
fn others(me: u32, p: u32) -> impl Iterator<Item = u32> {
    (1..p).map(move |i| (me + i) % p)
}

impl FlatExecutor for DirectExecutor {
    fn named(&self) -> &Named {
        &self.named
    }

    fn peers(&self, r: u32, n: u32, param: &OpParam) -> Vec<u32> {
        mesh_peers(self.named.op, r, n, param)
    }

    fn variant(&self, param: &OpParam) -> Option<u32> {
        mesh_variant(self.named.op, param)
    }

    /// Every byte is read from the peer's user buffer into its final
    /// place: graph mode is this executor's natural mode.
    fn graph(&self) -> bool {
        true
    }

    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let name = self.named.name;
        check_op(name, self.named.op, param)?;
        let p = self.named.topo.user_rank_size;
        let me = self.named.topo.user_rank;
        let s = &param.stream;
        let u = param.dtype.size() as u64;
        let plan = MeshPlan::of(param, p, me)?;
        let all_reduce = self.named.op == OpType::AllReduce;
        if p == 1 {
            if let Some((src, dst)) = plan.own {
                copy_block(s, param, src, dst, u)?;
            }
            return Ok(());
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let from_peer: Vec<Option<Block>> = (0..p)
            .map(|q| read_from(param, p, me, q))
            .collect::<Result<_>>()?;
        let readers = if all_reduce {
            Readers {
                reads: (0..p).map(|q| q != me).collect(),
                read_by: (0..p).map(|q| q != me).collect(),
            }
        } else {
            Readers {
                // empty blocks are neither read nor waited for (a V op's
                // zero counts): both ends must agree on who reads whom
                reads: (0..p as usize)
                    .map(|q| plan.recvs[q].is_some_and(|b| b.len > 0) && from_peer[q].is_some())
                    .collect(),
                read_by: (0..p as usize)
                    .map(|q| plan.sends[q].is_some_and(|b| b.len > 0))
                    .collect(),
            }
        };
        let mut links: Vec<Option<&LinkHandle>> = vec![None; p as usize];
        for q in others(me, p) {
            if readers.reads[q as usize] || readers.read_by[q as usize] {
                let l = comm.link(q)?;
                if !l.link().reads_peer_param() {
                    return Err(HcclError::not_support(format!(
                        "{name} reads peers' user buffers, which the {} link to rank {q} cannot \
                         (ranks on one host with cross-memory attach: same user, Yama \
                         ptrace_scope 0, HCCL_RS_CMA not 0); choose another algorithm",
                        l.link().transport()
                    )));
                }
                links[q as usize] = Some(l);
            }
        }
        let link = |q: u32| links[q as usize].ok_or_else(|| HcclError::internal("no link"));
        // 1. addresses
        for q in others(me, p) {
            if readers.read_by[q as usize] {
                link(q)?.expose_param_mem(&param.input, &param.output, s)?;
            }
        }
        for q in others(me, p) {
            if readers.reads[q as usize] {
                link(q)?.rx_param_mem(s)?;
            }
        }
        // 2. the data
        let stage_len = (res.ccl_input.len().min(DIRECT_STAGE_BYTES) as u64 / u * u) as usize;
        if stage_len == 0 {
            return Err(HcclError::para(format!(
                "the CCL buffer ({} bytes) cannot stage one {} element",
                res.ccl_input.len(),
                param.dtype
            )));
        }
        let stage = res.ccl_input.range(0, stage_len)?;
        if all_reduce {
            let bytes = (param.count * u) as usize;
            let slices = Slice::split(bytes, p as usize);
            let mine = slices[me as usize];
            let sources: Vec<(u32, usize)> = others(me, p).map(|q| (q, mine.offset)).collect();
            reduce_into(
                s,
                param,
                (&param.input.range(mine.offset, mine.len)?, &sources),
                &param.output.range(mine.offset, mine.len)?,
                &stage,
                &link,
            )?;
            // "my slice is reduced" — and "I have read my slice of your input"
            for q in others(me, p) {
                link(q)?.tx_ack(s)?;
            }
            for q in others(me, p) {
                let l = link(q)?;
                l.rx_ack(s)?;
                let theirs = slices[q as usize];
                if theirs.len > 0 {
                    let dst = param.output.range(theirs.offset, theirs.len)?;
                    l.read_peer(MemKind::ParamOutput, theirs.offset, &dst, s)?;
                }
            }
        } else if plan.reduce {
            // ReduceScatter, and Reduce at the root: every reader reduces
            // the peers' blocks into its own output block.
            if let Some((own_in, own_out)) = plan.own {
                let sources: Vec<(u32, usize)> = others(me, p)
                    .filter(|&q| readers.reads[q as usize])
                    .filter_map(|q| from_peer[q as usize].map(|b| (q, (b.off * u) as usize)))
                    .collect();
                let (i, o) = (
                    range(&param.input, own_in, u)?,
                    range(&param.output, own_out, u)?,
                );
                reduce_into(s, param, (&i, &sources), &o, &stage, &link)?;
            }
        } else {
            if let Some((src, dst)) = plan.own {
                copy_block(s, param, src, dst, u)?;
            }
            for q in others(me, p) {
                if !readers.reads[q as usize] {
                    continue;
                }
                let (Some(dst), Some(src)) = (plan.recvs[q as usize], from_peer[q as usize]) else {
                    continue;
                };
                if dst.len > 0 {
                    let dst = range(&param.output, dst, u)?;
                    link(q)?.read_peer(MemKind::ParamInput, (src.off * u) as usize, &dst, s)?;
                }
            }
        }
        // 3. done reading each other
        for q in others(me, p) {
            if readers.reads[q as usize] {
                link(q)?.tx_ack(s)?;
            }
        }
        for q in others(me, p) {
            if readers.read_by[q as usize] {
                link(q)?.rx_ack(s)?;
            }
        }
        Ok(())
    }
}

/// The block of peer `q`'s input that rank `me` reads: what `q` sends
/// `me` in the mesh table. For the V ops every rank passes the same
/// count vectors, so `me` works `q`'s block out from its own arguments;
/// a Receive reads the sender's whole buffer.
fn read_from<'a>(param: &'a OpParam, p: u32, me: u32, q: u32) -> Result<Option<Block>> {
    if q == me {
        return Ok(None);
    }
    let vcounts = |v: &'a Option<crate::op::VCounts>, what: &str| {
        v.as_ref().ok_or_else(|| {
            HcclError::para(format!("{}: the {what} counts are missing", param.op_type))
        })
    };
    Ok(match param.op_type {
        OpType::AllGatherV => {
            let rv = vcounts(&param.recv_v, "receive")?;
            let len = *rv.counts.get(q as usize).unwrap_or(&0);
            (len > 0).then_some(Block { off: 0, len })
        }
        OpType::ReduceScatterV => {
            let sv = vcounts(&param.send_v, "send")?;
            let (off, len) = (sv.displs[me as usize], sv.counts[me as usize]);
            (len > 0).then_some(Block { off, len })
        }
        OpType::Receive => (q == param.peer && param.count > 0).then_some(Block {
            off: 0,
            len: param.count,
        }),
        OpType::Send => None,
        OpType::AllToAllV => {
            return Err(HcclError::not_support(
                "the direct executors do not run AllToAllV: a reader cannot work out the \
                 sender's displacements from its own arguments",
            ))
        }
        _ => MeshPlan::sent(param, p, q, me)?,
    })
}

/// `buf`'s byte range of element block `b`.
fn range(buf: &DeviceMem, b: Block, u: u64) -> Result<DeviceMem> {
    buf.range((b.off * u) as usize, (b.len * u) as usize)
}

/// Copies this rank's own block (nothing when in place).
fn copy_block(s: &Stream, param: &OpParam, src: Block, dst: Block, u: u64) -> Result<()> {
    if src.len == 0 {
        return Ok(());
    }
    let (src, dst) = (range(&param.input, src, u)?, range(&param.output, dst, u)?);
    if !src.same_range(&dst) {
        s.memcpy_async(&dst, &src)?;
    }
    Ok(())
}

/// `out = own op (peer blocks)`, window by window (`stage`'s length, so a
/// window stays in cache across the peers): each peer's block is read at
/// its byte offset in that peer's input (`sources`). The first peer's
/// window is read straight into `out` when `out` is not `own` (then
/// reduced with `own`), the others are reduced straight out of the peers'
/// buffers (`read_peer_reduce`: one pass over a mapped peer buffer, else
/// cross-memory reads through the link's staging window).
fn reduce_into<'a>(
    s: &Stream,
    param: &OpParam,
    (own, sources): (&DeviceMem, &[(u32, usize)]),
    out: &DeviceMem,
    stage: &DeviceMem,
    link: &impl Fn(u32) -> Result<&'a LinkHandle>,
) -> Result<()> {
    let (dtype, op) = (param.dtype, param.reduce_op);
    let in_place = own.same_range(out);
    let mut at = 0;
    while at < out.len() {
        let n = stage.len().min(out.len() - at);
        let (own_w, out_w) = (own.range(at, n)?, out.range(at, n)?);
        for (i, &(q, off)) in sources.iter().enumerate() {
            let l = link(q)?;
            if i == 0 && !in_place {
                l.read_peer(MemKind::ParamInput, off + at, &out_w, s)?;
                s.reduce_async(&out_w, &own_w, dtype, op)?;
            } else {
                l.read_peer_reduce(MemKind::ParamInput, off + at, &out_w, dtype, op, s)?;
            }
        }
        if sources.is_empty() && !in_place {
            s.memcpy_async(&out_w, &own_w)?;
        }
        at += n;
    }
    Ok(())
}
