//! Memory: allocation, copies and fills ("device" memory is host memory).

use super::graph;
use super::stream::lookup;
use crate::guard::{acl, acl_err, AclFail};
use crate::mem::{self, Arg};
use crate::types::*;
use std::ffi::c_void;

fn out_ptr(p: *mut *mut c_void, what: &str) -> Result<(), AclFail> {
    if p.is_null() {
        return Err(acl_err(ACL_ERROR_INVALID_PARAM, format!("{what} is null")));
    }
    Ok(())
}

/// `aclrtMalloc`: `size` zeroed bytes, 128-byte aligned.
#[no_mangle]
pub extern "C" fn aclrtMalloc(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
) -> aclError {
    acl("aclrtMalloc", || {
        out_ptr(devPtr, "devPtr")?;
        // the low byte is the page policy; higher bits are memory-type flags
        if policy & 0xff > ACL_MEM_MALLOC_HUGE1G_ONLY_P2P {
            return Err(acl_err(
                ACL_ERROR_INVALID_PARAM,
                format!("unknown aclrtMemMallocPolicy {policy}"),
            ));
        }
        let p = mem::alloc(size, false)?;
        // SAFETY: non-null (checked), points to a void* (C contract).
        unsafe { devPtr.write(p) };
        Ok(())
    })
}

/// Refuses to free memory a live model run instance (a captured graph)
/// still uses: its replays would touch freed memory.
fn check_not_in_graph(p: *mut c_void) -> Result<(), AclFail> {
    if p.is_null() {
        return Ok(()); // mem::free reports it
    }
    let m = mem::resolve(&[Arg {
        what: "devPtr",
        ptr: p,
        len: 1,
    }])?;
    match graph::used_by_model(&m[0]) {
        None => Ok(()),
        Some(who) => Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!(
                "{p:p} is used by {who}: destroy it (aclmdlRIDestroy) before freeing the memory"
            ),
        )),
    }
}

/// `aclrtFree`.
#[no_mangle]
pub extern "C" fn aclrtFree(devPtr: *mut c_void) -> aclError {
    acl("aclrtFree", || {
        check_not_in_graph(devPtr)?;
        mem::free(devPtr, false)
    })
}

/// `aclrtMallocHost`.
#[no_mangle]
pub extern "C" fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError {
    acl("aclrtMallocHost", || {
        out_ptr(hostPtr, "hostPtr")?;
        let p = mem::alloc(size, true)?;
        // SAFETY: non-null (checked), points to a void* (C contract).
        unsafe { hostPtr.write(p) };
        Ok(())
    })
}

/// `aclrtFreeHost`.
#[no_mangle]
pub extern "C" fn aclrtFreeHost(hostPtr: *mut c_void) -> aclError {
    acl("aclrtFreeHost", || {
        check_not_in_graph(hostPtr)?;
        mem::free(hostPtr, true)
    })
}

fn check_copy(
    dst: *const c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> Result<(), AclFail> {
    if dst.is_null() || src.is_null() {
        return Err(acl_err(ACL_ERROR_INVALID_PARAM, "dst or src is null"));
    }
    if count > dest_max {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("count {count} exceeds destMax {dest_max}"),
        ));
    }
    if kind > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("unknown aclrtMemcpyKind {kind}"),
        ));
    }
    Ok(())
}

/// `aclrtMemcpy`: a synchronous copy (every kind is a host copy). Refused
/// (`ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`) where an active capture's mode
/// forbids it (see `aclmdlRICaptureThreadExchangeMode`).
#[no_mangle]
pub extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    acl("aclrtMemcpy", || {
        check_copy(dst, destMax, src, count, kind)?;
        graph::check_unsafe_call("aclrtMemcpy")?;
        if count > 0 {
            mem::copy(dst, src, count);
        }
        Ok(())
    })
}

/// `aclrtMemcpyAsync`: a copy in `stream` order.
#[no_mangle]
pub extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    acl("aclrtMemcpyAsync", || {
        check_copy(dst, destMax, src, count, kind)?;
        let s = lookup(stream)
            .map_err(|e| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, e.to_string()))?;
        if count == 0 {
            return Ok(());
        }
        let m = mem::resolve(&[
            Arg {
                what: "dst",
                ptr: dst,
                len: count,
            },
            Arg {
                what: "src",
                ptr: src,
                len: count,
            },
        ])?;
        if m[0].overlaps(&m[1]) && !m[0].same_range(&m[1]) {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "dst and src overlap"));
        }
        s.current().memcpy_async(&m[0], &m[1])?;
        Ok(())
    })
}

/// `aclrtMemset`: sets `count` bytes to the low byte of `value`. Refused
/// where an active capture's mode forbids it, as [`aclrtMemcpy`].
#[no_mangle]
pub extern "C" fn aclrtMemset(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
) -> aclError {
    acl("aclrtMemset", || {
        check_set(devPtr, maxCount, count)?;
        graph::check_unsafe_call("aclrtMemset")?;
        mem::set(devPtr as usize, value as u8, count);
        Ok(())
    })
}

fn check_set(p: *mut c_void, max: usize, count: usize) -> Result<(), AclFail> {
    if p.is_null() {
        return Err(acl_err(ACL_ERROR_INVALID_PARAM, "devPtr is null"));
    }
    if count > max {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("count {count} exceeds maxCount {max}"),
        ));
    }
    Ok(())
}

/// `aclrtMemsetAsync`: [`aclrtMemset`] in `stream` order.
#[no_mangle]
pub extern "C" fn aclrtMemsetAsync(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> aclError {
    acl("aclrtMemsetAsync", || {
        check_set(devPtr, maxCount, count)?;
        let s = lookup(stream)
            .map_err(|e| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, e.to_string()))?;
        let addr = devPtr as usize;
        // may run again: a capturing stream records it for every replay
        s.current().host_fn(move || {
            mem::set(addr, value as u8, count);
            Ok(())
        })?;
        Ok(())
    })
}
