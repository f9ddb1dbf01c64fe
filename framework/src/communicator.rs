//! Communicators: one rank's membership of a group, and the op execution path.

use crate::comm_memory::CommMemory;
use crate::config::CommConfig;
use crate::fabric::{Fabric, PeerRecord};
use crate::flight::FlightRecorder;
use crate::json_file::{file_safe, write_json_file};
use crate::resource_manager::ResourceManager;
use crate::revoke::{Revocation, Spread};
use crate::selector::Selector;
use hccl_algorithm::{
    registry, AlgResourceResponse, CollExecutor, DescriptorCache, ExecutorRegistry, OpParam,
    TopoInfo,
};
use hccl_algorithm::{OpType, WorkflowMode};
use hccl_platform::transport::{component_id, ContextSetup, Placement, TransportOrder};
use hccl_platform::{DataType, Device, DeviceMem, HcclError, LinkHandle, OpLabel, Result, Stream};
use hccl_platform::{InProcRendezvous, OpArgs, Timeline};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// The repeat path: an op run again with the same arguments, as its
// executor prepared it.
mod repeat;
pub use repeat::RepeatOp;

/// Why an op is refused on an aborted communicator.
fn aborted_error(reason: &str) -> HcclError {
    HcclError::suspending(format!("the communicator was aborted: {reason}"))
}

/// A group of ranks that are threads of this process (HCCL's
/// `HcclCommInitAll` case, or threads each calling init with one root).
///
/// Its ranks are on one host unless the group was made with
/// [`InProcGroup::on_hosts`], which declares which (pretend) host each
/// rank is on: the topology executors see then has levels, so the
/// hierarchical (two-level, AHC, pipeline) executors can be run and tested
/// for real without several machines. Links stay in-process.
#[derive(Debug)]
pub struct InProcGroup {
    size: u32,
    /// Declared host of every rank (`None`: all on one host).
    hosts: Option<Vec<u32>>,
    name: String,
    config: CommConfig,
    rendezvous: Arc<InProcRendezvous>,
    /// The ranks' revocations: a rank that revokes marks every sibling.
    siblings: Arc<crate::revoke::Siblings>,
    /// The groups its ranks shrink or grow into (`successor.rs`).
    pub(crate) successors: crate::successor_table::Successors<InProcGroup>,
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(0);

impl InProcGroup {
    /// A group of `size` ranks; each rank joins with [`InProcGroup::join`].
    pub fn new(size: u32, config: CommConfig) -> Result<Arc<InProcGroup>> {
        if size == 0 {
            return Err(HcclError::para(
                "a communicator needs at least one rank (got 0)",
            ));
        }
        if config.buffer_size == 0 {
            return Err(HcclError::para("the CCL buffer size must be at least 1 MB"));
        }
        Ok(Arc::new(InProcGroup {
            size,
            hosts: None,
            name: config.comm_name.clone().unwrap_or_else(|| {
                format!(
                    "inproc-{}-{}",
                    std::process::id(),
                    NEXT_GROUP.fetch_add(1, Ordering::Relaxed)
                )
            }),
            config,
            rendezvous: InProcRendezvous::new(size),
            siblings: Default::default(),
            successors: Default::default(),
        }))
    }

    /// A group whose rank r is declared to be on host `rank_to_server[r]`
    /// (hosts numbered 0.. without gaps; uneven hosts allowed).
    pub fn on_hosts(rank_to_server: Vec<u32>, config: CommConfig) -> Result<Arc<InProcGroup>> {
        TopoInfo::new(0, rank_to_server.clone())?;
        let g = Self::new(rank_to_server.len() as u32, config)?;
        let mut g = Arc::try_unwrap(g).map_err(|_| HcclError::internal("new group is shared"))?;
        g.hosts = Some(rank_to_server);
        Ok(Arc::new(g))
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The declared host of every rank, if the group declares them.
    pub(crate) fn declared_hosts(&self) -> Option<&[u32]> {
        self.hosts.as_deref()
    }

    /// Ranks whose communicator is gone (destroyed, or never joined).
    pub(crate) fn gone_ranks(&self) -> Vec<u32> {
        self.siblings.gone(self.size)
    }

    /// Creates the communicator of `rank` (once per rank).
    pub fn join(self: &Arc<Self>, rank: u32) -> Result<Communicator> {
        if rank >= self.size {
            return Err(HcclError::para(format!(
                "rank {rank} is out of range for a communicator of {} ranks",
                self.size
            )));
        }
        let device = Device::new(rank, self.config.device_config(self.size));
        // the rank threads are the user's: only the device's worker is pinned
        // (the CPU is not kept for pin_calling_thread: the rank threads
        // are the user's to place)
        crate::affinity::pin_rank(
            &self.config.cpu_affinity,
            rank,
            rank,
            self.size,
            &device,
            false,
        )?;
        let ccl_input = DeviceMem::alloc(self.config.buffer_size)?;
        let ccl_output = DeviceMem::alloc(self.config.buffer_size)?;
        let setup = ContextSetup {
            rank,
            size: self.size,
            unique_id: [0; 16],
            device: device.clone(),
            ccl: (ccl_input.clone(), ccl_output.clone()),
            ip: std::net::Ipv4Addr::LOCALHOST.into(),
            port: 0,
            io_timeout: self.config.connect_timeout,
            connect_timeout: self.config.connect_timeout,
            sockets_per_link: 1,
            segment: None,
            in_process: Some(self.rendezvous.clone()),
            params: self.config.transport_params.clone(),
        };
        let opened = crate::transports::open_in_process(&setup)?;
        let server = |r: u32| self.hosts.as_ref().map_or(0, |h| h[r as usize]);
        let peers = (0..self.size)
            .map(|r| PeerRecord {
                rank: r,
                host: match &self.hosts {
                    Some(h) => format!("declared host {}", h[r as usize]),
                    None => "this host".to_owned(),
                },
                same_host: server(r) == server(rank),
                same_process: true,
                link_addr: None,
                addresses: [(component_id("in-process"), Vec::new())].into(),
            })
            .collect();
        let fabric = Fabric::new(rank, TransportOrder::Auto, opened, peers);
        fabric.prepare(Placement {
            index: rank,
            count: self.size,
        })?;
        let topo = match &self.hosts {
            Some(map) => TopoInfo::new(rank, map.clone())?,
            None => TopoInfo::single_server(rank, self.size)?,
        }
        .with_channels(self.config.channels);
        tracing::debug!(comm = %self.name, rank, size = self.size, servers = topo.server_num(), "rank joined");
        Ok(Communicator::assemble(
            self.name.clone(),
            topo,
            self.config.clone(),
            device,
            (ccl_input, ccl_output),
            Arc::new(fabric),
        )
        .with_spread(Spread::Siblings(self.siblings.clone()))
        .with_group(self.clone()))
    }
}

struct CachedOp {
    /// Whether the executor runs in graph mode (else a graph-mode op
    /// runs it in op-base mode).
    graph: bool,
    executor: Box<dyn CollExecutor>,
    res: AlgResourceResponse,
    label: Arc<OpLabel>,
    /// One link per peer this op talks to (for the consistency check).
    peers: Vec<LinkHandle>,
    /// The descriptor of the last run (for the consistency check).
    desc: DescriptorCache,
    /// An empty range: what the response's `param_input` and
    /// `param_output` hold between ops.
    none: DeviceMem,
    /// What its resources were granted for beyond the tag
    /// ([`CollExecutor::resource_variant`]: a rooted mesh op's root).
    variant: Option<u32>,
}

struct CommState {
    /// Set by `abort`: new ops are refused with this reason.
    aborted: Option<String>,
    resources: ResourceManager,
    /// Cached ops, found by (tag, executor) in the label; a communicator
    /// runs a handful of distinct ops, so a scan beats hashing owned keys.
    ops: Vec<CachedOp>,
    /// The label of the cached op that ran the most recent user op (its
    /// executor is `last_executor`): a pointer to compare per op, not a
    /// name.
    last_executor: Option<Arc<OpLabel>>,
    /// The previous op's selection key and cached op: a loop of the same
    /// op skips the selector (whose choice depends only on the key, the
    /// topology and the configuration, all unchanged).
    last_pick: Option<(PickKey, usize, Arc<str>)>,
    /// The flight recorder's writer side (recording is serialised by this
    /// state's lock).
    fr_writer: crate::flight::FrWriter,
}

impl CommState {
    /// Notes that cached op `idx` ran the most recent user op.
    fn note_last(&mut self, idx: usize) {
        let label = &self.ops[idx].label;
        if !self
            .last_executor
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, label))
        {
            self.last_executor = Some(Arc::clone(label));
        }
    }
}

/// What executor selection depends on for ops without count vectors.
#[derive(Clone, Copy, PartialEq, Eq)]
struct PickKey {
    op: OpType,
    count: u64,
    dtype: DataType,
    mode: WorkflowMode,
    /// A rooted mesh op's resources depend on its root
    /// (`CollExecutor::resource_variant`).
    root: u32,
}

/// One rank's communicator.
pub struct Communicator {
    rank: u32,
    size: u32,
    /// Every rank's host, by rank, for messages.
    hosts: Vec<String>,
    /// Memory registered with this communicator, and its symmetric windows.
    memory: CommMemory,
    /// Every rank's TCP listener (see [`Communicator::tcp_listeners`]).
    listeners: Vec<std::net::SocketAddr>,
    name: String,
    device: Device,
    topo: TopoInfo,
    config: CommConfig,
    selector: Selector,
    registry: &'static ExecutorRegistry,
    state: Mutex<CommState>,
    /// The last ops, for dumps (`None`: `HCCL_RS_FR_BUFFER_SIZE=0`).
    flight: Option<Arc<FlightRecorder>>,
    /// Where this communicator writes the device's timeline when it is
    /// destroyed: set when it started the timeline (`HCCL_RS_TRACE`; a
    /// sub-communicator shares its parent's device and timeline).
    trace_file: Option<std::path::PathBuf>,
    /// Ops issued, numbering the op spans of a timeline.
    /// Ops run by the repeat path (`communicator/repeat.rs`).
    repeated: AtomicU64,
    ops_traced: AtomicU64,
    /// Whether (and by whom) the communicator was revoked (`revoke.rs`).
    revocation: Arc<Revocation>,
    /// How a revocation reaches the other ranks (holds the control plane
    /// of a process communicator).
    spread: Spread,
    /// Shrinks so far ([`Communicator::shrink`]).
    shrinks: AtomicU64,
    /// Agreements so far ([`Communicator::agree_lost`]).
    agreements: AtomicU64,
    /// The CPU `HCCL_RS_CPU_AFFINITY` chose for this rank (process ranks),
    /// for [`Communicator::pin_calling_thread`].
    cpu: Option<usize>,
    /// The group of a threads-as-ranks communicator: where its ranks meet
    /// to shrink, agree and grow (`successor.rs`).
    in_proc: Option<Arc<InProcGroup>>,
}

impl Drop for Communicator {
    /// Destroying a communicator tells its peers (a shared-memory peer
    /// otherwise could not know while this process lives on), so a peer
    /// still waiting on this rank fails at once, naming it.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for l in st.resources.links() {
            l.link().close();
        }
        // registrations end with the communicator
        self.memory.clear(self.device.uid());
        if let Some(path) = &self.trace_file {
            if let Some(tl) = self.device.stop_timeline() {
                match self.write_timeline_of(&tl, path) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), events = tl.len(), "timeline written")
                    }
                    Err(e) => tracing::error!(error = %e, "timeline not written"),
                }
            }
        }
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("name", &self.name)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl Communicator {
    pub(crate) fn assemble(
        name: String,
        topo: TopoInfo,
        config: CommConfig,
        device: Device,
        (ccl_input, ccl_output): (DeviceMem, DeviceMem),
        fabric: Arc<Fabric>,
    ) -> Communicator {
        let rank = topo.user_rank;
        // the one-host executors are offered only when every peer's link
        // will support them
        let every_peer =
            |can: &dyn Fn(u32) -> bool| (0..topo.user_rank_size).filter(|&q| q != rank).all(can);
        let mut hosts = fabric.host_names();
        if hosts.len() != topo.user_rank_size as usize {
            hosts = if topo.server_num() > 1 {
                topo.rank_to_server
                    .iter()
                    .map(|s| format!("declared host {s}"))
                    .collect()
            } else {
                vec!["this host".to_owned(); topo.user_rank_size as usize]
            };
        }
        let flight = FlightRecorder::new(
            config.fr_buffer_size,
            &name,
            (rank, topo.user_rank_size),
            &device,
            config.fr_dump_dir.clone(),
        );
        let trace_file = config.trace_dir.as_ref().and_then(|dir| {
            let (_, started) = device.start_timeline(config.trace_events);
            started.then(|| dir.join(format!("hccl_trace_{}_rank{rank}.json", file_safe(&name))))
        });
        Self::log_init(&name, rank, &topo, &hosts, &config, fabric.as_ref());
        let c = Communicator {
            revocation: Revocation::new(rank, device.clone()),
            spread: Spread::Alone,
            shrinks: AtomicU64::new(0),
            agreements: AtomicU64::new(0),
            flight,
            trace_file,
            ops_traced: Default::default(),
            repeated: Default::default(),
            cpu: None,
            in_proc: None,
            rank,
            size: topo.user_rank_size,
            hosts,
            memory: CommMemory::default(),
            listeners: fabric.listeners(),
            name,
            selector: Selector::with_cost(
                config.executor_override.clone(),
                config.algo.clone(),
                config.cost.unwrap_or_default(),
            )
            .with_direct(
                every_peer(&|q| fabric.reads_peer_param(q))
                    .then_some(config.direct_min_bytes)
                    .flatten(),
            )
            .with_aiv(
                every_peer(&|q| fabric.reaches_boards(q))
                    .then_some(config.aiv_max_bytes)
                    .flatten(),
            ),
            registry: registry(),
            state: Mutex::new(CommState {
                aborted: None,
                resources: ResourceManager::new(
                    rank,
                    device.clone(),
                    ccl_input,
                    ccl_output,
                    fabric,
                    config.connect_timeout,
                ),
                ops: Vec::new(),
                last_pick: None,
                last_executor: None,
                fr_writer: Default::default(),
            }),
            device,
            topo,
            config,
        };
        c.log_choices();
        c
    }

    /// Gives the communicator the way its revocations reach the other
    /// ranks (a control plane: its handler is installed here).
    pub(crate) fn with_spread(mut self, spread: Spread) -> Communicator {
        match &spread {
            Spread::Control(plane) => {
                plane
                    .control()
                    .set_handler(crate::revoke::handler(&self.revocation));
                // a peer process gone closes its control connection at
                // once: its survivors' waits need not stall 100 ms first
                let device = self.device.clone();
                let hosts = self.hosts.clone();
                plane.control().set_lost_hook(Arc::new(move |r, process| {
                    // the host as this communicator names it (declared
                    // hosts and namespaces included), the process as the
                    // peer introduced itself
                    let host = hosts.get(r as usize).map_or("", String::as_str);
                    device.peer_gone(r, process.map(|(pid, _)| (*pid, host)))
                }));
            }
            Spread::Siblings(s) => s.enroll(self.rank, &self.revocation),
            Spread::Alone => {}
        }
        self.spread = spread;
        self
    }

    /// The control plane, for a communicator whose ranks are processes.
    pub(crate) fn control(&self) -> Option<&crate::control::Control> {
        match &self.spread {
            Spread::Control(plane) => Some(plane.control()),
            _ => None,
        }
    }

    /// The control plane, or `HCCL_E_NOT_SUPPORT` saying that `what`
    /// (shrink, grow, agreement) needs one.
    pub(crate) fn control_for(&self, what: &str) -> Result<&crate::control::Control> {
        self.control().ok_or_else(|| {
            HcclError::not_support(format!(
                "{what} needs ranks that are processes of a communicator made from root info or launcher variables (they have a control plane)"
            ))
            .rank(self.rank)
        })
    }

    /// Counts this communicator's shrinks: every survivor shrinks as many
    /// times, so the count names the new communicator alike on each.
    pub(crate) fn next_shrink(&self) -> u64 {
        self.shrinks.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts this communicator's agreements, as [`next_shrink`](Self::next_shrink).
    pub(crate) fn next_agreement(&self) -> u64 {
        self.agreements.fetch_add(1, Ordering::Relaxed)
    }

    /// Revokes the communicator (NCCL's `ncclCommRevoke`, ULFM's
    /// `MPI_Comm_revoke`): every rank's in-flight ops end promptly with
    /// an `HCCL_E_SUSPENDING` error saying "revoked by rank R: reason",
    /// and later ops are refused the same way; the communicator stays for
    /// status calls and destruction. The revocation reaches every rank
    /// even if this one dies right after (each rank passes it on first).
    /// Revoking again, or a communicator already revoked by a peer, does
    /// nothing.
    pub fn revoke(&self, reason: &str) {
        self.spread.revoke(&self.revocation, reason);
    }

    /// Who revoked the communicator and why, if it was revoked.
    pub fn revoked(&self) -> Option<(u32, String)> {
        self.revocation.get().cloned()
    }

    /// The error refusing an op on a revoked communicator, if it is.
    pub(crate) fn revoked_error(&self) -> Option<HcclError> {
        self.revocation
            .get()
            .map(|(origin, reason)| Revocation::error(*origin, reason))
    }

    /// Every rank's TCP link listener, by rank (empty for ranks that are
    /// threads of one process): where peers connect, e.g. for tools that
    /// probe the listeners.
    pub fn tcp_listeners(&self) -> &[std::net::SocketAddr] {
        &self.listeners
    }

    /// `n` communicators of one in-process group, rank i at index i
    /// (HCCL's `HcclCommInitAll`).
    pub fn init_all(n: u32, config: CommConfig) -> Result<Vec<Communicator>> {
        let g = InProcGroup::new(n, config)?;
        (0..n).map(|r| g.join(r)).collect()
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The communicator's name (HCCL's `HcclGetCommName`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rank's device; streams for this communicator must be on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A new stream on this rank's device.
    pub fn create_stream(&self) -> Stream {
        Stream::new(&self.device)
    }

    /// The configuration in force.
    pub fn config(&self) -> &CommConfig {
        &self.config
    }

    /// The CPU `HCCL_RS_CPU_AFFINITY` chose for this process rank, if it
    /// is pinned at all (None for threads-as-ranks).
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// Records the in-process group this rank joined.
    pub(crate) fn with_group(mut self, group: Arc<InProcGroup>) -> Communicator {
        self.in_proc = Some(group);
        self
    }

    /// The in-process group of a threads-as-ranks communicator.
    pub(crate) fn in_proc_group(&self) -> Option<&Arc<InProcGroup>> {
        self.in_proc.as_ref()
    }

    pub(crate) fn with_cpu(mut self, cpu: Option<usize>) -> Communicator {
        self.cpu = cpu;
        self
    }

    /// Pins the calling thread on this rank's CPU ([`Communicator::cpu`]),
    /// for a thread that drives ops but did not create the communicator
    /// (see [`CommConfig::pin_creating_thread`]). Returns whether it
    /// pinned (false: the setting pins nothing here).
    pub fn pin_calling_thread(&self) -> Result<bool> {
        let Some(cpu) = self.cpu else {
            return Ok(false);
        };
        crate::affinity::pin_current(cpu).map_err(|e| e.rank(self.rank))?;
        tracing::debug!(rank = self.rank, cpu, "CPU affinity: op thread pinned");
        Ok(true)
    }

    /// The topology as executors see it.
    pub fn topo(&self) -> &TopoInfo {
        &self.topo
    }

    /// Bounds every wait of this communicator's ops from now on (`None`:
    /// forever), in any unit down to a millisecond: what
    /// `HCCL_EXEC_TIMEOUT` sets for the whole process at creation, per
    /// communicator and at any time (e.g. torch's per-group `timeout`). A
    /// wait that outlasts it fails the op with `HCCL_E_TIMEOUT` naming
    /// the peer awaited.
    pub fn set_exec_timeout(&self, timeout: Option<Duration>) {
        tracing::debug!(rank = self.rank, comm = %self.name, ?timeout, "exec timeout set");
        self.device.set_exec_timeout(timeout);
    }

    /// The bound on waits in force (see [`set_exec_timeout`](Self::set_exec_timeout)).
    pub fn exec_timeout(&self) -> Option<Duration> {
        self.device.exec_timeout()
    }

    /// HCCL's `HcclCommAbort`-style abort: every wait of this rank's
    /// pending ops on this communicator ends with an error, every peer is
    /// told, and later ops are refused.
    pub fn abort(&self, reason: &str) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.aborted.is_none() {
            st.aborted = Some(reason.to_owned());
        }
        for l in st.resources.links() {
            l.link().shutdown(reason);
        }
        tracing::warn!(rank = self.rank, comm = %self.name, reason, "communicator aborted");
        drop(st);
        if let Some(fr) = &self.flight {
            fr.dump_auto(&format!("communicator aborted: {reason}"));
        }
    }

    /// A communicator of the same ranks, name and configuration with fresh
    /// links, buffers and device, made by every rank together after a
    /// failed op left the links in no agreed state (the adapter's
    /// `HcclComm::recover`): the shrink machinery with nobody excluded,
    /// over the control plane (processes) or the group's table
    /// (threads). The exec timeout in force and the registered memory come
    /// along. `HCCL_E_NOT_SUPPORT` for a communicator without either (a
    /// rank table's, a sub-communicator).
    pub fn rebuild(&self) -> Result<Communicator> {
        let mut config = self.config.clone();
        config.comm_name = Some(self.name.clone());
        let all: Vec<u32> = (0..self.size).collect();
        let fresh = match self.in_proc_group() {
            Some(group) => {
                let epoch = self.next_shrink();
                self.shrink_threads(&group.clone(), all, epoch, config)
            }
            None => self.shrink(&[], config),
        }
        .map_err(|e| e.during("recovering the communicator"))?;
        fresh.device.set_exec_timeout(self.device.exec_timeout());
        tracing::info!(rank = self.rank, comm = %self.name, "communicator rebuilt after a failed op");
        Ok(fresh)
    }

    /// Retires this communicator once [`rebuild`](Self::rebuild) replaced
    /// it: later ops are refused, waits on its links end, and its peers'
    /// old links are told (they retire theirs too). Quiet: no dump, no
    /// warning, as this is recovery, not failure.
    pub fn retire(&self) {
        let reason = "the communicator was recovered: its ops run on the rebuilt one";
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.aborted.is_none() {
            st.aborted = Some(reason.to_owned());
        }
        for l in st.resources.links() {
            l.link().shutdown(reason);
        }
        st.ops.clear();
        st.last_pick = None;
        st.last_executor = None;
    }

    /// Writes the timeline being recorded on this rank's device (Chrome
    /// trace JSON, see [`Timeline::to_chrome_json`]) to `path`.
    /// `HCCL_E_NOT_SUPPORT` when no timeline is on (`HCCL_RS_TRACE` unset
    /// and none started on the device).
    pub fn write_timeline(&self, path: &std::path::Path) -> Result<()> {
        match self.device.timeline() {
            Some(tl) => self.write_timeline_of(&tl, path),
            None => Err(HcclError::not_support(
                "no timeline is being recorded (set HCCL_RS_TRACE=DIR)",
            )),
        }
    }

    fn write_timeline_of(&self, tl: &Timeline, path: &std::path::Path) -> Result<()> {
        let host = self.host_of(self.rank).to_owned();
        let json = tl.to_chrome_json(&format!("rank {} ({host})", self.rank));
        write_json_file(path, &json)
    }

    /// The init line of NCCL's spirit: who this rank is, how it reaches
    /// its peers, and what the selector will pick (info level).
    fn log_init(
        name: &str,
        rank: u32,
        topo: &TopoInfo,
        hosts: &[String],
        config: &CommConfig,
        fabric: &Fabric,
    ) {
        if !tracing::enabled!(tracing::Level::INFO) {
            return;
        }
        let size = topo.user_rank_size;
        let mut level0 = std::collections::BTreeMap::<&str, u32>::new();
        let mut level1 = std::collections::BTreeMap::<&str, u32>::new();
        let server = |r: u32| topo.rank_to_server.get(r as usize).copied();
        for q in (0..size).filter(|&q| q != rank) {
            let t = fabric.transport_to(q);
            let level = if server(q) == server(rank) {
                &mut level0
            } else {
                &mut level1
            };
            *level.entry(t).or_default() += 1;
        }
        let show = |m: &std::collections::BTreeMap<&str, u32>| {
            if m.is_empty() {
                "none".to_owned()
            } else {
                m.iter()
                    .map(|(t, n)| format!("{t} to {n} peer{}", if *n == 1 { "" } else { "s" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        tracing::info!(
            comm = name,
            rank,
            size,
            host = hosts.get(rank as usize).map_or("?", String::as_str),
            servers = topo.server_num(),
            level0 = %show(&level0),
            level1 = %show(&level1),
            channels = %format_args!(
                "{}..{}",
                config.channels.min,
                config.channels.max.map_or("distinct".to_owned(), |m| m.to_string())
            ),
            buffer_bytes = config.buffer_size,
            "hccl-rs communicator initialised"
        );
    }

    /// Logs, at info level, the selector's executor choices per size
    /// class for AllReduce, AllGather and ReduceScatter (part of the init
    /// log; the selector exists only once the communicator does).
    fn log_choices(&self) {
        if !tracing::enabled!(tracing::Level::INFO) {
            return;
        }
        for op in [OpType::AllReduce, OpType::AllGather, OpType::ReduceScatter] {
            tracing::info!(
                comm = %self.name,
                rank = self.rank,
                op = %op,
                executors = %self.selector.summary(op, &self.topo, self.registry),
                "executor choices by size"
            );
        }
    }

    /// This communicator's flight recorder (`None` when
    /// `HCCL_RS_FR_BUFFER_SIZE=0`): its last ops, dumped on request
    /// ([`FlightRecorder::dump_to`]) and, with `HCCL_RS_FR_DUMP_DIR`, on a
    /// stream failure, an abort or `SIGUSR1`.
    pub fn flight_recorder(&self) -> Option<&Arc<FlightRecorder>> {
        self.flight.as_ref()
    }

    /// HCCL's `HcclCreateSubCommConfig`: the ranks `rank_ids` (parent ranks,
    /// in sub-communicator order) form a new communicator; every one of
    /// them calls this with its own position `sub_rank`. The sub-comm's
    /// rank 0 starts a rendezvous and sends its root info to the others
    /// over this communicator; the new communicator has its own buffers
    /// and links.
    pub fn create_sub_comm(
        &self,
        rank_ids: &[u32],
        sub_comm_id: u64,
        sub_rank: u32,
        config: CommConfig,
    ) -> Result<Communicator> {
        use crate::bootstrap::root_info::{RootInfo, HCCL_ROOT_INFO_BYTES};
        use hccl_algorithm::{OpParam, OpType};
        use hccl_platform::{DataType, ReduceOp};
        let ctx = |e: HcclError| {
            e.rank(self.rank)
                .during(format!("creating sub-communicator {sub_comm_id}"))
        };
        if rank_ids.is_empty() {
            return Err(ctx(HcclError::para("the rank list is empty")));
        }
        for (i, &r) in rank_ids.iter().enumerate() {
            if r >= self.size {
                return Err(ctx(HcclError::para(format!(
                    "rank {r} is out of range for {} ranks",
                    self.size
                ))));
            }
            if rank_ids[..i].contains(&r) {
                return Err(ctx(HcclError::para(format!("rank {r} is listed twice"))));
            }
        }
        if rank_ids.get(sub_rank as usize) != Some(&self.rank) {
            return Err(ctx(HcclError::para(format!(
                "this rank ({}) is not at position {sub_rank} of the rank list {rank_ids:?}",
                self.rank
            ))));
        }
        let n = rank_ids.len() as u32;
        let stream = self.create_stream();
        let blob = DeviceMem::alloc(HCCL_ROOT_INFO_BYTES)?;
        let param = |op_type, peer: u32| {
            let (input, output) = match op_type {
                OpType::Send => (blob.clone(), DeviceMem::null()),
                _ => (DeviceMem::null(), blob.clone()),
            };
            let mut p = OpParam::new(
                format!("SubComm{sub_comm_id}_{}_{peer}", op_type.name()),
                op_type,
                stream.clone(),
                input,
                output,
                HCCL_ROOT_INFO_BYTES as u64,
                DataType::Uint8,
                ReduceOp::Sum,
                0,
            );
            p.peer = peer;
            p
        };
        let root = if sub_rank == 0 {
            let root = Self::get_root_info(&config).map_err(ctx)?;
            blob.copy_from_host_bytes(&root.0)?;
            for &peer in &rank_ids[1..] {
                self.exec_op(&param(OpType::Send, peer)).map_err(ctx)?;
            }
            stream.synchronize().map_err(ctx)?;
            root
        } else {
            self.exec_op(&param(OpType::Receive, rank_ids[0]))
                .map_err(ctx)?;
            stream.synchronize().map_err(ctx)?;
            let mut b = [0u8; HCCL_ROOT_INFO_BYTES];
            blob.copy_to_host_bytes(&mut b)?;
            RootInfo(b)
        };
        Self::init_root_info(n, &root, sub_rank, config).map_err(ctx)
    }

    /// HCCL's `HcclGetCommAsyncError`: the error that broke the
    /// communicator in the background (a lost peer, an abort), if any.
    pub fn async_error(&self) -> Option<HcclError> {
        if let Some(e) = self.revoked_error() {
            return Some(e.rank(self.rank));
        }
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = &st.aborted {
            return Some(
                HcclError::suspending(format!("the communicator was aborted: {r}")).rank(self.rank),
            );
        }
        let err = st.resources.links().find_map(|l| l.link().health().err());
        err
    }

    /// Whether this communicator's ops can run in graph mode (every peer
    /// on this host, reachable by load/store or cross-memory attach: the
    /// direct and AIV executors). Elsewhere a graph-mode op runs in
    /// op-base mode.
    pub fn graph_capable(&self) -> bool {
        self.selector.graph_capable()
    }

    /// The executor that ran the most recent op, if any.
    pub fn last_executor(&self) -> Option<String> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_executor
            .as_ref()
            .map(|l| l.algorithm.clone())
    }

    /// The registration domain of this communicator's memory: its
    /// device's uid, which link verbs read from the op's stream.
    pub(crate) fn domain(&self) -> u64 {
        self.device.uid()
    }

    /// The memory registered with this communicator and its windows.
    pub(crate) fn memory(&self) -> &CommMemory {
        &self.memory
    }

    /// Rank `r`'s host, for messages.
    pub(crate) fn host_of(&self, r: u32) -> &str {
        self.hosts.get(r as usize).map_or("?", String::as_str)
    }

    /// Whether rank `r` is on this rank's host (its memory can be mapped).
    pub(crate) fn same_host(&self, r: u32) -> bool {
        let s = &self.topo.rank_to_server;
        s.get(r as usize) == s.get(self.rank as usize)
    }

    /// Runs one op of the library's own (an exchange of registration
    /// records) with the executor `executor`, whatever `HCCL_RS_EXECUTOR`
    /// or `HCCL_ALGO` force for user ops.
    pub(crate) fn exec_internal(&self, param: &OpParam, executor: &str) -> Result<()> {
        self.exec_op_as(param, Some(executor)).map(|_| ())
    }

    /// Runs one op: select an executor, get (or reuse) its resources for
    /// the op's tag, and let it orchestrate the op on `param.stream`.
    /// The caller has validated the user arguments.
    pub fn exec_op(&self, param: &OpParam) -> Result<()> {
        self.exec_op_index(param).map(|_| ())
    }

    /// [`exec_op`](Self::exec_op), returning the index of the cached op
    /// that ran it.
    fn exec_op_index(&self, param: &OpParam) -> Result<usize> {
        param
            .op_type
            .check_dtype(param.dtype)
            .map_err(|e| e.rank(self.rank).tag(&**param.tag))?;
        if self.config.entry_log {
            self.log_entry(param);
        }
        self.exec_op_as(param, None)
    }

    /// `HCCL_ENTRY_LOG_ENABLE=1`: the op and its arguments, as it enters.
    fn log_entry(&self, param: &OpParam) {
        tracing::info!(
            comm = %self.name,
            rank = self.rank,
            op = %param.op_type,
            tag = %param.tag,
            count = param.count,
            dtype = %param.dtype,
            reduce_op = %param.reduce_op,
            root = param.root,
            peer = param.peer,
            input = format_args!("{:#x}+{}", param.input.addr(), param.input.len()),
            output = format_args!("{:#x}+{}", param.output.addr(), param.output.len()),
            stream = param.stream.id(),
            mode = ?param.mode,
            "op entry"
        );
    }

    /// Runs `param` (with the executor `forced`, if any); the index of
    /// the cached op that ran it.
    fn exec_op_as(&self, param: &OpParam, forced: Option<&str>) -> Result<usize> {
        let ctx = |e: HcclError| e.rank(self.rank).tag(&**param.tag);
        if param.stream.device().uid() != self.device.uid() {
            return Err(ctx(HcclError::para(format!(
                "the stream belongs to device {} (uid {}), not to this communicator's rank {} device; \
                 create it with Communicator::create_stream",
                param.stream.device().id(),
                param.stream.device().uid(),
                self.rank
            ))));
        }
        let key = (param.send_v.is_none() && param.recv_v.is_none() && forced.is_none()).then_some(
            PickKey {
                op: param.op_type,
                count: param.count,
                dtype: param.dtype,
                mode: param.mode,
                root: param.root,
            },
        );
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *st;
        if let Some(r) = &st.aborted {
            return Err(ctx(aborted_error(r)));
        }
        if let Some(e) = self.revoked_error() {
            return Err(ctx(e));
        }
        // the adapter hands the same tag object for a repeated op: a
        // pointer comparison instead of a string comparison
        let repeat = match (key, &st.last_pick) {
            (Some(k), Some((last, i, tag)))
                if k == *last && (Arc::ptr_eq(tag, &param.tag) || **tag == **param.tag) =>
            {
                Some(*i)
            }
            _ => None,
        };
        let idx = match repeat {
            Some(i) => i,
            None => self.find_or_create(st, param, key, forced).map_err(ctx)?,
        };
        if param.mode == WorkflowMode::Graph && !st.ops[idx].graph {
            // the executor chosen (forced, or the only one for the op)
            // stages through the CCL buffers: it runs in op-base mode
            let op_base = OpParam {
                mode: WorkflowMode::OpBase,
                ..param.clone()
            };
            return self.run_cached(st, idx, &op_base).map_err(ctx).map(|_| idx);
        }
        self.run_cached(st, idx, param).map_err(ctx).map(|_| idx)
    }

    /// Selects the executor for `param` and finds its cached op, or
    /// creates the executor and grants its resources.
    fn find_or_create(
        &self,
        st: &mut CommState,
        param: &OpParam,
        key: Option<PickKey>,
        forced: Option<&str>,
    ) -> Result<usize> {
        let name = match forced {
            Some(n) => n.to_owned(),
            None => self.selector.select(param, &self.topo, self.registry)?,
        };
        let find = |ops: &[CachedOp]| {
            ops.iter().position(|o| {
                *o.label.tag == **param.tag
                    && o.label.algorithm == name
                    && o.variant == o.executor.resource_variant(param)
            })
        };
        let idx = match find(&st.ops) {
            Some(i) => i,
            None => {
                let executor = self.registry.create(&name, &self.topo)?;
                let graph = executor.supports_graph();
                if param.mode == WorkflowMode::Graph && !graph {
                    tracing::debug!(tag = %param.tag, executor = %name, rank = self.rank,
                        "the executor runs in op-base mode only: this graph-mode op stages through the CCL buffers");
                }
                let op_base;
                let param = if param.mode == WorkflowMode::Graph && !graph {
                    op_base = OpParam {
                        mode: WorkflowMode::OpBase,
                        ..param.clone()
                    };
                    &op_base
                } else {
                    param
                };
                let req = executor.calc_res_request(param, &self.topo)?;
                let executor_variant = executor.resource_variant(param);
                let bytes = ResourceManager::transport_bytes(param);
                let res = st
                    .resources
                    .grant(&req, &param.input, &param.output, bytes)?;
                tracing::debug!(tag = %param.tag, executor = %name, rank = self.rank, "resources granted");
                let label = Arc::new(OpLabel {
                    tag: param.tag.to_string(),
                    algorithm: name.clone(),
                    rank: self.rank,
                });
                let mut peers: Vec<LinkHandle> = Vec::new();
                for sub in res.op_transport.iter().flatten() {
                    for l in sub.links.iter().flatten() {
                        if !peers.iter().any(|p| p.remote_rank() == l.remote_rank()) {
                            peers.push(l.clone());
                        }
                    }
                }
                st.ops.push(CachedOp {
                    graph,
                    executor,
                    res,
                    label,
                    peers,
                    desc: DescriptorCache::default(),
                    none: DeviceMem::null(),
                    variant: executor_variant,
                });
                st.ops.len() - 1
            }
        };
        st.last_pick = key.map(|k| (k, idx, Arc::clone(&param.tag)));
        if forced.is_none() {
            st.note_last(idx);
        }
        Ok(idx)
    }

    /// Marks the op `param` in the timeline: its tasks start at
    /// `first_task` of its stream.
    fn mark_op(&self, tl: &Timeline, param: &OpParam, label: &Arc<OpLabel>, first_task: u64) {
        let seq = self.ops_traced.fetch_add(1, Ordering::Relaxed) + 1;
        let op = param.op_type;
        let args = OpArgs {
            name: op.hccl_name(),
            seq,
            label: Some(Arc::clone(label)),
            count: param.count,
            dtype: param.dtype,
            bytes: param.count * param.dtype.size() as u64,
            reduce_op: op.reduces().then_some(param.reduce_op),
            root: op.rooted().then_some(param.root),
            peer: op.point_to_point().then_some(param.peer),
        };
        tl.mark_op(param.stream.id(), first_task, args);
    }

    /// Runs the cached op `idx` for `param`.
    fn run_cached(&self, st: &mut CommState, idx: usize, param: &OpParam) -> Result<()> {
        let op = &mut st.ops[idx];
        // the op's memory, for the executor; dropped again below: a cached
        // op must not keep the caller's freed buffer mapped
        op.res.param_input = DeviceMem::clone(&param.input);
        op.res.param_output = DeviceMem::clone(&param.output);
        param.stream.set_label_to(&op.label);
        for s in &op.res.slave_streams {
            s.set_label_to(&op.label);
        }
        // An op that fails half-way must leave nothing queued: remember the
        // queue ends and roll back on error.
        let marks: SmallVec<[_; 4]> = std::iter::once(&*param.stream)
            .chain(op.res.slave_streams.iter())
            .map(|s| (s, s.mark()))
            .collect();
        // A capturing stream records the op (platform `stream/graph.rs`):
        // the slave streams the executor also issues on join the capture as
        // lanes of their own for the op's orchestration, so the graph holds
        // the whole op and replays each part on its stream.
        let capturing = param.stream.is_capturing();
        let timeline = self.device.timeline();
        let first_task =
            (self.flight.is_some() || timeline.is_some()).then(|| param.stream.progress().enqueued);
        // recorded before the op's tasks are issued: a rank ahead of its
        // peers pays for it while it would wait for them anyway
        let ticket = match (&self.flight, first_task) {
            (Some(fr), Some(start)) => Some(fr.begin(&mut st.fr_writer, param, &op.label, start)),
            _ => None,
        };
        // Consistency check: before any data moves, every peer this op talks
        // to compares its op descriptor with ours.
        let run = (|| {
            if capturing {
                for s in &op.res.slave_streams {
                    s.join_capture(&param.stream)?;
                }
            }
            if self.config.consistency_check && !op.executor.checks_consistency() {
                let desc = op.desc.get(param, self.config.buffer_size as u64);
                // send to every peer before waiting for any, so one slow or
                // lost peer cannot hold back the others' checks
                for link in &op.peers {
                    link.tx_desc(desc, &param.stream)?;
                }
                for link in &op.peers {
                    link.rx_desc(desc, &param.stream)?;
                }
            }
            op.executor.orchestrate(param, &op.res)
        })();
        op.res.param_input = op.none.clone();
        op.res.param_output = op.none.clone();
        if capturing {
            for s in &op.res.slave_streams {
                s.leave_capture();
            }
            if run.is_ok() {
                param.stream.capture_note(&op.label);
            }
        }
        if let (Some(fr), Some(t)) = (&self.flight, ticket) {
            fr.end(t, &param.stream, run.is_ok());
        }
        if let (Some(start), true) = (first_task, run.is_ok()) {
            if let Some(tl) = timeline {
                self.mark_op(&tl, param, &op.label, start);
            }
        }
        run.map_err(|e| {
            let e = e.rank(self.rank).tag(&**param.tag);
            for (s, m) in marks {
                s.rollback(m, &e);
            }
            e
        })
    }
}
