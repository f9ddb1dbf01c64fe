//! Kernels: a whole piece of work (e.g. a small collective) as one task.
//!
//! A stream runs tasks; a [`Kernel`] is a task whose work is its own: the
//! stream polls it until it completes and asks it a few questions (what
//! it is doing, which link it waits on, whether it may start ahead of the
//! kernels in front of it). The stream knows this trait, not the kernels:
//! they live above it and implement it.
//!
//! **Starting ahead.** A queued kernel whose work begins with a step that
//! only *reads* memory (e.g. publishing its input for its peers) may take
//! that step before the kernels in front of it complete, as long as none
//! of them writes that memory and they share its group (the resources
//! that order their steps). Everything a user can observe (the kernel's
//! writes) still happens in stream order. See `Queue::start_ahead`.
//!
//! **Launching.** A kernel launched through [`Launch`] may run in the
//! launching thread at once, borrowing its memory, and is boxed into a
//! queued [`Kernel`] only when it must wait (`Stream::launch`).
//!
//! **Settling.** A kernel may complete once its outputs are written and
//! leave behind work that orders nothing after it but must be done before
//! the stream reports success (e.g. checking the peers' arguments of an
//! op it needed no peer's data for). Its group registers a [`Settle`]
//! with the stream (`Stream::settle_at_sync`); every synchronize asks it
//! for a kernel finishing that work and queues it behind everything else,
//! so that work waits, times out and fails like any task.

use crate::error::Result;
use crate::link::Link;
use crate::mem::DeviceMem;
use crate::sync::Arc;
use std::task::Poll;

/// A queued kernel: one task that does a whole piece of work by polling.
pub trait Kernel: Send + std::fmt::Debug {
    /// Advances the kernel. Its memory is held by the kernel, and no other
    /// task of its stream runs while it does.
    fn poll(&mut self) -> Poll<Result<()>>;

    /// What the kernel is doing, for errors and timeouts.
    fn describe(&self) -> String;

    /// The link to the peer the kernel waits for, if any (errors name the
    /// peer, and a failure aborts that link first).
    fn waiting_link(&self) -> Option<&Arc<dyn Link>> {
        None
    }

    /// Whether the stream tells the peers of its failure `e` (aborting its
    /// links, so their waits on this rank end at once). `false` for a
    /// failure every peer finds on its own: a relayed one stays on the
    /// link and would end a later op of the peer that waits long enough
    /// to look at its links.
    fn relays_failure(&self, e: &crate::error::HcclError) -> bool {
        let _ = e;
        true
    }

    /// Whether dropping the kernel only drops pins and reference counts
    /// (then the queue drops it under its lock instead of deferring it).
    fn cheap_drop(&self) -> bool {
        false
    }

    /// The memory the kernel's first step (the one it may take ahead) still
    /// has to read, while it has not taken it; `None` once it has started.
    /// Kernels behind a started head may start ahead.
    fn unstarted_input(&self) -> Option<&DeviceMem> {
        None
    }

    /// Whether the kernel writes memory overlapping `m`.
    fn writes(&self, m: &DeviceMem) -> bool {
        let _ = m;
        true
    }

    /// The addresses the kernel writes, when they are one range (then the
    /// stream checks a kernel starting ahead against all the kernels in
    /// front of it at once, instead of asking each: hundreds may be
    /// queued). `None`: ask [`writes`](Self::writes).
    fn written(&self) -> Option<std::ops::Range<usize>> {
        None
    }

    /// The kernel's group: kernels may start ahead only behind kernels of
    /// the same group (`None`: no group, never starts ahead).
    fn group(&self) -> Option<usize> {
        None
    }

    /// Takes the first step ahead of the kernel's turn, if it can now.
    /// The stream guarantees that no earlier queued task writes the
    /// input. Returns whether it started.
    fn start_ahead(&mut self) -> bool {
        false
    }

    /// How many queued kernels (the head included) may have started at
    /// once.
    fn ahead_limit(&self) -> usize {
        1
    }

    /// A fresh copy of this kernel, as it was before its first poll, for
    /// one replay of a captured graph (`stream/graph.rs`); `None` (the
    /// default) if it cannot be replayed, which refuses its capture.
    fn replay(&self) -> Option<Box<dyn Kernel>> {
        None
    }
}

/// A kernel as its launcher builds it, borrowing its memory: it may run
/// to completion inside the launch and never be boxed (see
/// `Stream::launch`).
pub(crate) trait Launch {
    /// Advances the kernel in the launching thread (the stream has nothing
    /// queued, so no task of it runs concurrently, and the launching call
    /// holds the memory). Once started, re-polls up to `spins` more times
    /// before giving up.
    fn poll_now(&mut self, spins: u32) -> Poll<Result<()>>;

    /// Re-polls a launch may make before queueing the kernel, when the
    /// device spins while idle (ranks have cores of their own).
    fn spins(&self) -> u32;

    /// Outstanding tasks past which a launch drives the stream (down to
    /// half) instead of queueing more: back-pressure for a launcher far
    /// ahead of the peers its kernels wait for.
    fn max_outstanding(&self) -> u64;

    /// The queued form: holds its memory, keeps its progress.
    fn into_kernel(self) -> Box<dyn Kernel>;

    /// What a capturing stream records of this launch (the kernel is not
    /// run): a [`Relaunch`] that builds the same kernel, fresh, for every
    /// replay.
    fn capture(&self) -> Box<dyn Relaunch>;
}

/// A kernel launch as a captured graph keeps it: every replay launches
/// the kernel again through `Stream::launch` (so a replayed kernel may
/// complete inside the launch, never boxed, as the original could).
pub(crate) trait Relaunch: Send + Sync + std::fmt::Debug {
    /// Launches a fresh copy of the kernel on `stream`.
    fn relaunch(&self, stream: &crate::stream::Stream) -> Result<()>;

    /// Whether the kernel reads or writes memory of `m`'s region.
    fn references(&self, m: &DeviceMem) -> bool;
}

/// Work a group of kernels may leave behind when its kernels complete,
/// which must be finished before a synchronize of a stream that ran them
/// returns (see the module docs).
pub trait Settle: Send + Sync + std::fmt::Debug {
    /// A kernel that finishes what is left, or `None` when nothing is.
    /// Asked at every synchronize of a stream the settle is registered
    /// with; the kernel is queued behind everything queued so far.
    fn settle_task(&self) -> Option<Box<dyn Kernel>>;
}
