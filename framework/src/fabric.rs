//! Fabrics: how a rank gets a link to a peer.
//!
//! [`InProcFabric`]: ranks that are threads of one process.
//! [`TcpFabric`]: ranks in other processes or on other hosts, over TCP.
//!
//! In-process details:
//!
//! Each rank publishes an endpoint (its buffers and its driver's waker) when
//! it joins. Links are made lazily: the first of two ranks to ask for a link
//! between them creates both ends and parks the peer's end here until the
//! peer asks for it.

use crate::bootstrap::{RankInfo, RankTable};
use hccl_platform::EventCount;
use hccl_platform::{HcclError, LinkHandle, MemKind, PeerProcess, Result};
use hccl_platform::{InProcEndpoint, InProcLink, ShmLink, ShmSegment, TcpNode};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Identifies a link between two ranks over given peer memories.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LinkKey {
    low: u32,
    high: u32,
}

#[derive(Default)]
struct FabricState {
    endpoints: Vec<Option<InProcEndpoint>>,
    /// Ends created by one rank and not yet collected by the other,
    /// keyed by (pair, collecting rank).
    parked: HashMap<(LinkKey, u32), LinkHandle>,
}

/// Builds links for a communicator.
pub(crate) trait Fabric: Send + Sync + std::fmt::Debug {
    /// `local`'s end of a link to `remote` whose ends address each other's
    /// `input`/`output` buffers, waiting up to `connect_timeout` for the peer.
    fn link(
        &self,
        local: u32,
        remote: u32,
        input: MemKind,
        output: MemKind,
        connect_timeout: Duration,
    ) -> Result<LinkHandle>;

    /// Whether `local`'s link to `remote` will be able to read the peer's
    /// user buffers ([`Link::reads_peer_param`](hccl_platform::Link::reads_peer_param)),
    /// known without building the link: the selector offers the
    /// direct-read executors only when every link can.
    fn reads_peer_param(&self, _remote: u32) -> bool {
        false
    }

    /// Whether `local`'s link to `remote` will reach the AIV boards
    /// ([`Link::boards`](hccl_platform::Link::boards)): the selector
    /// offers the AIV executors only when every link will.
    fn reaches_boards(&self, _remote: u32) -> bool {
        false
    }

    /// Every rank's TCP link listener, by rank (empty when ranks are
    /// threads of one process).
    fn listeners(&self) -> Vec<std::net::SocketAddr> {
        Vec::new()
    }

    /// The transport `local`'s link to `remote` will use, for the
    /// communicator's init log.
    fn transport_to(&self, remote: u32) -> &'static str;

    /// Every rank's host name, by rank, for messages (empty when ranks
    /// are threads of one process).
    fn host_names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Links over TCP to the ranks of a [`RankTable`].
#[derive(Debug)]
pub(crate) struct TcpFabric {
    node: TcpNode,
    table: RankTable,
}

impl TcpFabric {
    /// A fabric using `node` (this rank's listener) and the peers in `table`.
    pub(crate) fn new(node: TcpNode, table: RankTable) -> Self {
        TcpFabric { node, table }
    }
}

impl Fabric for TcpFabric {
    fn transport_to(&self, _remote: u32) -> &'static str {
        "tcp"
    }

    fn listeners(&self) -> Vec<std::net::SocketAddr> {
        self.table.ranks.iter().map(|r| r.link_addr).collect()
    }

    fn host_names(&self) -> Vec<String> {
        self.table
            .ranks
            .iter()
            .map(|r| host_name(r).to_owned())
            .collect()
    }

    fn link(
        &self,
        _local: u32,
        remote: u32,
        _input: MemKind,
        _output: MemKind,
        timeout: Duration,
    ) -> Result<LinkHandle> {
        let peer = self.table.ranks.get(remote as usize).ok_or_else(|| {
            HcclError::para(format!(
                "peer rank {remote} is out of range for {} ranks",
                self.table.ranks.len()
            ))
        })?;
        let mut lens = [None; 5];
        lens[MemKind::CclInput.index()] = Some(peer.buffer_size as usize);
        lens[MemKind::CclOutput.index()] = Some(peer.buffer_size as usize);
        let link = self
            .node
            .link(remote, peer.link_addr, lens, timeout)?
            .with_peer_host(format!("{} at {}", host_name(peer), peer.link_addr.ip()));
        Ok(LinkHandle::new(Arc::new(link)))
    }
}

/// A rank's host for messages: the host id's name part (a host id is
/// `hostname[:netns]/boot id/net:inode`, or what `HCCL_RS_HOST_ID` declares).
pub(crate) fn host_name(info: &RankInfo) -> &str {
    info.host_id.split('/').next().unwrap_or(&info.host_id)
}

/// Mapped segments of the peers on this host, and this rank's own.
#[derive(Debug, Default)]
pub(crate) struct ShmPeers {
    /// This rank's segment and the event count its driver parks on.
    pub mine: Option<(ShmSegment, Arc<EventCount>)>,
    /// Peer rank → its segment (mapped here) and its event count.
    pub peers: HashMap<u32, (ShmSegment, Arc<EventCount>)>,
    /// Peer rank → its process, watched for exit (a pidfd each), shared by
    /// its links and the device's watch list.
    pub processes: HashMap<u32, Arc<PeerProcess>>,
}

/// Links for a communicator spanning processes: shared memory to peers on
/// this host, TCP to the others.
#[derive(Debug)]
pub(crate) struct HostFabric {
    tcp: TcpFabric,
    shm: ShmPeers,
}

impl HostFabric {
    /// Shared memory to the peers in `shm`, TCP to everyone else.
    pub(crate) fn new(tcp: TcpFabric, shm: ShmPeers) -> Self {
        HostFabric { tcp, shm }
    }
}

impl Fabric for HostFabric {
    fn transport_to(&self, remote: u32) -> &'static str {
        if self.shm.mine.is_some() && self.shm.peers.contains_key(&remote) {
            "shm"
        } else {
            "tcp"
        }
    }

    fn listeners(&self) -> Vec<std::net::SocketAddr> {
        self.tcp.listeners()
    }

    fn host_names(&self) -> Vec<String> {
        self.tcp.host_names()
    }

    fn link(
        &self,
        local: u32,
        remote: u32,
        input: MemKind,
        output: MemKind,
        timeout: Duration,
    ) -> Result<LinkHandle> {
        match (&self.shm.mine, self.shm.peers.get(&remote)) {
            (Some((mine, own_waker)), Some((theirs, peer_waker))) => {
                let mut link = ShmLink::new(
                    local,
                    mine.clone(),
                    own_waker.clone(),
                    remote,
                    theirs.clone(),
                    peer_waker.clone(),
                )?;
                if let Some(p) = self.shm.processes.get(&remote) {
                    link = link.with_peer_process(p.clone());
                }
                Ok(LinkHandle::new(Arc::new(link)))
            }
            _ => self.tcp.link(local, remote, input, output, timeout),
        }
    }

    fn reads_peer_param(&self, remote: u32) -> bool {
        self.shm.mine.is_some()
            && self.shm.peers.contains_key(&remote)
            && hccl_platform::cross_memory_attach_permitted()
    }

    fn reaches_boards(&self, remote: u32) -> bool {
        self.shm.mine.is_some() && self.shm.peers.contains_key(&remote)
    }
}

/// Rendezvous point of an in-process group.
pub(crate) struct InProcFabric {
    size: u32,
    state: Mutex<FabricState>,
    joined: Condvar,
}

impl std::fmt::Debug for InProcFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcFabric")
            .field("size", &self.size)
            .finish()
    }
}

impl InProcFabric {
    /// A fabric for `size` ranks.
    pub(crate) fn new(size: u32) -> Arc<Self> {
        Arc::new(InProcFabric {
            size,
            state: Mutex::new(FabricState {
                endpoints: vec![None; size as usize],
                parked: HashMap::new(),
            }),
            joined: Condvar::new(),
        })
    }

    /// Publishes `rank`'s endpoint.
    pub(crate) fn publish(&self, ep: InProcEndpoint) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let slot = st.endpoints.get_mut(ep.rank as usize).ok_or_else(|| {
            HcclError::para(format!(
                "rank {} is out of range for {} ranks",
                ep.rank, self.size
            ))
        })?;
        if slot.is_some() {
            return Err(HcclError::para(format!(
                "rank {} has already joined this group",
                ep.rank
            )));
        }
        *slot = Some(ep);
        self.joined.notify_all();
        Ok(())
    }
}

impl Fabric for InProcFabric {
    fn transport_to(&self, _remote: u32) -> &'static str {
        "in-process"
    }

    /// `local`'s end of the link to `remote`, waiting up to `connect_timeout`
    /// for `remote` to join. Each end addresses the other's CCL buffers.
    fn link(
        &self,
        local: u32,
        remote: u32,
        _input: MemKind,
        _output: MemKind,
        connect_timeout: Duration,
    ) -> Result<LinkHandle> {
        let key = LinkKey {
            low: local.min(remote),
            high: local.max(remote),
        };
        if remote >= self.size {
            return Err(HcclError::para(format!(
                "peer rank {remote} is out of range for {} ranks",
                self.size
            )));
        }
        let deadline = Instant::now() + connect_timeout;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.endpoints[remote as usize].is_none() {
            let now = Instant::now();
            if now >= deadline {
                return Err(HcclError::timeout(format!(
                    "rank {remote} did not join the group within {}s (HCCL_CONNECT_TIMEOUT)",
                    connect_timeout.as_secs_f64()
                ))
                .rank(local)
                .peer(remote));
            }
            st = self
                .joined
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if let Some(end) = st.parked.remove(&(key.clone(), local)) {
            return Ok(end);
        }
        let ep = |r: u32| {
            st.endpoints
                .get(r as usize)
                .and_then(|e| e.clone())
                .ok_or_else(|| HcclError::internal(format!("rank {r} has not joined the group")))
        };
        let (a, b) = (ep(local)?, ep(remote)?);
        let (mine, theirs) = InProcLink::pair(&a, &b);
        st.parked
            .insert((key, remote), LinkHandle::new(Arc::new(theirs)));
        Ok(LinkHandle::new(Arc::new(mine)))
    }

    fn reads_peer_param(&self, remote: u32) -> bool {
        remote < self.size && hccl_platform::cross_memory_attach_permitted()
    }

    fn reaches_boards(&self, remote: u32) -> bool {
        remote < self.size
    }
}
