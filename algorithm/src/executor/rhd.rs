//! RHD executors over the flat plane, for any rank count (the algorithms
//! are the templates of [`crate::template::rhd`]; m is the largest power
//! of two ≤ p):
//!
//! - **AllReduce**: recursive halving (reduce-scatter) then recursive
//!   doubling (allgather), 2·log2(m) steps, plus one fold-in and one
//!   fold-out step when p is not a power of two. Per op-base round the
//!   user data is staged in the CCL input (the working buffer W); halving
//!   steps land the partner's half in the CCL output and reduce it into W;
//!   doubling steps write owned blocks straight into the partner's W.
//! - **ReduceScatter**: fold-in (rank r ≥ m hands its whole input to
//!   r − m, which reduces it), recursive halving over m groups, fold-out
//!   (core rank r sends block r + m to rank r + m): log2 m (+2) steps.
//! - **AllGather**: fold-in (rank r ≥ m hands its block to r − m),
//!   recursive doubling over m groups, fold-out (core rank r sends
//!   everything to r + m): log2 m (+2) steps.
//!
//!   Group g of both is rank blocks g and g + m, so the blocks a core rank
//!   stands for are adjacent: per op-base round the p blocks are laid out
//!   group by group in the CCL buffer and put back in rank order on the
//!   way out.
//! - **Broadcast** / **Reduce**: the binomial trees over the core, per
//!   op-base round in the CCL input.

use super::flat::{is_graph, share_user_buffers, FlatExecutor, Named};
use crate::op::{OpParam, OpType};
use crate::prim::{self, Rx, Tx};
use crate::resource::AlgResourceResponse;
use crate::template::layout::{
    copy_blocks, copy_through, round_capacity, run_op_base_loop, run_per_rank_rounds, Groups,
};
use crate::template::rhd::{self, core_size, doubling, halving, partners};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{HcclError, MemKind, Result};

/// RHD AllReduce over the flat plane.
#[derive(Debug)]
pub(crate) struct AllReduceRhdExecutor(pub(crate) Named);

// The registry builds from its own table; its tests and the simulator's
// check against this one, and nothing else needs it.
/// The RHD executors besides AllReduce: (registered name, op).
#[cfg(test)]
pub(crate) const RHD_EXECUTORS: &[(&str, OpType)] = &[
    ("AllGatherRHDExecutor", OpType::AllGather),
    ("ReduceScatterRHDExecutor", OpType::ReduceScatter),
    ("BroadcastRHDExecutor", OpType::Broadcast),
    ("ReduceRHDExecutor", OpType::Reduce),
];

/// An RHD executor for AllGather, ReduceScatter, Broadcast or Reduce over
/// the flat plane.
#[derive(Debug)]
pub(crate) struct RhdExecutor(Named);

impl FlatExecutor for AllReduceRhdExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    /// Runs on the user buffers in graph mode.
    fn graph(&self) -> bool {
        true
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        partners(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let bytes = param.input_bytes() as usize;
        if self.0.topo.user_rank_size == 1 {
            return copy_through(param, bytes);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let how = (param.dtype, param.reduce_op);
        if is_graph(param) {
            // on the user output (the input copied in once per round),
            // partials landing in the CCL output: one copy per round
            // instead of two
            let (r, p) = (comm.local_rank, comm.local_rank_size);
            share_user_buffers(param, &comm, &partners(r, p))?;
            return run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
                let w = param.output.range(chunk.offset, chunk.bytes)?;
                let input = param.input.range(chunk.offset, chunk.bytes)?;
                if !input.same_range(&w) {
                    s.memcpy_async(&w, &input)?;
                }
                let landing = res.ccl_output.range(0, chunk.bytes)?;
                let at = (
                    (MemKind::ParamOutput, chunk.offset),
                    (MemKind::CclOutput, 0),
                );
                rhd::all_reduce_in(s, &comm, (&w, &landing), at, how)
            });
        }
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            rhd::all_reduce(s, &comm, (&w, &res.ccl_output, 0), how)?;
            s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &w)
        })
    }
}

/// Where block b of p (each `wb` bytes) sits in the group-major layout of
/// core size m: group b mod m, second within its group if b ≥ m.
fn group_layout(p: u32, m: u32, wb: usize) -> (Groups, impl Fn(u32) -> usize) {
    // groups g < p − m hold two blocks (g and g + m), the others one
    let groups = Groups::two_sizes(m, p - m, (2 * wb, wb), p as usize * wb);
    let starts = groups.clone();
    let at = move |b: u32| starts.start(b % m) + if b >= m { wb } else { 0 };
    (groups, at)
}

impl RhdExecutor {
    /// The executor registered as `name` for `op` (one of `RHD_EXECUTORS`).
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        RhdExecutor(Named::new(name, op, topo))
    }

    /// ReduceScatter and AllGather: rounds of one window per rank block.
    fn scattered(
        &self,
        param: &OpParam,
        comm: &SubCommInfo,
        res: &AlgResourceResponse,
    ) -> Result<()> {
        let s = &param.stream;
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        let m = core_size(p);
        let log = m.trailing_zeros();
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        let how = (param.dtype, param.reduce_op);
        run_per_rank_rounds(res, (p as u64, c, u), |win| {
            let (e0, w) = (win.first, win.len);
            let (groups, at) = group_layout(p, m, b(w));
            let all = b(p as u64 * w);
            // The ranks' windows in the user buffer (rank q's at q·c + e0)
            // and in the group-major layout, as three affine runs of
            // ranks: (count, (layout base, stride), (user base, stride)).
            // Blocks q < p − m share group q with block q + m (first of
            // two), blocks p − m..m have a group each, blocks q ≥ m are
            // second in group q − m; in ascending q, as the copies were.
            let (wb, cb) = (b(w), b(c));
            let big = p - m;
            let user = |q: u32| (b(e0) + q as usize * cb, cb);
            let runs = [
                (big, (at(0), 2 * wb), user(0)),
                (m - big, (at(big), wb), user(big)),
                (big, (at(m), 2 * wb), user(m)),
            ];
            let fold = (r >= m).then(|| comm.link(r - m)).transpose()?;
            let partner = (r + m < p).then(|| comm.link(r + m)).transpose()?;
            if self.0.op == OpType::ReduceScatter {
                let wbuf = res.ccl_input.range(0, all)?;
                for (n, (at, step), (ub, us)) in runs {
                    copy_blocks(s, n, b(w), (&wbuf, at, step), (&*param.input, ub, us))?;
                }
                s.set_step(0);
                if let Some(l) = fold {
                    prim::send(s, Tx::new(l, &wbuf, MemKind::CclOutput, 0))?;
                    s.set_step(1 + log);
                    prim::recv(s, Rx::new(l))?;
                    let mine = res.ccl_output.range(at(r), b(w))?;
                    return s.memcpy_async(&param.output.range(b(e0), b(w))?, &mine);
                }
                let landing = res.ccl_output.range(0, all)?;
                if let Some(l) = partner {
                    prim::recv_reduce(s, Rx::new(l), (&wbuf, &landing), how)?;
                }
                let landing_at = (MemKind::CclOutput, 0);
                halving(s, comm, m, &groups, &wbuf, &landing, landing_at, how, 1)?;
                s.set_step(1 + log);
                if let Some(l) = partner {
                    let theirs = wbuf.range(at(r + m), b(w))?;
                    prim::send(s, Tx::new(l, &theirs, MemKind::CclOutput, at(r + m)))?;
                }
                s.memcpy_async(&param.output.range(b(e0), b(w))?, &wbuf.range(at(r), b(w))?)
            } else {
                let wbuf = res.ccl_output.range(0, all)?;
                let mine = param.input.range(b(e0), b(w))?;
                s.set_step(0);
                if let Some(l) = fold {
                    prim::send(s, Tx::new(l, &mine, MemKind::CclOutput, at(r)))?;
                    s.set_step(1 + log);
                    prim::recv(s, Rx::new(l))?;
                } else {
                    s.memcpy_async(&wbuf.range(at(r), b(w))?, &mine)?;
                    if let Some(l) = partner {
                        prim::recv(s, Rx::new(l))?;
                    }
                    doubling(s, comm, m, &groups, &wbuf, (MemKind::CclOutput, 0), 1)?;
                    s.set_step(1 + log);
                    if let Some(l) = partner {
                        prim::send(s, Tx::new(l, &wbuf, MemKind::CclOutput, 0))?;
                    }
                }
                for (n, (at, step), (ub, us)) in runs {
                    copy_blocks(s, n, b(w), (&*param.output, ub, us), (&wbuf, at, step))?;
                }
                Ok(())
            }
        })
    }

    /// Broadcast and Reduce: a binomial tree over the core per round.
    fn tree(&self, param: &OpParam, comm: &SubCommInfo, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (r, root) = (comm.local_rank, param.root);
        let outside = root >= core_size(comm.local_rank_size);
        let how = (param.dtype, param.reduce_op);
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            let landing = res.ccl_output.range(0, chunk.bytes)?;
            let user_out = || param.output.range(chunk.offset, chunk.bytes);
            if self.0.op == OpType::Broadcast {
                if r == root {
                    s.memcpy_async(&w, &user_out()?)?;
                }
                rhd::broadcast(s, comm, &w, root)?;
                if r != root {
                    s.memcpy_async(&user_out()?, &w)?;
                }
                return Ok(());
            }
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            rhd::reduce(s, comm, (&w, &landing), root, how)?;
            if r == root {
                // a root outside the core received the result in its landing area
                let result = if outside { &landing } else { &w };
                s.memcpy_async(&user_out()?, result)?;
            }
            Ok(())
        })
    }
}

impl FlatExecutor for RhdExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        partners(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if param.count == 0 {
            return Ok(());
        }
        if self.0.topo.user_rank_size == 1 {
            return copy_through(param, param.input_bytes() as usize);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        match self.0.op {
            OpType::AllGather | OpType::ReduceScatter => self.scattered(param, &comm, res),
            OpType::Broadcast | OpType::Reduce => self.tree(param, &comm, res),
            op => Err(HcclError::internal(format!(
                "{} cannot run {op}",
                self.0.name
            ))),
        }
    }
}
