//! Runtime init, devices and contexts.

use super::placement::{current_device, CURRENT};
use super::stream::synchronize_device;
use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// A context: the device it belongs to (ACL has one default context per device).
pub(crate) struct Context {
    device: i32,
}

pub(crate) static CONTEXTS: Registry<Context> = Registry::new(0x3c);

/// Number of devices (`HCCL_RS_DEVICE_COUNT`, default 8).
fn device_count() -> i32 {
    std::env::var("HCCL_RS_DEVICE_COUNT")
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(8)
}

pub(super) fn check_device(id: i32) -> Result<(), AclFail> {
    let n = device_count();
    if id < 0 || id >= n {
        return Err(acl_err(
            ACL_ERROR_INVALID_DEVICE,
            format!(
                "device {id} does not exist (devices 0..{n}; set HCCL_RS_DEVICE_COUNT for more)"
            ),
        ));
    }
    Ok(())
}

/// `aclInit`: initializes the runtime (a second call is `ACL_ERROR_REPEAT_INITIALIZE`).
#[no_mangle]
pub extern "C" fn aclInit(configPath: *const c_char) -> aclError {
    acl("aclInit", || {
        if !configPath.is_null() {
            // SAFETY: a non-null configPath is a NUL-terminated string (C contract).
            let path = unsafe { CStr::from_ptr(configPath) }.to_string_lossy();
            if !path.is_empty() && !std::path::Path::new(path.as_ref()).exists() {
                return Err(acl_err(
                    ACL_ERROR_INVALID_PARAM,
                    format!("config file '{path}' does not exist"),
                ));
            }
        }
        if INITIALIZED.swap(true, Ordering::AcqRel) {
            return Err(acl_err(
                ACL_ERROR_REPEAT_INITIALIZE,
                "aclInit was already called",
            ));
        }
        Ok(())
    })
}

/// `aclFinalize`: ends the runtime (after `aclInit`).
#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    acl("aclFinalize", || {
        if !INITIALIZED.swap(false, Ordering::AcqRel) {
            return Err(acl_err(
                ACL_ERROR_REPEAT_FINALIZE,
                "aclFinalize without a matching aclInit",
            ));
        }
        Ok(())
    })
}

/// `aclrtSetDevice`: makes `deviceId` this thread's device.
#[no_mangle]
pub extern "C" fn aclrtSetDevice(deviceId: i32) -> aclError {
    acl("aclrtSetDevice", || {
        check_device(deviceId)?;
        CURRENT.with(|c| c.set(Some(deviceId)));
        Ok(())
    })
}

/// `aclrtResetDevice`: releases this thread's use of `deviceId`.
#[no_mangle]
pub extern "C" fn aclrtResetDevice(deviceId: i32) -> aclError {
    acl("aclrtResetDevice", || {
        check_device(deviceId)?;
        CURRENT.with(|c| {
            if c.get() == Some(deviceId) {
                c.set(None)
            }
        });
        Ok(())
    })
}

/// `aclrtGetDevice`: this thread's device.
#[no_mangle]
pub extern "C" fn aclrtGetDevice(deviceId: *mut i32) -> aclError {
    acl("aclrtGetDevice", || {
        if deviceId.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "deviceId is null"));
        }
        let d = CURRENT.with(|c| c.get()).ok_or_else(|| {
            acl_err(
                ACL_ERROR_INVALID_DEVICE,
                "no device is set on this thread (call aclrtSetDevice)",
            )
        })?;
        // SAFETY: non-null, points to an int32_t (C contract).
        unsafe { deviceId.write(d) };
        Ok(())
    })
}

/// `aclrtGetDeviceCount`.
#[no_mangle]
pub extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> aclError {
    acl("aclrtGetDeviceCount", || {
        if count.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "count is null"));
        }
        // SAFETY: non-null, points to a uint32_t (C contract).
        unsafe { count.write(device_count() as u32) };
        Ok(())
    })
}

/// `aclrtGetRunMode`: always `ACL_HOST` (the "device" is the host).
#[no_mangle]
pub extern "C" fn aclrtGetRunMode(runMode: *mut aclrtRunMode) -> aclError {
    acl("aclrtGetRunMode", || {
        if runMode.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "runMode is null"));
        }
        // SAFETY: non-null, points to an aclrtRunMode (C contract).
        unsafe { runMode.write(ACL_HOST) };
        Ok(())
    })
}

/// `aclrtGetSocName`: `"hccl-rs-cpu"`.
#[no_mangle]
pub extern "C" fn aclrtGetSocName() -> *const c_char {
    c"hccl-rs-cpu".as_ptr()
}

/// `aclrtSynchronizeDevice`: waits for every stream this thread's device
/// runs that the caller created through this shim.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeDevice() -> aclError {
    acl("aclrtSynchronizeDevice", || {
        synchronize_device(current_device())
    })
}

/// `aclrtCreateContext`: a context of `deviceId` (also made current).
#[no_mangle]
pub extern "C" fn aclrtCreateContext(context: *mut aclrtContext, deviceId: i32) -> aclError {
    acl("aclrtCreateContext", || {
        if context.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "context is null"));
        }
        check_device(deviceId)?;
        let h = CONTEXTS.insert(Arc::new(Context { device: deviceId }));
        CURRENT.with(|c| c.set(Some(deviceId)));
        // SAFETY: non-null, points to an aclrtContext (C contract).
        unsafe { context.write(h) };
        Ok(())
    })
}

/// `aclrtDestroyContext`.
#[no_mangle]
pub extern "C" fn aclrtDestroyContext(context: aclrtContext) -> aclError {
    acl("aclrtDestroyContext", || {
        CONTEXTS
            .remove(context)
            .map(|_| ())
            .ok_or_else(|| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, "unknown context"))
    })
}

/// `aclrtSetCurrentContext`: makes the context's device this thread's device.
#[no_mangle]
pub extern "C" fn aclrtSetCurrentContext(context: aclrtContext) -> aclError {
    acl("aclrtSetCurrentContext", || {
        let c = CONTEXTS
            .get(context)
            .ok_or_else(|| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, "unknown context"))?;
        CURRENT.with(|cur| cur.set(Some(c.device)));
        Ok(())
    })
}

/// `aclrtGetCurrentContext`: a context of this thread's device.
#[no_mangle]
pub extern "C" fn aclrtGetCurrentContext(context: *mut aclrtContext) -> aclError {
    acl("aclrtGetCurrentContext", || {
        if context.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "context is null"));
        }
        let d = CURRENT
            .with(|c| c.get())
            .ok_or_else(|| acl_err(ACL_ERROR_INVALID_DEVICE, "no device is set on this thread"))?;
        let h = CONTEXTS.insert(Arc::new(Context { device: d }));
        // SAFETY: non-null, points to an aclrtContext (C contract).
        unsafe { context.write(h) };
        Ok(())
    })
}
