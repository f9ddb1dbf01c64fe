//! Synchronisation primitives, behind one switch point for loom.
//!
//! Every atomic, mutex and condvar the platform's wait/wake path uses is
//! imported from here. Under `--cfg loom` they are loom's model-checked
//! versions, so `RUSTFLAGS="--cfg loom" cargo test -p hccl-platform --release
//! --lib sync` explores every interleaving of the park/wake protocol.

pub mod event_count;

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex,
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex,
};

pub use event_count::{EventCount, Waiter};
