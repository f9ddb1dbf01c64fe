//! Counters on shared memory: a 64-bit word in a [`DeviceMem`] that every
//! process mapping the memory reads and writes atomically. The fused ops
//! publish "blocks done" through them: one writer per counter, release
//! stores, acquire loads, values that only grow.

use super::DeviceMem;
use crate::error::{HcclError, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// A 64-bit atomic counter living in (possibly shared) device memory.
/// Holding it keeps the memory mapped.
#[derive(Clone, Debug)]
pub struct SharedCounter {
    /// Exactly the 8 bytes, 8-aligned (checked in `on_memory`).
    mem: DeviceMem,
}

impl SharedCounter {
    /// The counter at byte `offset` of `mem` (8 bytes, 8-aligned address).
    /// Errors (`HCCL_E_PARA`): outside `mem`, or misaligned.
    pub fn on_memory(mem: &DeviceMem, offset: usize) -> Result<SharedCounter> {
        let mem = mem.range(offset, 8)?;
        if (mem.ptr() as usize) % 8 != 0 {
            return Err(HcclError::para(format!(
                "a shared counter must be 8-byte aligned; offset {offset} is at {:#x}",
                mem.addr()
            )));
        }
        Ok(SharedCounter { mem })
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the 8 bytes are inside a region that stays mapped while
        // `self.mem` lives, 8-aligned (checked in `on_memory`), and by this
        // type's contract only ever accessed atomically, by every process.
        unsafe { AtomicU64::from_ptr(self.mem.ptr().cast::<u64>()) }
    }

    /// The value, with acquire ordering: what the writer stored before its
    /// release store is visible after this load.
    pub fn load(&self) -> u64 {
        self.word().load(Ordering::Acquire)
    }

    /// Stores `v` with release ordering.
    pub fn store(&self, v: u64) {
        self.word().store(v, Ordering::Release)
    }

    /// Adds `v` (acquire-release); returns the previous value.
    pub fn fetch_add(&self, v: u64) -> u64 {
        self.word().fetch_add(v, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_shared_through_two_mappings_and_checked() {
        let name = crate::mem::shm_segment_name("ctr");
        let a = DeviceMem::create_shared(&name, 4096).unwrap();
        let b = DeviceMem::open_shared(&name).unwrap();
        let ca = SharedCounter::on_memory(&a, 64).unwrap();
        let cb = SharedCounter::on_memory(&b, 64).unwrap();
        ca.store(41);
        assert_eq!(cb.fetch_add(1), 41);
        assert_eq!(ca.load(), 42);
        let e = SharedCounter::on_memory(&a, 60).unwrap_err();
        assert!(e.to_string().contains("8-byte aligned"), "{e}");
        assert!(SharedCounter::on_memory(&a, 4092).is_err(), "past the end");
    }
}
