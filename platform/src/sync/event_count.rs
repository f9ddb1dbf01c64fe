//! An event count: the park/wake primitive every waiter in hccl-rs uses.
//!
//! A waiter that found nothing to do registers first
//! ([`EventCount::prepare_wait`]), re-checks its condition, and only then
//! parks ([`Waiter::wait_until`]); a [`EventCount::notify`] after the
//! registration makes the park return. The notifier only touches the
//! waiter's words when someone is registered: its fast path is a fence and
//! a load of a line nobody writes while spinning, so a peer that signals on
//! every op does not pull a cache line away from a driver that polls.
//!
//! The handshake is the store-buffering (Dekker) pattern with `SeqCst`
//! fences on both sides: the waiter increments `sleepers` then re-reads its
//! condition; the notifier makes the condition true then reads `sleepers`.
//! The fences order the two, so either the notifier sees the registration
//! (and bumps the epoch the waiter parks on) or the waiter's re-check sees
//! the condition. loom checks it (`loom_tests`).
//!
//! A *counting* event count ([`EventCount::counting`]) bumps the epoch on
//! every notify, so [`EventCount::key`] tells a single-threaded poller (the
//! plan simulator) whether anything changed since it last looked.

use super::{fence, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};

/// Two 32-bit words (the epoch, then the sleeper count) in memory that
/// other processes may map, kept mapped by whoever implements this.
///
/// # Safety
///
/// `base` must return the same pointer for the implementor's whole life,
/// 4-byte aligned, valid for reads and writes of 8 bytes while the
/// implementor lives, and those bytes must only ever be accessed atomically
/// (by every process that maps them).
pub(crate) unsafe trait MappedWords: Send + Sync + std::fmt::Debug {
    /// Where the two words start.
    // under loom an event count is always local: nothing reads the words
    #[cfg_attr(loom, allow(dead_code))]
    fn base(&self) -> *const u8;
}

/// Wakes parked waiters when something they may be waiting for changed.
#[derive(Debug)]
pub struct EventCount {
    epoch: AtomicU64,
    sleepers: AtomicUsize,
    /// Bump the epoch on every notify, not only when someone is registered.
    counting: bool,
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
            counting: false,
            lock: Mutex::new(()),
            cv: Condvar::new(),
            #[cfg(not(loom))]
            shared: None,
        }
    }

    /// An event count whose [`key`](Self::key) changes on every notify
    /// (one more read-modify-write per notify), for pollers that skip
    /// whoever was not notified since they last looked.
    pub fn counting() -> Self {
        EventCount {
            counting: true,
            ..Self::new()
        }
    }

    /// An event count whose epoch and sleeper count are the two 32-bit
    /// words at `words` (memory other processes map too): every process
    /// building an event count on the same words shares it. The memory
    /// module builds these from a shared `DeviceMem`
    /// (`EventCount::on_shared_memory`), so this module needs no memory of
    /// its own. Under loom there are no other processes: a local event count.
    pub(crate) fn on_words(words: Box<dyn MappedWords>) -> EventCount {
        #[cfg(not(loom))]
        {
            let mut ec = EventCount::new();
            ec.shared = Some(shared::SharedWords { words });
            ec
        }
        #[cfg(loom)]
        {
            drop(words);
            EventCount::new()
        }
    }

    /// The epoch. On a [counting](Self::counting) event count it changes
    /// with every notify; otherwise only with notifies that found a
    /// registered waiter.
    pub fn key(&self) -> u64 {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            return sh.epoch().load(Ordering::Acquire) as u64;
        }
        self.epoch.load(Ordering::Acquire)
    }

    /// Registers a waiter. Re-check the condition to wait for *after* this
    /// call, then park with [`Waiter::wait_until`] (or drop the waiter if
    /// the condition holds): a notify that comes after this call is never
    /// lost.
    pub fn prepare_wait(&self) -> Waiter<'_> {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            return Waiter {
                ec: self,
                key: sh.register() as u64,
            };
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        Waiter {
            ec: self,
            key: self.epoch.load(Ordering::Acquire),
        }
    }

    /// Wakes every registered waiter. Call it after making the condition
    /// they wait for true.
    pub fn notify(&self) {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            sh.notify();
            return;
        }
        if self.counting {
            // the key must change even when nobody is registered; the
            // RMW on `sleepers` then reads the latest registration (an RMW
            // always reads the newest value in modification order)
            self.epoch.fetch_add(1, Ordering::AcqRel);
            if self.sleepers.fetch_add(0, Ordering::AcqRel) > 0 {
                let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
                self.cv.notify_all();
            }
            return;
        }
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.cv.notify_all();
        }
    }

    fn unregister(&self) {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            sh.unregister();
            return;
        }
        self.sleepers.fetch_sub(1, Ordering::Release);
    }

    /// Parks until the epoch moves from `key` or `deadline` passes.
    fn park(&self, key: u64, deadline: Option<std::time::Instant>) -> bool {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            return sh.park(key as u32, deadline);
        }
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.epoch.load(Ordering::Acquire) == key {
            match deadline {
                #[cfg(not(loom))]
                Some(deadline) => {
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    guard = self
                        .cv
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                // loom has no clock: a deadline is waited out as no deadline
                _ => guard = self.cv.wait(guard).unwrap_or_else(|p| p.into_inner()),
            }
        }
        true
    }
}

/// A registered waiter of an [`EventCount`] (from
/// [`EventCount::prepare_wait`]); dropping it unregisters.
#[derive(Debug)]
#[must_use = "a waiter does nothing until it parks; re-check the condition, then call wait_until"]
pub struct Waiter<'a> {
    ec: &'a EventCount,
    key: u64,
}

impl Waiter<'_> {
    /// Parks until a notify that came after the registration, or until
    /// `deadline`. Returns `true` if notified, `false` on timeout.
    pub fn wait_until(self, deadline: std::time::Instant) -> bool {
        self.ec.park(self.key, Some(deadline))
    }

    /// Parks until a notify that came after the registration.
    pub fn wait(self) {
        self.ec.park(self.key, None);
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // A loom model that finds a deadlock fails by panicking in the
        // parked waiter; loom's atomics cannot be touched while that
        // unwinds (the test run would abort instead of the test failing).
        #[cfg(loom)]
        if std::thread::panicking() {
            return;
        }
        self.ec.unregister();
    }
}

#[cfg(not(loom))]
mod shared {
    //! The shared-memory backend: the same protocol as the local one, with
    //! the epoch as a 32-bit futex word that other processes can wake.

    use super::MappedWords;
    use crate::sync::mapped::{fence, AtomicU32};
    use crate::sync::Ordering;
    use rustix::thread::futex;
    use std::time::Instant;

    #[derive(Debug)]
    pub(super) struct SharedWords {
        pub(super) words: Box<dyn MappedWords>,
    }

    impl SharedWords {
        pub(super) fn epoch(&self) -> &AtomicU32 {
            // SAFETY: `MappedWords` guarantees 8 bytes, 4-aligned, mapped
            // while `self.words` lives and only accessed atomically;
            // AtomicU32 has the layout of u32 and every bit pattern is valid.
            unsafe { &*(self.words.base() as *const AtomicU32) }
        }

        fn sleepers(&self) -> &AtomicU32 {
            // SAFETY: as in `epoch`, 4 bytes further inside the same 8.
            unsafe { &*(self.words.base().add(4) as *const AtomicU32) }
        }

        /// See [`EventCount::prepare_wait`]: the same handshake on the
        /// shared words. Returns the key.
        pub(super) fn register(&self) -> u32 {
            self.sleepers().fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            self.epoch().load(Ordering::Acquire)
        }

        pub(super) fn unregister(&self) {
            self.sleepers().fetch_sub(1, Ordering::Release);
        }

        pub(super) fn notify(&self) {
            // The peer's words are only written when someone is registered,
            // so a notifier that signals every op reads a line that stays
            // shared instead of bouncing it between the two cores.
            fence(Ordering::SeqCst);
            if self.sleepers().load(Ordering::Relaxed) > 0 {
                self.epoch().fetch_add(1, Ordering::AcqRel);
                let _ = futex::wake(self.epoch(), futex::Flags::empty(), u32::MAX);
            }
        }

        pub(super) fn park(&self, key: u32, deadline: Option<Instant>) -> bool {
            while self.epoch().load(Ordering::Acquire) == key {
                let ts = match deadline {
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            return false;
                        }
                        let left = d - now;
                        Some(futex::Timespec {
                            tv_sec: left.as_secs() as _,
                            tv_nsec: left.subsec_nanos() as _,
                        })
                    }
                    None => None,
                };
                // Returns on wake, on a changed word (EAGAIN) or on timeout.
                let _ = futex::wait(self.epoch(), futex::Flags::empty(), key, ts.as_ref());
            }
            true
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
        no_lost_wakeup_with(EventCount::new);
    }

    /// The same for the counting flavour (every notify moves the key).
    #[test]
    fn no_lost_wakeup_counting() {
        no_lost_wakeup_with(EventCount::counting);
    }

    fn no_lost_wakeup_with(make: fn() -> EventCount) {
        loom::model(move || {
            let ec = Arc::new(make());
            let flag = Arc::new(AtomicBool::new(false));
            let (ec2, flag2) = (ec.clone(), flag.clone());
            let notifier = thread::spawn(move || {
                flag2.store(true, Ordering::Release);
                ec2.notify();
            });
            loop {
                let w = ec.prepare_wait();
                if flag.load(Ordering::Acquire) {
                    break;
                }
                w.wait();
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
                    let w = ec.prepare_wait();
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    w.wait();
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
                    let w = ec.prepare_wait();
                    if count.load(Ordering::Acquire) >= target {
                        break;
                    }
                    w.wait();
                }
            }
            producer.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{Arc, AtomicBool};
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
            let w = ec.prepare_wait();
            if flag.load(Ordering::Acquire) {
                break;
            }
            assert!(w.wait_until(Instant::now() + Duration::from_secs(10)));
        }
        t.join().unwrap();
    }

    #[test]
    fn wait_until_times_out() {
        let ec = EventCount::new();
        let start = Instant::now();
        assert!(!ec
            .prepare_wait()
            .wait_until(start + Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn notify_after_registration_is_not_lost() {
        let ec = EventCount::new();
        let w = ec.prepare_wait();
        ec.notify();
        w.wait(); // must not block
    }

    #[test]
    fn counting_event_count_moves_its_key_on_every_notify() {
        let ec = EventCount::counting();
        let k = ec.key();
        ec.notify();
        assert_ne!(ec.key(), k);
        let plain = EventCount::new();
        let k = plain.key();
        plain.notify();
        assert_eq!(plain.key(), k);
    }
}
