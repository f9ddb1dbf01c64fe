//! Notifies: record on one stream, wait on another.
//!
//! A notify knows only the event count it bumps; `Notify::new(device)` is
//! defined with the streams (a notify is below the streams that record and
//! wait on it, not beside them).

use crate::sync::{Arc, AtomicU64, EventCount, Ordering};

#[derive(Debug)]
struct NotifyInner {
    recorded: AtomicU64,
    waits_issued: AtomicU64,
    waker: Arc<EventCount>,
}

/// A counting signal between streams of one device. Each record satisfies
/// exactly one wait, in order; counts only grow, so there is no reset race.
#[derive(Clone, Debug)]
pub struct Notify(Arc<NotifyInner>);

impl Notify {
    /// A notify whose records bump `waker` (the driver of the device whose
    /// streams wait on it).
    pub(crate) fn with_waker(waker: Arc<EventCount>) -> Notify {
        Notify(Arc::new(NotifyInner {
            recorded: AtomicU64::new(0),
            waits_issued: AtomicU64::new(0),
            waker,
        }))
    }

    /// An identity of this notify (and its clones), stable while any of
    /// them lives: for observers that pair records with waits
    /// ([`TaskDone`](crate::TaskDone)).
    pub fn id(&self) -> usize {
        &*self.0 as *const NotifyInner as usize
    }

    pub(crate) fn record(&self) {
        self.0.recorded.fetch_add(1, Ordering::Release);
        self.0.waker.notify();
    }

    pub(crate) fn next_wait_seq(&self) -> u64 {
        self.0.waits_issued.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn is_recorded(&self, seq: u64) -> bool {
        self.0.recorded.load(Ordering::Acquire) >= seq
    }
}
