//! Ring AllGather and ring ReduceScatter executors (bandwidth-optimal for
//! large messages: each rank sends (p−1)/p of the data in p−1 steps).
//!
//! Per op-base round, each rank's window of w elements is staged into slot
//! r of a CCL buffer laid out as p slots of w elements, the ring template
//! runs over the slots, and the result is copied out.

use super::CollExecutor;
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::template::{RingAllGather, RingReduceScatter, Slice};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{HcclError, MemKind, Result};

/// Ring AllGather over the flat plane.
#[derive(Debug)]
pub struct AllGatherRingExecutor {
    topo: TopoInfo,
}

/// Ring ReduceScatter over the flat plane.
#[derive(Debug)]
pub struct ReduceScatterRingExecutor {
    topo: TopoInfo,
}

impl AllGatherRingExecutor {
    /// The registered name.
    pub const NAME: &'static str = "AllGatherRingExecutor";
    /// An executor for `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        AllGatherRingExecutor { topo: topo.clone() }
    }
}

impl ReduceScatterRingExecutor {
    /// The registered name.
    pub const NAME: &'static str = "ReduceScatterRingExecutor";
    /// An executor for `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        ReduceScatterRingExecutor { topo: topo.clone() }
    }
}

/// Slot slices for a round: p slots of `w` elements of `u` bytes each.
pub(super) fn slots(p: u64, w: u64, u: u64) -> Vec<Slice> {
    (0..p)
        .map(|k| Slice {
            offset: (k * w * u) as usize,
            len: (w * u) as usize,
        })
        .collect()
}

/// Elements per rank block that one op-base round moves: p blocks must fit
/// both CCL buffers (and the round-size cap that keeps a round in cache).
pub(super) fn per_rank_window(res: &AlgResourceResponse, p: u64, u: u64) -> Result<u64> {
    let n = super::round_capacity(res) as u64 / (p * u);
    if n == 0 {
        return Err(HcclError::para(format!(
            "the CCL buffer cannot hold one element per rank for {p} ranks"
        )));
    }
    Ok(n)
}

/// The op-base frame both executors share: nothing to do for no elements,
/// a local copy on one rank, else `round(comm, e0, w)` for each round of
/// `w` elements per rank starting at element `e0`.
fn ring_rounds(
    topo: &TopoInfo,
    param: &OpParam,
    res: &AlgResourceResponse,
    mut round: impl FnMut(&SubCommInfo, u64, u64) -> Result<()>,
) -> Result<()> {
    let (p, c, u) = (
        topo.user_rank_size as u64,
        param.count,
        param.dtype.size() as u64,
    );
    if c == 0 {
        return Ok(());
    }
    if p == 1 {
        return super::copy_through(param, (c * u) as usize);
    }
    let comm = res.sub_comm(CommPlane::Combine, 0)?;
    let n = per_rank_window(res, p, u)?;
    for i in 0..c.div_ceil(n) {
        round(&comm, i * n, n.min(c - i * n))?;
    }
    Ok(())
}

impl CollExecutor for AllGatherRingExecutor {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(
            Self::NAME,
            OpType::AllGather,
            param,
            topo,
            super::ring_peers,
        )
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me) = (self.topo.user_rank_size as u64, self.topo.user_rank as u64);
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        ring_rounds(&self.topo, param, res, |comm, e0, w| {
            s.memcpy_async(
                &res.ccl_output.range(b(me * w), b(w))?,
                &param.input.range(b(e0), b(w))?,
            )?;
            RingAllGather {
                output: res.ccl_output.range(0, b(p * w))?,
                output_kind: MemKind::CclOutput,
                output_base: 0,
                slices: slots(p, w, u),
            }
            .run(s, comm)?;
            for q in 0..p {
                s.memcpy_async(
                    &param.output.range(b(q * c + e0), b(w))?,
                    &res.ccl_output.range(b(q * w), b(w))?,
                )?;
            }
            Ok(())
        })
    }
}

impl CollExecutor for ReduceScatterRingExecutor {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(
            Self::NAME,
            OpType::ReduceScatter,
            param,
            topo,
            super::ring_peers,
        )
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me) = (self.topo.user_rank_size as u64, self.topo.user_rank as u64);
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        ring_rounds(&self.topo, param, res, |comm, e0, w| {
            for q in 0..p {
                s.memcpy_async(
                    &res.ccl_input.range(b(q * w), b(w))?,
                    &param.input.range(b(q * c + e0), b(w))?,
                )?;
            }
            RingReduceScatter {
                input: res.ccl_input.range(0, b(p * w))?,
                output: res.ccl_output.range(0, b(p * w))?,
                output_kind: MemKind::CclOutput,
                output_base: 0,
                slices: slots(p, w, u),
                dtype: param.dtype,
                op: param.reduce_op,
            }
            .run(s, comm)?;
            s.memcpy_async(
                &param.output.range(b(e0), b(w))?,
                &res.ccl_input.range(b(me * w), b(w))?,
            )
        })
    }
}
