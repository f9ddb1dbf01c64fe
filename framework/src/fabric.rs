//! The fabric: how a rank gets a link to a peer, from the transport
//! components (`hccl_platform::transport`) its communicator opened.
//!
//! It holds the opened contexts (with their scores after tuning) and what
//! every peer published; for each link it asks [`choose`] which component
//! carries it — from facts both ends share (the components both opened,
//! whether they share a host or a process, the op's size), so both ends
//! pick alike without talking — and has that context connect. It never
//! names a link type.

use crate::bootstrap::RankInfo;
use hccl_platform::transport::{
    choose, component_id, unpack_addresses, Level, PeerInfo, Placement, Reach, ScoreMap, Transport,
    TransportContext, TransportOrder,
};
use hccl_platform::{HcclError, LinkHandle, Result};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Message size at which [`Fabric::transport_to`] reports a link's
/// transport for the init log (a mid-sized op).
const REPORT_BYTES: u64 = 64 * 1024;
/// Size at which the AIV kernels (small ops) are judged reachable.
const BOARD_BYTES_HINT: u64 = 8;
/// Size at which direct reads of peers' buffers (medium and large ops)
/// are judged possible.
const DIRECT_BYTES_HINT: u64 = 1 << 20;

/// A component this rank opened.
#[derive(Debug)]
pub(crate) struct Opened {
    pub component: Arc<dyn Transport>,
    pub context: Arc<dyn TransportContext>,
    pub scores: ScoreMap,
}

impl Opened {
    fn name(&self) -> &'static str {
        self.component.name()
    }
}

/// What this rank knows of one rank of the communicator.
#[derive(Debug, Clone)]
pub(crate) struct PeerRecord {
    pub rank: u32,
    /// The host's name, for messages.
    pub host: String,
    pub same_host: bool,
    pub same_process: bool,
    /// Its TCP listener, if it has one (diagnostics).
    pub link_addr: Option<SocketAddr>,
    /// The address bytes it published, by component id.
    pub addresses: HashMap<u32, Vec<u8>>,
}

impl PeerRecord {
    /// A peer from its rank info; `my_host` is this rank's host id.
    pub(crate) fn from_info(info: &RankInfo, my_host: &str) -> Result<PeerRecord> {
        let mut addresses: HashMap<u32, Vec<u8>> = unpack_addresses(&info.transports)
            .map_err(|e| e.peer(info.rank))?
            .into_iter()
            .map(|(id, b)| (id, b.to_vec()))
            .collect();
        // a rank table names only TCP listeners
        addresses
            .entry(component_id("tcp"))
            .or_insert_with(|| hccl_platform::encode_tcp_address(info.link_addr));
        Ok(PeerRecord {
            rank: info.rank,
            host: host_name(info).to_owned(),
            same_host: info.host_id == my_host,
            same_process: false,
            link_addr: Some(info.link_addr),
            addresses,
        })
    }
}

/// Links for one rank of a communicator.
#[derive(Debug)]
pub(crate) struct Fabric {
    rank: u32,
    order: TransportOrder,
    opened: Vec<Opened>,
    /// By rank (this rank's own record included).
    peers: Vec<PeerRecord>,
}

impl Fabric {
    /// A fabric over the `opened` components for `rank`, whose peers are
    /// `peers` (indexed by rank).
    pub(crate) fn new(
        rank: u32,
        order: TransportOrder,
        opened: Vec<Opened>,
        peers: Vec<PeerRecord>,
    ) -> Fabric {
        Fabric {
            rank,
            order,
            opened,
            peers,
        }
    }

    /// The peer as component `o` sees it.
    fn info<'a>(&self, o: &Opened, p: &'a PeerRecord) -> PeerInfo<'a> {
        PeerInfo {
            rank: p.rank,
            same_process: p.same_process,
            same_host: p.same_host,
            host: &p.host,
            address: p.addresses.get(&component_id(o.name())).map(Vec::as_slice),
        }
    }

    fn peer(&self, remote: u32) -> Result<&PeerRecord> {
        self.peers
            .get(remote as usize)
            .filter(|_| remote != self.rank)
            .ok_or_else(|| {
                HcclError::para(format!(
                    "peer rank {remote} is out of range for {} ranks (or is this rank)",
                    self.peers.len()
                ))
            })
    }

    /// Every other rank as each opened component sees it: what
    /// [`TransportContext::prepare`] is given.
    pub(crate) fn prepare(&self, placement: Placement) -> Result<()> {
        for o in &self.opened {
            let infos: Vec<PeerInfo<'_>> = self
                .peers
                .iter()
                .filter(|p| p.rank != self.rank)
                .map(|p| self.info(o, p))
                .collect();
            o.context
                .prepare(placement, &infos)
                .map_err(|e| e.during(format!("preparing transport {}", o.name())))?;
        }
        Ok(())
    }

    /// The index of the component that carries a link to `remote` for an
    /// op of `bytes`.
    fn pick(&self, remote: u32, bytes: u64) -> Result<usize> {
        let p = self.peer(remote)?;
        let level = if p.same_host {
            Level::Intra
        } else {
            Level::Inter
        };
        let candidates: Vec<(&str, u32)> = self
            .opened
            .iter()
            .filter(|o| reaches(o, p) && o.context.can_connect(&self.info(o, p)))
            .map(|o| (o.name(), o.scores.score(level, bytes)))
            .collect();
        let name = choose(&self.order, &candidates).ok_or_else(|| {
            let opened: Vec<&str> = self.opened.iter().map(Opened::name).collect();
            HcclError::not_support(format!(
                "no transport reaches rank {remote} ({}) for a {bytes}-byte op at level {}: \
                 opened here {}; usable for that peer {} (HCCL_RS_TRANSPORT={})",
                p.host,
                level.index(),
                if opened.is_empty() {
                    "none".to_owned()
                } else {
                    opened.join(", ")
                },
                if candidates.is_empty() {
                    "none".to_owned()
                } else {
                    candidates
                        .iter()
                        .map(|(n, s)| format!("{n} (score {s})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                match &self.order {
                    TransportOrder::Auto => "auto".to_owned(),
                    TransportOrder::List(l) => l.join(","),
                }
            ))
            .rank(self.rank)
            .peer(remote)
        })?;
        Ok(self
            .opened
            .iter()
            .position(|o| o.name() == name)
            .expect("chosen among the opened"))
    }

    /// The name of the component that carries a link to `remote` for an
    /// op of `bytes`.
    pub(crate) fn transport_for(&self, remote: u32, bytes: u64) -> Result<&'static str> {
        Ok(self.opened[self.pick(remote, bytes)?].name())
    }

    /// This rank's end of a link to `remote` over the component `name`,
    /// waiting up to `timeout` for a late peer.
    pub(crate) fn link(&self, remote: u32, name: &str, timeout: Duration) -> Result<LinkHandle> {
        let p = self.peer(remote)?;
        let o = self
            .opened
            .iter()
            .find(|o| o.name() == name)
            .ok_or_else(|| HcclError::internal(format!("transport {name} is not opened")))?;
        o.context
            .connect(&self.info(o, p), timeout)
            .map_err(|e| e.during(format!("connecting over {name}")))
    }

    fn context_for(&self, remote: u32, bytes: u64) -> Option<(&Opened, PeerInfo<'_>)> {
        let i = self.pick(remote, bytes).ok()?;
        let o = &self.opened[i];
        Some((o, self.info(o, self.peer(remote).ok()?)))
    }

    /// Whether the link to `remote` for medium and large ops will read the
    /// peer's user buffers: the selector offers the direct-read executors
    /// only when every link can.
    pub(crate) fn reads_peer_param(&self, remote: u32) -> bool {
        self.context_for(remote, DIRECT_BYTES_HINT)
            .is_some_and(|(o, p)| {
                o.component.capabilities().reads_peer_buffers && o.context.reads_peer_param(&p)
            })
    }

    /// Whether the link to `remote` for small ops will reach the AIV
    /// boards: the selector offers the AIV executors only when every link
    /// will.
    pub(crate) fn reaches_boards(&self, remote: u32) -> bool {
        self.context_for(remote, BOARD_BYTES_HINT)
            .is_some_and(|(o, p)| {
                o.component.capabilities().board_memory && o.context.reaches_boards(&p)
            })
    }

    /// Every rank's TCP listener, by rank (empty when ranks are threads of
    /// one process).
    pub(crate) fn listeners(&self) -> Vec<SocketAddr> {
        if self.peers.iter().any(|p| p.link_addr.is_none()) {
            return Vec::new();
        }
        self.peers.iter().filter_map(|p| p.link_addr).collect()
    }

    /// The transport a mid-sized op's link to `remote` uses, for the init
    /// log.
    pub(crate) fn transport_to(&self, remote: u32) -> &'static str {
        self.transport_for(remote, REPORT_BYTES)
            .unwrap_or("unreachable")
    }

    /// How many peers a mid-sized op reaches over each component, for
    /// logs (`shm_peers=`, ...).
    pub(crate) fn peers_by_transport(&self) -> std::collections::BTreeMap<&'static str, u32> {
        let mut m = std::collections::BTreeMap::new();
        for p in self.peers.iter().filter(|p| p.rank != self.rank) {
            if let Ok(t) = self.transport_for(p.rank, REPORT_BYTES) {
                *m.entry(t).or_default() += 1;
            }
        }
        m
    }

    /// Every rank's host name, by rank (empty when ranks are threads of
    /// one process).
    pub(crate) fn host_names(&self) -> Vec<String> {
        if self.peers.iter().any(|p| p.same_process) {
            return Vec::new();
        }
        self.peers.iter().map(|p| p.host.clone()).collect()
    }
}

/// Whether `o`'s declared reach covers the peer `p` (a component that
/// reaches only its own host is never asked about a peer on another).
fn reaches(o: &Opened, p: &PeerRecord) -> bool {
    match o.component.capabilities().reach {
        Reach::SameProcess => p.same_process,
        Reach::SameHost => p.same_host,
        Reach::AnyHost => true,
    }
}

/// A rank's host for messages: the host id's name part (a host id is
/// `hostname[:netns]/boot id/net:inode`, or what `HCCL_RS_HOST_ID` declares).
pub(crate) fn host_name(info: &RankInfo) -> &str {
    info.host_id.split('/').next().unwrap_or(&info.host_id)
}
