//! The worked example of `docs/writing-an-executor.md`: a bidirectional
//! ring AllReduce, written only against the public API of hccl-algorithm
//! and hccl-platform, as a crate outside hccl-rs would write it.
//!
//! The data of an op-base round is cut into 2p slices: the first p travel
//! a ring clockwise (send to the right neighbour, receive from the left),
//! the other p the same ring counter-clockwise, both in the same steps.
//! Each half is a ring reduce-scatter followed by a ring allgather, so an
//! AllReduce takes 2(p−1) steps, like the plain ring, but every step uses
//! both links of a rank at once and each link carries half the bytes.
//!
//! The doc quotes this file; `tests/tests/writing_an_executor.rs` checks
//! that every quoted snippet still appears here verbatim, at the lines the
//! doc names, runs the executor on the plan simulator for 1..=64 ranks, for
//! real on threads and processes, and shows the selector choosing it.

use hccl_algorithm::prim::{self, Rx, Tx};
use hccl_algorithm::template::layout::{copy_through, round_capacity, run_op_base_loop};
use hccl_algorithm::template::Slice;
use hccl_algorithm::{
    AlgResourceRequest, AlgResourceResponse, CollExecutor, CommPlane, ExecutorInfo,
    ExecutorRegistry, OpParam, OpType, SingleSubCommTransport, SubCommInfo, TopoInfo, WorkflowMode,
};
use hccl_platform::{
    DataType, DeviceMem, HcclError, LinkHandle, MemKind, ReduceOp, Result, Stream,
};
use std::sync::Arc;

/// The registered name of the bidirectional ring AllReduce.
pub const NAME: &str = "AllReduceBiRingExecutor";

/// The bidirectional ring AllReduce over the whole communicator.
#[derive(Debug)]
pub struct BiRingAllReduce {
    topo: TopoInfo,
}

impl BiRingAllReduce {
    /// The executor for a communicator of topology `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        BiRingAllReduce { topo: topo.clone() }
    }
}

impl CollExecutor for BiRingAllReduce {
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
        if topo.user_rank_size > 1 {
            // links to both ring neighbours; peers write into our CCL buffers
            req.op_transport[CommPlane::Combine as usize].push(SingleSubCommTransport::ring(
                topo.plane_ranks(CommPlane::Combine),
                topo.user_rank,
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
        let ring = BiRing::of(&comm)?;
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let cin = res.ccl_input.range(0, chunk.bytes)?;
            let cout = res.ccl_output.range(0, chunk.bytes)?;
            s.memcpy_async(&cin, &param.input.range(chunk.offset, chunk.bytes)?)?;
            ring.all_reduce(s, (&cin, &cout), (param.dtype, param.reduce_op))?;
            s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &cout)
        })
    }
}

/// The two phases of the AllReduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// p−1 steps; afterwards rank r holds the full reduction of slice r
    /// of each direction.
    ReduceScatter,
    /// p−1 steps; afterwards every rank holds every reduced slice.
    AllGather,
}

/// What one rank moves in one step: for each direction, the slice it
/// sends and the slice it receives (indices into that direction's p
/// slices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moves {
    /// Clockwise: (sent to the right, received from the left).
    pub cw: (usize, usize),
    /// Counter-clockwise: (sent to the left, received from the right).
    pub ccw: (usize, usize),
}

/// The step table: what rank `r` of `p` moves at step `s` (0 ≤ s < p−1)
/// of `phase`. The counter-clockwise ring is the clockwise one mirrored.
pub fn moves(phase: Phase, r: usize, p: usize, s: usize) -> Moves {
    let at = |k: isize| (r as isize + k).rem_euclid(p as isize) as usize;
    let s = s as isize;
    match phase {
        Phase::ReduceScatter => Moves {
            cw: (at(-s - 1), at(-s - 2)),
            ccw: (at(s + 1), at(s + 2)),
        },
        Phase::AllGather => Moves {
            cw: (at(-s), at(-s - 1)),
            ccw: (at(s), at(s + 1)),
        },
    }
}

/// This rank's place on the ring: its index, the ring size and the links
/// to both neighbours (the same link twice on two ranks).
#[derive(Clone, Copy, Debug)]
struct BiRing<'a> {
    r: usize,
    p: usize,
    left: &'a LinkHandle,
    right: &'a LinkHandle,
}

impl<'a> BiRing<'a> {
    fn of(comm: &'a SubCommInfo) -> Result<Self> {
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        Ok(BiRing {
            r: r as usize,
            p: p as usize,
            left: comm.link((r + p - 1) % p)?,
            right: comm.link((r + 1) % p)?,
        })
    }

    /// Enqueues the AllReduce of `cin` (this round's data, reduced in
    /// place) into `cout` (where peers' data lands and the result ends).
    fn all_reduce(
        &self,
        s: &Stream,
        (cin, cout): (&DeviceMem, &DeviceMem),
        how: (DataType, ReduceOp),
    ) -> Result<()> {
        let slices = Slice::split(cin.len(), 2 * self.p);
        let (cw, ccw) = slices.split_at(self.p);
        let out = MemKind::CclOutput; // peers write into our CCL output
        for step in 0..self.p - 1 {
            s.set_step(step as u32);
            let m = moves(Phase::ReduceScatter, self.r, self.p, step);
            let (cw_tx, cw_rx) = (cw[m.cw.0], cw[m.cw.1]);
            let (ccw_tx, ccw_rx) = (ccw[m.ccw.0], ccw[m.ccw.1]);
            let (cw_land, ccw_land) = (cw_rx.of(cout)?, ccw_rx.of(cout)?);
            prim::exchange(
                s,
                &[
                    Rx::at(self.left, &cw_land, out, cw_rx.offset),
                    Rx::at(self.right, &ccw_land, out, ccw_rx.offset),
                ],
                &[
                    Tx::new(self.right, &cw_tx.of(cin)?, out, cw_tx.offset),
                    Tx::new(self.left, &ccw_tx.of(cin)?, out, ccw_tx.offset),
                ],
            )?;
            prim::reduce(s, &cw_rx.of(cin)?, &cw_land, how)?;
            prim::reduce(s, &ccw_rx.of(cin)?, &ccw_land, how)?;
        }
        // this rank's two fully reduced slices join the result
        for mine in [cw[self.r], ccw[self.r]] {
            if mine.len > 0 {
                s.memcpy_async(&mine.of(cout)?, &mine.of(cin)?)?;
            }
        }
        for step in 0..self.p - 1 {
            s.set_step((self.p - 1 + step) as u32);
            let m = moves(Phase::AllGather, self.r, self.p, step);
            let (cw_tx, cw_rx) = (cw[m.cw.0], cw[m.cw.1]);
            let (ccw_tx, ccw_rx) = (ccw[m.ccw.0], ccw[m.ccw.1]);
            prim::exchange(
                s,
                &[
                    Rx::at(self.left, &cw_rx.of(cout)?, out, cw_rx.offset),
                    Rx::at(self.right, &ccw_rx.of(cout)?, out, ccw_rx.offset),
                ],
                &[
                    Tx::new(self.right, &cw_tx.of(cout)?, out, cw_tx.offset),
                    Tx::new(self.left, &ccw_tx.of(cout)?, out, ccw_tx.offset),
                ],
            )?;
        }
        Ok(())
    }
}

/// What the executor declares to the selector: AllReduce on one host of
/// at least three ranks, priced by its α-β-γ terms.
pub fn info() -> ExecutorInfo {
    ExecutorInfo::from_terms(&[OpType::AllReduce], |q| {
        let (p, n) = (q.ranks() as f64, q.bytes as f64);
        let f = (p - 1.0) / p;
        // (steps, bytes on the busiest link, bytes a rank reduces)
        Some((2.0 * (p - 1.0), f * n, f * n))
    })
    .serving(|q| q.hosts() == 1 && q.ranks() >= 3)
}

/// Registers the executor in `registry` under [`NAME`], with [`info`].
pub fn register(registry: &ExecutorRegistry) -> Result<()> {
    registry.register_with(
        NAME,
        Arc::new(|t: &TopoInfo| Box::new(BiRingAllReduce::new(t)) as Box<dyn CollExecutor>),
        info(),
    )
}

/// Registers the executor in the process-wide registry (the one every
/// communicator uses), once however often it is called.
pub fn register_global() -> Result<()> {
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if !*done {
        register(hccl_algorithm::registry())?;
        *done = true;
    }
    Ok(())
}
