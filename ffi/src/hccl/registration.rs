//! Memory registration: `HcclCommSetMemoryRange`, `HcclCommActivateCommMemory`
//! and their inverses.
//!
//! HCCL reserves virtual ranges for a communicator and maps physical memory
//! into them. On CPUs every address is already backed, so registration
//! records, per communicator, which ranges are set and which parts are
//! active, with HCCL's checks (alignment and flags 0, no overlaps, activate
//! only inside a set range, unset only when nothing in it is active).

use super::comm::lookup;
use crate::guard::{hccl, non_null};
use crate::types::*;
use hccl_adapter::{HcclError, Result};
use std::collections::BTreeMap;
use std::ffi::c_void;

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
    fn set(&mut self, base: usize, size: usize) -> Result<()> {
        if let Some((s, l)) = overlaps(&self.ranges, base, size) {
            return Err(HcclError::para(format!(
                "range [{base:#x}, +{size}) overlaps the range [{s:#x}, +{l}) set earlier"
            )));
        }
        self.ranges.insert(base, size);
        Ok(())
    }

    fn unset(&mut self, base: usize) -> Result<()> {
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

    fn activate(&mut self, ptr: usize, size: usize) -> Result<()> {
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

    fn deactivate(&mut self, ptr: usize) -> Result<()> {
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

fn zero(what: &str, v: u64) -> Result<()> {
    if v != 0 {
        return Err(HcclError::para(format!("{what} must be 0, not {v}")));
    }
    Ok(())
}

/// `HcclCommSetMemoryRange`.
#[no_mangle]
pub extern "C" fn HcclCommSetMemoryRange(
    comm: HcclComm,
    baseVirPtr: *mut c_void,
    size: usize,
    alignment: usize,
    flags: u64,
) -> HcclResult {
    hccl("HcclCommSetMemoryRange", || {
        let c = lookup(comm)?;
        non_null(baseVirPtr, "baseVirPtr")?;
        zero("alignment", alignment as u64)?;
        zero("flags", flags)?;
        if size == 0 || (baseVirPtr as usize).checked_add(size).is_none() {
            return Err(HcclError::para(format!("size {size} is invalid")));
        }
        let r = c
            .reg
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set(baseVirPtr as usize, size);
        r
    })
}

/// `HcclCommUnsetMemoryRange`.
#[no_mangle]
pub extern "C" fn HcclCommUnsetMemoryRange(comm: HcclComm, baseVirPtr: *mut c_void) -> HcclResult {
    hccl("HcclCommUnsetMemoryRange", || {
        let c = lookup(comm)?;
        non_null(baseVirPtr, "baseVirPtr")?;
        let r = c
            .reg
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unset(baseVirPtr as usize);
        r
    })
}

/// `HcclCommActivateCommMemory`.
#[no_mangle]
pub extern "C" fn HcclCommActivateCommMemory(
    comm: HcclComm,
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
) -> HcclResult {
    hccl("HcclCommActivateCommMemory", || {
        let c = lookup(comm)?;
        non_null(virPtr, "virPtr")?;
        non_null(handle, "handle")?;
        zero("offset", offset as u64)?;
        zero("flags", flags)?;
        if size == 0 || (virPtr as usize).checked_add(size).is_none() {
            return Err(HcclError::para(format!("size {size} is invalid")));
        }
        let mut reg = c.reg.lock().unwrap_or_else(|e| e.into_inner());
        reg.activate(virPtr as usize, size)?;
        tracing::debug!(target: "hccl", bytes = reg.active_bytes(), "communication memory activated");
        Ok(())
    })
}

/// `HcclCommDeactivateCommMemory`.
#[no_mangle]
pub extern "C" fn HcclCommDeactivateCommMemory(comm: HcclComm, virPtr: *mut c_void) -> HcclResult {
    hccl("HcclCommDeactivateCommMemory", || {
        let c = lookup(comm)?;
        non_null(virPtr, "virPtr")?;
        let r = c
            .reg
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deactivate(virPtr as usize);
        r
    })
}
