//! The in-process link: ranks that are threads of one process.
//!
//! Each end owns a mailbox of four counters (acks, data signals, completed
//! transfers, descriptors) that only the peer increments and only the owner
//! reads, on a 128-byte line of their own. A transfer is a direct copy into the peer's buffer
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

/// One end's mailbox: on 128-byte lines of its own, so the peer raising
/// this end's counters never shares a line with this end raising the
/// peer's (the two mailboxes of a link sit side by side).
#[repr(align(128))]
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
///
/// Small, as a simulated mesh keeps a million of them: both ends share one
/// allocation holding the two mailboxes, and each end points at the two
/// endpoints (shared by every link of the rank) rather than copying their
/// buffer handles.
#[derive(Debug)]
pub struct InProcLink {
    /// Both ends' mailboxes; this end's is `mailboxes[side]`.
    mailboxes: Arc<[Mailbox; 2]>,
    side: usize,
    me: Arc<InProcEndpoint>,
    peer: Arc<InProcEndpoint>,
    taken: Taken,
}

impl InProcLink {
    /// Connects two endpoints; returns (a's end, b's end).
    pub fn pair(a: &InProcEndpoint, b: &InProcEndpoint) -> (InProcLink, InProcLink) {
        Self::pair_shared(&Arc::new(a.clone()), &Arc::new(b.clone()))
    }

    /// Connects two endpoints that many links share (a rank's endpoint
    /// serves every link of the rank); returns (a's end, b's end).
    pub fn pair_shared(
        a: &Arc<InProcEndpoint>,
        b: &Arc<InProcEndpoint>,
    ) -> (InProcLink, InProcLink) {
        let mailboxes = Arc::new(<[Mailbox; 2]>::default());
        let end = |side: usize, me: &Arc<InProcEndpoint>, peer: &Arc<InProcEndpoint>| InProcLink {
            mailboxes: mailboxes.clone(),
            side,
            me: me.clone(),
            peer: peer.clone(),
            taken: Taken::default(),
        };
        (end(0, a, b), end(1, b, a))
    }

    /// The mailbox the peer raises counters in.
    fn mine(&self) -> &Mailbox {
        &self.mailboxes[self.side]
    }

    /// The peer's mailbox.
    fn theirs(&self) -> &Mailbox {
        &self.mailboxes[1 - self.side]
    }

    fn check_aborted(&self) -> Result<()> {
        let mine = self.mine();
        if mine.aborted.load(Ordering::Acquire) {
            let reason = mine.reason.lock().map(|r| r.clone()).unwrap_or_default();
            return Err(HcclError::remote(reason).peer(self.peer.rank));
        }
        Ok(())
    }

    /// The peer's buffer of `kind`, if it offered one.
    fn remote_mem(&self, kind: MemKind) -> Option<&DeviceMem> {
        // the last entry of a kind wins, as a later binding replaces one
        self.peer
            .mems
            .iter()
            .rev()
            .find(|(k, _)| *k == kind)
            .map(|(_, m)| m)
    }
}

impl WriteBased for InProcLink {
    fn raise(&self, c: Counter) {
        self.theirs().counters.raise(c);
        self.peer.waker.notify();
    }

    fn raised(&self, c: Counter) -> u64 {
        self.mine().counters.raised(c)
    }

    fn remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<DeviceMem> {
        self.remote_mem(kind)
            .ok_or_else(|| {
                HcclError::internal(format!("peer's {kind} buffer is not bound to this link"))
            })?
            .range(offset, len)
    }

    // descriptors arrive in order: a queue serves them
    fn put_desc(&self, _n: u64, d: &OpDesc) {
        self.theirs()
            .descs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(*d);
    }

    fn get_desc(&self, _n: u64) -> Option<OpDesc> {
        self.mine()
            .descs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn check(&self) -> Result<()> {
        self.check_aborted()
    }

    fn local(&self) -> u32 {
        self.me.rank
    }

    fn peer(&self) -> u32 {
        self.peer.rank
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
        self.me.rank
    }
    fn remote_rank(&self) -> u32 {
        self.peer.rank
    }
    fn transport(&self) -> &'static str {
        "in-process"
    }
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        match kind {
            // the peer's user buffers of the op, when mapped: their
            // lengths come with each op (checked when the transfer runs)
            MemKind::ParamInput | MemKind::ParamOutput => Some(usize::MAX),
            _ => self.remote_mem(kind).map(DeviceMem::len),
        }
    }

    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        write_based::poll(self, &self.taken, op, state)
    }

    fn boards(&self) -> Option<(DeviceMem, DeviceMem)> {
        self.me.board.clone().zip(self.peer.board.clone())
    }

    fn wake_peer(&self) {
        self.peer.waker.notify();
    }

    fn abort(&self, reason: &str) {
        let theirs = self.theirs();
        if let Ok(mut r) = theirs.reason.lock() {
            if r.is_empty() {
                *r = crate::link::relayed_failure(self.me.rank, reason);
            }
        }
        theirs.aborted.store(true, Ordering::Release);
        self.peer.waker.notify();
    }

    fn shutdown(&self, reason: &str) {
        let mine = self.mine();
        if let Ok(mut r) = mine.reason.lock() {
            if r.is_empty() {
                *r = format!("communicator aborted on rank {}: {reason}", self.me.rank);
            }
        }
        mine.aborted.store(true, Ordering::Release);
        self.me.waker.notify();
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
#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated mesh of 1,024 ranks keeps a million ends: a field added
    /// to an end, or a mailbox grown past its line, shows in its memory.
    #[test]
    fn a_link_end_stays_small() {
        assert_eq!(std::mem::size_of::<Mailbox>(), 128);
        assert_eq!(std::mem::align_of::<Mailbox>(), 128);
        assert!(
            std::mem::size_of::<InProcLink>() <= 128,
            "{} bytes",
            std::mem::size_of::<InProcLink>()
        );
    }

    #[test]
    fn ends_share_their_endpoints_and_see_each_others_buffers() {
        let ep = |rank: u32, len: usize| {
            Arc::new(InProcEndpoint {
                rank,
                mems: vec![(MemKind::CclInput, DeviceMem::alloc(len).unwrap())],
                waker: Arc::new(EventCount::new()),
                board: None,
            })
        };
        let (a, b) = (ep(0, 64), ep(1, 128));
        let (x, y) = InProcLink::pair_shared(&a, &b);
        assert_eq!((x.local_rank(), x.remote_rank()), (0, 1));
        assert_eq!((y.local_rank(), y.remote_rank()), (1, 0));
        assert_eq!(x.remote_mem_len(MemKind::CclInput), Some(128));
        assert_eq!(y.remote_mem_len(MemKind::CclInput), Some(64));
        assert_eq!(x.remote_mem_len(MemKind::CclOutput), None);
        assert!(x.boards().is_none(), "no boards offered");
        // each end's raise lands in the other's mailbox only
        x.raise(Counter::Done);
        assert_eq!((y.raised(Counter::Done), x.raised(Counter::Done)), (1, 0));
        // one allocation per endpoint, however many links
        assert_eq!(Arc::strong_count(&a), 3);
    }
}
