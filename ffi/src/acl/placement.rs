//! Where a thread's work runs: the device each thread has chosen
//! (`aclrtSetDevice`), and the platform device that runs each device's new
//! streams (its own, or a communicator's once one is created on it).
//!
//! Both the device calls and the streams read this, so it sits below both.
//! Profiling (`prof.rs`) is told whenever a platform device starts serving
//! an ACL device (the shim's own, made at the device's first stream, or a
//! communicator's), so a device profiled before that still records it.

use hccl_adapter::Device;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The platform devices of each ACL device.
#[derive(Default)]
struct Placement {
    /// The shim's own device of each ACL device, made when the device's
    /// first stream needs it (before any communicator exists there).
    own: HashMap<i32, Device>,
    /// The communicator device each ACL device's new streams run on (the
    /// last communicator created on it).
    bound: HashMap<i32, Device>,
}

static PLACEMENT: Mutex<Option<Placement>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Placement) -> R) -> R {
    let mut p = PLACEMENT.lock().unwrap_or_else(|e| e.into_inner());
    f(p.get_or_insert_with(Placement::default))
}

thread_local! {
    /// This thread's device, if one was set.
    pub(super) static CURRENT: Cell<Option<i32>> = const { Cell::new(None) };
}

/// This thread's device; device 0 if none was set (as ACL's default context).
pub(crate) fn current_device() -> i32 {
    CURRENT.with(|c| c.get()).unwrap_or(0)
}

/// The platform device that runs device `id`'s new streams.
pub(crate) fn platform_device(id: i32) -> Device {
    let (dev, made) = with(|p| {
        if let Some(d) = p.bound.get(&id) {
            return (d.clone(), false);
        }
        let mut made = false;
        let d = p
            .own
            .entry(id)
            .or_insert_with(|| {
                made = true;
                Device::new(id as u32, Default::default())
            })
            .clone();
        (d, made)
    });
    if made {
        // outside the placement lock: profiling takes its own
        if let Some(told) = DEVICE_MADE.get() {
            told(id, &dev);
        }
    }
    dev
}

/// Told of every platform device the shim makes for an ACL device (the
/// profiling module records those of the devices it profiles); set once,
/// by `aclprofInit`, so placement needs nothing of profiling.
static DEVICE_MADE: OnceLock<fn(i32, &Device)> = OnceLock::new();

/// From now on `told(acl_device, platform_device)` hears of every device
/// [`platform_device`] makes (the first caller's function stays).
pub(crate) fn on_device_made(told: fn(i32, &Device)) {
    let _ = DEVICE_MADE.set(told);
}

/// From now on, device `id`'s new streams run on `dev` (a communicator's).
pub(crate) fn bind_device(id: i32, dev: &Device) {
    with(|p| p.bound.insert(id, dev.clone()));
}

/// The platform devices serving device `id` now: the shim's own (if it
/// was made) and the communicator device its new streams run on (if any).
/// Communicators created on the device before the last one are not here
/// (see `CommEntry::acl_device`).
pub(crate) fn devices_of(id: i32) -> Vec<Device> {
    with(|p| {
        p.own
            .get(&id)
            .into_iter()
            .chain(p.bound.get(&id))
            .cloned()
            .collect()
    })
}
