//! An event count: the park/wake primitive every waiter in hccl-rs uses.
//!
//! A waiter reads a key ([`EventCount::key`]), re-checks its condition, and
//! only then parks with [`EventCount::wait`]; any [`EventCount::notify`]
//! after the key was read makes the wait return. That closes the classic
//! lost-wakeup window without the notifier taking a lock when nobody sleeps:
//! the fast path of `notify` is one atomic increment and one load.

use super::{AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};

/// Wakes parked waiters when something they may be waiting for changed.
#[derive(Debug)]
pub struct EventCount {
    epoch: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    /// When set, the epoch and sleeper count live in shared memory and
    /// waiters park on a (process-shared) futex, so other processes can
    /// wake them.
    #[cfg(not(loom))]
    shared: Option<shared::SharedWords>,
}

impl Default for EventCount {
    fn default() -> Self {
        Self::new()
    }
}

impl EventCount {
    /// A new event count with no waiters.
    pub fn new() -> Self {
        EventCount {
            epoch: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            #[cfg(not(loom))]
            shared: None,
        }
    }

    /// Under loom there are no other processes: a local event count.
    #[cfg(loom)]
    pub fn on_shared_memory(
        _mem: &crate::mem::DeviceMem,
        _offset: usize,
    ) -> crate::Result<EventCount> {
        Ok(EventCount::new())
    }

    /// An event count whose words live at `offset` of shared memory `mem`
    /// (8 bytes, 4-aligned): every process mapping `mem` and building an
    /// event count on the same offset shares it.
    #[cfg(not(loom))]
    pub fn on_shared_memory(
        mem: &crate::mem::DeviceMem,
        offset: usize,
    ) -> crate::Result<EventCount> {
        let mut ec = EventCount::new();
        ec.shared = Some(shared::SharedWords::new(mem, offset)?);
        Ok(ec)
    }

    /// The current key. Read it *before* checking the condition to wait for.
    pub fn key(&self) -> u64 {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            return sh.epoch().load(std::sync::atomic::Ordering::Acquire) as u64;
        }
        self.epoch.load(Ordering::Acquire)
    }

    /// Wakes every waiter whose key predates this call.
    pub fn notify(&self) {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            sh.notify();
            return;
        }
        // Both sides write one counter and then read the other with a
        // read-modify-write (`fetch_add(0)`), never a plain load: an RMW
        // reads the latest value in the counter's modification order, so
        // either we see the waiter's `sleepers` increment and wake it, or
        // its re-check of `epoch` sees our increment and it does not sleep.
        // (A plain-load Dekker pattern would need SeqCst store-load ordering,
        // which loom cannot check; this form it can.)
        self.epoch.fetch_add(1, Ordering::AcqRel);
        if self.sleepers.fetch_add(0, Ordering::AcqRel) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.cv.notify_all();
        }
    }

    /// Parks until a `notify` happens after `key` was read. Returns at once if
    /// one already has.
    pub fn wait(&self, key: u64) {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            while !sh.wait_until(
                key as u32,
                std::time::Instant::now() + std::time::Duration::from_secs(3600),
            ) {}
            return;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sleepers.fetch_add(1, Ordering::AcqRel);
        while self.epoch.fetch_add(0, Ordering::AcqRel) == key {
            guard = self.cv.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        self.sleepers.fetch_sub(1, Ordering::AcqRel);
        drop(guard);
    }

    /// Like [`wait`](Self::wait) but gives up at `deadline`. Returns `true`
    /// if woken by a notify, `false` on timeout.
    #[cfg(not(loom))]
    pub fn wait_until(&self, key: u64, deadline: std::time::Instant) -> bool {
        if let Some(sh) = &self.shared {
            return sh.wait_until(key as u32, deadline);
        }
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sleepers.fetch_add(1, Ordering::AcqRel);
        let mut woken = true;
        while self.epoch.fetch_add(0, Ordering::AcqRel) == key {
            let now = std::time::Instant::now();
            if now >= deadline {
                woken = false;
                break;
            }
            guard = self
                .cv
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        self.sleepers.fetch_sub(1, Ordering::AcqRel);
        drop(guard);
        woken
    }

    /// Under loom there is no clock: waits without a deadline.
    #[cfg(loom)]
    pub fn wait_until(&self, key: u64, _deadline: std::time::Instant) -> bool {
        self.wait(key);
        true
    }
}

#[cfg(not(loom))]
mod shared {
    //! The shared-memory backend: the same protocol as the local one, with
    //! the epoch as a 32-bit futex word that other processes can wake.

    use crate::error::{HcclError, Result};
    use crate::mem::DeviceMem;
    use rustix::thread::futex;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    #[derive(Debug)]
    pub(super) struct SharedWords {
        mem: DeviceMem,
    }

    impl SharedWords {
        pub(super) fn new(mem: &DeviceMem, offset: usize) -> Result<Self> {
            let mem = mem.range(offset, 8)?;
            if (mem.ptr() as usize) % 4 != 0 {
                return Err(HcclError::internal(
                    "event count words must be 4-byte aligned",
                ));
            }
            Ok(SharedWords { mem })
        }

        pub(super) fn epoch(&self) -> &AtomicU32 {
            // SAFETY: the range is 8 bytes, 4-aligned (checked at
            // construction) and kept mapped by `self.mem`; AtomicU32 has the
            // layout of u32 and every bit pattern is valid; the word is only
            // ever accessed atomically, by every process mapping it.
            unsafe { &*(self.mem.ptr() as *const AtomicU32) }
        }

        fn sleepers(&self) -> &AtomicU32 {
            // SAFETY: as in `epoch`, 4 bytes further inside the same range.
            unsafe { &*(self.mem.ptr().add(4) as *const AtomicU32) }
        }

        pub(super) fn notify(&self) {
            // The same RMW handshake as the local backend (see notify there).
            self.epoch().fetch_add(1, Ordering::AcqRel);
            if self.sleepers().fetch_add(0, Ordering::AcqRel) > 0 {
                let _ = futex::wake(self.epoch(), futex::Flags::empty(), u32::MAX);
            }
        }

        pub(super) fn wait_until(&self, key: u32, deadline: Instant) -> bool {
            self.sleepers().fetch_add(1, Ordering::AcqRel);
            let mut woken = true;
            while self.epoch().fetch_add(0, Ordering::AcqRel) == key {
                let now = Instant::now();
                if now >= deadline {
                    woken = false;
                    break;
                }
                let left = deadline - now;
                let ts = futex::Timespec {
                    tv_sec: left.as_secs() as _,
                    tv_nsec: left.subsec_nanos() as _,
                };
                // Returns on wake, on a changed word (EAGAIN) or on timeout.
                let _ = futex::wait(self.epoch(), futex::Flags::empty(), key, Some(&ts));
            }
            self.sleepers().fetch_sub(1, Ordering::AcqRel);
            woken
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// A waiter that checks a flag and parks must always be woken by a
    /// notifier that sets the flag: no interleaving loses the wakeup (loom
    /// reports a deadlock if one does).
    #[test]
    fn no_lost_wakeup() {
        loom::model(|| {
            let ec = Arc::new(EventCount::new());
            let flag = Arc::new(AtomicBool::new(false));
            let (ec2, flag2) = (ec.clone(), flag.clone());
            let notifier = thread::spawn(move || {
                flag2.store(true, Ordering::Release);
                ec2.notify();
            });
            loop {
                let key = ec.key();
                if flag.load(Ordering::Acquire) {
                    break;
                }
                ec.wait(key);
            }
            notifier.join().unwrap();
        });
    }

    /// Two waiters, one notify: both wake. Three threads make the full
    /// state space large; a preemption bound of 3 (as tokio uses in CI)
    /// keeps it to seconds while still covering the lost-wakeup windows.
    #[test]
    fn notify_wakes_all_waiters() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let ec = Arc::new(EventCount::new());
            let flag = Arc::new(AtomicBool::new(false));
            let mut waiters = Vec::new();
            for _ in 0..2 {
                let (ec, flag) = (ec.clone(), flag.clone());
                waiters.push(thread::spawn(move || loop {
                    let key = ec.key();
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    ec.wait(key);
                }));
            }
            flag.store(true, Ordering::Release);
            ec.notify();
            for w in waiters {
                w.join().unwrap();
            }
        });
    }

    /// A counter handshake like the link's ack/done counters: the consumer
    /// waits for each increment in turn and never misses one.
    #[test]
    fn counter_handshake() {
        loom::model(|| {
            let ec = Arc::new(EventCount::new());
            let count = Arc::new(loom::sync::atomic::AtomicU64::new(0));
            let (ec2, count2) = (ec.clone(), count.clone());
            let producer = thread::spawn(move || {
                for _ in 0..2 {
                    count2.fetch_add(1, Ordering::Release);
                    ec2.notify();
                }
            });
            for target in 1..=2 {
                loop {
                    let key = ec.key();
                    if count.load(Ordering::Acquire) >= target {
                        break;
                    }
                    ec.wait(key);
                }
            }
            producer.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn wait_returns_after_notify_from_other_thread() {
        let ec = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (ec2, flag2) = (ec.clone(), flag.clone());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            flag2.store(true, Ordering::Release);
            ec2.notify();
        });
        loop {
            let key = ec.key();
            if flag.load(Ordering::Acquire) {
                break;
            }
            assert!(ec.wait_until(key, Instant::now() + Duration::from_secs(10)));
        }
        t.join().unwrap();
    }

    #[test]
    fn wait_until_times_out() {
        let ec = EventCount::new();
        let key = ec.key();
        let start = Instant::now();
        assert!(!ec.wait_until(key, start + Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn shared_memory_event_counts_wake_each_other() {
        let name = crate::mem::shm_segment_name("ec");
        let a = crate::mem::DeviceMem::create_shared(&name, 4096).unwrap();
        let b = crate::mem::DeviceMem::open_shared(&name).unwrap();
        let ea = Arc::new(EventCount::on_shared_memory(&a, 128).unwrap());
        let eb = EventCount::on_shared_memory(&b, 128).unwrap();
        let key = ea.key();
        let ea2 = ea.clone();
        let t = std::thread::spawn(move || {
            ea2.wait_until(key, Instant::now() + Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(30));
        eb.notify(); // through the other mapping
        assert!(t.join().unwrap(), "woken through the shared word");
        assert_ne!(ea.key(), key);
        let k = eb.key();
        assert!(!eb.wait_until(k, Instant::now() + Duration::from_millis(20)));
    }

    #[test]
    fn stale_key_returns_immediately() {
        let ec = EventCount::new();
        let key = ec.key();
        ec.notify();
        ec.wait(key); // must not block
    }
}
