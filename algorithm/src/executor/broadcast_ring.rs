//! Broadcast along the ring as a pipelined chain: the data is cut into
//! segments that travel root → root+1 → … → root−1, each rank forwarding a
//! segment as soon as it has it, so p−2 + S steps move S segments and every
//! link carries the data once.

use super::transfer::step;
use super::{run_op_base_loop, CollExecutor, PIPELINE_CHUNK_BYTES};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::template::Slice;
use crate::topo::{CommPlane, TopoInfo};
use hccl_platform::{DataType, DeviceMem, LinkHandle, MemKind, ReduceOp, Result, Stream};

/// Ring (chain) Broadcast over the flat plane.
#[derive(Debug)]
pub struct BroadcastRingExecutor {
    topo: TopoInfo,
}

impl BroadcastRingExecutor {
    /// The registered name.
    pub const NAME: &'static str = "BroadcastRingExecutor";

    /// An executor for `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        BroadcastRingExecutor { topo: topo.clone() }
    }
}

impl CollExecutor for BroadcastRingExecutor {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(
            Self::NAME,
            OpType::Broadcast,
            param,
            topo,
            super::ring_peers,
        )
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let p = self.topo.user_rank_size;
        if p == 1 || param.count == 0 {
            return Ok(());
        }
        let me = self.topo.user_rank;
        let root = param.root;
        // position along the chain, root first
        let pos = (me + p - root) % p;
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let left = comm.link((me + p - 1) % p)?;
        let right = comm.link((me + 1) % p)?;
        let capacity = res.ccl_input.len().min(PIPELINE_CHUNK_BYTES);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            let user = param.output.range(chunk.offset, chunk.bytes)?;
            if pos == 0 {
                s.memcpy_async(&w, &user)?;
            }
            run_chain(s, pos, p, left, right, &w, None)?;
            if pos > 0 {
                s.memcpy_async(&user, &w)?;
            }
            Ok(())
        })
    }
}

/// Runs one round of a pipelined chain on `w` (the round's bytes at offset
/// 0 of this rank's CCL input): `w` is cut into p segments; segment k
/// leaves chain position 0 at step k and is passed on by each position as
/// soon as it arrives, so p−2+p steps move the round and every link
/// carries it once. Without `reduce`, arriving segments land in `w` itself
/// (broadcast); with it, they land in `landing` (this rank's CCL output,
/// same offsets) and are reduced into `w` before being passed on (reduce:
/// position p−1 ends with the full reduction).
pub(super) fn run_chain(
    s: &Stream,
    pos: u32,
    p: u32,
    up: &LinkHandle,
    down: &LinkHandle,
    w: &DeviceMem,
    reduce: Option<(&DeviceMem, DataType, ReduceOp)>,
) -> Result<()> {
    let kind = if reduce.is_some() {
        MemKind::CclOutput
    } else {
        MemKind::CclInput
    };
    for (k, seg) in Slice::split(w.len(), p as usize).iter().enumerate() {
        s.set_step(k as u32 + pos);
        let piece = w.range(seg.offset, seg.len)?;
        if pos > 0 {
            step(s, Some(up), None)?;
            if let (Some((landing, dtype, op)), true) = (reduce, seg.len > 0) {
                s.reduce_async(&piece, &landing.range(seg.offset, seg.len)?, dtype, op)?;
            }
        }
        if pos + 1 < p {
            step(s, None, Some((down, &piece, kind, seg.offset)))?;
        }
    }
    Ok(())
}
