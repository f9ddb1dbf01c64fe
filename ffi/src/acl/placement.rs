//! Where a thread's work runs: the device each thread has chosen
//! (`aclrtSetDevice`), and the platform device that runs each device's new
//! streams (its own, or a communicator's once one is created on it).
//!
//! Both the device calls and the streams read this, so it sits below both.

use hccl_adapter::Device;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;

static DEVICES: Mutex<Option<HashMap<i32, Device>>> = Mutex::new(None);

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
    let mut devs = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    devs.get_or_insert_with(HashMap::new)
        .entry(id)
        .or_insert_with(|| Device::new(id as u32, Default::default()))
        .clone()
}

/// From now on, device `id`'s new streams run on `dev` (a communicator's).
pub(crate) fn bind_device(id: i32, dev: &Device) {
    let mut devs = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    devs.get_or_insert_with(HashMap::new)
        .insert(id, dev.clone());
}
