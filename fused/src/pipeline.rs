//! The window pipeline's machinery: a symmetric window per communicator
//! (a header of counters, then the blocks), the counters ranks publish
//! progress through, waiting on a peer's counter (spin, then park on this
//! rank's event count; a dead peer is named, an aborting peer ends the
//! wait), and the scratch buffers ops reuse.
//!
//! Counters only grow: a block's counter value is `base + block + 1`,
//! where `base` advances by the op's block count after every op (the same
//! on every rank, the shapes being agreed), so nothing is reset between
//! ops.

use hccl_adapter::{DeviceMem, HcclComm, SymWindow};
use hccl_platform::{EventCount, HcclError, PeerProcess, Result, SharedCounter};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Bytes before the blocks: the event count, then one cache line per
/// counter (their writers differ in when they write).
pub(crate) const HEADER: usize = 4096;
const EVENT_AT: usize = 0;
const PRODUCED_AT: usize = 64;
const CONSUMED_AT: usize = 128;
const REDUCED_AT: usize = 192;
const ABORT_AT: usize = 256;

/// How long a parked waiter sleeps before it looks at its peer's process
/// and abort word again.
const PARK_SLICE: Duration = Duration::from_millis(20);
/// How long a waiter spins before parking, when the host has a core per
/// rank (spinning with more ranks than cores steals the awaited peer's
/// core).
const SPIN: Duration = Duration::from_micros(50);

/// A counter every rank has in its window header.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    /// Blocks this rank has published (computed into its window).
    Produced,
    /// Blocks this rank has finished reading from its peers.
    Consumed,
    /// Blocks this rank has reduced (MatMul+AllReduce's second phase).
    Reduced,
}

/// Every rank's window as this rank reaches it, and the words in it.
pub(crate) struct Workspace {
    win: SymWindow,
    me: usize,
    mems: Vec<DeviceMem>,
    events: Vec<EventCount>,
    counters: Vec<[SharedCounter; 3]>,
    aborts: Vec<SharedCounter>,
    /// Block counters of earlier ops on this window.
    pub base: u64,
    /// Fused ops run on this window (the abort word names the op).
    pub ops: u64,
}

impl Workspace {
    /// Registers a window of `HEADER + data` bytes on every rank
    /// (collective: every rank asks for the same size, the shapes being
    /// agreed).
    pub(crate) fn open(comm: &HcclComm, data: usize) -> Result<Workspace> {
        let local = DeviceMem::alloc_shareable(HEADER + data)?;
        let win = comm.sym_win_register(&local)?;
        let me = comm.rank() as usize;
        let mut mems = Vec::new();
        for q in 0..comm.size() {
            mems.push(win.peer_mem(q)?);
        }
        let mut events = Vec::new();
        let mut counters = Vec::new();
        let mut aborts = Vec::new();
        for m in &mems {
            events.push(EventCount::on_shared_memory(m, EVENT_AT)?);
            counters.push([
                SharedCounter::on_memory(m, PRODUCED_AT)?,
                SharedCounter::on_memory(m, CONSUMED_AT)?,
                SharedCounter::on_memory(m, REDUCED_AT)?,
            ]);
            aborts.push(SharedCounter::on_memory(m, ABORT_AT)?);
        }
        Ok(Workspace {
            win,
            me,
            mems,
            events,
            counters,
            aborts,
            base: 0,
            ops: 0,
        })
    }

    /// Bytes of blocks each rank's window holds.
    pub(crate) fn capacity(&self) -> usize {
        self.win.size() - HEADER
    }

    /// Deregisters the window (collective).
    pub(crate) fn close(self, comm: &HcclComm) -> Result<()> {
        comm.sym_win_deregister(&self.win)
    }

    /// `len` bytes at `offset` of rank `q`'s block area.
    pub(crate) fn data(&self, q: usize, offset: usize, len: usize) -> Result<DeviceMem> {
        self.mems[q].range(HEADER + offset, len)
    }

    fn counter(&self, q: usize, c: Counter) -> &SharedCounter {
        &self.counters[q][c as usize]
    }

    /// Publishes this rank's counter `c` as `value` and wakes the peers
    /// that may wait for it.
    pub(crate) fn publish(&self, c: Counter, value: u64) {
        self.counter(self.me, c).store(value);
        self.wake_peers();
    }

    fn wake_peers(&self) {
        for (q, ev) in self.events.iter().enumerate() {
            if q != self.me {
                ev.notify();
            }
        }
    }

    /// Tells every peer waiting in this op that this rank gave up.
    pub(crate) fn abort(&self) {
        self.aborts[self.me].store(self.ops + 1);
        self.wake_peers();
    }
}

/// Waits of one op on one workspace: who the peers are, the deadline,
/// and the time spent waiting.
pub(crate) struct Waits<'a> {
    pub ws: &'a Workspace,
    pub op: &'static str,
    /// By rank: the process to watch (`None` for this process's threads).
    pub watch: Vec<Option<PeerProcess>>,
    pub deadline: Option<Instant>,
    pub spin: bool,
    /// Time spent waiting for peers in this op.
    pub waited: Duration,
}

impl Waits<'_> {
    /// Returns once rank `q`'s counter `c` reaches `target`. Errors: `q`
    /// exited (`HCCL_E_REMOTE` naming it), `q` or another rank gave up
    /// this op (`HCCL_E_REMOTE`), the op's deadline passed
    /// (`HCCL_E_TIMEOUT`).
    pub(crate) fn wait(&mut self, q: usize, c: Counter, target: u64) -> Result<()> {
        let ws = self.ws;
        let ctr = ws.counter(q, c);
        if ctr.load() >= target {
            return Ok(());
        }
        let t0 = Instant::now();
        if self.spin {
            while t0.elapsed() < SPIN {
                if ctr.load() >= target {
                    self.waited += t0.elapsed();
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        loop {
            let w = ws.events[ws.me].prepare_wait();
            if ctr.load() >= target {
                break;
            }
            w.wait_until(Instant::now() + PARK_SLICE);
            if ctr.load() >= target {
                break;
            }
            self.check(q, c, target)?;
        }
        self.waited += t0.elapsed();
        Ok(())
    }

    fn check(&self, q: usize, c: Counter, target: u64) -> Result<()> {
        let ws = self.ws;
        let me = ws.me as u32;
        if let Some(peer) = &self.watch[q] {
            if peer.is_gone() {
                return Err(HcclError::remote(format!(
                    "{}: {} exited while rank {me} waited for its block {} ({c:?})",
                    self.op,
                    peer.describe(),
                    target.saturating_sub(ws.base)
                ))
                .rank(me)
                .peer(q as u32));
            }
        }
        for (r, a) in ws.aborts.iter().enumerate() {
            if r != ws.me && a.load() == ws.ops + 1 {
                let who = self.watch[r]
                    .as_ref()
                    .map_or_else(|| format!("rank {r}"), |p| p.describe());
                return Err(HcclError::remote(format!(
                    "{}: {who} gave up the op (see its error)",
                    self.op
                ))
                .rank(me)
                .peer(r as u32));
            }
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(HcclError::timeout(format!(
                "{}: rank {me} waited longer than HCCL_EXEC_TIMEOUT for rank {q}'s block {} \
                 ({c:?})",
                self.op,
                target.saturating_sub(ws.base)
            ))
            .rank(me)
            .peer(q as u32));
        }
        Ok(())
    }
}

/// Buffers an op reuses across calls, by purpose and index, grown as
/// needed (a baseline that allocated per call would time page faults).
#[derive(Default)]
pub(crate) struct Scratch {
    bufs: HashMap<(&'static str, usize), DeviceMem>,
}

impl Scratch {
    /// At least `bytes` bytes for `what` (the same buffer on the next
    /// call if it is big enough).
    pub(crate) fn get(&mut self, what: &'static str, bytes: usize) -> Result<DeviceMem> {
        self.get_nth(what, 0, bytes)
    }

    fn get_nth(&mut self, what: &'static str, i: usize, bytes: usize) -> Result<DeviceMem> {
        if let Some(m) = self.bufs.get(&(what, i)) {
            if m.len() >= bytes.max(1) {
                return m.range(0, bytes);
            }
        }
        let m = DeviceMem::alloc(bytes.max(1))?;
        // touch every page now, not inside the timed op
        m.fill_bytes(0)?;
        self.bufs.insert((what, i), m.clone());
        m.range(0, bytes)
    }

    /// `n` buffers of `bytes` for `what`, one per stage: separate
    /// allocations, so a stage in a collective's hands does not block
    /// host access to the others (a region's in-flight count is per
    /// region).
    pub(crate) fn stages(
        &mut self,
        what: &'static str,
        n: usize,
        bytes: usize,
    ) -> Result<Vec<DeviceMem>> {
        (0..n).map(|i| self.get_nth(what, i, bytes)).collect()
    }
}

/// What the computing side reports when the communication thread is gone
/// (its own error is the one returned).
pub(crate) fn stopped() -> HcclError {
    HcclError::internal("the communication thread stopped")
}

/// Joins a stream pipeline's two threads; the communication side's error
/// is the cause when both failed.
pub(crate) fn join_sides(
    compute: std::thread::ScopedJoinHandle<'_, Result<()>>,
    comm: std::thread::ScopedJoinHandle<'_, Result<()>>,
) -> Result<()> {
    let compute = compute
        .join()
        .unwrap_or_else(|_| Err(HcclError::internal("the GEMM thread panicked")));
    let comm = comm
        .join()
        .unwrap_or_else(|_| Err(HcclError::internal("the communication thread panicked")));
    comm.and(compute)
}

/// Lowers the calling thread's priority (nice +10, for this thread only):
/// the stream path's GEMM runs on such a thread, so that when the
/// communication thread beside it wakes (data arrived, a send can go on)
/// the scheduler hands it the core at once instead of at the next tick.
/// On a core shared by both that wait otherwise costs milliseconds per
/// wake-up (measured: docs/fused.md). Best effort: an error leaves the
/// priority as it was.
pub(crate) fn yield_to_communication() {
    let me = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(me), 10) {
        tracing::debug!("could not lower the GEMM thread's priority: {e}");
    }
}
