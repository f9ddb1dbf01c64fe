//! AIV kernels on CPUs: a whole small collective as one stream task.
//!
//! HCCL runs small ops in "AIV mode": one vector-core kernel per op reads
//! and writes the peers' AIV buffers directly, instead of a chain of
//! transfer and signal tasks. Here the AIV buffer is a *board*: a small
//! area per rank (in its shared-memory segment for ranks that are
//! processes, on the heap for ranks that are threads) that every peer on
//! the host can read, reached through [`Link::boards`]. A kernel is one
//! task ([`Stream::aiv_launch`](crate::Stream::aiv_launch)) that
//!
//! 1. publishes this rank's input and op descriptor in its own board's
//!    entry for the op (payload first, then the entry's sequence number
//!    with a release store — the flag carries the data),
//! 2. reads every rank's entry in rank order as it appears and takes
//!    from it what this rank's output needs ([`AivKind`]: AllReduce folds
//!    every input, AllGather copies rank q's input into block q, ...), and
//! 3. wakes the peers after its first round of reads (a wake fences, and
//!    the reads overlap the publish leaving this core).
//!
//! [`AivLaunch`] is a kernel as an executor builds it, borrowing the op's
//! memory; under the inline driver the launch runs it at once and it is
//! queued as an [`AivTask`] only if its peers have not all published yet.
//!
//! Each board has [`ENTRIES`] entries, used round-robin by op sequence
//! number, and a counter line with the newest op this rank published and
//! the newest it completed. A rank publishes op m into the entry of op
//! m − ENTRIES only once every peer has completed that op (read from their
//! counter lines, and cached, so this is a rare read), so no entry is
//! overwritten while a peer may still read it. The descriptor in the entry
//! is compared with this rank's (HCCL's consistency check, at no extra
//! cost).
//!
//! A queued kernel whose input no earlier queued kernel writes may publish
//! *ahead*, before the kernels in front of it complete
//! (`AivTask::publish_ahead`):
//! its folding (which writes its output) still waits for its turn, so
//! stream order holds for everything a user can observe. With ranks as
//! processes on fewer cores than ranks, this lets one time slice of a rank
//! publish several ops, instead of every op needing every rank scheduled in
//! turn.
//!
//! Reducing in rank order on every rank gives every rank bit-identical
//! results, as the ring and mesh executors do.

use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::link::{Link, LinkHandle, OpDesc};
use crate::mem::{DeviceMem, PinnedMem};
use crate::reduce::reduce_in_place;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

/// Entries per board: how many ops a rank may have published and not yet
/// completed, plus one.
pub const ENTRIES: u64 = 16;
/// Bytes of one entry: 16 KiB of payload and the header line. Measured
/// against the mesh and direct executors (processes on 2 cores), the kernel
/// is faster up to 16 KiB per rank at every p tried (e.g. p=4 allgather of
/// 16 KiB per rank 10 µs vs 33 µs, p=2 allreduce of 16 KiB 4.7 vs 5.8 µs)
/// and about even at 32 KiB, where its two copies (publish, read) catch up
/// with the others' handshakes.
const ENTRY: usize = (16 << 10) + 128;
/// The counter line: newest published op, then newest completed op.
const COUNTERS_AT: usize = ENTRIES as usize * ENTRY;
/// Bytes of one rank's board: the entries and the counter line.
pub const BOARD_BYTES: usize = COUNTERS_AT + 128;
const SEQ_AT: usize = 0;
const DESC_AT: usize = 8;
/// The descriptor fields compared between ranks (`OpDesc` without the
/// buffer addresses).
const DESC_LEN: usize = 40;
/// Right after the header, so an 8-byte payload shares the flag's cache
/// line.
const PAYLOAD_AT: usize = 56;
/// The largest payload one rank publishes per op.
pub const AIV_MAX_BYTES: usize = ENTRY - PAYLOAD_AT;
/// Polls between checks that a silent peer is still alive.
const CHECK_EVERY: u32 = 256;
/// Re-reads of a missing peer entry a launch makes before queueing its
/// kernel, when ranks have cores of their own (about a microsecond: a
/// peer running the same loop publishes within that, and fewer than
/// [`CHECK_EVERY`], so no liveness check runs in the launch).
pub const LAUNCH_SPINS: u32 = 200;

/// A view of one board (own or a peer's).
#[derive(Clone, Debug)]
struct Board(DeviceMem);

impl Board {
    fn new(mem: DeviceMem) -> Result<Board> {
        if mem.len() < BOARD_BYTES || mem.ptr() as usize % 128 != 0 {
            return Err(HcclError::internal(format!(
                "an AIV board needs {BOARD_BYTES} bytes aligned to 128, got {} bytes",
                mem.len()
            )));
        }
        Ok(Board(mem))
    }

    fn entry(&self, seq: u64) -> *mut u8 {
        // SAFETY: the entry lies inside the board (checked in `new`).
        unsafe { self.0.ptr().add((seq % ENTRIES) as usize * ENTRY) }
    }

    fn counter(&self, i: usize) -> &AtomicU64 {
        // SAFETY: 8-aligned (the board is 128-aligned, COUNTERS_AT a
        // multiple of 128) and inside the board (checked in `new`), which
        // lives as long as `self.0`; only ever accessed atomically.
        unsafe { &*(self.0.ptr().add(COUNTERS_AT + 8 * i) as *const AtomicU64) }
    }

    /// The newest op this (own) board published; only its rank writes it.
    fn last_seq(&self) -> u64 {
        self.counter(0).load(Ordering::Relaxed)
    }

    /// The newest op this board's rank completed (read every peer's entry
    /// of, so that entry may be reused).
    fn done(&self) -> u64 {
        self.counter(1).load(Ordering::Acquire)
    }

    /// Records that this (own) board's rank completed op `seq`: after its
    /// reads of the peers' entries (release).
    fn set_done(&self, seq: u64) {
        self.counter(1).store(seq, Ordering::Release);
    }

    fn seq_word(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: 8-aligned (boards are 128-aligned, entries 2048 apart)
        // and inside the board, which lives as long as `self.0`; the word
        // is only ever accessed atomically, by every rank.
        unsafe { &*(self.entry(seq).add(SEQ_AT) as *const AtomicU64) }
    }

    /// Publishes `payload` and `desc` as op `seq`.
    fn publish(&self, seq: u64, desc: &[u8; DESC_LEN], payload: &[u8]) {
        let e = self.entry(seq);
        // SAFETY: inside this rank's own board, which only this rank
        // writes; peers read this entry only after seeing `seq` in its
        // flag (stored below with release), and no peer still reads it:
        // every peer completed the last op that used it, seq - ENTRIES
        // (`AivBoards::may_publish`, checked by the caller).
        unsafe {
            std::ptr::copy_nonoverlapping(desc.as_ptr(), e.add(DESC_AT), DESC_LEN);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), e.add(PAYLOAD_AT), payload.len());
        }
        self.seq_word(seq).store(seq, Ordering::Release);
        self.counter(0).store(seq, Ordering::Relaxed);
    }

    /// The descriptor and payload of op `seq`, once published.
    fn read(&self, seq: u64, len: usize) -> Option<([u8; DESC_LEN], &[u8])> {
        if self.seq_word(seq).load(Ordering::Acquire) != seq {
            return None;
        }
        let e = self.entry(seq);
        let mut desc = [0u8; DESC_LEN];
        // SAFETY: the acquire load above saw the writer's release of `seq`,
        // so the entry's bytes are complete; the writer does not touch the
        // entry again before this rank has recorded op `seq` done (see
        // `publish`), and this slice does not outlive the current poll.
        let payload = unsafe {
            std::ptr::copy_nonoverlapping(e.add(DESC_AT), desc.as_mut_ptr(), DESC_LEN);
            std::slice::from_raw_parts(e.add(PAYLOAD_AT), len)
        };
        Some((desc, payload))
    }
}

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

#[derive(Debug)]
struct Peer {
    rank: u32,
    board: Board,
    link: Arc<dyn Link>,
}

/// The boards of a communicator's ranks as one rank sees them: its own and
/// every peer's, with the links that wake the peers. Built once per
/// executor and shared by its kernels.
#[derive(Debug)]
pub struct AivBoards {
    rank: u32,
    own: Board,
    /// Every other rank, by rank.
    peers: Vec<Peer>,
    /// The smallest completed op over the peers when last read (they only
    /// grow, so a stale value is safe, merely pessimistic).
    peers_done: AtomicU64,
}

impl AivBoards {
    /// The boards reached through `links`: one link to every other rank of
    /// the communicator, each able to reach the boards ([`Link::boards`]).
    pub fn new(links: &[LinkHandle]) -> Result<Arc<AivBoards>> {
        let Some(first) = links.first() else {
            return Err(HcclError::para("an AIV kernel needs at least one peer"));
        };
        let rank = first.local_rank();
        let mut own = None;
        let mut peers = Vec::with_capacity(links.len());
        for l in links {
            let (mine, theirs) = l.link().boards().ok_or_else(|| {
                HcclError::not_support(format!(
                    "the {} link to rank {} cannot reach AIV boards",
                    l.link().transport(),
                    l.remote_rank()
                ))
            })?;
            own.get_or_insert(mine);
            peers.push(Peer {
                rank: l.remote_rank(),
                board: Board::new(theirs)?,
                link: l.link().clone(),
            });
        }
        peers.sort_by_key(|p| p.rank);
        let p = peers.len() as u32 + 1;
        let expected = (0..p).filter(|&q| q != rank);
        if peers.len() != expected.clone().count()
            || peers.iter().zip(expected).any(|(a, q)| a.rank != q)
        {
            return Err(HcclError::para(format!(
                "an AIV kernel needs one link to every other rank of {p}; rank {rank} has links to {:?}",
                peers.iter().map(|p| p.rank).collect::<Vec<_>>()
            )));
        }
        let boards = AivBoards {
            rank,
            own: Board::new(own.expect("at least one link"))?,
            peers,
            peers_done: AtomicU64::new(0),
        };
        boards.prefault();
        Ok(Arc::new(boards))
    }

    /// Touches every entry's first page on every board, so the first ops
    /// do not take a page fault each (entries are 16 KiB apart: one page
    /// per entry per board, in shared memory for processes). The own
    /// board's words are written with an atomic add of zero, which changes
    /// nothing even while another executor's kernels use the same board.
    fn prefault(&self) {
        for seq in 0..ENTRIES {
            self.own.seq_word(seq).fetch_add(0, Ordering::Relaxed);
            for p in &self.peers {
                p.board.seq_word(seq).load(Ordering::Relaxed);
            }
        }
    }

    fn ranks(&self) -> u32 {
        self.peers.len() as u32 + 1
    }

    /// Whether op `seq` may be published: every peer has completed the op
    /// whose entry it reuses. Reads the peers' counter lines only when the
    /// cached minimum is not enough.
    fn may_publish(&self, seq: u64) -> bool {
        let Some(need) = seq.checked_sub(ENTRIES) else {
            return true;
        };
        if self.peers_done.load(Ordering::Relaxed) >= need {
            return true;
        }
        let min = self
            .peers
            .iter()
            .map(|p| p.board.done())
            .min()
            .unwrap_or(u64::MAX);
        self.peers_done.fetch_max(min, Ordering::Relaxed);
        min >= need
    }

    fn peer(&self, q: u32) -> &Peer {
        &self.peers[if q < self.rank { q } else { q - 1 } as usize]
    }
}

/// A kernel's progress, whoever holds its memory.
#[derive(Clone, Copy, Debug)]
struct Progress {
    kind: AivKind,
    /// Payload bytes this rank publishes.
    len: usize,
    /// Bytes of one block (the op's `count` elements).
    block: usize,
    desc: [u8; DESC_LEN],
    /// The op's sequence number on the boards, once published.
    seq: u64,
    /// The next rank whose entry is folded into the output.
    next: u32,
    polls: u32,
}

/// One small collective, built by an executor and handed to
/// [`Stream::aiv_launch`](crate::Stream::aiv_launch), which runs it at once
/// when it can (see there) and otherwise queues it as an [`AivTask`]. It
/// borrows the op's memory: a kernel that completes inside the launch
/// never touches a reference count.
#[derive(Debug)]
pub struct AivLaunch<'a> {
    progress: Progress,
    boards: &'a Arc<AivBoards>,
    input: &'a DeviceMem,
    output: &'a DeviceMem,
}

impl<'a> AivLaunch<'a> {
    /// A kernel of `kind` over blocks of `block` bytes: `input` is what
    /// this rank publishes and `output` what it writes, exactly
    /// [`AivKind::publish_len`] and [`AivKind::output_len`] bytes (at most
    /// [`AIV_MAX_BYTES`] published). `desc` is this rank's op descriptor,
    /// compared with every peer's.
    pub fn new(
        kind: AivKind,
        boards: &'a Arc<AivBoards>,
        (input, output): (&'a DeviceMem, &'a DeviceMem),
        block: usize,
        desc: &OpDesc,
    ) -> Result<AivLaunch<'a>> {
        let (me, p) = (boards.rank, boards.ranks());
        let what = kind.name();
        if let AivKind::AllReduce { dtype, .. }
        | AivKind::ReduceScatter { dtype, .. }
        | AivKind::Reduce { dtype, .. } = kind
        {
            if block % dtype.size() != 0 {
                return Err(HcclError::para(format!(
                    "AIV {what}: a block of {block} bytes is not a whole number of {dtype} elements"
                )));
            }
        }
        for (name, got, want) in [
            ("input", input.len(), kind.publish_len(me, p, block)),
            ("output", output.len(), kind.output_len(me, p, block)),
        ] {
            if got != want {
                return Err(HcclError::para(format!(
                    "AIV {what} on rank {me} of {p}: the {name} is {got} bytes, not {want} \
                     (blocks of {block} bytes)"
                )));
            }
        }
        if input.len() > AIV_MAX_BYTES {
            return Err(HcclError::para(format!(
                "an AIV kernel carries at most {AIV_MAX_BYTES} bytes per rank, not {}",
                input.len()
            )));
        }
        let mut d = [0u8; DESC_LEN];
        d.copy_from_slice(&desc.to_bytes()[..DESC_LEN]);
        Ok(AivLaunch {
            progress: Progress {
                kind,
                len: input.len(),
                block,
                desc: d,
                seq: 0,
                next: 0,
                polls: 0,
            },
            boards,
            input,
            output,
        })
    }

    /// Advances the kernel in the launching thread. The caller holds the
    /// device's driver lock with nothing queued on the stream, so no task
    /// of the stream runs concurrently, and the launching call holds the
    /// memory.
    pub(crate) fn poll(&mut self) -> Poll<Result<()>> {
        poll_kernel(
            &mut self.progress,
            self.boards,
            Some(self.input),
            self.output,
        )
    }

    /// Like [`poll`](Self::poll), then, once published, re-reads the
    /// missing peers' entries up to `spins` more times before giving up.
    /// A rank with a core of its own usually sees a peer publish within a
    /// few hundred nanoseconds, and completing the kernel here is cheaper
    /// than queueing it (a box, pins, and a later poll from the queue).
    pub(crate) fn poll_spinning(&mut self, spins: u32) -> Poll<Result<()>> {
        let mut r = self.poll();
        let mut left = spins;
        while r.is_pending() && self.progress.seq != 0 && left > 0 {
            std::hint::spin_loop();
            r = fold(&mut self.progress, self.boards, self.output);
            left -= 1;
        }
        r
    }

    /// The queued form: holds its memory pinned (the input only until it
    /// is published), keeps its progress.
    pub(crate) fn into_task(self) -> AivTask {
        AivTask {
            input: (self.progress.seq == 0).then(|| self.input.pin()),
            progress: self.progress,
            boards: self.boards.clone(),
            output: self.output.pin(),
        }
    }
}

/// A queued AIV kernel (see the module docs and [`AivLaunch`]).
#[derive(Debug)]
pub struct AivTask {
    progress: Progress,
    boards: Arc<AivBoards>,
    /// Until published: the payload is copied out at publication.
    input: Option<PinnedMem>,
    output: PinnedMem,
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

    /// Whether someone besides this task holds its boards (then dropping
    /// the task cannot drop a link).
    pub(crate) fn boards_shared(&self) -> bool {
        Arc::strong_count(&self.boards) > 1
    }

    /// The peer the kernel waits for, if any.
    pub fn waiting_for(&self) -> Option<u32> {
        let Progress { seq, next, .. } = self.progress;
        (seq != 0 && next < self.ranks() && next != self.boards.rank).then_some(next)
    }

    /// The link to the peer the kernel waits for (errors name the peer,
    /// and a failure aborts that link first).
    pub(crate) fn waiting_link(&self) -> Option<&Arc<dyn Link>> {
        self.waiting_for().map(|q| &self.boards.peer(q).link)
    }

    /// Advances the kernel. Its memory is pinned by this task, and no
    /// other task of its stream runs while it does.
    pub(crate) fn poll(&mut self) -> Poll<Result<()>> {
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

    /// Whether this kernel's output overlaps `m` (publishing ahead must
    /// not read what an earlier kernel still writes).
    pub(crate) fn writes(&self, m: &DeviceMem) -> bool {
        self.output.mem().overlaps(m)
    }

    /// The unpublished input, if any.
    pub(crate) fn unpublished_input(&self) -> Option<&DeviceMem> {
        self.input.as_ref().map(PinnedMem::mem)
    }

    /// Whether `other` runs on the same boards.
    pub(crate) fn same_boards(&self, other: &AivTask) -> bool {
        Arc::ptr_eq(&self.boards, &other.boards)
    }

    /// Publishes this kernel's part ahead of its turn (see the module
    /// docs), if the boards have room. The caller guarantees that no
    /// earlier queued task writes the input. Returns whether it published.
    pub(crate) fn publish_ahead(&mut self) -> bool {
        let Some(input) = &self.input else {
            return false;
        };
        if !publish(&mut self.progress, &self.boards, input.mem()) {
            return false;
        }
        self.input = None;
        for p in &self.boards.peers {
            p.link.wake_peer();
        }
        true
    }
}

/// Publishes op `last + 1` from `input` if the boards have room.
fn publish(pr: &mut Progress, b: &AivBoards, input: &DeviceMem) -> bool {
    let seq = b.own.last_seq() + 1;
    if !b.may_publish(seq) {
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
/// what has arrived, and wakes the peers after a publish. `input` (until
/// published) and `output` are the kernel's memory, which nothing else
/// writes while this runs (the callers say why).
fn poll_kernel(
    pr: &mut Progress,
    b: &AivBoards,
    input: Option<&DeviceMem>,
    output: &DeviceMem,
) -> Poll<Result<()>> {
    let mut published = false;
    if pr.seq == 0 {
        let Some(input) = input else {
            return Poll::Ready(Err(HcclError::internal(
                "an unpublished AIV kernel lost its input",
            )));
        };
        if !publish(pr, b, input) {
            // a peer has not completed the op whose entry this one reuses
            return pending(pr, &b.peers);
        }
        published = true;
    }
    let r = fold(pr, b, output);
    // Peers are woken after reading theirs, not right after publishing: a
    // wake fences, and a fence waits for the publish to leave this core,
    // which the reads would otherwise overlap.
    if published {
        for p in &b.peers {
            p.link.wake_peer();
        }
    }
    r
}

/// A fruitless poll waiting on `peers`: every [`CHECK_EVERY`] polls,
/// checks that they are still alive.
fn pending<'a>(pr: &mut Progress, peers: impl IntoIterator<Item = &'a Peer>) -> Poll<Result<()>> {
    pr.polls += 1;
    if pr.polls % CHECK_EVERY == 0 {
        for p in peers {
            if let Err(e) = p.link.liveness() {
                return Poll::Ready(Err(e));
            }
        }
    }
    Poll::Pending
}

/// Whether two descriptors are equal, as five word compares (an array
/// comparison calls `memcmp`, a measurable share of an 8-byte op).
fn same_desc(a: &[u8; DESC_LEN], b: &[u8; DESC_LEN]) -> bool {
    let word = |d: &[u8; DESC_LEN], i: usize| {
        u64::from_ne_bytes(d[8 * i..8 * i + 8].try_into().expect("8 bytes"))
    };
    (0..DESC_LEN / 8).all(|i| word(a, i) == word(b, i))
}

/// Folds in every entry published so far, in rank order.
fn fold(pr: &mut Progress, b: &AivBoards, output: &DeviceMem) -> Poll<Result<()>> {
    let (me, p, block) = (b.rank, b.ranks(), pr.block);
    // SAFETY: the output range is held by the caller, which guarantees no
    // other access while the kernel runs (see `poll_kernel`); boards are
    // separate memory, so no slice below aliases it.
    let out = unsafe { std::slice::from_raw_parts_mut(output.ptr(), output.len()) };
    while pr.next < p {
        let q = pr.next;
        let board = if q == me { &b.own } else { &b.peer(q).board };
        // every rank publishes what the kind says; the entry's length
        // follows from the publisher's rank
        let Some((desc, payload)) = board.read(pr.seq, pr.kind.publish_len(q, p, block)) else {
            return pending(pr, [b.peer(q)]);
        };
        if !same_desc(&desc, &pr.desc) {
            let mut theirs = [0u8; OpDesc::WIRE];
            theirs[..DESC_LEN].copy_from_slice(&desc);
            let mut mine = [0u8; OpDesc::WIRE];
            mine[..DESC_LEN].copy_from_slice(&pr.desc);
            let e = OpDesc::from_bytes(&mine)
                .check(&OpDesc::from_bytes(&theirs), q)
                .err()
                .unwrap_or_else(|| HcclError::internal("AIV descriptors differ"));
            return Poll::Ready(Err(e.rank(me)));
        }
        if let Some((from, to, reduce)) = pr.kind.take(me, q, block) {
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
        }
        pr.next += 1;
    }
    b.own.set_done(pr.seq);
    Poll::Ready(Ok(()))
}
