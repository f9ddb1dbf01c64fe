//! Pipeline executors (seed 002 §3.10): the level-1 ring on the master
//! stream and the level-0 transfers on a slave stream, overlapped.
//!
//! Rank blocks are laid out index-major and shared as in TwoLevel
//! ([`Split::Index`]): region i (the blocks of the ranks with host index
//! i) is owned on each host by its rank i, or by the host's last rank where
//! the host has no rank i, and the owners form region i's level-1 ring, in
//! host order. Every rank of host h is member h of its rings.
//!
//! - **AllGather**: the ring runs H−1 steps. After step t (and, for t = 0,
//!   before the ring starts) each owner writes the blocks it just got
//!   (host h−t's rank of each region it owns) straight into every host
//!   peer's CCL output, on the slave stream, while the master runs step
//!   t+1: a notify per step hands each block from the ring to the mesh.
//! - **ReduceScatter**: the reverse. Before ring step t the owner needs
//!   the host-reduced partial of the slice it sends and of the slice it
//!   reduces into; the slave stream gathers and reduces each of them from
//!   the host peers (one mesh step per slice, landing in a slot per
//!   sender behind the layout in the CCL output) one step ahead of the
//!   ring, signalling the master through a notify.
//! - **AllReduce**: ReduceScatter then AllGather of the same data cut into
//!   one block per rank.
//!
//! Time ≈ max(level-1 step, level-0 step)·(H−1) + one level-0 step per
//! phase, as the seed's formula; streams: 1 slave; notifies: 4.

use super::hosts::{Hosts, Layout, Split};
use super::two_level::{hier_request, level0, trivial};
use crate::executor::flat::{check_mode, check_op, ring_peers};
use crate::executor::CollExecutor;
use crate::op::{OpParam, OpType};
use crate::prim::{self, Rx, Tx};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::template::layout::{round_capacity, run_op_base_loop, run_per_rank_rounds, Slice};
use crate::template::{RingAllGather, RingReduceScatter};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DeviceMem, HcclError, MemKind, Notify, Result, Stream};
use std::sync::Arc;

/// A Pipeline executor for AllReduce, AllGather or ReduceScatter.
#[derive(Debug)]
pub(crate) struct PipelineExecutor {
    name: Arc<str>,
    op: OpType,
    topo: TopoInfo,
    hosts: Hosts,
}

/// What one round works with.
struct Round<'a> {
    param: &'a OpParam<'a>,
    /// Master and slave stream.
    s: &'a Stream,
    slave: &'a Stream,
    /// master → slave: "go on"; slave → master: "slice ready", "done".
    start: &'a Notify,
    ready: &'a Notify,
    done: &'a Notify,
    l0: &'a SubCommInfo,
    l1: &'a [SubCommInfo],
    lay: Layout,
}

impl PipelineExecutor {
    /// The executor registered as `name` for `op` on `topo`.
    pub(crate) fn new(name: &str, op: OpType, topo: &TopoInfo) -> Self {
        PipelineExecutor {
            name: name.into(),
            op,
            topo: topo.clone(),
            hosts: Hosts::of(topo),
        }
    }

    /// Regions this rank owns (one level-1 ring each), ascending.
    fn regions(&self) -> std::ops::Range<u32> {
        let h = &self.hosts;
        h.owned(h.host, h.index, Split::Index)
    }

    /// Host h's rank of region i's blocks' host `g`, i.e. the block that
    /// moves in a phase, if host `g` has a rank with index i.
    fn block(&self, lay: &Layout, g: usize, i: u32) -> Option<Slice> {
        self.hosts.ranks[g]
            .get(i as usize)
            .map(|&r| lay.at[r as usize])
    }

    /// Host `g`'s blocks travel in level-0 phase... `g` for phase `t`:
    /// host h−t (mod H).
    fn phase_host(&self, t: u32) -> usize {
        let hn = self.hosts.count();
        ((self.hosts.host as u32 + hn - t % hn) % hn) as usize
    }

    /// Every host rank j with the regions it owns.
    fn host_owners(&self) -> impl Iterator<Item = (u32, std::ops::Range<u32>)> + '_ {
        let h = &self.hosts;
        (0..h.mine().len() as u32).map(move |j| (j, h.owned(h.host, j, Split::Index)))
    }

    /// AllGather level-0 phase `t`: each owner writes the blocks of host
    /// h−t in its regions into every host peer's CCL output.
    fn ag_phase(&self, r: &Round<'_>, out: &DeviceMem, t: u32) -> Result<()> {
        let (me, g) = (self.hosts.index, self.phase_host(t));
        let mut from: Vec<Rx<'_>> = Vec::new();
        let mut blocks: Vec<(u32, DeviceMem, usize)> = Vec::new();
        for (j, owned) in self.host_owners() {
            for i in owned {
                let Some(b) = self.block(&r.lay, g, i) else {
                    continue;
                };
                if j != me {
                    from.push(Rx::new(r.l0.link(j)?));
                    continue;
                }
                for q in (0..self.hosts.mine().len() as u32).filter(|&q| q != me) {
                    blocks.push((q, out.range(b.offset, b.len)?, b.offset));
                }
            }
        }
        let sends = sends(r.l0, &blocks)?;
        r.slave.set_step(t);
        prim::exchange(r.slave, &from, &sends)
    }

    /// ReduceScatter level-0 phase `k`: every host rank writes its copy of
    /// the blocks of host h−k into their owner's landing slot for it; the
    /// owner reduces them into its CCL input.
    fn rs_phase(&self, r: &Round<'_>, (cin, cout): (&DeviceMem, &DeviceMem), k: u32) -> Result<()> {
        let (me, g) = (self.hosts.index, self.phase_host(k));
        let total = r.lay.total;
        let slot = |j: u32, b: Slice| total * (1 + j as usize) + b.offset;
        let mut from: Vec<Rx<'_>> = Vec::new();
        let mut blocks: Vec<(u32, DeviceMem, usize)> = Vec::new();
        let mut reduces: Vec<(Slice, u32)> = Vec::new();
        for (j, owned) in self.host_owners() {
            for i in owned {
                let Some(b) = self.block(&r.lay, g, i) else {
                    continue;
                };
                if j != me {
                    blocks.push((j, cin.range(b.offset, b.len)?, slot(me, b)));
                    continue;
                }
                for q in (0..self.hosts.mine().len() as u32).filter(|&q| q != me) {
                    from.push(Rx::new(r.l0.link(q)?));
                    reduces.push((b, q));
                }
            }
        }
        let sends = sends(r.l0, &blocks)?;
        r.slave.set_step(k);
        prim::exchange(r.slave, &from, &sends)?;
        for (b, q) in reduces {
            if b.len > 0 {
                r.slave.reduce_async(
                    &cin.range(b.offset, b.len)?,
                    &cout.range(slot(q, b), b.len)?,
                    r.param.dtype,
                    r.param.reduce_op,
                )?;
            }
        }
        Ok(())
    }

    /// Pipelined allgather of `out` (this rank's block in place).
    fn all_gather(&self, r: &Round<'_>, out: &DeviceMem) -> Result<()> {
        let rings = self
            .regions()
            .map(|i| {
                let reg = r.lay.regions[i as usize];
                let region = (reg.of(out)?, self.hosts.region_slices(&r.lay, i));
                Ok(RingAllGather::new(region, (MemKind::CclOutput, reg.offset)))
            })
            .collect::<Result<Vec<_>>>()?;
        r.s.notify_record(r.start)?;
        r.slave.notify_wait(r.start)?;
        self.ag_phase(r, out, 0)?;
        for t in 0..self.hosts.count() - 1 {
            for (ring, comm) in rings.iter().zip(r.l1) {
                ring.step(r.s, comm, t as usize)?;
            }
            r.s.notify_record(r.start)?;
            r.slave.notify_wait(r.start)?;
            self.ag_phase(r, out, t + 1)?;
        }
        r.slave.notify_record(r.done)?;
        r.s.notify_wait(r.done)
    }

    /// Pipelined reduce-scatter of `cin` (landing areas in `cout`): this
    /// rank's block ends reduced in `cin`.
    fn reduce_scatter(&self, r: &Round<'_>, cin: &DeviceMem, cout: &DeviceMem) -> Result<()> {
        let rings = self
            .regions()
            .map(|i| {
                let reg = r.lay.regions[i as usize];
                let slices = self.hosts.region_slices(&r.lay, i);
                let region = (reg.of(cin)?, reg.of(cout)?, slices);
                let how = (r.param.dtype, r.param.reduce_op);
                Ok(RingReduceScatter::new(
                    region,
                    (MemKind::CclOutput, reg.offset),
                    how,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let hn = self.hosts.count();
        r.s.notify_record(r.start)?;
        r.slave.notify_wait(r.start)?;
        for k in 1..=hn {
            self.rs_phase(r, (cin, cout), k)?;
            if k >= 2 {
                r.slave.notify_record(r.ready)?;
            }
        }
        for t in 0..hn - 1 {
            r.s.notify_wait(r.ready)?;
            for (ring, comm) in rings.iter().zip(r.l1) {
                ring.step(r.s, comm, t as usize)?;
            }
        }
        r.slave.notify_record(r.done)?;
        r.s.notify_wait(r.done)
    }

    fn run(&self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let missing = |what: &str| {
            HcclError::internal(format!("{}: the framework granted no {what}", self.name))
        };
        let l0 = level0(res, &self.hosts)?;
        let l1 = self
            .regions()
            .enumerate()
            .map(|(k, _)| res.sub_comm(CommPlane::Level1, k))
            .collect::<Result<Vec<_>>>()?;
        let round = |lay: Layout| -> Result<Round<'_>> {
            Ok(Round {
                param,
                s: &param.stream,
                slave: res
                    .slave_streams
                    .first()
                    .ok_or_else(|| missing("slave stream"))?,
                start: res.notifies_main.first().ok_or_else(|| missing("notify"))?,
                ready: res.notifies_aux.first().ok_or_else(|| missing("notify"))?,
                done: res.notifies_aux.get(1).ok_or_else(|| missing("notify"))?,
                l0: &l0,
                l1: &l1,
                lay,
            })
        };
        let s = &param.stream;
        let me = self.topo.user_rank as usize;
        let (p, u) = (self.topo.user_rank_size as u64, param.dtype.size() as u64);
        // reduce-scatter needs a landing slot per host peer behind the layout
        let copies = 1 + self.hosts.largest() as u64;
        if self.op == OpType::AllReduce {
            let capacity = round_capacity(res) / copies as usize;
            return run_op_base_loop(param, res, capacity, |chunk, res| {
                let blocks = Slice::split(chunk.bytes, p as usize);
                let r = round(self.hosts.layout(|q| blocks[q as usize].len))?;
                let cin = res.ccl_input.range(0, r.lay.total)?;
                let cout = res.ccl_output.range(0, r.lay.total * copies as usize)?;
                for (q, b) in blocks.iter().enumerate() {
                    let at = r.lay.at[q];
                    let src = param.input.range(chunk.offset + b.offset, b.len)?;
                    s.memcpy_async(&cin.range(at.offset, at.len)?, &src)?;
                }
                self.reduce_scatter(&r, &cin, &cout)?;
                let mine = r.lay.at[me];
                if mine.len > 0 {
                    s.memcpy_async(
                        &cout.range(mine.offset, mine.len)?,
                        &cin.range(mine.offset, mine.len)?,
                    )?;
                }
                self.all_gather(&r, &cout)?;
                for (q, b) in blocks.iter().enumerate() {
                    let at = r.lay.at[q];
                    let dst = param.output.range(chunk.offset + b.offset, b.len)?;
                    s.memcpy_async(&dst, &cout.range(at.offset, at.len)?)?;
                }
                Ok(())
            });
        }
        let (c, b) = (param.count, |e: u64| (e * u) as usize);
        let rs = self.op == OpType::ReduceScatter;
        // reduce-scatter stages `copies` blocks per rank
        let blocks = p * if rs { copies } else { 1 };
        run_per_rank_rounds(res, (blocks, c, u), |win| {
            let (e0, w) = (win.first, win.len);
            let user = |mem: &DeviceMem, q: u64| mem.range(b(q * c + e0), b(w));
            let r = round(self.hosts.layout(|_| b(w)))?;
            let mine = r.lay.at[me];
            let mine_user = param.input.range(b(e0), b(w));
            if rs {
                let cin = res.ccl_input.range(0, r.lay.total)?;
                let cout = res.ccl_output.range(0, r.lay.total * copies as usize)?;
                for q in 0..p {
                    let at = r.lay.at[q as usize];
                    s.memcpy_async(&cin.range(at.offset, at.len)?, &user(&param.input, q)?)?;
                }
                self.reduce_scatter(&r, &cin, &cout)?;
                let out = param.output.range(b(e0), b(w))?;
                s.memcpy_async(&out, &cin.range(mine.offset, mine.len)?)?;
            } else {
                let out = res.ccl_output.range(0, r.lay.total)?;
                s.memcpy_async(&out.range(mine.offset, mine.len)?, &mine_user?)?;
                self.all_gather(&r, &out)?;
                for q in 0..p {
                    let at = r.lay.at[q as usize];
                    s.memcpy_async(&user(&param.output, q)?, &out.range(at.offset, at.len)?)?;
                }
            }
            Ok(())
        })
    }
}

/// The sends of a mesh step: (host peer, local source, offset in the
/// peer's CCL output).
fn sends<'a>(l0: &'a SubCommInfo, blocks: &'a [(u32, DeviceMem, usize)]) -> Result<Vec<Tx<'a>>> {
    blocks
        .iter()
        .map(|(q, m, off)| Ok(Tx::new(l0.link(*q)?, m, MemKind::CclOutput, *off)))
        .collect()
}

impl CollExecutor for PipelineExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        check_op(&self.name, self.op, param)?;
        check_mode(&self.name, param, false)?;
        let groups = self
            .regions()
            .map(|k| self.hosts.group(k, Split::Index))
            .collect();
        Ok(AlgResourceRequest {
            stream_num: 1,
            notify_num: 4,
            ..hier_request(&self.hosts, topo.user_rank, true, groups, ring_peers)?
        })
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        trivial(param, &self.topo).unwrap_or_else(|| self.run(param, res))
    }
}
