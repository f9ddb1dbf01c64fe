//! The in-process link: ranks that are threads of one process.
//!
//! Each end owns a mailbox of three counters (acks, data signals, completed
//! transfers) that only the peer increments and only the owner reads, each on
//! its own 128-byte line. A transfer is a direct copy into the peer's buffer
//! followed by a release-increment of its `done` counter: single copy, no
//! intermediate queue.

mod component;

pub use component::{InProcRendezvous, InProcTransport, IN_PROCESS_SCORE};

use super::write_based::{self, Counter, Counters, Taken, WriteBased};
use super::{Link, LinkOp, LinkOpState, OpDesc};
use crate::error::{HcclError, Result};
use crate::mem::{DeviceMem, MemKind};
use crate::sync::{Arc, AtomicBool, EventCount, Mutex, Ordering};
use std::task::Poll;

#[derive(Debug, Default)]
struct Mailbox {
    counters: Counters,
    aborted: AtomicBool,
    reason: Mutex<String>,
    descs: Mutex<std::collections::VecDeque<OpDesc>>,
}

/// What one side contributes to an in-process link: its rank, the buffers a
/// peer may address, and the event count that wakes its stream driver.
#[derive(Clone, Debug)]
pub struct InProcEndpoint {
    /// The rank.
    pub rank: u32,
    /// Buffers the peer may write, by kind.
    pub mems: Vec<(MemKind, DeviceMem)>,
    /// Wakes this rank's device driver.
    pub waker: Arc<EventCount>,
    /// This rank's board area ([`BOARD_BYTES`](super::BOARD_BYTES) bytes,
    /// e.g. from [`InProcEndpoint::new_board`]); `None`: kernels that need
    /// boards (AIV) are not offered.
    pub board: Option<DeviceMem>,
}

impl InProcEndpoint {
    /// A fresh, zeroed board area.
    pub fn new_board() -> Result<DeviceMem> {
        DeviceMem::alloc(super::BOARD_BYTES)
    }
}

/// One end of an in-process link.
#[derive(Debug)]
pub struct InProcLink {
    local: u32,
    remote: u32,
    mine: Arc<Mailbox>,
    theirs: Arc<Mailbox>,
    remote_mems: [Option<DeviceMem>; 5],
    peer_waker: Arc<EventCount>,
    own_waker: Arc<EventCount>,
    taken: Taken,
    /// (own, peer's) AIV boards, when both ends have one.
    boards: Option<(DeviceMem, DeviceMem)>,
}

impl InProcLink {
    /// Connects two endpoints; returns (a's end, b's end).
    pub fn pair(a: &InProcEndpoint, b: &InProcEndpoint) -> (InProcLink, InProcLink) {
        let ma = Arc::new(Mailbox::default());
        let mb = Arc::new(Mailbox::default());
        let end = |me: &InProcEndpoint,
                   peer: &InProcEndpoint,
                   mine: &Arc<Mailbox>,
                   theirs: &Arc<Mailbox>| {
            let mut remote_mems: [Option<DeviceMem>; 5] = Default::default();
            for (k, m) in &peer.mems {
                remote_mems[k.index()] = Some(m.clone());
            }
            InProcLink {
                local: me.rank,
                remote: peer.rank,
                mine: mine.clone(),
                theirs: theirs.clone(),
                remote_mems,
                peer_waker: peer.waker.clone(),
                own_waker: me.waker.clone(),
                taken: Taken::default(),
                boards: me.board.clone().zip(peer.board.clone()),
            }
        };
        (end(a, b, &ma, &mb), end(b, a, &mb, &ma))
    }

    fn check_aborted(&self) -> Result<()> {
        if self.mine.aborted.load(Ordering::Acquire) {
            let reason = self
                .mine
                .reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default();
            return Err(HcclError::remote(reason).peer(self.remote));
        }
        Ok(())
    }
}

impl WriteBased for InProcLink {
    fn raise(&self, c: Counter) {
        self.theirs.counters.raise(c);
        self.peer_waker.notify();
    }

    fn raised(&self, c: Counter) -> u64 {
        self.mine.counters.raised(c)
    }

    fn remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<DeviceMem> {
        self.remote_mems[kind.index()]
            .as_ref()
            .ok_or_else(|| {
                HcclError::internal(format!("peer's {kind} buffer is not bound to this link"))
            })?
            .range(offset, len)
    }

    // descriptors arrive in order: a queue serves them
    fn put_desc(&self, _n: u64, d: &OpDesc) {
        self.theirs
            .descs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(*d);
    }

    fn get_desc(&self, _n: u64) -> Option<OpDesc> {
        self.mine
            .descs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn check(&self) -> Result<()> {
        self.check_aborted()
    }

    fn local(&self) -> u32 {
        self.local
    }

    fn peer(&self) -> u32 {
        self.remote
    }

    fn peer_pid(&self) -> u32 {
        crate::mem::cma::own_pid()
    }

    fn maps_peer_param(&self) -> bool {
        true
    }
}

impl Link for InProcLink {
    fn local_rank(&self) -> u32 {
        self.local
    }
    fn remote_rank(&self) -> u32 {
        self.remote
    }
    fn transport(&self) -> &'static str {
        "in-process"
    }
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        match kind {
            // the peer's user buffers of the op, when mapped: their
            // lengths come with each op (checked when the transfer runs)
            MemKind::ParamInput | MemKind::ParamOutput => Some(usize::MAX),
            _ => self.remote_mems[kind.index()].as_ref().map(DeviceMem::len),
        }
    }

    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        write_based::poll(self, &self.taken, op, state)
    }

    fn boards(&self) -> Option<(DeviceMem, DeviceMem)> {
        self.boards.clone()
    }

    fn wake_peer(&self) {
        self.peer_waker.notify();
    }

    fn abort(&self, reason: &str) {
        if let Ok(mut r) = self.theirs.reason.lock() {
            if r.is_empty() {
                *r = crate::link::relayed_failure(self.local, reason);
            }
        }
        self.theirs.aborted.store(true, Ordering::Release);
        self.peer_waker.notify();
    }

    fn shutdown(&self, reason: &str) {
        if let Ok(mut r) = self.mine.reason.lock() {
            if r.is_empty() {
                *r = format!("communicator aborted on rank {}: {reason}", self.local);
            }
        }
        self.mine.aborted.store(true, Ordering::Release);
        self.own_waker.notify();
        self.abort(reason);
    }

    fn health(&self) -> Result<()> {
        self.check_aborted()
    }

    fn reads_peer_param(&self) -> bool {
        crate::mem::cma::permitted()
    }

    fn maps_peer_param(&self) -> bool {
        true
    }
}
