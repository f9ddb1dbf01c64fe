//! The board: one rank's area of memory that every rank of the host reads,
//! its layout, and the protocol over it (publish / complete / reuse).
//!
//! The protocol is written once, over [`BoardWords`] (an entry's flag per
//! op and the counter line, wherever they live), so a loom model can run
//! the very functions the kernels run ([`publish_entry`], [`read_entry`],
//! [`complete`], [`may_reuse`]) over loom's atomics and a small `entries`.
//! [`Board`] is the real thing: the words and the entries inside the
//! mapped board area a link hands out ([`Link::boards`]). Why no update
//! can be lost: `PROTOCOL.md` beside this file.

use crate::error::{HcclError, Result};
use crate::link::{Link, LinkHandle, BOARD_BYTES};
use crate::mem::{DeviceMem, RegionKind};
use crate::sync::mutation::{self, Mutation};
use crate::sync::{mapped, Arc, AtomicU64, Ordering, Word};

/// Header slots per board: how many ops a rank may have published and
/// not yet completed, plus one, when every op carries at most
/// [`INLINE_MAX`] bytes. Ranks outnumbering cores take turns on them:
/// a rank runs up to this many small ops per time slice (measured at 4
/// ranks on 2 cores: 16 slots switched context every 16 ops per rank).
pub const SLOTS: u64 = 256;
/// Bytes of a header slot: a cache line pair holding the flag, the
/// descriptor and a small payload.
const SLOT: usize = 128;
/// Data entries per board: ops carrying more than [`INLINE_MAX`] bytes
/// put their payload in entry `seq % ENTRIES`, so at most this many of
/// them may be published and not completed.
pub const ENTRIES: u64 = 16;
/// Bytes of one data entry. Measured against the mesh and direct
/// executors (processes on 2 cores), the kernel is faster up to 16 KiB
/// per rank at every p tried (e.g. p=4 allgather of 16 KiB per rank 10 µs
/// vs 33 µs, p=2 allreduce of 16 KiB 4.7 vs 5.8 µs) and about even at
/// 32 KiB, where its two copies (publish, read) catch up with the others'
/// handshakes.
const ENTRY: usize = (16 << 10) + 128;
/// The data entries follow the header slots.
const ENTRIES_AT: usize = SLOTS as usize * SLOT;
/// The counter line: newest published op, newest completed op, the op a
/// deferred check waits for.
const COUNTERS_AT: usize = ENTRIES_AT + ENTRIES as usize * ENTRY;
/// Bytes of the board area the layout uses: the slots, the entries and
/// the counter line.
const LAYOUT_BYTES: usize = COUNTERS_AT + 128;
const _: () = assert!(
    LAYOUT_BYTES <= BOARD_BYTES,
    "the board layout must fit the area the links allocate"
);
/// The slot's flag: the op it holds, once complete.
const SEQ_AT: usize = 0;
const DESC_AT: usize = 8;
/// The descriptor fields compared between ranks (`OpDesc` without the
/// buffer addresses).
pub(super) const DESC_LEN: usize = 40;
/// A small payload follows the descriptor in the slot, so an 8-byte
/// payload shares the flag's cache line.
const INLINE_AT: usize = 56;
/// The largest payload carried in the header slot itself.
pub const INLINE_MAX: usize = SLOT - INLINE_AT;
/// The largest payload one rank publishes per op (as before the header
/// slots were split from the data entries, so selection is unchanged).
pub const AIV_MAX_BYTES: usize = ENTRY - INLINE_AT;
const _: () = assert!(AIV_MAX_BYTES <= ENTRY);

/// How many ops of `len` bytes each may be published and not completed:
/// [`SLOTS`] when they fit the header slot, [`ENTRIES`] otherwise.
pub(super) fn window(len: usize) -> u64 {
    if len <= INLINE_MAX {
        SLOTS
    } else {
        ENTRIES
    }
}

// ---------------------------------------------------------------------------
// The protocol, over any words (see PROTOCOL.md).

/// The protocol words of one board, wherever they live.
pub(crate) trait BoardWords {
    /// The kind of atomic word.
    type Word: Word;
    /// The flag of the header slot op `seq` uses (slots are reused
    /// round-robin by sequence number).
    fn flag(&self, seq: u64) -> &Self::Word;
    /// The newest op this board's rank published; only that rank writes it.
    fn published(&self) -> &Self::Word;
    /// The newest op this board's rank completed (read every rank's entry
    /// of); only that rank writes it.
    fn completed(&self) -> &Self::Word;
}

/// The sequence number of the next op its rank publishes on `own`
/// (sequence numbers start at 1: a zeroed flag holds no op).
pub(crate) fn next_seq(own: &impl BoardWords) -> u64 {
    own.published().load(Ordering::Relaxed) + 1
}

/// Publishes op `seq` on this rank's own board: `write` fills the entry
/// (payload and descriptor), then the entry's flag is set with a release
/// store (the flag carries the data), then the counter line's `published`.
/// The caller has checked [`may_reuse`].
pub(crate) fn publish_entry<B: BoardWords>(own: &B, seq: u64, write: impl FnOnce()) {
    write();
    let order = if mutation::active(Mutation::BoardFlagRelaxed) {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };
    own.flag(seq).store(seq, order);
    own.published().store(seq, Ordering::Relaxed);
}

/// Reads op `seq`'s entry on board `b` with `read`, once its rank has
/// published it (acquire load of the flag first); `None` before.
pub(crate) fn read_entry<B: BoardWords, R>(b: &B, seq: u64, read: impl FnOnce() -> R) -> Option<R> {
    if b.flag(seq).load(Ordering::Acquire) != seq {
        return None;
    }
    Some(read())
}

/// Records that this rank completed op `seq` (read every rank's entry of
/// it): a release store after those reads, so a rank that sees it may
/// overwrite the entry.
pub(crate) fn complete<B: BoardWords>(own: &B, seq: u64) {
    own.completed().store(seq, Ordering::Release);
}

/// Whether op `seq` may be published on a board of `entries` entries:
/// every peer has completed the op whose entry it reuses (`seq -
/// entries`). `cache` keeps the smallest completed op over the peers when
/// last read (they only grow, so a stale value is safe, merely
/// pessimistic); the peers' counter lines are read only when it is not
/// enough.
pub(crate) fn may_reuse<'a, B: BoardWords + 'a>(
    seq: u64,
    entries: u64,
    peers: impl IntoIterator<Item = &'a B>,
    cache: &impl Word,
) -> bool {
    let reused = if mutation::active(Mutation::BoardReuseEarly) {
        entries + 1
    } else {
        entries
    };
    let Some(need) = seq.checked_sub(reused) else {
        return true;
    };
    if cache.load(Ordering::Relaxed) >= need {
        return true;
    }
    let min = peers
        .into_iter()
        .map(|p| p.completed().load(Ordering::Acquire))
        .min()
        .unwrap_or(u64::MAX);
    cache.fetch_max(min, Ordering::Relaxed);
    min >= need
}

// ---------------------------------------------------------------------------
// The real board: words and entries in a mapped board area.

/// A view of one board (own or a peer's) in the board area of a link.
#[derive(Clone, Debug)]
pub(super) struct Board(DeviceMem);

impl Board {
    fn new(mem: DeviceMem) -> Result<Board> {
        if mem.len() < LAYOUT_BYTES || mem.ptr() as usize % 128 != 0 {
            return Err(HcclError::internal(format!(
                "an AIV board needs {LAYOUT_BYTES} bytes aligned to 128, got {} bytes",
                mem.len()
            )));
        }
        Ok(Board(mem))
    }

    /// The header slot of op `seq`.
    fn slot(&self, seq: u64) -> *mut u8 {
        // SAFETY: the slot lies inside the board (checked in `new`), so
        // the offset stays inside the same mapping.
        unsafe { self.0.ptr().add((seq % SLOTS) as usize * SLOT) }
    }

    /// Where op `seq`'s payload of `len` bytes lives: in its header slot
    /// when it fits, else in data entry `seq % ENTRIES`.
    fn payload_at(&self, seq: u64, len: usize) -> *mut u8 {
        if len <= INLINE_MAX {
            // SAFETY: inside the slot (INLINE_AT + INLINE_MAX = SLOT).
            unsafe { self.slot(seq).add(INLINE_AT) }
        } else {
            // SAFETY: the entry lies inside the board (checked in `new`).
            unsafe {
                self.0
                    .ptr()
                    .add(ENTRIES_AT + (seq % ENTRIES) as usize * ENTRY)
            }
        }
    }

    /// The word at byte `at` of the board (8-aligned: slots, entries and
    /// the counter line start on 128-byte boundaries).
    fn word(&self, at: usize) -> &mapped::AtomicU64 {
        debug_assert!(at % 8 == 0 && at + 8 <= LAYOUT_BYTES);
        // SAFETY: 8-aligned (the board is 128-aligned, `at` a multiple of
        // 8) and inside the board (checked in `new`), which lives as long
        // as `self.0`; the word is only ever accessed atomically, by every
        // rank mapping the board.
        unsafe { &*(self.0.ptr().add(at) as *const mapped::AtomicU64) }
    }

    /// The newest op this (own) board published.
    pub(super) fn last_seq(&self) -> u64 {
        next_seq(self) - 1
    }

    /// Publishes `payload` and `desc` as op `seq` (see [`publish_entry`]).
    pub(super) fn publish(&self, seq: u64, desc: &[u8; DESC_LEN], payload: &[u8]) {
        let (slot, data) = (self.slot(seq), self.payload_at(seq, payload.len()));
        publish_entry(self, seq, || {
            // SAFETY: inside this rank's own board, which only this rank
            // writes; peers read this slot (and entry) only after seeing
            // `seq` in the slot's flag (stored after this with release),
            // and no rank still reads them: every rank completed the last
            // op that used them (`may_reuse` over the window of the
            // payload's size, checked by the caller).
            unsafe {
                std::ptr::copy_nonoverlapping(desc.as_ptr(), slot.add(DESC_AT), DESC_LEN);
                std::ptr::copy_nonoverlapping(payload.as_ptr(), data, payload.len());
            }
        });
    }

    /// The descriptor of op `seq`, once published.
    pub(super) fn read_desc(&self, seq: u64) -> Option<[u8; DESC_LEN]> {
        let slot = self.slot(seq);
        read_entry(self, seq, || {
            let mut desc = [0u8; DESC_LEN];
            // SAFETY: `read_entry` saw the writer's release of `seq` with an
            // acquire load, so the slot's bytes are complete; the writer
            // does not touch it again before this rank has recorded op
            // `seq` completed (see `publish`).
            unsafe {
                std::ptr::copy_nonoverlapping(slot.add(DESC_AT), desc.as_mut_ptr(), DESC_LEN)
            };
            desc
        })
    }

    /// The payload of op `seq`, `len` bytes, once [`read_desc`](Self::read_desc)
    /// returned its descriptor and the caller checked that it matches its
    /// own (so the publisher wrote exactly `len` bytes, where `len` says).
    pub(super) fn payload(&self, seq: u64, len: usize) -> &[u8] {
        // SAFETY: the caller saw `seq` in the flag with an acquire load
        // (`read_desc`), so the payload is complete and stays untouched
        // until this rank records op `seq` completed; the slice does not
        // outlive the current poll.
        unsafe { std::slice::from_raw_parts(self.payload_at(seq, len), len) }
    }

    /// The op whose peers' entries this (own) board's rank waits for, to
    /// finish a check it left for later (0: none). A publisher wakes the
    /// ranks that take data from it, and those whose `check_wait` names
    /// an op it has published: it stores its flag, fences, then reads
    /// this word; the waiter stores it, fences, then reads the flag once
    /// more before it may park (store buffering: one of them sees the
    /// other). Only the owner writes it.
    pub(super) fn check_wait(&self) -> &mapped::AtomicU64 {
        // the counter line's second half: every publish reads it on every
        // peer, and `published` (written by every publish) shares the
        // first half
        self.word(COUNTERS_AT + 64)
    }

    /// Records that this (own) board's rank completed op `seq`.
    pub(super) fn set_done(&self, seq: u64) {
        complete(self, seq);
    }
}

impl BoardWords for Board {
    type Word = mapped::AtomicU64;

    fn flag(&self, seq: u64) -> &mapped::AtomicU64 {
        self.word((seq % SLOTS) as usize * SLOT + SEQ_AT)
    }

    fn published(&self) -> &mapped::AtomicU64 {
        self.word(COUNTERS_AT)
    }

    fn completed(&self) -> &mapped::AtomicU64 {
        self.word(COUNTERS_AT + 8)
    }
}

/// A peer as a rank's boards see it: its board and the link that wakes it.
#[derive(Debug)]
pub(super) struct Peer {
    pub(super) rank: u32,
    pub(super) board: Board,
    pub(super) link: Arc<dyn Link>,
}

/// The boards of a communicator's ranks as one rank sees them: its own and
/// every peer's, with the links that wake the peers. Built once per
/// executor and shared by its kernels.
#[derive(Debug)]
pub struct AivBoards {
    pub(super) rank: u32,
    pub(super) own: Board,
    /// Every other rank, by rank.
    pub(super) peers: Vec<Peer>,
    /// The smallest completed op over the ranks when last read (see
    /// [`may_reuse`]).
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

    /// Touches every page of the header slots and every data entry's first
    /// page on the own board and every peer board this process maps, so
    /// the first ops do not take a page fault each (in shared memory for
    /// processes). The own board's words are written with an atomic add
    /// of zero, which changes nothing even while another executor's
    /// kernels use the same board.
    ///
    /// A peer's board in this process's private memory is that peer's own
    /// board (ranks that are threads), prefaulted by the peer: touching it
    /// again from every rank is p² reads (25 M at 1,024 simulated ranks).
    fn prefault(&self) {
        let mapped: Vec<&Board> = self
            .peers
            .iter()
            .map(|p| &p.board)
            .filter(|b| !matches!(b.0.region_kind(), RegionKind::Host))
            .collect();
        let per_page = (4096 / SLOT) as u64;
        let slot_pages = (0..SLOTS).step_by(per_page as usize);
        for seq in slot_pages {
            self.own.flag(seq).fetch_add(0, Ordering::Relaxed);
            for b in &mapped {
                b.flag(seq).load(Ordering::Relaxed);
            }
        }
        for e in 0..ENTRIES as usize {
            let at = ENTRIES_AT + e * ENTRY;
            self.own.word(at).fetch_add(0, Ordering::Relaxed);
            for b in &mapped {
                b.word(at).load(Ordering::Relaxed);
            }
        }
    }

    /// Ranks of the communicator.
    pub(super) fn ranks(&self) -> u32 {
        self.peers.len() as u32 + 1
    }

    /// Whether op `seq`, carrying `len` bytes, may be published: every
    /// rank, this one included, has completed the op whose slot (and, for
    /// a payload past [`INLINE_MAX`], data entry) it reuses (see
    /// [`may_reuse`]).
    /// This rank's own `completed` counts because a rank that did not need
    /// a peer's entry checks it later (`kernel::catch_up`), against its
    /// own descriptor in its own entry: that entry must outlive the check.
    pub(super) fn may_publish(&self, seq: u64, len: usize) -> bool {
        may_reuse(
            seq,
            window(len),
            self.peers
                .iter()
                .map(|p| &p.board)
                .chain(std::iter::once(&self.own)),
            &self.peers_done,
        )
    }

    /// The newest op this rank completed: read or checked every rank's
    /// entry of it and of every op before it.
    pub(super) fn completed(&self) -> u64 {
        self.own.completed().load(Ordering::Relaxed)
    }

    /// The group of kernels that share this rank's board (so its sequence
    /// numbers): the board's address, the same for every executor's
    /// boards of one communicator.
    pub(super) fn group(&self) -> usize {
        self.own.0.ptr() as usize
    }

    /// Peer rank `q`.
    pub(super) fn peer(&self, q: u32) -> &Peer {
        &self.peers[if q < self.rank { q } else { q - 1 } as usize]
    }
}
