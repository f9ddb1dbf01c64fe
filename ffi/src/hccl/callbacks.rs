//! The process-wide communicator state callbacks
//! (`HcclCommRegCommStateCallback`) and their calls around
//! `HcclCommDestroy` and `HcclCommResume`.

use crate::types::*;
use std::ffi::c_void;
use std::sync::Mutex;

/// One registered state callback.
struct Callback {
    name: String,
    cb: unsafe extern "C" fn(HcclComm, HcclCommStatePhase, *mut c_void) -> HcclResult,
    args: usize,
}

static CALLBACKS: Mutex<Vec<Callback>> = Mutex::new(Vec::new());

/// Calls every registered state callback with `comm` and `phase`; a
/// failure is logged.
pub(super) fn notify(comm: HcclComm, phase: HcclCommStatePhase) {
    let list: Vec<(String, _, usize)> = CALLBACKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|c| (c.name.clone(), c.cb, c.args))
        .collect();
    for (name, cb, args) in list {
        // SAFETY: a C function pointer registered by the caller with this
        // signature (HcclCommStateCallback); `args` is its own pointer back.
        let r = unsafe { cb(comm, phase, args as *mut c_void) };
        if r != 0 {
            tracing::warn!(target: "hccl", callback = %name, phase, code = r, "state callback failed");
        }
    }
}

/// Registers `cb` with `args` under `name`, replacing an earlier one of
/// that name.
pub(super) fn register_callback(
    name: &str,
    cb: unsafe extern "C" fn(HcclComm, HcclCommStatePhase, *mut c_void) -> HcclResult,
    args: *mut c_void,
) {
    let mut list = CALLBACKS.lock().unwrap_or_else(|p| p.into_inner());
    list.retain(|c| c.name != name);
    list.push(Callback {
        name: name.to_owned(),
        cb,
        args: args as usize,
    });
}
