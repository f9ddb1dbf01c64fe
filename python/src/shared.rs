//! What a live communicator holds on the Python side: the Rust
//! communicator, its two lanes (streams), its buffer wrappers and its
//! fused ops.

use crate::buffer::MemCache;
use crate::lane::Lane;
use hccl_adapter::HcclComm;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Which of a communicator's streams an op runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaneId {
    /// Collectives and sends, in issue order.
    Main,
    /// Point-to-point receives, beside the sends (so that one rank's send
    /// and receive, issued in either order, can both be in flight).
    Recv,
}

/// What a live communicator holds: the Rust communicator, its streams and
/// the buffer wrappers it has made.
pub(crate) struct Shared {
    /// The communicator.
    pub comm: HcclComm,
    main: Lane,
    recv: Lane,
    /// Wrappers of Python memory.
    pub cache: MemCache,
    /// Splits made so far, by member list.
    splits: Mutex<HashMap<Vec<u32>, u64>>,
    /// Its fused compute/communication ops, made at the first call.
    pub fused: OnceLock<hccl_fused::Fused>,
}

impl Shared {
    /// A communicator's state, with its two streams.
    pub fn new(comm: HcclComm) -> Shared {
        Shared {
            main: Lane::new(comm.create_stream()),
            recv: Lane::new(comm.create_stream()),
            comm,
            cache: MemCache::default(),
            splits: Mutex::default(),
            fused: OnceLock::new(),
        }
    }

    /// How many times (this one included) `ranks` have split the
    /// communicator: every member counts alike, so it names the split.
    pub fn next_split(&self, ranks: &[u32]) -> u64 {
        let mut splits = self.splits.lock().unwrap_or_else(|p| p.into_inner());
        let n = splits.entry(ranks.to_vec()).or_insert(0);
        *n += 1;
        *n
    }

    /// The lane `id`.
    pub fn lane(&self, id: LaneId) -> &Lane {
        match id {
            LaneId::Main => &self.main,
            LaneId::Recv => &self.recv,
        }
    }
}
