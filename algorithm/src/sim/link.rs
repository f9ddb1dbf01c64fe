//! The simulator's link: an in-process link that also counts bytes and
//! carries logical time, so the simulator can report traffic per link and
//! the number of communication steps on the critical path.

use super::timing::Timing;
use crate::topo::CommPlane;
use hccl_platform::{DeviceMem, MemKind, Result};
use hccl_platform::{InProcLink, Link, LinkOp, LinkOpState};
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
    /// Predicted time of the event, ns (timed simulations only: see
    /// [`Timing`]); merged by the later time, not the longer chain.
    pub time: u64,
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
///
/// Only the rank's own links change it, and a rank's links are polled by
/// its device's driver, one thread at a time; so plain atomic loads and
/// stores suffice — no lock and no read-modify-write, which cost a locked
/// instruction each on every verb of a 1,024-rank plan's millions.
#[derive(Debug, Default)]
pub(crate) struct ClockCell {
    total: AtomicU64,
    planes: [AtomicU64; CommPlane::COUNT],
}

impl ClockCell {
    /// The current time.
    pub(crate) fn get(&self) -> Stamp {
        Stamp {
            total: self.total.load(Ordering::Relaxed),
            planes: std::array::from_fn(|i| self.planes[i].load(Ordering::Relaxed)),
            time: 0,
        }
    }

    fn set(&self, t: Stamp) {
        self.total.store(t.total, Ordering::Relaxed);
        for (p, v) in self.planes.iter().zip(t.planes) {
            p.store(v, Ordering::Relaxed);
        }
    }

    /// Moves to `t` if its chain is longer (see [`Stamp::merge`]).
    fn merge(&self, t: Stamp) {
        if t.total > self.total.load(Ordering::Relaxed) {
            self.set(t);
        }
    }
}

/// A rank's clock, shared by its links.
pub(crate) type Clock = Arc<ClockCell>;

/// A stamp in atomics, so that a slot can be written by one thread and
/// read by another without a lock (the queue's indices order the accesses).
#[derive(Debug, Default)]
struct StampSlot {
    total: AtomicU64,
    planes: [AtomicU64; CommPlane::COUNT],
    time: AtomicU64,
}

/// Stamps one end has sent that the other has not yet taken, in order:
/// one producer (the sending end's driver) and one consumer (the receiving
/// end's). A short ring of slots serves the common case without a lock or
/// read-modify-write (each costs a locked instruction, and a 1,024-rank
/// ring plan moves millions of stamps); stamps beyond it wait in a locked
/// overflow queue. The producer keeps using the overflow while it holds
/// anything and the consumer empties the ring before it, so stamps come
/// out in the order they went in.
#[derive(Debug, Default)]
pub(crate) struct StampQueue {
    ring: [StampSlot; RING],
    /// Stamps put into the ring (written by the producer only).
    pushed: AtomicU64,
    /// Stamps taken from the ring (written by the consumer only).
    taken: AtomicU64,
    overflow: Mutex<VecDeque<Stamp>>,
    /// Stamps in `overflow` (changed under its lock; read without it by the
    /// producer, which alone adds to it, so a 0 it reads is exact).
    spilled: AtomicU64,
}

/// Slots of a [`StampQueue`]'s ring: a ring plan has one transfer and one
/// ack in flight per link and direction.
const RING: usize = 2;

impl StampQueue {
    /// Appends `t` (producer side).
    pub(crate) fn push(&self, t: Stamp) {
        let pushed = self.pushed.load(Ordering::Relaxed);
        let taken = self.taken.load(Ordering::Acquire);
        if self.spilled.load(Ordering::Acquire) == 0 && pushed - taken < RING as u64 {
            let slot = &self.ring[(pushed % RING as u64) as usize];
            slot.total.store(t.total, Ordering::Relaxed);
            for (p, v) in slot.planes.iter().zip(t.planes) {
                p.store(v, Ordering::Relaxed);
            }
            slot.time.store(t.time, Ordering::Relaxed);
            // publishes the slot's contents to the consumer
            self.pushed.store(pushed + 1, Ordering::Release);
            return;
        }
        let mut q = self.overflow.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(t);
        self.spilled.store(q.len() as u64, Ordering::Release);
    }

    /// Removes the oldest stamp (consumer side).
    pub(crate) fn pop(&self) -> Option<Stamp> {
        let taken = self.taken.load(Ordering::Relaxed);
        if self.pushed.load(Ordering::Acquire) > taken {
            let slot = &self.ring[(taken % RING as u64) as usize];
            let t = Stamp {
                total: slot.total.load(Ordering::Relaxed),
                planes: std::array::from_fn(|i| slot.planes[i].load(Ordering::Relaxed)),
                time: slot.time.load(Ordering::Relaxed),
            };
            // hands the slot back to the producer
            self.taken.store(taken + 1, Ordering::Release);
            return Some(t);
        }
        if self.spilled.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = self.overflow.lock().unwrap_or_else(|p| p.into_inner());
        let t = q.pop_front();
        self.spilled.store(q.len() as u64, Ordering::Release);
        t
    }
}

/// The stamps both ends of one link send each other, in one allocation
/// per link (a simulated mesh of 1,024 ranks has half a million links):
/// transfers low rank → high, high → low, then acks low → high, high → low.
#[derive(Debug, Default)]
pub(crate) struct PairStamps([StampQueue; 4]);

/// Which queue of a [`PairStamps`] each end pushes to and pops from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The lower rank's end.
    Low = 0,
    /// The higher rank's end.
    High = 1,
}

/// One end of a simulated link.
#[derive(Debug)]
pub(crate) struct SimLink {
    inner: InProcLink,
    local_clock: Clock,
    /// The plane the link serves (`CommPlane as usize`).
    plane: u8,
    side: Side,
    /// Stamps of the transfers and acks both ends sent (see [`PairStamps`]).
    stamps: Arc<PairStamps>,
    pub(crate) bytes: AtomicU64,
    pub(crate) transfers: AtomicU64,
    /// The timed model, in timed simulations.
    timing: Option<Arc<Timing>>,
}

impl SimLink {
    pub(crate) fn new(
        inner: InProcLink,
        local_clock: Clock,
        plane: CommPlane,
        side: Side,
        stamps: Arc<PairStamps>,
    ) -> Self {
        SimLink {
            inner,
            local_clock,
            plane: plane as u8,
            side,
            stamps,
            bytes: AtomicU64::new(0),
            transfers: AtomicU64::new(0),
            timing: None,
        }
    }

    /// The plane the link serves (`CommPlane as usize`).
    pub(crate) fn plane(&self) -> usize {
        self.plane as usize
    }

    /// The same link, keeping predicted time with `timing`.
    pub(crate) fn timed(self, timing: Option<Arc<Timing>>) -> Self {
        SimLink { timing, ..self }
    }

    /// Transfers this end sent, arriving at the peer (the peer pops them).
    fn outgoing(&self) -> &StampQueue {
        &self.stamps.0[self.side as usize]
    }

    /// Transfers the peer sent to this end.
    fn incoming(&self) -> &StampQueue {
        &self.stamps.0[1 - self.side as usize]
    }

    /// Acks this end sent (the peer pops them).
    fn outgoing_ctl(&self) -> &StampQueue {
        &self.stamps.0[2 + self.side as usize]
    }

    /// Acks the peer sent to this end.
    fn incoming_ctl(&self) -> &StampQueue {
        &self.stamps.0[3 - self.side as usize]
    }
}

impl SimLink {
    fn arrive(&self, from: &StampQueue, stream: u64) {
        if let Some(t) = from.pop() {
            self.local_clock.merge(t);
            if let Some(timing) = &self.timing {
                timing.reach(self.inner.local_rank(), stream, t.time);
            }
        }
    }

    /// The predicted arrival of a transfer of `bytes` this end's stream
    /// `stream` runs: sent to the peer, or read from it (`read`).
    fn timed_transfer(&self, stream: u64, bytes: usize, read: bool, reduce: bool) -> u64 {
        let Some(timing) = &self.timing else {
            return 0;
        };
        let (me, peer) = (self.inner.local_rank(), self.inner.remote_rank());
        let (src, dst) = if read { (peer, me) } else { (me, peer) };
        let t0 = timing.now(me, stream);
        timing.transfer(src, dst, me, stream, bytes as u64, reduce, t0)
    }

    /// This stream's predicted time, for acks.
    fn time_of(&self, stream: u64) -> u64 {
        self.timing
            .as_ref()
            .map_or(0, |t| t.now(self.inner.local_rank(), stream))
    }

    /// Counts a transfer of `bytes` (only this end's driver sends on it:
    /// a load and a store do).
    fn count(&self, bytes: usize) {
        let b = self.bytes.load(Ordering::Relaxed);
        self.bytes.store(b + bytes as u64, Ordering::Relaxed);
        let t = self.transfers.load(Ordering::Relaxed);
        self.transfers.store(t + 1, Ordering::Relaxed);
    }

    /// This rank's time after one more hand-off over this link's plane.
    fn hand_off(&self) -> Stamp {
        let mut t = self.local_clock.get();
        t.total += 1;
        t.planes[self.plane()] += 1;
        t
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
                    self.count(op.bytes());
                    let mut t = self.hand_off();
                    let reduce = matches!(op, LinkOp::TxWithReduce { .. });
                    t.time = self.timed_transfer(state.stream, op.bytes(), false, reduce);
                    self.outgoing().push(t);
                }
                LinkOp::RxWaitDone => self.arrive(self.incoming(), state.stream),
                // a read of the peer's buffer is a hand-off that ends here:
                // the peer's progress came with the ack that allowed it
                op if op.is_peer_read() => {
                    self.count(op.bytes());
                    let t = self.hand_off();
                    self.local_clock.set(t);
                    let reduce = matches!(op, LinkOp::RxReduce { .. });
                    let at = self.timed_transfer(state.stream, op.bytes(), true, reduce);
                    if let Some(timing) = &self.timing {
                        timing.reach(self.inner.local_rank(), state.stream, at);
                    }
                }
                LinkOp::TxAck => {
                    let mut t = self.local_clock.get();
                    t.time = self.time_of(state.stream);
                    self.outgoing_ctl().push(t);
                }
                LinkOp::RxAck => self.arrive(self.incoming_ctl(), state.stream),
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
    fn maps_peer_param(&self) -> bool {
        self.inner.maps_peer_param()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(total: u64) -> Stamp {
        Stamp {
            total,
            planes: [total, 0, 1, 2],
            time: total * 7,
        }
    }

    #[test]
    fn stamps_come_out_in_order_past_the_ring() {
        let q = StampQueue::default();
        assert_eq!(q.pop(), None);
        // fill past the ring, drain part, push more while spilled, drain all
        let mut next_in = 0;
        let mut next_out = 0;
        for (ins, outs) in [(5, 1), (1, 2), (3, 0), (0, 6), (1, 0), (2, 3)] {
            for _ in 0..ins {
                q.push(stamp(next_in));
                next_in += 1;
            }
            for _ in 0..outs {
                assert_eq!(q.pop(), Some(stamp(next_out)));
                next_out += 1;
            }
        }
        assert_eq!(next_out, next_in);
        assert_eq!(q.pop(), None);
    }
}
