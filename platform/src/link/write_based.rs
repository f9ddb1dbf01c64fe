//! The verbs of a write-based link, written once for every transport whose
//! peers can write into each other's memory (in-process, shared memory).
//!
//! Such a transport only has to say how to raise a counter at the peer, how
//! to read its own counters, how to reach the peer's buffers and how to
//! pass op descriptors; [`poll`] turns that into HCCL's verbs: a transfer is
//! a direct copy (or reduce) into the peer's buffer followed by a
//! release-increment of its `Done` counter, and every wait is "my counter
//! has reached the n-th raise", with n assigned at the verb's first poll.
//!
//! The counter protocol itself is a small unit a loom model can run:
//! [`raise_word`] / [`raised_word`] over any [`Word`] (the shared-memory
//! link's words are mapped), [`Counters`] (one end's counters as a struct
//! over the platform's atomics, as the in-process link keeps them) and
//! [`ticket`] (which raise a wait waits for).
//!
//! Its loom model (`link/loom_tests.rs`) runs the production [`poll`]
//! with its [`Taken`] tickets between two ends over [`Counters`] (loom
//! atomics under loom): a sender that runs `RxAck, TxAsync, TxWaitDone`
//! and a receiver that runs `TxAck, RxWaitDone` and reads its buffer, two
//! rounds, every interleaving (a fraction of a second). The transfer
//! really copies; the model's transport also marks the receiver's buffer
//! written in a loom `UnsafeCell`, and the receiver marks it read, so loom
//! shows that the sender never writes before the receiver's ack (ordered
//! after its last read), that the receiver never reads before the data
//! count (ordered after the write, and the bytes are the round's), and
//! that every counter only grows. Two deliberate bugs make it fail
//! (`sync/mutation.rs`): a raise without release (`LinkRaiseRelaxed`: a
//! causality violation) and waits numbered from 0 (`LinkTicketEarly`: the
//! receiver reads before the data). Run it with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p
//! hccl-platform --release --lib loom_tests` (as `.ci/test` does).

use super::{LinkOp, LinkOpState, OpDesc, ParamMem};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::mem::peer_stats;
use crate::mem::{cma, copy_mem, reduce_mem, DeviceMem, ImportOwner, MemHandle, MemKind};
use crate::sync::mutation::{self, Mutation};
use crate::sync::{AtomicU64, Mutex, Ordering, Word};
use std::task::Poll;

/// The counters one end raises at the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    /// "You may write into my buffers."
    Ack,
    /// The secondary signal.
    Signal,
    /// A transfer into the peer completed.
    Done,
    /// An op descriptor was stored at the peer.
    Desc,
}

/// Raises a counter (the peer's): a release increment, after the writes
/// it announces (a transfer's bytes, a descriptor), so a waiter that sees
/// the new count sees them too.
pub(crate) fn raise_word(counter: &impl Word) {
    let order = if mutation::active(Mutation::LinkRaiseRelaxed) {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };
    counter.fetch_add(1, order);
}

/// How many times a counter (this end's) has been raised: an acquire
/// load, pairing with [`raise_word`].
pub(crate) fn raised_word(counter: &impl Word) -> u64 {
    counter.load(Ordering::Acquire)
}

/// The counters of one end of a write-based link, raised only by the peer
/// and read only by the owner, when they live in ordinary memory (the
/// in-process link; a loom model).
///
/// The four are adjacent: one thread writes them all and one reads them
/// all, so a line each would save the reader no miss worth the 512 bytes
/// it costs a link end (a simulated mesh of 1,024 ranks has a million
/// ends). What must not share their line is the other direction's
/// counters: whoever holds them aligns them (the in-process mailbox is
/// 128-byte aligned).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    ack: AtomicU64,
    signal: AtomicU64,
    done: AtomicU64,
    desc: AtomicU64,
}

impl Counters {
    fn line(&self, c: Counter) -> &AtomicU64 {
        match c {
            Counter::Ack => &self.ack,
            Counter::Signal => &self.signal,
            Counter::Done => &self.done,
            Counter::Desc => &self.desc,
        }
    }

    /// Raises `c` (see [`raise_word`]).
    pub(crate) fn raise(&self, c: Counter) {
        raise_word(self.line(c));
    }

    /// How many times `c` has been raised (see [`raised_word`]).
    pub(crate) fn raised(&self, c: Counter) -> u64 {
        raised_word(self.line(c))
    }
}

/// What a write-based transport provides.
pub(crate) trait WriteBased {
    /// Raises `c` at the peer and wakes it.
    fn raise(&self, c: Counter);
    /// How many times the peer has raised `c` at this end (acquire load).
    fn raised(&self, c: Counter) -> u64;
    /// The peer's buffer `kind` at `[offset, offset + len)`.
    fn remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<DeviceMem>;
    /// Stores this end's `n`-th descriptor (0-based) at the peer.
    fn put_desc(&self, n: u64, d: &OpDesc);
    /// The peer's `n`-th descriptor (0-based), once its `Desc` raise is seen.
    fn get_desc(&self, n: u64) -> Option<OpDesc>;
    /// `Err` once the link is broken (checked while waiting).
    fn check(&self) -> Result<()>;
    /// This rank.
    fn local(&self) -> u32;
    /// The peer.
    fn peer(&self) -> u32;
    /// The peer's process id (this process's for ranks that are threads),
    /// for reading its user buffers with cross-memory attach.
    fn peer_pid(&self) -> u32;
    /// Whether this end maps the peer's registered user buffers from the
    /// handles its descriptors carry ([`Link::maps_peer_param`]).
    ///
    /// [`Link::maps_peer_param`]: super::Link::maps_peer_param
    fn maps_peer_param(&self) -> bool {
        false
    }
}

/// How many raises of each counter this end has consumed.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    acks: AtomicU64,
    signals: AtomicU64,
    dones: AtomicU64,
    descs: AtomicU64,
    descs_sent: AtomicU64,
    /// Where the peer's user buffers of the current op are (the last
    /// `RxParamMem`). Reads of them run after it in stream order, and the
    /// next op's `RxParamMem` only after they completed (ops on a
    /// communicator are ordered), so one value serves.
    /// Boxed, as are `imports`: only links that carry user buffers use
    /// them, and a simulated mesh keeps a million ends.
    peer_mem: Mutex<Option<Box<PeerParam>>>,
    /// The peer regions this end has mapped recently (made at the first
    /// handle the peer sends).
    imports: Mutex<Option<Box<PeerImports>>>,
}

/// The peer's user buffers of the current op.
#[derive(Debug)]
struct PeerParam {
    /// Their addresses and lengths (for cross-memory attach).
    mem: ParamMem,
    /// The input buffer, mapped, when the peer sent its handle.
    input: Option<DeviceMem>,
    /// The output buffer, mapped, when the peer sent its handle.
    output: Option<DeviceMem>,
}

/// Peer regions one link end mapped for ops, newest last: the peer's
/// buffers are usually the same op after op, so a short list finds them
/// without the process-wide cache's lock; a region pushed out of it is
/// released (its mapping goes when no other owner holds it), so a peer
/// that frees and allocates buffers op after op does not pin them all.
#[derive(Debug, Default)]
struct PeerImports {
    owner: ImportOwner,
    /// (pid, inode) → the whole region (`None`: mapping it failed, so
    /// reads of it use cross-memory attach without trying again).
    recent: Vec<((u32, u64), Option<DeviceMem>, MemHandle)>,
}

/// Regions a link end keeps mapped at most (see [`PeerImports`]).
const RECENT_IMPORTS: usize = 8;

/// Bytes of the staging window a cross-memory read-reduce goes through.
const STAGE_BYTES: usize = 256 << 10;

thread_local! {
    /// The staging window of the read-reduces this thread runs, allocated
    /// at the first one. A window is used only within one call, so a
    /// thread (a device's driver) needs one, not one per link: a mesh of
    /// p ranks has p − 1 links a rank, and the simulator's 1,024 ranks
    /// touched a page of a window per link (4 GiB).
    static STAGE: std::cell::RefCell<Option<DeviceMem>> = const { std::cell::RefCell::new(None) };
}

impl PeerImports {
    /// The range `h` names, mapped (from the list, or imported now).
    fn resolve(&mut self, h: &MemHandle, peer: u32) -> Option<DeviceMem> {
        let key = (h.pid, h.inode);
        let at = match self.recent.iter().position(|(k, _, _)| *k == key) {
            Some(i) => i,
            None => {
                let whole = MemHandle {
                    offset: 0,
                    len: h.region_len,
                    ..*h
                };
                let mapped = match self.owner.import(&whole) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        tracing::warn!(peer, error = %e, "could not map the peer's registered buffer; reading it with cross-memory attach");
                        None
                    }
                };
                if self.recent.len() == RECENT_IMPORTS {
                    let (_, _, old) = self.recent.remove(0);
                    self.owner.release(&old);
                }
                self.recent.push((key, mapped, whole));
                self.recent.len() - 1
            }
        };
        let region = self.recent[at].1.as_ref()?;
        region.range(h.offset as usize, h.len as usize).ok()
    }
}

/// The peer's mapped user buffer `kind` at `[offset, offset + len)`, if
/// the peer sent its handle (`Ok(None)`: use cross-memory attach).
fn mapped_peer<W: WriteBased>(
    w: &W,
    taken: &Taken,
    kind: MemKind,
    offset: usize,
    len: usize,
) -> Result<(Option<DeviceMem>, u64, u64)> {
    let guard = taken.peer_mem.lock().unwrap_or_else(|p| p.into_inner());
    let p = guard.as_ref().ok_or_else(|| {
        HcclError::internal(format!(
            "access to the peer's {kind} before the peer's buffers were received (RxParamMem)"
        ))
    })?;
    let (addr, cap, mapped) = match kind {
        MemKind::ParamInput => (p.mem.input_addr, p.mem.input_len, &p.input),
        MemKind::ParamOutput => (p.mem.output_addr, p.mem.output_len, &p.output),
        other => {
            return Err(HcclError::internal(format!(
                "{other} is not one of the peer's user buffers"
            )))
        }
    };
    if (offset as u64)
        .checked_add(len as u64)
        .is_none_or(|end| end > cap)
    {
        return Err(HcclError::internal(format!(
            "access of {len} bytes at offset {offset} overruns the peer's {kind} buffer of {cap} bytes"
        ))
        .peer(w.peer()));
    }
    let range = match mapped {
        Some(m) => Some(m.range(offset, len)?),
        None => None,
    };
    Ok((range, addr, cap))
}

/// Copies from the peer's user buffer `kind` at `offset` into `dst`: from
/// the mapping when there is one, else with cross-memory attach.
fn read_peer<W: WriteBased>(
    w: &W,
    taken: &Taken,
    kind: MemKind,
    offset: usize,
    dst: &DeviceMem,
) -> Result<()> {
    let (mapped, addr, _) = mapped_peer(w, taken, kind, offset, dst.len())?;
    if dst.is_empty() {
        return Ok(());
    }
    match mapped {
        Some(src) => {
            copy_mem(dst, &src)?;
            peer_stats::mapped_read(dst.len());
            Ok(())
        }
        None => {
            cma::read(w.peer_pid(), addr + offset as u64, dst).map_err(|e| e.peer(w.peer()))?;
            peer_stats::cma_read(dst.len());
            Ok(())
        }
    }
}

/// `dst = dst op` the peer's user buffer `kind` at `offset`: one pass over
/// the mapping, or cross-memory reads into the staging window, each
/// reduced before the next.
#[allow(clippy::too_many_arguments)]
fn read_peer_reduce<W: WriteBased>(
    w: &W,
    taken: &Taken,
    kind: MemKind,
    offset: usize,
    dst: &DeviceMem,
    dtype: DataType,
    op: ReduceOp,
) -> Result<()> {
    let (mapped, addr, _) = mapped_peer(w, taken, kind, offset, dst.len())?;
    if dst.is_empty() {
        return Ok(());
    }
    if let Some(src) = mapped {
        reduce_mem(dst, &src, dtype, op)?;
        peer_stats::mapped_read(dst.len());
        return Ok(());
    }
    let stage = STAGE.with(|st| -> Result<DeviceMem> {
        let mut st = st.borrow_mut();
        Ok(match &mut *st {
            Some(s) => s.clone(),
            empty => empty.insert(DeviceMem::alloc(STAGE_BYTES)?).clone(),
        })
    })?;
    // whole elements per window (STAGE_BYTES is a multiple of every size)
    let mut at = 0;
    while at < dst.len() {
        let n = STAGE_BYTES.min(dst.len() - at);
        let window = stage.range(0, n)?;
        cma::read(w.peer_pid(), addr + (offset + at) as u64, &window)
            .map_err(|e| e.peer(w.peer()))?;
        reduce_mem(&dst.range(at, n)?, &window, dtype, op)?;
        peer_stats::cma_read(n);
        at += n;
    }
    Ok(())
}

/// The peer's buffer `kind` at `[offset, offset + len)` as a transfer's
/// destination: its user buffers (`ParamInput` / `ParamOutput`) through
/// the mapping of this op's (needs the peer's handle), the others as the
/// transport addresses them.
fn remote<W: WriteBased>(
    w: &W,
    taken: &Taken,
    kind: MemKind,
    offset: usize,
    len: usize,
) -> Result<DeviceMem> {
    if !matches!(kind, MemKind::ParamInput | MemKind::ParamOutput) {
        return w.remote(kind, offset, len);
    }
    match mapped_peer(w, taken, kind, offset, len)? {
        (Some(dst), _, _) => {
            peer_stats::mapped_write(len);
            Ok(dst)
        }
        (None, _, _) => Err(HcclError::not_support(format!(
            "cannot write into the peer's {kind} buffer: it is not mapped here (the peer's buffers \
             of this op must be shareable memory registered with the communicator, on a link \
             that maps peers' memory)"
        ))
        .peer(w.peer())),
    }
}

/// Stores the peer's buffers of the op, mapping those it sent handles of.
fn take_param_mem<W: WriteBased>(w: &W, taken: &Taken, mem: ParamMem) {
    let (mut input, mut output) = (None, None);
    if w.maps_peer_param() && (mem.input_handle.is_some() || mem.output_handle.is_some()) {
        let mut guard = taken.imports.lock().unwrap_or_else(|p| p.into_inner());
        let imports = guard.get_or_insert_with(Default::default);
        input = mem.input_handle.and_then(|h| imports.resolve(&h, w.peer()));
        output = mem
            .output_handle
            .and_then(|h| imports.resolve(&h, w.peer()));
    }
    *taken.peer_mem.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(Box::new(PeerParam { mem, input, output }));
}

/// Which raise of a counter the wait with `state` waits for: the n-th wait
/// on a counter (numbered from `taken` at its first poll) is satisfied by
/// the n-th raise. Waits are numbered in stream order by the stream's one
/// driver, so a relaxed count does.
pub(crate) fn ticket(taken: &AtomicU64, state: &mut LinkOpState) -> u64 {
    let first = if mutation::active(Mutation::LinkTicketEarly) {
        0
    } else {
        1
    };
    *state
        .seq
        .get_or_insert_with(|| taken.fetch_add(1, Ordering::Relaxed) + first)
}

fn take<W: WriteBased>(
    w: &W,
    c: Counter,
    taken: &AtomicU64,
    state: &mut LinkOpState,
) -> Poll<Result<()>> {
    let seq = ticket(taken, state);
    if w.raised(c) >= seq {
        return Poll::Ready(Ok(()));
    }
    match w.check() {
        Err(e) => Poll::Ready(Err(e)),
        Ok(()) => Poll::Pending,
    }
}

/// Advances `op` on the write-based end `w`.
pub(crate) fn poll<W: WriteBased>(
    w: &W,
    taken: &Taken,
    op: &LinkOp,
    state: &mut LinkOpState,
) -> Poll<Result<()>> {
    let transfer = |r: Result<()>| {
        if r.is_ok() {
            w.raise(Counter::Done);
        }
        Poll::Ready(r)
    };
    match op {
        LinkOp::TxAck => {
            w.raise(Counter::Ack);
            Poll::Ready(Ok(()))
        }
        LinkOp::TxDataSignal => {
            w.raise(Counter::Signal);
            Poll::Ready(Ok(()))
        }
        LinkOp::RxAck => take(w, Counter::Ack, &taken.acks, state),
        // never enqueued for these links (their eager_max is 0), but
        // correct all the same: the ack, then the transfer
        LinkOp::TxAfterAck {
            dst_kind,
            dst_offset,
            src,
        } => match take(w, Counter::Ack, &taken.acks, state) {
            Poll::Ready(Ok(())) => transfer(
                remote(w, taken, *dst_kind, *dst_offset, src.mem().len())
                    .and_then(|dst| copy_mem(&dst, src.mem())),
            ),
            other => other,
        },
        LinkOp::RxDataSignal => take(w, Counter::Signal, &taken.signals, state),
        LinkOp::RxWaitDone => take(w, Counter::Done, &taken.dones, state),
        LinkOp::TxAsync {
            dst_kind,
            dst_offset,
            src,
        } => transfer(
            remote(w, taken, *dst_kind, *dst_offset, src.mem().len())
                .and_then(|dst| copy_mem(&dst, src.mem())),
        ),
        LinkOp::TxWithReduce {
            dst_kind,
            dst_offset,
            src,
            dtype,
            op,
        } => transfer(
            remote(w, taken, *dst_kind, *dst_offset, src.mem().len())
                .and_then(|dst| reduce_mem(&dst, src.mem(), *dtype, *op)),
        ),
        LinkOp::RxAsync {
            src_kind,
            src_offset,
            dst,
        } if op.is_peer_read() => {
            Poll::Ready(read_peer(w, taken, *src_kind, *src_offset, dst.mem()))
        }
        LinkOp::RxReduce {
            src_kind,
            src_offset,
            dst,
            dtype,
            op,
        } => Poll::Ready(read_peer_reduce(
            w,
            taken,
            *src_kind,
            *src_offset,
            dst.mem(),
            *dtype,
            *op,
        )),
        // Write-based: the sender already placed the data, and transfers are
        // synchronous copies, so there is nothing left to wait for.
        LinkOp::RxAsync { .. } | LinkOp::TxWaitDone => Poll::Ready(Ok(())),
        LinkOp::RxParamMem => match take(w, Counter::Desc, &taken.descs, state) {
            Poll::Ready(Ok(())) => {
                let n = state.seq.unwrap_or(1) - 1;
                Poll::Ready(match w.get_desc(n) {
                    Some(theirs) => {
                        take_param_mem(w, taken, theirs.mem);
                        Ok(())
                    }
                    None => Err(HcclError::internal("descriptor signalled but missing")),
                })
            }
            other => other,
        },
        LinkOp::TxDesc(d) => {
            w.put_desc(taken.descs_sent.fetch_add(1, Ordering::Relaxed), d);
            w.raise(Counter::Desc);
            Poll::Ready(Ok(()))
        }
        LinkOp::RxDesc(mine) => match take(w, Counter::Desc, &taken.descs, state) {
            Poll::Ready(Ok(())) => {
                let n = state.seq.unwrap_or(1) - 1;
                Poll::Ready(match w.get_desc(n) {
                    Some(theirs) => mine.check(&theirs, w.peer()).map_err(|e| e.rank(w.local())),
                    None => Err(HcclError::internal("descriptor signalled but missing")),
                })
            }
            other => other,
        },
    }
}
