//! Memory registration: `HcclCommSetMemoryRange`, `HcclCommActivateCommMemory`
//! and their inverses.
//!
//! HCCL reserves virtual ranges for a communicator and maps physical memory
//! into them. On CPUs every address is already backed, so registration
//! records, per communicator, which ranges are set and which parts are
//! active, with HCCL's checks (alignment and flags 0, no overlaps, activate
//! only inside a set range, unset only when nothing in it is active).
//! Activated memory that lies in one `aclrtMalloc` allocation (shareable)
//! is also registered with the communicator: its ops then let peers of
//! the host read and write it through a mapping instead of with
//! cross-memory attach. Other memory is recorded only.

use super::comm::lookup;
use crate::guard::{hccl, non_null};
use crate::types::*;
use hccl_adapter::{HcclError, Result};
use std::ffi::c_void;

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
        reg.check_activate(virPtr as usize, size)?;
        let registered = match crate::mem::device_range(virPtr as usize, size) {
            Some(mem) => Some(c.comm.register_mem(&mem)?),
            None => None,
        };
        reg.activate(virPtr as usize, size, registered);
        tracing::debug!(
            target: "hccl",
            bytes = reg.active_bytes(),
            registered = reg.registered_bytes(),
            "communication memory activated"
        );
        Ok(())
    })
}

/// `HcclCommDeactivateCommMemory`.
#[no_mangle]
pub extern "C" fn HcclCommDeactivateCommMemory(comm: HcclComm, virPtr: *mut c_void) -> HcclResult {
    hccl("HcclCommDeactivateCommMemory", || {
        let c = lookup(comm)?;
        non_null(virPtr, "virPtr")?;
        let registered = c
            .reg
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deactivate(virPtr as usize)?;
        match registered {
            Some(r) => c.comm.deregister_mem(&r),
            None => Ok(()),
        }
    })
}
