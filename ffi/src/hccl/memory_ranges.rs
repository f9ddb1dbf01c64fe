//! A communicator's registered memory: the ranges set with
//! `HcclCommSetMemoryRange` and the parts activated in them, with HCCL's
//! checks (no overlaps, activate only inside a set range, unset only when
//! nothing in it is active).
//!
//! The communicator entry holds one; the registration calls change it.

use hccl_adapter::{HcclError, Result};
use std::collections::BTreeMap;

/// A communicator's registered memory.
#[derive(Default, Debug)]
pub(crate) struct Registration {
    /// Set ranges: base → size.
    ranges: BTreeMap<usize, usize>,
    /// Active memory: address → size.
    active: BTreeMap<usize, usize>,
}

fn overlaps(map: &BTreeMap<usize, usize>, start: usize, len: usize) -> Option<(usize, usize)> {
    map.iter()
        .find(|(&s, &l)| s < start + len && start < s + l)
        .map(|(&s, &l)| (s, l))
}

impl Registration {
    /// Records the range `[base, base + size)` (no overlap with set ranges).
    pub(super) fn set(&mut self, base: usize, size: usize) -> Result<()> {
        if let Some((s, l)) = overlaps(&self.ranges, base, size) {
            return Err(HcclError::para(format!(
                "range [{base:#x}, +{size}) overlaps the range [{s:#x}, +{l}) set earlier"
            )));
        }
        self.ranges.insert(base, size);
        Ok(())
    }

    /// Forgets the range based at `base` (nothing in it may be active).
    pub(super) fn unset(&mut self, base: usize) -> Result<()> {
        let size = *self.ranges.get(&base).ok_or_else(|| {
            HcclError::para(format!("{base:#x} is not the base of a set memory range"))
        })?;
        if let Some((s, l)) = overlaps(&self.active, base, size) {
            return Err(HcclError::para(format!(
                "memory [{s:#x}, +{l}) in this range is still active; deactivate it first"
            )));
        }
        self.ranges.remove(&base);
        Ok(())
    }

    /// Marks `[ptr, ptr + size)` active (inside one set range, no overlap
    /// with active memory).
    pub(super) fn activate(&mut self, ptr: usize, size: usize) -> Result<()> {
        let inside = self
            .ranges
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&s, &l)| ptr + size <= s + l);
        if !inside {
            return Err(HcclError::para(format!(
                "[{ptr:#x}, +{size}) is not inside a range set with HcclCommSetMemoryRange"
            )));
        }
        if let Some((s, l)) = overlaps(&self.active, ptr, size) {
            return Err(HcclError::para(format!(
                "[{ptr:#x}, +{size}) overlaps active memory [{s:#x}, +{l})"
            )));
        }
        self.active.insert(ptr, size);
        Ok(())
    }

    /// Marks the active memory starting at `ptr` inactive.
    pub(super) fn deactivate(&mut self, ptr: usize) -> Result<()> {
        self.active
            .remove(&ptr)
            .map(|_| ())
            .ok_or_else(|| HcclError::para(format!("{ptr:#x} is not the start of active memory")))
    }

    /// Bytes of active memory (for tests and logs).
    pub(crate) fn active_bytes(&self) -> usize {
        self.active.values().sum()
    }
}
