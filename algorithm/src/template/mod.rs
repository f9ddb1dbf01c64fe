//! Algorithm templates: one algorithm on one sub-communicator, one file per
//! algorithm, each written as a table of steps over the [`crate::prim`]
//! primitives.
//!
//! | file | what it runs |
//! |---|---|
//! | [`ring`] | ring reduce-scatter, allgather, allreduce = reduce-scatter + allgather |
//! | [`chain`] | the pipelined chain (ring Broadcast from the root, ring Reduce towards it) |
//! | [`rhd`] | recursive halving/doubling: halving, doubling, allreduce, binomial-tree broadcast and reduce |
//! | [`nhr_nb`] | NHR and NB: reduce-scatter, allgather, allreduce and scatter in ⌈log2 p⌉ steps per phase |
//! | [`mesh`] | the per-op table of blocks every rank sends to and receives from every peer |
//! | [`layout`] | slices, groups, per-rank windows, op-base rounds |
//!
//! A template is given its memories (and how peers address them) and runs
//! on a stream over the sub-communicator's links. Templates know nothing of
//! user buffers or levels; executors stage the data and compose them.

pub mod chain;
pub mod layout;
pub mod mesh;
pub mod nhr_nb;
pub mod rhd;
pub mod ring;

pub use layout::{Slice, SLICE_ALIGN};
pub use ring::{RingAllGather, RingReduceScatter};
