//! Synchronisation primitives, behind one switch point for loom.
//!
//! Every atomic, lock, condvar and reference count of the platform is
//! imported from here, never from `std::sync` directly. Under `--cfg loom`
//! the atomics, [`Mutex`], [`Condvar`] and [`RwLock`] are loom's
//! model-checked versions, so a loom model of any protocol built on them
//! explores every interleaving:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p hccl-platform --release --lib loom_tests
//! ```
//!
//! That runs every model: the event count's park/wake (`event_count.rs`),
//! the AIV board protocol (`aiv/loom_tests.rs`, see `aiv/PROTOCOL.md`),
//! the write-based link counters (`link/loom_tests.rs`) and the stream
//! enqueue / worker hand-off (`stream/loom_tests.rs`), each also with the
//! deliberate bugs of `mutation.rs` that it must catch.
//!
//! The whole crate builds under loom. A few std types stay std under loom
//! too, each for a reason loom cannot change:
//!
//! - [`Arc`] and [`Weak`]: loom's `Arc` has no `Weak` and cannot be
//!   coerced to a trait object (`Arc<dyn Link>`) on stable Rust. A
//!   reference count is not a protocol of ours: what it guards is
//!   published through the atomics and locks that loom does check.
//! - [`OnceLock`]: loom has none; the platform uses it only for
//!   process-wide caches of the environment, computed once.
//! - `process`: atomics in `static`s (process-unique ids) and the lock
//!   of the process-wide tables of shareable memory. Loom's atomics and
//!   locks cannot be built in a `const` context, an id counter orders
//!   nothing, and those tables are bookkeeping no model runs.
//! - `mapped`: atomics that live in memory the platform maps or
//!   allocates as bytes (shared-memory segments, AIV boards) and reaches
//!   by casting a pointer. Loom can only model atomics it created; those
//!   words are shared with other processes. The protocols over them are
//!   written against `Word`, so a loom model can run the same code over
//!   loom's atomics (see `aiv::board` and `link::write_based`).
//!
//! `Ordering` is the same type under both. Busy-wait hints come from here
//! too (`spin_loop`, `yield_now`): under loom they are the yields a
//! model needs to make progress through a spin loop. Threads the platform
//! spawns (the worker driver, the TCP listener) are std threads: a loom
//! model drives a device from its own loom threads (under loom a
//! worker-mode device spawns no worker; the model runs the worker's turn,
//! `stream::device::worker_turn`, itself).

pub mod event_count;
pub(crate) mod mutation;

#[cfg(loom)]
#[allow(unused_imports)] // the facade offers what the std side offers
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard, RwLock,
};

#[cfg(not(loom))]
#[allow(unused_imports)] // the facade offers what the loom side offers
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard, RwLock,
};

/// A spin-loop hint (loom: a yield point, so a model of a spinning waiter
/// lets the thread it waits for run).
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::hint::spin_loop();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Yields the thread (loom: to another modelled thread).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Std under loom too (see the module docs).
pub(crate) use std::sync::{Arc, OnceLock, Weak};

/// Atomics in `static`s: process-unique ids and counters. Std under loom
/// too (loom's atomics cannot be built in a `const` context; an id orders
/// nothing). So is the lock of the process-wide tables of shareable memory
/// (the regions this process exported and imported, and the registration
/// marks on them): bookkeeping that loom models never exercise, in
/// `static`s loom cannot build.
pub(crate) mod process {
    pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize};
    pub(crate) use std::sync::Mutex;
}

/// Atomics reached by casting a pointer into memory the platform maps or
/// allocates as bytes (shared-memory segments, AIV boards), shared with
/// other processes. Std under loom too: loom only models atomics it
/// created. Protocols over such words take them as [`Word`](super::Word)s.
pub(crate) mod mapped {
    #[allow(unused_imports)]
    // `fence`: only the futex-backed event count, not built under loom
    pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64};
}

/// A 64-bit atomic word, whichever kind: a protocol written against this
/// runs over words in mapped memory ([`mapped::AtomicU64`]) in the
/// platform and over loom's atomics in a loom model.
pub(crate) trait Word {
    /// `load` with `order`.
    fn load(&self, order: Ordering) -> u64;
    /// `store` with `order`.
    fn store(&self, value: u64, order: Ordering);
    /// `fetch_add` with `order`; returns the previous value.
    fn fetch_add(&self, value: u64, order: Ordering) -> u64;
    /// `fetch_max` with `order`; returns the previous value.
    fn fetch_max(&self, value: u64, order: Ordering) -> u64;
}

macro_rules! impl_word {
    ($t:ty) => {
        impl Word for $t {
            fn load(&self, order: Ordering) -> u64 {
                <$t>::load(self, order)
            }
            fn store(&self, value: u64, order: Ordering) {
                <$t>::store(self, value, order)
            }
            fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
                <$t>::fetch_add(self, value, order)
            }
            fn fetch_max(&self, value: u64, order: Ordering) -> u64 {
                <$t>::fetch_max(self, value, order)
            }
        }
    };
}

impl_word!(mapped::AtomicU64);
#[cfg(loom)]
impl_word!(AtomicU64);

pub(crate) use event_count::MappedWords;
pub use event_count::{EventCount, Waiter};
