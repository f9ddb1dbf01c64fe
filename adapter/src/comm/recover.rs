//! Recovery after a failed op: the communicator a handle stands for can
//! be replaced by a rebuilt one, so the application keeps its handle.
//!
//! A failed op — timed out, cancelled by an abort of a peer, refused by the
//! consistency check on another rank — leaves the links between the
//! ranks in no agreed state (a peer may have sent part of a block, or be
//! waiting for one), and a failing rank aborts its links so no peer waits
//! out a timeout for it. Rather than teach every transport to roll its
//! per-peer state back to an agreed point, [`HcclComm::recover`] has every
//! rank build fresh links, buffers and device for the same ranks (the
//! shrink machinery with nobody excluded: an exchange over the control
//! plane, or the in-process group's table for threads), in ~10 ms, and the
//! handle's later calls go to the new communicator. The old generation is
//! retired (not revoked: the peers' new generations are untouched), so
//! anything still waiting on it ends.
//!
//! The fast path pays one atomic load per call for this: a handle that
//! never recovered reads its root communicator directly.

use super::{Generation, HcclComm};
use hccl_framework::Communicator;
use hccl_platform::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The generation [`HcclComm::recover`] made last, shared by the clones of
/// a handle.
#[derive(Debug, Default)]
pub(crate) struct Successor {
    /// Whether `current` is set (read per call, without the lock).
    superseded: AtomicBool,
    current: Mutex<Option<Arc<Generation>>>,
    /// Recoveries so far.
    count: std::sync::atomic::AtomicU64,
}

/// The generation a call goes to: the root, or a recovered one.
#[derive(Debug)]
pub(crate) enum Gen<'a> {
    Root(&'a Generation),
    Later(Arc<Generation>),
}

impl std::ops::Deref for Gen<'_> {
    type Target = Generation;
    fn deref(&self) -> &Generation {
        match self {
            Gen::Root(g) => g,
            Gen::Later(g) => g,
        }
    }
}

/// The framework communicator a handle stands for now
/// ([`HcclComm::communicator`]); derefs to it.
#[derive(Debug)]
pub struct CommRef<'a>(pub(crate) Gen<'a>);

impl std::ops::Deref for CommRef<'_> {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        &self.0.comm
    }
}

impl HcclComm {
    /// The generation calls go to now.
    pub(crate) fn g(&self) -> Gen<'_> {
        if self.next.superseded.load(Ordering::Acquire) {
            if let Some(g) = self
                .next
                .current
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                return Gen::Later(g.clone());
            }
        }
        Gen::Root(&self.root)
    }

    /// Whether `other` is a handle to the same communicator (a clone).
    pub(crate) fn same_as(&self, other: &HcclComm) -> bool {
        Arc::ptr_eq(&self.root, &other.root)
    }

    /// Makes the communicator usable again after a failed op: every rank
    /// calls it (collective), and each gets fresh links, buffers and
    /// device for the same ranks, built over the control plane (threads:
    /// their group's table); this handle and its clones then run their
    /// ops on them. The communicator keeps its name, ranks, configuration,
    /// exec timeout and registered memory; streams made with
    /// [`create_stream`](Self::create_stream) before belong to the old
    /// device and are refused (make new ones; the C API moves its streams
    /// itself). The old generation is retired: its later ops are refused
    /// and waits still on its links end ("the communicator was
    /// recovered"). A peer lost
    /// meanwhile is an error naming it: shrink without it instead. The
    /// application decides what to run again: a rank whose op completed
    /// before a peer failed does not run it again by itself.
    pub fn recover(&self) -> Result<()> {
        let old = self.g();
        let fresh = old.comm.rebuild()?;
        let fresh = Arc::new(Generation::new(fresh));
        {
            let mut cur = self.next.current.lock().unwrap_or_else(|p| p.into_inner());
            *cur = Some(fresh);
            self.next.superseded.store(true, Ordering::Release);
        }
        self.next.count.fetch_add(1, Ordering::Relaxed);
        // anything still queued on the old generation ends now; its
        // resources go with its last reference (the root's with the handle)
        old.comm.retire();
        Ok(())
    }

    /// How many times [`recover`](Self::recover) rebuilt this communicator.
    pub fn recoveries(&self) -> u64 {
        self.next.count.load(Ordering::Relaxed)
    }
}
