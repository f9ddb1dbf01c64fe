//! ACL graphs: `aclmdlRICapture*` and `aclmdlRI*` — HCCL's graph mode as
//! programs reach it.
//!
//! Between `aclmdlRICaptureBegin` and `aclmdlRICaptureEnd` the tasks issued
//! on a stream (copies, memsets, event records, HCCL calls) are recorded by
//! its platform stream (`hccl_platform::Graph`, see the platform's
//! `stream/graph.rs`), not run; the model run instance (`aclmdlRI`) the end
//! returns replays them with `aclmdlRIExecuteAsync` on any stream of the
//! device, as often as wanted. A handle is created at the begin (so
//! `aclmdlRICaptureGetInfo` can return it, as ACL does) and holds its graph
//! from the end on; handles are looked up in a registry, so a destroyed one
//! is an error, not a crash.
//!
//! The capture mode limits ACL's "unsafe" synchronous calls (`aclrtMemcpy`,
//! `aclrtMemset`) while captures are active, per thread (see
//! [`check_unsafe_call`] and `aclmdlRICaptureThreadExchangeMode`); a
//! capture that is not `RELAXED` ends only on the thread that began it.
//!
//! `aclmdlRIBuildBegin` / `aclmdlRIBuildEnd` are not provided: they build
//! an instance from *persistent* streams bound to it (`aclmdlRIBindStream`,
//! `aclmdlRIEndTask`, `aclmdlRIUnbindStream`, streams made with
//! `aclrtCreateStreamWithConfig(ACL_STREAM_PERSISTENT)`), whose tasks run
//! on the bound streams while the execute stream only triggers them — a
//! surface of its own that HCCL's graph mode does not use.

use super::event::{arm_captured, disarm_captured, EventState};
use super::stream::{lookup, prepare_capture, stream_for_op, AclStream};
use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use hccl_adapter::{CaptureMode, CaptureStatus, DeviceMem, Graph};
use std::cell::Cell;
use std::ffi::{c_char, CStr};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

/// A model run instance: a capture in progress, then its graph.
pub(crate) struct AclModelRI {
    state: Mutex<RiState>,
}

#[derive(Default)]
struct RiState {
    /// `None` while the capture that made the handle goes on.
    graph: Option<Graph>,
    /// Set by `aclmdlRISetName`, for logs.
    name: Option<String>,
    /// The events recorded into it, once per captured record: each launch
    /// re-arms them (`event::arm_captured`).
    events: Vec<EventState>,
}

impl AclModelRI {
    fn lock(&self) -> std::sync::MutexGuard<'_, RiState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An event record was captured into this instance.
    pub(crate) fn note_event(&self, e: EventState) {
        self.lock().events.push(e);
    }
}

/// The model run instance `s` captures into, if it is capturing.
pub(crate) fn capturing_model(s: &Arc<AclStream>) -> Option<Arc<AclModelRI>> {
    if !s.current().is_capturing() {
        return None;
    }
    let ri = active()
        .iter()
        .find(|a| std::ptr::eq(a.stream.as_ptr(), Arc::as_ptr(s)))
        .map(|a| a.ri)?;
    MODELS.get(ri as aclmdlRI)
}

pub(crate) static MODELS: Registry<AclModelRI> = Registry::new(0x5c);

/// A capture begun through this shim.
struct Active {
    /// The ACL stream capturing (by address: the registry's `Arc`).
    stream: Weak<AclStream>,
    /// The handle `aclmdlRICaptureBegin` created.
    ri: usize,
    mode: aclmdlRICaptureMode,
    thread: ThreadId,
}

static ACTIVE: Mutex<Vec<Active>> = Mutex::new(Vec::new());

fn active() -> std::sync::MutexGuard<'static, Vec<Active>> {
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// This thread's capture mode (`aclmdlRICaptureThreadExchangeMode`).
    static THREAD_MODE: Cell<aclmdlRICaptureMode> =
        const { Cell::new(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) };
}

fn mode_name(m: aclmdlRICaptureMode) -> &'static str {
    match m {
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL => "ACL_MODEL_RI_CAPTURE_MODE_GLOBAL",
        ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL => "ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL",
        _ => "ACL_MODEL_RI_CAPTURE_MODE_RELAXED",
    }
}

fn decode_mode(m: aclmdlRICaptureMode) -> Result<CaptureMode, AclFail> {
    match m {
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL => Ok(CaptureMode::Global),
        ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL => Ok(CaptureMode::ThreadLocal),
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED => Ok(CaptureMode::Relaxed),
        _ => Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("unknown aclmdlRICaptureMode {m} (0 GLOBAL, 1 THREAD_LOCAL, 2 RELAXED)"),
        )),
    }
}

fn stream_of(h: aclrtStream) -> Result<Arc<AclStream>, AclFail> {
    lookup(h).map_err(|e| acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, e.to_string()))
}

fn model(h: aclmdlRI) -> Result<Arc<AclModelRI>, AclFail> {
    MODELS.get(h).ok_or_else(|| {
        acl_err(
            ACL_ERROR_INVALID_RESOURCE_HANDLE,
            format!(
                "modelRI {h:p} is not a live aclmdlRI (destroyed, or not made by \
                 aclmdlRICaptureBegin/aclmdlRICaptureEnd)"
            ),
        )
    })
}

fn still_capturing(h: aclmdlRI, api: &str) -> AclFail {
    acl_err(
        ACL_ERROR_RT_MODEL_CAPTURED,
        format!("modelRI {h:p} is still being captured: end the capture (aclmdlRICaptureEnd) before {api}"),
    )
}

/// Refuses ACL's "unsafe" call `api` on this thread while a capture whose
/// mode forbids it is active (`ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`):
/// a GLOBAL capture forbids it on its own thread unless that thread
/// switched to RELAXED, and on every other thread still in GLOBAL mode; a
/// THREAD_LOCAL capture only on its own thread, unless RELAXED.
pub(crate) fn check_unsafe_call(api: &str) -> Result<(), AclFail> {
    let me = std::thread::current().id();
    let mine = THREAD_MODE.with(Cell::get);
    let mut v = active();
    v.retain(|a| a.stream.strong_count() > 0);
    let forbidding = v.iter().find(|a| match a.mode {
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL if a.thread == me => {
            mine != ACL_MODEL_RI_CAPTURE_MODE_RELAXED
        }
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL => mine == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL,
        ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL => {
            a.thread == me && mine != ACL_MODEL_RI_CAPTURE_MODE_RELAXED
        }
        _ => false,
    });
    match forbidding {
        None => Ok(()),
        Some(a) => Err(acl_err(
            ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
            format!(
                "{api} is not allowed while a capture in {} is active ({}, this thread in {}); \
                 switch this thread with aclmdlRICaptureThreadExchangeMode (to \
                 ACL_MODEL_RI_CAPTURE_MODE_RELAXED), or call it after aclmdlRICaptureEnd",
                mode_name(a.mode),
                if a.thread == me {
                    "begun on this thread"
                } else {
                    "begun on another thread"
                },
                mode_name(mine)
            ),
        )),
    }
}

/// The live model run instance whose graph references `m`, if any: such
/// memory must not be freed before the instance is destroyed.
pub(crate) fn used_by_model(m: &DeviceMem) -> Option<String> {
    MODELS.all().into_iter().find_map(|ri| {
        let st = ri.lock();
        let g = st.graph.as_ref()?;
        g.references(m).then(|| match &st.name {
            Some(n) => format!("model run instance '{n}'"),
            None => "a model run instance".to_owned(),
        })
    })
}

/// `aclmdlRICaptureBegin`: from now on the tasks issued on `stream` are
/// recorded into a new model run instance, not run.
#[no_mangle]
pub extern "C" fn aclmdlRICaptureBegin(stream: aclrtStream, mode: aclmdlRICaptureMode) -> aclError {
    acl("aclmdlRICaptureBegin", || {
        let m = decode_mode(mode)?;
        let s = stream_of(stream)?;
        // a stream made before its device got a communicator moves to the
        // communicator's device now, not at its first HCCL call (which a
        // capture could not survive)
        let ps = prepare_capture(&s)?;
        ps.begin_capture(m)
            .map_err(|e| acl_err(ACL_ERROR_RT_STREAM_CAPTURED, e.to_string()))?;
        let h = MODELS.insert(Arc::new(AclModelRI {
            state: Mutex::new(RiState::default()),
        }));
        let mut v = active();
        v.retain(|a| a.stream.strong_count() > 0);
        v.push(Active {
            stream: Arc::downgrade(&s),
            ri: h as usize,
            mode,
            thread: std::thread::current().id(),
        });
        tracing::debug!(target: "hccl::acl", stream = ps.id(), mode = mode_name(mode), "capture begun");
        Ok(())
    })
}

/// `aclmdlRICaptureGetInfo`: the stream's capture status and, while it
/// captures, the model run instance it records into (NULL otherwise).
#[no_mangle]
pub extern "C" fn aclmdlRICaptureGetInfo(
    stream: aclrtStream,
    status: *mut aclmdlRICaptureStatus,
    modelRI: *mut aclmdlRI,
) -> aclError {
    acl("aclmdlRICaptureGetInfo", || {
        if status.is_null() || modelRI.is_null() {
            return Err(acl_err(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "{} is null",
                    if status.is_null() {
                        "status"
                    } else {
                        "modelRI"
                    }
                ),
            ));
        }
        let s = stream_of(stream)?;
        let st = match s.current().capture_status() {
            CaptureStatus::None => ACL_MODEL_RI_CAPTURE_STATUS_NONE,
            CaptureStatus::Active => ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
            CaptureStatus::Invalidated => ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
        };
        let ri = if st == ACL_MODEL_RI_CAPTURE_STATUS_NONE {
            0
        } else {
            active()
                .iter()
                .find(|a| std::ptr::eq(a.stream.as_ptr(), Arc::as_ptr(&s)))
                .map_or(0, |a| a.ri)
        };
        // SAFETY: both non-null (checked), pointing to an
        // aclmdlRICaptureStatus and an aclmdlRI (C contract).
        unsafe {
            status.write(st);
            modelRI.write(ri as aclmdlRI);
        }
        Ok(())
    })
}

/// `aclmdlRICaptureEnd`: ends the capture of `stream` and returns its
/// model run instance. If an error invalidated the capture, the instance
/// is destroyed, `*modelRI` is NULL and the result is
/// `ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED`.
#[no_mangle]
pub extern "C" fn aclmdlRICaptureEnd(stream: aclrtStream, modelRI: *mut aclmdlRI) -> aclError {
    acl("aclmdlRICaptureEnd", || {
        if modelRI.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "modelRI is null"));
        }
        let s = stream_of(stream)?;
        let me = std::thread::current().id();
        let a = {
            let mut v = active();
            let Some(i) = v
                .iter()
                .position(|a| std::ptr::eq(a.stream.as_ptr(), Arc::as_ptr(&s)))
            else {
                return Err(acl_err(
                    ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                    "the stream is not capturing (aclmdlRICaptureEnd without aclmdlRICaptureBegin)",
                ));
            };
            if v[i].mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED && v[i].thread != me {
                return Err(acl_err(
                    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
                    format!(
                        "the capture was begun by another thread in {}: end it on that thread \
                         (or begin it in ACL_MODEL_RI_CAPTURE_MODE_RELAXED)",
                        mode_name(v[i].mode)
                    ),
                ));
            }
            v.remove(i)
        };
        let h = a.ri as aclmdlRI;
        let ps = s.current();
        let invalid = ps.capture_status() == CaptureStatus::Invalidated;
        match ps.end_capture() {
            Ok(g) => {
                let ri = model(h)?;
                tracing::debug!(target: "hccl::acl", graph = ?g, "capture ended");
                ri.lock().graph = Some(g);
                // SAFETY: non-null (checked), points to an aclmdlRI (C contract).
                unsafe { modelRI.write(h) };
                Ok(())
            }
            Err(e) => {
                MODELS.remove(h);
                // SAFETY: as above.
                unsafe { modelRI.write(std::ptr::null_mut()) };
                let code = if invalid {
                    ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
                } else {
                    AclFail::from(e.clone()).code
                };
                Err(acl_err(code, e.to_string()))
            }
        }
    })
}

/// `aclmdlRICaptureThreadExchangeMode`: sets this thread's capture mode to
/// `*mode` and returns the previous one in `*mode`.
#[no_mangle]
pub extern "C" fn aclmdlRICaptureThreadExchangeMode(mode: *mut aclmdlRICaptureMode) -> aclError {
    acl("aclmdlRICaptureThreadExchangeMode", || {
        if mode.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "mode is null"));
        }
        // SAFETY: non-null (checked), points to an aclmdlRICaptureMode (C
        // contract).
        let new = unsafe { mode.read() };
        decode_mode(new)?;
        let old = THREAD_MODE.with(|m| m.replace(new));
        // SAFETY: as above.
        unsafe { mode.write(old) };
        Ok(())
    })
}

/// `aclmdlRIExecuteAsync`: enqueues the instance's tasks on `stream` (a
/// stream of the device it was captured on; a stream made before that
/// device had a communicator moves there first).
#[no_mangle]
pub extern "C" fn aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    acl("aclmdlRIExecuteAsync", || {
        let ri = model(modelRI)?;
        let (g, name, events) = {
            let st = ri.lock();
            let g = st
                .graph
                .clone()
                .ok_or_else(|| still_capturing(modelRI, "executing it"))?;
            (g, st.name.clone(), st.events.clone())
        };
        let acl_stream = stream_of(stream)?;
        let ps = stream_for_op(stream, g.device())?;
        if ps.is_capturing() {
            return Err(acl_err(
                ACL_ERROR_RT_STREAM_CAPTURED,
                "the stream is capturing: a model run instance cannot be executed into a capture",
            ));
        }
        tracing::trace!(target: "hccl::acl", model = name.as_deref().unwrap_or(""), "execute");
        arm_captured(&events, &acl_stream);
        if let Err(e) = g.launch(&ps) {
            disarm_captured(&events);
            return Err(e.into());
        }
        Ok(())
    })
}

/// `aclmdlRIDestroy`: releases the instance (tasks of earlier executions
/// still queued run to completion).
#[no_mangle]
pub extern "C" fn aclmdlRIDestroy(modelRI: aclmdlRI) -> aclError {
    acl("aclmdlRIDestroy", || {
        let ri = model(modelRI)?;
        if ri.lock().graph.is_none() {
            return Err(still_capturing(modelRI, "destroying it"));
        }
        MODELS.remove(modelRI);
        Ok(())
    })
}

/// `aclmdlRISetName`: names the instance (the last name set wins).
#[no_mangle]
pub extern "C" fn aclmdlRISetName(modelRI: aclmdlRI, name: *const c_char) -> aclError {
    acl("aclmdlRISetName", || {
        if name.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "name is null"));
        }
        let ri = model(modelRI)?;
        // SAFETY: non-null (checked), a NUL-terminated string (C contract).
        let n = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        ri.lock().name = Some(n);
        Ok(())
    })
}
