//! Notifies: record on one stream, wait on another.

use crate::sync::{Arc, AtomicU64, EventCount, Ordering};
use crate::Device;

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
    /// A notify whose records wake `device`'s driver.
    pub fn new(device: &Device) -> Notify {
        Notify(Arc::new(NotifyInner {
            recorded: AtomicU64::new(0),
            waits_issued: AtomicU64::new(0),
            waker: device.waker(),
        }))
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
