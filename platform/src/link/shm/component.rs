//! The shared-memory transport as a component (`"shm"`): processes of one
//! host map each other's segments (mailboxes, boards, CCL buffers).
//!
//! The segment itself is made before the rank's device (the device parks
//! on the segment's event count and the CCL buffers live in it), so the
//! context is handed the segment and publishes its name as its address.
//! Once every rank's address is known, [`TransportContext::prepare`] maps
//! the segments of the host's peers, watches their processes (a pidfd
//! each) and unlinks this rank's own name once every local peer has
//! mapped it, so nothing is left in `/dev/shm` whatever happens later.

use super::{ShmLink, ShmSegment};
use crate::error::{HcclError, Result};
use crate::link::{LinkHandle, PeerProcess};
use crate::stream::Device;
use crate::sync::{Arc, EventCount};
use crate::transport::{
    Capabilities, ContextSetup, PeerInfo, Placement, Reach, ScoreMap, Transport, TransportContext,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shared-memory component.
#[derive(Debug)]
pub struct ShmTransport;

/// Default score: the best between processes of one host.
pub const SHM_SCORE: u32 = 50;

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reach: Reach::SameHost,
            board_memory: true,
            maps_peer_memory: true,
            reads_peer_buffers: true,
            one_sided: true,
            registered_memory: true,
        }
    }

    fn default_scores(&self) -> ScoreMap {
        ScoreMap::uniform(SHM_SCORE)
    }

    fn open(
        &self,
        setup: &ContextSetup,
        explicit: bool,
    ) -> Result<Option<Arc<dyn TransportContext>>> {
        let Some((segment, waker)) = &setup.segment else {
            return if explicit {
                Err(HcclError::not_support(
                    "transport shm: this rank has no shared-memory segment (ranks that are threads \
                     use in-process links; a rank table's ranks use the network)",
                ))
            } else {
                Ok(None)
            };
        };
        Ok(Some(Arc::new(ShmContext {
            rank: setup.rank,
            device: setup.device.clone(),
            mine: segment.clone(),
            waker: waker.clone(),
            connect_timeout: setup.connect_timeout,
            peers: Mutex::new(HashMap::new()),
        })))
    }
}

#[derive(Debug)]
struct MappedPeer {
    segment: ShmSegment,
    waker: Arc<EventCount>,
    process: Arc<PeerProcess>,
}

#[derive(Debug)]
struct ShmContext {
    rank: u32,
    device: Device,
    mine: ShmSegment,
    waker: Arc<EventCount>,
    connect_timeout: Duration,
    peers: Mutex<HashMap<u32, MappedPeer>>,
}

impl TransportContext for ShmContext {
    fn address(&self) -> Vec<u8> {
        self.mine.name().as_bytes().to_vec()
    }

    fn prepare(&self, _placement: Placement, peers: &[PeerInfo<'_>]) -> Result<()> {
        let mut mapped = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let locals: Vec<&PeerInfo<'_>> = peers
            .iter()
            .filter(|p| p.same_host && p.address.is_some_and(|a| !a.is_empty()))
            .collect();
        for p in &locals {
            let name = std::str::from_utf8(p.address.expect("filtered")).map_err(|_| {
                HcclError::para(format!(
                    "rank {}'s shared-memory address is not a name",
                    p.rank
                ))
            })?;
            let segment = ShmSegment::open(name).map_err(|e| {
                e.rank(self.rank)
                    .peer(p.rank)
                    .during("mapping a local peer's segment")
            })?;
            segment.mark_mapped();
            let waker = Arc::new(segment.waker()?);
            // watched from now on: a peer that dies is noticed by its pidfd
            let process = Arc::new(PeerProcess::new(p.rank, segment.owner_pid(), p.host));
            self.device.watch_peer(process.clone());
            mapped.insert(
                p.rank,
                MappedPeer {
                    segment,
                    waker,
                    process,
                },
            );
        }
        let deadline = Instant::now() + self.connect_timeout;
        while (self.mine.mapped() as usize) < locals.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.mine.unlink();
        Ok(())
    }

    fn can_connect(&self, peer: &PeerInfo<'_>) -> bool {
        peer.same_host
            && self
                .peers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&peer.rank)
    }

    fn connect(&self, peer: &PeerInfo<'_>, _timeout: Duration) -> Result<LinkHandle> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let p = peers.get(&peer.rank).ok_or_else(|| {
            HcclError::internal(format!(
                "transport shm: rank {}'s segment is not mapped here",
                peer.rank
            ))
        })?;
        let link = ShmLink::new(
            self.rank,
            self.mine.clone(),
            self.waker.clone(),
            peer.rank,
            p.segment.clone(),
            p.waker.clone(),
        )?
        .with_peer_process(p.process.clone());
        Ok(LinkHandle::new(Arc::new(link)))
    }

    fn reads_peer_param(&self, peer: &PeerInfo<'_>) -> bool {
        self.can_connect(peer) && crate::mem::cma::permitted()
    }

    fn reaches_boards(&self, peer: &PeerInfo<'_>) -> bool {
        self.can_connect(peer)
    }
}
