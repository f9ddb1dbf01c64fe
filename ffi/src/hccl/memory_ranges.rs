//! A communicator's registered memory: the ranges set with
//! `HcclCommSetMemoryRange` and the parts activated in them, with HCCL's
//! checks (no overlaps, activate only inside a set range, unset only when
//! nothing in it is active). Active memory that is shareable
//! (`aclrtMalloc`) is also registered with the communicator for the data
//! path; each active part keeps that registration.
//!
//! The communicator entry holds one; the registration calls change it.

use hccl_adapter::{HcclError, MemRegistration, Result};
use std::collections::BTreeMap;

/// A communicator's registered memory.
#[derive(Default, Debug)]
pub(crate) struct Registration {
    /// Set ranges: base → size.
    ranges: BTreeMap<usize, usize>,
    /// Active memory: address → size, and its registration with the
    /// communicator when it is shareable.
    active: BTreeMap<usize, (usize, Option<MemRegistration>)>,
}

fn overlaps<V>(
    map: &BTreeMap<usize, V>,
    size: impl Fn(&V) -> usize,
    start: usize,
    len: usize,
) -> Option<(usize, usize)> {
    map.iter()
        .map(|(&s, v)| (s, size(v)))
        .find(|&(s, l)| s < start + len && start < s + l)
}

impl Registration {
    /// Records the range `[base, base + size)` (no overlap with set ranges).
    pub(super) fn set(&mut self, base: usize, size: usize) -> Result<()> {
        if let Some((s, l)) = overlaps(&self.ranges, |&l| l, base, size) {
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
        if let Some((s, l)) = overlaps(&self.active, |a| a.0, base, size) {
            return Err(HcclError::para(format!(
                "memory [{s:#x}, +{l}) in this range is still active; deactivate it first"
            )));
        }
        self.ranges.remove(&base);
        Ok(())
    }

    /// Checks that `[ptr, ptr + size)` may be activated (inside one set
    /// range, no overlap with active memory).
    pub(super) fn check_activate(&self, ptr: usize, size: usize) -> Result<()> {
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
        if let Some((s, l)) = overlaps(&self.active, |a| a.0, ptr, size) {
            return Err(HcclError::para(format!(
                "[{ptr:#x}, +{size}) overlaps active memory [{s:#x}, +{l})"
            )));
        }
        Ok(())
    }

    /// Marks `[ptr, ptr + size)` active (checked with
    /// [`check_activate`](Self::check_activate)), with its registration.
    pub(super) fn activate(&mut self, ptr: usize, size: usize, reg: Option<MemRegistration>) {
        self.active.insert(ptr, (size, reg));
    }

    /// Marks the active memory starting at `ptr` inactive; returns its
    /// registration, to deregister.
    pub(super) fn deactivate(&mut self, ptr: usize) -> Result<Option<MemRegistration>> {
        self.active
            .remove(&ptr)
            .map(|(_, reg)| reg)
            .ok_or_else(|| HcclError::para(format!("{ptr:#x} is not the start of active memory")))
    }

    /// Bytes of active memory (for tests and logs).
    pub(crate) fn active_bytes(&self) -> usize {
        self.active.values().map(|a| a.0).sum()
    }

    /// Bytes of active memory registered for the data path.
    pub(crate) fn registered_bytes(&self) -> usize {
        self.active
            .values()
            .filter(|a| a.1.is_some())
            .map(|a| a.0)
            .sum()
    }
}
