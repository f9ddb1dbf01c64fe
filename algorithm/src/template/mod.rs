//! Algorithm templates: one algorithm on one sub-communicator.
//!
//! A template is prepared with its memories and sizes and then run on a
//! stream over the sub-communicator's links. Templates know nothing of
//! op-base chunking or levels; executors compose them.

mod ring_all_gather;
mod ring_reduce_scatter;
mod slice;

pub use ring_all_gather::RingAllGather;
pub use ring_reduce_scatter::RingReduceScatter;
pub use slice::{Slice, SLICE_ALIGN};
