//! What a live communicator holds on the Python side: the Rust
//! communicator, its two lanes (streams), its buffer wrappers and its
//! fused ops.

use crate::buffer::MemCache;
use crate::lane::Lane;
use hccl_adapter::HcclComm;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

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
    main: Lane,
    recv: Lane,
    /// Wrappers of Python memory.
    pub cache: MemCache,
    /// Splits made so far, by member list.
    splits: Mutex<HashMap<Vec<u32>, u64>>,
    /// Its fused compute/communication ops, made at the first call.
    pub fused: OnceLock<hccl_fused::Fused>,
    /// An op was launched: the launching thread got the rank's CPU.
    driver_pinned: AtomicBool,
}

impl Shared {
    /// A communicator's state, with its two streams.
    pub fn new(comm: HcclComm) -> Shared {
        Shared {
            main: Lane::new(comm.create_stream()),
            recv: Lane::new(comm.create_stream()),
            comm,
            cache: MemCache::default(),
            splits: Mutex::default(),
            fused: OnceLock::new(),
            driver_pinned: AtomicBool::new(false),
        }
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
}
