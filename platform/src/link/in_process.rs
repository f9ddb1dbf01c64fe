//! The in-process link: ranks that are threads of one process.
//!
//! Each end owns a mailbox of three counters (acks, data signals, completed
//! transfers) that only the peer increments and only the owner reads, each on
//! its own 128-byte line. A transfer is a direct copy into the peer's buffer
//! followed by a release-increment of its `done` counter: single copy, no
//! intermediate queue.

use super::{Link, LinkOp, LinkOpState, OpDesc};
use crate::error::{HcclError, Result};
use crate::mem::{copy_mem, reduce_mem, DeviceMem, MemKind};
use crate::sync::EventCount;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

#[repr(align(128))]
#[derive(Debug, Default)]
struct Line(AtomicU64);

#[derive(Debug, Default)]
struct Mailbox {
    ack: Line,
    signal: Line,
    done: Line,
    signal_desc: Line,
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
    acks_taken: AtomicU64,
    signals_taken: AtomicU64,
    dones_taken: AtomicU64,
    descs_taken: AtomicU64,
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
                acks_taken: AtomicU64::new(0),
                signals_taken: AtomicU64::new(0),
                dones_taken: AtomicU64::new(0),
                descs_taken: AtomicU64::new(0),
            }
        };
        (end(a, b, &ma, &mb), end(b, a, &mb, &ma))
    }

    fn raise(&self, line: &Line) {
        line.0.fetch_add(1, Ordering::Release);
        self.peer_waker.notify();
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

    /// Waits (by polling) for the `n`th increment of `line`.
    fn take(&self, line: &Line, taken: &AtomicU64, state: &mut LinkOpState) -> Poll<Result<()>> {
        let seq = *state
            .seq
            .get_or_insert_with(|| taken.fetch_add(1, Ordering::Relaxed) + 1);
        if line.0.load(Ordering::Acquire) >= seq {
            return Poll::Ready(Ok(()));
        }
        if let Err(e) = self.check_aborted() {
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    }

    fn remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<DeviceMem> {
        self.remote_mems[kind.index()]
            .as_ref()
            .ok_or_else(|| {
                HcclError::internal(format!("peer's {kind} buffer is not bound to this link"))
            })?
            .range(offset, len)
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
        self.remote_mems[kind.index()].as_ref().map(DeviceMem::len)
    }

    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        match op {
            LinkOp::TxAck => {
                self.raise(&self.theirs.ack);
                Poll::Ready(Ok(()))
            }
            LinkOp::TxDataSignal => {
                self.raise(&self.theirs.signal);
                Poll::Ready(Ok(()))
            }
            LinkOp::RxAck => self.take(&self.mine.ack, &self.acks_taken, state),
            LinkOp::RxDataSignal => self.take(&self.mine.signal, &self.signals_taken, state),
            LinkOp::RxWaitDone => self.take(&self.mine.done, &self.dones_taken, state),
            LinkOp::TxAsync {
                dst_kind,
                dst_offset,
                src,
            } => {
                let r = self
                    .remote(*dst_kind, *dst_offset, src.mem().len())
                    .and_then(|dst| copy_mem(&dst, src.mem()));
                if r.is_ok() {
                    self.raise(&self.theirs.done);
                }
                Poll::Ready(r)
            }
            LinkOp::TxWithReduce {
                dst_kind,
                dst_offset,
                src,
                dtype,
                op,
            } => {
                let r = self
                    .remote(*dst_kind, *dst_offset, src.mem().len())
                    .and_then(|dst| reduce_mem(&dst, src.mem(), *dtype, *op));
                if r.is_ok() {
                    self.raise(&self.theirs.done);
                }
                Poll::Ready(r)
            }
            // Write-based: the sender already placed the data; transfers are
            // synchronous copies, so there is nothing left to wait for.
            LinkOp::RxAsync { .. } | LinkOp::TxWaitDone => Poll::Ready(Ok(())),
            LinkOp::TxDesc(d) => {
                self.theirs
                    .descs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(*d);
                self.raise(&self.theirs.signal_desc);
                Poll::Ready(Ok(()))
            }
            LinkOp::RxDesc(mine) => {
                match self.take(&self.mine.signal_desc, &self.descs_taken, state) {
                    Poll::Ready(Ok(())) => {
                        let theirs = self
                            .mine
                            .descs
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .pop_front();
                        Poll::Ready(match theirs {
                            Some(t) => mine.check(&t, self.remote),
                            None => Err(HcclError::internal("descriptor signalled but missing")),
                        })
                    }
                    other => other,
                }
            }
        }
    }

    fn abort(&self, reason: &str) {
        if let Ok(mut r) = self.theirs.reason.lock() {
            if r.is_empty() {
                *r = format!("peer rank {} failed: {reason}", self.local);
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
}
