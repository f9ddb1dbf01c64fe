//! ACL profiling (`acl_prof.h`, Ascend's libmsprofiler): `aclprofInit` …
//! `aclprofFinalize` around `aclprofStart` / `aclprofStop`.
//!
//! Profiling a device records the timeline of the platform devices that
//! serve it (`Device::start_timeline`: every stream task with its begin
//! and end, and a span per HCCL op) and `aclprofStop` writes it as Chrome
//! trace JSON to `DIR/hccl_prof_dev<id>_<pid>.json`.
//!
//! An ACL device is served by up to several platform devices: the shim's
//! own (made at the device's first stream, while no communicator exists
//! on it) and the device of each communicator created on it (whose ops,
//! and the device's later streams, run there; see `placement.rs`).
//! `aclprofStart` starts a timeline on each that exists; one that appears
//! later — a communicator created after `aclprofStart`, or the device's
//! first stream — is told to profiling (`device_appeared`) and recorded
//! from then on, because the session remembers which ACL devices are
//! profiled. A device whose timeline is on already (`HCCL_RS_TRACE`) is
//! shared: profiling writes it at `aclprofStop` but leaves it on for its
//! starter. A communicator destroyed before `aclprofStop` is still in the
//! profile: the session holds its timeline (and platform device) until
//! then. The file of an ACL device with several platform devices holds
//! the trace events of all of them (the ones that recorded tasks).
//!
//! Codes follow Ascend's profiler: bad arguments `ACL_ERROR_INVALID_PARAM`,
//! `aclprofInit` twice `ACL_ERROR_REPEAT_INITIALIZE`, any call before
//! `aclprofInit` (and `aclprofStop` of a device not being profiled)
//! `ACL_ERROR_PROF_NOT_RUN`, `aclprofStart` of a device being profiled
//! `ACL_ERROR_PROF_ALREADY_RUN`, a device that does not exist
//! `ACL_ERROR_INVALID_DEVICE`, a profile that cannot be written
//! `ACL_ERROR_WRITE_FILE`.

use super::device::check_device;
use super::placement::devices_of;
use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use hccl_adapter::{Device, Timeline, DEFAULT_TIMELINE_EVENTS};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Devices a configuration may list (Ascend's `PROF_MAX_DEV_NUM`).
const MAX_DEVICES: u32 = 64;

/// The longest result path accepted (Linux's `PATH_MAX`, NUL excluded).
const MAX_PATH: usize = 4095;

/// Every `aclprofAicoreMetrics` value (accepted; nothing to measure on
/// CPUs).
const AICORE_METRICS: [aclprofAicoreMetrics; 10] = [
    ACL_AICORE_ARITHMETIC_UTILIZATION,
    ACL_AICORE_PIPE_UTILIZATION,
    ACL_AICORE_MEMORY_BANDWIDTH,
    ACL_AICORE_L0B_AND_WIDTH,
    ACL_AICORE_RESOURCE_CONFLICT_RATIO,
    ACL_AICORE_MEMORY_UB,
    ACL_AICORE_L2_CACHE,
    ACL_AICORE_PIPE_EXECUTE_UTILIZATION,
    ACL_AICORE_MEMORY_ACCESS,
    ACL_AICORE_NONE,
];

/// What an `aclprofConfig` handle stands for.
struct ProfConfig {
    devices: Vec<u32>,
}

static CONFIGS: Registry<ProfConfig> = Registry::new(0x6c);

/// A platform device recorded for a profiled ACL device.
struct Recording {
    device: Device,
    timeline: Arc<Timeline>,
    /// Whether profiling started the timeline (and so stops it); `false`
    /// when one was on already, whose starter stops it.
    started: bool,
    /// The trace's process name.
    label: String,
}

/// A profiled ACL device.
struct Profiled {
    /// Task events each timeline keeps at most.
    capacity: usize,
    recordings: Vec<Recording>,
}

impl Profiled {
    /// Records `dev` (once).
    fn record(&mut self, dev: &Device, label: String) {
        if self.recordings.iter().any(|r| r.device.uid() == dev.uid()) {
            return;
        }
        let (timeline, started) = dev.start_timeline(self.capacity);
        tracing::debug!(target: "hccl::acl", uid = dev.uid(), %label, started, "profiling records a device");
        self.recordings.push(Recording {
            device: dev.clone(),
            timeline,
            started,
            label,
        });
    }
}

/// Between `aclprofInit` and `aclprofFinalize`.
struct Session {
    /// Where profiles go.
    dir: PathBuf,
    /// The ACL devices being profiled.
    running: BTreeMap<i32, Profiled>,
}

static SESSION: Mutex<Option<Session>> = Mutex::new(None);

fn session() -> MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_initialized() -> AclFail {
    acl_err(
        ACL_ERROR_PROF_NOT_RUN,
        "profiling is not initialized (call aclprofInit first)",
    )
}

/// A platform device now serves ACL device `acl_device` (the shim's own,
/// or a communicator's, named `label`): recorded if that device is being
/// profiled. Called with no lock of the shim held.
pub(crate) fn device_appeared(acl_device: i32, dev: &Device, label: Option<String>) {
    let mut s = session();
    if let Some(p) = s.as_mut().and_then(|s| s.running.get_mut(&acl_device)) {
        p.record(dev, label.unwrap_or_else(|| format!("device {acl_device}")));
    }
}

/// The configuration behind a handle.
fn config(h: *const aclprofConfig) -> Result<Arc<ProfConfig>, AclFail> {
    if h.is_null() {
        return Err(acl_err(ACL_ERROR_INVALID_PARAM, "profilerConfig is null"));
    }
    CONFIGS.get(h.cast_mut().cast::<c_void>()).ok_or_else(|| {
        acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!(
                "profilerConfig {h:p} is not a live aclprofConfig (destroyed, or not made by \
                 aclprofCreateConfig)"
            ),
        )
    })
}

/// The devices of a configuration, checked: each exists, none twice.
fn device_ids(cfg: &ProfConfig) -> Result<Vec<i32>, AclFail> {
    let mut ids = Vec::with_capacity(cfg.devices.len());
    for &d in &cfg.devices {
        let id = i32::try_from(d).map_err(|_| {
            acl_err(
                ACL_ERROR_INVALID_DEVICE,
                format!("device {d} does not exist"),
            )
        })?;
        check_device(id)?;
        if ids.contains(&id) {
            return Err(acl_err(
                ACL_ERROR_INVALID_PARAM,
                format!("the configuration lists device {id} twice"),
            ));
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Task events a timeline keeps (`HCCL_RS_TRACE_EVENTS`, as communicators
/// read it).
fn events_capacity() -> Result<usize, AclFail> {
    match std::env::var("HCCL_RS_TRACE_EVENTS") {
        Err(_) => Ok(DEFAULT_TIMELINE_EVENTS),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=1 << 26).contains(&n) => Ok(n),
            _ => Err(acl_err(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "HCCL_RS_TRACE_EVENTS={v:?}: expected a number of task events from 1 to \
                     67108864"
                ),
            )),
        },
    }
}

/// The C string at `p`, which must be exactly `length` bytes long; reads
/// no further than its NUL or byte `length`.
fn path_arg(p: *const c_char, length: usize) -> Result<PathBuf, AclFail> {
    if p.is_null() {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            "profilerResultPath is null",
        ));
    }
    if length == 0 || length > MAX_PATH {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("length {length} is not a path length (1 to {MAX_PATH})"),
        ));
    }
    let mut bytes = Vec::with_capacity(length);
    for i in 0..=length {
        // SAFETY: `p` is a NUL-terminated string (C contract); bytes are
        // read up to its NUL or byte `length`, whichever comes first, so
        // never past its end.
        let b = unsafe { p.add(i).read() } as u8;
        if b == 0 {
            break;
        }
        bytes.push(b);
    }
    if bytes.len() != length {
        let n = if bytes.len() > length {
            "longer".to_owned()
        } else {
            format!("{} bytes", bytes.len())
        };
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("length {length} does not match profilerResultPath ({n})"),
        ));
    }
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

/// Makes `dir` (and its parents) and checks a file can be written there.
fn prepare_dir(dir: &Path) -> Result<PathBuf, AclFail> {
    let bad = |what: String| acl_err(ACL_ERROR_INVALID_PARAM, what);
    let dir = std::path::absolute(dir)
        .map_err(|e| bad(format!("profilerResultPath {}: {e}", dir.display())))?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| bad(format!("cannot create directory {}: {e}", dir.display())))?;
    let probe = dir.join(format!(".hccl_prof_probe_{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| bad(format!("cannot write in {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The profile of ACL device `id`: the Chrome trace JSON of its one
/// recorded timeline, or those of several merged (trace events
/// concatenated, each process named once).
fn profile_json(id: i32, recordings: &[Recording]) -> Value {
    let mut used: Vec<&Recording> = recordings
        .iter()
        .filter(|r| !r.timeline.is_empty())
        .collect();
    if used.is_empty() {
        used.extend(recordings.first());
    }
    let mut traces = used.iter().map(|r| r.timeline.to_chrome_json(&r.label));
    let Some(first) = traces.next() else {
        // nothing ever ran on the device
        return json!({
            "traceEvents": [],
            "displayTimeUnit": "ns",
            "otherData": {
                "process": format!("device {id}"),
                "dropped_events": 0,
                "format": "hccl-rs timeline 1",
            },
        });
    };
    if used.len() == 1 {
        return first;
    }
    let mut out = json!({
        "displayTimeUnit": first["displayTimeUnit"].clone(),
        "otherData": first["otherData"].clone(),
    });
    let mut named: Vec<Value> = Vec::new();
    let mut events: Vec<Value> = Vec::new();
    let mut dropped = 0u64;
    for mut trace in std::iter::once(first).chain(traces) {
        dropped += trace["otherData"]["dropped_events"].as_u64().unwrap_or(0);
        if let Value::Array(evs) = trace["traceEvents"].take() {
            for e in evs {
                if e["ph"] == "M" && e["name"] == "process_name" {
                    if named.contains(&e["pid"]) {
                        continue;
                    }
                    named.push(e["pid"].clone());
                }
                events.push(e);
            }
        }
    }
    out["traceEvents"] = Value::Array(events);
    out["otherData"]["dropped_events"] = dropped.into();
    out["otherData"]["process"] = format!("device {id}").into();
    out["otherData"]["timelines"] = used.iter().map(|r| r.label.as_str()).collect();
    out
}

/// Writes `json` to `path` through a temporary file renamed into place.
fn write_json(path: &Path, json: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(json).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path))
}

/// Stops recording the ACL devices `stopped` and writes their profiles
/// into `dir`; the first failure is returned once all are done.
fn stop_and_write(dir: &Path, stopped: Vec<(i32, Profiled)>) -> Result<(), AclFail> {
    let mut first_err = None;
    for (id, p) in stopped {
        for r in &p.recordings {
            if r.started {
                r.device.stop_timeline();
            }
        }
        let path = dir.join(format!("hccl_prof_dev{id}_{}.json", std::process::id()));
        let json = profile_json(id, &p.recordings);
        match write_json(&path, &json) {
            Ok(()) => tracing::info!(
                target: "hccl::acl",
                device = id,
                path = %path.display(),
                events = p.recordings.iter().map(|r| r.timeline.len()).sum::<usize>(),
                "profile written"
            ),
            Err(e) => {
                let e = acl_err(
                    ACL_ERROR_WRITE_FILE,
                    format!(
                        "writing the profile of device {id} to {}: {e}",
                        path.display()
                    ),
                );
                tracing::error!(target: "hccl::acl", device = id, "{}", e.message);
                first_err.get_or_insert(e);
            }
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// `aclprofInit`: profiles go to the directory `profilerResultPath`
/// (`length` = its length), made if missing.
#[no_mangle]
pub extern "C" fn aclprofInit(profilerResultPath: *const c_char, length: usize) -> aclError {
    acl("aclprofInit", || {
        // devices the shim makes while a session runs join its timelines
        super::placement::on_device_made(|id, dev| device_appeared(id, dev, None));
        let path = path_arg(profilerResultPath, length)?;
        let mut s = session();
        if s.is_some() {
            return Err(acl_err(
                ACL_ERROR_REPEAT_INITIALIZE,
                "aclprofInit was already called (aclprofFinalize ends profiling)",
            ));
        }
        let dir = prepare_dir(&path)?;
        *s = Some(Session {
            dir,
            running: BTreeMap::new(),
        });
        Ok(())
    })
}

/// `aclprofFinalize`: stops and writes every device still being profiled,
/// then ends profiling.
#[no_mangle]
pub extern "C" fn aclprofFinalize() -> aclError {
    acl("aclprofFinalize", || {
        let s = session().take().ok_or_else(not_initialized)?;
        stop_and_write(&s.dir, s.running.into_iter().collect())
    })
}

/// `aclprofCreateConfig`: the devices to profile; NULL on bad input (the
/// reason is logged). Each device is checked when the configuration is
/// started or stopped.
#[no_mangle]
pub extern "C" fn aclprofCreateConfig(
    deviceIdList: *mut u32,
    deviceNums: u32,
    aicoreMetrics: aclprofAicoreMetrics,
    aicoreEvents: *const aclprofAicoreEvents,
    dataTypeConfig: u64,
) -> *mut aclprofConfig {
    let mut out = std::ptr::null_mut();
    acl("aclprofCreateConfig", || {
        let bad = |what: String| Err(acl_err(ACL_ERROR_INVALID_PARAM, what));
        if deviceIdList.is_null() {
            return bad("deviceIdList is null".into());
        }
        if deviceNums == 0 || deviceNums > MAX_DEVICES {
            return bad(format!("deviceNums {deviceNums} is not 1 to {MAX_DEVICES}"));
        }
        if !AICORE_METRICS.contains(&aicoreMetrics) {
            return bad(format!("unknown aclprofAicoreMetrics {aicoreMetrics}"));
        }
        if !aicoreEvents.is_null() {
            return bad("aicoreEvents must be NULL".into());
        }
        // SAFETY: non-null; the caller passes deviceNums ids (C contract),
        // at most MAX_DEVICES.
        let devices = unsafe { std::slice::from_raw_parts(deviceIdList, deviceNums as usize) };
        tracing::debug!(target: "hccl::acl", ?devices, aicoreMetrics, dataTypeConfig, "aclprofCreateConfig");
        out = CONFIGS
            .insert(Arc::new(ProfConfig {
                devices: devices.to_vec(),
            }))
            .cast::<aclprofConfig>();
        Ok(())
    });
    out
}

/// `aclprofDestroyConfig`.
#[no_mangle]
pub extern "C" fn aclprofDestroyConfig(profilerConfig: *const aclprofConfig) -> aclError {
    acl("aclprofDestroyConfig", || {
        config(profilerConfig)?;
        CONFIGS.remove(profilerConfig.cast_mut().cast::<c_void>());
        Ok(())
    })
}

/// `aclprofStart`: records the timeline of each device of the
/// configuration, now and as communicators appear on it, until
/// `aclprofStop`.
#[no_mangle]
pub extern "C" fn aclprofStart(profilerConfig: *const aclprofConfig) -> aclError {
    acl("aclprofStart", || {
        let cfg = config(profilerConfig)?;
        let mut guard = session();
        let s = guard.as_mut().ok_or_else(not_initialized)?;
        let ids = device_ids(&cfg)?;
        if let Some(id) = ids.iter().find(|id| s.running.contains_key(id)) {
            return Err(acl_err(
                ACL_ERROR_PROF_ALREADY_RUN,
                format!("device {id} is being profiled already (aclprofStop it first)"),
            ));
        }
        let capacity = events_capacity()?;
        for id in ids {
            let mut p = Profiled {
                capacity,
                recordings: Vec::new(),
            };
            // communicators first: the communicator device the ACL device's
            // streams run on is named after its communicator
            for (dev, label) in crate::hccl::comm_devices_on(id) {
                p.record(&dev, label);
            }
            for dev in devices_of(id) {
                p.record(&dev, format!("device {id}"));
            }
            s.running.insert(id, p);
        }
        Ok(())
    })
}

/// `aclprofStop`: stops recording each device of the configuration and
/// writes its profile (`DIR/hccl_prof_dev<id>_<pid>.json`). What has not
/// run yet is not in it: synchronize the streams first.
#[no_mangle]
pub extern "C" fn aclprofStop(profilerConfig: *const aclprofConfig) -> aclError {
    acl("aclprofStop", || {
        let cfg = config(profilerConfig)?;
        let (dir, stopped) = {
            let mut guard = session();
            let s = guard.as_mut().ok_or_else(not_initialized)?;
            let ids = device_ids(&cfg)?;
            if let Some(id) = ids.iter().find(|id| !s.running.contains_key(id)) {
                return Err(acl_err(
                    ACL_ERROR_PROF_NOT_RUN,
                    format!("device {id} is not being profiled (aclprofStart it first)"),
                ));
            }
            let stopped: Vec<(i32, Profiled)> = ids
                .into_iter()
                .filter_map(|id| s.running.remove(&id).map(|p| (id, p)))
                .collect();
            (s.dir.clone(), stopped)
        };
        stop_and_write(&dir, stopped)
    })
}
