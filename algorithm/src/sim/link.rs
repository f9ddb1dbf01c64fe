//! The simulator's link: an in-process link that also counts bytes and
//! carries logical time, so the simulator can report traffic per link and
//! the number of communication steps on the critical path.

use crate::topo::CommPlane;
use hccl_platform::link::{InProcLink, Link, LinkOp, LinkOpState};
use hccl_platform::{DeviceMem, MemKind, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

/// Logical time: the number of data hand-offs on the longest chain that
/// ends here, and how many of them went over each plane (so a two-level
/// plan's critical path can be split into its level-0 and level-1 steps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// Hand-offs on the chain.
    pub total: u64,
    /// Of those, per plane (`CommPlane as usize`).
    pub planes: [u64; CommPlane::COUNT],
}

impl Stamp {
    /// Moves to `other` if its chain is longer: the later of two events
    /// inherits the longer chain (and its per-plane split).
    pub(crate) fn merge(&mut self, other: Stamp) {
        if other.total > self.total {
            *self = other;
        }
    }
}

/// Logical time of one rank (see [`Stamp`]). Control signals (acks) carry
/// the sender's time without adding to it, so a sender that must wait for a
/// receiver's ack inherits the receiver's progress: op-base rounds count as
/// steps.
pub(crate) type Clock = Arc<Mutex<Stamp>>;

/// Arrival times of transfers into one rank from one peer, in order.
pub(crate) type Arrivals = Arc<Mutex<VecDeque<Stamp>>>;

/// One end of a simulated link.
#[derive(Debug)]
pub(crate) struct SimLink {
    inner: InProcLink,
    local_clock: Clock,
    /// The plane the link serves (`CommPlane as usize`).
    plane: usize,
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
        plane: CommPlane,
        (outgoing, incoming): (Arrivals, Arrivals),
        (outgoing_ctl, incoming_ctl): (Arrivals, Arrivals),
    ) -> Self {
        SimLink {
            inner,
            local_clock,
            plane: plane as usize,
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
    fn now(&self) -> std::sync::MutexGuard<'_, Stamp> {
        self.local_clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arrive(&self, from: &Arrivals) {
        if let Some(t) = from.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
            self.now().merge(t);
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
                    let mut t = *self.now();
                    t.total += 1;
                    t.planes[self.plane] += 1;
                    self.outgoing
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(t);
                }
                LinkOp::RxWaitDone => self.arrive(&self.incoming),
                // a read of the peer's buffer is a hand-off that ends here:
                // the peer's progress came with the ack that allowed it
                op if op.is_peer_read() => {
                    self.bytes.fetch_add(op.bytes() as u64, Ordering::Relaxed);
                    self.transfers.fetch_add(1, Ordering::Relaxed);
                    let mut now = self.now();
                    now.total += 1;
                    now.planes[self.plane] += 1;
                }
                LinkOp::TxAck => {
                    let t = *self.now();
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
    fn reads_peer_param(&self) -> bool {
        self.inner.reads_peer_param()
    }
    fn boards(&self) -> Option<(DeviceMem, DeviceMem)> {
        self.inner.boards()
    }
    fn wake_peer(&self) {
        self.inner.wake_peer()
    }
    fn liveness(&self) -> Result<()> {
        self.inner.liveness()
    }
}
