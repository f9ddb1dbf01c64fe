//! Ring executors over the flat plane (neighbours only; bandwidth-optimal
//! for large messages), staging each op-base round through the CCL buffers
//! around the templates of [`crate::template::ring`] and
//! [`crate::template::chain`]:
//!
//! - **AllReduce** per round: user input → CCL input, ring reduce-scatter
//!   (peers' partials land in the CCL output), the reduced slice copied
//!   into the CCL output, ring allgather there, CCL output → user output.
//!   Traffic per rank: 2(p−1)/p of the data, in 2(p−1) steps.
//! - **AllGather** / **ReduceScatter** per round: each rank's window of w
//!   elements is staged into slot r of a CCL buffer laid out as p slots of
//!   w elements, the ring template runs over the slots, and the result is
//!   copied out (each rank sends (p−1)/p of the data in p−1 steps).
//! - **Broadcast** is the pipelined chain from the root; **Reduce** the
//!   chain run backwards, starting at root+1 and ending at the root, each
//!   rank reducing the arriving segment into its own before passing it on
//!   (2(p−1) steps per round, every link carries the data once).
//! - **Scatter** sends the root's p−1 blocks down the chain root → root+1
//!   → …, farthest destination first, each rank forwarding the block it got
//!   in the previous step: p−1 steps, each link carrying one block per step.
//!   **Gather** is the mirror: every rank passes its own block and then the
//!   blocks arriving from farther ranks towards the root, p−1 steps. Both
//!   stage nothing: blocks leave from the user input and arrive in slot t
//!   (the destination's position along the chain) of each rank's CCL
//!   output, p slots per op-base round.

use super::flat::{input_to_output, is_graph, ring_peers, share_user_buffers, FlatExecutor, Named};
use super::issue_all;
use crate::op::{OpParam, OpType};
use crate::prim::{self, Rx, Tx};
use crate::resource::AlgResourceResponse;
use crate::template::layout::{
    copy_blocks, copy_through, round_capacity, run_op_base_loop, run_per_rank_rounds, slots,
    slots_shared, Chunk, OpBaseIo, PerRankWindows, Slice, Window, PIPELINE_CHUNK_BYTES,
};
use crate::template::{chain, ring, RingAllGather, RingReduceScatter};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use crate::StagedOp;
use hccl_platform::{DataType, DeviceMem, HcclError, MemKind, ReduceOp, Result, Stream};

/// Ring AllReduce over the flat (`Combine`) plane.
#[derive(Debug)]
pub(crate) struct AllReduceRingExecutor(pub(crate) Named);

/// Ring AllGather over the flat plane.
#[derive(Debug)]
pub(crate) struct AllGatherRingExecutor(pub(crate) Named);

/// Ring ReduceScatter over the flat plane.
#[derive(Debug)]
pub(crate) struct ReduceScatterRingExecutor(pub(crate) Named);

/// Ring (chain) Broadcast over the flat plane.
#[derive(Debug)]
pub(crate) struct BroadcastRingExecutor(pub(crate) Named);

// The registry builds from its own table; its tests and the simulator's
// check against this one, and nothing else needs it.
/// The rooted ring executors: (registered name, op).
#[cfg(test)]
pub(crate) const RING_ROOTED_EXECUTORS: &[(&str, OpType)] = &[
    ("ReduceRingExecutor", OpType::Reduce),
    ("ScatterRingExecutor", OpType::Scatter),
    ("GatherRingExecutor", OpType::Gather),
];

/// A ring executor for Reduce, Scatter or Gather over the flat plane.
#[derive(Debug)]
pub(crate) struct RingRootedExecutor(Named);

impl RingRootedExecutor {
    /// The executor registered as `name` for `op` (one of
    /// `RING_ROOTED_EXECUTORS`).
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        RingRootedExecutor(Named::new(name, op, topo))
    }
}

impl FlatExecutor for AllReduceRingExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    /// Runs on the user buffers in graph mode.
    fn graph(&self) -> bool {
        true
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        ring_peers(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if issue_all(self.stages(param, res)?)? {
            return Ok(());
        }
        if self.0.topo.user_rank_size == 1 {
            return copy_through(param, param.input_bytes() as usize);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        all_reduce_graph(param, res, &comm)
    }
    /// Op-base on more than one rank: per round a stage for the copy in
    /// with the first ring step, one per ring step, the copy out with the last.
    fn stages(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        if self.0.topo.user_rank_size == 1 || is_graph(param) {
            return Ok(None);
        }
        Ok(Some(Box::new(RingAllReduceRounds {
            io: OpBaseIo::new(param, res)?,
            comm: res.sub_comm(CommPlane::Combine, 0)?,
            round: None,
        })))
    }
}

/// The op-base ring AllReduce, a stage at a time (see
/// [`crate::CollExecutor::staged`]): per round of the op-base loop, user
/// input → CCL input, the ring allreduce's stages with the partials
/// landing in the CCL output, CCL output → user output.
struct RingAllReduceRounds {
    io: OpBaseIo,
    comm: SubCommInfo,
    /// The round being issued and its next stage.
    round: Option<(Chunk, ring::RingAllReduce, usize)>,
}

impl StagedOp for RingAllReduceRounds {
    fn issue_next(&mut self) -> Result<bool> {
        if self.round.is_none() {
            let Some((chunk, cin, cout)) = self.io.next_round()? else {
                return Ok(false);
            };
            let at = (MemKind::CclOutput, 0);
            let ar = ring::RingAllReduce::new(&self.comm, (&cin, &cout), at, self.io.how);
            self.round = Some((chunk, ar, 0));
        }
        let (chunk, ar, next) = self.round.as_mut().expect("a round is being issued");
        ar.stage(&self.io.stream, &self.comm, *next)?;
        *next += 1;
        if *next == ar.stages() {
            self.io.copy_out(chunk)?;
            self.round = None;
        }
        Ok(true)
    }
}

/// The ring AllReduce in graph mode, on the user buffers: the input is
/// copied into the output once, the reduce-scatter reduces there with the
/// partials landing in the CCL output (the peer-addressable scratch the
/// user's buffers do not offer: the input is read-only), and the
/// allgather writes each reduced slice straight into the neighbour's
/// output. Per round one copy, against op-base's two copies and the
/// slice copy between the phases.
fn all_reduce_graph(param: &OpParam, res: &AlgResourceResponse, comm: &SubCommInfo) -> Result<()> {
    let s = &param.stream;
    let (r, p) = (comm.local_rank, comm.local_rank_size);
    share_user_buffers(param, comm, &ring_peers(r, p))?;
    let how = (param.dtype, param.reduce_op);
    run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
        let w = param.output.range(chunk.offset, chunk.bytes)?;
        let input = param.input.range(chunk.offset, chunk.bytes)?;
        if !input.same_range(&w) {
            s.memcpy_async(&w, &input)?;
        }
        let slices = Slice::split(chunk.bytes, p as usize);
        let landing = res.ccl_output.range(0, chunk.bytes)?;
        let rs = (w.clone(), landing, slices.clone());
        RingReduceScatter::new(rs, (MemKind::CclOutput, 0), how).run(s, comm)?;
        RingAllGather::new((w, slices), (MemKind::ParamOutput, chunk.offset)).run(s, comm)
    })
}

/// The op-base ring AllGather or ReduceScatter: its stages
/// ([`RingWindowRounds`]) issued whole, or where no ring runs, nothing for
/// no elements and a local copy on one rank.
fn run_window_rounds(named: &Named, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
    if issue_all(RingWindowRounds::staged(named, param, res)?)? {
        return Ok(());
    }
    let (c, u) = (param.count, param.dtype.size() as u64);
    if c > 0 && named.topo.user_rank_size == 1 {
        return copy_through(param, (c * u) as usize);
    }
    Ok(())
}

impl FlatExecutor for AllGatherRingExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    /// Runs on the user buffers in graph mode.
    fn graph(&self) -> bool {
        true
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        ring_peers(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me) = (
            self.0.topo.user_rank_size as u64,
            self.0.topo.user_rank as u64,
        );
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        if is_graph(param) && p > 1 && c > 0 {
            // one round in the user output: each rank's block goes
            // straight into the neighbour's output, p−1 steps
            let comm = res.sub_comm(CommPlane::Combine, 0)?;
            share_user_buffers(param, &comm, &ring_peers(me as u32, p as u32))?;
            let (own, slot) = (
                param.input.range(0, b(c))?,
                param.output.range(b(me * c), b(c))?,
            );
            if !own.same_range(&slot) {
                s.memcpy_async(&slot, &own)?;
            }
            let out = (param.output.range(0, b(p * c))?, slots(p, c, u));
            return RingAllGather::new(out, (MemKind::ParamOutput, 0)).run(s, &comm);
        }
        run_window_rounds(&self.0, param, res)
    }
    /// Op-base on more than one rank, per round: the copy of this rank's
    /// window into its slot, the p−1 ring steps, the p slots' copies out.
    fn stages(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        RingWindowRounds::staged(&self.0, param, res)
    }
}

impl FlatExecutor for ReduceScatterRingExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        ring_peers(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        run_window_rounds(&self.0, param, res)
    }
    /// Op-base on more than one rank, per round: the p blocks' windows
    /// copied into their slots, the p−1 ring steps, this rank's reduced
    /// slot copied out.
    fn stages(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        RingWindowRounds::staged(&self.0, param, res)
    }
}

/// The op-base ring AllGather or ReduceScatter, a stage at a time (see
/// [`crate::CollExecutor::staged`]): per round (a window of `w` elements
/// of every rank block, [`run_per_rank_rounds`]) the staging copies in,
/// the ring's p−1 steps over p slots of `w` elements in the CCL buffers,
/// the copies out; one copy or one ring step per stage. A round of whole
/// blocks (`w` = count) copies the p blocks in one task: slots and user
/// blocks are then the same run of bytes.
///
/// - AllGather: this rank's window → its slot of the CCL output; the ring
///   allgather there; every slot → its block of the user output.
/// - ReduceScatter: every block's window → its slot of the CCL input; the
///   ring reduce-scatter (partials landing in the CCL output); this
///   rank's slot → the user output.
struct RingWindowRounds {
    stream: Stream,
    comm: SubCommInfo,
    gather: bool,
    input: DeviceMem,
    output: DeviceMem,
    /// The CCL input and output.
    ccl: (DeviceMem, DeviceMem),
    how: (DataType, ReduceOp),
    /// This rank, ranks, elements per rank block, bytes per element.
    me: u64,
    p: u64,
    c: u64,
    u: u64,
    windows: PerRankWindows,
    /// The round being issued, its ring, and its next stage.
    round: Option<(Window, WindowRing, u64)>,
}

/// The ring template of one [`RingWindowRounds`] round.
enum WindowRing {
    Gather(RingAllGather),
    Scatter(RingReduceScatter),
}

impl RingWindowRounds {
    /// The stages of `param` (AllGather or ReduceScatter) in op-base mode
    /// on more than one rank, else `None`.
    fn staged(
        named: &Named,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        let (p, me) = (
            named.topo.user_rank_size as u64,
            named.topo.user_rank as u64,
        );
        let (c, u) = (param.count, param.dtype.size() as u64);
        if is_graph(param) || p == 1 || c == 0 {
            return Ok(None);
        }
        Ok(Some(Box::new(RingWindowRounds {
            stream: param.stream.clone().into_owned(),
            comm: res.sub_comm(CommPlane::Combine, 0)?,
            gather: named.op == OpType::AllGather,
            input: param.input.clone().into_owned(),
            output: param.output.clone().into_owned(),
            ccl: (res.ccl_input.clone(), res.ccl_output.clone()),
            how: (param.dtype, param.reduce_op),
            me,
            p,
            c,
            u,
            windows: PerRankWindows::new(res, (p, c, u))?,
            round: None,
        })))
    }
}

impl StagedOp for RingWindowRounds {
    fn issue_next(&mut self) -> Result<bool> {
        let (p, c) = (self.p, self.c);
        let u = self.u;
        let b = move |e: u64| (e * u) as usize;
        if self.round.is_none() {
            let Some(win) = self.windows.next() else {
                return Ok(false);
            };
            let w = win.len;
            let (cin, cout) = &self.ccl;
            let slots = slots_shared(p, w, self.u);
            let at = (MemKind::CclOutput, 0);
            let ring = if self.gather {
                WindowRing::Gather(RingAllGather::new((cout.range(0, b(p * w))?, slots), at))
            } else {
                let bufs = (cin.range(0, b(p * w))?, cout.range(0, b(p * w))?, slots);
                WindowRing::Scatter(RingReduceScatter::new(bufs, at, self.how))
            };
            self.round = Some((win, ring, 0));
        }
        let (win, ring, next) = self.round.as_mut().expect("a round is being issued");
        let (e0, w, i) = (win.first, win.len, *next);
        *next += 1;
        // stages: the copies in, p − 1 ring steps, the copies out; the p
        // blocks' copies are one when the round holds whole blocks (the
        // slots and the user blocks are then one run on both sides)
        let blocks = if w == c { 1 } else { p };
        let (copies_in, copies_out) = if self.gather {
            (1, blocks)
        } else {
            (blocks, 1)
        };
        let s = &self.stream;
        let (cin, cout) = &self.ccl;
        // blocks first.. of the p (all when they are one run): each one's
        // window of the user buffer (stride c) and its slot (stride w)
        let copy = |dst_user: bool, user: &DeviceMem, slot: &DeviceMem, q: u64| {
            let (first, n) = if blocks == 1 { (0, p) } else { (q, 1) };
            let user = (user, b(first * c + e0), b(c));
            let slot = (slot, b(first * w), b(w));
            let (dst, src) = if dst_user { (user, slot) } else { (slot, user) };
            copy_blocks(s, n as u32, b(w), dst, src)
        };
        if i < copies_in {
            if self.gather {
                let me = self.me;
                s.memcpy_async(
                    &cout.range(b(me * w), b(w))?,
                    &self.input.range(b(e0), b(w))?,
                )?;
            } else {
                copy(false, &self.input, cin, i)?;
            }
        } else if i < copies_in + p - 1 {
            let step = (i - copies_in) as usize;
            match ring {
                WindowRing::Gather(g) => g.step(s, &self.comm, step)?,
                WindowRing::Scatter(r) => r.step(s, &self.comm, step)?,
            }
        } else {
            let q = i - copies_in - (p - 1);
            if self.gather {
                copy(true, &self.output, cout, q)?;
            } else {
                let me = self.me;
                s.memcpy_async(
                    &self.output.range(b(e0), b(w))?,
                    &cin.range(b(me * w), b(w))?,
                )?;
            }
            if q + 1 == copies_out {
                self.round = None;
            }
        }
        Ok(true)
    }
}

impl FlatExecutor for BroadcastRingExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    /// Runs on the user buffers in graph mode.
    fn graph(&self) -> bool {
        true
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        ring_peers(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me) = (self.0.topo.user_rank_size, self.0.topo.user_rank);
        if p == 1 || param.count == 0 {
            return Ok(());
        }
        // position along the chain, root first
        let pos = (me + p - param.root) % p;
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let links = (comm.link((me + p - 1) % p)?, comm.link((me + 1) % p)?);
        if is_graph(param) {
            // the chain runs in the user buffers: the root's input (its
            // output, if the op is not in place) is passed down segment
            // by segment straight into each next rank's output
            share_user_buffers(param, &comm, &ring_peers(me, p))?;
            if pos == 0 {
                input_to_output(param, param.input_bytes() as usize)?;
            }
            return run_op_base_loop(param, res, PIPELINE_CHUNK_BYTES, |chunk, _| {
                let user = param.output.range(chunk.offset, chunk.bytes)?;
                let at = (&user, MemKind::ParamOutput, chunk.offset);
                chain::run_in(s, (pos, p), links, at, None)
            });
        }
        let capacity = res.ccl_input.len().min(PIPELINE_CHUNK_BYTES);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            let user = param.output.range(chunk.offset, chunk.bytes)?;
            if pos == 0 {
                s.memcpy_async(&w, &user)?;
            }
            chain::run(s, (pos, p), links, &w, None)?;
            if pos > 0 {
                s.memcpy_async(&user, &w)?;
            }
            Ok(())
        })
    }
}

impl RingRootedExecutor {
    fn reduce(&self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me, root) = (
            self.0.topo.user_rank_size,
            self.0.topo.user_rank,
            param.root,
        );
        // the chain starts after the root and ends at it
        let pos = (me + 2 * p - root - 1) % p;
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let links = (comm.link((me + p - 1) % p)?, comm.link((me + 1) % p)?);
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            let how = (&res.ccl_output, param.dtype, param.reduce_op);
            chain::run(s, (pos, p), links, &w, Some(how))?;
            if me == root {
                s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &w)?;
            }
            Ok(())
        })
    }

    /// Scatter and gather: one block per link per step along the chain.
    fn blocks(&self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (p, me, root) = (
            self.0.topo.user_rank_size,
            self.0.topo.user_rank,
            param.root,
        );
        let (p64, c, u) = (p as u64, param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        // position along the chain, root first
        let j = (me + p - root) % p;
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let left = comm.link((me + p - 1) % p)?;
        let right = comm.link((me + 1) % p)?;
        let scatter = self.0.op == OpType::Scatter;
        // scatter flows away from the root (to the right), gather towards it
        let (up, down) = if scatter {
            (left, right)
        } else {
            (right, left)
        };
        // user block of chain position t
        let user = |t: u32| ((root + t) % p) as u64 * c;
        run_per_rank_rounds(res, (p64, c, u), |win| {
            let (i, e0, w) = (win.index, win.first, win.len);
            let slot = slots(p64, w, u);
            let at = |t: u32| res.ccl_output.range(slot[t as usize].offset, b(w));
            if j == 0 {
                // the root's own block
                let (src, dst) = if scatter {
                    (user(0) + e0, e0)
                } else {
                    (e0, user(0) + e0)
                };
                s.memcpy_async(
                    &param.output.range(b(dst), b(w))?,
                    &param.input.range(b(src), b(w))?,
                )?;
            }
            for k in 0..p - 1 {
                s.set_step(i as u32 * (p - 1) + k);
                // which chain position's block arrives and which leaves
                let (recv, send) = if scatter {
                    (
                        (j >= 1 && k + 1 >= j).then(|| p + j - 2 - k),
                        (j + 1 < p && k >= j).then(|| p + j - 1 - k),
                    )
                } else {
                    (
                        (j + 1 + k < p).then_some(j + 1 + k),
                        (j >= 1 && j + k < p).then_some(j + k),
                    )
                };
                // a block leaves from the user input on its first hop
                let send = match send {
                    Some(t) => {
                        let src = if scatter && j == 0 {
                            param.input.range(b(user(t) + e0), b(w))?
                        } else if !scatter && k == 0 {
                            param.input.range(b(e0), b(w))?
                        } else {
                            at(t)?
                        };
                        Some((src, slot[t as usize].offset))
                    }
                    None => None,
                };
                let to = send
                    .as_ref()
                    .map(|(src, off)| Tx::new(down, src, MemKind::CclOutput, *off));
                prim::step(s, recv.map(|_| Rx::new(up)), to)?;
            }
            if scatter && j > 0 {
                s.memcpy_async(&param.output.range(b(e0), b(w))?, &at(j)?)?;
            }
            if !scatter && j == 0 {
                for t in 1..p {
                    s.memcpy_async(&param.output.range(b(user(t) + e0), b(w))?, &at(t)?)?;
                }
            }
            Ok(())
        })
    }
}

impl FlatExecutor for RingRootedExecutor {
    fn named(&self) -> &Named {
        &self.0
    }
    fn peers(&self, r: u32, n: u32, _: &OpParam) -> Vec<u32> {
        ring_peers(r, n)
    }
    fn run(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if param.count == 0 {
            return Ok(());
        }
        if self.0.topo.user_rank_size == 1 {
            return copy_through(param, param.input_bytes() as usize);
        }
        match self.0.op {
            OpType::Reduce => self.reduce(param, res),
            OpType::Scatter | OpType::Gather => self.blocks(param, res),
            op => Err(HcclError::internal(format!(
                "{} cannot run {op}",
                self.0.name
            ))),
        }
    }
}
