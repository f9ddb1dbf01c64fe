//! The NHR and NB executors: AllReduce, AllGather, ReduceScatter,
//! Broadcast and Scatter for any rank count in ⌈log2 p⌉ steps per phase
//! (the two algorithms are the templates of [`crate::template::nhr_nb`]).
//!
//! - **ReduceScatter** / **AllGather**: one phase over p blocks, one rank
//!   window each, laid out in rank order in a CCL buffer per op-base round.
//! - **AllReduce**: reduce-scatter then allgather over the round's bytes
//!   cut into p slices, in the CCL input (partials land in the CCL output).
//! - **Scatter**: the root's p windows follow the reduce-scatter trees
//!   backwards, each block once per hop.
//! - **Broadcast**: scatter of the root's data cut into p slices, then
//!   allgather (seed 002: 2⌈log2 p⌉ steps, 2(p−1)/p of the data per rank).

use super::flat::{input_to_output, is_graph, share_user_buffers, FlatExecutor, Named};
use crate::op::{OpParam, OpType};
use crate::resource::AlgResourceResponse;
use crate::template::layout::{
    copy_blocks, copy_through, round_capacity, run_op_base_loop, run_per_rank_rounds, Groups,
};
use crate::template::nhr_nb::{
    all_gather, all_reduce, all_reduce_in, peers, reduce_scatter, scatter, steps, Family,
};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DeviceMem, HcclError, MemKind, Result};

// The registry builds from its own table; its tests and the simulator's
// check against this one, and nothing else needs it.
/// The NHR executors: (registered name, op).
#[cfg(test)]
pub(crate) const NHR_EXECUTORS: &[(&str, OpType)] = &[
    ("AllReduceNHRExecutor", OpType::AllReduce),
    ("AllGatherNHRExecutor", OpType::AllGather),
    ("ReduceScatterNHRExecutor", OpType::ReduceScatter),
    ("BroadcastNHRExecutor", OpType::Broadcast),
    ("ScatterNHRExecutor", OpType::Scatter),
];

/// The NB executors: (registered name, op).
#[cfg(test)]
pub(crate) const NB_EXECUTORS: &[(&str, OpType)] = &[
    ("AllReduceNBExecutor", OpType::AllReduce),
    ("AllGatherNBExecutor", OpType::AllGather),
    ("ReduceScatterNBExecutor", OpType::ReduceScatter),
    ("BroadcastNBExecutor", OpType::Broadcast),
    ("ScatterNBExecutor", OpType::Scatter),
];

/// An NHR or NB executor for one op over the flat plane.
#[derive(Debug)]
pub(crate) struct NonuniformExecutor {
    named: Named,
    fam: Family,
}

impl NonuniformExecutor {
    /// The NHR executor registered as `name` for `op` (one of `NHR_EXECUTORS`).
    pub(crate) fn nhr(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        NonuniformExecutor {
            named: Named::new(name, op, topo),
            fam: Family::Nhr,
        }
    }

    /// The NB executor registered as `name` for `op` (one of `NB_EXECUTORS`).
    pub(crate) fn nb(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        NonuniformExecutor {
            named: Named::new(name, op, topo),
            fam: Family::Nb,
        }
    }

    /// ReduceScatter, AllGather and Scatter: rounds of one window per rank
    /// block, the p windows in rank order.
    fn windows(
        &self,
        param: &OpParam,
        comm: &SubCommInfo,
        res: &AlgResourceResponse,
    ) -> Result<()> {
        let s = &param.stream;
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        run_per_rank_rounds(res, (p as u64, c, u), |win| {
            let (e0, w) = (win.first, win.len);
            let groups = Groups::slots(p as u64, w, u);
            let all = b(p as u64 * w);
            // the ranks' windows in a user buffer of p blocks (rank q's at
            // q·c + e0), and rank q's in the CCL buffer (slot q of w)
            let (ub, us) = (b(e0), b(c));
            let slot = |mem: &DeviceMem, q: u32| mem.range(groups.start(q), b(w));
            match self.named.op {
                OpType::ReduceScatter => {
                    let wbuf = res.ccl_input.range(0, all)?;
                    copy_blocks(s, p, b(w), (&wbuf, 0, b(w)), (&*param.input, ub, us))?;
                    let landing = (&res.ccl_output, (MemKind::CclOutput, 0));
                    let how = (param.dtype, param.reduce_op);
                    reduce_scatter(s, comm, self.fam, &groups, &wbuf, landing, how, 0)?;
                    s.memcpy_async(&param.output.range(b(e0), b(w))?, &slot(&wbuf, r)?)?;
                }
                OpType::AllGather => {
                    let wbuf = res.ccl_output.range(0, all)?;
                    s.memcpy_async(&slot(&wbuf, r)?, &param.input.range(b(e0), b(w))?)?;
                    all_gather(
                        s,
                        comm,
                        self.fam,
                        &groups,
                        &wbuf,
                        (MemKind::CclOutput, 0),
                        0,
                    )?;
                    copy_blocks(s, p, b(w), (&*param.output, ub, us), (&wbuf, 0, b(w)))?;
                }
                _ => {
                    let wbuf = res.ccl_output.range(0, all)?;
                    let root = param.root;
                    if r == root {
                        copy_blocks(s, p, b(w), (&wbuf, 0, b(w)), (&*param.input, ub, us))?;
                    }
                    scatter(
                        s,
                        comm,
                        self.fam,
                        &groups,
                        &wbuf,
                        (MemKind::CclOutput, 0),
                        root,
                        0,
                    )?;
                    s.memcpy_async(&param.output.range(b(e0), b(w))?, &slot(&wbuf, r)?)?;
                }
            }
            Ok(())
        })
    }

    /// AllReduce and Broadcast: rounds of the message cut into p slices.
    /// AllGather in graph mode: one round over the whole user output, the
    /// blocks written straight into the peers' outputs.
    fn windows_graph(&self, param: &OpParam, comm: &SubCommInfo) -> Result<()> {
        let s = &param.stream;
        let (r, p) = (comm.local_rank as u64, comm.local_rank_size as u64);
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        let own = param.input.range(0, b(c))?;
        let slot = param.output.range(b(r * c), b(c))?;
        if !own.same_range(&slot) {
            s.memcpy_async(&slot, &own)?;
        }
        let groups = Groups::slots(p, c, u);
        let out = param.output.range(0, b(p * c))?;
        all_gather(
            s,
            comm,
            self.fam,
            &groups,
            &out,
            (MemKind::ParamOutput, 0),
            0,
        )
    }

    fn sliced(&self, param: &OpParam, comm: &SubCommInfo, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        let fam = self.fam;
        let after = steps(p);
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let user_out = param.output.range(chunk.offset, chunk.bytes)?;
            let graph = is_graph(param);
            if self.named.op == OpType::AllReduce && graph {
                // on the user output, partials landing in the CCL output
                let input = param.input.range(chunk.offset, chunk.bytes)?;
                if !input.same_range(&user_out) {
                    s.memcpy_async(&user_out, &input)?;
                }
                let landing = res.ccl_output.range(0, chunk.bytes)?;
                let at = (
                    (MemKind::ParamOutput, chunk.offset),
                    (MemKind::CclOutput, 0),
                );
                let how = (param.dtype, param.reduce_op);
                return all_reduce_in(s, comm, fam, (&user_out, &landing), at, how);
            }
            if self.named.op == OpType::AllReduce {
                let w = res.ccl_input.range(0, chunk.bytes)?;
                s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
                let how = (param.dtype, param.reduce_op);
                all_reduce(s, comm, fam, (&w, &res.ccl_output, 0), how)?;
                return s.memcpy_async(&user_out, &w);
            }
            let groups = Groups::split(chunk.bytes, p as usize);
            // broadcast: the root's buffer is its input and output; in
            // graph mode the blocks travel between the user outputs
            let (w, at) = if graph {
                (user_out.clone(), (MemKind::ParamOutput, chunk.offset))
            } else {
                (
                    res.ccl_output.range(0, chunk.bytes)?,
                    (MemKind::CclOutput, 0),
                )
            };
            if r == param.root && !graph {
                s.memcpy_async(&w, &user_out)?;
            }
            scatter(s, comm, fam, &groups, &w, at, param.root, 0)?;
            all_gather(s, comm, fam, &groups, &w, at, after)?;
            if r != param.root && !graph {
                s.memcpy_async(&user_out, &w)?;
            }
            Ok(())
        })
    }
}

impl FlatExecutor for NonuniformExecutor {
    fn named(&self) -> &Named {
        &self.named
    }
    /// AllReduce, AllGather and Broadcast run on the user buffers in
    /// graph mode (ReduceScatter and Scatter stage: their working buffer
    /// is p blocks, more than the user output holds).
    fn graph(&self) -> bool {
        matches!(
            self.named.op,
            OpType::AllReduce | OpType::AllGather | OpType::Broadcast
        )
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        peers(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if param.count == 0 {
            return Ok(());
        }
        if self.named.topo.user_rank_size == 1 {
            return copy_through(param, param.input_bytes() as usize);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let graph = is_graph(param);
        if graph {
            let (r, p) = (comm.local_rank, comm.local_rank_size);
            share_user_buffers(param, &comm, &peers(r, p))?;
            if self.named.op == OpType::Broadcast && r == param.root {
                input_to_output(param, param.input_bytes() as usize)?;
            }
        }
        match self.named.op {
            // one round of the whole op in the user output
            OpType::AllGather if graph => self.windows_graph(param, &comm),
            OpType::AllGather | OpType::ReduceScatter | OpType::Scatter => {
                self.windows(param, &comm, res)
            }
            OpType::AllReduce | OpType::Broadcast => self.sliced(param, &comm, res),
            op => Err(HcclError::internal(format!(
                "{} cannot run {op}",
                self.named.name
            ))),
        }
    }
}
