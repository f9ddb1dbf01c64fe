//! hccl-rs extensions for diagnosis on request (`hccl_ex.h`):
//! `HcclRsDumpFlightRecorder` (the communicator's last ops and their
//! states) and `HcclRsWriteTimeline` (the device's timeline being
//! recorded), both as JSON files.

use super::comm::lookup;
use crate::guard::{hccl, non_null};
use crate::types::*;
use hccl_adapter::{HcclError, Result};
use std::ffi::{c_char, CStr};
use std::path::PathBuf;

/// A non-empty path argument.
fn path_arg(path: *const c_char) -> Result<PathBuf> {
    non_null(path, "path")?;
    // SAFETY: non-null, a NUL-terminated path (C contract).
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.is_empty() {
        return Err(HcclError::para("path is empty"));
    }
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

/// `HcclRsDumpFlightRecorder`: writes the communicator's flight-recorder
/// dump (its last ops, their arguments and states) to `path` as JSON.
/// `HCCL_E_NOT_SUPPORT` when recording is off (`HCCL_RS_FR_BUFFER_SIZE=0`).
#[no_mangle]
pub extern "C" fn HcclRsDumpFlightRecorder(comm: HcclComm, path: *const c_char) -> HcclResult {
    hccl("HcclRsDumpFlightRecorder", || {
        let c = lookup(comm)?;
        let path = path_arg(path)?;
        c.comm
            .dump_flight_recorder(&path, "requested (HcclRsDumpFlightRecorder)")
    })
}

/// `HcclRsWriteTimeline`: writes the timeline being recorded on the
/// communicator's device (Chrome trace JSON) to `path`; recording goes on.
/// `HCCL_E_NOT_SUPPORT` when none is (`HCCL_RS_TRACE` unset and the device
/// not profiled with `aclprofStart`).
#[no_mangle]
pub extern "C" fn HcclRsWriteTimeline(comm: HcclComm, path: *const c_char) -> HcclResult {
    hccl("HcclRsWriteTimeline", || {
        let c = lookup(comm)?;
        let path = path_arg(path)?;
        c.comm.write_timeline(&path)
    })
}
