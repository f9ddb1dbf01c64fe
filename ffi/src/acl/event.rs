//! Events: markers recorded in stream order, with host timestamps.
//!
//! A record enqueues a host task that stamps the time when the stream
//! reaches it. Recorded on a capturing stream, the task is captured and the
//! event left alone; each launch of the graph then counts as a new record
//! of the event, reached when that launch runs the task (so synchronizing
//! on the event waits for the latest launch). `aclrtStreamWaitEvent`
//! between different streams waits on the host until the event completes
//! (stronger ordering than needed, never weaker).
//!
//! The flags of `aclrtCreateEventWithFlag` are checked and honoured as
//! Ascend's runtime does (hicann/runtime: `rtEventCreateWithFlag` and the
//! event calls' checks): `ACL_EVENT_TIME_LINE` events give elapsed times,
//! the others refuse with `ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID`; only
//! `ACL_EVENT_SYNC` (or bit 0x4, or `ACL_EVENT_EXTERNAL`) events can be
//! waited for by a stream or reset (else `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`);
//! `ACL_EVENT_DEVICE_USE_ONLY` events cannot be recorded, waited for or
//! reset from the host (`ACL_ERROR_RT_PARAM_INVALID`); `ACL_EVENT_EXTERNAL`
//! events cannot be synchronized, queried or timed
//! (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`). `aclrtCreateEvent` gives Ascend's
//! default event: timed and waitable.

use super::stream::{lookup, AclStream};
use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// An event's records (shared with the host functions that mark them
/// reached, and with the model run instances it was recorded into).
#[derive(Default)]
pub(crate) struct EvState {
    /// Records enqueued.
    recorded: u64,
    /// Records the stream has reached.
    done: u64,
    /// When the last reached record ran.
    time: Option<Instant>,
    /// Where the last record was enqueued.
    stream: Option<Arc<AclStream>>,
    /// The records of launched graphs not reached yet, in launch order:
    /// each launch of a graph the event was recorded into enqueues one per
    /// captured record (see [`arm_captured`]).
    pending: VecDeque<u64>,
}

/// An event's state, as a model run instance holds it.
pub(crate) type EventState = Arc<Mutex<EvState>>;

fn lock_state(st: &Mutex<EvState>) -> std::sync::MutexGuard<'_, EvState> {
    st.lock().unwrap_or_else(|e| e.into_inner())
}

/// Before a launch of a graph on `stream`: one more record for each
/// record captured into it (`events`, one entry per captured record), so
/// synchronizing on the event waits for this launch to reach it.
pub(crate) fn arm_captured(events: &[EventState], stream: &Arc<AclStream>) {
    for e in events {
        let mut st = lock_state(e);
        st.recorded += 1;
        let seq = st.recorded;
        st.pending.push_back(seq);
        st.stream = Some(stream.clone());
    }
}

/// Undoes [`arm_captured`] (the launch failed, nothing was enqueued).
pub(crate) fn disarm_captured(events: &[EventState]) {
    for e in events.iter().rev() {
        let mut st = lock_state(e);
        if st.pending.pop_back().is_some() {
            st.recorded -= 1;
        }
    }
}

/// An ACL event.
pub(crate) struct AclEvent {
    st: Arc<Mutex<EvState>>,
    /// The `ACL_EVENT_*` flags it was created with.
    flags: u32,
}

/// Bit 0x4 of an event's flags: no ACL name (the runtime's
/// `RT_EVENT_DDSYNC`), accepted by Ascend's `aclrtCreateEventWithFlag`
/// and part of `aclrtCreateEvent`'s flags; the event can be waited for.
const EVENT_DDSYNC: u32 = 0x4;

/// The flags `aclrtCreateEvent` gives (Ascend's `RT_EVENT_DEFAULT`):
/// waitable, timed, a progress marker.
const DEFAULT_FLAGS: u32 = EVENT_DDSYNC | ACL_EVENT_TIME_LINE | ACL_EVENT_CAPTURE_STREAM_PROGRESS;

/// The flags that may be ORed together (the others are used alone).
const COMBINABLE: u32 =
    ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | EVENT_DDSYNC | ACL_EVENT_TIME_LINE;

/// Ascend's check of `aclrtCreateEventWithFlag`'s flag: a non-empty OR of
/// [`COMBINABLE`] flags, or `ACL_EVENT_DEVICE_USE_ONLY` or
/// `ACL_EVENT_EXTERNAL` alone. Anything else (0, `ACL_EVENT_IPC`, which
/// only `aclrtCreateEventExWithFlag` takes, unknown bits) is refused with
/// the code Ascend returns, `ACL_ERROR_RT_PARAM_INVALID`.
fn check_flags(flag: u32) -> Result<(), AclFail> {
    let combined = flag != 0 && flag & !COMBINABLE == 0;
    if combined || flag == ACL_EVENT_DEVICE_USE_ONLY || flag == ACL_EVENT_EXTERNAL {
        return Ok(());
    }
    Err(acl_err(
        ACL_ERROR_RT_PARAM_INVALID,
        format!(
            "event flag {flag:#x} is not an OR of ACL_EVENT_SYNC (0x1), \
             ACL_EVENT_CAPTURE_STREAM_PROGRESS (0x2), 0x4 and ACL_EVENT_TIME_LINE (0x8), \
             nor ACL_EVENT_DEVICE_USE_ONLY (0x10) or ACL_EVENT_EXTERNAL (0x20) alone \
             (ACL_EVENT_IPC needs aclrtCreateEventExWithFlag)"
        ),
    ))
}

pub(crate) static EVENTS: Registry<AclEvent> = Registry::new(0x4c);

fn event(h: aclrtEvent) -> Result<Arc<AclEvent>, AclFail> {
    EVENTS.get(h).ok_or_else(|| {
        acl_err(
            ACL_ERROR_INVALID_RESOURCE_HANDLE,
            format!("event handle {h:p} is not a live aclrtEvent"),
        )
    })
}

fn bad_stream(e: hccl_adapter::HcclError) -> AclFail {
    acl_err(ACL_ERROR_INVALID_RESOURCE_HANDLE, e.to_string())
}

impl AclEvent {
    /// Keeps a timestamp for `aclrtEventElapsedTime`.
    fn timed(&self) -> bool {
        self.flags & ACL_EVENT_TIME_LINE != 0
    }

    /// May be waited for by a stream (`aclrtStreamWaitEvent`) and reset.
    fn waitable(&self) -> bool {
        self.flags & (ACL_EVENT_SYNC | EVENT_DDSYNC | ACL_EVENT_EXTERNAL) != 0
    }

    /// Refuses host use (record, stream wait, reset) of a device-only event.
    fn host_usable(&self, what: &str) -> Result<(), AclFail> {
        if self.flags == ACL_EVENT_DEVICE_USE_ONLY {
            return Err(acl_err(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("{what}: an ACL_EVENT_DEVICE_USE_ONLY event is used on the device only"),
            ));
        }
        Ok(())
    }

    /// Refuses a stream wait or a reset of an event without ACL_EVENT_SYNC.
    fn wait_capable(&self, what: &str) -> Result<(), AclFail> {
        self.host_usable(what)?;
        if !self.waitable() {
            return Err(acl_err(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                format!(
                    "{what}: the event was created with flags {:#x}, without ACL_EVENT_SYNC",
                    self.flags
                ),
            ));
        }
        Ok(())
    }

    /// Refuses an `ACL_EVENT_EXTERNAL` event (synchronize, query, time).
    fn not_external(&self, what: &str) -> Result<(), AclFail> {
        if self.flags == ACL_EVENT_EXTERNAL {
            return Err(acl_err(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                format!("{what}: not supported for an ACL_EVENT_EXTERNAL event"),
            ));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EvState> {
        lock_state(&self.st)
    }

    /// Waits on the host until the last record has been reached.
    fn wait(&self) -> Result<(), AclFail> {
        let (recorded, done, stream) = {
            let st = self.lock();
            (st.recorded, st.done, st.stream.clone())
        };
        if done >= recorded {
            return Ok(());
        }
        if let Some(s) = stream {
            s.current().synchronize()?;
        }
        if self.lock().done < recorded {
            return Err(acl_err(
                ACL_ERROR_RT_FAILURE,
                "the stream failed before reaching the event",
            ));
        }
        Ok(())
    }
}

/// Creates an event with `flags` (checked) into `*event`.
fn create(event: *mut aclrtEvent, flags: u32) -> Result<(), AclFail> {
    if event.is_null() {
        return Err(acl_err(ACL_ERROR_INVALID_PARAM, "event is null"));
    }
    let h = EVENTS.insert(Arc::new(AclEvent {
        st: Arc::new(Mutex::new(EvState::default())),
        flags,
    }));
    // SAFETY: non-null, points to an aclrtEvent (C contract).
    unsafe { event.write(h) };
    Ok(())
}

/// `aclrtCreateEvent`: Ascend's default event (timed, waitable).
#[no_mangle]
pub extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    acl("aclrtCreateEvent", || create(event, DEFAULT_FLAGS))
}

/// `aclrtCreateEventWithFlag`: flags checked as Ascend checks them
/// ([`check_flags`]) and honoured (module documentation).
#[no_mangle]
pub extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    acl("aclrtCreateEventWithFlag", || {
        if event.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "event is null"));
        }
        check_flags(flag)?;
        create(event, flag)
    })
}

/// `aclrtDestroyEvent`.
#[no_mangle]
pub extern "C" fn aclrtDestroyEvent(event: aclrtEvent) -> aclError {
    acl("aclrtDestroyEvent", || {
        EVENTS.remove(event).map(|_| ()).ok_or_else(|| {
            acl_err(
                ACL_ERROR_INVALID_RESOURCE_HANDLE,
                format!("event handle {event:p} is not a live aclrtEvent"),
            )
        })
    })
}

/// `aclrtRecordEvent`: marks the current end of `stream`. On a capturing
/// stream the record is captured, not made: each launch of the graph
/// records the event anew (as a record on the launch stream).
#[no_mangle]
pub extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    acl("aclrtRecordEvent", || {
        let ev = self::event(event)?;
        let s = lookup(stream).map_err(bad_stream)?;
        ev.host_usable("aclrtRecordEvent")?;
        if let Some(model) = super::graph::capturing_model(&s) {
            let state = ev.st.clone();
            // runs on every launch: reaches the oldest launched record
            s.current().host_fn(move || {
                let mut st = lock_state(&state);
                if let Some(seq) = st.pending.pop_front() {
                    if seq > st.done {
                        st.done = seq;
                        st.time = Some(Instant::now());
                    }
                }
                Ok(())
            })?;
            model.note_event(ev.st.clone());
            return Ok(());
        }
        let seq = {
            let mut st = ev.lock();
            st.recorded += 1;
            st.stream = Some(s.clone());
            st.recorded
        };
        let state = ev.st.clone();
        let r = s.current().host_fn(move || {
            let mut st = lock_state(&state);
            if seq > st.done {
                st.done = seq;
                st.time = Some(Instant::now());
            }
            Ok(())
        });
        if let Err(e) = r {
            ev.lock().recorded -= 1;
            return Err(e.into());
        }
        Ok(())
    })
}

/// `aclrtResetEvent`: forgets the event's records.
#[no_mangle]
pub extern "C" fn aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    acl("aclrtResetEvent", || {
        let ev = self::event(event)?;
        lookup(stream).map_err(bad_stream)?;
        ev.wait_capable("aclrtResetEvent")?;
        *ev.lock() = EvState::default();
        Ok(())
    })
}

/// `aclrtQueryEventStatus`: complete once the stream has reached the last record.
#[no_mangle]
pub extern "C" fn aclrtQueryEventStatus(
    event: aclrtEvent,
    status: *mut aclrtEventRecordedStatus,
) -> aclError {
    acl("aclrtQueryEventStatus", || {
        let ev = self::event(event)?;
        if status.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "status is null"));
        }
        ev.not_external("aclrtQueryEventStatus")?;
        let st = ev.lock();
        let complete = st.done >= st.recorded;
        // SAFETY: non-null, points to an aclrtEventRecordedStatus (C contract).
        unsafe {
            status.write(if complete {
                ACL_EVENT_RECORDED_STATUS_COMPLETE
            } else {
                ACL_EVENT_RECORDED_STATUS_NOT_READY
            })
        };
        Ok(())
    })
}

/// `aclrtSynchronizeEvent`: waits until the stream reaches the last record.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    acl("aclrtSynchronizeEvent", || {
        let ev = self::event(event)?;
        ev.not_external("aclrtSynchronizeEvent")?;
        ev.wait()
    })
}

/// `aclrtEventElapsedTime`: milliseconds between two completed events,
/// both created with `ACL_EVENT_TIME_LINE` (or by `aclrtCreateEvent`).
#[no_mangle]
pub extern "C" fn aclrtEventElapsedTime(
    ms: *mut f32,
    startEvent: aclrtEvent,
    endEvent: aclrtEvent,
) -> aclError {
    acl("aclrtEventElapsedTime", || {
        if ms.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "ms is null"));
        }
        let (a, b) = (event(startEvent)?, event(endEvent)?);
        a.not_external("aclrtEventElapsedTime")?;
        b.not_external("aclrtEventElapsedTime")?;
        let time = |e: &AclEvent, which: &str| {
            let st = e.lock();
            match st.time {
                Some(t) if st.done >= st.recorded => Ok(t),
                _ => Err(acl_err(
                    ACL_ERROR_INVALID_PARAM,
                    format!(
                        "the {which} event has not completed (record it and synchronize first)"
                    ),
                )),
            }
        };
        let (t0, t1) = (time(&a, "start")?, time(&b, "end")?);
        for (e, which) in [(&a, "start"), (&b, "end")] {
            if !e.timed() {
                return Err(acl_err(
                    ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                    format!(
                        "the {which} event has no timestamp: created with flags {:#x}, \
                         without ACL_EVENT_TIME_LINE",
                        e.flags
                    ),
                ));
            }
        }
        let v = if t1 >= t0 {
            (t1 - t0).as_secs_f64() * 1e3
        } else {
            -((t0 - t1).as_secs_f64() * 1e3)
        };
        // SAFETY: non-null, points to a float (C contract).
        unsafe { ms.write(v as f32) };
        Ok(())
    })
}

/// `aclrtStreamWaitEvent`: later tasks of `stream` run after the event.
#[no_mangle]
pub extern "C" fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError {
    acl("aclrtStreamWaitEvent", || {
        let ev = self::event(event)?;
        let s = lookup(stream).map_err(bad_stream)?;
        ev.wait_capable("aclrtStreamWaitEvent")?;
        let same = ev
            .lock()
            .stream
            .as_ref()
            .is_some_and(|e| Arc::ptr_eq(e, &s));
        if same {
            return Ok(()); // stream order already gives it
        }
        ev.wait()
    })
}
