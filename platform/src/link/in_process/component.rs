//! The in-process transport as a component: ranks that are threads of one
//! group meet at an [`InProcRendezvous`].
//!
//! Each rank publishes an endpoint (its buffers, its driver's waker, its
//! board) when its context opens. Links are made lazily: the first of two
//! ranks to ask for a link between them creates both ends and parks the
//! peer's end until the peer asks for it.

use super::{InProcEndpoint, InProcLink};
use crate::error::{HcclError, Result};
use crate::link::LinkHandle;
use crate::mem::MemKind;
use crate::transport::{
    Capabilities, ContextSetup, PeerInfo, Reach, ScoreMap, Transport, TransportContext,
};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    endpoints: Vec<Option<Arc<InProcEndpoint>>>,
    /// Ends created by one rank and not yet collected by the other, keyed
    /// by (lower rank, higher rank, collecting rank).
    parked: HashMap<(u32, u32, u32), LinkHandle>,
}

/// Where the ranks of one thread group find each other.
pub struct InProcRendezvous {
    size: u32,
    state: Mutex<State>,
    joined: Condvar,
}

impl std::fmt::Debug for InProcRendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcRendezvous")
            .field("size", &self.size)
            .finish()
    }
}

impl InProcRendezvous {
    /// A rendezvous for `size` ranks.
    pub fn new(size: u32) -> Arc<Self> {
        Arc::new(InProcRendezvous {
            size,
            state: Mutex::new(State {
                endpoints: vec![None; size as usize],
                parked: HashMap::new(),
            }),
            joined: Condvar::new(),
        })
    }

    /// The group's size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Publishes `ep` (once per rank).
    pub fn publish(&self, ep: InProcEndpoint) -> Result<()> {
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
        *slot = Some(Arc::new(ep));
        self.joined.notify_all();
        Ok(())
    }

    /// `local`'s end of the link to `remote`, waiting up to `timeout` for
    /// `remote` to join.
    pub fn link(&self, local: u32, remote: u32, timeout: Duration) -> Result<LinkHandle> {
        if remote >= self.size {
            return Err(HcclError::para(format!(
                "peer rank {remote} is out of range for {} ranks",
                self.size
            )));
        }
        let key = (local.min(remote), local.max(remote));
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.endpoints[remote as usize].is_none() {
            let now = Instant::now();
            if now >= deadline {
                return Err(HcclError::timeout(format!(
                    "rank {remote} did not join the group within {}s (HCCL_CONNECT_TIMEOUT)",
                    timeout.as_secs_f64()
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
        if let Some(end) = st.parked.remove(&(key.0, key.1, local)) {
            return Ok(end);
        }
        let ep = |r: u32| {
            st.endpoints
                .get(r as usize)
                .and_then(|e| e.clone())
                .ok_or_else(|| HcclError::internal(format!("rank {r} has not joined the group")))
        };
        let (a, b) = (ep(local)?, ep(remote)?);
        let (mine, theirs) = InProcLink::pair_shared(&a, &b);
        st.parked.insert(
            (key.0, key.1, remote),
            LinkHandle::new(crate::sync::Arc::new(theirs)),
        );
        Ok(LinkHandle::new(crate::sync::Arc::new(mine)))
    }
}

/// The in-process component (`"in-process"`): threads of one group, a
/// single copy into the peer's buffer.
#[derive(Debug)]
pub struct InProcTransport;

/// Default score: above everything, as nothing is cheaper than a store.
pub const IN_PROCESS_SCORE: u32 = 60;

impl Transport for InProcTransport {
    fn name(&self) -> &'static str {
        "in-process"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reach: Reach::SameProcess,
            board_memory: true,
            maps_peer_memory: true,
            reads_peer_buffers: true,
            one_sided: true,
            registered_memory: true,
        }
    }

    fn default_scores(&self) -> ScoreMap {
        ScoreMap::uniform(IN_PROCESS_SCORE)
    }

    fn open(
        &self,
        setup: &ContextSetup,
        explicit: bool,
    ) -> Result<Option<Arc<dyn TransportContext>>> {
        let Some(rv) = &setup.in_process else {
            return if explicit {
                Err(HcclError::not_support(
                    "transport in-process: this rank is not a thread of an in-process group",
                ))
            } else {
                Ok(None)
            };
        };
        rv.publish(InProcEndpoint {
            rank: setup.rank,
            mems: vec![
                (MemKind::CclInput, setup.ccl.0.clone()),
                (MemKind::CclOutput, setup.ccl.1.clone()),
            ],
            waker: setup.device.waker(),
            board: Some(InProcEndpoint::new_board()?),
        })?;
        Ok(Some(Arc::new(InProcContext {
            rank: setup.rank,
            rendezvous: rv.clone(),
        })))
    }
}

#[derive(Debug)]
struct InProcContext {
    rank: u32,
    rendezvous: Arc<InProcRendezvous>,
}

impl TransportContext for InProcContext {
    fn address(&self) -> Vec<u8> {
        Vec::new()
    }

    fn can_connect(&self, peer: &PeerInfo<'_>) -> bool {
        peer.same_process && peer.rank < self.rendezvous.size()
    }

    fn connect(&self, peer: &PeerInfo<'_>, timeout: Duration) -> Result<LinkHandle> {
        self.rendezvous.link(self.rank, peer.rank, timeout)
    }

    fn reads_peer_param(&self, peer: &PeerInfo<'_>) -> bool {
        self.can_connect(peer) && crate::mem::cma::permitted()
    }

    fn reaches_boards(&self, peer: &PeerInfo<'_>) -> bool {
        self.can_connect(peer)
    }
}
