//! A pipelined chain AllReduce, written only against the public API of
//! `hccl-algorithm` and `hccl-platform`, as a crate outside hccl-rs would
//! write it.
//!
//! The ranks form a chain 0 — 1 — … — p−1; each links to its neighbours
//! only. An op-base round's data is cut into k segments. Going up, rank 0
//! sends segment j to rank 1 at step j; rank r receives segment j at step
//! j + r − 1, reduces it into its own data and passes the sum on at step
//! j + r. Rank p−1 ends with each fully reduced segment and starts it back
//! down the chain at once, while later segments are still going up:
//! segment j leaves rank p−1 at step j + p − 1 and reaches rank r at step
//! j + 2p − 3 − r. So every step moves one segment per link, and the op
//! takes 2p + k − 3 steps on the critical path (the k segments enter one
//! after another, then the last one goes up p − 2 more hops and down
//! p − 1), instead of the 2(p − 1) steps of n bytes each of the plain
//! chain. A middle rank sends the whole vector twice (up and down): 2n
//! bytes, n over each of its two links; the ends send n.
//!
//! Every step is one `prim::exchange` of up to two receives and two sends
//! (both directions of the chain move in the same step), so the
//! receiver-acks-first handshake rules out deadlock, and a segment lands
//! in the CCL output at its own offset in both directions: going up it is
//! reduced into the CCL input right away, coming down it is the result.

use hccl_algorithm::prim::{self, Rx, Tx};
use hccl_algorithm::template::layout::{copy_through, round_capacity, run_op_base_loop};
use hccl_algorithm::template::Slice;
use hccl_algorithm::{
    AlgResourceRequest, AlgResourceResponse, CollExecutor, CommPlane, ExecutorRegistry, OpParam,
    OpType, SingleSubCommTransport, TopoInfo, WorkflowMode,
};
use hccl_platform::{
    DataType, DeviceMem, HcclError, LinkHandle, MemKind, ReduceOp, Result, Stream,
};
use std::sync::Arc;

/// The registered name.
pub const NAME: &str = "AllReducePipelinedChainExample";

/// Segments an op-base round is cut into (fewer when the round has fewer
/// 128-byte lines: no segment is empty).
pub const SEGMENTS: usize = 8;

/// The pipelined chain AllReduce over the whole communicator.
pub struct PipelinedChain {
    topo: TopoInfo,
}

impl CollExecutor for PipelinedChain {
    fn name(&self) -> &str {
        NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        if param.op_type != OpType::AllReduce || param.mode != WorkflowMode::OpBase {
            return Err(HcclError::not_support(format!(
                "{NAME} runs allreduce in op-base mode only, not {} in {:?} mode",
                param.op_type, param.mode
            )));
        }
        let mut req = AlgResourceRequest::default();
        let (r, p) = (topo.user_rank, topo.user_rank_size);
        if p > 1 {
            // links to the chain neighbours only; peers write into our CCL output
            let neighbours: Vec<u32> = [r.checked_sub(1), (r + 1 < p).then_some(r + 1)]
                .into_iter()
                .flatten()
                .collect();
            req.op_transport[CommPlane::Combine as usize].push(SingleSubCommTransport::new(
                topo.plane_ranks(CommPlane::Combine),
                r,
                &neighbours,
                MemKind::CclInput,
                MemKind::CclOutput,
            )?);
        }
        Ok(req)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        if self.topo.user_rank_size == 1 {
            return copy_through(param, param.input_bytes() as usize);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let (r, p) = (comm.local_rank as usize, comm.local_rank_size as usize);
        let chain = Chain {
            r,
            p,
            down: if r > 0 {
                Some(comm.link(r as u32 - 1)?)
            } else {
                None
            },
            up: if r + 1 < p {
                Some(comm.link(r as u32 + 1)?)
            } else {
                None
            },
        };
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let cin = res.ccl_input.range(0, chunk.bytes)?;
            let cout = res.ccl_output.range(0, chunk.bytes)?;
            s.memcpy_async(&cin, &param.input.range(chunk.offset, chunk.bytes)?)?;
            chain.all_reduce(s, (&cin, &cout), (param.dtype, param.reduce_op))?;
            s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &cout)
        })
    }
}

/// This rank's place in the chain: its index, the chain's length, and the
/// links to the neighbours below (r − 1) and above (r + 1).
struct Chain<'a> {
    r: usize,
    p: usize,
    down: Option<&'a LinkHandle>,
    up: Option<&'a LinkHandle>,
}

/// Segment `t − d` if that is one of the `k` segments: the segment a rank
/// `d` hops behind the start handles at step `t`.
fn segment_at(t: usize, d: usize, k: usize) -> Option<usize> {
    t.checked_sub(d).filter(|&j| j < k)
}

impl Chain<'_> {
    /// Enqueues the AllReduce of `cin` (this round's data, reduced in
    /// place going up) into `cout` (where segments land, and the result).
    fn all_reduce(
        &self,
        s: &Stream,
        (cin, cout): (&DeviceMem, &DeviceMem),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        let segs: Vec<Slice> = Slice::split(cin.len(), SEGMENTS)
            .into_iter()
            .filter(|x| x.len > 0)
            .collect();
        let (r, p, k) = (self.r, self.p, segs.len());
        let out = MemKind::CclOutput;
        let top = r + 1 == p;
        for t in 0..2 * p + k - 3 {
            // up: receive segment t−r+1 from below (r > 0), send t−r above
            let up_rx = self.down.and_then(|l| Some((l, segment_at(t + 1, r, k)?)));
            let up_tx = self.up.and_then(|l| Some((l, segment_at(t, r, k)?)));
            // down: segment j leaves the top at step j + p − 1, reaches
            // rank r at step j + 2p − 3 − r and leaves it one step later
            let down_rx = self
                .up
                .and_then(|l| Some((l, segment_at(t + r + 3, 2 * p, k)?)));
            let down_tx = self
                .down
                .and_then(|l| Some((l, segment_at(t + r + 2, 2 * p, k)?)));
            let (up_rx_mem, down_rx_mem) = (
                up_rx.map(|(_, j)| segs[j].of(cout)).transpose()?,
                down_rx.map(|(_, j)| segs[j].of(cout)).transpose()?,
            );
            // what goes up is this rank's partial sum; what goes down, the result
            let up_src = up_tx.map(|(_, j)| segs[j].of(cin)).transpose()?;
            let down_src = down_tx.map(|(_, j)| segs[j].of(cout)).transpose()?;
            let mut rx = Vec::new();
            if let (Some((l, j)), Some(m)) = (up_rx, &up_rx_mem) {
                rx.push(Rx::at(l, m, out, segs[j].offset));
            }
            if let (Some((l, j)), Some(m)) = (down_rx, &down_rx_mem) {
                rx.push(Rx::at(l, m, out, segs[j].offset));
            }
            let mut tx = Vec::new();
            if let (Some((l, j)), Some(m)) = (up_tx, &up_src) {
                tx.push(Tx::new(l, m, out, segs[j].offset));
            }
            if let (Some((l, j)), Some(m)) = (down_tx, &down_src) {
                tx.push(Tx::new(l, m, out, segs[j].offset));
            }
            if rx.is_empty() && tx.is_empty() {
                continue;
            }
            s.set_step(t as u32);
            prim::exchange(s, &rx, &tx)?;
            if let (Some((_, j)), Some(landing)) = (up_rx, &up_rx_mem) {
                let mine = segs[j].of(cin)?;
                prim::reduce(s, &mine, landing, how)?;
                if top {
                    // fully reduced: the result, and what goes down next step
                    s.memcpy_async(landing, &mine)?;
                }
            }
        }
        Ok(())
    }
}

/// Registers the executor in `registry` under [`NAME`]. It declares no
/// cost, so the selector never picks it on its own: it runs when named
/// (the simulator here, `HCCL_RS_EXECUTOR` in a real job).
/// `ExecutorRegistry::register_with` and an `ExecutorInfo` would let the
/// selector rank it beside the built-ins.
pub fn register(registry: &ExecutorRegistry) -> Result<()> {
    registry.register(
        NAME,
        Arc::new(|t: &TopoInfo| {
            Box::new(PipelinedChain { topo: t.clone() }) as Box<dyn CollExecutor>
        }),
    )
}
