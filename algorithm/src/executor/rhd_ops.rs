//! RHD executors for AllGather, ReduceScatter, Broadcast and Reduce, for
//! any rank count (building blocks in `rhd.rs`; AllReduce has its own).
//!
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
//! - **Broadcast**: a binomial tree over the core in XOR space (distance
//!   halving from the root's core rank), with the root first handing the
//!   data to its core rank if it is outside the core and core ranks
//!   handing it on to their fold partners last: log2 m (+1, +1) steps.
//! - **Reduce**: the same tree backwards (distance doubling towards the
//!   root's core rank), after a fold-in and, for a root outside the core,
//!   before a fold-out to it.

use super::rhd::{core_size, doubling, halving, partners, reduce, Groups};
use super::ring_gather_scatter::per_rank_window;
use super::transfer::step;
use super::{round_capacity, run_op_base_loop, CollExecutor, Named};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DeviceMem, HcclError, MemKind, Result};

/// The RHD executors besides AllReduce: (registered name, op).
pub const RHD_EXECUTORS: &[(&str, OpType)] = &[
    ("AllGatherRHDExecutor", OpType::AllGather),
    ("ReduceScatterRHDExecutor", OpType::ReduceScatter),
    ("BroadcastRHDExecutor", OpType::Broadcast),
    ("ReduceRHDExecutor", OpType::Reduce),
];

/// An RHD executor for AllGather, ReduceScatter, Broadcast or Reduce over
/// the flat plane.
#[derive(Debug)]
pub struct RhdExecutor(Named);

/// Where block b of p (each `wb` bytes) sits in the group-major layout of
/// core size m: group b mod m, second within its group if b ≥ m.
fn group_layout(p: u32, m: u32, wb: usize) -> (Groups, impl Fn(u32) -> usize) {
    let groups = Groups::from_sizes((0..m).map(|g| if g + m < p { 2 * wb } else { wb }));
    let starts: Vec<usize> = (0..m).map(|g| groups.start(g)).collect();
    let at = move |b: u32| starts[(b % m) as usize] + if b >= m { wb } else { 0 };
    (groups, at)
}

impl RhdExecutor {
    /// The executor registered as `name` for `op` (one of [`RHD_EXECUTORS`]).
    pub fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
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
        let n = per_rank_window(res, p as u64, u)?;
        for i in 0..c.div_ceil(n) {
            let (e0, w) = (i * n, n.min(c - i * n));
            let (groups, at) = group_layout(p, m, b(w));
            let all = b(p as u64 * w);
            // rank q's window in a user buffer of p blocks
            let user = |mem: &DeviceMem, q: u32| mem.range(b(q as u64 * c + e0), b(w));
            let fold = (r >= m).then(|| comm.link(r - m)).transpose()?;
            let partner = (r + m < p).then(|| comm.link(r + m)).transpose()?;
            if self.0.op == OpType::ReduceScatter {
                let wbuf = res.ccl_input.range(0, all)?;
                for q in 0..p {
                    s.memcpy_async(&wbuf.range(at(q), b(w))?, &user(&param.input, q)?)?;
                }
                s.set_step(0);
                if let Some(l) = fold {
                    step(s, None, Some((l, &wbuf, MemKind::CclOutput, 0)))?;
                    s.set_step(1 + log);
                    step(s, Some(l), None)?;
                    let mine = res.ccl_output.range(at(r), b(w))?;
                    s.memcpy_async(&param.output.range(b(e0), b(w))?, &mine)?;
                    continue;
                }
                let landing = res.ccl_output.range(0, all)?;
                if let Some(l) = partner {
                    step(s, Some(l), None)?;
                    reduce(s, &wbuf, &landing, param.dtype, param.reduce_op)?;
                }
                let how = (param.dtype, param.reduce_op);
                halving(
                    s,
                    comm,
                    m,
                    &groups,
                    &wbuf,
                    &landing,
                    (MemKind::CclOutput, 0),
                    how,
                    1,
                )?;
                s.set_step(1 + log);
                if let Some(l) = partner {
                    let theirs = wbuf.range(at(r + m), b(w))?;
                    step(s, None, Some((l, &theirs, MemKind::CclOutput, at(r + m))))?;
                }
                s.memcpy_async(&param.output.range(b(e0), b(w))?, &wbuf.range(at(r), b(w))?)?;
            } else {
                let wbuf = res.ccl_output.range(0, all)?;
                let mine = param.input.range(b(e0), b(w))?;
                s.set_step(0);
                if let Some(l) = fold {
                    step(s, None, Some((l, &mine, MemKind::CclOutput, at(r))))?;
                    s.set_step(1 + log);
                    step(s, Some(l), None)?;
                } else {
                    s.memcpy_async(&wbuf.range(at(r), b(w))?, &mine)?;
                    if let Some(l) = partner {
                        step(s, Some(l), None)?;
                    }
                    doubling(s, comm, m, &groups, &wbuf, (MemKind::CclOutput, 0), 1)?;
                    s.set_step(1 + log);
                    if let Some(l) = partner {
                        step(s, None, Some((l, &wbuf, MemKind::CclOutput, 0)))?;
                    }
                }
                for q in 0..p {
                    s.memcpy_async(&user(&param.output, q)?, &wbuf.range(at(q), b(w))?)?;
                }
            }
        }
        Ok(())
    }

    /// Broadcast and Reduce: a binomial tree over the core per round.
    fn tree(&self, param: &OpParam, comm: &SubCommInfo, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (r, p, root) = (comm.local_rank, comm.local_rank_size, param.root);
        let m = core_size(p);
        let log = m.trailing_zeros();
        // the root's stand-in in the core
        let core_root = if root < m { root } else { root - m };
        let outside = root >= m;
        let bcast = self.0.op == OpType::Broadcast;
        let how = (param.dtype, param.reduce_op);
        let capacity = round_capacity(res);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            let landing = res.ccl_output.range(0, chunk.bytes)?;
            let user_out = || param.output.range(chunk.offset, chunk.bytes);
            if bcast {
                if r == root {
                    s.memcpy_async(&w, &user_out()?)?;
                }
                // fold-in: a root outside the core hands the data in
                s.set_step(0);
                if outside && r == root {
                    step(s, None, Some((comm.link(r - m)?, &w, MemKind::CclInput, 0)))?;
                } else if outside && r == core_root {
                    step(s, Some(comm.link(r + m)?), None)?;
                }
                let first = outside as u32;
                if r < m {
                    let v = r ^ core_root;
                    let (mut k, mut at) = (m / 2, first);
                    while k >= 1 {
                        s.set_step(at);
                        let l = comm.link(r ^ k)?;
                        if v & (2 * k - 1) == 0 {
                            step(s, None, Some((l, &w, MemKind::CclInput, 0)))?;
                        } else if v & (2 * k - 1) == k {
                            step(s, Some(l), None)?;
                        }
                        k /= 2;
                        at += 1;
                    }
                }
                // fold-out to every rank outside the core but the root
                s.set_step(first + log);
                if r < m && r + m < p && r + m != root {
                    step(s, None, Some((comm.link(r + m)?, &w, MemKind::CclInput, 0)))?;
                } else if r >= m && r != root {
                    step(s, Some(comm.link(r - m)?), None)?;
                }
                if r != root {
                    s.memcpy_async(&user_out()?, &w)?;
                }
                return Ok(());
            }
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            // fold-in: ranks outside the core hand their data in
            s.set_step(0);
            if r >= m {
                step(
                    s,
                    None,
                    Some((comm.link(r - m)?, &w, MemKind::CclOutput, 0)),
                )?;
            } else if r + m < p {
                step(s, Some(comm.link(r + m)?), None)?;
                reduce(s, &w, &landing, how.0, how.1)?;
            }
            let first = (p > m) as u32;
            if r < m {
                let v = r ^ core_root;
                let (mut k, mut at) = (1u32, first);
                while k < m {
                    s.set_step(at);
                    let l = comm.link(r ^ k)?;
                    if v & (2 * k - 1) == k {
                        step(s, None, Some((l, &w, MemKind::CclOutput, 0)))?;
                    } else if v & (2 * k - 1) == 0 {
                        step(s, Some(l), None)?;
                        reduce(s, &w, &landing, how.0, how.1)?;
                    }
                    k *= 2;
                    at += 1;
                }
            }
            // fold-out to a root outside the core
            s.set_step(first + log);
            if outside && r == core_root {
                step(s, None, Some((comm.link(root)?, &w, MemKind::CclOutput, 0)))?;
            } else if outside && r == root {
                step(s, Some(comm.link(core_root)?), None)?;
                s.memcpy_async(&user_out()?, &landing)?;
            }
            if r == root && !outside {
                s.memcpy_async(&user_out()?, &w)?;
            }
            Ok(())
        })
    }
}

impl CollExecutor for RhdExecutor {
    fn name(&self) -> &str {
        self.0.name
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(self.0.name, self.0.op, param, topo, partners)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if param.count == 0 {
            return Ok(());
        }
        if self.0.topo.user_rank_size == 1 {
            return super::copy_through(param, param.input_bytes() as usize);
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
