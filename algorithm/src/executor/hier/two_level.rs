//! The TwoLevel and AHC executors (see the module docs of `hier`).

use super::hosts::{overlap, span, Hosts, Layout, Split};
use super::level1::Level1Algorithm;
use crate::executor::flat::{check_mode, check_op, is_graph, ring_peers, share_user_buffers};
use crate::executor::{issue_all, CollExecutor, StagedOp};
use crate::op::{OpParam, OpType};
use crate::prim::{self, Rx, Tx};
use crate::resource::{AlgResourceRequest, AlgResourceResponse, SingleSubCommTransport};
use crate::template::layout::{
    copy_through, round_capacity, run_op_base_loop, run_per_rank_rounds, Chunk, OpBaseIo, Slice,
};
use crate::template::{RingAllGather, RingReduceScatter};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DeviceMem, HcclError, MemKind, Result, Stream};
use std::ops::Range;
use std::sync::Arc;

/// Which hierarchical algorithm an executor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HierKind {
    /// Level 0, then level 1, then level 0, with one part per index of the
    /// largest host.
    TwoLevel,
    /// Asymmetric Hierarchical Concatenate: LCM(host sizes) parts.
    Ahc,
    /// The level-1 ring and the level-0 transfers running concurrently.
    Pipeline,
}

/// A TwoLevel or AHC executor for one op.
#[derive(Debug)]
pub(crate) struct HierExecutor {
    name: Arc<str>,
    op: OpType,
    kind: HierKind,
    level1: Arc<dyn Level1Algorithm>,
    topo: TopoInfo,
    hosts: Hosts,
}

/// A one-rank sub-communicator: the templates do nothing on it.
pub(super) fn solo() -> SubCommInfo {
    SubCommInfo {
        local_rank: 0,
        local_rank_size: 1,
        links: Vec::new(),
    }
}

/// The request of a hierarchical executor: links among this rank's host
/// (a mesh, or a ring) on level 0, and one level-1 sub-communicator per
/// group of `groups` (user ranks in host order, so this rank is at its
/// host's position) with links to `peers(position, size)`.
pub(super) fn hier_request(
    hosts: &Hosts,
    me: u32,
    mesh: bool,
    groups: Vec<Vec<u32>>,
    peers: impl Fn(u32, u32) -> Vec<u32>,
) -> Result<AlgResourceRequest> {
    let mut req = AlgResourceRequest::default();
    let host = hosts.mine().to_vec();
    let (i, o) = (MemKind::CclInput, MemKind::CclOutput);
    if host.len() > 1 {
        let l0 = if mesh {
            SingleSubCommTransport::mesh(host, me, i, o)?
        } else {
            SingleSubCommTransport::ring(host, me, i, o)?
        };
        req.op_transport[CommPlane::Level0 as usize].push(l0);
    }
    for g in groups {
        let wanted = peers(hosts.host as u32, g.len() as u32);
        req.op_transport[CommPlane::Level1 as usize]
            .push(SingleSubCommTransport::new(g, me, &wanted, i, o)?);
    }
    Ok(req)
}

/// Whether there is nothing to exchange: no data, or one rank.
fn trivial_case(param: &OpParam, topo: &TopoInfo) -> bool {
    param.count == 0 || topo.user_rank_size == 1
}

/// The whole op when there is nothing to exchange (see [`trivial_case`]):
/// nothing, or a copy. `None` when the executor has work to do.
pub(super) fn trivial(param: &OpParam, topo: &TopoInfo) -> Option<Result<()>> {
    if param.count == 0 {
        return Some(Ok(()));
    }
    (topo.user_rank_size == 1).then(|| copy_through(param, param.input_bytes() as usize))
}

/// The level-0 sub-communicator if this rank's host has peers.
pub(super) fn level0(res: &AlgResourceResponse, hosts: &Hosts) -> Result<SubCommInfo> {
    if hosts.mine().len() > 1 {
        res.sub_comm(CommPlane::Level0, 0)
    } else {
        Ok(solo())
    }
}

impl HierExecutor {
    /// The `kind` executor registered as `name` for `op` on `topo`, with
    /// `level1` as its inter-host allreduce (AllReduce only; the other ops
    /// use a level-1 ring).
    pub(crate) fn new(
        name: &str,
        op: OpType,
        kind: HierKind,
        level1: Arc<dyn Level1Algorithm>,
        topo: &TopoInfo,
    ) -> Self {
        HierExecutor {
            name: name.into(),
            op,
            kind,
            level1,
            topo: topo.clone(),
            hosts: Hosts::of(topo),
        }
    }

    /// How the data is cut into owned parts.
    fn split(&self) -> Split {
        match self.kind {
            HierKind::Ahc => Split::Lcm,
            _ => Split::Index,
        }
    }

    /// Parts the data is cut into.
    fn parts(&self) -> u32 {
        self.hosts.parts(self.split())
    }

    /// Whether level 1 exchanges whole regions of rank blocks (TwoLevel
    /// AllGather and ReduceScatter) rather than runs of parts.
    fn by_region(&self) -> bool {
        self.kind == HierKind::TwoLevel && self.op != OpType::AllReduce
    }

    /// The level-1 ops this rank joins, in the order every rank runs them:
    /// the parts (or regions) each covers.
    fn units(&self) -> Vec<Range<u32>> {
        let h = &self.hosts;
        if self.by_region() {
            h.owned(h.host, h.index, Split::Index)
                .map(|i| i..i + 1)
                .collect()
        } else {
            h.my_runs(self.split())
        }
    }

    /// AllReduce in op-base mode as stages (see [`HierAllReduceRounds`]).
    fn all_reduce_stages(
        &self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Box<dyn StagedOp>> {
        Ok(Box::new(HierAllReduceRounds {
            io: OpBaseIo::new(param, res)?,
            l0: level0(res, &self.hosts)?,
            l1: self.level1_comms(res)?,
            units: self.units(),
            level1: self.level1.clone(),
            hosts: self.hosts.clone(),
            split: self.split(),
            parts: self.parts(),
            round: None,
        }))
    }

    /// AllReduce in graph mode: the same three phases on the user output
    /// (the input copied in once per round), partials landing in the CCL
    /// output, every gather writing straight into the peers' outputs.
    fn all_reduce_graph(&self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (l0, l1) = (level0(res, &self.hosts)?, self.level1_comms(res)?);
        share_user_buffers(param, &l0, &ring_peers(l0.local_rank, l0.local_rank_size))?;
        for comm in &l1 {
            let peers = self.level1.peers(comm.local_rank, comm.local_rank_size);
            share_user_buffers(param, comm, &peers)?;
        }
        let units = self.units();
        let how = (param.dtype, param.reduce_op);
        run_op_base_loop(param, res, round_capacity(res), |chunk, res| {
            let bytes = chunk.bytes;
            let w = param.output.range(chunk.offset, bytes)?;
            let input = param.input.range(chunk.offset, bytes)?;
            if !input.same_range(&w) {
                s.memcpy_async(&w, &input)?;
            }
            let landing = res.ccl_output.range(0, bytes)?;
            let parts = Slice::split(bytes, self.parts() as usize);
            let slices = self
                .hosts
                .level0_slices(self.hosts.host, &parts, self.split());
            let bufs = (w.clone(), landing.clone(), slices.clone());
            RingReduceScatter::new(bufs, (MemKind::CclOutput, 0), how).run(s, &l0)?;
            for (u, comm) in units.iter().zip(&l1) {
                let sp = span(&parts, u.clone());
                let bufs = (
                    &w.range(sp.offset, sp.len)?,
                    &landing.range(sp.offset, sp.len)?,
                );
                let at = (
                    (MemKind::ParamOutput, chunk.offset + sp.offset),
                    (MemKind::CclOutput, sp.offset),
                );
                self.level1.all_reduce_in(s, comm, bufs, at, how)?;
            }
            let at = (MemKind::ParamOutput, chunk.offset);
            RingAllGather::new((w.clone(), slices), at).run(s, &l0)
        })
    }

    /// AllGather, ReduceScatter: rounds of one window per rank block.
    fn blocks(&self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let (l0, l1) = (level0(res, &self.hosts)?, self.level1_comms(res)?);
        let units = self.units();
        let (p, me) = (self.topo.user_rank_size as u64, self.topo.user_rank);
        let (c, u) = (param.count, param.dtype.size() as u64);
        let b = |e: u64| (e * u) as usize;
        run_per_rank_rounds(res, (p, c, u), |win| {
            let (e0, w) = (win.first, win.len);
            // rank q's window in a user buffer of p blocks
            let user = |mem: &DeviceMem, q: u32| mem.range(b(q as u64 * c + e0), b(w));
            let ahc = self.kind == HierKind::Ahc;
            let lay = if ahc {
                self.hosts.host_major(|_| b(w))
            } else {
                self.hosts.layout(|_| b(w))
            };
            let cin = res.ccl_input.range(0, lay.total)?;
            let cout = res.ccl_output.range(0, lay.total)?;
            let mine = lay.at[me as usize];
            if self.op == OpType::AllGather {
                s.memcpy_async(
                    &cout.range(mine.offset, mine.len)?,
                    &param.input.range(b(e0), b(w))?,
                )?;
                for (u, comm) in units.iter().zip(&l1) {
                    let reg = lay.regions[u.start as usize];
                    let region = (reg.of(&cout)?, self.hosts.region_slices(&lay, u.start));
                    RingAllGather::new(region, (MemKind::CclOutput, reg.offset)).run(s, comm)?;
                }
                let slices = self
                    .hosts
                    .level0_slices(self.hosts.host, &lay.regions, Split::Index);
                RingAllGather::new((cout.clone(), slices), (MemKind::CclOutput, 0)).run(s, &l0)?;
                for q in 0..p as u32 {
                    let at = lay.at[q as usize];
                    s.memcpy_async(&user(&param.output, q)?, &cout.range(at.offset, at.len)?)?;
                }
                return Ok(());
            }
            for q in 0..p as u32 {
                let at = lay.at[q as usize];
                s.memcpy_async(&cin.range(at.offset, at.len)?, &user(&param.input, q)?)?;
            }
            let parts = if ahc {
                Slice::split(lay.total, self.parts() as usize)
            } else {
                lay.regions.clone()
            };
            let slices = self
                .hosts
                .level0_slices(self.hosts.host, &parts, self.split());
            let how = (param.dtype, param.reduce_op);
            let rs = |bufs, base| RingReduceScatter::new(bufs, (MemKind::CclOutput, base), how);
            rs((cin.clone(), cout.clone(), slices.clone()), 0).run(s, &l0)?;
            for (u, comm) in units.iter().zip(&l1) {
                let sp = span(&parts, u.clone());
                let member_slices = if ahc {
                    // each host's owner ends with the host's blocks of the run
                    lay.regions
                        .iter()
                        .map(|&hr| {
                            let o = overlap(sp, hr);
                            Slice {
                                offset: o.offset - sp.offset,
                                len: o.len,
                            }
                        })
                        .collect()
                } else {
                    self.hosts.region_slices(&lay, u.start)
                };
                let (i, o) = (
                    cin.range(sp.offset, sp.len)?,
                    cout.range(sp.offset, sp.len)?,
                );
                rs((i, o, member_slices), sp.offset).run(s, comm)?;
            }
            let out = param.output.range(b(e0), b(w))?;
            if ahc {
                self.ahc_gather(s, &l0, &lay, &slices, (&cin, &cout), &out)?;
            } else {
                s.memcpy_async(&out, &cin.range(mine.offset, mine.len)?)?;
            }
            Ok(())
        })
    }

    /// AHC ReduceScatter's last step: the reduced blocks of this host are
    /// spread over its ranks by part ownership (`slices`); each rank writes
    /// the pieces of every host peer's block it holds straight into that
    /// peer's CCL output (one level-0 step) and assembles its own block.
    fn ahc_gather(
        &self,
        s: &Stream,
        l0: &SubCommInfo,
        lay: &Layout,
        slices: &[Slice],
        (cin, cout): (&DeviceMem, &DeviceMem),
        out: &DeviceMem,
    ) -> Result<()> {
        let host = self.hosts.mine();
        let me = self.hosts.index as usize;
        let block = |j: usize| lay.at[host[j] as usize];
        let mut from = Vec::new();
        let mut sends: Vec<(u32, DeviceMem, usize)> = Vec::new();
        for j in (0..host.len()).filter(|&j| j != me) {
            let give = overlap(slices[me], block(j));
            if give.len > 0 {
                sends.push((j as u32, cin.range(give.offset, give.len)?, give.offset));
            }
            if overlap(slices[j], block(me)).len > 0 {
                from.push(Rx::new(l0.link(j as u32)?));
            }
        }
        let sends: Vec<Tx<'_>> = sends
            .iter()
            .map(|(j, m, off)| Ok(Tx::new(l0.link(*j)?, m, MemKind::CclOutput, *off)))
            .collect::<Result<_>>()?;
        prim::exchange(s, &from, &sends)?;
        let mine = block(me);
        for (j, &sl) in slices.iter().enumerate() {
            let piece = overlap(sl, mine);
            if piece.len == 0 {
                continue;
            }
            let src = if j == me { cin } else { cout };
            s.memcpy_async(
                &out.range(piece.offset - mine.offset, piece.len)?,
                &src.range(piece.offset, piece.len)?,
            )?;
        }
        Ok(())
    }

    fn level1_comms(&self, res: &AlgResourceResponse) -> Result<Vec<SubCommInfo>> {
        (0..self.units().len())
            .map(|k| res.sub_comm(CommPlane::Level1, k))
            .collect()
    }
}

impl CollExecutor for HierExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        check_op(&self.name, self.op, param)?;
        check_mode(&self.name, param, self.supports_graph())?;
        // AHC ReduceScatter ends with a direct write to every host peer
        let mesh = self.kind == HierKind::Ahc && self.op == OpType::ReduceScatter;
        let groups = self
            .units()
            .iter()
            .map(|u| self.hosts.group(u.start, self.split()))
            .collect();
        let all_reduce = self.op == OpType::AllReduce;
        let peers = |r, n| {
            if all_reduce {
                self.level1.peers(r, n)
            } else {
                ring_peers(r, n)
            }
        };
        hier_request(&self.hosts, topo.user_rank, mesh, groups, peers)
    }

    /// The TwoLevel AllReduce runs on the user buffers when its level-1
    /// algorithm has a graph-mode allreduce (every built-in one does).
    fn supports_graph(&self) -> bool {
        self.kind == HierKind::TwoLevel && self.op == OpType::AllReduce && self.level1.graph()
    }

    /// The op-base AllReduce is issued a stage at a time (the other ops,
    /// and graph mode, whole).
    fn staged(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        check_mode(&self.name, param, self.supports_graph())?;
        let op_base = self.op == OpType::AllReduce && !is_graph(param);
        if !op_base || trivial_case(param, &self.topo) {
            return Ok(None);
        }
        self.all_reduce_stages(param, res).map(Some)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        check_mode(&self.name, param, self.supports_graph())?;
        if let Some(done) = trivial(param, &self.topo) {
            return done;
        }
        match self.op {
            OpType::AllReduce if is_graph(param) => self.all_reduce_graph(param, res),
            OpType::AllReduce => {
                issue_all(Some(self.all_reduce_stages(param, res)?))?;
                Ok(())
            }
            OpType::AllGather | OpType::ReduceScatter => self.blocks(param, res),
            op => Err(HcclError::internal(format!(
                "{} cannot run {op}",
                self.name
            ))),
        }
    }
}

/// The op-base TwoLevel / AHC AllReduce, a stage at a time (see
/// [`crate::CollExecutor::staged`]): per round of the op-base loop, the
/// copy in with the first stage, one stage per level-0 reduce-scatter
/// step, one per level-1 allreduce this rank joins (each whole), one per
/// level-0 allgather step, the copy out. On one host, level 0 is a ring
/// of every rank: 2(p−1) steps a rank that are never stored whole.
struct HierAllReduceRounds {
    io: OpBaseIo,
    l0: SubCommInfo,
    l1: Vec<SubCommInfo>,
    /// The runs of parts of each level-1 allreduce, in `l1`'s order.
    units: Vec<Range<u32>>,
    level1: Arc<dyn Level1Algorithm>,
    hosts: Hosts,
    split: Split,
    /// Parts the data is cut into.
    parts: u32,
    round: Option<HierRound>,
}

/// One round of a [`HierAllReduceRounds`] being issued.
struct HierRound {
    chunk: Chunk,
    /// Its bytes in the CCL input and output.
    cin: DeviceMem,
    cout: DeviceMem,
    /// The round's parts.
    parts: Vec<Slice>,
    rs: RingReduceScatter,
    ag: RingAllGather,
    /// The next stage.
    next: usize,
}

impl StagedOp for HierAllReduceRounds {
    fn issue_next(&mut self) -> Result<bool> {
        if self.round.is_none() {
            let Some((chunk, cin, cout)) = self.io.next_round()? else {
                return Ok(false);
            };
            let parts = Slice::split(chunk.bytes, self.parts as usize);
            let slices: Arc<[Slice]> = self
                .hosts
                .level0_slices(self.hosts.host, &parts, self.split)
                .into();
            let at = (MemKind::CclOutput, 0);
            let rs = (cin.clone(), cout.clone(), slices.clone());
            self.round = Some(HierRound {
                chunk,
                rs: RingReduceScatter::new(rs, at, self.io.how),
                ag: RingAllGather::new((cout.clone(), slices), at),
                cin,
                cout,
                parts,
                next: 0,
            });
        }
        let r = self.round.as_mut().expect("a round is being issued");
        let s = &self.io.stream;
        let steps = (self.l0.local_rank_size as usize).saturating_sub(1);
        let units = self.units.len();
        let i = r.next;
        r.next += 1;
        if i < steps {
            r.rs.step(s, &self.l0, i)?;
        } else if i < steps + units {
            let k = i - steps;
            let sp = span(&r.parts, self.units[k].clone());
            let (inp, out) = (
                r.cin.range(sp.offset, sp.len)?,
                r.cout.range(sp.offset, sp.len)?,
            );
            let bufs = (&inp, &out, sp.offset);
            self.level1.all_reduce(s, &self.l1[k], bufs, self.io.how)?;
        } else if i < 2 * steps + units {
            r.ag.step(s, &self.l0, i - steps - units)?;
        } else {
            self.io.copy_out(&r.chunk)?;
            self.round = None;
        }
        Ok(true)
    }
}
