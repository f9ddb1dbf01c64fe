//! Streams: `aclrtCreateStream` and friends.

use super::placement::{current_device, platform_device};
use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use hccl_adapter::{Device, HcclError, Stream};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An ACL stream: the platform stream its tasks currently go to.
pub(crate) struct AclStream {
    device: i32,
    inner: Mutex<Stream>,
}

impl AclStream {
    fn new(device: i32) -> AclStream {
        AclStream {
            device,
            inner: Mutex::new(Stream::new(&platform_device(device))),
        }
    }

    /// The platform stream tasks are enqueued on now.
    pub(crate) fn current(&self) -> Stream {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub(crate) static STREAMS: Registry<AclStream> = Registry::new(0x2c);

thread_local! {
    /// The default (NULL) stream of each device, per thread.
    static DEFAULT: RefCell<HashMap<i32, Arc<AclStream>>> = RefCell::new(HashMap::new());
}

/// The stream behind a handle; NULL is this thread's default stream of its device.
pub(crate) fn lookup(h: aclrtStream) -> Result<Arc<AclStream>, HcclError> {
    if h.is_null() {
        let d = current_device();
        return Ok(DEFAULT.with(|m| {
            m.borrow_mut()
                .entry(d)
                .or_insert_with(|| Arc::new(AclStream::new(d)))
                .clone()
        }));
    }
    STREAMS.get(h).ok_or_else(|| {
        HcclError::para(format!(
            "stream handle {h:p} is not a live aclrtStream (destroyed, or not created by aclrtCreateStream)"
        ))
    })
}

/// The platform stream an op of a communicator on `dev` enqueues on: the
/// ACL stream's own if it already runs on `dev`; otherwise the stream is
/// drained and moved to `dev` (once per stream and communicator device).
///
/// A capturing stream cannot move (its capture would be lost): an op of a
/// communicator on another device is refused, and the capture invalidated
/// (it would lack the op).
pub(crate) fn stream_for_op(h: aclrtStream, dev: &Device) -> Result<Stream, HcclError> {
    let s = lookup(h)?;
    let mut cur = s.inner.lock().unwrap_or_else(|e| e.into_inner());
    if cur.device().uid() != dev.uid() {
        if cur.is_capturing() {
            let e = HcclError::para(format!(
                "the stream is capturing on device {} (platform device uid {}), and this call \
                 belongs to a communicator on device {} (uid {}): a capture records the calls \
                 of one device",
                s.device,
                cur.device().uid(),
                dev.id(),
                dev.uid()
            ));
            cur.invalidate_capture(&e);
            return Err(e);
        }
        cur.synchronize().map_err(|e| {
            e.during("draining the stream before moving it to the communicator's device")
        })?;
        tracing::debug!(
            target: "hccl::acl",
            device = s.device,
            "stream moved to a communicator's device"
        );
        *cur = Stream::new(dev);
    }
    Ok(cur.clone())
}

/// The platform stream `s` is to capture on: moved first (drained, then
/// replaced) to the platform device its ACL device runs new streams on, if
/// that changed since it was made (a communicator was created on the
/// device), as its first HCCL call would — a capturing stream cannot move.
pub(crate) fn prepare_capture(s: &AclStream) -> Result<Stream, AclFail> {
    let dev = platform_device(s.device);
    let mut cur = s.inner.lock().unwrap_or_else(|e| e.into_inner());
    if cur.device().uid() != dev.uid() && !cur.is_capturing() {
        cur.synchronize()
            .map_err(|e| e.during("draining the stream before it begins capturing"))?;
        *cur = Stream::new(&dev);
    }
    Ok(cur.clone())
}

/// Waits for every stream of `device` created through this shim, except
/// capturing ones (their tasks are recorded, not queued; one cannot be
/// synchronized until its capture ends).
pub(crate) fn synchronize_device(device: i32) -> Result<(), AclFail> {
    let wait = |s: Stream| {
        if s.is_capturing() {
            Ok(())
        } else {
            s.synchronize()
        }
    };
    for s in STREAMS.all() {
        if s.device == device {
            wait(s.current())?;
        }
    }
    DEFAULT
        .with(|m| m.borrow().get(&device).cloned())
        .map_or(Ok(()), |s| wait(s.current()))?;
    Ok(())
}

/// `aclrtCreateStream`: a stream on this thread's device.
#[no_mangle]
pub extern "C" fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError {
    acl("aclrtCreateStream", || {
        if stream.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "stream is null"));
        }
        let h = STREAMS.insert(Arc::new(AclStream::new(current_device())));
        // SAFETY: non-null, points to an aclrtStream (C contract).
        unsafe { stream.write(h) };
        Ok(())
    })
}

/// `aclrtDestroyStream`: waits for the stream's tasks, then releases it.
/// A capturing stream is refused (`ACL_ERROR_RT_STREAM_CAPTURED`): end its
/// capture first.
#[no_mangle]
pub extern "C" fn aclrtDestroyStream(stream: aclrtStream) -> aclError {
    acl("aclrtDestroyStream", || {
        let bad = || {
            acl_err(
                ACL_ERROR_INVALID_RESOURCE_HANDLE,
                format!("stream handle {stream:p} is not a live aclrtStream"),
            )
        };
        if STREAMS
            .get(stream)
            .ok_or_else(bad)?
            .current()
            .is_capturing()
        {
            return Err(acl_err(
                ACL_ERROR_RT_STREAM_CAPTURED,
                "the stream is capturing: end its capture (aclmdlRICaptureEnd) before destroying it",
            ));
        }
        let s = STREAMS.remove(stream).ok_or_else(bad)?;
        s.current().synchronize()?;
        Ok(())
    })
}

/// `aclrtSynchronizeStream`: waits until every task enqueued so far has
/// run; reports the first failure (e.g. a collective's timeout). A
/// capturing stream cannot be synchronized: `ACL_ERROR_RT_STREAM_CAPTURED`,
/// and its capture is invalidated.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError {
    acl("aclrtSynchronizeStream", || {
        let s = lookup(stream)
            .map_err(|e| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, e.to_string()))?;
        let cur = s.current();
        let capturing = cur.is_capturing();
        cur.synchronize().map_err(|e| match capturing {
            true => acl_err(ACL_ERROR_RT_STREAM_CAPTURED, e.to_string()),
            false => e.into(),
        })
    })
}
