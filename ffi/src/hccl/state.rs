//! Communicator state (`hccl_comm.h`): `HcclCommSuspend`,
//! `HcclCommResume`, `HcclCommGetStatus`, `HcclCommRegCommStateCallback`,
//! `HcclCommGetHandleWithName`, `HcclCommWorkingDevNicSet` and
//! `HcclConfigGetInfo`.
//!
//! On CPUs: a suspended communicator refuses new ops with
//! `HCCL_E_SUSPENDING` (nothing enqueued; ops already enqueued complete);
//! resuming accepts them again. State callbacks are called before and
//! after every `HcclCommDestroy` and `HcclCommResume`, outside any lock
//! (they may call the library). There are no device NICs: the working-NIC
//! request is checked, recorded and logged.

use super::callbacks::{notify, register_callback};
use super::comm::{lookup, CommEntry, COMMS};
use crate::acl::current_device;
use crate::guard::{hccl, non_null};
use crate::types::*;
use hccl_adapter::{HcclError, Result};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A C string argument (`what` names it in errors).
fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    non_null(p, what)?;
    // SAFETY: non-null, a NUL-terminated string (C contract).
    let s = unsafe { CStr::from_ptr(p) };
    if s.to_bytes().len() >= COMM_NAME_MAX_LENGTH {
        return Err(HcclError::para(format!(
            "{what} is longer than {} bytes",
            COMM_NAME_MAX_LENGTH - 1
        )));
    }
    s.to_str()
        .map_err(|_| HcclError::para(format!("{what} is not UTF-8")))
}

/// The live communicator named `name` (several: the one on the calling
/// thread's device) and its handle.
fn by_name(name: &str) -> Result<(HcclComm, Arc<CommEntry>)> {
    let all: Vec<_> = COMMS
        .entries()
        .into_iter()
        .filter(|(_, e)| e.comm.name() == name)
        .collect();
    let pick = match all.len() {
        0 => None,
        1 => all.into_iter().next(),
        _ => {
            let dev = current_device();
            let mut mine = all.into_iter().filter(|(_, e)| e.acl_device == dev);
            match (mine.next(), mine.next()) {
                (Some(one), None) => Some(one),
                _ => {
                    return Err(HcclError::para(format!(
                        "several communicators of this process are named '{name}', none (or more \
                         than one) on this thread's device {dev}"
                    )))
                }
            }
        }
    };
    pick.ok_or_else(|| {
        HcclError::not_found(format!(
            "no live communicator of this process is named '{name}'"
        ))
    })
}

/// `HcclCommSuspend`: later ops fail with `HCCL_E_SUSPENDING`.
#[no_mangle]
pub extern "C" fn HcclCommSuspend(comm: HcclComm) -> HcclResult {
    hccl("HcclCommSuspend", || {
        let c = lookup(comm)?;
        if !c.suspended.swap(true, Ordering::AcqRel) {
            tracing::info!(target: "hccl", comm = c.comm.name(), rank = c.comm.rank(), "communicator suspended");
        }
        Ok(())
    })
}

/// `HcclCommResume`: ops are accepted again; state callbacks before and after.
#[no_mangle]
pub extern "C" fn HcclCommResume(comm: HcclComm) -> HcclResult {
    hccl("HcclCommResume", || {
        let c = lookup(comm)?;
        notify(comm, HCCL_COMM_STATE_PHASE_RESUME_PRE);
        if c.suspended.swap(false, Ordering::AcqRel) {
            tracing::info!(target: "hccl", comm = c.comm.name(), rank = c.comm.rank(), "communicator resumed");
        }
        notify(comm, HCCL_COMM_STATE_PHASE_RESUME_POST);
        Ok(())
    })
}

/// `HcclCommGetStatus`: READY, SUSPENDING, or INVALID (broken in the
/// background) of the communicator named `commId`.
#[no_mangle]
pub extern "C" fn HcclCommGetStatus(
    commId: *const c_char,
    status: *mut HcclCommStatus,
) -> HcclResult {
    hccl("HcclCommGetStatus", || {
        let name = c_str(commId, "commId")?;
        non_null(status, "status")?;
        let (_, c) = by_name(name)?;
        let s = if c.suspended.load(Ordering::Acquire) {
            HCCL_COMM_STATUS_SUSPENDING
        } else if c.comm.async_error().is_some() {
            HCCL_COMM_STATUS_INVALID
        } else {
            HCCL_COMM_STATUS_READY
        };
        // SAFETY: non-null, points to an HcclCommStatus (C contract).
        unsafe { status.write(s) };
        Ok(())
    })
}

/// `HcclCommRegCommStateCallback`: registers (or replaces, by `regName`)
/// a process-wide state callback.
#[no_mangle]
pub extern "C" fn HcclCommRegCommStateCallback(
    regName: *const c_char,
    cb: HcclCommStateCallback,
    args: *mut c_void,
) -> HcclResult {
    hccl("HcclCommRegCommStateCallback", || {
        let name = c_str(regName, "regName")?;
        if name.is_empty() {
            return Err(HcclError::para("regName is empty"));
        }
        let cb = cb.ok_or_else(|| HcclError::ptr("cb is null"))?;
        register_callback(name, cb, args);
        Ok(())
    })
}

/// `HcclCommGetHandleWithName`.
#[no_mangle]
pub extern "C" fn HcclCommGetHandleWithName(
    commName: *const c_char,
    comm: *mut HcclComm,
) -> HcclResult {
    hccl("HcclCommGetHandleWithName", || {
        let name = c_str(commName, "commName")?;
        non_null(comm, "comm")?;
        let (h, _) = by_name(name)?;
        // SAFETY: non-null, points to an HcclComm (C contract).
        unsafe { comm.write(h) };
        Ok(())
    })
}

/// `HcclCommWorkingDevNicSet`: checked and recorded; CPUs have no device
/// NICs to switch.
#[no_mangle]
pub extern "C" fn HcclCommWorkingDevNicSet(
    comm: HcclComm,
    ranks: *mut u32,
    useBackup: *mut bool,
    nRanks: u32,
) -> HcclResult {
    hccl("HcclCommWorkingDevNicSet", || {
        let c = lookup(comm)?;
        if nRanks == 0 {
            return Err(HcclError::para("nRanks is 0"));
        }
        non_null(ranks, "ranks")?;
        non_null(useBackup.cast_const(), "useBackup")?;
        let p = c.comm.size();
        if nRanks > p {
            return Err(HcclError::para(format!(
                "nRanks {nRanks} exceeds the communicator's {p} ranks"
            )));
        }
        // SAFETY: non-null; the caller passes nRanks entries in each (C contract).
        let (r, b) = unsafe {
            (
                std::slice::from_raw_parts(ranks, nRanks as usize),
                std::slice::from_raw_parts(useBackup.cast::<u8>(), nRanks as usize),
            )
        };
        let mut req = Vec::with_capacity(r.len());
        for (i, (&q, &u)) in r.iter().zip(b).enumerate() {
            if q >= p {
                return Err(HcclError::para(format!(
                    "ranks[{i}] = {q} is out of range for {p} ranks"
                )));
            }
            if r[..i].contains(&q) {
                return Err(HcclError::para(format!("rank {q} is listed twice")));
            }
            req.push((q, u != 0));
        }
        tracing::info!(
            target: "hccl",
            comm = c.comm.name(),
            request = ?req,
            "HcclCommWorkingDevNicSet recorded: CPUs have no device NICs, nothing is switched"
        );
        *c.nic_backup.lock().unwrap_or_else(|p| p.into_inner()) = req;
        Ok(())
    })
}

/// `HcclConfigGetInfo`: `HCCL_CONFIG_TYPE_OP_EXPANSION_MODE` gives
/// `HCCL_OP_EXPANSION_MODE_HOST` (ops are expanded on the host CPU).
#[no_mangle]
pub extern "C" fn HcclConfigGetInfo(
    comm: HcclComm,
    cfgType: HcclConfigType,
    infoLen: u32,
    info: *mut c_void,
) -> HcclResult {
    hccl("HcclConfigGetInfo", || {
        let c = lookup(comm)?;
        if cfgType != HCCL_CONFIG_TYPE_OP_EXPANSION_MODE {
            return Err(HcclError::para(format!(
                "cfgType {cfgType} is not an HcclConfigType (HCCL_CONFIG_TYPE_OP_EXPANSION_MODE = 0)"
            )));
        }
        non_null(info.cast_const(), "info")?;
        let need = std::mem::size_of::<HcclOpExpansionMode>();
        if (infoLen as usize) < need {
            return Err(HcclError::para(format!(
                "infoLen {infoLen} is smaller than an HcclOpExpansionMode ({need} bytes)"
            )));
        }
        tracing::debug!(target: "hccl", requested = c.extras.op_expansion_mode, "op expansion mode: host");
        // SAFETY: non-null, at least `need` bytes (checked); unaligned-safe write.
        unsafe {
            info.cast::<HcclOpExpansionMode>()
                .write_unaligned(HCCL_OP_EXPANSION_MODE_HOST)
        };
        Ok(())
    })
}
