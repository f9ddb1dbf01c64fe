//! One rank's end of an ibverbs link: HCCL's verbs over a connection.

use super::conn::Conn;
use super::node::Node;
use super::wire::ImmKind;
use crate::error::{HcclError, Result};
use crate::link::consistency::DeferredChecks;
use crate::link::{Link, LinkOp, LinkOpState};
use crate::mem::MemKind;
use crate::sync::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

/// One end of an ibverbs link.
#[derive(Debug)]
pub struct IbvLink {
    local: u32,
    conn: Arc<Conn>,
    node: Arc<Node>,
    signals_taken: AtomicU64,
    dones_taken: AtomicU64,
    acks_taken: AtomicU64,
    /// The consistency check, deferred to the link's next wait (as the
    /// TCP link defers it).
    checks: DeferredChecks,
}

impl IbvLink {
    pub(crate) fn new(local: u32, conn: Arc<Conn>, node: Arc<Node>) -> IbvLink {
        IbvLink {
            local,
            conn,
            node,
            signals_taken: AtomicU64::new(0),
            dones_taken: AtomicU64::new(0),
            acks_taken: AtomicU64::new(0),
            checks: DeferredChecks::default(),
        }
    }

    /// Waits until `counter` reaches this verb's ticket (drawn from
    /// `taken` at its first poll), draining completions meanwhile.
    fn take(
        &self,
        counter: &AtomicU64,
        taken: &AtomicU64,
        state: &mut LinkOpState,
    ) -> Poll<Result<()>> {
        let seq = *state
            .seq
            .get_or_insert_with(|| taken.fetch_add(1, Ordering::Relaxed) + 1);
        if counter.load(Ordering::Acquire) < seq {
            self.node.progress();
        }
        if let Err(e) = self.check_deferred() {
            return Poll::Ready(Err(e));
        }
        if counter.load(Ordering::Acquire) >= seq {
            return Poll::Ready(Ok(()));
        }
        match self.health() {
            Err(e) => Poll::Ready(Err(e)),
            Ok(()) => Poll::Pending,
        }
    }

    /// Posts a signal-like write (once per verb), retrying while there is
    /// no credit.
    fn signal(
        &self,
        kind: ImmKind,
        slot: Option<&[u8]>,
        state: &mut LinkOpState,
    ) -> Poll<Result<()>> {
        if state.seq.is_some() {
            return Poll::Ready(Ok(()));
        }
        match self.conn.post_signal(kind, slot) {
            Ok(Some(t)) => {
                state.seq = Some(t);
                Poll::Ready(Ok(()))
            }
            Ok(None) => {
                self.node.progress();
                self.pending_or_broken()
            }
            Err(e) => Poll::Ready(Err(e.rank(self.local).peer(self.conn.peer))),
        }
    }

    fn pending_or_broken(&self) -> Poll<Result<()>> {
        match self.health() {
            Err(e) => Poll::Ready(Err(e)),
            Ok(()) => Poll::Pending,
        }
    }

    /// `TxAsync`: posts the transfer at the first poll, then waits for its
    /// completion (the source may be reused once the verb completes).
    fn transfer(
        &self,
        kind: MemKind,
        offset: usize,
        src: &crate::mem::PinnedMem,
        state: &mut LinkOpState,
    ) -> Poll<Result<()>> {
        if state.seq.is_none() {
            let mem = src.mem();
            let lkey = match self.node.lkey(mem) {
                Ok(k) => k,
                Err(e) => return Poll::Ready(Err(e.rank(self.local))),
            };
            match self.conn.post_data(kind, offset, mem, lkey) {
                Ok(Some((ticket, inline))) => {
                    if inline {
                        return Poll::Ready(Ok(()));
                    }
                    state.seq = Some(ticket);
                }
                Ok(None) => {
                    self.node.progress();
                    return self.pending_or_broken();
                }
                Err(e) => return Poll::Ready(Err(e.rank(self.local).peer(self.conn.peer))),
            }
        }
        let ticket = state.seq.expect("set above");
        if self.conn.completed.load(Ordering::Acquire) < ticket {
            self.node.progress();
        }
        if self.conn.completed.load(Ordering::Acquire) >= ticket {
            return Poll::Ready(Ok(()));
        }
        self.pending_or_broken()
    }

    fn check_deferred(&self) -> Result<()> {
        let inbox = &self.conn.inbox;
        self.checks.check(
            &inbox.desc_count,
            &inbox.descs,
            (self.local, self.conn.peer),
        )
    }
}

impl Link for IbvLink {
    fn local_rank(&self) -> u32 {
        self.local
    }

    fn remote_rank(&self) -> u32 {
        self.conn.peer
    }

    fn transport(&self) -> &'static str {
        "ibverbs"
    }

    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        match kind {
            MemKind::CclInput => Some(self.conn.remote_ccl[0].len as usize),
            MemKind::CclOutput => Some(self.conn.remote_ccl[1].len as usize),
            _ => None,
        }
    }

    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        let inbox = &self.conn.inbox;
        match op {
            LinkOp::TxAck => self.signal(ImmKind::Ack, None, state),
            LinkOp::TxDataSignal => self.signal(ImmKind::Signal, None, state),
            LinkOp::RxAck => self.take(&inbox.acks, &self.acks_taken, state),
            LinkOp::RxDataSignal => self.take(&inbox.signals, &self.signals_taken, state),
            LinkOp::RxWaitDone => self.take(&inbox.dones, &self.dones_taken, state),
            LinkOp::TxAsync {
                dst_kind,
                dst_offset,
                src,
            } => self.transfer(*dst_kind, *dst_offset, src, state),
            // eager_max is 0: the stream splits TxAfterAck into its verbs
            LinkOp::TxAfterAck { .. } => Poll::Ready(Err(HcclError::internal(
                "the ibverbs link has no eager path (TxAfterAck)",
            ))),
            LinkOp::TxWithReduce { .. } => Poll::Ready(Err(HcclError::not_support(
                "the ibverbs link cannot reduce into the peer's memory; use TxAsync and reduce locally",
            ))),
            LinkOp::RxParamMem | LinkOp::RxReduce { .. } => Poll::Ready(Err(
                HcclError::not_support("the ibverbs link cannot read the peer's user buffers"),
            )),
            LinkOp::RxAsync { .. } if op.is_peer_read() => Poll::Ready(Err(
                HcclError::not_support("the ibverbs link cannot read the peer's user buffers"),
            )),
            // writes complete at the sender (TxAsync waits for them)
            LinkOp::RxAsync { .. } | LinkOp::TxWaitDone => Poll::Ready(Ok(())),
            LinkOp::TxDesc(d) => {
                let bytes = d.to_bytes();
                self.signal(ImmKind::Desc, Some(&bytes), state)
            }
            LinkOp::RxDesc(mine) => Poll::Ready(self.checks.rx_desc(
                mine,
                state,
                &inbox.desc_count,
                &inbox.descs,
                (self.local, self.conn.peer),
            )),
        }
    }

    fn abort(&self, reason: &str) {
        let msg = crate::link::relayed_failure(self.local, reason);
        match self.conn.post_signal(ImmKind::Abort, Some(msg.as_bytes())) {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => tracing::debug!(
                rank = self.local,
                peer = self.conn.peer,
                "could not tell the peer of the abort (no credit, or the link is down)"
            ),
        }
        self.node.waker.notify();
    }

    fn shutdown(&self, reason: &str) {
        self.abort(reason);
        self.conn.fail(
            format!("communicator aborted on rank {}: {reason}", self.local),
            false,
        );
        self.node.waker.notify();
    }

    fn health(&self) -> Result<()> {
        let inbox = &self.conn.inbox;
        if inbox.aborted.load(Ordering::Acquire) {
            let reason = inbox.reason.lock().map(|r| r.clone()).unwrap_or_default();
            return Err(HcclError::remote(reason)
                .rank(self.local)
                .peer(self.conn.peer));
        }
        self.conn.check_usable().map_err(|e| e.rank(self.local))
    }

    fn peer_lost(&self) -> Option<HcclError> {
        let inbox = &self.conn.inbox;
        if !inbox.lost.load(Ordering::Acquire) {
            return None;
        }
        let reason = inbox.reason.lock().map(|r| r.clone()).unwrap_or_default();
        Some(
            HcclError::remote(reason)
                .rank(self.local)
                .peer(self.conn.peer),
        )
    }

    fn close(&self) {
        if !self.conn.inbox.failed.load(Ordering::Acquire) {
            let _ = self.conn.post_signal(ImmKind::Bye, None);
            self.node.progress();
        }
    }
}
