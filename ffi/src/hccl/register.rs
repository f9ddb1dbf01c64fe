//! Registration for the data path (HCCL's `hccl_ex.h`, which PyTorch's NPU
//! adapter loads): `HcclCommRegister`, `HcclCommDeregister`,
//! `HcclCommExchangeMem`.
//!
//! Registered memory must lie in one `aclrtMalloc` allocation (shareable
//! memory); the communicator's ops then let peers of the host read and
//! write it through a mapping. A registration handle is a key into a
//! registry, never dereferenced: a stale or foreign one is
//! `HCCL_E_PARA`.

use super::comm::{lookup, CommEntry};
use crate::guard::{hccl, non_null};
use crate::handles::Registry;
use crate::types::*;
use hccl_adapter::{HcclError, MemRegistration, Result};
use std::ffi::c_void;
use std::sync::{Arc, Weak};

/// What a registration handle stands for.
struct RegEntry {
    /// The communicator it was made with (gone once destroyed).
    comm: Weak<CommEntry>,
    reg: MemRegistration,
}

static REGS: Registry<RegEntry> = Registry::new(0x2e);

/// The registration behind `handle`, made with `comm`.
fn registration(comm: &Arc<CommEntry>, handle: *mut c_void) -> Result<Arc<RegEntry>> {
    non_null(handle, "handle")?;
    let e = REGS.get(handle).ok_or_else(|| {
        HcclError::para(format!(
            "handle {handle:p} is not a live registration (deregistered, or not made by HcclCommRegister)"
        ))
    })?;
    if !e.comm.upgrade().is_some_and(|c| Arc::ptr_eq(&c, comm)) {
        return Err(HcclError::para(format!(
            "registration {handle:p} was made with another communicator"
        )));
    }
    Ok(e)
}

/// `HcclCommRegister`: registers `[addr, addr + size)`, which must lie in
/// one `aclrtMalloc` allocation; `flag` is reserved (0).
#[no_mangle]
pub extern "C" fn HcclCommRegister(
    comm: HcclComm,
    addr: *mut c_void,
    size: u64,
    handle: *mut *mut c_void,
    flag: u32,
) -> HcclResult {
    hccl("HcclCommRegister", || {
        let c = lookup(comm)?;
        non_null(addr, "addr")?;
        non_null(handle, "handle")?;
        if flag != 0 {
            return Err(HcclError::para(format!("flag must be 0, not {flag}")));
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| HcclError::para(format!("size {size} is invalid")))?;
        let mem = crate::mem::device_range(addr as usize, size).ok_or_else(|| {
            HcclError::para(format!(
                "[{addr:p}, +{size}) does not lie in one aclrtMalloc allocation: only that \
                 (shareable) memory can be registered"
            ))
        })?;
        let reg = c.comm.register_mem(&mem)?;
        // registrations of destroyed communicators went with them
        REGS.retain(|e| e.comm.strong_count() > 0);
        let h = REGS.insert(Arc::new(RegEntry {
            comm: Arc::downgrade(&c),
            reg,
        }));
        // SAFETY: non-null (checked), points to a void* (C contract).
        unsafe { handle.write(h) };
        Ok(())
    })
}

/// `HcclCommDeregister`.
#[no_mangle]
pub extern "C" fn HcclCommDeregister(comm: HcclComm, handle: *mut c_void) -> HcclResult {
    hccl("HcclCommDeregister", || {
        let c = lookup(comm)?;
        let e = registration(&c, handle)?;
        c.comm.deregister_mem(&e.reg)?;
        REGS.remove(handle);
        Ok(())
    })
}

/// `HcclCommExchangeMem`: sends the registration's handle to each of
/// `peerRanks` and maps theirs (each of them calls it with this rank).
#[no_mangle]
pub extern "C" fn HcclCommExchangeMem(
    comm: HcclComm,
    windowHandle: *mut c_void,
    peerRanks: *mut u32,
    peerRankNum: u32,
) -> HcclResult {
    hccl("HcclCommExchangeMem", || {
        let c = lookup(comm)?;
        let e = registration(&c, windowHandle)?;
        if peerRankNum == 0 {
            return Ok(());
        }
        non_null(peerRanks, "peerRanks")?;
        if peerRankNum > c.comm.size() {
            return Err(HcclError::para(format!(
                "peerRankNum {peerRankNum} exceeds the communicator's {} ranks",
                c.comm.size()
            )));
        }
        // SAFETY: non-null; the caller passes peerRankNum ranks (C contract).
        let peers = unsafe { std::slice::from_raw_parts(peerRanks, peerRankNum as usize) };
        c.comm.exchange_mem(&e.reg, peers)
    })
}
