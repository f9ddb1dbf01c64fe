//! Ring executors for the rooted ops: Reduce, Scatter and Gather.
//!
//! - **Reduce** is the broadcast chain run backwards: it starts at root+1
//!   and ends at the root, each rank reducing the arriving segment into its
//!   own before passing it on (2(p−1) steps per round, every link carries
//!   the data once, every rank reduces it once).
//! - **Scatter** sends the root's p−1 blocks down the chain root → root+1
//!   → …, farthest destination first, each rank forwarding the block it got
//!   in the previous step: p−1 steps, each link carrying one block per step.
//! - **Gather** is the mirror: every rank passes its own block and then the
//!   blocks arriving from farther ranks towards the root, p−1 steps.
//!
//! Scatter and gather stage nothing: blocks leave from the user input and
//! arrive in slot t (the destination's position along the chain) of each
//! rank's CCL output, p slots per op-base round.

use super::broadcast_ring::run_chain;
use super::ring_gather_scatter::{per_rank_window, slots};
use super::transfer::step;
use super::{round_capacity, run_op_base_loop, CollExecutor, Named};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::topo::{CommPlane, TopoInfo};
use hccl_platform::{HcclError, MemKind, Result};

/// The rooted ring executors: (registered name, op).
pub const RING_ROOTED_EXECUTORS: &[(&str, OpType)] = &[
    ("ReduceRingExecutor", OpType::Reduce),
    ("ScatterRingExecutor", OpType::Scatter),
    ("GatherRingExecutor", OpType::Gather),
];

/// A ring executor for Reduce, Scatter or Gather over the flat plane.
#[derive(Debug)]
pub struct RingRootedExecutor(Named);

impl RingRootedExecutor {
    /// The executor registered as `name` for `op` (one of
    /// [`RING_ROOTED_EXECUTORS`]).
    pub fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        RingRootedExecutor(Named::new(name, op, topo))
    }

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
        let left = comm.link((me + p - 1) % p)?;
        let right = comm.link((me + 1) % p)?;
        let capacity = round_capacity(res);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            let how = (&res.ccl_output, param.dtype, param.reduce_op);
            run_chain(s, pos, p, left, right, &w, Some(how))?;
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
        let n = per_rank_window(res, p64, u)?;
        for i in 0..c.div_ceil(n) {
            let (e0, w) = (i * n, n.min(c - i * n));
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
                let send = send
                    .as_ref()
                    .map(|(src, off)| (down, src, MemKind::CclOutput, *off));
                step(s, recv.map(|_| up), send)?;
            }
            if scatter && j > 0 {
                s.memcpy_async(&param.output.range(b(e0), b(w))?, &at(j)?)?;
            }
            if !scatter && j == 0 {
                for t in 1..p {
                    s.memcpy_async(&param.output.range(b(user(t) + e0), b(w))?, &at(t)?)?;
                }
            }
        }
        Ok(())
    }
}

impl CollExecutor for RingRootedExecutor {
    fn name(&self) -> &str {
        self.0.name
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(self.0.name, self.0.op, param, topo, super::ring_peers)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if param.count == 0 {
            return Ok(());
        }
        if self.0.topo.user_rank_size == 1 {
            return super::copy_through(param, param.input_bytes() as usize);
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
