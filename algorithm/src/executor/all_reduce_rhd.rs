//! AllReduce by recursive halving (reduce-scatter) and recursive doubling
//! (allgather): 2·log2(m) steps on the largest power of two m ≤ p, plus one
//! fold-in and one fold-out step when p is not a power of two (seed 002's
//! RHD). Rank r ≥ m first hands its data to rank r − m, which reduces it,
//! takes part in the power-of-two exchange, and hands the result back.
//!
//! Per op-base round the user data is staged in the CCL input (the working
//! buffer W); halving steps land the partner's half in the CCL output and
//! reduce it into W; doubling steps write owned blocks straight into the
//! partner's W.

use super::rhd::{core_size, doubling, halving, partners, reduce, Groups};
use super::transfer::step;
use super::{round_capacity, run_op_base_loop, CollExecutor};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::template::Slice;
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DataType, DeviceMem, MemKind, ReduceOp, Result, Stream};

/// RHD AllReduce over the flat plane.
#[derive(Debug)]
pub struct AllReduceRhdExecutor {
    topo: TopoInfo,
}

impl AllReduceRhdExecutor {
    /// The registered name.
    pub const NAME: &'static str = "AllReduceRHDExecutor";

    /// An executor for `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        AllReduceRhdExecutor { topo: topo.clone() }
    }
}

/// One RHD allreduce among `comm`'s ranks of the bytes in `w` (this rank's
/// CCL input at `base`, the same place on every rank), with `landing` (the
/// CCL output at `base`, as long as `w`) taking the partner's halves. The
/// result ends in `w`.
pub(crate) fn rhd_all_reduce(
    s: &Stream,
    comm: &SubCommInfo,
    (w, landing, base): (&DeviceMem, &DeviceMem, usize),
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
        step(s, None, Some((l, w, MemKind::CclOutput, base)))?;
        // wait for the result to be written back into W
        s.set_step(1 + 2 * log);
        return step(s, Some(l), None);
    }
    if r + m < p {
        step(s, Some(comm.link(r + m)?), None)?;
        reduce(s, w, &landing.range(0, n)?, how.0, how.1)?;
    }
    let groups = Groups::from_slices(&Slice::split(n, m as usize));
    let landing_at = (MemKind::CclOutput, base);
    halving(s, comm, m, &groups, w, landing, landing_at, how, 1)?;
    doubling(s, comm, m, &groups, w, (MemKind::CclInput, base), 1 + log)?;
    // fold-out
    s.set_step(1 + 2 * log);
    if r + m < p {
        step(
            s,
            None,
            Some((comm.link(r + m)?, w, MemKind::CclInput, base)),
        )?;
    }
    Ok(())
}

impl CollExecutor for AllReduceRhdExecutor {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(Self::NAME, OpType::AllReduce, param, topo, partners)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let bytes = param.input_bytes() as usize;
        if self.topo.user_rank_size == 1 {
            return super::copy_through(param, bytes);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let capacity = round_capacity(res);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            let how = (param.dtype, param.reduce_op);
            rhd_all_reduce(s, &comm, (&w, &res.ccl_output, 0), how)?;
            s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &w)
        })
    }
}
