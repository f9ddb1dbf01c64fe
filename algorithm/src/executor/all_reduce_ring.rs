//! AllReduce as ring reduce-scatter followed by ring allgather, over all ranks.
//!
//! Op-base mode stages each chunk: user input → CCL input, reduce-scatter in
//! the CCL input (peers' partials land in the CCL output), the reduced slice
//! copied into the CCL output, allgather in the CCL output, CCL output →
//! user output. Traffic per rank: 2(p−1)/p of the data, in 2(p−1) steps.

use super::{run_op_base_loop, CollExecutor};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::template::{RingAllGather, RingReduceScatter, Slice};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DataType, DeviceMem, MemKind, ReduceOp, Result, Stream};

/// Ring AllReduce over the flat (`Combine`) plane.
#[derive(Debug)]
pub struct AllReduceRingExecutor {
    topo: TopoInfo,
}

impl AllReduceRingExecutor {
    /// The registered name.
    pub const NAME: &'static str = "AllReduceRingExecutor";

    /// An executor for `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        AllReduceRingExecutor { topo: topo.clone() }
    }
}

/// Enqueues one ring allreduce among `comm`'s ranks of the bytes held in
/// `input`, using `output` (same size, addressed by peers as `output_kind`
/// at `output_base`) as the landing and gather buffer. The result ends in
/// `output`.
pub(crate) fn ring_all_reduce(
    stream: &Stream,
    comm: &SubCommInfo,
    (input, output): (&DeviceMem, &DeviceMem),
    (output_kind, output_base): (MemKind, usize),
    (dtype, op): (DataType, ReduceOp),
) -> Result<()> {
    let r = comm.local_rank as usize;
    let slices = Slice::split(input.len(), comm.local_rank_size as usize);
    RingReduceScatter {
        input: input.clone(),
        output: output.clone(),
        output_kind,
        output_base,
        slices: slices.clone(),
        dtype,
        op,
    }
    .run(stream, comm)?;
    let mine = slices[r];
    if mine.len > 0 {
        stream.memcpy_async(
            &output.range(mine.offset, mine.len)?,
            &input.range(mine.offset, mine.len)?,
        )?;
    }
    RingAllGather {
        output: output.clone(),
        output_kind,
        output_base,
        slices,
    }
    .run(stream, comm)
}

impl CollExecutor for AllReduceRingExecutor {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(
            Self::NAME,
            OpType::AllReduce,
            param,
            topo,
            super::ring_peers,
        )
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let stream = &param.stream;
        let bytes = param.input_bytes() as usize;
        if self.topo.user_rank_size == 1 {
            return super::copy_through(param, bytes);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let capacity = res
            .ccl_input
            .len()
            .min(res.ccl_output.len())
            .min(super::PIPELINE_CHUNK_BYTES);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let cin = res.ccl_input.range(0, chunk.bytes)?;
            let cout = res.ccl_output.range(0, chunk.bytes)?;
            stream.memcpy_async(&cin, &param.input.range(chunk.offset, chunk.bytes)?)?;
            let how = (param.dtype, param.reduce_op);
            ring_all_reduce(stream, &comm, (&cin, &cout), (MemKind::CclOutput, 0), how)?;
            stream.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &cout)
        })
    }
}
