//! Multi-ring executors: the op's data cut into one part per channel,
//! each part moved by the ring template over its own channel's ring
//! ([`crate::rings`]: one intra-host order per host, joined host to host
//! as NCCL's `connectRings`), the channels in parallel on their own
//! streams.
//!
//! Across hosts a single ring crosses each host boundary at one rank
//! pair, so every step waits on that one socket while the host's other
//! ranks idle. The channels' rings put different ranks at the
//! boundaries, so the inter-host traffic of the channels leaves from
//! different ranks — their cores, their sockets — at once.
//!
//! Per op:
//! - **AllReduce**, **Broadcast**, **Reduce**: the buffer is cut into one
//!   128-byte-aligned part per channel; channel j stages its part through
//!   region j of the CCL buffers in rounds, running the ring allreduce
//!   ([`ring::all_reduce`]) or the pipelined chain from / towards the root
//!   ([`chain::run_at`]) along its ring in each round.
//! - **AllGather**, **ReduceScatter**: each rank's block is cut into one
//!   element range per channel; channel j moves its range of every block
//!   in windows laid out as p slots (one per rank) in its region, with
//!   the ring allgather / reduce-scatter templates over its ring.
//!
//! Streams: the channels of one group of [`Rings::groups`] (channels that
//! share a directed edge) run on one stream, round after round, channel
//! after channel, in the same order on every rank; group 0 on the op's
//! stream, group g on slave stream g−1, started after and awaited by the
//! op's stream through a pair of notifies each. Links: each channel's
//! ring neighbours (one sub-communicator per channel on the `Combine`
//! plane, its ranks in ring order).

use super::flat::{check_mode, check_op};
use super::{issue_all, CollExecutor, StagedOp};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse, SingleSubCommTransport};
use crate::rings::Rings;
use crate::template::layout::{copy_through, Slice, PIPELINE_CHUNK_BYTES, SLICE_ALIGN};
use crate::template::{chain, ring, RingAllGather, RingReduceScatter};
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DataType, DeviceMem, HcclError, MemKind, Notify, ReduceOp, Result, Stream};
use std::sync::Arc;

/// The multi-ring executors: (registered name, op).
#[cfg(test)]
pub(crate) const MULTI_RING_EXECUTORS: &[(&str, OpType)] = &[
    ("AllReduceMultiRingExecutor", OpType::AllReduce),
    ("AllGatherMultiRingExecutor", OpType::AllGather),
    ("ReduceScatterMultiRingExecutor", OpType::ReduceScatter),
    ("BroadcastMultiRingExecutor", OpType::Broadcast),
    ("ReduceMultiRingExecutor", OpType::Reduce),
];

/// A multi-ring executor for AllReduce, AllGather, ReduceScatter,
/// Broadcast or Reduce.
#[derive(Debug)]
pub(crate) struct MultiRingExecutor {
    name: &'static str,
    op: OpType,
    topo: TopoInfo,
    /// The channels, worked out once per communicator (`None` only for a
    /// topology they cannot be built for, reported when the op is asked).
    rings: Option<Arc<Rings>>,
}

/// One round of one channel: where its data sits in the user buffers.
#[derive(Clone, Copy, Debug)]
struct Round {
    /// The channel.
    channel: usize,
    /// AllReduce, Broadcast, Reduce: byte offset in the user buffer;
    /// AllGather, ReduceScatter: first element of the window in each block.
    first: u64,
    /// Bytes (AllReduce, Broadcast, Reduce) or elements per block.
    len: u64,
}

/// What every round of an op shares, owned, so a plan issued a stage at
/// a time holds it.
struct Ctx {
    op: OpType,
    /// Ranks, and this rank's user rank.
    p: u32,
    me: u32,
    /// Elements per rank block (AllGather, ReduceScatter), bytes per element.
    c: u64,
    u: u64,
    how: (DataType, ReduceOp),
    root: u32,
    input: DeviceMem,
    output: DeviceMem,
    /// The CCL input and output.
    ccl: (DeviceMem, DeviceMem),
    rings: Arc<Rings>,
    comms: Vec<SubCommInfo>,
    /// This rank's index in each channel's ring.
    index: Vec<u32>,
    /// Bytes of each channel's region of the CCL buffers.
    region: usize,
}

/// One channel's round, prepared when its first stage is issued: what is
/// worth building once (a ring template's p slices, a chain's segments)
/// and the stage to issue next.
struct Prepared {
    round: Round,
    plan: RoundPlan,
    next: usize,
}

/// The template a round runs.
enum RoundPlan {
    AllReduce(ring::RingAllReduce),
    Gather(RingAllGather),
    Scatter(RingReduceScatter),
    /// Broadcast, Reduce: the chain's segments and this rank's position.
    Chain {
        segs: Vec<Slice>,
        pos: u32,
    },
}

/// The rounds of one group of channels, on the group's stream, in the
/// order every rank issues them (round i of every channel, channel after
/// channel: the order of the edges they share).
struct GroupCursor {
    stream: Stream,
    rounds: std::vec::IntoIter<Round>,
    current: Option<Prepared>,
}

/// Where a [`MultiRingStages`] plan stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The busy slave streams' starts are next.
    Start,
    /// The groups' rounds, a stage of each group per call.
    Rounds,
    /// The busy slave streams' ends are next.
    End,
    Done,
}

/// The op of a multi-ring executor, a stage at a time (see
/// [`crate::CollExecutor::staged`]): the starts of the busy slave streams,
/// then per call one stage of every group still running (each group on
/// its own stream, so each stream gets exactly the tasks, in the order,
/// of the whole op), then the ends.
struct MultiRingStages {
    x: Ctx,
    master: Stream,
    groups: Vec<GroupCursor>,
    /// (slave stream, its start and end notifies) of every busy group
    /// beyond the first.
    slaves: Vec<(Stream, Notify, Notify)>,
    phase: Phase,
}

impl StagedOp for MultiRingStages {
    fn issue_next(&mut self) -> Result<bool> {
        match self.phase {
            Phase::Start => {
                for (s, start, _) in &self.slaves {
                    self.master.notify_record(start)?;
                    s.notify_wait(start)?;
                }
                self.phase = Phase::Rounds;
                Ok(true)
            }
            Phase::Rounds => {
                let mut issued = false;
                for g in &mut self.groups {
                    issued |= g.issue_one(&self.x)?;
                }
                if !issued {
                    self.phase = Phase::End;
                    return self.issue_next();
                }
                Ok(true)
            }
            Phase::End => {
                for (s, _, done) in &self.slaves {
                    s.notify_record(done)?;
                    self.master.notify_wait(done)?;
                }
                self.phase = Phase::Done;
                Ok(true)
            }
            Phase::Done => Ok(false),
        }
    }
}

impl GroupCursor {
    /// Issues the group's next stage; `false` once every round has been.
    fn issue_one(&mut self, x: &Ctx) -> Result<bool> {
        loop {
            if self.current.is_none() {
                let Some(round) = self.rounds.next() else {
                    return Ok(false);
                };
                self.current = Some(Prepared::new(x, round)?);
            }
            let cur = self.current.as_mut().expect("a round is being issued");
            if cur.next < cur.stages(x) {
                cur.stage(x, &self.stream)?;
                cur.next += 1;
                return Ok(true);
            }
            self.current = None;
        }
    }
}

impl Prepared {
    fn new(x: &Ctx, round: Round) -> Result<Prepared> {
        let j = round.channel;
        let base = j * x.region;
        let (p, u) = (x.p as u64, x.u);
        let b = |e: u64| (e * u) as usize;
        let comm = &x.comms[j];
        let plan = match x.op {
            OpType::AllReduce => {
                let len = round.len as usize;
                let cin = x.ccl.0.range(base, len)?;
                let cout = x.ccl.1.range(base, len)?;
                let at = (MemKind::CclOutput, base);
                RoundPlan::AllReduce(ring::RingAllReduce::new(comm, (&cin, &cout), at, x.how))
            }
            OpType::AllGather | OpType::ReduceScatter => {
                let w = round.len;
                // the ring's slices: the slots (by user rank) in ring order
                let slices: Vec<Slice> = x
                    .rings
                    .order(j)
                    .iter()
                    .map(|&q| Slice {
                        offset: b(q as u64 * w),
                        len: b(w),
                    })
                    .collect();
                let at = (MemKind::CclOutput, base);
                let cout = x.ccl.1.range(base, b(p * w))?;
                if x.op == OpType::AllGather {
                    RoundPlan::Gather(RingAllGather::new((cout, slices), at))
                } else {
                    let cin = x.ccl.0.range(base, b(p * w))?;
                    RoundPlan::Scatter(RingReduceScatter::new((cin, cout, slices), at, x.how))
                }
            }
            OpType::Broadcast | OpType::Reduce => {
                let root = x
                    .rings
                    .order(j)
                    .iter()
                    .position(|&q| q == x.root)
                    .unwrap_or(0) as u32;
                let (me, p) = (x.index[j], x.p);
                // Broadcast: the chain starts at the root; Reduce: it starts
                // after the root and ends at it
                let pos = if x.op == OpType::Broadcast {
                    (me + p - root) % p
                } else {
                    (me + 2 * p - root - 1) % p
                };
                let segs = Slice::split(round.len as usize, p as usize);
                RoundPlan::Chain { segs, pos }
            }
            op => {
                return Err(HcclError::internal(format!(
                    "a multi-ring plan cannot run {op}"
                )))
            }
        };
        Ok(Prepared {
            round,
            plan,
            next: 0,
        })
    }

    /// Stages of the round: its copies in, its template's steps, its
    /// copies out.
    fn stages(&self, x: &Ctx) -> usize {
        let steps = match &self.plan {
            RoundPlan::AllReduce(ar) => ar.stages(),
            RoundPlan::Gather(_) | RoundPlan::Scatter(_) => x.p as usize - 1,
            RoundPlan::Chain { segs, .. } => segs.len(),
        };
        steps + 2
    }

    /// Enqueues stage `self.next` on `s`.
    fn stage(&self, x: &Ctx, s: &Stream) -> Result<()> {
        let (i, last) = (self.next, self.stages(x) - 1);
        let r = self.round;
        let j = r.channel;
        let base = j * x.region;
        let comm = &x.comms[j];
        let (cin, cout) = &x.ccl;
        let (p, c, u) = (x.p as u64, x.c, x.u);
        let b = |e: u64| (e * u) as usize;
        let (off, len) = (r.first as usize, r.len as usize);
        // AllGather / ReduceScatter: the slot of user rank q, the window
        // of rank q's block in a user buffer
        let (e0, w) = (r.first, r.len);
        let slot = |q: u64| Slice {
            offset: b(q * w),
            len: b(w),
        };
        let user = |mem: &DeviceMem, q: u64| mem.range(b(q * c + e0), b(w));
        match &self.plan {
            RoundPlan::AllReduce(ar) => {
                if i == 0 {
                    s.memcpy_async(&cin.range(base, len)?, &x.input.range(off, len)?)
                } else if i == last {
                    s.memcpy_async(&x.output.range(off, len)?, &cout.range(base, len)?)
                } else {
                    ar.stage(s, comm, i - 1)
                }
            }
            RoundPlan::Gather(g) => {
                let out = cout.range(base, b(p * w))?;
                if i == 0 {
                    let mine = slot(x.me as u64).of(&out)?;
                    s.memcpy_async(&mine, &x.input.range(b(e0), b(w))?)
                } else if i == last {
                    for q in 0..p {
                        s.memcpy_async(&user(&x.output, q)?, &slot(q).of(&out)?)?;
                    }
                    Ok(())
                } else {
                    g.step(s, comm, i - 1)
                }
            }
            RoundPlan::Scatter(rs) => {
                let cin = cin.range(base, b(p * w))?;
                if i == 0 {
                    for q in 0..p {
                        s.memcpy_async(&slot(q).of(&cin)?, &user(&x.input, q)?)?;
                    }
                    Ok(())
                } else if i == last {
                    let mine = slot(x.me as u64).of(&cin)?;
                    s.memcpy_async(&x.output.range(b(e0), b(w))?, &mine)
                } else {
                    rs.step(s, comm, i - 1)
                }
            }
            RoundPlan::Chain { segs, pos } => {
                let (pos, n) = (*pos, x.p);
                let w = cin.range(base, len)?;
                let broadcast = x.op == OpType::Broadcast;
                if i == 0 {
                    if broadcast && pos == 0 {
                        s.memcpy_async(&w, &x.output.range(off, len)?)?;
                    } else if !broadcast {
                        s.memcpy_async(&w, &x.input.range(off, len)?)?;
                    }
                    return Ok(());
                }
                if i == last {
                    // Broadcast: every rank but the chain's start takes
                    // the round; Reduce: the root, where the chain ends
                    let takes = if broadcast { pos > 0 } else { x.me == x.root };
                    if takes {
                        s.memcpy_async(&x.output.range(off, len)?, &w)?;
                    }
                    return Ok(());
                }
                let me = x.index[j];
                let links = (comm.link((me + n - 1) % n)?, comm.link((me + 1) % n)?);
                let landing;
                let reduce = if broadcast {
                    None
                } else {
                    landing = cout.range(base, len)?;
                    Some((&landing, x.how.0, x.how.1))
                };
                chain::segment_at(s, (pos, n), links, (&w, base), reduce, (i - 1, segs[i - 1]))
            }
        }
    }
}

impl MultiRingExecutor {
    /// The executor registered as `name` for `op` on `topo`.
    pub(crate) fn new(name: &'static str, op: OpType, topo: &TopoInfo) -> Self {
        MultiRingExecutor {
            name,
            op,
            topo: topo.clone(),
            rings: Rings::of(topo).ok(),
        }
    }

    fn rings(&self) -> Result<&Rings> {
        match &self.rings {
            Some(r) => Ok(r),
            // the same call that failed when the executor was built, for its error
            None => Err(Rings::of(&self.topo)
                .err()
                .unwrap_or_else(|| HcclError::internal("the channels were not built"))),
        }
    }

    /// This rank's sub-comm index on channel `c` (its place in the ring
    /// every rank numbers alike).
    fn index(&self, rings: &Rings, c: usize) -> u32 {
        let me = self.topo.user_rank;
        rings.order(c).iter().position(|&r| r == me).unwrap_or(0) as u32
    }

    /// The rounds of every channel for `param`, per channel in order.
    fn rounds(&self, param: &OpParam, rings: &Rings, region: usize) -> Result<Vec<Vec<Round>>> {
        let c = rings.count();
        let (p, u) = (self.topo.user_rank_size as u64, param.dtype.size() as u64);
        let blocks = matches!(self.op, OpType::AllGather | OpType::ReduceScatter);
        // AllGather / ReduceScatter split elements of a block, the others bytes
        let (total, step) = if blocks {
            let n = region as u64 / (p * u);
            if n == 0 {
                return Err(HcclError::para(format!(
                    "{}: a channel's {region}-byte share of the CCL buffer cannot hold one {} element \
                     per rank for {p} ranks; raise HCCL_BUFFSIZE or lower HCCL_RS_MAX_CHANNELS",
                    self.name, param.dtype
                )));
            }
            (param.count, n)
        } else {
            (param.count * u, region as u64)
        };
        // 128-byte-aligned parts are whole elements of every type
        let parts = Slice::split((total * if blocks { u } else { 1 }) as usize, c);
        Ok(parts
            .iter()
            .enumerate()
            .map(|(channel, part)| {
                let (start, len) = if blocks {
                    (part.offset as u64 / u, part.len as u64 / u)
                } else {
                    (part.offset as u64, part.len as u64)
                };
                (0..len.div_ceil(step))
                    .map(|i| Round {
                        channel,
                        first: start + i * step,
                        len: step.min(len - i * step),
                    })
                    .collect()
            })
            .collect())
    }

    /// The op as stages (see [`MultiRingStages`]): `None` for no data or
    /// one rank, which [`CollExecutor::orchestrate`] handles alone.
    fn stages(
        &self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        if param.count == 0 || self.topo.user_rank_size == 1 {
            return Ok(None);
        }
        let rings = self.rings()?;
        let missing = |what: &str| {
            HcclError::internal(format!("{}: the framework granted no {what}", self.name))
        };
        let c = rings.count();
        let region = res.ccl_input.len().min(res.ccl_output.len()) / c;
        let region = (region / SLICE_ALIGN * SLICE_ALIGN).min(PIPELINE_CHUNK_BYTES);
        if region == 0 {
            return Err(HcclError::para(format!(
                "{}: the CCL buffer cannot give each of {c} channels 128 bytes; raise \
                 HCCL_BUFFSIZE or lower HCCL_RS_MAX_CHANNELS",
                self.name
            )));
        }
        let rounds = self.rounds(param, rings, region)?;
        let master = param.stream.clone().into_owned();
        let mut groups = Vec::new();
        let mut slaves = Vec::new();
        for (g, group) in rings.groups().iter().enumerate() {
            let most = group.iter().map(|&j| rounds[j].len()).max().unwrap_or(0);
            let rounds = &rounds;
            let order: Vec<Round> = (0..most)
                .flat_map(|i| group.iter().filter_map(move |&j| rounds[j].get(i)))
                .copied()
                .collect();
            // a group with nothing to do needs no start or end
            if order.is_empty() {
                continue;
            }
            let stream = match g {
                0 => master.clone(),
                g => {
                    let s = res
                        .slave_streams
                        .get(g - 1)
                        .ok_or_else(|| missing("slave stream"))?;
                    let start = res
                        .notifies_main
                        .get(g - 1)
                        .ok_or_else(|| missing("notify"))?;
                    let done = res
                        .notifies_aux
                        .get(g - 1)
                        .ok_or_else(|| missing("notify"))?;
                    slaves.push((s.clone(), start.clone(), done.clone()));
                    s.clone()
                }
            };
            groups.push(GroupCursor {
                stream,
                rounds: order.into_iter(),
                current: None,
            });
        }
        let x = Ctx {
            op: self.op,
            p: self.topo.user_rank_size,
            me: self.topo.user_rank,
            c: param.count,
            u: param.dtype.size() as u64,
            how: (param.dtype, param.reduce_op),
            root: param.root,
            input: param.input.clone().into_owned(),
            output: param.output.clone().into_owned(),
            ccl: (res.ccl_input.clone(), res.ccl_output.clone()),
            index: (0..c).map(|j| self.index(rings, j)).collect(),
            comms: (0..c)
                .map(|j| res.sub_comm(CommPlane::Combine, j))
                .collect::<Result<_>>()?,
            rings: self.rings.clone().ok_or_else(|| missing("channels"))?,
            region,
        };
        Ok(Some(Box::new(MultiRingStages {
            x,
            master,
            groups,
            slaves,
            phase: Phase::Start,
        })))
    }
}

impl CollExecutor for MultiRingExecutor {
    fn name(&self) -> &str {
        self.name
    }

    /// Links to each channel's ring neighbours (one `Combine`
    /// sub-communicator per channel, in ring order, on the CCL buffers);
    /// a slave stream and two notifies per group of channels beyond the
    /// first.
    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        check_op(self.name, self.op, param)?;
        check_mode(self.name, param, false)?;
        let rings = Rings::of(topo)?;
        let mut req = AlgResourceRequest::default();
        if topo.user_rank_size > 1 {
            for c in 0..rings.count() {
                req.op_transport[CommPlane::Combine as usize].push(SingleSubCommTransport::ring(
                    rings.order(c).to_vec(),
                    topo.user_rank,
                    MemKind::CclInput,
                    MemKind::CclOutput,
                )?);
            }
        }
        let extra = rings.groups().len() as u32 - 1;
        req.stream_num = extra;
        req.notify_num = 2 * extra;
        Ok(req)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        if param.count == 0 {
            return Ok(());
        }
        if self.topo.user_rank_size == 1 {
            // a broadcast's one buffer is already the result
            if self.op == OpType::Broadcast {
                return Ok(());
            }
            return copy_through(param, param.input_bytes() as usize);
        }
        issue_all(self.stages(param, res)?)?;
        Ok(())
    }

    fn staged(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        check_mode(self.name, param, false)?;
        self.stages(param, res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::multi_ring_terms;
    use crate::registry;
    use crate::rings::ChannelLimits;
    use crate::sim::{simulate, SimSpec};
    use hccl_platform::{DataType, HcclResult, ReduceOp};
    use std::collections::HashSet;

    /// Host layouts for p = 2..8, uneven ones and hosts of one rank included.
    const LAYOUTS: &[&[u32]] = &[
        &[1, 1],
        &[2, 1],
        &[1, 3],
        &[2, 2],
        &[2, 1, 2],
        &[2, 1, 3],
        &[3, 3],
        &[4, 3],
        &[3, 2, 3],
        &[4, 4],
    ];

    fn limits() -> [ChannelLimits; 5] {
        [
            ChannelLimits::new(1, 1).unwrap(),
            ChannelLimits::default(),
            // NCCL's doubling: duplicates share their originals' streams
            ChannelLimits::new(1, 32).unwrap(),
            ChannelLimits::new(3, 3).unwrap(),
            // min above max: the first two channels, repeated to five
            ChannelLimits::new(5, 2).unwrap(),
        ]
    }

    fn spec(op: OpType, hosts: &[u32], count: u64, dtype: DataType, rop: ReduceOp) -> SimSpec {
        let p: u32 = hosts.iter().sum();
        SimSpec {
            // a root that is neither rank 0 nor at a host boundary of channel 0
            root: p / 2,
            ..SimSpec::op(op, p, count, dtype, rop).on_hosts(hosts)
        }
    }

    /// Every op on every layout and channel count, for empty, tiny, odd and
    /// multi-line counts: results checked against the reference (the
    /// simulator also reports any deadlock between the channels' streams).
    #[test]
    fn every_op_layout_channel_count_and_odd_count() {
        for &(name, op) in MULTI_RING_EXECUTORS {
            for &hosts in LAYOUTS {
                for channels in limits() {
                    for count in [0u64, 1, 7, 1001, 4097] {
                        let mut sp = spec(op, hosts, count, DataType::Fp32, ReduceOp::Sum);
                        sp.channels = channels;
                        let r = simulate(registry(), name, &sp).unwrap_or_else(|e| {
                            panic!("{name} hosts={hosts:?} {channels:?} count={count}: {e}")
                        });
                        assert!(r.checked, "{name} {hosts:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_dtype_and_reduction() {
        for &(name, op) in MULTI_RING_EXECUTORS {
            for hosts in [&[2u32, 1][..], &[2, 3]] {
                for dtype in DataType::ALL
                    .into_iter()
                    .filter(|d| !op.reduces() || d.is_reducible())
                {
                    for rop in ReduceOp::ALL {
                        let sp = spec(op, hosts, 333, dtype, rop);
                        simulate(registry(), name, &sp).unwrap_or_else(|e| {
                            panic!("{name} hosts={hosts:?} {dtype} {rop}: {e}")
                        });
                    }
                }
            }
        }
    }

    /// A small CCL buffer: every channel stages its part in several rounds
    /// (channels with different round counts share a stream on uneven
    /// hosts), and a buffer too small for the channels is refused.
    #[test]
    fn op_base_rounds_and_too_small_a_buffer() {
        for &(name, op) in MULTI_RING_EXECUTORS {
            for hosts in [&[2u32, 3][..], &[4, 4], &[1, 2, 1]] {
                let mut sp = spec(op, hosts, 5000, DataType::Int32, ReduceOp::Max);
                sp.ccl_buffer_size = Some(8192);
                simulate(registry(), name, &sp)
                    .unwrap_or_else(|e| panic!("{name} hosts={hosts:?}: {e}"));
            }
        }
        let mut sp = spec(
            OpType::AllReduce,
            &[4, 4],
            1000,
            DataType::Fp32,
            ReduceOp::Sum,
        );
        sp.ccl_buffer_size = Some(2048);
        sp.channels = ChannelLimits::new(32, 32).unwrap();
        let e = simulate(registry(), "AllReduceMultiRingExecutor", &sp).unwrap_err();
        let crate::sim::SimFailure::Error(e) = e else {
            panic!("expected an error, got {e}")
        };
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(
            e.to_string()
                .contains("cannot give each of 32 channels 128 bytes"),
            "{e}"
        );
        // 128 bytes per channel, 18 ranks of 8-byte elements
        let mut sp = spec(
            OpType::AllGather,
            &[9, 9],
            10,
            DataType::Fp64,
            ReduceOp::Sum,
        );
        sp.ccl_buffer_size = Some(4096);
        sp.channels = ChannelLimits::new(32, 32).unwrap();
        let e = simulate(registry(), "AllGatherMultiRingExecutor", &sp).unwrap_err();
        assert!(
            e.to_string().contains(
                "a channel's 128-byte share of the CCL buffer cannot hold one fp64 element per rank for 18 ranks"
            ),
            "{e}"
        );
    }

    /// The request: per channel one `Combine` sub-communicator in ring
    /// order with links to exactly this rank's prev and next on it; a
    /// slave stream and a notify pair per group beyond the first.
    #[test]
    fn requests_only_each_channels_ring_neighbours() {
        use crate::op::{OpParam, WorkflowMode};
        use hccl_platform::{Device, DeviceConfig, DeviceMem, Stream};
        let device = Device::new(0, DeviceConfig::default());
        let map = vec![0, 0, 0, 1, 1, 2, 2, 2];
        let doubled = ChannelLimits::new(1, 32).unwrap();
        for limits in [ChannelLimits::default(), doubled] {
            for me in 0..map.len() as u32 {
                let topo = TopoInfo::new(me, map.clone())
                    .unwrap()
                    .with_channels(limits);
                let rings = Rings::of(&topo).unwrap();
                let ex =
                    MultiRingExecutor::new("AllReduceMultiRingExecutor", OpType::AllReduce, &topo);
                let mut param = OpParam::new(
                    "t",
                    OpType::AllReduce,
                    Stream::new(&device),
                    DeviceMem::null(),
                    DeviceMem::null(),
                    10,
                    DataType::Fp32,
                    ReduceOp::Sum,
                    0,
                );
                let req = ex.calc_res_request(&param, &topo).unwrap();
                let subs = &req.op_transport[CommPlane::Combine as usize];
                assert_eq!(subs.len(), rings.count());
                for (c, sub) in subs.iter().enumerate() {
                    assert_eq!(*sub.sub_comm_rank_to_user_rank, rings.order(c)[..]);
                    let ch = rings.channel(c, me);
                    let mut peers: Vec<u32> = sub
                        .transport_requests
                        .iter()
                        .filter(|t| t.is_valid)
                        .map(|t| t.remote_user_rank)
                        .collect();
                    peers.sort_unstable();
                    let mut want = vec![ch.prev, ch.next];
                    want.sort_unstable();
                    assert_eq!(peers, want, "rank {me} channel {c}");
                }
                let extra = rings.groups().len() as u32 - 1;
                assert_eq!((req.stream_num, req.notify_num), (extra, 2 * extra));
                // graph mode is refused by kind, naming the executor
                param.mode = WorkflowMode::Graph;
                let e = ex.calc_res_request(&param, &topo).unwrap_err();
                assert_eq!(e.code(), HcclResult::ENotSupport);
                assert!(e.to_string().contains("AllReduceMultiRingExecutor"), "{e}");
            }
        }
        // 3 + 2 + 3 ranks: 2 distinct channels (a host of 2 and a host of
        // 3 ranks offer 2 orders each), 4 doubled, on 2 streams
        let topo = TopoInfo::new(0, map).unwrap().with_channels(doubled);
        assert_eq!(Rings::of(&topo).unwrap().count(), 4);
        assert_eq!(Rings::of(&topo).unwrap().groups().len(), 2);
    }

    /// Only each channel's ring neighbours exchange data, and every rank
    /// sends exactly what [`multi_ring_terms`] says, within its host and
    /// across hosts: on 4 + 4 ranks each rank sends over TCP in one of the
    /// four channels, not in all of them as in a single ring.
    #[test]
    fn traffic_matches_the_terms_and_stays_on_ring_edges() {
        for hosts in [&[4u32, 4][..], &[2, 3], &[2, 1, 3], &[3, 3, 2]] {
            let p: u32 = hosts.iter().sum();
            let map: Vec<u32> = hosts
                .iter()
                .enumerate()
                .flat_map(|(h, &n)| std::iter::repeat_n(h as u32, n as usize))
                .collect();
            let topo = TopoInfo::new(0, map.clone()).unwrap();
            let rings = Rings::of(&topo).unwrap();
            let edges: HashSet<(u32, u32)> = (0..rings.count())
                .flat_map(|c| (0..p).map(move |r| (c, r)))
                .map(|(c, r)| (r, rings.channel(c, r).next))
                .collect();
            for &(name, op) in &MULTI_RING_EXECUTORS[..3] {
                // every channel's part, and every ring slice of it, whole lines
                let lines = (rings.count() * p as usize) as u64;
                let count = 32 * lines * if op == OpType::AllReduce { p as u64 } else { 1 };
                let sp = spec(op, hosts, count, DataType::Fp32, ReduceOp::Sum);
                let r = simulate(registry(), name, &sp)
                    .unwrap_or_else(|e| panic!("{name} {hosts:?}: {e}"));
                let mut sent = vec![(0u64, 0u64); p as usize];
                for (&(from, to), &b) in &r.link_bytes {
                    assert!(edges.contains(&(from, to)), "{name}: {from} → {to}");
                    let s = &mut sent[from as usize];
                    if map[from as usize] == map[to as usize] {
                        s.0 += b;
                    } else {
                        s.1 += b;
                    }
                }
                let bytes = 4 * count * if op == OpType::AllReduce { 1 } else { p as u64 };
                let t = multi_ring_terms(op, &rings, &map, bytes).unwrap();
                let want: Vec<(u64, u64)> =
                    t.sent.iter().map(|&(a, b)| (a as u64, b as u64)).collect();
                assert_eq!(sent, want, "{name} hosts={hosts:?}");
            }
        }
        // 4 + 4: the inter-host bytes are spread, 1/4 of a single ring's per rank
        let map = vec![0, 0, 0, 0, 1, 1, 1, 1];
        let rings = Rings::of(&TopoInfo::new(0, map.clone()).unwrap()).unwrap();
        let t = multi_ring_terms(OpType::AllReduce, &rings, &map, 1 << 20).unwrap();
        let single = Rings::new(
            &[vec![0, 1, 2, 3], vec![4, 5, 6, 7]],
            ChannelLimits::new(1, 1).unwrap(),
        )
        .unwrap();
        let one = multi_ring_terms(OpType::AllReduce, &single, &map, 1 << 20).unwrap();
        let busiest =
            |t: &crate::cost::MultiRingTerms| t.sent.iter().map(|s| s.1).fold(0.0, f64::max);
        assert_eq!(busiest(&t) * 4.0, busiest(&one));
    }
}
