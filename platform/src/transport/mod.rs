//! Transports as components (UCC's transport layers, NCCL's transport
//! table).
//!
//! A transport is registered like an executor: a [`Transport`] (the
//! component, UCC's "lib") says what it is called, what it can reach and
//! offer ([`Capabilities`]) and how good it is per level and message size
//! ([`ScoreMap`]); opened for one rank it becomes a [`TransportContext`]
//! (its resources: listener, device, registered memory) whose address
//! bytes ride in the rank info the bootstrap exchanges, packed by
//! component id ([`address`]); the context then connects links to peers
//! whose address it understands, waiting no longer than the connect
//! timeout for a late peer.
//!
//! The framework picks one component per link ([`select`]): among those
//! both ends opened and that can reach the peer, the highest score at the
//! link's level and the op's size wins (`HCCL_RS_TRANSPORT=auto`), or
//! the first of the user's list that can (`HCCL_RS_TRANSPORT=shm,tcp`).
//! Both ends choose from the same facts, so they agree without talking.
//!
//! Built-ins come from one table ([`registry`]): in-process, shared
//! memory, ibverbs (cargo feature `ibverbs`) and TCP; a user crate adds
//! its own with [`register_transport`].

pub mod address;
pub mod registry;
pub mod score;
pub mod select;

pub use address::{component_id, pack_addresses, unpack_addresses};
pub use registry::{find_transport, register_transport, transports};
pub use score::{ScoreMap, ScoreRange, SCORE_INF};
pub use select::{choose, TransportOrder};

use crate::error::Result;
use crate::link::{LinkHandle, ParkHook, ShmSegment};
use crate::mem::DeviceMem;
use crate::stream::Device;
use crate::sync::{Arc, EventCount};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// How far a transport reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reach {
    /// Ranks that are threads of one process.
    SameProcess,
    /// Ranks that are processes of one host.
    SameHost,
    /// Ranks anywhere the network reaches.
    AnyHost,
}

/// What a transport can do, declared once (UCC's TL attributes, NCCL's
/// net plugin properties). The framework offers executors that need a
/// capability only over links whose transport declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// How far it reaches.
    pub reach: Reach,
    /// It gives kernels the board areas of the host's ranks (AIV).
    pub board_memory: bool,
    /// It maps peers' memory (load/store into a peer's registered buffers).
    pub maps_peer_memory: bool,
    /// It reads peers' user buffers (cross-memory attach).
    pub reads_peer_buffers: bool,
    /// It writes into (or reads from) a peer's memory without the peer's
    /// CPU taking part (RDMA, mapped memory).
    pub one_sided: bool,
    /// It sends from memory registered with it without a staging copy.
    pub registered_memory: bool,
}

/// Which level a link belongs to, as the topology counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Both ranks on one host (HCCL's level 0).
    Intra,
    /// The ranks on different hosts (level 1).
    Inter,
}

impl Level {
    /// HCCL's level number.
    pub fn index(self) -> u32 {
        match self {
            Level::Intra => 0,
            Level::Inter => 1,
        }
    }
}

/// A peer as a context sees it when asked to connect.
#[derive(Clone, Copy, Debug)]
pub struct PeerInfo<'a> {
    /// The peer's rank.
    pub rank: u32,
    /// Whether the peer is a thread of this process.
    pub same_process: bool,
    /// Whether the peer is on this host.
    pub same_host: bool,
    /// The peer's host, for messages.
    pub host: &'a str,
    /// The bytes of address the peer's context of this component
    /// published, if it opened one.
    pub address: Option<&'a [u8]>,
}

impl PeerInfo<'_> {
    /// The link's level.
    pub fn level(&self) -> Level {
        if self.same_host {
            Level::Intra
        } else {
            Level::Inter
        }
    }
}

/// Where a rank sits among the ranks of its machine (known once every
/// rank's info is in): ranks spread over devices as the CPU pinning
/// spreads them over cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// This rank's index among its machine's ranks.
    pub index: u32,
    /// How many ranks its machine runs.
    pub count: u32,
}

/// Transport-specific settings, by the environment variable names they
/// come from (`HCCL_RS_IB_HCA`, ...): a component reads what concerns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportParams(pub Vec<(String, String)>);

impl TransportParams {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The settings of this process's environment whose names start with
    /// `HCCL_RS_` or `HCCL_` (the components pick theirs).
    pub fn from_env() -> TransportParams {
        TransportParams(
            std::env::vars()
                .filter(|(k, _)| k.starts_with("HCCL_"))
                .collect(),
        )
    }
}

/// Everything a component may use to open its context for one rank.
#[derive(Clone, Debug)]
pub struct ContextSetup {
    /// The rank.
    pub rank: u32,
    /// The communicator's size.
    pub size: u32,
    /// The group's unique id: connections present it.
    pub unique_id: [u8; 16],
    /// The rank's device (its waker, its list of watched peers, its park
    /// hooks).
    pub device: Device,
    /// The rank's CCL input and output buffers: where peers write.
    pub ccl: (DeviceMem, DeviceMem),
    /// The address to listen on and advertise to peers.
    pub ip: IpAddr,
    /// The port to listen on (0 = any).
    pub port: u16,
    /// Longest a blocking exchange with a connected peer may take.
    pub io_timeout: Duration,
    /// Longest link set-up waits for a peer (`HCCL_CONNECT_TIMEOUT`).
    pub connect_timeout: Duration,
    /// Sockets per TCP link (`HCCL_RS_SOCKETS_PER_LINK`).
    pub sockets_per_link: usize,
    /// This rank's shared-memory segment, when the rank is a process
    /// whose host peers may map it.
    pub segment: Option<(ShmSegment, Arc<EventCount>)>,
    /// The rendezvous of a group whose ranks are threads of one process.
    pub in_process: Option<Arc<crate::link::InProcRendezvous>>,
    /// Transport-specific settings.
    pub params: TransportParams,
}

/// A transport component (UCC's TL lib): registered once per process,
/// opened once per rank.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Its name (`"shm"`, `"tcp"`, ...): what `HCCL_RS_TRANSPORT` lists
    /// and messages say. Names are unique in the registry.
    fn name(&self) -> &'static str;

    /// What it can reach and offer.
    fn capabilities(&self) -> Capabilities;

    /// Its scores per level and message size before any tuning
    /// (`HCCL_RS_TL_<NAME>_TUNE` adjusts them).
    fn default_scores(&self) -> ScoreMap;

    /// Opens a context for the rank `setup` describes. `Ok(None)`: the
    /// component has nothing to offer this rank (no device, not a thread
    /// group, ...) — with `explicit` (the user asked for it by name) it
    /// returns an error saying why instead.
    fn open(
        &self,
        setup: &ContextSetup,
        explicit: bool,
    ) -> Result<Option<Arc<dyn TransportContext>>>;
}

/// A component opened for one rank: its resources and its address.
pub trait TransportContext: Send + Sync + fmt::Debug {
    /// The bytes peers need to connect to this rank over this component
    /// (carried in the rank info; may be empty).
    fn address(&self) -> Vec<u8>;

    /// Called once every rank's address is known, before any link: a
    /// context maps what it must map, watches what it must watch and
    /// settles what depends on where the rank sits among its machine's
    /// ranks (which device it takes). `peers` holds every other rank.
    fn prepare(&self, _placement: Placement, _peers: &[PeerInfo<'_>]) -> Result<()> {
        Ok(())
    }

    /// Whether a link to `peer` can be made (judged from facts both ends
    /// share, so both answer alike).
    fn can_connect(&self, peer: &PeerInfo<'_>) -> bool;

    /// This rank's end of a link to `peer`, waiting up to `timeout` for a
    /// peer that is late. Calling it again for the same peer returns
    /// another handle to the same connection.
    fn connect(&self, peer: &PeerInfo<'_>, timeout: Duration) -> Result<LinkHandle>;

    /// Whether the link to `peer` will read the peer's user buffers.
    fn reads_peer_param(&self, _peer: &PeerInfo<'_>) -> bool {
        false
    }

    /// Whether the link to `peer` will reach the AIV boards.
    fn reaches_boards(&self, _peer: &PeerInfo<'_>) -> bool {
        false
    }

    /// What the device must tell this context when its driver parks.
    fn park_hook(&self) -> Option<Arc<dyn ParkHook>> {
        None
    }

    /// The TCP listener of this rank, if this context has one (for the
    /// communicator's diagnostics).
    fn listener(&self) -> Option<std::net::SocketAddr> {
        None
    }
}
