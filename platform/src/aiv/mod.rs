//! AIV kernels on CPUs: a whole small collective as one stream task.
//!
//! HCCL runs small ops in "AIV mode": one vector-core kernel per op reads
//! and writes the peers' AIV buffers directly, instead of a chain of
//! transfer and signal tasks. Here the AIV buffer is a *board*: a small
//! area per rank (in its shared-memory segment for ranks that are
//! processes, on the heap for ranks that are threads) that every peer on
//! the host can read, reached through [`Link::boards`](crate::link::Link::boards).
//! A kernel is one task ([`Stream::aiv_launch`](crate::Stream::aiv_launch))
//! that
//!
//! 1. publishes this rank's input and op descriptor in its own board's
//!    entry for the op (payload first, then the entry's sequence number
//!    with a release store — the flag carries the data),
//! 2. reads, in rank order as they appear, the entries this rank's output
//!    needs and takes from them what it needs ([`AivKind`]: AllReduce folds
//!    every input, AllGather copies rank q's input into block q, a
//!    Broadcast's root reads none), comparing each descriptor with its
//!    own — the others' descriptors are compared later, in a batch, at the
//!    latest when the stream is synchronized — and
//! 3. wakes the peers after its first round of reads (a wake fences, and
//!    the reads overlap the publish leaving this core).
//!
//! [`AivLaunch`] is a kernel as an executor builds it, borrowing the op's
//! memory; under the inline driver the launch runs it at once and it is
//! queued as an [`AivTask`] only if its peers have not all published yet.
//!
//! Each board has 256 header slots (flag, descriptor, a payload of up to
//! 72 bytes) and 16 data entries (larger payloads, up to
//! [`AIV_MAX_BYTES`]), used round-robin by op sequence number, and a
//! counter line with the newest op this rank published and the newest it
//! completed. A rank publishes op m into the slot of op m − 256 (and the
//! entry of op m − 16) only once every rank has completed that op (read
//! from their counter lines, and cached, so this is a rare read), so
//! nothing is overwritten while a peer may still read it. The descriptor
//! in the slot is compared with this rank's (HCCL's consistency check, at
//! no extra cost).
//!
//! A queued kernel whose input no earlier queued kernel writes may publish
//! *ahead*, before the kernels in front of it complete (the stream's
//! "start ahead" hook of [`Kernel`](crate::stream::Kernel)): its folding
//! (which writes its output) still waits for its turn, so stream order
//! holds for everything a user can observe. With ranks as processes on
//! fewer cores than ranks, this lets one time slice of a rank publish
//! several ops, instead of every op needing every rank scheduled in turn.
//!
//! Reducing in rank order on every rank gives every rank bit-identical
//! results, as the ring and mesh executors do.
//!
//! The board protocol — entries, the counter line, publish / complete /
//! reuse, publish-ahead, the wake protocol, and why no update can be lost —
//! is written down in `PROTOCOL.md` beside this file, rendered here as
//! [`protocol`].
//!
//! Files: `board.rs` (layout, the protocol over any atomic words, the
//! mapped board), `kernel.rs` ([`AivKind`], `AivTask`: the stream's
//! kernel), `check.rs` (the consistency check, now or in a batch),
//! `settle.rs` (the check a synchronize queues), `launch.rs`
//! ([`AivLaunch`], `Stream::aiv_launch`).

mod board;
mod check;
mod kernel;
mod launch;
#[cfg(all(test, loom))]
mod loom_tests;
mod settle;

pub use board::{AivBoards, AIV_MAX_BYTES};
pub use kernel::AivKind;
pub use launch::{AivLaunch, AivPlan};

#[doc = include_str!("PROTOCOL.md")]
pub mod protocol {}
