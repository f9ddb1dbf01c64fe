//! The AIV kernel: what it computes ([`AivKind`]) and how it runs
//! ([`AivTask`], the stream's [`Kernel`]): publish this rank's part, fold
//! in every rank's in rank order, wake the peers.

use super::board::{window, AivBoards, Peer, DESC_LEN};
use super::check::{catch_up, check_desc};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::link::Link;
use crate::mem::{DeviceMem, PinnedMem};
use crate::reduce::reduce_in_place;
use crate::stream::Kernel;
use crate::sync::mapped::fence;
use crate::sync::{Arc, Ordering};
use std::task::Poll;

/// Polls between checks that a silent peer is still alive.
pub(super) const CHECK_EVERY: u32 = 256;

/// The element type and reduction a reducing kernel folds with.
type Reduction = (DataType, ReduceOp);

/// What a kernel computes. A *block* is the op's `count` elements; every
/// rank publishes its input (see [`AivKind::publish_len`]) and reads from
/// every rank's entry what its output needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AivKind {
    /// Every rank's output = input₀ op input₁ op … in rank order.
    AllReduce {
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Block q of every rank's output = rank q's input.
    AllGather,
    /// Rank r's output = block r of input₀ op block r of input₁ op …
    ReduceScatter {
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Block q of rank r's output = block r of rank q's input.
    AllToAll,
    /// Every rank's output = the root's input (the root's buffer is both).
    Broadcast {
        /// The root rank.
        root: u32,
    },
    /// The root's output = input₀ op input₁ op … in rank order.
    Reduce {
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
        /// The root rank.
        root: u32,
    },
    /// Rank r's output = block r of the root's input.
    Scatter {
        /// The root rank.
        root: u32,
    },
    /// Block q of the root's output = rank q's input.
    Gather {
        /// The root rank.
        root: u32,
    },
}

impl AivKind {
    /// The op's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            AivKind::AllReduce { .. } => "AllReduce",
            AivKind::AllGather => "AllGather",
            AivKind::ReduceScatter { .. } => "ReduceScatter",
            AivKind::AllToAll => "AllToAll",
            AivKind::Broadcast { .. } => "Broadcast",
            AivKind::Reduce { .. } => "Reduce",
            AivKind::Scatter { .. } => "Scatter",
            AivKind::Gather { .. } => "Gather",
        }
    }

    /// Bytes rank `me` of `p` publishes for blocks of `block` bytes: its
    /// whole input (nothing off the root of a Broadcast or Scatter).
    pub fn publish_len(self, me: u32, p: u32, block: usize) -> usize {
        match self {
            AivKind::AllReduce { .. }
            | AivKind::AllGather
            | AivKind::Reduce { .. }
            | AivKind::Gather { .. } => block,
            AivKind::ReduceScatter { .. } | AivKind::AllToAll => (p as usize).saturating_mul(block),
            AivKind::Broadcast { root } => (me == root) as usize * block,
            AivKind::Scatter { root } => (me == root) as usize * (p as usize).saturating_mul(block),
        }
    }

    /// The most bytes any rank of `p` publishes (what must fit a board
    /// entry): the root's for a rooted op, every rank's alike otherwise.
    pub fn max_publish_len(self, p: u32, block: usize) -> usize {
        let root = match self {
            AivKind::Broadcast { root }
            | AivKind::Reduce { root, .. }
            | AivKind::Scatter { root }
            | AivKind::Gather { root } => root,
            _ => 0,
        };
        self.publish_len(root, p, block)
    }

    /// Bytes of rank `me`'s output the kernel writes (nothing at the root
    /// of a Broadcast, whose buffer is its input, nor off the root of a
    /// Reduce or Gather).
    pub fn output_len(self, me: u32, p: u32, block: usize) -> usize {
        match self {
            AivKind::AllReduce { .. } | AivKind::ReduceScatter { .. } | AivKind::Scatter { .. } => {
                block
            }
            AivKind::AllGather | AivKind::AllToAll => p as usize * block,
            AivKind::Broadcast { root } => (me != root) as usize * block,
            AivKind::Reduce { root, .. } => (me == root) as usize * block,
            AivKind::Gather { root } => (me == root) as usize * p as usize * block,
        }
    }

    /// Whether rank `me` of `p` takes something from every rank's entry
    /// (then its fold reads and checks every entry, and nothing is left
    /// to check later).
    pub(super) fn takes_from_all(self, me: u32, p: u32) -> bool {
        (0..p).all(|q| self.take(me, q, 0).is_some())
    }

    /// Where rank `q`'s entry goes for rank `me`: `(offset in the entry,
    /// offset in the output, reduction)`; `None` when `me` needs nothing
    /// from it.
    fn take(self, me: u32, q: u32, block: usize) -> Option<(usize, usize, Option<Reduction>)> {
        let (me_at, q_at) = (me as usize * block, q as usize * block);
        match self {
            AivKind::AllReduce { dtype, op } => Some((0, 0, Some((dtype, op)))),
            AivKind::AllGather => Some((0, q_at, None)),
            AivKind::ReduceScatter { dtype, op } => Some((me_at, 0, Some((dtype, op)))),
            AivKind::AllToAll => Some((me_at, q_at, None)),
            AivKind::Broadcast { root } => (q == root && me != root).then_some((0, 0, None)),
            AivKind::Reduce { dtype, op, root } => {
                (me == root).then_some((0, 0, Some((dtype, op))))
            }
            AivKind::Scatter { root } => (q == root).then_some((me_at, 0, None)),
            AivKind::Gather { root } => (me == root).then_some((0, q_at, None)),
        }
    }
}

/// A kernel's progress, whoever holds its memory.
#[derive(Clone, Copy, Debug)]
pub(super) struct Progress {
    pub(super) kind: AivKind,
    /// Payload bytes this rank publishes.
    pub(super) len: usize,
    /// Bytes of one block (the op's `count` elements).
    pub(super) block: usize,
    /// This rank's op descriptor, as compared with every peer's.
    pub(super) desc: [u8; DESC_LEN],
    /// The op's sequence number on the boards, once published (0 before).
    pub(super) seq: u64,
    /// The next rank whose entry is folded into the output.
    pub(super) next: u32,
    /// Fruitless polls so far (for the liveness checks).
    pub(super) polls: u32,
    /// Whether this rank takes data from every rank's entry (see
    /// [`AivKind::takes_from_all`]).
    pub(super) takes_all: bool,
}

/// A queued AIV kernel (see the module docs and [`AivLaunch`](super::AivLaunch)).
#[derive(Debug)]
pub struct AivTask {
    pub(super) progress: Progress,
    pub(super) boards: Arc<AivBoards>,
    /// Until published: the payload is copied out at publication.
    pub(super) input: Option<PinnedMem>,
    pub(super) output: PinnedMem,
}

impl AivTask {
    fn ranks(&self) -> u32 {
        self.boards.ranks()
    }

    /// What the kernel is doing, for errors and timeouts.
    pub fn describe(&self) -> String {
        let what = match self.progress.kind {
            AivKind::AllReduce { dtype, op } => format!(
                "AIV AllReduce kernel ({op} of {} bytes of {dtype})",
                self.progress.block
            ),
            kind => format!(
                "AIV {} kernel (blocks of {} bytes)",
                kind.name(),
                self.progress.block
            ),
        };
        let Progress { seq, next, .. } = self.progress;
        if seq == 0 || next >= self.ranks() {
            what
        } else {
            format!("{what} waiting for peer rank {next} (op {seq} on the boards)")
        }
    }

    /// The peer the kernel waits for, if any.
    pub fn waiting_for(&self) -> Option<u32> {
        let Progress { seq, next, .. } = self.progress;
        (seq != 0 && next < self.ranks() && next != self.boards.rank).then_some(next)
    }
}

impl Kernel for AivTask {
    fn poll(&mut self) -> Poll<Result<()>> {
        let r = poll_kernel(
            &mut self.progress,
            &self.boards,
            self.input.as_ref().map(PinnedMem::mem),
            self.output.mem(),
        );
        if self.progress.seq != 0 {
            self.input = None;
        }
        r
    }

    fn describe(&self) -> String {
        AivTask::describe(self)
    }

    /// A mismatch is not relayed: every rank compares every peer's
    /// descriptor with its own, for every op, and finds it itself.
    fn relays_failure(&self, e: &HcclError) -> bool {
        !crate::link::is_inconsistency(e)
    }

    /// The link to the peer the kernel waits for (errors name the peer,
    /// and a failure aborts that link first).
    fn waiting_link(&self) -> Option<&Arc<dyn Link>> {
        self.waiting_for().map(|q| &self.boards.peer(q).link)
    }

    /// Whether someone besides this task holds its boards (then dropping
    /// the task cannot drop a link).
    fn cheap_drop(&self) -> bool {
        Arc::strong_count(&self.boards) > 1
    }

    /// The unpublished input, if any (publishing is the step a kernel may
    /// take ahead).
    fn unstarted_input(&self) -> Option<&DeviceMem> {
        self.input.as_ref().map(PinnedMem::mem)
    }

    /// Whether this kernel's output overlaps `m` (publishing ahead must
    /// not read what an earlier kernel still writes).
    fn writes(&self, m: &DeviceMem) -> bool {
        self.output.mem().overlaps(m)
    }

    fn written(&self) -> Option<std::ops::Range<usize>> {
        let out = self.output.mem();
        Some(out.ptr() as usize..out.ptr() as usize + out.len())
    }

    /// Kernels on the same boards are one group: they take their
    /// sequence numbers from the same board, whichever executor built
    /// them.
    fn group(&self) -> Option<usize> {
        Some(self.boards.group())
    }

    /// Publishes this kernel's part ahead of its turn (see the module
    /// docs), if the boards have room. The caller guarantees that no
    /// earlier queued task writes the input. Returns whether it published.
    fn start_ahead(&mut self) -> bool {
        let Some(input) = &self.input else {
            return false;
        };
        if !publish(&mut self.progress, &self.boards, input.mem()) {
            return false;
        }
        self.input = None;
        wake_readers(&self.progress, &self.boards);
        true
    }

    /// At most a window of ops may be published and not completed:
    /// [`SLOTS`](super::board::SLOTS) small ones, fewer large ones (see
    /// [`window`]).
    fn ahead_limit(&self) -> usize {
        window(self.progress.len) as usize
    }
}

/// Publishes op `last + 1` from `input` if the boards have room.
pub(super) fn publish(pr: &mut Progress, b: &AivBoards, input: &DeviceMem) -> bool {
    let seq = b.own.last_seq() + 1;
    if !b.may_publish(seq, pr.len) {
        return false;
    }
    // SAFETY: the input range is held by the caller and nothing writes it
    // while the kernel runs (the callers say why); it is only read here.
    let input = unsafe { std::slice::from_raw_parts(input.ptr(), pr.len) };
    b.own.publish(seq, &pr.desc, input);
    pr.seq = seq;
    true
}

/// Publishes (when not yet published and the boards have room), folds in
/// what has arrived, checks what it can, and wakes the peers after a
/// publish. `input` (until published) and `output` are the kernel's
/// memory, which nothing else writes while this runs (the callers say
/// why).
pub(super) fn poll_kernel(
    pr: &mut Progress,
    b: &AivBoards,
    input: Option<&DeviceMem>,
    output: &DeviceMem,
) -> Poll<Result<()>> {
    let mut published = false;
    let was_completed = b.completed();
    if pr.seq == 0 {
        let Some(input) = input else {
            return Poll::Ready(Err(HcclError::internal(
                "an unpublished AIV kernel lost its input",
            )));
        };
        published = publish(pr, b, input);
        if !published {
            // A rank (maybe this one, whose own entry a deferred check
            // still reads) has not completed the op whose entry this one
            // reuses. Every op published so far has its output written:
            // check what can be checked, which may free the entry.
            if let Err(e) = catch_up(b, b.own.last_seq()) {
                // the failed op counts as completed: peers may wait on it
                wake_if_completed(b, was_completed);
                return Poll::Ready(Err(e));
            }
            published = publish(pr, b, input);
        }
    }
    let r = if pr.seq == 0 {
        pending(pr, &b.peers)
    } else {
        fold(pr, b, output)
    };
    // Peers are woken after reading theirs, not right after publishing: a
    // wake fences, and a fence waits for the publish to leave this core,
    // which the reads would otherwise overlap. A completion in this poll
    // (the fold's, or a batch of checks before the publish) wakes every
    // peer, which covers the publish too: any peer may wait for it to
    // reuse an entry, not only those that read this rank's.
    if b.completed() != was_completed {
        wake_all(b);
    } else if published {
        wake_readers(pr, b);
    }
    r
}

/// Wakes, after publishing op `pr.seq`, the peers that read this rank's
/// entry of it: those that take data from it, and those waiting for it to
/// finish a check (`Board::check_wait`). A Broadcast's
/// non-root wakes no one unless asked: its publish helps no peer's op.
/// The fence orders the publish before the reads of `check_wait` (one
/// fence for all of them; each wake fences on its own).
fn wake_readers(pr: &Progress, b: &AivBoards) {
    let mut fenced = false;
    for p in &b.peers {
        if pr.kind.take(p.rank, b.rank, 0).is_some() {
            p.link.wake_peer();
            continue;
        }
        if !fenced {
            fence(Ordering::SeqCst);
            fenced = true;
        }
        let w = p.board.check_wait().load(Ordering::Relaxed);
        if w != 0 && w <= pr.seq {
            p.link.wake_peer();
        }
    }
}

/// Wakes the peers when this rank's `completed` moved past `before`: a
/// peer may be parked until it can reuse an entry.
pub(super) fn wake_if_completed(b: &AivBoards, before: u64) {
    if b.completed() != before {
        wake_all(b);
    }
}

/// Wakes every peer.
fn wake_all(b: &AivBoards) {
    for p in &b.peers {
        p.link.wake_peer();
    }
}

/// A fruitless poll waiting on `peers`: every [`CHECK_EVERY`] polls,
/// checks that they are still alive.
pub(super) fn pending<'a>(
    pr: &mut Progress,
    peers: impl IntoIterator<Item = &'a Peer>,
) -> Poll<Result<()>> {
    pending_on(&mut pr.polls, peers)
}

/// [`pending`] for any counter of fruitless polls.
pub(super) fn pending_on<'a>(
    polls: &mut u32,
    peers: impl IntoIterator<Item = &'a Peer>,
) -> Poll<Result<()>> {
    *polls += 1;
    if *polls % CHECK_EVERY == 0 {
        for p in peers {
            if let Err(e) = p.link.liveness() {
                return Poll::Ready(Err(e));
            }
        }
    }
    Poll::Pending
}

/// Folds in, in rank order, every entry this rank takes from (see
/// [`AivKind::take`]) as it appears, then settles the op (see [`settle`]).
/// Only through [`poll_kernel`], which wakes the peers for what it did.
/// A rank waits only for the entries its output needs: the root of a
/// Broadcast or Scatter for none, the other ranks for the root's; the
/// root of a Reduce or Gather for every rank's, the others for none.
fn fold(pr: &mut Progress, b: &AivBoards, output: &DeviceMem) -> Poll<Result<()>> {
    let (me, p, block) = (b.rank, b.ranks(), pr.block);
    // SAFETY: the output range is held by the caller, which guarantees no
    // other access while the kernel runs (see `poll_kernel`); boards are
    // separate memory, so no slice below aliases it.
    let out = unsafe { std::slice::from_raw_parts_mut(output.ptr(), output.len()) };
    while pr.next < p {
        let q = pr.next;
        let Some((from, to, reduce)) = pr.kind.take(me, q, block) else {
            // checked later, with every op's other entries (`settle`)
            pr.next += 1;
            continue;
        };
        let board = if q == me { &b.own } else { &b.peer(q).board };
        // every rank publishes what the kind says; the entry's length
        // follows from the publisher's rank
        let Some(desc) = board.read_desc(pr.seq) else {
            // Meanwhile, check what earlier ops left unchecked: a peer
            // may wait for this rank's `completed` to reuse an entry (its
            // data entries allow fewer ops ahead than the slots this
            // rank's own small publishes needed), maybe before publishing
            // the very entry awaited here (the caller wakes the peers
            // when `completed` moves).
            if b.completed() + 1 < pr.seq {
                if let Err(e) = catch_up(b, pr.seq - 1) {
                    return Poll::Ready(Err(e));
                }
            }
            return pending(pr, [b.peer(q)]);
        };
        if let Err(e) = check_desc(me, q, &pr.desc, &desc) {
            // The op failed and is reported now: record it completed, once
            // every earlier op is (their errors come first), so neither a
            // later kernel nor the synchronize's check reports it again.
            if b.completed() + 1 < pr.seq {
                if let Err(earlier) = catch_up(b, pr.seq - 1) {
                    return Poll::Ready(Err(earlier));
                }
            }
            if b.completed() + 1 == pr.seq {
                b.own.set_done(pr.seq);
            }
            return Poll::Ready(Err(e));
        }
        // the same op as this rank's: the publisher wrote what its rank
        // publishes for this kind, where that length says
        let payload = board.payload(pr.seq, pr.kind.publish_len(q, p, block));
        let (src, dst) = (&payload[from..from + block], &mut out[to..to + block]);
        match reduce {
            // the first rank's block starts the fold (rank order on
            // every rank: bit-identical results)
            Some((dtype, op)) if q != 0 => {
                if let Err(e) = reduce_in_place(dtype, op, dst, src) {
                    return Poll::Ready(Err(e));
                }
            }
            _ => dst.copy_from_slice(src),
        }
        pr.next += 1;
    }
    settle(pr, b)
}

/// Completes op `pr.seq` once its output is written. A rank that took from
/// every entry has compared every descriptor already, and records the op
/// completed if every op before it is. A rank that did not (a root that
/// needs no one's data, a rank that only feeds a root) leaves the entries
/// it skipped to be checked later, in a batch (`check::catch_up`): when
/// its own entry is due for reuse, or at the next synchronize
/// (`settle.rs`). So HCCL's consistency check stays on both sides, while
/// a root runs ahead of its peers and reads none of the lines they are
/// writing.
fn settle(pr: &Progress, b: &AivBoards) -> Poll<Result<()>> {
    if pr.takes_all && b.completed() + 1 == pr.seq {
        b.own.set_done(pr.seq);
    }
    Poll::Ready(Ok(()))
}
