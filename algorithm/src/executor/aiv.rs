//! AIV executors: a small op as one kernel task over the ranks' boards
//! (see `hccl_platform::AivKind` and `platform/src/aiv/PROTOCOL.md`), HCCL's AIV mode on CPUs.
//!
//! Where the mesh executor spends a dozen tasks and two handshakes on an
//! 8-byte AllReduce (consistency check, ack, transfer, done, reduce, ...),
//! the AIV kernel publishes the input with its descriptor in the flag line
//! of this rank's board and folds the peers' entries as they appear: one
//! task, one round, the consistency check included. Every primitive but
//! the V ops and send/receive has a kernel (each rank publishes its input
//! and takes from every entry what its output needs). Only for ranks of
//! one host (every link must reach the boards) and payloads of at most
//! [`AIV_MAX_BYTES`] per rank ([`aiv_payload_bytes`]).

use super::{all_peers, check_op, flat_request, CollExecutor, Named, RepeatLaunch};
use crate::op::{DescriptorCache, OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::topo::{CommPlane, TopoInfo};
pub use hccl_platform::AIV_MAX_BYTES;
use hccl_platform::{AivBoards, AivKind, AivLaunch, AivPlan, DeviceMem, Stream};
use hccl_platform::{HcclError, Result};
use std::sync::Arc;

// The registry builds from its own table; its tests and the simulator's
// check against this one, and nothing else needs it.
/// The AIV executors: (registered name, op).
#[cfg(test)]
pub(crate) const AIV_EXECUTORS: &[(&str, OpType)] = &[
    ("AllReduceMeshAivExecutor", OpType::AllReduce),
    ("AllGatherMeshAivExecutor", OpType::AllGather),
    ("ReduceScatterMeshAivExecutor", OpType::ReduceScatter),
    ("AllToAllMeshAivExecutor", OpType::AllToAll),
    ("BroadcastMeshAivExecutor", OpType::Broadcast),
    ("ReduceMeshAivExecutor", OpType::Reduce),
    ("ScatterMeshAivExecutor", OpType::Scatter),
    ("GatherMeshAivExecutor", OpType::Gather),
];

/// The kernel for `param`'s op, if there is one.
pub(crate) fn aiv_kind(param: &OpParam<'_>) -> Option<AivKind> {
    let (dtype, op, root) = (param.dtype, param.reduce_op, param.root);
    Some(match param.op_type {
        OpType::AllReduce => AivKind::AllReduce { dtype, op },
        OpType::AllGather => AivKind::AllGather,
        OpType::ReduceScatter => AivKind::ReduceScatter { dtype, op },
        OpType::AllToAll => AivKind::AllToAll,
        OpType::Broadcast => AivKind::Broadcast { root },
        OpType::Reduce => AivKind::Reduce { dtype, op, root },
        OpType::Scatter => AivKind::Scatter { root },
        OpType::Gather => AivKind::Gather { root },
        _ => return None,
    })
}

/// The most bytes any rank of `p` publishes on its board for `param`
/// (what [`AIV_MAX_BYTES`] and `HCCL_RS_AIV_MAX_BYTES` bound; see
/// [`AivKind::max_publish_len`]). `None` for ops without a kernel.
pub(crate) fn aiv_payload_bytes(param: &OpParam<'_>, p: u32) -> Option<u64> {
    let block = param.count.checked_mul(param.dtype.size() as u64)?;
    let block = usize::try_from(block).ok()?;
    Some(aiv_kind(param)?.max_publish_len(p, block) as u64)
}

/// An AIV executor (see the module docs).
#[derive(Debug)]
pub(crate) struct AivExecutor {
    named: Named,
    /// The ranks' boards, once looked up (the links are granted once per
    /// tag and kept).
    boards: Option<Arc<AivBoards>>,
    /// The op descriptor of the last launch (compared with the peers'
    /// in every kernel).
    desc: DescriptorCache,
}

impl AivExecutor {
    /// The executor registered as `name`, running `op` on `topo`.
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        AivExecutor {
            named: Named::new(name, op, topo),
            boards: None,
            desc: DescriptorCache::default(),
        }
    }
}

impl CollExecutor for AivExecutor {
    fn name(&self) -> &str {
        self.named.name
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        let mut req = flat_request(self.named.name, self.named.op, param, topo, all_peers)?;
        req.need_aiv_buffer = true;
        Ok(req)
    }

    fn checks_consistency(&self) -> bool {
        true
    }

    /// The kernel reads the op's input and writes its output; peers meet
    /// on the boards, never in the CCL buffers.
    fn supports_graph(&self) -> bool {
        true
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        self.build(
            param,
            res,
            |output, input| {
                // one rank: the output is the input (a Broadcast's buffer
                // already is)
                if !output.is_empty() && !input.same_range(output) {
                    s.memcpy_async(output, input)?;
                }
                Ok(())
            },
            |task| s.aiv_launch(task),
        )
    }

    /// The kernel, prepared: its launch is a few loads and stores (one
    /// rank's copy has nothing to gain).
    fn repeat_plan(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn RepeatLaunch>>> {
        self.build(
            param,
            res,
            |_, _| Ok(None),
            |task| Ok(Some(Box::new(task.plan()) as Box<dyn RepeatLaunch>)),
        )
    }
}

impl AivExecutor {
    /// Checks `param` and builds its kernel, handed to `kernel`; with one
    /// rank, `local` gets the output and input instead (no kernel).
    fn build<R>(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
        local: impl FnOnce(&DeviceMem, &DeviceMem) -> Result<R>,
        kernel: impl FnOnce(AivLaunch<'_>) -> Result<R>,
    ) -> Result<R> {
        let name = self.named.name;
        check_op(name, self.named.op, param)?;
        let p = self.named.topo.user_rank_size;
        let me = self.named.topo.user_rank;
        let kind = aiv_kind(param).ok_or_else(|| {
            HcclError::internal(format!("{name} has no AIV kernel for {}", param.op_type))
        })?;
        let payload = aiv_payload_bytes(param, p).unwrap_or(u64::MAX);
        if payload > AIV_MAX_BYTES as u64 {
            return Err(HcclError::not_support(format!(
                "{name} carries at most {AIV_MAX_BYTES} bytes per rank, not {payload}; choose another algorithm"
            )));
        }
        let block = (param.count * param.dtype.size() as u64) as usize;
        // the adapter passes exactly the op's bytes: take a sub-range (a
        // reference count) only when the caller passed more
        let input = param.input.prefix(kind.publish_len(me, p, block))?;
        let output = param.output.prefix(kind.output_len(me, p, block))?;
        if p == 1 {
            return local(&output, &input);
        }
        let boards = match &self.boards {
            Some(b) => b,
            None => {
                let comm = res.sub_comm(CommPlane::Combine, 0)?;
                let me = self.named.topo.user_rank;
                let links = (0..p)
                    .filter(|&q| q != me)
                    .map(|q| comm.link(q).cloned())
                    .collect::<Result<Vec<_>>>()?;
                self.boards.insert(AivBoards::new(&links)?)
            }
        };
        let desc = self.desc.get(param, res.ccl_input.len() as u64);
        kernel(AivLaunch::new(
            kind,
            boards,
            (&input, &output),
            block,
            &desc,
        )?)
    }
}

impl RepeatLaunch for AivPlan {
    fn launch(&self, stream: &Stream, input: &DeviceMem, output: &DeviceMem) -> Result<()> {
        AivPlan::launch(self, stream, input, output)
    }
}
