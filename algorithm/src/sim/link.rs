//! The simulator's link: an in-process link that also counts bytes and
//! carries logical time, so the simulator can report traffic per link and
//! the number of communication steps on the critical path.

use hccl_platform::link::{InProcLink, Link, LinkOp, LinkOpState};
use hccl_platform::{MemKind, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

/// Logical time of one rank: the number of data hand-offs on the longest
/// chain that ends at this rank. Control signals (acks) carry the sender's
/// time without adding to it, so a sender that must wait for a receiver's
/// ack inherits the receiver's progress: op-base rounds count as steps.
pub(crate) type Clock = Arc<AtomicU64>;

/// Arrival times of transfers into one rank from one peer, in order.
pub(crate) type Arrivals = Arc<Mutex<VecDeque<u64>>>;

/// One end of a simulated link.
#[derive(Debug)]
pub(crate) struct SimLink {
    inner: InProcLink,
    local_clock: Clock,
    /// Transfers this end sent, arriving at the peer (the peer pops them).
    outgoing: Arrivals,
    /// Transfers the peer sent to this end.
    incoming: Arrivals,
    /// Acks this end sent (the peer pops them).
    outgoing_ctl: Arrivals,
    /// Acks the peer sent to this end.
    incoming_ctl: Arrivals,
    pub(crate) bytes: AtomicU64,
    pub(crate) transfers: AtomicU64,
}

impl SimLink {
    pub(crate) fn new(
        inner: InProcLink,
        local_clock: Clock,
        (outgoing, incoming): (Arrivals, Arrivals),
        (outgoing_ctl, incoming_ctl): (Arrivals, Arrivals),
    ) -> Self {
        SimLink {
            inner,
            local_clock,
            outgoing,
            incoming,
            outgoing_ctl,
            incoming_ctl,
            bytes: AtomicU64::new(0),
            transfers: AtomicU64::new(0),
        }
    }
}

impl SimLink {
    fn arrive(&self, from: &Arrivals) {
        if let Some(t) = from.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
            self.local_clock.fetch_max(t, Ordering::Relaxed);
        }
    }
}

impl Link for SimLink {
    fn local_rank(&self) -> u32 {
        self.inner.local_rank()
    }
    fn remote_rank(&self) -> u32 {
        self.inner.remote_rank()
    }
    fn transport(&self) -> &'static str {
        "simulated"
    }
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        self.inner.remote_mem_len(kind)
    }
    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        let r = self.inner.poll(op, state);
        if let Poll::Ready(Ok(())) = r {
            match op {
                LinkOp::TxAsync { .. } | LinkOp::TxWithReduce { .. } => {
                    self.bytes.fetch_add(op.bytes() as u64, Ordering::Relaxed);
                    self.transfers.fetch_add(1, Ordering::Relaxed);
                    let t = self.local_clock.load(Ordering::Relaxed) + 1;
                    self.outgoing
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(t);
                }
                LinkOp::RxWaitDone => self.arrive(&self.incoming),
                LinkOp::TxAck => {
                    let t = self.local_clock.load(Ordering::Relaxed);
                    self.outgoing_ctl
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(t);
                }
                LinkOp::RxAck => self.arrive(&self.incoming_ctl),
                _ => {}
            }
        }
        r
    }
    fn abort(&self, reason: &str) {
        self.inner.abort(reason)
    }
    fn shutdown(&self, reason: &str) {
        self.inner.shutdown(reason)
    }
    fn health(&self) -> Result<()> {
        self.inner.health()
    }
}
