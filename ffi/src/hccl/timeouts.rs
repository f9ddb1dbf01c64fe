//! hccl-rs extensions for fault tolerance (`hccl_ex.h`): per-communicator
//! timeouts (`HcclRsCommSetExecTimeout` / `HcclRsCommGetExecTimeout`, in
//! milliseconds), revocation (`HcclRsCommRevoke`) and recovery after a
//! failed op (`HcclRsCommRecover`). HCCL's `HCCL_EXEC_TIMEOUT` and the config's
//! `hcclExecTimeOut` are whole seconds and fixed at creation; a
//! fault-tolerant job wants a hung peer noticed in a fraction of a second,
//! and each communicator (group) on its own terms.

use super::comm::lookup;
use crate::guard::{hccl, non_null};
use crate::types::*;
use std::time::Duration;

/// `HcclRsCommSetExecTimeout`: bounds every wait of the communicator's
/// ops from now on to `timeoutMs` milliseconds (0: forever).
#[no_mangle]
pub extern "C" fn HcclRsCommSetExecTimeout(comm: HcclComm, timeoutMs: u64) -> HcclResult {
    hccl("HcclRsCommSetExecTimeout", || {
        let c = lookup(comm)?;
        c.comm
            .set_exec_timeout((timeoutMs > 0).then(|| Duration::from_millis(timeoutMs)));
        Ok(())
    })
}

/// `HcclRsCommGetExecTimeout`: the bound in force, in milliseconds (0:
/// forever; a bound under a millisecond reads as 1).
#[no_mangle]
pub extern "C" fn HcclRsCommGetExecTimeout(comm: HcclComm, timeoutMs: *mut u64) -> HcclResult {
    hccl("HcclRsCommGetExecTimeout", || {
        let c = lookup(comm)?;
        non_null(timeoutMs, "timeoutMs")?;
        let ms = c.comm.exec_timeout().map_or(0, |t| {
            u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        // SAFETY: non-null, points to a u64 the caller owns (C contract).
        unsafe { timeoutMs.write(ms) };
        Ok(())
    })
}

/// `HcclRsCommRevoke`: revokes the communicator on every rank (in-flight
/// ops end with `HCCL_E_SUSPENDING`, later ops are refused); `reason`
/// may be NULL.
#[no_mangle]
pub extern "C" fn HcclRsCommRevoke(comm: HcclComm, reason: *const std::ffi::c_char) -> HcclResult {
    hccl("HcclRsCommRevoke", || {
        let c = lookup(comm)?;
        let reason = if reason.is_null() {
            "revoked by the application".to_owned()
        } else {
            // SAFETY: non-null, a NUL-terminated string (C contract).
            unsafe { std::ffi::CStr::from_ptr(reason) }
                .to_string_lossy()
                .into_owned()
        };
        c.comm.revoke(&reason);
        Ok(())
    })
}

/// `HcclRsCommRecover`: after a failed op (a timeout, a mismatch, a peer's
/// failure), every rank calls it and the communicator is rebuilt for the
/// same ranks (fresh links, buffers and device, ~10 ms); the handle stays
/// valid and its later ops run on the rebuilt one. The ACL device's
/// streams follow to the new device at their next HCCL call. A peer lost
/// meanwhile is an error naming it (shrink without it instead).
#[no_mangle]
pub extern "C" fn HcclRsCommRecover(comm: HcclComm) -> HcclResult {
    hccl("HcclRsCommRecover", || {
        let c = lookup(comm)?;
        c.comm.recover()?;
        super::comm::rebind(&c);
        Ok(())
    })
}
