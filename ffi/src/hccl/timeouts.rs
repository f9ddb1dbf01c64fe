//! hccl-rs extensions for per-communicator timeouts (`hccl_ex.h`):
//! `HcclRsCommSetExecTimeout` / `HcclRsCommGetExecTimeout`, in
//! milliseconds. HCCL's `HCCL_EXEC_TIMEOUT` and the config's
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
