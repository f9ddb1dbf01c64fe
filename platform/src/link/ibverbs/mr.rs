//! Memory registered with the device, cached: the CCL buffers once at
//! set-up, and any other buffer a transfer sends from (user buffers of
//! graph mode and registered memory) at its first transfer, kept while
//! its allocation lives. Registration pins the pages and costs a system
//! call, so it is never repeated per op.

use super::verbs::{DeviceCtx, Mr};
use crate::error::Result;
use crate::mem::{DeviceMem, Region};
use std::sync::{Arc, Weak};

/// Regions kept registered at most: an allocation pushed out is
/// deregistered (a program that allocates a buffer per step does not pin
/// them all).
const MAX_CACHED: usize = 32;

struct Entry {
    region: Weak<Region>,
    base: u64,
    mr: Mr,
}

/// One device's registrations, by allocation.
#[derive(Default)]
pub(crate) struct MrCache {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for MrCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MrCache")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl MrCache {
    /// The local key covering `mem` (registering its whole allocation at
    /// the first use).
    pub fn lkey(&mut self, dev: &DeviceCtx, mem: &DeviceMem) -> Result<u32> {
        // allocations that died are deregistered now
        self.entries.retain(|e| e.region.strong_count() > 0);
        let region = mem.region();
        let base = region.base() as u64;
        if let Some(at) = self
            .entries
            .iter()
            .position(|e| e.base == base && e.region.ptr_eq(&Arc::downgrade(region)))
        {
            // most recently used last
            let e = self.entries.remove(at);
            let key = e.mr.lkey();
            self.entries.push(e);
            return Ok(key);
        }
        // SAFETY: the whole allocation stays mapped while its Region
        // lives; the entry is dropped (deregistered) at the first lookup
        // after the Region is gone, and the Mr never outlives the cache,
        // which the link's node owns beside the device.
        let mr = unsafe { dev.register(region.base(), region.len())? };
        let key = mr.lkey();
        if self.entries.len() == MAX_CACHED {
            self.entries.remove(0);
        }
        self.entries.push(Entry {
            region: Arc::downgrade(region),
            base,
            mr,
        });
        tracing::debug!(
            bytes = region.len(),
            "registered a buffer with the RDMA device"
        );
        Ok(key)
    }
}
