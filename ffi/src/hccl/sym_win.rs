//! Symmetric windows: `HcclCommSymWinRegister`, `HcclCommSymWinDeregister`,
//! `HcclCommSymWinGet` (`hccl_comm.h`, as HCCL declares them) and
//! `HcclSymWinGetPeerPointer` (`hccl_sym_win.h`).
//!
//! A window's memory must lie in one `aclrtMalloc` allocation (shareable);
//! registering and deregistering are collective. A window handle is a key
//! into a registry, never dereferenced; a window whose communicator was
//! destroyed is gone with it.

use super::comm::{lookup, CommEntry};
use crate::guard::{hccl, non_null};
use crate::handles::Registry;
use crate::types::*;
use hccl_adapter::{HcclError, Result, SymWindow};
use std::ffi::c_void;
use std::sync::{Arc, Weak};

/// What a window handle stands for.
pub(crate) struct WinEntry {
    comm: Weak<CommEntry>,
    win: SymWindow,
}

static WINDOWS: Registry<WinEntry> = Registry::new(0x5e);

/// `HCCL_WIN_COLL_SYMMETRIC`, the one window kind HCCL defines.
const HCCL_WIN_COLL_SYMMETRIC: u32 = 1;

fn window(h: HcclCommSymWindow) -> Result<Arc<WinEntry>> {
    non_null(h, "winHandle")?;
    WINDOWS.get(h).ok_or_else(|| {
        HcclError::para(format!(
            "winHandle {h:p} is not a live symmetric window (deregistered, or not registered by \
             HcclCommSymWinRegister)"
        ))
    })
}

/// `HcclCommSymWinRegister`: `[addr, addr + size)` as this rank's part of
/// a symmetric window (collective). `flag`: 0 or 1 (`HCCL_WIN_COLL_SYMMETRIC`).
#[no_mangle]
pub extern "C" fn HcclCommSymWinRegister(
    comm: HcclComm,
    addr: *mut c_void,
    size: u64,
    winHandle: *mut HcclCommSymWindow,
    flag: u32,
) -> HcclResult {
    hccl("HcclCommSymWinRegister", || {
        let c = lookup(comm)?;
        non_null(addr, "addr")?;
        non_null(winHandle, "winHandle")?;
        if flag > HCCL_WIN_COLL_SYMMETRIC {
            return Err(HcclError::para(format!(
                "flag must be 0 or 1 (HCCL_WIN_COLL_SYMMETRIC), not {flag}"
            )));
        }
        if size > c.extras.sym_win_max_bytes {
            return Err(HcclError::para(format!(
                "size {size} exceeds the {} bytes this communicator allows per rank \
                 (hcclSymWinMaxMemSizePerRank = {} GB)",
                c.extras.sym_win_max_bytes,
                c.extras.sym_win_max_bytes >> 30
            )));
        }
        let size = usize::try_from(size)
            .map_err(|_| HcclError::para(format!("size {size} is invalid")))?;
        // memory outside aclrtMalloc goes through as private memory: the
        // window fails on every rank, saying why on this one
        let mem = match crate::mem::device_range(addr as usize, size) {
            Some(m) => m,
            None => crate::mem::resolve(&[crate::mem::Arg {
                what: "addr",
                ptr: addr,
                len: size,
            }])?
            .remove(0),
        };
        let win = c.comm.sym_win_register(&mem)?;
        // windows of destroyed communicators went with them
        WINDOWS.retain(|e| e.comm.strong_count() > 0);
        let h = WINDOWS.insert(Arc::new(WinEntry {
            comm: Arc::downgrade(&c),
            win: win.clone(),
        }));
        c.windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((h as usize, win));
        // SAFETY: non-null (checked), points to an HcclCommSymWindow (C contract).
        unsafe { winHandle.write(h) };
        Ok(())
    })
}

/// `HcclCommSymWinDeregister` (collective).
#[no_mangle]
pub extern "C" fn HcclCommSymWinDeregister(winHandle: HcclCommSymWindow) -> HcclResult {
    hccl("HcclCommSymWinDeregister", || {
        let e = window(winHandle)?;
        let Some(c) = e.comm.upgrade() else {
            WINDOWS.remove(winHandle);
            return Err(HcclError::para(
                "the window's communicator was destroyed (and the window with it)",
            ));
        };
        c.comm.sym_win_deregister(&e.win)?;
        c.windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(h, _)| *h != winHandle as usize);
        WINDOWS.remove(winHandle);
        Ok(())
    })
}

/// `HcclCommSymWinGet`: the window of `comm` holding `[ptr, ptr + size)`
/// on this rank, and where `ptr` is in it.
#[no_mangle]
pub extern "C" fn HcclCommSymWinGet(
    comm: HcclComm,
    ptr: *mut c_void,
    size: usize,
    winHandle: *mut HcclCommSymWindow,
    offset: *mut usize,
) -> HcclResult {
    hccl("HcclCommSymWinGet", || {
        let c = lookup(comm)?;
        non_null(ptr, "ptr")?;
        non_null(winHandle, "winHandle")?;
        non_null(offset, "offset")?;
        let not_found = || {
            HcclError::not_found(format!(
                "[{ptr:p}, +{size}) is not inside a symmetric window of this communicator"
            ))
        };
        let mem = crate::mem::device_range(ptr as usize, size).ok_or_else(not_found)?;
        let (win, at) = c.comm.sym_window_of(&mem).ok_or_else(not_found)?;
        let h = c
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(_, w)| w.same_window(&win))
            .map(|(h, _)| *h)
            .ok_or_else(not_found)?;
        // SAFETY: both non-null (checked), pointing to an HcclCommSymWindow
        // and a size_t (C contract).
        unsafe {
            winHandle.write(h as HcclCommSymWindow);
            offset.write(at);
        }
        Ok(())
    })
}

/// `HcclSymWinGetPeerPointer`: the address of byte `offset` of rank
/// `peerRank`'s window in this process.
#[no_mangle]
pub extern "C" fn HcclSymWinGetPeerPointer(
    winHandle: HcclCommSymWindow,
    offset: usize,
    peerRank: u32,
    ptr: *mut *mut c_void,
) -> HcclResult {
    hccl("HcclSymWinGetPeerPointer", || {
        let e = window(winHandle)?;
        non_null(ptr, "ptr")?;
        let p = e.win.peer_ptr(offset, peerRank)?;
        // SAFETY: non-null (checked), points to a void* (C contract).
        unsafe { ptr.write(p.cast()) };
        Ok(())
    })
}
