//! [`HcclComm`]: a rank's communicator with the op-base collective calls.

use crate::validate;
use hccl_algorithm::{OpParam, OpType, VCounts, WorkflowMode};
use hccl_framework::{CommConfig, Communicator, InProcGroup, RootInfo};
use hccl_platform::{
    DataType, Device, DeviceBuffer, DeviceMem, Element, HcclError, ReduceOp, Result, Stream,
};
use std::borrow::Cow;
use std::sync::Arc;

mod batch;
mod capture_fuse;
mod group;
mod memory;
mod recover;
pub use recover::CommRef;
use recover::Successor;
mod repeat;
mod retry;
pub use batch::{SendRecvItem, SendRecvKind};
pub use capture_fuse::CAPTURE_FUSE_MAX_BYTES;
pub use group::{
    group, group_end, group_start, group_status, GROUP_FUSE_MAX_BYTES, PACK_FUSE_MAX_BYTES,
};

/// An op code's tag, made at its first call: (API name, tag).
type TagSlot = std::sync::OnceLock<(&'static str, Arc<str>)>;

/// One rank's communicator.
///
/// Cloning gives another handle to the same communicator (ops deferred
/// by a [group](crate::group_start) hold one); it is destroyed when the
/// last handle is dropped.
#[derive(Clone, Debug)]
pub struct HcclComm {
    /// The communicator as created.
    root: Arc<Generation>,
    /// The communicator [`recover`](HcclComm::recover) made last, if any:
    /// ops go to it from then on.
    next: Arc<Successor>,
    barrier_buf: Arc<std::sync::OnceLock<DeviceMem>>,
    /// Op tags by op code (`AllReduce_<comm name>`, ...), built once: a
    /// small op repeated in a loop should not format a string per call.
    /// (A recovered communicator keeps its name, so its tags too.)
    tags: Arc<[TagSlot; OpType::CODES]>,
    /// Collectives run under op retry so far (`comm/retry.rs`): the
    /// ranks compare it to know they stopped in the same op.
    retry_seq: Arc<std::sync::atomic::AtomicU64>,
    /// The last collective completed under op retry, with its input kept.
    retry_kept: Arc<std::sync::Mutex<Option<retry::Kept>>>,
}

/// One generation of a communicator (`comm/recover.rs`): the framework
/// communicator and what the adapter keeps beside it.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) comm: Communicator,
    /// The batch side stream and notifies, on this generation's device.
    batch: std::sync::OnceLock<batch::BatchStreams>,
    /// The last repeatable call of each op code (`comm/repeat.rs`).
    repeats: repeat::RepeatSlots,
    /// A stream of this generation's device, for ops under op retry
    /// whose caller's stream belongs to an earlier generation.
    stand_in: std::sync::OnceLock<Stream>,
    /// The error of this generation's op retry agreement, once it failed
    /// (`comm/retry.rs`): one agreement per generation.
    retry_spent: std::sync::OnceLock<HcclError>,
}

impl Generation {
    fn new(comm: Communicator) -> Generation {
        Generation {
            comm,
            batch: Default::default(),
            repeats: Default::default(),
            stand_in: Default::default(),
            retry_spent: Default::default(),
        }
    }

    /// The stream ops under op retry run on when the caller's belongs to
    /// an earlier generation's device.
    fn stand_in(&self) -> &Stream {
        self.stand_in.get_or_init(|| self.comm.create_stream())
    }
}

impl HcclComm {
    fn wrap(inner: Communicator) -> HcclComm {
        HcclComm {
            root: Arc::new(Generation::new(inner)),
            next: Arc::default(),
            barrier_buf: Arc::default(),
            tags: Arc::default(),
            retry_seq: Arc::default(),
            retry_kept: Arc::default(),
        }
    }

    /// `n` ranks in this process, configured from the environment
    /// (HCCL's `HcclCommInitAll`). Rank i is at index i.
    pub fn init_all(n: u32) -> Result<Vec<HcclComm>> {
        Self::init_all_with(n, CommConfig::from_env()?)
    }

    /// `n` ranks in this process with an explicit configuration.
    pub fn init_all_with(n: u32, config: CommConfig) -> Result<Vec<HcclComm>> {
        Ok(Communicator::init_all(n, config)?
            .into_iter()
            .map(Self::wrap)
            .collect())
    }

    /// Ranks in this process with a declared topology: rank i is on host
    /// `rank_to_server[i]` (see [`InProcGroup::on_hosts`]), so the
    /// hierarchical executors run as on several hosts. Rank i is at index i.
    pub fn init_all_on_hosts(
        rank_to_server: Vec<u32>,
        config: CommConfig,
    ) -> Result<Vec<HcclComm>> {
        let n = rank_to_server.len() as u32;
        let g = InProcGroup::on_hosts(rank_to_server, config)?;
        (0..n).map(|r| Self::join(&g, r)).collect()
    }

    /// HCCL's `HcclGetRootInfo`: call on the root rank, hand the result to
    /// every rank (MPI broadcast, a shared file, ...).
    pub fn get_root_info() -> Result<RootInfo> {
        Communicator::get_root_info(&CommConfig::from_env()?)
    }

    /// [`HcclComm::get_root_info`] with an explicit configuration.
    pub fn get_root_info_with(config: &CommConfig) -> Result<RootInfo> {
        Communicator::get_root_info(config)
    }

    /// HCCL's `HcclCommInitRootInfo`: this process is `rank` of `n_ranks`.
    pub fn init_root_info(n_ranks: u32, root: &RootInfo, rank: u32) -> Result<HcclComm> {
        Self::init_root_info_with(n_ranks, root, rank, CommConfig::from_env()?)
    }

    /// [`HcclComm::init_root_info`] with an explicit configuration.
    pub fn init_root_info_with(
        n_ranks: u32,
        root: &RootInfo,
        rank: u32,
        config: CommConfig,
    ) -> Result<HcclComm> {
        Ok(Self::wrap(Communicator::init_root_info(
            n_ranks, root, rank, config,
        )?))
    }

    /// HCCL's `HcclCommInitClusterInfo`: from the rank table JSON at `path`.
    pub fn init_cluster_info(path: &str, rank: u32) -> Result<HcclComm> {
        Self::init_cluster_info_with(path, rank, CommConfig::from_env()?)
    }

    /// [`HcclComm::init_cluster_info`] with an explicit configuration.
    pub fn init_cluster_info_with(path: &str, rank: u32, config: CommConfig) -> Result<HcclComm> {
        Ok(Self::wrap(Communicator::init_cluster_info(
            path, rank, config,
        )?))
    }

    /// From the launcher's environment (torchrun, Open MPI, MPICH, Slurm).
    pub fn init_from_env() -> Result<HcclComm> {
        Self::init_from_env_with(CommConfig::from_env()?)
    }

    /// [`HcclComm::init_from_env`] with an explicit configuration.
    pub fn init_from_env_with(config: CommConfig) -> Result<HcclComm> {
        Ok(Self::wrap(Communicator::init_from_env(config)?))
    }

    /// HCCL's `HcclCreateSubCommConfig`: the parent ranks `rank_ids` form a
    /// new communicator in which this rank is `sub_rank`; every listed rank
    /// must call it.
    pub fn create_sub_comm(
        &self,
        rank_ids: &[u32],
        sub_comm_id: u64,
        sub_rank: u32,
    ) -> Result<HcclComm> {
        self.create_sub_comm_with(
            rank_ids,
            sub_comm_id,
            sub_rank,
            self.g().comm.config().clone(),
        )
    }

    /// [`HcclComm::create_sub_comm`] with an explicit configuration for the
    /// new communicator.
    pub fn create_sub_comm_with(
        &self,
        rank_ids: &[u32],
        sub_comm_id: u64,
        sub_rank: u32,
        config: CommConfig,
    ) -> Result<HcclComm> {
        Ok(Self::wrap(self.g().comm.create_sub_comm(
            rank_ids,
            sub_comm_id,
            sub_rank,
            config,
        )?))
    }

    /// Aborts the communicator: pending ops of this rank end with an error,
    /// peers are told, later ops are refused.
    pub fn abort(&self, reason: &str) {
        self.g().comm.abort(reason)
    }

    /// Revokes the communicator on every rank: in-flight ops end with an
    /// `HCCL_E_SUSPENDING` error "revoked by rank R: reason", later ops
    /// are refused; see [`Communicator::revoke`].
    pub fn revoke(&self, reason: &str) {
        self.g().comm.revoke(reason)
    }

    /// NCCL's `ncclCommShrink`: the ranks not in `exclude` (each calling
    /// this; the excluded never do) form a new communicator with this
    /// one's configuration, numbered by their order; no new root info.
    /// See [`Communicator::shrink`].
    pub fn shrink(&self, exclude: &[u32]) -> Result<HcclComm> {
        self.shrink_with(exclude, self.g().comm.config().clone())
    }

    /// [`shrink`](Self::shrink) with an explicit configuration for the new
    /// communicator.
    pub fn shrink_with(&self, exclude: &[u32], config: CommConfig) -> Result<HcclComm> {
        self.g().comm.shrink(exclude, config).map(Self::wrap)
    }

    /// The ranks lost, as every survivor agrees without being told (each
    /// survivor calls this); see [`Communicator::agree_lost`].
    pub fn agree_lost(&self, timeout: std::time::Duration) -> Result<Vec<u32>> {
        self.g().comm.agree_lost(timeout)
    }

    /// Shrinks without the ranks the survivors agree are lost (ULFM's
    /// shrink: no list); see [`Communicator::shrink_agreed`].
    pub fn shrink_agreed(&self) -> Result<HcclComm> {
        let g = self.g();
        g.comm
            .shrink_agreed(g.comm.config().clone())
            .map(Self::wrap)
    }

    /// NCCL's `ncclCommGrow`: a single-use id for growing this
    /// communicator, made by one member; see [`Communicator::grow_id`].
    pub fn grow_id(&self) -> Result<RootInfo> {
        self.g().comm.grow_id()
    }

    /// Every member calls it (the id's maker passing it, the others
    /// `None`): the communicator of `n_ranks` with the new ranks, members
    /// keeping their ranks; see [`Communicator::grow`].
    pub fn grow(&self, n_ranks: u32, id: Option<&RootInfo>) -> Result<HcclComm> {
        let g = self.g();
        g.comm
            .grow(n_ranks, id, g.comm.config().clone())
            .map(Self::wrap)
    }

    /// A new process joins a communicator being grown to `n_ranks`, as
    /// `rank`, with the id a member made; see [`Communicator::join_grown`].
    pub fn join_grown(n_ranks: u32, id: &RootInfo, rank: u32) -> Result<HcclComm> {
        Communicator::join_grown(n_ranks, id, rank, CommConfig::from_env()?).map(Self::wrap)
    }

    /// Who revoked the communicator and why, if it was revoked.
    pub fn revoked(&self) -> Option<(u32, String)> {
        self.g().comm.revoked()
    }

    /// Bounds every wait of this communicator's ops from now on (`None`:
    /// forever); see [`Communicator::set_exec_timeout`].
    pub fn set_exec_timeout(&self, timeout: Option<std::time::Duration>) {
        self.g().comm.set_exec_timeout(timeout)
    }

    /// The bound on waits in force.
    pub fn exec_timeout(&self) -> Option<std::time::Duration> {
        self.g().comm.exec_timeout()
    }

    /// Pins the calling thread on the CPU `HCCL_RS_CPU_AFFINITY` chose for
    /// this rank, for a thread that drives ops without having created the
    /// communicator (see [`CommConfig::pin_creating_thread`]); whether it
    /// pinned.
    pub fn pin_calling_thread(&self) -> Result<bool> {
        self.g().comm.pin_calling_thread()
    }

    /// HCCL's `HcclGetCommAsyncError`: what broke the communicator in the
    /// background, if anything.
    pub fn async_error(&self) -> Option<HcclError> {
        self.g().comm.async_error()
    }

    /// HCCL's `HcclCommDestroy`: waits for nothing, releases the buffers,
    /// links and threads (equivalent to dropping the communicator).
    pub fn destroy(self) {
        tracing::debug!(rank = self.rank(), comm = %self.name(), "communicator destroyed");
        drop(self)
    }

    /// Joins `group` as `rank` (for ranks that are threads each creating its
    /// own communicator).
    pub fn join(group: &Arc<InProcGroup>, rank: u32) -> Result<HcclComm> {
        Ok(Self::wrap(group.join(rank)?))
    }

    /// This rank (HCCL's `HcclGetRankId`).
    pub fn rank(&self) -> u32 {
        self.root.comm.rank()
    }

    /// Number of ranks (HCCL's `HcclGetRankSize`).
    pub fn size(&self) -> u32 {
        self.root.comm.size()
    }

    /// The communicator name (HCCL's `HcclGetCommName`; a recovered
    /// communicator keeps it).
    pub fn name(&self) -> &str {
        self.root.comm.name()
    }

    /// The rank's device (a new one after [`recover`](Self::recover)).
    pub fn device(&self) -> Device {
        self.g().comm.device().clone()
    }

    /// A new stream on this rank's device.
    pub fn create_stream(&self) -> Stream {
        self.g().comm.create_stream()
    }

    /// The framework communicator underneath (the one
    /// [`recover`](Self::recover) made last, if it was called).
    pub fn communicator(&self) -> CommRef<'_> {
        CommRef(self.g())
    }

    /// Writes this rank's flight-recorder dump (its last ops and their
    /// states, JSON: [`crate::FrDump`]) to `path`, noting `reason`.
    /// `HCCL_E_NOT_SUPPORT` when recording is off
    /// (`HCCL_RS_FR_BUFFER_SIZE=0`).
    pub fn dump_flight_recorder(&self, path: &std::path::Path, reason: &str) -> Result<()> {
        match self.g().comm.flight_recorder() {
            Some(fr) => fr.dump_to(path, reason),
            None => Err(HcclError::not_support(
                "the flight recorder is off (HCCL_RS_FR_BUFFER_SIZE=0)",
            )),
        }
    }

    /// Writes the timeline being recorded on this rank's device (Chrome
    /// trace JSON of its stream tasks and op spans, see
    /// [`Communicator::write_timeline`]) to `path`; recording goes on.
    /// `HCCL_E_NOT_SUPPORT` when no timeline is on (none of
    /// `HCCL_RS_TRACE`, [`Device::start_timeline`], ACL profiling).
    pub fn write_timeline(&self, path: &std::path::Path) -> Result<()> {
        self.g().comm.write_timeline(path)
    }

    /// The op tag of `call`: HCCL's `<Op>_<communicator name>`, plus the
    /// peer for a send or receive.
    fn tag(&self, call: &Call<'_>) -> Cow<'_, Arc<str>> {
        let make = || format!("{}_{}", call.api.trim_start_matches("Hccl"), self.name());
        if matches!(call.op_type, OpType::Send | OpType::Receive) {
            return Cow::Owned(format!("{}_{}", make(), call.peer).into());
        }
        match self.tags.get(call.op_type.code() as usize) {
            Some(slot) => {
                let (api, tag) = slot.get_or_init(|| (call.api, make().into()));
                if *api == call.api {
                    // borrowed: no reference count per call
                    Cow::Borrowed(tag)
                } else {
                    Cow::Owned(make().into())
                }
            }
            None => Cow::Owned(make().into()),
        }
    }

    /// The mode an op on `input` / `output` runs in. Graph mode (the
    /// executor runs straight on the user buffers, peers on this host
    /// reach them by load and store) when the communicator can (every peer
    /// on this host) and both buffers are registered with it
    /// ([`register_mem`](Self::register_mem)), or when `stream` is
    /// capturing: a captured op's buffers are fixed for every replay, so
    /// capture registers their allocations if they are shareable
    /// (`DeviceBuffer`, `aclrtMalloc`) and refuses other memory with
    /// `HCCL_E_PARA` — never a silent staging copy. Elsewhere (peers on
    /// other hosts, whose links carry the bytes) ops run in op-base mode.
    fn mode_for(
        &self,
        stream: &Stream,
        input: &DeviceMem,
        output: &DeviceMem,
    ) -> Result<WorkflowMode> {
        let g = self.g();
        if !g.comm.graph_capable() {
            return Ok(WorkflowMode::OpBase);
        }
        let domain = g.comm.device().uid();
        let registered = |m: &DeviceMem| m.is_empty() || m.is_registered_in(domain);
        if registered(input) && registered(output) {
            return Ok(WorkflowMode::Graph);
        }
        if !stream.is_capturing() {
            return Ok(WorkflowMode::OpBase);
        }
        for (what, m) in [("sendBuf", input), ("recvBuf", output)] {
            if registered(m) {
                continue;
            }
            if !m.is_shareable() {
                return Err(HcclError::para(format!(
                    "{what} cannot be captured: a captured op runs in graph mode on memory its \
                     peers map, and this buffer is {} (allocate it with DeviceBuffer, \
                     DeviceMem::alloc_shareable or aclrtMalloc, or run the op outside the capture)",
                    describe_memory(m)
                )));
            }
            m.allocation().register_in(domain).map_err(|e| {
                HcclError::para(format!(
                    "{what} cannot be captured: registering its allocation failed: {e}"
                ))
            })?;
            tracing::debug!(
                rank = self.rank(),
                bytes = m.allocation().len(),
                "capture registered a buffer's allocation"
            );
        }
        Ok(WorkflowMode::Graph)
    }

    /// Validates a call and hands it to the framework (under op retry:
    /// runs it to its end, again if a link fails; `comm/retry.rs`).
    /// Nothing is enqueued unless every check passes.
    fn submit(&self, call: Call<'_>, stream: &Stream) -> Result<()> {
        match self.retry_for(&call, stream) {
            Some(policy) => self.submit_retrying(call, stream, policy),
            None => self.submit_once(call, stream),
        }
    }

    /// [`submit`](Self::submit) without op retry: validates and enqueues.
    fn submit_once(&self, call: Call<'_>, stream: &Stream) -> Result<()> {
        // read before anything is decided from registrations (the mode)
        let epoch = hccl_platform::registration_epoch();
        if let Some(r) = self.try_repeat(&call, stream, epoch) {
            return r;
        }
        let key = repeat::CallKey::of(&call, stream, epoch);
        let tag = self.tag(&call);
        let ctx = |e: HcclError| e.rank(self.rank()).tag(&**tag).during(call.api);
        // the type first, as HCCL's CheckDataType: FP8 formats are moved,
        // never reduced
        call.op_type.check_dtype(call.dtype).map_err(ctx)?;
        let p = self.size();
        for (what, r) in [("root", call.root), ("peer rank", call.peer)] {
            if r >= p {
                return Err(ctx(HcclError::para(format!(
                    "{what} {r} is out of range for {p} ranks"
                ))));
            }
        }
        if matches!(call.op_type, OpType::Send | OpType::Receive) && call.peer == self.rank() {
            return Err(ctx(HcclError::para(format!(
                "a rank cannot send to or receive from itself (peer {})",
                call.peer
            ))));
        }
        for (what, v) in [("send", &call.send_v), ("receive", &call.recv_v)] {
            if let Some(v) = v {
                if v.counts.len() != p as usize || v.displs.len() != p as usize {
                    return Err(ctx(HcclError::para(format!(
                        "{what} counts ({}) and displacements ({}) must have one entry per rank ({p})",
                        v.counts.len(),
                        v.displs.len()
                    ))));
                }
                for (c, d) in v.counts.iter().zip(&v.displs) {
                    c.checked_add(*d).ok_or_else(|| {
                        ctx(HcclError::para(format!(
                            "{what} count {c} + displacement {d} overflows"
                        )))
                    })?;
                }
            }
        }
        let send_bytes = validate::bytes_of(call.send_elems, call.dtype).map_err(ctx)?;
        let recv_bytes = validate::bytes_of(call.recv_elems, call.dtype).map_err(ctx)?;
        validate::bytes_of(call.count, call.dtype).map_err(ctx)?;
        if send_bytes == 0 && recv_bytes == 0 && !call.participate {
            return Ok(());
        }
        let input = if send_bytes > 0 {
            validate::buffer(
                "sendBuf",
                call.send,
                send_bytes,
                call.send_elems,
                call.dtype,
            )
            .map_err(ctx)?;
            call.send.prefix(send_bytes)?
        } else {
            Cow::Owned(DeviceMem::null())
        };
        let output = if recv_bytes > 0 {
            validate::buffer(
                "recvBuf",
                call.recv,
                recv_bytes,
                call.recv_elems,
                call.dtype,
            )
            .map_err(ctx)?;
            call.recv.prefix(recv_bytes)?
        } else {
            Cow::Owned(DeviceMem::null())
        };
        if send_bytes > 0 && recv_bytes > 0 && input.overlaps(&output) {
            self.check_in_place(&call, &input, &output).map_err(ctx)?;
        }
        let mode = if input.is_empty() && output.is_empty() && !stream.is_capturing() {
            // a rank that only takes part (nothing of its own moves) runs
            // in op-base mode as its peers with unregistered buffers do
            WorkflowMode::OpBase
        } else {
            self.mode_for(stream, &input, &output).map_err(ctx)?
        };
        let param = OpParam {
            tag,
            op_type: call.op_type,
            stream: Cow::Borrowed(stream),
            input,
            output,
            count: call.count,
            dtype: call.dtype,
            reduce_op: call.op,
            root: call.root,
            mode,
            send_v: call.send_v,
            recv_v: call.recv_v,
            peer: call.peer,
        };
        if group::defer(self, &param) {
            return Ok(());
        }
        if stream.is_capturing() && capture_fuse::defer(self, &param, stream)? {
            return Ok(());
        }
        self.exec_keeping_repeat(&param, key)
    }

    /// Checks that overlapping `input` and `output` are the op's in-place
    /// form: the same memory (AllReduce, Reduce, Broadcast), the input as
    /// this rank's block of the output (AllGather, AllGatherV: NCCL's and
    /// `MPI_IN_PLACE`'s in-place gather), or the output as this rank's
    /// block of the input (ReduceScatter, ReduceScatterV). Every executor
    /// runs these forms (the simulator checks each one in place); any
    /// other overlap would have the op read what it already overwrote.
    fn check_in_place(&self, call: &Call<'_>, input: &DeviceMem, output: &DeviceMem) -> Result<()> {
        if call.in_place {
            if input.same_range(output) {
                return Ok(());
            }
            return Err(HcclError::para(
                "sendBuf and recvBuf partly overlap (in place, they must be the same memory)",
            ));
        }
        let u = call.dtype.size() as u64;
        let r = self.rank() as usize;
        let block = |v: &Option<VCounts>, fixed: u64| -> u64 {
            v.as_ref()
                .map_or(r as u64 * fixed, |v| v.displs[r])
                .saturating_mul(u)
        };
        // (the larger buffer, its block that may be the smaller one, what
        // that block is called)
        let (outer, inner, at, what) = match call.op_type {
            OpType::AllGather | OpType::AllGatherV => (
                output,
                input,
                block(&call.recv_v, call.send_elems),
                "sendBuf must be exactly this rank's block of recvBuf",
            ),
            OpType::ReduceScatter | OpType::ReduceScatterV => (
                input,
                output,
                block(&call.send_v, call.recv_elems),
                "recvBuf must be exactly this rank's block of sendBuf",
            ),
            _ => {
                return Err(HcclError::para(
                    "sendBuf and recvBuf overlap, which this op does not allow",
                ))
            }
        };
        let fits = usize::try_from(at)
            .ok()
            .and_then(|at| outer.range(at, inner.len()).ok())
            .is_some_and(|b| b.same_range(inner));
        if fits {
            return Ok(());
        }
        Err(HcclError::para(format!(
            "sendBuf and recvBuf overlap but not in place: {what} (bytes [{at}, {}) of it, \
             rank {r}), or the buffers must not overlap",
            at.saturating_add(inner.len() as u64)
        )))
    }

    /// AllReduce of `send` into `recv` (whole `send`; `recv` at least as long).
    pub fn all_reduce<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.all_reduce_raw(
            send.mem(),
            recv.mem(),
            send.len() as u64,
            T::DTYPE,
            op,
            stream,
        )
    }

    /// In-place AllReduce of `buf`.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.all_reduce_raw(buf.mem(), buf.mem(), buf.len() as u64, T::DTYPE, op, stream)
    }

    /// Untyped AllReduce (HCCL's `HcclAllReduce`): `count` elements of
    /// `dtype` from `send` into `recv`. `send` and `recv` may be the same
    /// memory (in place) but must not partly overlap.
    pub fn all_reduce_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        count: u64,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let call = Call::new(
            "HcclAllReduce",
            OpType::AllReduce,
            send,
            count,
            recv,
            count,
            count,
            dtype,
        )
        .reduce(op);
        self.submit(call.in_place(), stream)
    }

    /// AllGather (HCCL's `HcclAllGather`): every rank's `send_count`
    /// elements, in rank order, into every rank's `recv` (`size × send_count`).
    /// In place when `send` is exactly this rank's block of `recv`
    /// (`recv.range(rank × send_count × size_of(dtype), …)`), as NCCL and
    /// `MPI_IN_PLACE` allow; any other overlap is refused.
    pub fn all_gather_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        send_count: u64,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let total = send_count.saturating_mul(self.size() as u64);
        self.submit(
            Call::new(
                "HcclAllGather",
                OpType::AllGather,
                send,
                send_count,
                recv,
                total,
                send_count,
                dtype,
            ),
            stream,
        )
    }

    /// Typed AllGather: `recv` must hold `size × send.len()` elements.
    pub fn all_gather<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.all_gather_raw(send.mem(), recv.mem(), send.len() as u64, T::DTYPE, stream)
    }

    /// In-place AllGather: this rank's block of `buf` (`buf.len() / size`
    /// elements at `rank × buf.len() / size`) is its input, and `buf` ends
    /// up holding every rank's block. `buf.len()` must divide by the size.
    pub fn all_gather_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        let block = self.block_of(buf.len(), "HcclAllGather")?;
        let u = std::mem::size_of::<T>();
        let send = buf
            .mem()
            .range(self.rank() as usize * block * u, block * u)?;
        self.all_gather_raw(&send, buf.mem(), block as u64, T::DTYPE, stream)
    }

    /// `len / size` for the in-place forms, or a parameter error naming `api`.
    fn block_of(&self, len: usize, api: &'static str) -> Result<usize> {
        let p = self.size() as usize;
        if len % p != 0 {
            return Err(HcclError::para(format!(
                "an in-place buffer of {len} elements does not divide into {p} equal blocks"
            ))
            .rank(self.rank())
            .during(api));
        }
        Ok(len / p)
    }

    /// AllGatherV (HCCL's `HcclAllGatherV`): rank q's block of
    /// `recv_counts[q]` elements lands at `recv_displs[q]`.
    #[allow(clippy::too_many_arguments)]
    pub fn all_gather_v_raw(
        &self,
        send: &DeviceMem,
        send_count: u64,
        recv: &DeviceMem,
        recv_counts: &[u64],
        recv_displs: &[u64],
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let v = VCounts {
            counts: recv_counts.to_vec(),
            displs: recv_displs.to_vec(),
        };
        let mut call = Call::new(
            "HcclAllGatherV",
            OpType::AllGatherV,
            send,
            send_count,
            recv,
            v.extent(),
            send_count,
            dtype,
        );
        call.recv_v = Some(v);
        self.submit(call, stream)
    }

    /// ReduceScatter (HCCL's `HcclReduceScatter`): block r of the reduction
    /// of every rank's `send` (`size × recv_count`) into rank r's `recv`.
    /// In place when `recv` is exactly this rank's block of `send`, as NCCL
    /// and `MPI_IN_PLACE` allow; any other overlap is refused.
    pub fn reduce_scatter_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        recv_count: u64,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let total = recv_count.saturating_mul(self.size() as u64);
        let call = Call::new(
            "HcclReduceScatter",
            OpType::ReduceScatter,
            send,
            total,
            recv,
            recv_count,
            recv_count,
            dtype,
        );
        self.submit(call.reduce(op), stream)
    }

    /// Typed ReduceScatter: `send` must hold `size × recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.reduce_scatter_raw(
            send.mem(),
            recv.mem(),
            recv.len() as u64,
            T::DTYPE,
            op,
            stream,
        )
    }

    /// In-place ReduceScatter: `buf` (`size` equal blocks) is the input,
    /// and this rank's block of it (`buf.len() / size` elements at
    /// `rank × buf.len() / size`) receives the reduction of every rank's
    /// block `rank`; the other blocks are left as they were.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let block = self.block_of(buf.len(), "HcclReduceScatter")?;
        let u = std::mem::size_of::<T>();
        let recv = buf
            .mem()
            .range(self.rank() as usize * block * u, block * u)?;
        self.reduce_scatter_raw(buf.mem(), &recv, block as u64, T::DTYPE, op, stream)
    }

    /// ReduceScatterV (HCCL's `HcclReduceScatterV`): rank q receives the
    /// reduction of every rank's block at `send_displs[q]` of
    /// `send_counts[q]` elements; this rank's `recv_count` must equal
    /// `send_counts[rank]`.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_scatter_v_raw(
        &self,
        send: &DeviceMem,
        send_counts: &[u64],
        send_displs: &[u64],
        recv: &DeviceMem,
        recv_count: u64,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let v = VCounts {
            counts: send_counts.to_vec(),
            displs: send_displs.to_vec(),
        };
        if v.counts
            .get(self.rank() as usize)
            .is_some_and(|&c| c != recv_count)
        {
            return Err(HcclError::para(format!(
                "recvCount {recv_count} differs from sendCounts[{}] = {}",
                self.rank(),
                v.counts[self.rank() as usize]
            ))
            .rank(self.rank())
            .during("HcclReduceScatterV"));
        }
        let mut call = Call::new(
            "HcclReduceScatterV",
            OpType::ReduceScatterV,
            send,
            v.extent(),
            recv,
            recv_count,
            recv_count,
            dtype,
        )
        .reduce(op);
        call.send_v = Some(v);
        self.submit(call, stream)
    }

    /// Broadcast (HCCL's `HcclBroadcast`) of `count` elements of `buf` from `root`.
    pub fn broadcast_raw(
        &self,
        buf: &DeviceMem,
        count: u64,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let mut call = Call::new(
            "HcclBroadcast",
            OpType::Broadcast,
            buf,
            count,
            buf,
            count,
            count,
            dtype,
        )
        .in_place();
        call.root = root;
        self.submit(call, stream)
    }

    /// Typed Broadcast of the whole `buf` from `root`.
    pub fn broadcast<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.broadcast_raw(buf.mem(), buf.len() as u64, T::DTYPE, root, stream)
    }

    /// Reduce (HCCL's `HcclReduce`) of every rank's `count` elements into
    /// `root`'s `recv` (`recv` is not used on other ranks and may be null).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        count: u64,
        dtype: DataType,
        op: ReduceOp,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let recv_elems = if self.rank() == root { count } else { 0 };
        let mut call = Call::new(
            "HcclReduce",
            OpType::Reduce,
            send,
            count,
            recv,
            recv_elems,
            count,
            dtype,
        )
        .reduce(op)
        .in_place();
        call.root = root;
        self.submit(call, stream)
    }

    /// Scatter (HCCL's `HcclScatter`): block r of `root`'s `send`
    /// (`size × recv_count`) into rank r's `recv` (`send` unused off root).
    pub fn scatter_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        recv_count: u64,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let send_elems = if self.rank() == root {
            recv_count.saturating_mul(self.size() as u64)
        } else {
            0
        };
        let mut call = Call::new(
            "HcclScatter",
            OpType::Scatter,
            send,
            send_elems,
            recv,
            recv_count,
            recv_count,
            dtype,
        );
        call.root = root;
        self.submit(call, stream)
    }

    /// Gather: every rank's `send_count` elements into `root`'s `recv`
    /// (`size × send_count`, rank order; `recv` unused off root).
    pub fn gather_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        send_count: u64,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let recv_elems = if self.rank() == root {
            send_count.saturating_mul(self.size() as u64)
        } else {
            0
        };
        let mut call = Call::new(
            "HcclGather",
            OpType::Gather,
            send,
            send_count,
            recv,
            recv_elems,
            send_count,
            dtype,
        );
        call.root = root;
        self.submit(call, stream)
    }

    /// AllToAll (HCCL's `HcclAlltoAll`): block q (`send_count` elements) of
    /// this rank's `send` goes to rank q, and rank q's block lands at block q
    /// of `recv`. Send and receive counts and types must match.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_raw(
        &self,
        send: &DeviceMem,
        send_count: u64,
        send_type: DataType,
        recv: &DeviceMem,
        recv_count: u64,
        recv_type: DataType,
        stream: &Stream,
    ) -> Result<()> {
        if send_count != recv_count || send_type != recv_type {
            return Err(HcclError::para(format!(
                "sendCount {send_count} ({send_type}) and recvCount {recv_count} ({recv_type}) must match"
            ))
            .rank(self.rank())
            .during("HcclAlltoAll"));
        }
        let total = send_count.saturating_mul(self.size() as u64);
        self.submit(
            Call::new(
                "HcclAlltoAll",
                OpType::AllToAll,
                send,
                total,
                recv,
                total,
                send_count,
                send_type,
            ),
            stream,
        )
    }

    /// AllToAllV (HCCL's `HcclAlltoAllV`): `send_counts[q]` elements at
    /// `sdispls[q]` go to rank q; rank q's `recv_counts[q]` land at `rdispls[q]`.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_v_raw(
        &self,
        send: &DeviceMem,
        send_counts: &[u64],
        sdispls: &[u64],
        send_type: DataType,
        recv: &DeviceMem,
        recv_counts: &[u64],
        rdispls: &[u64],
        recv_type: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let (sv, rv) = (
            VCounts {
                counts: send_counts.to_vec(),
                displs: sdispls.to_vec(),
            },
            VCounts {
                counts: recv_counts.to_vec(),
                displs: rdispls.to_vec(),
            },
        );
        self.submit_all_to_all_v(
            "HcclAlltoAllV",
            send,
            sv,
            send_type,
            recv,
            rv,
            recv_type,
            false,
            stream,
        )
    }

    /// AllToAllVC (HCCL's `HcclAlltoAllVC`): `send_count_matrix` holds
    /// rankSize × rankSize counts, row-major, the same on every rank:
    /// `send_count_matrix[i * rankSize + j]` elements go from rank i to
    /// rank j. Displacements are implied, blocks packed in rank order: this
    /// rank's block for rank j starts at the sum of its counts to ranks
    /// below j, and rank i's block lands at the sum of the counts ranks
    /// below i send here. Runs as the AllToAllV it describes (same
    /// executors and cross-rank checks); see [`all_to_all_vc_layout`].
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_vc_raw(
        &self,
        send: &DeviceMem,
        send_count_matrix: &[u64],
        send_type: DataType,
        recv: &DeviceMem,
        recv_type: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let l = all_to_all_vc_layout(send_count_matrix, self.size(), self.rank())
            .map_err(|e| e.rank(self.rank()).during("HcclAlltoAllVC"))?;
        let sv = VCounts {
            counts: l.send_counts,
            displs: l.sdispls,
        };
        let rv = VCounts {
            counts: l.recv_counts,
            displs: l.rdispls,
        };
        // the matrix is the same everywhere: unless it is all zero, every
        // rank takes part, also one whose row and column are zero
        let participate = send_count_matrix.iter().any(|&c| c != 0);
        self.submit_all_to_all_v(
            "HcclAlltoAllVC",
            send,
            sv,
            send_type,
            recv,
            rv,
            recv_type,
            participate,
            stream,
        )
    }

    /// [`all_to_all_vc_raw`](Self::all_to_all_vc_raw) on typed buffers:
    /// `send` holds at least this rank's row sum, `recv` its column sum.
    pub fn all_to_all_vc<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_count_matrix: &[u64],
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.all_to_all_vc_raw(
            send.mem(),
            send_count_matrix,
            T::DTYPE,
            recv.mem(),
            T::DTYPE,
            stream,
        )
    }

    /// An AllToAllV (`api` names it: `HcclAlltoAllV` or `HcclAlltoAllVC`).
    #[allow(clippy::too_many_arguments)]
    fn submit_all_to_all_v(
        &self,
        api: &'static str,
        send: &DeviceMem,
        sv: VCounts,
        send_type: DataType,
        recv: &DeviceMem,
        rv: VCounts,
        recv_type: DataType,
        participate: bool,
        stream: &Stream,
    ) -> Result<()> {
        if send_type != recv_type {
            return Err(HcclError::para(format!(
                "sendType {send_type} and recvType {recv_type} must match"
            ))
            .rank(self.rank())
            .during(api));
        }
        let mut call = Call::new(
            api,
            OpType::AllToAllV,
            send,
            sv.extent(),
            recv,
            rv.extent(),
            0,
            send_type,
        );
        call.send_v = Some(sv);
        call.recv_v = Some(rv);
        call.participate = participate;
        self.submit(call, stream)
    }

    /// Send (HCCL's `HcclSend`) `count` elements of `buf` to `dest`, which
    /// must post a matching receive.
    pub fn send_raw(
        &self,
        buf: &DeviceMem,
        count: u64,
        dtype: DataType,
        dest: u32,
        stream: &Stream,
    ) -> Result<()> {
        let mut call = Call::new("HcclSend", OpType::Send, buf, count, &NULL, 0, count, dtype);
        call.peer = dest;
        self.submit(call, stream)
    }

    /// Receive (HCCL's `HcclRecv`) `count` elements from `src` into `buf`.
    pub fn recv_raw(
        &self,
        buf: &DeviceMem,
        count: u64,
        dtype: DataType,
        src: u32,
        stream: &Stream,
    ) -> Result<()> {
        let mut call = Call::new(
            "HcclRecv",
            OpType::Receive,
            &NULL,
            0,
            buf,
            count,
            count,
            dtype,
        );
        call.peer = src;
        self.submit(call, stream)
    }

    /// Barrier (HCCL's `HcclBarrier`): returns on the stream once every rank
    /// has reached it; implemented, as HCCL does, as a one-element fp32 sum
    /// AllReduce.
    pub fn barrier(&self, stream: &Stream) -> Result<()> {
        let buf = self
            .barrier_buf
            .get_or_init(|| DeviceMem::alloc_shareable(8).unwrap_or_else(|_| DeviceMem::null()));
        if buf.is_null() {
            return Err(
                HcclError::memory("could not allocate the barrier buffer").during("HcclBarrier")
            );
        }
        let (send, recv) = (buf.range(0, 4)?, buf.range(4, 4)?);
        let call = Call::new(
            "HcclBarrier",
            OpType::AllReduce,
            &send,
            1,
            &recv,
            1,
            1,
            DataType::Fp32,
        )
        .reduce(ReduceOp::Sum);
        self.submit(call, stream)
    }
}

/// One rank's AllToAllV arguments implied by an AllToAllVC count matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllToAllVcLayout {
    /// Elements this rank sends to each rank (its row of the matrix).
    pub send_counts: Vec<u64>,
    /// Where each block starts in the send buffer (packed in rank order).
    pub sdispls: Vec<u64>,
    /// Elements this rank receives from each rank (its column).
    pub recv_counts: Vec<u64>,
    /// Where each received block lands (packed in rank order).
    pub rdispls: Vec<u64>,
    /// Elements the send buffer must hold: the row's sum.
    pub send_total: u64,
    /// Elements the receive buffer must hold: the column's sum.
    pub recv_total: u64,
}

/// Rank `rank`'s AllToAllV arguments from an AllToAllVC count matrix of
/// `p` × `p` counts (row i: what rank i sends to each rank). A matrix of
/// another length, a `rank` outside `0..p`, or a row or column whose sum
/// overflows `u64` is `HCCL_E_PARA`.
pub fn all_to_all_vc_layout(matrix: &[u64], p: u32, rank: u32) -> Result<AllToAllVcLayout> {
    let pu = p as usize;
    let want = pu.checked_mul(pu);
    if want != Some(matrix.len()) {
        return Err(HcclError::para(format!(
            "sendCountMatrix has {} entries; {p} ranks need {p} × {p}",
            matrix.len()
        )));
    }
    if rank >= p {
        return Err(HcclError::para(format!(
            "rank {rank} is out of range for {p} ranks"
        )));
    }
    let r = rank as usize;
    let packed = |counts: Vec<u64>, what: &str| -> Result<(Vec<u64>, Vec<u64>, u64)> {
        let mut displs = Vec::with_capacity(counts.len());
        let mut at = 0u64;
        for (q, c) in counts.iter().enumerate() {
            displs.push(at);
            at = at.checked_add(*c).ok_or_else(|| {
                HcclError::para(format!(
                    "sendCountMatrix: the counts {what} rank {rank} overflow at rank {q}"
                ))
            })?;
        }
        Ok((counts, displs, at))
    };
    let (send_counts, sdispls, send_total) = packed(matrix[r * pu..(r + 1) * pu].to_vec(), "from")?;
    let (recv_counts, rdispls, recv_total) =
        packed((0..pu).map(|i| matrix[i * pu + r]).collect(), "to")?;
    Ok(AllToAllVcLayout {
        send_counts,
        sdispls,
        recv_counts,
        rdispls,
        send_total,
        recv_total,
    })
}

/// What kind of memory `m` is, for errors.
fn describe_memory(m: &DeviceMem) -> &'static str {
    match m.region_kind() {
        hccl_platform::RegionKind::Host => "private host memory",
        hccl_platform::RegionKind::Shared { .. } => "a named shared-memory segment",
        hccl_platform::RegionKind::External => "memory the caller allocated (not aclrtMalloc)",
        _ => "memory peers cannot map",
    }
}

static NULL: std::sync::LazyLock<DeviceMem> = std::sync::LazyLock::new(DeviceMem::null);

/// One op call before validation.
#[derive(Clone)]
struct Call<'a> {
    api: &'static str,
    op_type: OpType,
    send: &'a DeviceMem,
    send_elems: u64,
    recv: &'a DeviceMem,
    recv_elems: u64,
    count: u64,
    dtype: DataType,
    op: ReduceOp,
    root: u32,
    peer: u32,
    send_v: Option<VCounts>,
    recv_v: Option<VCounts>,
    in_place: bool,
    /// Run even when this rank moves nothing (its peers' op needs it).
    participate: bool,
}

impl<'a> Call<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        api: &'static str,
        op_type: OpType,
        send: &'a DeviceMem,
        send_elems: u64,
        recv: &'a DeviceMem,
        recv_elems: u64,
        count: u64,
        dtype: DataType,
    ) -> Self {
        Call {
            api,
            op_type,
            send,
            send_elems,
            recv,
            recv_elems,
            count,
            dtype,
            op: ReduceOp::Sum,
            root: 0,
            peer: 0,
            send_v: None,
            recv_v: None,
            in_place: false,
            participate: false,
        }
    }

    fn reduce(mut self, op: ReduceOp) -> Self {
        self.op = op;
        self
    }

    /// The op may run with identical send and receive buffers.
    fn in_place(mut self) -> Self {
        self.in_place = true;
        self
    }
}
