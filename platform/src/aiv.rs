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
//! 2. wakes the peers, and
//! 3. reads every rank's entry in rank order as it appears and folds it
//!    into the output.
//!
//! Each board has two entries, used alternately. Every rank publishes in
//! every op and completes an op only after reading every peer's entry for
//! it, so when a rank publishes op n + 2 into the entry of op n, every peer
//! has already published op n + 1, i.e. finished reading op n: no
//! acknowledgement is needed. The descriptor in the entry is compared with
//! this rank's (HCCL's consistency check, at no extra cost).
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

/// Bytes of one rank's board: two entries.
pub const BOARD_BYTES: usize = 2 * ENTRY;
const ENTRY: usize = 2048;
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
        unsafe { self.0.ptr().add((seq % 2) as usize * ENTRY) }
    }

    fn seq_word(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: 8-aligned (boards are 128-aligned, entries 2048 apart)
        // and inside the board, which lives as long as `self.0`; the word
        // is only ever accessed atomically, by every rank.
        unsafe { &*(self.entry(seq).add(SEQ_AT) as *const AtomicU64) }
    }

    /// The newest sequence number published on this (own) board.
    fn last_seq(&self) -> u64 {
        self.seq_word(0)
            .load(Ordering::Relaxed)
            .max(self.seq_word(1).load(Ordering::Relaxed))
    }

    /// Publishes `payload` and `desc` as op `seq`.
    fn publish(&self, seq: u64, desc: &[u8; DESC_LEN], payload: &[u8]) {
        let e = self.entry(seq);
        // SAFETY: inside this rank's own board, which only this rank
        // writes; peers read this entry only after seeing `seq` in its
        // flag (stored below with release), and no peer still reads it:
        // the last op that used it (seq - 2) was completed by every peer
        // before it published seq - 1, which this rank has read.
        unsafe {
            std::ptr::copy_nonoverlapping(desc.as_ptr(), e.add(DESC_AT), DESC_LEN);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), e.add(PAYLOAD_AT), payload.len());
        }
        self.seq_word(seq).store(seq, Ordering::Release);
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
        // entry again before this rank has published seq + 1 (see
        // `publish`), and this slice does not outlive the current poll.
        let payload = unsafe {
            std::ptr::copy_nonoverlapping(e.add(DESC_AT), desc.as_mut_ptr(), DESC_LEN);
            std::slice::from_raw_parts(e.add(PAYLOAD_AT), len)
        };
        Some((desc, payload))
    }
}

/// What a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AivKind {
    /// Every rank's output = input₀ op input₁ op … in rank order.
    AllReduce {
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
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
        Ok(Arc::new(AivBoards {
            rank,
            own: Board::new(own.expect("at least one link"))?,
            peers,
        }))
    }

    fn ranks(&self) -> u32 {
        self.peers.len() as u32 + 1
    }

    fn peer(&self, q: u32) -> &Peer {
        &self.peers[if q < self.rank { q } else { q - 1 } as usize]
    }
}

/// A kernel's progress, whoever holds its memory.
#[derive(Clone, Copy, Debug)]
struct Progress {
    kind: AivKind,
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
    /// An AllReduce of `input` into `output` (equal lengths, at most
    /// [`AIV_MAX_BYTES`]) over `boards`. `desc` is this rank's op
    /// descriptor, compared with every peer's.
    pub fn all_reduce(
        boards: &'a Arc<AivBoards>,
        input: &'a DeviceMem,
        output: &'a DeviceMem,
        dtype: DataType,
        op: ReduceOp,
        desc: &OpDesc,
    ) -> Result<AivLaunch<'a>> {
        if input.len() != output.len() || input.len() % dtype.size() != 0 {
            return Err(HcclError::para(format!(
                "AIV AllReduce: input of {} bytes and output of {} bytes must be equal multiples of {} ({dtype})",
                input.len(),
                output.len(),
                dtype.size()
            )));
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
                kind: AivKind::AllReduce { dtype, op },
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
    /// stream's queue lock with nothing queued, so no task of the stream
    /// runs concurrently, and the launching call holds the memory.
    pub(crate) fn poll(&mut self) -> Poll<Result<()>> {
        poll_kernel(&mut self.progress, self.boards, self.input, self.output)
    }

    /// The queued form: holds its memory pinned, keeps its progress.
    pub(crate) fn into_task(self) -> AivTask {
        AivTask {
            progress: self.progress,
            boards: self.boards.clone(),
            input: self.input.pin(),
            output: self.output.pin(),
        }
    }
}

/// A queued AIV kernel (see the module docs and [`AivLaunch`]).
#[derive(Debug)]
pub struct AivTask {
    progress: Progress,
    boards: Arc<AivBoards>,
    input: PinnedMem,
    output: PinnedMem,
}

impl AivTask {
    fn ranks(&self) -> u32 {
        self.boards.ranks()
    }

    /// What the kernel is doing, for errors and timeouts.
    pub fn describe(&self) -> String {
        let AivKind::AllReduce { dtype, op } = self.progress.kind;
        let what = format!(
            "AIV AllReduce kernel ({op} of {} bytes of {dtype})",
            self.input.mem().len()
        );
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
        poll_kernel(
            &mut self.progress,
            &self.boards,
            self.input.mem(),
            self.output.mem(),
        )
    }
}

/// Publishes (first poll), folds in what has arrived, and wakes the peers
/// after a publish. `input` and `output` are the kernel's memory, which
/// nothing else accesses while this runs (the callers say why).
fn poll_kernel(
    pr: &mut Progress,
    b: &AivBoards,
    input: &DeviceMem,
    output: &DeviceMem,
) -> Poll<Result<()>> {
    let len = input.len();
    let published = pr.seq == 0;
    if published {
        let seq = b.own.last_seq() + 1;
        // SAFETY: the input range is held by the caller (see above) and
        // only read here.
        let input = unsafe { std::slice::from_raw_parts(input.ptr(), len) };
        b.own.publish(seq, &pr.desc, input);
        pr.seq = seq;
    }
    let r = fold(pr, b, output, len);
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

/// Folds in every entry published so far, in rank order.
fn fold(pr: &mut Progress, b: &AivBoards, output: &DeviceMem, len: usize) -> Poll<Result<()>> {
    // SAFETY: the output range is held by the caller, which guarantees no
    // other access while the kernel runs (see `poll_kernel`); boards are
    // separate memory, so no slice below aliases it.
    let out = unsafe { std::slice::from_raw_parts_mut(output.ptr(), len) };
    while pr.next < b.ranks() {
        let q = pr.next;
        let board = if q == b.rank {
            &b.own
        } else {
            &b.peer(q).board
        };
        let Some((desc, payload)) = board.read(pr.seq, len) else {
            pr.polls += 1;
            if pr.polls % CHECK_EVERY == 0 {
                if let Err(e) = b.peer(q).link.liveness() {
                    return Poll::Ready(Err(e));
                }
            }
            return Poll::Pending;
        };
        if desc != pr.desc {
            let mut theirs = [0u8; OpDesc::WIRE];
            theirs[..DESC_LEN].copy_from_slice(&desc);
            let mut mine = [0u8; OpDesc::WIRE];
            mine[..DESC_LEN].copy_from_slice(&pr.desc);
            let e = OpDesc::from_bytes(&mine)
                .check(&OpDesc::from_bytes(&theirs), q)
                .err()
                .unwrap_or_else(|| HcclError::internal("AIV descriptors differ"));
            return Poll::Ready(Err(e.rank(b.rank)));
        }
        let AivKind::AllReduce { dtype, op } = pr.kind;
        if q == 0 {
            out.copy_from_slice(payload);
        } else if let Err(e) = reduce_in_place(dtype, op, out, payload) {
            return Poll::Ready(Err(e));
        }
        pr.next += 1;
    }
    Poll::Ready(Ok(()))
}
