//! The shared-memory link: ranks that are processes on one host.
//!
//! Each rank owns one segment in `/dev/shm` holding, in order: a header
//! (with the event count its driver parks on), one mailbox slot per
//! possible sender, and its CCL input and output buffers. Peers on the
//! host map the segment. A transfer is a single copy straight into the
//! peer's mapped buffer, followed by a release-increment of a counter in
//! the peer's slot for this sender and a wake of the peer's event count
//! (a process-shared futex, so a parked peer wakes at once). Counters sit
//! on their own 128-byte lines and only grow.
//!
//! Segments are unlinked by their owner as soon as every local peer has
//! mapped them (mappings outlive the name), so a crash after start-up
//! leaves nothing in `/dev/shm`; [`sweep_stale_segments`] removes what a
//! crash during start-up left behind.

mod component;

pub use component::{ShmTransport, SHM_SCORE};

use super::write_based::{self, Counter, Taken, WriteBased};
use super::BOARD_BYTES;
use super::{Link, LinkOp, LinkOpState, OpDesc, PeerProcess};
use crate::error::{HcclError, HcclResult, Result};
use crate::mem::{DeviceMem, MemKind, SHM_PREFIX};
use crate::sync::mapped::{AtomicU32, AtomicU64};
use crate::sync::{Arc, EventCount, Ordering};
use std::task::Poll;

const MAGIC: u32 = 0x4853_484d; // "HSHM"
const HEADER: usize = 4096;
/// Bytes of a mailbox slot: counters and the abort reason, then the
/// descriptor ring (descriptors carry buffer handles: 152 bytes each).
const SLOT: usize = 4096;
const EPOCH_AT: usize = 128;
const MAPPED_AT: usize = 256;
const N_AT: usize = 8;
const CCL_AT: usize = 16;
const PID_AT: usize = 24;
/// How often a waiter checks that the peer process still exists (a
/// `poll` of its pidfd), at most.
const LIVENESS_EVERY_MS: u64 = 250;
/// How long a failed read of a peer's memory waits for the peer's exit to
/// complete before reporting the read's own error.
const DYING_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

// Slot layout: each counter on its own 128-byte line.
const ACK: usize = 0;
const SIGNAL: usize = 128;
const DONE: usize = 256;
const DESC_COUNT: usize = 384;
const ABORTED: usize = 512;
const REASON_LEN: usize = 516;
const REASON: usize = 520;
/// Room for a failure's reason: enough for a lost peer's name and what
/// the failing rank was waiting for.
const REASON_MAX: usize = 500;
const DESC_RING: usize = 1024;
/// Descriptors a sender may be ahead of its receiver: the consistency
/// check and the buffer addresses of direct-read executors, a few ops deep.
const DESC_SLOTS: u64 = 8;
const _: () = assert!(DESC_RING + DESC_SLOTS as usize * OpDesc::WIRE <= SLOT);

fn page_align(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

/// One rank's segment: header, mailbox slots, CCL buffers.
#[derive(Debug, Clone)]
pub struct ShmSegment {
    mem: DeviceMem,
    name: String,
    n_ranks: usize,
    ccl: usize,
}

impl ShmSegment {
    /// (offset of the CCL buffers, total size); the board area sits right
    /// before the CCL buffers, at `data - page_align(BOARD_BYTES)`.
    fn layout(n_ranks: usize, ccl: usize) -> (usize, usize) {
        let data = page_align(HEADER + n_ranks * SLOT) + page_align(BOARD_BYTES);
        (data, data + 2 * ccl)
    }

    /// The owner's board area ([`BOARD_BYTES`], see [`Link::boards`]).
    pub fn board(&self) -> DeviceMem {
        let (data, _) = Self::layout(self.n_ranks, self.ccl);
        self.mem
            .range(data - page_align(BOARD_BYTES), BOARD_BYTES)
            .expect("inside the segment")
    }

    /// Creates the segment `name` for a communicator of `n_ranks` ranks
    /// with CCL buffers of `ccl` bytes each.
    pub fn create(name: &str, n_ranks: usize, ccl: usize) -> Result<ShmSegment> {
        let (_, total) = Self::layout(n_ranks, ccl);
        let mem = DeviceMem::create_shared(name, total)?;
        let seg = ShmSegment {
            mem,
            name: name.to_owned(),
            n_ranks,
            ccl,
        };
        seg.u64_at(N_AT).store(n_ranks as u64, Ordering::Relaxed);
        seg.u64_at(CCL_AT).store(ccl as u64, Ordering::Relaxed);
        seg.u32_at(PID_AT).store(
            rustix::process::getpid().as_raw_nonzero().get() as u32,
            Ordering::Relaxed,
        );
        seg.u32_at(0).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Maps a peer's segment.
    pub fn open(name: &str) -> Result<ShmSegment> {
        let mem = DeviceMem::open_shared(name)?;
        if mem.len() < HEADER {
            return Err(HcclError::internal(format!(
                "shared segment {name} is too small"
            )));
        }
        let mut seg = ShmSegment {
            mem,
            name: name.to_owned(),
            n_ranks: 0,
            ccl: 0,
        };
        if seg.u32_at(0).load(Ordering::Acquire) != MAGIC {
            return Err(HcclError::internal(format!(
                "shared segment {name} is not an hccl-rs segment"
            )));
        }
        seg.n_ranks = seg.u64_at(N_AT).load(Ordering::Relaxed) as usize;
        seg.ccl = seg.u64_at(CCL_AT).load(Ordering::Relaxed) as usize;
        if Self::layout(seg.n_ranks, seg.ccl).1 > seg.mem.len() {
            return Err(HcclError::internal(format!(
                "shared segment {name} has an inconsistent header"
            )));
        }
        Ok(seg)
    }

    /// The segment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the name from `/dev/shm`; existing mappings stay valid.
    pub fn unlink(&self) {
        let _ = rustix::shm::unlink(self.name.as_str());
    }

    /// The CCL input buffer.
    pub fn ccl_input(&self) -> DeviceMem {
        let (data, _) = Self::layout(self.n_ranks, self.ccl);
        self.mem.range(data, self.ccl).expect("inside the segment")
    }

    /// The CCL output buffer.
    pub fn ccl_output(&self) -> DeviceMem {
        let (data, _) = Self::layout(self.n_ranks, self.ccl);
        self.mem
            .range(data + self.ccl, self.ccl)
            .expect("inside the segment")
    }

    /// The event count the owner's driver parks on.
    pub fn waker(&self) -> Result<EventCount> {
        EventCount::on_shared_memory(&self.mem, EPOCH_AT)
    }

    /// The owner's process id.
    pub fn owner_pid(&self) -> u32 {
        self.u32_at(PID_AT).load(Ordering::Relaxed)
    }

    /// Records that one more peer has mapped this segment.
    pub fn mark_mapped(&self) {
        self.u32_at(MAPPED_AT).fetch_add(1, Ordering::AcqRel);
    }

    /// How many peers have mapped this segment.
    pub fn mapped(&self) -> u32 {
        self.u32_at(MAPPED_AT).load(Ordering::Acquire)
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off + 4 <= self.mem.len() && off % 4 == 0);
        // SAFETY: in bounds and aligned (asserted; the mapping is page
        // aligned); the mapping lives as long as `self.mem`; these words
        // are only accessed atomically by every process.
        unsafe { &*(self.mem.ptr().add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.mem.len() && off % 8 == 0);
        // SAFETY: as in `u32_at`, for an 8-aligned 8-byte word.
        unsafe { &*(self.mem.ptr().add(off) as *const AtomicU64) }
    }

    fn slot(&self, sender: u32) -> Result<usize> {
        if (sender as usize) < self.n_ranks {
            Ok(HEADER + sender as usize * SLOT)
        } else {
            Err(HcclError::internal(format!(
                "rank {sender} has no mailbox in segment {} of {} ranks",
                self.name, self.n_ranks
            )))
        }
    }

    fn write_bytes(&self, off: usize, bytes: &[u8]) {
        let dst = self
            .mem
            .range(off, bytes.len())
            .expect("inside the segment");
        // SAFETY: `dst` is inside the mapping; only the slot's owner-sender
        // writes these bytes, before publishing them with a release store.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.ptr(), bytes.len()) }
    }

    fn read_bytes(&self, off: usize, out: &mut [u8]) {
        let src = self.mem.range(off, out.len()).expect("inside the segment");
        // SAFETY: inside the mapping; read after an acquire load that
        // synchronises with the writer's release.
        unsafe { std::ptr::copy_nonoverlapping(src.ptr(), out.as_mut_ptr(), out.len()) }
    }
}

/// Removes `/dev/shm` segments of hccl-rs processes that no longer exist
/// (left by a crash during start-up). Returns how many were removed.
pub fn sweep_stale_segments() -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let prefix = &SHM_PREFIX[1..];
    let mut removed = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive && std::fs::remove_file(e.path()).is_ok() {
            tracing::info!(segment = %name, pid, "removed a shared segment left by a dead process");
            removed += 1;
        }
    }
    removed
}

/// One end of a shared-memory link.
#[derive(Debug)]
pub struct ShmLink {
    local: u32,
    remote: u32,
    mine: ShmSegment,
    theirs: ShmSegment,
    /// My slot in the peer's segment (counters I raise for it).
    out_slot: usize,
    /// The peer's slot in my segment (counters it raises for me).
    in_slot: usize,
    peer_waker: Arc<EventCount>,
    own_waker: Arc<EventCount>,
    taken: Taken,
    /// The peer's process, watched through a pidfd.
    peer: Arc<PeerProcess>,
    /// Milliseconds (since `born`) of the last peer liveness check.
    last_liveness: AtomicU64,
    born: std::time::Instant,
}

impl ShmLink {
    /// `local`'s end of the link to `remote`, whose segment `theirs` this
    /// process has mapped; `peer_waker` is built on that mapping. The
    /// peer's process (the segment's owner) is watched for exit; see
    /// [`with_peer_process`](Self::with_peer_process) to share one watch.
    pub fn new(
        local: u32,
        mine: ShmSegment,
        own_waker: Arc<EventCount>,
        remote: u32,
        theirs: ShmSegment,
        peer_waker: Arc<EventCount>,
    ) -> Result<ShmLink> {
        let peer = Arc::new(PeerProcess::new(remote, theirs.owner_pid(), ""));
        Ok(ShmLink {
            peer,
            out_slot: theirs.slot(local)?,
            in_slot: mine.slot(remote)?,
            local,
            remote,
            mine,
            theirs,
            peer_waker,
            own_waker,
            taken: Taken::default(),
            last_liveness: AtomicU64::new(0),
            born: std::time::Instant::now(),
        })
    }

    /// Watches the peer through `peer` (the framework's watch of that
    /// rank's process, which knows its host) instead of a watch of its own.
    pub fn with_peer_process(mut self, peer: Arc<PeerProcess>) -> ShmLink {
        self.peer = peer;
        self
    }

    /// A peer process that died cannot say so: while waiting on it, check
    /// now and then (at most every [`LIVENESS_EVERY_MS`]) that it still
    /// exists.
    fn check_alive(&self) -> Result<()> {
        let now = self.born.elapsed().as_millis() as u64;
        let last = self.last_liveness.load(Ordering::Relaxed);
        if now < last + LIVENESS_EVERY_MS {
            return Ok(());
        }
        self.last_liveness.store(now, Ordering::Relaxed);
        match self.peer_lost() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A failed read of the peer's memory (cross-memory attach) is, when
    /// the peer is dying, the peer's loss: report it as that, naming the
    /// rank rather than an address of a process.
    fn explain_failed_read(&self, e: HcclError) -> HcclError {
        if e.code() == HcclResult::ESyscall && self.peer.wait_gone(DYING_GRACE) {
            return self
                .peer
                .lost_error_how("exited or was killed while this rank read its memory")
                .rank(self.local);
        }
        e
    }

    fn set_aborted(seg: &ShmSegment, slot: usize, reason: &str) {
        if seg.u32_at(slot + ABORTED).load(Ordering::Acquire) != 0 {
            return;
        }
        let b = reason.as_bytes();
        let n = b.len().min(REASON_MAX);
        seg.write_bytes(slot + REASON, &b[..n]);
        seg.u32_at(slot + REASON_LEN)
            .store(n as u32, Ordering::Relaxed);
        seg.u32_at(slot + ABORTED).store(1, Ordering::Release);
    }
}

fn line(c: Counter) -> usize {
    match c {
        Counter::Ack => ACK,
        Counter::Signal => SIGNAL,
        Counter::Done => DONE,
        Counter::Desc => DESC_COUNT,
    }
}

impl WriteBased for ShmLink {
    fn raise(&self, c: Counter) {
        write_based::raise_word(self.theirs.u64_at(self.out_slot + line(c)));
        self.peer_waker.notify();
    }

    fn raised(&self, c: Counter) -> u64 {
        write_based::raised_word(self.mine.u64_at(self.in_slot + line(c)))
    }

    fn remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<DeviceMem> {
        match kind {
            MemKind::CclInput => self.theirs.ccl_input().range(offset, len),
            MemKind::CclOutput => self.theirs.ccl_output().range(offset, len),
            other => Err(HcclError::internal(format!(
                "the shared-memory link cannot address the peer's {other} buffer"
            ))),
        }
    }

    fn put_desc(&self, n: u64, d: &OpDesc) {
        let at = self.out_slot + DESC_RING + (n % DESC_SLOTS) as usize * OpDesc::WIRE;
        self.theirs.write_bytes(at, &d.to_bytes());
    }

    fn get_desc(&self, n: u64) -> Option<OpDesc> {
        let mut b = [0u8; OpDesc::WIRE];
        self.mine.read_bytes(
            self.in_slot + DESC_RING + (n % DESC_SLOTS) as usize * OpDesc::WIRE,
            &mut b,
        );
        Some(OpDesc::from_bytes(&b))
    }

    fn check(&self) -> Result<()> {
        self.health().and_then(|_| self.check_alive())
    }

    fn local(&self) -> u32 {
        self.local
    }

    fn peer(&self) -> u32 {
        self.remote
    }

    fn peer_pid(&self) -> u32 {
        self.theirs.owner_pid()
    }

    fn maps_peer_param(&self) -> bool {
        true
    }
}

impl Link for ShmLink {
    fn local_rank(&self) -> u32 {
        self.local
    }
    fn remote_rank(&self) -> u32 {
        self.remote
    }
    fn transport(&self) -> &'static str {
        "shm"
    }
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize> {
        match kind {
            MemKind::CclInput | MemKind::CclOutput => Some(self.theirs.ccl),
            // the peer's user buffers of the op, when mapped: their
            // lengths come with each op (checked when the transfer runs)
            MemKind::ParamInput | MemKind::ParamOutput => Some(usize::MAX),
            MemKind::Scratch => None,
        }
    }

    fn reads_peer_param(&self) -> bool {
        crate::mem::cma::permitted()
    }

    fn maps_peer_param(&self) -> bool {
        true
    }

    fn boards(&self) -> Option<(DeviceMem, DeviceMem)> {
        Some((self.mine.board(), self.theirs.board()))
    }

    fn wake_peer(&self) {
        self.peer_waker.notify();
    }

    fn liveness(&self) -> Result<()> {
        WriteBased::check(self)
    }

    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>> {
        match write_based::poll(self, &self.taken, op, state) {
            Poll::Ready(Err(e)) if op.is_peer_read() => {
                Poll::Ready(Err(self.explain_failed_read(e)))
            }
            other => other,
        }
    }

    fn peer_lost(&self) -> Option<HcclError> {
        self.peer
            .is_gone()
            .then(|| self.peer.lost_error().rank(self.local))
    }

    fn close(&self) {
        Self::set_aborted(
            &self.theirs,
            self.out_slot,
            &format!(
                "peer rank {} (process {}) destroyed its communicator",
                self.local,
                crate::mem::cma::own_pid()
            ),
        );
        self.peer_waker.notify();
    }

    fn abort(&self, reason: &str) {
        Self::set_aborted(
            &self.theirs,
            self.out_slot,
            &crate::link::relayed_failure(self.local, reason),
        );
        self.peer_waker.notify();
    }

    fn shutdown(&self, reason: &str) {
        Self::set_aborted(
            &self.mine,
            self.in_slot,
            &format!("communicator aborted on rank {}: {reason}", self.local),
        );
        self.own_waker.notify();
        self.abort(reason);
    }

    fn health(&self) -> Result<()> {
        if self
            .mine
            .u32_at(self.in_slot + ABORTED)
            .load(Ordering::Acquire)
            != 0
        {
            let n = (self
                .mine
                .u32_at(self.in_slot + REASON_LEN)
                .load(Ordering::Relaxed) as usize)
                .min(REASON_MAX);
            let mut b = vec![0u8; n];
            self.mine.read_bytes(self.in_slot + REASON, &mut b);
            return Err(HcclError::remote(String::from_utf8_lossy(&b).into_owned())
                .rank(self.local)
                .peer(self.remote));
        }
        Ok(())
    }
}
