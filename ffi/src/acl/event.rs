//! Events: markers recorded in stream order, with host timestamps.
//!
//! A record enqueues a host task that stamps the time when the stream
//! reaches it (recorded on a capturing stream, it runs on every replay of
//! the graph, so the event completes when a replay reaches it). `aclrtStreamWaitEvent` between different streams waits on
//! the host until the event completes (stronger ordering than needed, never
//! weaker).

use super::stream::{lookup, AclStream};
use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Default)]
struct EvState {
    /// Records enqueued.
    recorded: u64,
    /// Records the stream has reached.
    done: u64,
    /// When the last reached record ran.
    time: Option<Instant>,
    /// Where the last record was enqueued.
    stream: Option<Arc<AclStream>>,
}

/// An ACL event.
pub(crate) struct AclEvent {
    st: Arc<Mutex<EvState>>,
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
    fn lock(&self) -> std::sync::MutexGuard<'_, EvState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
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

/// `aclrtCreateEvent`.
#[no_mangle]
pub extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    aclrtCreateEventWithFlag(event, 0)
}

/// `aclrtCreateEventWithFlag`: every flag gives a timing-capable event.
#[no_mangle]
pub extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    acl("aclrtCreateEventWithFlag", || {
        let _ = flag;
        if event.is_null() {
            return Err(acl_err(ACL_ERROR_INVALID_PARAM, "event is null"));
        }
        let h = EVENTS.insert(Arc::new(AclEvent {
            st: Arc::new(Mutex::new(EvState::default())),
        }));
        // SAFETY: non-null, points to an aclrtEvent (C contract).
        unsafe { event.write(h) };
        Ok(())
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

/// `aclrtRecordEvent`: marks the current end of `stream`.
#[no_mangle]
pub extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    acl("aclrtRecordEvent", || {
        let ev = self::event(event)?;
        let s = lookup(stream).map_err(bad_stream)?;
        let seq = {
            let mut st = ev.lock();
            st.recorded += 1;
            st.stream = Some(s.clone());
            st.recorded
        };
        let state = ev.st.clone();
        // a host function that may run again: recorded by a capturing
        // stream, it marks the event reached on every replay
        let r = s.current().host_fn(move || {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
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
        let st = ev.lock();
        let complete = st.done >= st.recorded;
        // SAFETY: non-null, points to an aclrtEventRecordedStatus (C contract).
        unsafe {
            status.write(if complete {
                ACL_EVENT_RECORDED_STATUS_COMPLETE
            } else {
                0
            })
        };
        Ok(())
    })
}

/// `aclrtSynchronizeEvent`: waits until the stream reaches the last record.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    acl("aclrtSynchronizeEvent", || self::event(event)?.wait())
}

/// `aclrtEventElapsedTime`: milliseconds between two completed events.
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
