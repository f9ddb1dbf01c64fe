//! What a live communicator holds on the Python side: the Rust
//! communicator, its two lanes (streams), its buffer wrappers and its
//! fused ops; and the thread that drives abandoned ops to their end.

use crate::buffer::{Buf, MemCache};
use crate::lane::{Lane, DRAIN, SLICE};
use hccl_adapter::HcclComm;
use pyo3::Python;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

thread_local! {
    /// This thread was pinned by a communicator's first op: a later
    /// communicator (a torch sub-group, whose local rank numbering differs)
    /// does not move it.
    static THREAD_PINNED: Cell<bool> = const { Cell::new(false) };
}

/// Which of a communicator's streams an op runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaneId {
    /// Collectives and sends, in issue order.
    Main,
    /// Point-to-point receives, beside the sends (so that one rank's send
    /// and receive, issued in either order, can both be in flight).
    Recv,
}

/// What a live communicator holds: the Rust communicator, its streams and
/// the buffer wrappers it has made.
pub(crate) struct Shared {
    /// The communicator.
    pub comm: HcclComm,
    // (shared with the reaper thread, which holds them weakly)
    main: Arc<Lane>,
    recv: Arc<Lane>,
    /// Wrappers of Python memory.
    pub cache: MemCache,
    /// Splits made so far, by member list.
    splits: Mutex<HashMap<Vec<u32>, u64>>,
    /// Its fused compute/communication ops, made at the first call.
    pub fused: OnceLock<hccl_fused::Fused>,
    /// An op was launched: the launching thread got the rank's CPU.
    driver_pinned: AtomicBool,
    /// The reaper thread runs (see [`Shared::abandon`]).
    reaping: Arc<AtomicBool>,
}

impl Shared {
    /// A communicator's state, with its two streams.
    pub fn new(comm: HcclComm) -> Shared {
        Shared {
            main: Arc::new(Lane::new(comm.create_stream())),
            recv: Arc::new(Lane::new(comm.create_stream())),
            comm,
            cache: MemCache::default(),
            splits: Mutex::default(),
            fused: OnceLock::new(),
            driver_pinned: AtomicBool::new(false),
            reaping: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The state after `HcclComm::recover` gave `old`'s communicator a new
    /// device: new lanes on it (the old ones' streams are the old
    /// device's) and new fused ops; the split counts go on, as every
    /// member's do.
    pub fn renewed(old: &Shared) -> Shared {
        let fresh = Shared::new(old.comm.clone());
        *fresh.splits.lock().unwrap_or_else(|p| p.into_inner()) =
            old.splits.lock().unwrap_or_else(|p| p.into_inner()).clone();
        fresh
    }

    /// At the first op launched on the communicator, pins the launching
    /// thread on the rank's CPU (`HCCL_RS_CPU_AFFINITY`). The communicator
    /// was made with `pin_creating_thread` off: the thread that creates it
    /// (torchft's quorum thread, or set-up's helper thread) is not the one
    /// that drives ops, which in inline mode run on the thread that waits.
    /// A thread already pinned by another communicator keeps its CPU.
    #[inline]
    pub fn pin_driver(&self) {
        if self.driver_pinned.load(Ordering::Relaxed)
            || self.driver_pinned.swap(true, Ordering::AcqRel)
        {
            return;
        }
        if THREAD_PINNED.get() {
            return;
        }
        match self.comm.pin_calling_thread() {
            Ok(pinned) => THREAD_PINNED.set(pinned),
            // the op still runs, where the thread is
            Err(e) => tracing::warn!(rank = self.comm.rank(), "could not pin the op thread: {e}"),
        }
    }

    /// How many times (this one included) `ranks` have split the
    /// communicator: every member counts alike, so it names the split.
    pub fn next_split(&self, ranks: &[u32]) -> u64 {
        let mut splits = self.splits.lock().unwrap_or_else(|p| p.into_inner());
        let n = splits.entry(ranks.to_vec()).or_insert(0);
        *n += 1;
        *n
    }

    /// The lane `id`.
    pub fn lane(&self, id: LaneId) -> &Lane {
        match id {
            LaneId::Main => &self.main,
            LaneId::Recv => &self.recv,
        }
    }

    /// Op `seq` of lane `id` lost its handle before it completed (the
    /// application gave up on it): its buffers `bufs` are kept until it
    /// ends, and the caller goes on at once. In the inline exec mode an op
    /// only progresses while a thread drives the device, so a reaper
    /// thread drives the communicator until every abandoned op has ended —
    /// completed (a peer that was only late), or failed by the exec
    /// timeout, a revocation, an abort or `destroy()`.
    pub fn abandon(&self, id: LaneId, seq: u64, bufs: Vec<Buf>) {
        self.lane(id).park(seq, bufs);
        if self.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
        let lanes = [Arc::downgrade(&self.main), Arc::downgrade(&self.recv)];
        let reaping = self.reaping.clone();
        let rank = self.comm.rank();
        let spawned = std::thread::Builder::new()
            .name("hccl_rs-reaper".to_owned())
            .spawn(move || reap(&lanes, &reaping));
        if let Err(e) = spawned {
            // the buffers stay parked until the next op or destroy()
            self.reaping.store(false, Ordering::Release);
            tracing::warn!(
                rank,
                "cannot start the thread that drives abandoned ops: {e}"
            );
        }
    }

    /// Drops the buffers of abandoned ops that have ended (call where the
    /// GIL may be taken: releasing a buffer export takes it).
    pub fn reap(&self) {
        drop(self.main.reap());
        drop(self.recv.reap());
    }
}

/// The reaper thread: drives both lanes, in [`SLICE`]s, while either has
/// an abandoned op that has not ended. It holds the lanes weakly (and
/// never the GIL), so a communicator destroyed meanwhile goes at once and
/// the thread ends with it. The buffers are dropped by threads that hold
/// the GIL anyway ([`Shared::reap`] at the next op or wait, and destroy).
fn reap(lanes: &[Weak<Lane>; 2], reaping: &AtomicBool) {
    loop {
        let mut busy = false;
        for w in lanes {
            let Some(l) = w.upgrade() else {
                return;
            };
            if let Some(seq) = l.abandoned() {
                busy = true;
                l.poll(seq, Some(Instant::now() + SLICE));
            }
        }
        if !busy {
            reaping.store(false, Ordering::Release);
            // an op abandoned between the look and the store finds the
            // flag down and starts a thread; one abandoned before it did
            // not: look once more
            let again = lanes
                .iter()
                .any(|w| w.upgrade().is_some_and(|l| l.abandoned().is_some()));
            if !again || reaping.swap(true, Ordering::AcqRel) {
                return;
            }
        }
    }
}

impl Drop for Shared {
    /// A communicator destroyed with abandoned ops still in flight aborts
    /// them (nobody waits for them, and the peers' side of them cannot
    /// complete once this rank leaves), waits until they have let go of
    /// their memory, then frees it — or keeps it for good if they have
    /// not within [`DRAIN`] (it may still be written).
    fn drop(&mut self) {
        let pending = [&self.main, &self.recv]
            .iter()
            .filter(|l| l.abandoned().is_some())
            .count();
        if pending > 0 {
            let reason = "destroyed with abandoned ops in flight";
            tracing::warn!(
                rank = self.comm.rank(),
                "communicator {reason}; aborting them"
            );
            self.comm.abort(reason);
            let drain = || {
                let until = Instant::now() + DRAIN;
                [&self.main, &self.recv].iter().all(|l| loop {
                    let Some(seq) = l.abandoned() else {
                        break true;
                    };
                    if l.poll(seq, Some(Instant::now() + SLICE)).is_some() {
                        break true;
                    }
                    if Instant::now() >= until {
                        break false;
                    }
                })
            };
            // not with the GIL held (the last handle may go from Python)
            let drained = Python::try_attach(|py| py.detach(drain)).unwrap_or_else(drain);
            if !drained {
                tracing::error!(
                    rank = self.comm.rank(),
                    "abandoned ops did not end within {DRAIN:?} of the abort; their memory is kept for good"
                );
                std::mem::forget(self.main.take_parked());
                std::mem::forget(self.recv.take_parked());
                return;
            }
        }
        drop(self.main.take_parked());
        drop(self.recv.take_parked());
    }
}
