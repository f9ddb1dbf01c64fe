//! The plan simulator: runs any registered executor for N ranks on one
//! thread, and reports deadlocks, wrong results, steps and traffic.
//!
//! Executors only enqueue tasks, so the simulator can run them unchanged:
//! each symbolic rank gets a device, streams, its buffers and simulated
//! links (in-process links that count bytes and carry logical time); then
//! one thread polls every rank's device in turn until all work is done. If
//! no rank can progress while work remains, the plan deadlocks, and the
//! report names each stuck rank, its step, the verb and the peer it waits
//! for. No thread blocks, so a broken plan is reported, never hung.
//!
//! ```
//! use hccl_algorithm::sim::{simulate, SimSpec};
//! use hccl_algorithm::registry;
//! use hccl_platform::{DataType, ReduceOp};
//!
//! let spec = SimSpec::all_reduce(16, 1000, DataType::Fp32, ReduceOp::Sum);
//! let report = simulate(registry(), "AllReduceRingExecutor", &spec).unwrap();
//! assert_eq!(report.steps, 2 * 15); // 2(p-1) steps on the critical path
//! ```

mod data;
mod link;
mod links;
mod progress;
mod symbolic;
mod timing;

use progress::Progress;
pub use progress::{ProgressHook, SimPhase, SimProgress};
pub use timing::{timeline_json, HostLinkLoad, SimEvent};

use crate::executor::ExecutorRegistry;
use crate::op::{OpParam, OpType, VCounts, WorkflowMode};
use crate::resource::AlgResourceResponse;
use crate::topo::{CommPlane, TopoInfo};
use hccl_platform::EventCount;
use hccl_platform::{
    DataType, Device, DeviceConfig, DeviceMem, HcclError, LinkHandle, MemKind, Notify, OpLabel,
    ReduceOp, Stream,
};
use hccl_platform::{InProcEndpoint, InProcLink};
use link::{Clock, PairStamps, Side, SimLink, Stamp};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// Server index of every rank (all zeros = one server).
    pub rank_to_server: Vec<u32>,
    /// The op.
    pub op_type: OpType,
    /// Element count (as the op's API counts it).
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction.
    pub reduce_op: ReduceOp,
    /// Root rank.
    pub root: u32,
    /// CCL buffer size per rank, bytes (`None`: just large enough for the op).
    pub ccl_buffer_size: Option<usize>,
    /// Workflow mode.
    pub mode: WorkflowMode,
    /// Whether to check results against the reference.
    pub check: bool,
    /// Per-rank counts of AllGatherV (each rank's send count) and
    /// ReduceScatterV (each rank's receive count); blocks packed.
    pub v_counts: Option<Vec<u64>>,
    /// AllToAllV: `matrix[r][q]` = elements rank r sends to rank q; blocks packed.
    pub matrix: Option<Vec<Vec<u64>>>,
    /// Channel limits of the multi-ring executors ([`TopoInfo::channels`]).
    pub channels: crate::rings::ChannelLimits,
    /// Run the op in place, as NCCL and `MPI_IN_PLACE` define it: AllGather
    /// (V) reads its input from this rank's block of the output, ReduceScatter
    /// (V) writes its output into this rank's block of the input, AllReduce
    /// and Reduce use one buffer. Other ops refuse it.
    pub in_place: bool,
    /// How data is kept and checked: bytes, symbols, or chosen by size
    /// ([`DataMode`]).
    pub data: DataMode,
    /// Predict the plan's time with these α-β-γ parameters and host link
    /// capacity (see [`SimReport::predicted_ns`]); `None`: count steps and
    /// bytes only.
    pub cost: Option<crate::cost::CostParams>,
    /// In a timed simulation, keep up to this many transfers and reduces
    /// for a timeline ([`SimReport::timeline`], [`timeline_json`]).
    pub timeline_events: usize,
    /// Threads that drive the plan, each over a shard of the ranks
    /// (`None`: one per core for plans of 1,024 ranks or more, else one).
    /// Reports do not depend on it; a timed simulation uses one.
    pub drivers: Option<usize>,
    /// Told how far the simulation got every so often (`None`: nobody).
    pub progress: Option<ProgressHook>,
}

/// How the simulator keeps and checks the data of a plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataMode {
    /// [`DataMode::Bytes`] for small plans, [`DataMode::Symbolic`] for
    /// large ones: more than [`SYMBOLIC_ABOVE_RANKS`] ranks, or user buffers
    /// of more than [`SYMBOLIC_ABOVE_BYTES`] in all.
    #[default]
    Auto,
    /// Every buffer holds real bytes, the result is compared byte for byte
    /// with a reference computed by the host (exact for every data type).
    Bytes,
    /// Buffers hold no bytes: each element carries its identity (a token
    /// for moved data; for reduced data its index and the set of ranks
    /// that contributed, as a count and a hash sum modulo a prime), kept
    /// as runs, so a whole result is one entry whatever its size. A
    /// dropped, duplicated or misplaced contribution is still caught and
    /// named; what is not modelled is arithmetic (the reduction's value
    /// is not computed). Executors with AIV kernels need bytes.
    Symbolic,
}

/// [`DataMode::Auto`] keeps symbols instead of bytes above this many ranks.
pub const SYMBOLIC_ABOVE_RANKS: u32 = 1024;
/// [`DataMode::Auto`] keeps symbols instead of bytes when the user buffers
/// of all ranks together are larger than this.
pub const SYMBOLIC_ABOVE_BYTES: u64 = 256 << 20;

impl SimSpec {
    /// An op-base AllReduce of `count` elements on `ranks` ranks of one server.
    pub fn all_reduce(ranks: u32, count: u64, dtype: DataType, reduce_op: ReduceOp) -> Self {
        SimSpec {
            rank_to_server: vec![0; ranks as usize],
            op_type: OpType::AllReduce,
            count,
            dtype,
            reduce_op,
            root: 0,
            ccl_buffer_size: None,
            mode: WorkflowMode::OpBase,
            check: true,
            v_counts: None,
            matrix: None,
            channels: Default::default(),
            in_place: false,
            data: DataMode::Auto,
            cost: None,
            timeline_events: 0,
            drivers: None,
            progress: None,
        }
    }

    /// An op-base `op_type` of `count` elements on `ranks` ranks of one server.
    pub fn op(
        op_type: OpType,
        ranks: u32,
        count: u64,
        dtype: DataType,
        reduce_op: ReduceOp,
    ) -> Self {
        SimSpec {
            op_type,
            ..Self::all_reduce(ranks, count, dtype, reduce_op)
        }
    }

    /// The same op on hosts of the given sizes: host 0 holds the first
    /// `sizes[0]` ranks, host 1 the next `sizes[1]`, and so on (the ops'
    /// rank count becomes the sum).
    pub fn on_hosts(self, sizes: &[u32]) -> Self {
        SimSpec {
            rank_to_server: sizes
                .iter()
                .enumerate()
                .flat_map(|(h, &n)| std::iter::repeat_n(h as u32, n as usize))
                .collect(),
            ..self
        }
    }

    /// The same op, in place (see [`SimSpec::in_place`]).
    pub fn in_place(self) -> Self {
        SimSpec {
            in_place: true,
            ..self
        }
    }

    /// The same op, its time predicted with `cost` ([`SimSpec::cost`]).
    pub fn timed(self, cost: crate::cost::CostParams) -> Self {
        SimSpec {
            cost: Some(cost),
            ..self
        }
    }

    /// The same op with data kept and checked as `data` ([`DataMode`]).
    pub fn with_data(self, data: DataMode) -> Self {
        SimSpec { data, ..self }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> u32 {
        self.rank_to_server.len() as u32
    }
}

/// What a successful simulation measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Ranks simulated.
    pub ranks: u32,
    /// Communication steps on the critical path: the longest chain of data
    /// transfers where each waits for the previous one (the α count).
    pub steps: u64,
    /// Tasks run, all ranks.
    pub tasks: u64,
    /// Bytes sent over each link, keyed by (sender, receiver) user rank.
    pub link_bytes: BTreeMap<(u32, u32), u64>,
    /// Transfers over each link.
    pub link_transfers: BTreeMap<(u32, u32), u64>,
    /// Bytes sent per plane (`CommPlane as usize`).
    pub plane_bytes: [u64; CommPlane::COUNT],
    /// Most bytes any one rank sent on each plane (the β volume per level).
    pub plane_max_rank_bytes: [u64; CommPlane::COUNT],
    /// How many of the critical path's `steps` went over each plane (the
    /// α count per level). Where several chains are equally long, the one
    /// reaching the lowest rank is reported.
    pub plane_steps: [u64; CommPlane::COUNT],
    /// Most bytes any one rank sent (the β count's volume).
    pub max_rank_bytes_sent: u64,
    /// Bytes reduced by local reduce tasks, all ranks.
    pub reduce_bytes: u64,
    /// Whether results were checked against a reference.
    pub checked: bool,
    /// Whether data was kept as symbols ([`DataMode::Symbolic`]) rather
    /// than bytes.
    pub symbolic: bool,
    /// The predicted time of the plan, ns, in a timed simulation
    /// ([`SimSpec::cost`]): when the last stream of any rank finished.
    pub predicted_ns: Option<u64>,
    /// In a timed simulation across hosts: the host link that carried the
    /// most bytes, and how long it was busy.
    pub busiest_host_link: Option<HostLinkLoad>,
    /// In a timed simulation with [`SimSpec::timeline_events`]: the
    /// transfers and reduces, in the order they were simulated.
    pub timeline: Vec<SimEvent>,
    /// Timeline events not kept (beyond [`SimSpec::timeline_events`]).
    pub timeline_dropped: u64,
}

/// One rank's stuck task in a deadlock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    /// The rank.
    pub rank: u32,
    /// The algorithm step of the stuck task.
    pub step: u32,
    /// The verb, for link tasks.
    pub verb: Option<&'static str>,
    /// The peer it waits for, for link tasks.
    pub peer: Option<u32>,
    /// What the task does.
    pub what: String,
}

/// Why a simulation failed.
#[derive(Clone, Debug)]
pub enum SimFailure {
    /// No rank could progress while tasks remained.
    Deadlock {
        /// Every stuck head task.
        stuck: Vec<Stuck>,
    },
    /// A rank's output differs from the reference.
    WrongResult {
        /// The rank.
        rank: u32,
        /// First differing byte offset.
        offset: usize,
        /// Length of the compared output.
        len: usize,
    },
    /// A rank's output differs from the reference in symbolic mode
    /// ([`DataMode::Symbolic`]), with what is wrong there.
    WrongSymbol {
        /// The rank.
        rank: u32,
        /// First differing byte offset.
        offset: usize,
        /// Length of the compared output.
        len: usize,
        /// What the element there holds instead, e.g. "1 contribution
        /// missing: rank 7's".
        detail: String,
    },
    /// The executor or a task returned an error.
    Error(HcclError),
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimFailure::Deadlock { stuck } => {
                write!(f, "deadlock: no rank can progress; {} stuck task(s):", stuck.len())?;
                for s in stuck.iter().take(8) {
                    write!(f, " [rank {} step {}: {}]", s.rank, s.step, s.what)?;
                }
                if stuck.len() > 8 {
                    write!(f, " ... and {} more", stuck.len() - 8)?;
                }
                Ok(())
            }
            SimFailure::WrongResult { rank, offset, len } => write!(
                f,
                "wrong result on rank {rank}: output differs from the reference at byte {offset} of {len}"
            ),
            SimFailure::WrongSymbol {
                rank,
                offset,
                len,
                detail,
            } => write!(
                f,
                "wrong result on rank {rank} (symbolic check): output differs from the reference at byte {offset} of {len}: {detail}"
            ),
            SimFailure::Error(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SimFailure {}

impl From<HcclError> for SimFailure {
    fn from(e: HcclError) -> Self {
        SimFailure::Error(e)
    }
}

struct SimRank {
    device: Device,
    stream: Stream,
    slaves: Vec<Stream>,
    output: DeviceMem,
    /// The stages of a plan issued a stage at a time
    /// ([`crate::CollExecutor::staged`]) not issued yet.
    stages: Option<Box<dyn crate::StagedOp>>,
}

/// A rank with a staged plan gets its next stage while fewer than this
/// many of its tasks are queued: a ring step is ~6 tasks, so a few steps
/// wait behind the running one and a window of ranks keeps moving.
const ISSUE_BELOW: u64 = 16;

impl SimRank {
    /// Tasks queued on the rank's streams and not yet completed.
    fn queued(&self) -> u64 {
        // (the device's own sum reads only its busy streams: a
        // multi-ring plan's rank has 33, most idle)
        self.device.outstanding_tasks()
    }

    /// Issues stages of the rank's staged plan while its queue is short;
    /// returns whether it issued any.
    fn top_up(&mut self, tag: &str, r: u32) -> Result<bool, SimFailure> {
        let mut issued = false;
        while self.queued() < ISSUE_BELOW {
            let Some(plan) = self.stages.as_mut() else {
                break;
            };
            // a failed stream discards its tasks: the rest of the plan
            // would only queue behind the failure
            let failed = self.device.any_stream_failed();
            if failed || !plan.issue_next().map_err(|e| e.rank(r).tag(tag))? {
                self.stages = None;
                break;
            }
            issued = true;
        }
        Ok(issued)
    }
}

/// One rank's buffers and counts for `spec`.
struct Shape {
    count: u64,
    in_elems: u64,
    out_elems: u64,
    send_v: Option<VCounts>,
    recv_v: Option<VCounts>,
    /// Broadcast works in one buffer.
    same_buffer: bool,
    /// In place: the smaller buffer is the range of the larger at this
    /// element offset (AllGather: the input inside the output;
    /// ReduceScatter: the output inside the input).
    alias_at: Option<u64>,
}

fn shape(spec: &SimSpec, r: u32) -> Result<Shape, SimFailure> {
    let p = spec.ranks() as u64;
    let c = spec.count;
    let mut sh = Shape {
        count: c,
        in_elems: c,
        out_elems: c,
        send_v: None,
        recv_v: None,
        same_buffer: false,
        alias_at: None,
    };
    let need =
        |what: &str| HcclError::para(format!("the simulation of {} needs {what}", spec.op_type));
    match spec.op_type {
        OpType::AllReduce | OpType::Reduce | OpType::Send | OpType::Receive => {}
        OpType::Broadcast => sh.same_buffer = true,
        OpType::AllGather | OpType::Gather => sh.out_elems = p * c,
        OpType::ReduceScatter | OpType::Scatter => sh.in_elems = p * c,
        OpType::AllToAll => {
            sh.in_elems = p * c;
            sh.out_elems = p * c;
        }
        OpType::AllGatherV | OpType::ReduceScatterV => {
            let v = spec.v_counts.clone().ok_or_else(|| need("v_counts"))?;
            let packed = VCounts::packed(v);
            sh.count = packed.counts[r as usize];
            if spec.op_type == OpType::AllGatherV {
                sh.in_elems = sh.count;
                sh.out_elems = packed.extent();
                sh.recv_v = Some(packed);
            } else {
                sh.in_elems = packed.extent();
                sh.out_elems = sh.count;
                sh.send_v = Some(packed);
            }
        }
        OpType::AllToAllV => {
            let m = spec.matrix.as_ref().ok_or_else(|| need("matrix"))?;
            let send = VCounts::packed(m[r as usize].clone());
            let recv = VCounts::packed(m.iter().map(|row| row[r as usize]).collect());
            sh.in_elems = send.extent();
            sh.out_elems = recv.extent();
            sh.send_v = Some(send);
            sh.recv_v = Some(recv);
        }
    }
    if spec.in_place {
        let r = r as u64;
        match spec.op_type {
            OpType::AllReduce => sh.same_buffer = true,
            // the root's result lands in its input; the others' output is unused
            OpType::Reduce => sh.same_buffer = true,
            OpType::AllGather | OpType::ReduceScatter => sh.alias_at = Some(r * c),
            OpType::AllGatherV => sh.alias_at = sh.recv_v.as_ref().map(|v| v.displs[r as usize]),
            OpType::ReduceScatterV => {
                sh.alias_at = sh.send_v.as_ref().map(|v| v.displs[r as usize])
            }
            op => {
                return Err(SimFailure::Error(HcclError::para(format!(
                    "{op} has no in-place form"
                ))))
            }
        }
    }
    Ok(sh)
}

fn reduces(op: OpType) -> bool {
    op.reduces()
}

/// The pattern's reduction (None for data-movement ops).
fn pattern_op(spec: &SimSpec) -> Option<ReduceOp> {
    reduces(spec.op_type).then_some(spec.reduce_op)
}

/// The expected output of rank `r`, or None where the op defines none
/// (non-root ranks of Reduce and Gather) or no reference exists.
fn all_inputs(spec: &SimSpec) -> Result<Vec<Vec<u8>>, SimFailure> {
    (0..spec.ranks())
        .map(|q| {
            Ok(data::input(
                spec.dtype,
                pattern_op(spec),
                q,
                shape(spec, q)?.in_elems as usize,
            ))
        })
        .collect()
}

/// Whether every rank expects the same output (computed once, then reused).
fn same_for_all(op: OpType) -> bool {
    matches!(
        op,
        OpType::AllReduce | OpType::AllGather | OpType::AllGatherV | OpType::Broadcast
    )
}

fn expected(spec: &SimSpec, inputs: &[Vec<u8>], r: u32) -> Result<Option<Vec<u8>>, SimFailure> {
    let p = spec.ranks();
    let u = spec.dtype.size();
    let c = spec.count as usize;
    let block = |q: u32, off: usize, len: usize| &inputs[q as usize][off * u..(off + len) * u];
    let fold = |blocks: Vec<&[u8]>| data::fold(spec.dtype, spec.reduce_op, &blocks);
    let root = spec.root;
    Ok(Some(match spec.op_type {
        OpType::AllReduce => fold((0..p).map(|q| block(q, 0, c)).collect())?,
        OpType::Reduce if r == root => fold((0..p).map(|q| block(q, 0, c)).collect())?,
        OpType::ReduceScatter => fold((0..p).map(|q| block(q, r as usize * c, c)).collect())?,
        OpType::ReduceScatterV => {
            let v = VCounts::packed(spec.v_counts.clone().unwrap_or_default());
            let (off, len) = (v.displs[r as usize] as usize, v.counts[r as usize] as usize);
            fold((0..p).map(|q| block(q, off, len)).collect())?
        }
        OpType::AllGather => (0..p).flat_map(|q| block(q, 0, c).to_vec()).collect(),
        OpType::Gather if r == root => (0..p).flat_map(|q| block(q, 0, c).to_vec()).collect(),
        OpType::AllGatherV => {
            let v = spec.v_counts.clone().unwrap_or_default();
            (0..p)
                .flat_map(|q| block(q, 0, v[q as usize] as usize).to_vec())
                .collect()
        }
        OpType::Broadcast => inputs[root as usize].clone(),
        OpType::Scatter => block(root, r as usize * c, c).to_vec(),
        OpType::AllToAll => (0..p)
            .flat_map(|q| block(q, r as usize * c, c).to_vec())
            .collect(),
        OpType::AllToAllV => {
            let m = spec.matrix.clone().unwrap_or_default();
            (0..p)
                .flat_map(|q| {
                    let row = VCounts::packed(m[q as usize].clone());
                    block(
                        q,
                        row.displs[r as usize] as usize,
                        row.counts[r as usize] as usize,
                    )
                    .to_vec()
                })
                .collect()
        }
        _ => return Ok(None),
    }))
}

/// Runs executor `name` from `registry` for every rank of `spec`.
pub fn simulate(
    registry: &ExecutorRegistry,
    name: &str,
    spec: &SimSpec,
) -> Result<SimReport, SimFailure> {
    match simulate_once(registry, name, spec) {
        // executors that read peers' buffers by address need bytes (the
        // rank reported may be a peer the reader's failure was relayed to)
        Err(SimFailure::Error(e))
            if spec.data == DataMode::Auto
                && matches!(
                    e.code(),
                    hccl_platform::HcclResult::ENotSupport | hccl_platform::HcclResult::ERemote
                )
                && e.message().contains("virtual memory") =>
        {
            simulate_once(registry, name, &spec.clone().with_data(DataMode::Bytes))
        }
        r => r,
    }
}

fn simulate_once(
    registry: &ExecutorRegistry,
    name: &str,
    spec: &SimSpec,
) -> Result<SimReport, SimFailure> {
    let p = spec.ranks();
    let u = spec.dtype.size();
    let shapes: Vec<Shape> = (0..p).map(|r| shape(spec, r)).collect::<Result<_, _>>()?;
    let largest = shapes
        .iter()
        .map(|s| s.in_elems.max(s.out_elems))
        .max()
        .unwrap_or(0) as usize
        * u;
    // mesh executors need a slot per rank: give them room for one round
    let ccl = spec
        .ccl_buffer_size
        .unwrap_or_else(|| (largest * p as usize).clamp(4096, 4 << 20));
    let config = DeviceConfig {
        exec_timeout: None,
        ..Default::default()
    };
    let user_bytes: u64 = shapes
        .iter()
        .map(|s| (s.in_elems + s.out_elems) * u as u64)
        .sum();
    let symbolic = match spec.data {
        DataMode::Bytes => false,
        DataMode::Symbolic => true,
        // graph mode maps peers' user buffers, which needs bytes
        DataMode::Auto => {
            spec.mode != WorkflowMode::Graph
                && (p > SYMBOLIC_ABOVE_RANKS || user_bytes > SYMBOLIC_ABOVE_BYTES)
        }
    };
    // a buffer: symbols (no bytes) or bytes, sparse where a plan touches
    // little of it
    let buffer = |len: usize, sparse: bool| -> hccl_platform::Result<DeviceMem> {
        if symbolic && len > 0 {
            Ok(DeviceMem::alloc_virtual(
                len,
                Arc::new(symbolic::SymMem::new(len, u)),
            ))
        } else if sparse {
            DeviceMem::alloc_sparse(len)
        } else {
            DeviceMem::alloc(len)
        }
    };
    let bases = symbolic::token_bases(&shapes);

    // Per rank: op param, request, buffers. The executor and the links it
    // asked for are dropped here and made again just before it
    // orchestrates: a rank's transport request holds p-sized tables,
    // which for all ranks at once would be O(p²) memory (17 GB at 16,384
    // ranks). The topologies share one rank table.
    let mut params = Vec::with_capacity(p as usize);
    let mut reqs = Vec::with_capacity(p as usize);
    let mut endpoints = Vec::with_capacity(p as usize);
    let mut mems = Vec::with_capacity(p as usize);
    let mut clocks: Vec<Clock> = Vec::with_capacity(p as usize);
    let mut ranks: Vec<SimRank> = Vec::with_capacity(p as usize);
    // one rank table, checked once, that every rank's view shares
    let topo0 = TopoInfo::new(0, spec.rank_to_server.clone())?.with_channels(spec.channels);
    let timing = spec.cost.map(|c| {
        Arc::new(timing::Timing::new(
            c,
            spec.rank_to_server.clone().into(),
            spec.timeline_events,
        ))
    });
    let progress = Progress::new(spec.progress.clone(), p);
    let mut timer = progress.timer();
    for r in 0..p {
        if timer.due() {
            progress.orchestrated(r / 2);
        }
        let topo = topo0.for_rank(r)?;
        let exec = registry.create(name, &topo)?;
        // the driver below skips ranks whose key did not move since
        // their last fruitless poll: every notify must move it
        let device = Device::with_waker(r, config.clone(), Arc::new(EventCount::counting()));
        if let Some(t) = &timing {
            device.set_task_observer(Arc::new(timing::RankClock {
                rank: r,
                timing: t.clone(),
            }))?;
        }
        let stream = Stream::new(&device);
        let sh = &shapes[r as usize];
        // graph mode runs on user buffers peers map: shareable memory
        // registered with the rank's device, as a captured op's are
        let graph = spec.mode == WorkflowMode::Graph;
        let user_mem = |len: usize| -> hccl_platform::Result<DeviceMem> {
            if !graph || len == 0 || symbolic {
                return buffer(len, false);
            }
            let m = DeviceMem::alloc_shareable(len)?;
            m.register_in(device.uid())?;
            Ok(m)
        };
        let (input, output) = match (sh.alias_at, sh.same_buffer) {
            (Some(at), _) if sh.in_elems <= sh.out_elems => {
                let output = user_mem(sh.out_elems as usize * u)?;
                (
                    output.range(at as usize * u, sh.in_elems as usize * u)?,
                    output,
                )
            }
            (Some(at), _) => {
                let input = user_mem(sh.in_elems as usize * u)?;
                let output = input.range(at as usize * u, sh.out_elems as usize * u)?;
                (input, output)
            }
            (None, true) => {
                let m = user_mem(sh.in_elems as usize * u)?;
                (m.clone(), m)
            }
            (None, false) => (
                user_mem(sh.in_elems as usize * u)?,
                user_mem(sh.out_elems as usize * u)?,
            ),
        };
        // Broadcast's non-roots start from garbage, not their pattern
        if symbolic {
            if spec.op_type != OpType::Broadcast || r == spec.root {
                symbolic::fill_input(spec, &bases, r, &input)?;
            }
        } else if spec.op_type != OpType::Broadcast || r == spec.root {
            input.copy_from_host_bytes(&data::input(
                spec.dtype,
                pattern_op(spec),
                r,
                sh.in_elems as usize,
            ))?;
        }
        let param = OpParam {
            tag: Cow::Owned(format!("sim_{}", spec.op_type).into()),
            op_type: spec.op_type,
            stream: Cow::Owned(stream.clone()),
            input: Cow::Owned(input.clone()),
            output: Cow::Owned(output.clone()),
            count: sh.count,
            dtype: spec.dtype,
            reduce_op: spec.reduce_op,
            root: spec.root,
            mode: spec.mode,
            send_v: sh.send_v.clone(),
            recv_v: sh.recv_v.clone(),
            peer: 0,
        };
        let req = exec
            .calc_res_request(&param, &topo)
            .map_err(|e| e.rank(r))?;
        if symbolic && req.need_aiv_buffer {
            // AIV kernels read and write bytes
            if spec.data == DataMode::Auto {
                return simulate(registry, name, &spec.clone().with_data(DataMode::Bytes));
            }
            return Err(HcclError::para(format!(
                "{name} runs AIV kernels, which need bytes: simulate it with DataMode::Bytes"
            ))
            .into());
        }
        // sparse: most plans touch a few KiB of these (4 MiB at 1,024
        // ranks); huge pages would zero and keep 2 MiB per touched buffer
        let ccl_in = buffer(ccl, true)?;
        let ccl_out = buffer(ccl, true)?;
        let scratch = if req.scratch_mem_size > 0 {
            buffer(req.scratch_mem_size as usize, true)?
        } else {
            DeviceMem::null()
        };
        endpoints.push(Arc::new(InProcEndpoint {
            rank: r,
            mems: vec![
                (MemKind::CclInput, ccl_in.clone()),
                (MemKind::CclOutput, ccl_out.clone()),
                (MemKind::Scratch, scratch.clone()),
                (MemKind::ParamInput, input.clone()),
                (MemKind::ParamOutput, output.clone()),
            ],
            waker: device.waker(),
            board: if req.need_aiv_buffer {
                Some(InProcEndpoint::new_board()?)
            } else {
                None
            },
        }));
        mems.push((ccl_in, ccl_out, scratch));
        clocks.push(Arc::default());
        let slaves = (0..req.stream_num)
            .map(|_| Stream::new(&device))
            .collect::<Vec<_>>();
        ranks.push(SimRank {
            device,
            stream,
            slaves,
            output,
            stages: None,
        });
        drop(exec);
        params.push(param);
        reqs.push(crate::resource::AlgResourceRequest {
            op_transport: Default::default(),
            ..req
        });
    }

    // Links, made once per unordered pair, with the plane of first use.
    let mut links = links::LinkTable::new(p);
    // large untimed plans are driven in an order that follows their links
    // (see `locality_order`): each rank's first few peers, as asked for
    let reorder = p as usize >= PARALLEL_ABOVE && timing.is_none();
    let mut peers: Vec<Vec<u32>> = if reorder {
        vec![Vec::new(); p as usize]
    } else {
        Vec::new()
    };
    let planes = [
        CommPlane::Level0,
        CommPlane::Level1,
        CommPlane::Level2,
        CommPlane::Combine,
    ];
    for r in 0..p as usize {
        // the requests above and the plans here: half the work each
        if timer.due() {
            progress.orchestrated((p + r as u32) / 2);
        }
        let topo = topo0.for_rank(r as u32)?;
        let mut exec = registry.create(name, &topo)?;
        // the same request as before (calc_res_request is a function of
        // the op and the topology), now with its transport tables
        let mut op_transport = exec
            .calc_res_request(&params[r], &topo)
            .map_err(|e| e.rank(r as u32))?
            .op_transport;
        for (pi, level) in op_transport.iter_mut().enumerate() {
            for sub in level.iter_mut() {
                for (i, t) in sub.transport_requests.iter().enumerate() {
                    if !t.is_valid {
                        continue;
                    }
                    let (a, b) = (t.local_user_rank, t.remote_user_rank);
                    if b >= p {
                        return Err(HcclError::internal(format!(
                            "rank {a} asked for a link to rank {b} of {p}"
                        ))
                        .rank(a)
                        .into());
                    }
                    if let Some(mine) = peers.get_mut(a as usize) {
                        if mine.len() < LOCALITY_PEERS && !mine.contains(&b) && a != b {
                            mine.push(b);
                        }
                    }
                    let mine = links.end(a, b, |lo, hi| {
                        let (x, y) = InProcLink::pair_shared(
                            &endpoints[lo as usize],
                            &endpoints[hi as usize],
                        );
                        let stamps = Arc::new(PairStamps::default());
                        let end = |inner, at: u32, side| {
                            Arc::new(
                                SimLink::new(
                                    inner,
                                    clocks[at as usize].clone(),
                                    planes[pi],
                                    side,
                                    stamps.clone(),
                                )
                                .timed(timing.clone()),
                            )
                        };
                        (end(x, lo, Side::Low), end(y, hi, Side::High))
                    });
                    sub.links[i] = Some(LinkHandle::new(mine));
                }
            }
        }
        let req = &reqs[r];
        let dev = &ranks[r].device;
        let main = req.notify_num / 2;
        let response = AlgResourceResponse {
            ccl_input: mems[r].0.clone(),
            ccl_output: mems[r].1.clone(),
            param_input: params[r].input.clone().into_owned(),
            param_output: params[r].output.clone().into_owned(),
            scratch: mems[r].2.clone(),
            aiv_input: DeviceMem::null(),
            aiv_output: DeviceMem::null(),
            slave_streams: ranks[r].slaves.clone(),
            notifies_main: (0..main).map(|_| Notify::new(dev)).collect(),
            notifies_aux: (0..req.notify_num - main)
                .map(|_| Notify::new(dev))
                .collect(),
            op_transport,
        };
        // Orchestrate this rank; all are driven together below.
        let label = Arc::new(OpLabel {
            tag: params[r].tag.to_string(),
            algorithm: name.to_owned(),
            rank: r as u32,
        });
        ranks[r].stream.set_label(Some(label.clone()));
        for s in &ranks[r].slaves {
            s.set_label(Some(label.clone()));
        }
        let at = |e: HcclError| e.rank(r as u32).tag(&**params[r].tag);
        // a plan issued a stage at a time is issued as the rank runs
        // (see `drive`), never stored whole
        match exec.staged(&params[r], &response).map_err(at)? {
            Some(plan) => ranks[r].stages = Some(plan),
            None => exec.orchestrate(&params[r], &response).map_err(at)?,
        }
    }
    // drive in locality order, then put the ranks back in rank order
    let ids: Vec<u32> = if reorder {
        locality_order(&peers)
    } else {
        (0..p).collect()
    };
    drop(peers);
    let mut ranks = permute(ranks, &ids);
    let params_in_order = permute(params, &ids);
    let driven = drive(
        &mut ranks,
        &params_in_order,
        &ids,
        (timing.is_some(), spec.drivers),
        progress,
    );
    let ranks = unpermute(ranks, &ids);
    drop(params_in_order);
    if let Err(SimFailure::Deadlock { stuck }) = &driven {
        // a rank whose task failed told only the peers of that task's
        // link; the ranks that wait for it elsewhere are stuck, and the
        // failure, not the deadlock it left, is what to report
        if let Some(e) = first_failure(&ranks) {
            return Err(SimFailure::Error(e.during(format!(
                "{} rank(s) left waiting for it (first: rank {}); the failure",
                stuck.len(),
                stuck.first().map_or(0, |s| s.rank)
            ))));
        }
    }
    driven?;
    for (r, rank) in ranks.iter().enumerate() {
        for s in std::iter::once(&rank.stream).chain(rank.slaves.iter()) {
            s.synchronize().map_err(|e| e.rank(r as u32))?;
        }
    }

    // Results.
    let mut checked = false;
    if spec.check && symbolic {
        for (r, rank) in ranks.iter().enumerate() {
            if let Some(want) = symbolic::expected(spec, &shapes, &bases, r as u32) {
                checked = true;
                symbolic::check(spec, &shapes, &bases, r as u32, &rank.output, &want)?;
            }
        }
    } else if spec.check {
        let inputs = all_inputs(spec)?;
        let mut shared: Option<Vec<u8>> = None;
        for (r, rank) in ranks.iter().enumerate() {
            let want = match (&shared, same_for_all(spec.op_type)) {
                (Some(w), true) => Some(w.clone()),
                _ => {
                    let w = expected(spec, &inputs, r as u32)?;
                    if same_for_all(spec.op_type) {
                        shared = w.clone();
                    }
                    w
                }
            };
            let Some(want) = want else {
                continue;
            };
            checked = true;
            let mut got = vec![0u8; want.len()];
            rank.output.copy_to_host_bytes(&mut got)?;
            if got == want {
                continue; // one memcmp; find the offset only on a mismatch
            }
            if let Some(offset) = got.iter().zip(want.iter()).position(|(g, w)| g != w) {
                return Err(SimFailure::WrongResult {
                    rank: r as u32,
                    offset,
                    len: want.len(),
                });
            }
        }
    }

    let last = clocks.iter().fold(Stamp::default(), |mut a, c| {
        a.merge(c.get());
        a
    });
    let mut report = SimReport {
        ranks: p,
        steps: last.total,
        plane_steps: last.planes,
        checked,
        symbolic,
        ..Default::default()
    };
    if let Some(t) = &timing {
        report.predicted_ns = Some(t.end());
        report.busiest_host_link = t.busiest_host_link();
        (report.timeline, report.timeline_dropped) = t.take_events();
    }
    links.report_traffic(p, &mut report);
    for rank in &ranks {
        let st = rank.device.stats();
        report.tasks += st.tasks;
        report.reduce_bytes += st.reduce_bytes;
    }
    Ok(report)
}

/// Ranks driven together until none can progress (see [`drive`]): a
/// window's per-rank state (device, streams, queue heads, links) must stay
/// in the L2 cache while it is polled round after round; a ring rank step
/// touches ~3.5 KB, so 256 ranks take ~1 MB of a 2 MiB L2.
const WINDOW: usize = 256;

/// Polls every rank's device until all work is done; fails with the stuck
/// tasks if no rank can progress while work remains.
///
/// Plans of at least [`PARALLEL_ABOVE`] ranks are driven by a thread per
/// core (at most [`MAX_DRIVERS`]; [`SimSpec::drivers`] overrides), each
/// over a contiguous shard of the ranks; smaller ones, and timed ones (whose shared host links take the
/// earliest free gap, so the order of polls can move a reservation), by
/// this thread alone. Ranks stay on their shard's thread, so each rank's
/// device and links are polled by one thread, as in a real run.
fn drive(
    ranks: &mut [SimRank],
    params: &[OpParam],
    ids: &[u32],
    (timed, asked): (bool, Option<usize>),
    progress: Progress,
) -> Result<(), SimFailure> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let drivers = match asked {
        _ if timed => 1,
        Some(n) => n.clamp(1, ranks.len().max(1)),
        None if ranks.len() < PARALLEL_ABOVE => 1,
        None => cores.min(MAX_DRIVERS).min(ranks.len() / WINDOW).max(1),
    };
    let progress = progress.with_shards(drivers);
    if drivers <= 1 {
        return Shard::new(ranks, params, ids).drive(None, (&progress, 0));
    }
    let per = ranks.len().div_ceil(drivers);
    // shards of `per` ranks: fewer than asked when `per` rounds up (5
    // ranks for 4 threads are 3 shards of 2, 2 and 1), and every thread
    // counted in `Drivers` must exist for them to agree
    let shards = ranks.len().div_ceil(per);
    let rounds = Drivers::new(shards);
    let mut stuck: Vec<Stuck> = Vec::new();
    let mut failure = None;
    std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .chunks_mut(per)
            .zip(params.chunks(per))
            .zip(ids.chunks(per))
            .enumerate()
            .map(|(i, ((shard, params), ids))| {
                let (rounds, progress) = (&rounds, &progress);
                scope.spawn(move || {
                    Shard::new(shard, params, ids).drive(Some((rounds, i)), (progress, i))
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(SimFailure::Deadlock { stuck: mine })) => stuck.extend(mine),
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    // shards hold ranks in drive order: report stuck ones by rank
    stuck.sort_by_key(|s| s.rank);
    match failure {
        Some(e) => Err(e),
        None if !stuck.is_empty() => Err(SimFailure::Deadlock { stuck }),
        None => Ok(()),
    }
}

/// The error of the lowest rank whose stream failed, if any did.
fn first_failure(ranks: &[SimRank]) -> Option<HcclError> {
    ranks.iter().enumerate().find_map(|(r, rank)| {
        if !rank.device.any_stream_failed() {
            return None;
        }
        std::iter::once(&rank.stream)
            .chain(&rank.slaves)
            // (a failed stream discarded its tasks: synchronize returns at once)
            .filter(|s| s.progress().failed_at.is_some())
            .find_map(|s| s.synchronize().err())
            .map(|e| e.rank(r as u32))
    })
}

/// Peers of each rank (the first asked for) that [`locality_order`] follows.
const LOCALITY_PEERS: usize = 4;

/// The order to drive ranks in so that ranks next to each other in it
/// exchange data: a depth-first walk of the link graph from rank 0, each
/// rank's peers taken in the order it asked for them (ranks it does not
/// reach follow, in rank order). The driver advances windows of
/// consecutive ranks and splits the ranks into contiguous shards; in rank
/// order a ring whose neighbours are far apart in number (a multi-ring
/// plan's first channel on one host runs 0, 1, p−1, 2, p−2, …) advanced
/// one step per pass and had its shards' threads wait on each other at
/// every edge.
fn locality_order(peers: &[Vec<u32>]) -> Vec<u32> {
    let p = peers.len();
    let mut seen = vec![false; p];
    let mut order = Vec::with_capacity(p);
    let mut stack = Vec::new();
    for root in 0..p as u32 {
        if seen[root as usize] {
            continue;
        }
        stack.push(root);
        while let Some(r) = stack.pop() {
            if std::mem::replace(&mut seen[r as usize], true) {
                continue;
            }
            order.push(r);
            // the first peer is walked first: pushed last
            for &q in peers[r as usize].iter().rev() {
                if !seen[q as usize] {
                    stack.push(q);
                }
            }
        }
    }
    order
}

/// `v` in the order `ids` gives (`ids` a permutation of its indices).
fn permute<T>(v: Vec<T>, ids: &[u32]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = v.into_iter().map(Some).collect();
    ids.iter()
        .map(|&i| slots[i as usize].take().expect("ids is a permutation"))
        .collect()
}

/// Undoes [`permute`]: `v[k]` goes back to index `ids[k]`.
fn unpermute<T>(v: Vec<T>, ids: &[u32]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = (0..v.len()).map(|_| None).collect();
    for (x, &i) in v.into_iter().zip(ids) {
        slots[i as usize] = Some(x);
    }
    slots
        .into_iter()
        .map(|x| x.expect("ids is a permutation"))
        .collect()
}

/// Plans of at least this many ranks are driven by several threads (see
/// [`drive`]): below, a pass is too short for the threads' agreement at
/// its end to pay.
const PARALLEL_ABOVE: usize = 4 * WINDOW;

/// Most threads that drive one plan.
const MAX_DRIVERS: usize = 8;

/// How the threads driving one plan (see [`drive`]) tell a pause from
/// the end. Each drives its shard pass after pass without waiting for the
/// others (the data a shard's edge ranks need arrives while it works); a
/// thread whose pass made no progress waits until another's does. All
/// ranks have stopped for good, done or deadlocked, once every thread
/// waits after a fruitless pass that began after the last pass that made
/// progress anywhere: nothing can wake a rank then.
struct Drivers {
    /// Passes that made progress, all threads together.
    generation: AtomicU64,
    /// Per thread: 1 + the generation at the start of its last pass while
    /// it waits after that pass made no progress, else 0.
    waiting: Vec<AtomicU64>,
    /// Whether a thread failed (the others stop).
    failed: AtomicBool,
}

impl Drivers {
    fn new(threads: usize) -> Self {
        Drivers {
            generation: AtomicU64::new(0),
            waiting: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            failed: Default::default(),
        }
    }

    /// Counts a pass that made progress.
    fn progressed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits after thread `me`'s fruitless pass, begun at generation
    /// `began`: `true` once every rank has stopped for good (or a thread
    /// failed), `false` when another pass may progress.
    fn wait(&self, me: usize, began: u64) -> bool {
        self.waiting[me].store(began + 1, Ordering::Release);
        let stopped = loop {
            if self.failed.load(Ordering::Acquire) {
                break true;
            }
            let now = self.generation.load(Ordering::Acquire);
            if now != began {
                break false;
            }
            if self
                .waiting
                .iter()
                .all(|w| w.load(Ordering::Acquire) == now + 1)
            {
                break true;
            }
            std::thread::yield_now();
        };
        if !stopped {
            self.waiting[me].store(0, Ordering::Release);
        }
        stopped
    }
}

/// The ranks one thread drives (all of them, or a shard).
struct Shard<'a, 'p> {
    ranks: &'a mut [SimRank],
    params: &'a [OpParam<'p>],
    /// The rank number of each of `ranks`.
    ids: &'a [u32],
}

impl<'a, 'p> Shard<'a, 'p> {
    fn new(ranks: &'a mut [SimRank], params: &'a [OpParam<'p>], ids: &'a [u32]) -> Self {
        Shard { ranks, params, ids }
    }

    /// Polls the shard's ranks until all work is done (with `rounds`:
    /// until the other shards' threads agree it is), or no rank anywhere
    /// can progress.
    ///
    /// A rank whose last poll made no progress is polled again only after
    /// its waker moved (a peer signalled it): most ranks of a large plan
    /// are waiting at any moment, and skipping them is cheap.
    ///
    /// Shards of more than [`WINDOW`] ranks are driven a window of
    /// consecutive ranks at a time, each polled until it quiesces, the
    /// windows shifted by half a window every other pass. Sweeping all
    /// ranks once per pass would advance a ring plan one step per pass
    /// and reload every rank's state from memory for each step (1,024
    /// ranks' state is larger than L2). A window instead advances its
    /// middle ranks up to half a window of steps while its state is
    /// cached; the shifted windows of the next pass start where the
    /// previous pass stopped short (at window edges), so every rank
    /// advances about half a window of steps per pass. Only the order of
    /// polls changes: what a poll does, and so every report, does not
    /// depend on it.
    fn drive(
        self,
        rounds: Option<(&Drivers, usize)>,
        (progress, thread): (&Progress, usize),
    ) -> Result<(), SimFailure> {
        let Shard { ranks, params, ids } = self;
        let wakers: Vec<_> = ranks.iter().map(|r| r.device.waker()).collect();
        let mut seen: Vec<Option<u64>> = vec![None; ranks.len()];
        let mut active: Vec<usize> = (0..ranks.len()).collect();
        let mut shifted = false;
        let mut timer = progress.timer();
        // staged ranks start with their first stages
        let mut failure = None;
        for (r, rank) in ranks.iter_mut().enumerate() {
            if let Err(e) = rank.top_up(&params[r].tag, ids[r]) {
                failure = Some(e);
                break;
            }
        }
        loop {
            let began = rounds.map_or(0, |(d, _)| d.generation.load(Ordering::Acquire));
            let n = active.len();
            let w = WINDOW.min(n).max(1);
            let off = if shifted { w / 2 } else { 0 };
            shifted = !shifted;
            let mut progressed = false;
            let mut start = 0;
            'pass: while start < n && failure.is_none() {
                let len = w.min(n - start);
                loop {
                    let mut round = false;
                    for i in start..start + len {
                        let r = active[(i + off) % n];
                        let key = wakers[r].key();
                        if seen[r] == Some(key) {
                            continue;
                        }
                        let rank = &mut ranks[r];
                        if !rank.device.poll_once() {
                            seen[r] = Some(key);
                            continue;
                        }
                        round = true;
                        seen[r] = None;
                        // a staged rank's queue shrinks only here: it
                        // gets its next stages when it runs short
                        if rank.stages.is_some() {
                            if let Err(e) = rank.top_up(&params[r].tag, ids[r]) {
                                failure = Some(e);
                                break 'pass;
                            }
                        }
                    }
                    progressed |= round;
                    // one round is a whole pass when the window is the shard
                    if !round || len == n {
                        break;
                    }
                }
                start += len;
            }
            active.retain(|&r| ranks[r].device.has_work() || ranks[r].stages.is_some());
            if progress.wanted() && timer.due() {
                let tasks = ranks.iter().map(|r| r.device.stats().tasks).sum();
                progress.running(thread, tasks, (ranks.len() - active.len()) as u32);
            }
            if let Some(e) = failure.take() {
                if let Some((d, _)) = rounds {
                    d.failed.store(true, Ordering::Release);
                }
                return Err(e);
            }
            if progressed {
                if let Some((d, _)) = rounds {
                    d.progressed();
                }
                continue;
            }
            let stopped = match rounds {
                Some((d, me)) => d.wait(me, began),
                None => true,
            };
            if !stopped {
                continue;
            }
            if active.is_empty() || rounds.is_some_and(|(d, _)| d.failed.load(Ordering::Acquire)) {
                return Ok(());
            }
            let stuck = active
                .iter()
                .flat_map(|&r| {
                    ranks[r]
                        .device
                        .blocked_tasks()
                        .into_iter()
                        .map(move |b| Stuck {
                            rank: ids[r],
                            step: b.step,
                            verb: b.verb,
                            peer: b.peer,
                            what: b.what,
                        })
                })
                .collect();
            return Err(SimFailure::Deadlock { stuck });
        }
    }
}

#[cfg(test)]
mod scale_tests;
#[cfg(test)]
mod staged_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timing_tests;
