//! Communicators whose ranks are separate processes (possibly on other
//! hosts): created from root info, a rank table, or launcher variables.
//! Links between them run over the transport components each rank opens
//! (shared memory on one host, TCP or RDMA between hosts).

use crate::bootstrap::launcher::{self, Rendezvous};
use crate::bootstrap::root_info::{self, RootInfo, HCCL_ROOT_INFO_BYTES};
use crate::bootstrap::{
    derived_unique_id, host_id, local_ip_towards, machine_of, rank_table, RankInfo, RankTable,
};
use crate::config::{CommConfig, ProcessEnv};
use crate::control::{ControlListener, ControlPlane, CONTROL_COMPONENT};
use crate::fabric::{Fabric, Opened, PeerRecord};
use crate::revoke::Spread;
use crate::Communicator;
use hccl_algorithm::TopoInfo;
use hccl_platform::shm_segment_name;
use hccl_platform::transport::{component_id, pack_addresses, ContextSetup, Placement};
use hccl_platform::{sweep_stale_segments, ShmSegment};
use hccl_platform::{Device, DeviceMem, HcclError, Result};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The address to advertise to peers reached via `towards`: `HCCL_IF_IP`,
/// else the `HCCL_SOCKET_IFNAME` interface's, else the routed one.
fn local_ip(config: &CommConfig, towards: IpAddr) -> Result<IpAddr> {
    match (&config.if_ip, &config.socket_ifname) {
        (Some(ip), _) => local_ip_towards(towards, Some(ip)),
        (None, Some(spec)) => crate::bootstrap::interface::address_of(spec, config.ipv6),
        (None, None) => local_ip_towards(towards, None),
    }
}

/// The address peers can reach this host at when nothing says otherwise.
fn default_ip(config: &CommConfig) -> Result<IpAddr> {
    if let Some(spec) = &config.socket_ifname {
        if config.if_ip.is_none() {
            return crate::bootstrap::interface::address_of(spec, config.ipv6);
        }
    }
    match &config.if_ip {
        Some(ip) => local_ip_towards("127.0.0.1".parse().expect("literal"), Some(ip)),
        // the address of the default route's interface, else loopback
        None => Ok(
            local_ip_towards("192.0.2.1".parse().expect("literal"), None)
                .unwrap_or_else(|_| "127.0.0.1".parse().expect("literal")),
        ),
    }
}

fn io_timeout(config: &CommConfig) -> Duration {
    config
        .exec_timeout
        .unwrap_or(Duration::from_secs(24 * 3600))
}

/// A rank before the exchange: its device, its CCL buffers and its opened
/// transport components.
struct Local {
    device: Device,
    ccl: (DeviceMem, DeviceMem),
    opened: Vec<Opened>,
    /// The TCP listener, if TCP is opened (the rank info's `link_addr`).
    listener: Option<SocketAddr>,
    /// The control plane's listener (its address travels with the
    /// transports' under [`CONTROL_COMPONENT`]).
    control: ControlListener,
}

impl Local {
    /// The rank info this rank publishes.
    fn info(&self, rank: u32, config: &CommConfig) -> Result<RankInfo> {
        let mut parts: Vec<(u32, Vec<u8>)> = self
            .opened
            .iter()
            .map(|o| (component_id(o.component.name()), o.context.address()))
            .collect();
        parts.push((
            component_id(CONTROL_COMPONENT),
            hccl_platform::encode_tcp_address(self.control.addr()?),
        ));
        Ok(RankInfo {
            rank,
            host_id: host_id(),
            // without TCP the field is still filled (it is required), with
            // an address nobody listens on
            link_addr: self
                .listener
                .unwrap_or_else(|| SocketAddr::new([0, 0, 0, 0].into(), 0)),
            buffer_size: config.buffer_size as u64,
            transports: pack_addresses(&parts)?,
        })
    }
}

/// Creates the rank's device and CCL buffers (in a shared segment when the
/// shm component may be used, so host peers can map them) and opens its
/// transport components.
fn local_setup(
    rank: u32,
    size: u32,
    ip: IpAddr,
    port: u16,
    unique_id: [u8; 16],
    config: &CommConfig,
    with_shm: bool,
) -> Result<Local> {
    let with_shm = with_shm && crate::transports::order_of(&config.transport)?.allows("shm");
    let (device, ccl, segment) = if with_shm {
        sweep_stale_segments();
        let seg = ShmSegment::create(
            &shm_segment_name(&format!("r{rank}")),
            size as usize,
            config.buffer_size,
        )?;
        let waker = Arc::new(seg.waker()?);
        let device = Device::with_waker(rank, config.device_config(size), waker.clone());
        let ccl = (seg.ccl_input(), seg.ccl_output());
        (device, ccl, Some((seg, waker)))
    } else {
        let device = Device::new(rank, config.device_config(size));
        let ccl = (
            DeviceMem::alloc(config.buffer_size)?,
            DeviceMem::alloc(config.buffer_size)?,
        );
        (device, ccl, None)
    };
    let setup = ContextSetup {
        rank,
        size,
        unique_id,
        device: device.clone(),
        ccl: ccl.clone(),
        ip,
        port,
        io_timeout: io_timeout(config),
        connect_timeout: config.connect_timeout,
        sockets_per_link: config.sockets_per_link,
        segment,
        in_process: None,
        params: config.transport_params.clone(),
    };
    let opened = crate::transports::open_all(&setup, &config.transport)?;
    let listener = opened.iter().find_map(|o| o.context.listener());
    Ok(Local {
        device,
        ccl,
        opened,
        listener,
        control: ControlListener::bind(ip)?,
    })
}

fn finish(rank: u32, table: RankTable, local: Local, config: CommConfig) -> Result<Communicator> {
    let mine = config.buffer_size as u64;
    if let Some(other) = table.ranks.iter().find(|r| r.buffer_size != mine) {
        return Err(HcclError::para(format!(
            "HCCL_BUFFSIZE differs between ranks: this rank has {mine} bytes, rank {} has {}",
            other.rank, other.buffer_size
        ))
        .rank(rank));
    }
    let my_host = table.ranks[rank as usize].host_id.clone();
    let peers = table
        .ranks
        .iter()
        .map(|r| PeerRecord::from_info(r, &my_host))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.rank(rank))?;
    // this rank's index among the ranks on its machine, for its core (and
    // its RDMA device): hosts declared with HCCL_RS_HOST_ID or made of
    // network namespaces share one machine's cores, and pinning each as if
    // alone put them all on its first core
    let my_machine = machine_of(&my_host);
    let on_host: Vec<u32> = table
        .ranks
        .iter()
        .filter(|r| machine_of(&r.host_id) == my_machine)
        .map(|r| r.rank)
        .collect();
    let local_index = on_host.iter().position(|&r| r == rank).unwrap_or(0) as u32;
    // The device was made knowing only the rank count; now that the table
    // says where every rank runs, spin when this rank's host and machine
    // have a CPU per rank (2 namespace hosts x 1 rank on 2 cores spin;
    // treating all ranks as this host's parked them: 0.5-1 µs more at p99
    // of an 8 B AllReduce across the hosts).
    let host_ranks = table.ranks.iter().filter(|r| r.host_id == my_host).count() as u32;
    local
        .device
        .set_spin(config.spin_for(host_ranks, on_host.len() as u32));
    let order = crate::transports::order_of(&config.transport)?;
    let fabric = Fabric::new(rank, order, local.opened, peers);
    fabric.prepare(Placement {
        index: local_index,
        count: on_host.len() as u32,
    })?;
    let topo = TopoInfo::new(rank, table.rank_to_server())?.with_channels(config.channels);
    let cpu = crate::affinity::pin_rank(
        &config.cpu_affinity,
        rank,
        local_index,
        on_host.len() as u32,
        &local.device,
        config.pin_creating_thread,
    )?;
    let name: String = table.unique_id[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let by_transport = fabric.peers_by_transport();
    tracing::debug!(
        rank,
        size = table.ranks.len(),
        servers = topo.server_num(),
        spin_us = local.device.spin().as_micros() as u64,
        shm_peers = by_transport.get("shm").copied().unwrap_or(0),
        transports = ?by_transport,
        "communicator formed"
    );
    let control_addrs = table
        .ranks
        .iter()
        .map(|r| {
            let packed = hccl_platform::transport::unpack_addresses(&r.transports).ok()?;
            let (_, bytes) = packed
                .into_iter()
                .find(|(id, _)| *id == component_id(CONTROL_COMPONENT))?;
            hccl_platform::decode_tcp_address(bytes).ok()
        })
        .collect();
    let plane = ControlPlane::start(
        local.control,
        rank,
        table.unique_id,
        control_addrs,
        config.connect_timeout,
    )
    .map_err(|e| e.rank(rank).during("connecting the control plane"))?;
    Ok(Communicator::assemble(
        config.comm_name.clone().unwrap_or(format!("mp-{name}")),
        topo,
        config,
        local.device,
        local.ccl,
        Arc::new(fabric),
    )
    .with_spread(Spread::Control(plane))
    .with_cpu(cpu))
}

impl Communicator {
    /// NCCL's `ncclCommShrink`: the ranks not in `exclude` build a new
    /// communicator without them, each calling this (the excluded ranks
    /// never do, and may be dead). Survivors keep their order: new rank =
    /// position among the survivors. No new root info: the survivors
    /// exchange their new addresses over this communicator's control
    /// plane, which outlives a revocation and notices a survivor lost
    /// meanwhile (an error naming it). The new communicator has its own
    /// device, buffers and links; this one stays as it is (revoke it
    /// first to end ops still in flight on it; destroy it after). Memory
    /// registered with this communicator stays registered with the new
    /// one, with the peers' exchanged registrations under their new ranks
    /// (symmetric windows are not carried: register them again).
    ///
    /// For ranks that are processes of a communicator made from root info
    /// or launcher variables, and for threads of one process (`init_all`,
    /// [`InProcGroup`](crate::InProcGroup): the first survivor to arrive
    /// makes the new group, the others join it); `HCCL_E_NOT_SUPPORT` for
    /// a communicator from a rank table (no control plane).
    pub fn shrink(&self, exclude: &[u32], config: CommConfig) -> Result<Communicator> {
        let (rank, size) = (self.rank(), self.size());
        let ctx = |e: HcclError| e.rank(rank).during("shrinking the communicator");
        let control = match self.in_proc_group() {
            Some(_) => None,
            None => Some(self.control_for("shrink").map_err(ctx)?),
        };
        for (i, &r) in exclude.iter().enumerate() {
            if r >= size {
                return Err(ctx(HcclError::para(format!(
                    "excluded rank {r} is out of range for {size} ranks"
                ))));
            }
            if exclude[..i].contains(&r) {
                return Err(ctx(HcclError::para(format!("rank {r} is excluded twice"))));
            }
        }
        if exclude.contains(&rank) {
            return Err(ctx(HcclError::para(format!(
                "this rank ({rank}) is in the exclude list: excluded ranks do not call shrink"
            ))));
        }
        let survivors: Vec<u32> = (0..size).filter(|r| !exclude.contains(r)).collect();
        let new_rank = survivors
            .iter()
            .position(|&r| r == rank)
            .expect("not excluded") as u32;
        let epoch = self.next_shrink();
        let Some(control) = control else {
            let group = self.in_proc_group().expect("threads as ranks").clone();
            return self
                .shrink_threads(&group, survivors, epoch, config)
                .map_err(ctx);
        };
        let tag = control.tag(&format!("shrink/{epoch}"));
        let ip = control
            .own_addr()
            .map(|a| a.ip())
            .ok_or_else(|| ctx(HcclError::internal("the control plane has no address")))?;
        let n = survivors.len() as u32;
        let local = local_setup(new_rank, n, ip, 0, tag, &config, true).map_err(ctx)?;
        let me = local.info(new_rank, &config).map_err(ctx)?;
        // the survivors' list travels with the info, so ranks that were
        // told different exclusions say so instead of building apart
        let blob = serde_json::to_vec(&(&survivors, &me)).map_err(|e| {
            ctx(HcclError::internal(format!(
                "encoding this rank's info: {e}"
            )))
        })?;
        let parts = control
            .gather(tag, &survivors, blob, config.connect_timeout)
            .map_err(ctx)?;
        let mut ranks = Vec::with_capacity(parts.len());
        for (i, p) in parts.iter().enumerate() {
            let (theirs, info): (Vec<u32>, RankInfo) = serde_json::from_slice(p).map_err(|e| {
                ctx(HcclError::para(format!(
                    "rank {}'s info for the shrink is malformed: {e}",
                    survivors[i]
                )))
            })?;
            if theirs != survivors || info.rank != i as u32 {
                return Err(ctx(HcclError::para(format!(
                    "the survivors disagree on who is excluded: rank {} keeps {theirs:?}, this rank {survivors:?}",
                    survivors[i]
                ))));
            }
            ranks.push(info);
        }
        tracing::info!(rank, new_rank, size = n, excluded = ?exclude, "communicator shrunk");
        let shrunk = finish(
            new_rank,
            RankTable {
                unique_id: tag,
                ranks,
            },
            local,
            config,
        )
        .map_err(ctx)?;
        self.carry_registrations(&shrunk, |q| {
            survivors.iter().position(|&s| s == q).map(|i| i as u32)
        })
        .map_err(ctx)?;
        Ok(shrunk)
    }
}

impl Communicator {
    /// NCCL's `ncclCommGrow`, the id: a single-use id for growing this
    /// communicator (any one member makes it; the rendezvous runs on its
    /// host for the connect timeout). Hand it to the new processes, which
    /// call [`Communicator::join_grown`] with it; the other members learn
    /// it in [`grow`](Self::grow).
    pub fn grow_id(&self) -> Result<RootInfo> {
        if self.in_proc_group().is_some() {
            return Ok(Self::grow_id_threads());
        }
        let ip = self
            .control_for("grow")?
            .own_addr()
            .map(|a| a.ip())
            .ok_or_else(|| HcclError::internal("the control plane has no address"))?;
        RootInfo::generate(SocketAddr::new(ip, 0), ip, self.config().connect_timeout)
    }

    /// NCCL's `ncclCommGrow`, the members' side: every member calls it,
    /// the one that made the id ([`grow_id`](Self::grow_id)) passing it
    /// and the others `None` (they receive it over the control plane);
    /// with the new ranks ([`join_grown`](Self::join_grown)) they form a
    /// communicator of `n_ranks` in which every member keeps its rank and
    /// the new ranks take `size()..n_ranks`. This communicator stays as it
    /// is. A member gone meanwhile is an error naming it.
    pub fn grow(
        &self,
        n_ranks: u32,
        id: Option<&RootInfo>,
        config: CommConfig,
    ) -> Result<Communicator> {
        let (rank, size) = (self.rank(), self.size());
        let ctx = |e: HcclError| e.rank(rank).during("growing the communicator");
        if n_ranks <= size {
            return Err(ctx(HcclError::para(format!(
                "growing to {n_ranks} ranks: the communicator has {size} already"
            ))));
        }
        if let Some(group) = self.in_proc_group() {
            let epoch = self.next_shrink();
            return self
                .grow_threads(&group.clone(), n_ranks, id, epoch, config)
                .map_err(ctx);
        }
        let control = self.control_for("grow").map_err(ctx)?;
        let epoch = self.next_shrink();
        let tag = control.tag(&format!("grow/{epoch}"));
        let members: Vec<u32> = (0..size).collect();
        let mine = id.map(|i| i.0.to_vec()).unwrap_or_default();
        let parts = control
            .gather(tag, &members, mine, config.connect_timeout)
            .map_err(ctx)?;
        let makers: Vec<u32> = parts
            .iter()
            .zip(&members)
            .filter(|(p, _)| !p.is_empty())
            .map(|(_, &m)| m)
            .collect();
        let root = match makers.as_slice() {
            [m] => {
                let bytes: [u8; HCCL_ROOT_INFO_BYTES] =
                    parts[*m as usize].as_slice().try_into().map_err(|_| {
                        ctx(HcclError::para(format!(
                            "rank {m}'s grow id is not {HCCL_ROOT_INFO_BYTES} bytes"
                        )))
                    })?;
                RootInfo(bytes)
            }
            [] => {
                return Err(ctx(HcclError::para(
                    "no member passed a grow id: one member makes it (grow_id) and passes it to grow, the others pass none",
                )))
            }
            many => {
                return Err(ctx(HcclError::para(format!(
                    "ranks {many:?} each passed a grow id: exactly one member passes it"
                ))))
            }
        };
        tracing::info!(rank, size, n_ranks, "growing the communicator");
        let grown = Communicator::init_root_info(n_ranks, &root, rank, config).map_err(ctx)?;
        // members keep their numbers
        self.carry_registrations(&grown, Some).map_err(ctx)?;
        Ok(grown)
    }

    /// NCCL's `ncclCommGrow`, a new rank's side: joins the communicator
    /// being grown to `n_ranks` with the id a member made
    /// ([`grow_id`](Self::grow_id)) as rank `rank` (one of the new
    /// ranks, numbered after the members).
    pub fn join_grown(
        n_ranks: u32,
        id: &RootInfo,
        rank: u32,
        config: CommConfig,
    ) -> Result<Communicator> {
        if let Some(joined) =
            crate::successor::join_grown_threads(n_ranks, id, rank, config.connect_timeout)
        {
            return joined.map_err(|e| e.rank(rank).during("joining a grown communicator"));
        }
        Communicator::init_root_info(n_ranks, id, rank, config)
            .map_err(|e| e.during("joining a grown communicator"))
    }
}

fn check_rank(n_ranks: u32, rank: u32) -> Result<()> {
    if n_ranks == 0 {
        return Err(HcclError::para(
            "a communicator needs at least one rank (got 0)",
        ));
    }
    if rank >= n_ranks {
        return Err(HcclError::para(format!(
            "rank {rank} is out of range for a communicator of {n_ranks} ranks"
        )));
    }
    Ok(())
}

impl Communicator {
    /// HCCL's `HcclGetRootInfo`: on the root rank, starts the rendezvous
    /// server and returns the blob to hand to every rank.
    pub fn get_root_info(config: &CommConfig) -> Result<RootInfo> {
        let ip = default_ip(config)?;
        let bind = SocketAddr::new(
            if config.if_ip.is_some() {
                ip
            } else {
                "0.0.0.0".parse().expect("literal")
            },
            0,
        );
        RootInfo::generate(bind, ip, config.connect_timeout)
    }

    /// HCCL's `HcclCommInitRootInfo`: joins the `n_ranks` group described
    /// by `root` as `rank`. Every rank must call it.
    pub fn init_root_info(
        n_ranks: u32,
        root: &RootInfo,
        rank: u32,
        config: CommConfig,
    ) -> Result<Communicator> {
        check_rank(n_ranks, rank)?;
        // a grow id of threads of this process (HCCL programs join a grown
        // communicator through HcclCommInitRootInfo)
        if let Some(joined) =
            crate::successor::join_grown_threads(n_ranks, root, rank, config.connect_timeout)
        {
            return joined;
        }
        let (root_addr, unique_id) = root.decode()?;
        let ip = local_ip(&config, root_addr.ip())?;
        let local = local_setup(rank, n_ranks, ip, 0, unique_id, &config, true)?;
        let me = local.info(rank, &config)?;
        let table = root_info::exchange(root, n_ranks, me, config.connect_timeout)?;
        finish(rank, table, local, config)
    }

    /// HCCL's `HcclCommInitClusterInfo`: the rank table at `path` lists every
    /// rank's address; this process is `rank`.
    pub fn init_cluster_info(path: &str, rank: u32, config: CommConfig) -> Result<Communicator> {
        let table = rank_table::load(path, config.base_port, config.buffer_size as u64)?;
        check_rank(table.ranks.len() as u32, rank)?;
        let me = &table.ranks[rank as usize];
        let local = local_setup(
            rank,
            table.ranks.len() as u32,
            me.link_addr.ip(),
            me.link_addr.port(),
            table.unique_id,
            &config,
            // the rank table names no segments: its ranks talk over TCP
            false,
        )
        .map_err(|e| {
            e.during(format!(
                "rank table {path}: rank {rank} at {}",
                me.link_addr
            ))
        })?;
        finish(rank, table, local, config)
    }

    /// A communicator from the launcher's environment (torchrun, Open MPI,
    /// MPICH, Slurm; see `bootstrap::launcher`).
    pub fn init_from_env(config: CommConfig) -> Result<Communicator> {
        let info = launcher::detect(&ProcessEnv)?.ok_or_else(|| {
            HcclError::para(
                "no launcher environment found: set RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_* or SLURM_* with a rendezvous address",
            )
        })?;
        tracing::debug!(
            launcher = info.launcher,
            rank = info.rank,
            size = info.size,
            "launcher environment"
        );
        let root = match &info.rendezvous {
            Rendezvous::Addr(addr) => {
                let job: String = [
                    "TORCHELASTIC_RUN_ID",
                    "OMPI_MCA_ess_base_jobid",
                    "SLURM_JOB_ID",
                    "PMI_ID",
                    "HCCL_RS_JOB_ID",
                ]
                .iter()
                .filter_map(|k| std::env::var(k).ok())
                .collect::<Vec<_>>()
                .join("/");
                let id = derived_unique_id(&format!("{addr}/{}/{job}", info.size));
                if info.rank == 0 {
                    let bind = SocketAddr::new("0.0.0.0".parse().expect("literal"), addr.port());
                    RootInfo::serve_at(bind, id, config.connect_timeout)?;
                }
                RootInfo::encode(*addr, id)
            }
            Rendezvous::File(path) => {
                if info.rank == 0 {
                    let root = Self::get_root_info(&config)?;
                    let tmp = format!("{path}.tmp{}", std::process::id());
                    std::fs::write(&tmp, root.0)
                        .and_then(|_| std::fs::rename(&tmp, path))
                        .map_err(|e| {
                            HcclError::open_file(format!(
                                "HCCL_RS_ROOT_FILE {path}: cannot write the root info: {e}"
                            ))
                        })?;
                    root
                } else {
                    read_root_file(path, config.connect_timeout)?
                }
            }
        };
        Self::init_root_info(info.size, &root, info.rank, config)
    }
}

/// Waits for rank 0 to write the root info to `path`.
pub fn read_root_file(path: &str, timeout: Duration) -> Result<RootInfo> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(bytes) = std::fs::read(path) {
            if bytes.len() == HCCL_ROOT_INFO_BYTES {
                let mut b = [0u8; HCCL_ROOT_INFO_BYTES];
                b.copy_from_slice(&bytes);
                return Ok(RootInfo(b));
            }
        }
        if Instant::now() >= deadline {
            return Err(HcclError::timeout(format!(
                "root info file {path} did not appear within {}s (HCCL_CONNECT_TIMEOUT)",
                timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
