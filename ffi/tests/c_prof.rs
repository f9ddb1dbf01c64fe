//! ACL profiling (`aclprof*`) and the diagnosis extensions
//! (`HcclRsDumpFlightRecorder`, `HcclRsWriteTimeline`) through the C API,
//! as a C program calls them: handles, raw pointers, codes; the files they
//! write parsed as JSON.
//!
//! Profiling is process-wide state (one `aclprofInit` at a time), so the
//! tests of this file take turns ([`serial`]) whichever runner runs them.

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use serde_json::Value;
use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard};

const E_PARA: u32 = 1;
const E_PTR: u32 = 2;
const E_NOT_SUPPORT: u32 = 5;
const E_SYSCALL: u32 = 8;
const FP32: u32 = 4;
const SUM: u32 = 0;

/// One test of this file at a time (profiling and the environment are
/// process-wide).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let d =
            std::env::temp_dir().join(format!("hccl_c_prof_{tag}_{}_{nanos}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        TempDir(d)
    }

    fn c_path(&self) -> CString {
        CString::new(self.0.to_str().expect("utf-8 temp dir")).expect("no NUL")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn prof_init(dir: &TempDir) -> i32 {
    let p = dir.c_path();
    aclprofInit(p.as_ptr(), p.as_bytes().len())
}

fn config_of(devices: &[u32]) -> *mut aclprofConfig {
    let mut list = devices.to_vec();
    let cfg = aclprofCreateConfig(
        list.as_mut_ptr(),
        list.len() as u32,
        ACL_AICORE_NONE,
        null(),
        ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_HCCL_TRACE,
    );
    assert!(
        !cfg.is_null(),
        "aclprofCreateConfig({devices:?}): {:?}",
        last_error_message()
    );
    cfg
}

/// The profile aclprofStop wrote for `device`, parsed.
fn profile(dir: &Path, device: u32) -> Value {
    let path = dir.join(format!("hccl_prof_dev{device}_{}.json", std::process::id()));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("profile {} not written: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// Checks `trace` holds complete events, at least `ops` op spans named
/// `AllReduce` and tasks, all of process `pid`; returns the op spans.
fn check_trace(trace: &Value, pid: u32, ops: usize) -> Vec<Value> {
    let events = trace["traceEvents"]
        .as_array()
        .unwrap_or_else(|| panic!("no traceEvents: {trace}"));
    let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(!complete.is_empty(), "no complete events: {trace}");
    for e in &complete {
        assert_eq!(e["pid"], pid, "event of another process: {e}");
        assert!(
            e["ts"].is_number() && e["dur"].as_f64().is_some_and(|d| d >= 0.0),
            "{e}"
        );
    }
    let spans: Vec<Value> = complete
        .iter()
        .filter(|e| e["cat"] == "op")
        .map(|e| (*e).clone())
        .collect();
    let allreduces = spans.iter().filter(|e| e["name"] == "AllReduce").count();
    assert!(
        allreduces >= ops,
        "{allreduces} AllReduce op spans, want at least {ops}: {spans:?}"
    );
    assert!(
        complete.iter().any(|e| e["cat"] == "task"),
        "no task events: {trace}"
    );
    spans
}

/// `iters` AllReduces of 1000 floats (rank r contributes r + 1 + i) on
/// `stream`, synchronized and checked.
fn allreduce_loop(r: u32, p: u32, comm: HcclComm, stream: aclrtStream, iters: u32) {
    let n = 1000usize;
    let bytes = 4 * n;
    let (mut send, mut recv) = (null_mut(), null_mut());
    acl_ok(aclrtMalloc(&mut send, bytes, 0), "aclrtMalloc send");
    acl_ok(aclrtMalloc(&mut recv, bytes, 0), "aclrtMalloc recv");
    for it in 0..iters {
        let x: Vec<f32> = (0..n).map(|i| (r + 1 + it) as f32 + i as f32).collect();
        acl_ok(
            aclrtMemcpy(send, bytes, x.as_ptr().cast(), bytes, 1),
            "aclrtMemcpy H2D",
        );
        ok(
            HcclAllReduce(send, recv, n as u64, FP32, SUM, comm, stream),
            "HcclAllReduce",
        );
        acl_ok(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
        let mut got = vec![0f32; n];
        acl_ok(
            aclrtMemcpy(got.as_mut_ptr().cast(), bytes, recv, bytes, 2),
            "aclrtMemcpy D2H",
        );
        let base: u32 = (0..p).map(|q| q + 1 + it).sum();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(
                *v,
                base as f32 + (p as usize * i) as f32,
                "rank {r} iter {it} [{i}]"
            );
        }
    }
    acl_ok(aclrtFree(send), "aclrtFree");
    acl_ok(aclrtFree(recv), "aclrtFree");
}

#[test]
fn profiling_records_allreduces_of_communicators_created_after_start() {
    let _one = serial();
    let dir = TempDir::new("after_start");
    let p = 2u32;
    acl_ok(prof_init(&dir), "aclprofInit");
    assert!(dir.0.is_dir(), "aclprofInit makes the directory");
    let cfg = config_of(&[0, 1]);
    acl_ok(aclprofStart(cfg), "aclprofStart");

    // threads as ranks: each joins with the root info after the start
    let mut root = HcclRootInfo {
        internal: [0; HCCL_ROOT_INFO_BYTES],
    };
    ok(HcclGetRootInfo(&mut root), "HcclGetRootInfo");
    std::thread::scope(|s| {
        for r in 0..p {
            let root = &root;
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                let mut comm = null_mut();
                ok(
                    HcclCommInitRootInfo(p, root, r, &mut comm),
                    "HcclCommInitRootInfo",
                );
                allreduce_loop(r, p, comm, stream, 3);
                ok(HcclCommDestroy(comm), "HcclCommDestroy");
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });

    acl_ok(aclprofStop(cfg), "aclprofStop");
    for d in 0..p {
        let trace = profile(&dir.0, d);
        let spans = check_trace(&trace, d, 3);
        // the op spans carry the op's arguments
        let ar = spans.iter().find(|e| e["name"] == "AllReduce").unwrap();
        assert_eq!(ar["args"]["count"], 1000, "{ar}");
        assert_eq!(ar["args"]["dtype"], "fp32", "{ar}");
        assert_eq!(trace["otherData"]["format"], "hccl-rs timeline 1");
    }
    // stopped: a second stop has nothing to stop
    assert_eq!(aclprofStop(cfg), ACL_ERROR_PROF_NOT_RUN);
    acl_ok(aclprofDestroyConfig(cfg), "aclprofDestroyConfig");
    acl_ok(aclprofFinalize(), "aclprofFinalize");
}

#[test]
fn profiling_records_existing_communicators_and_finalize_writes_what_runs() {
    let _one = serial();
    let dir = TempDir::new("existing");
    let p = 2u32;
    let mut devices: Vec<i32> = (0..p as i32).collect();
    let mut comms = vec![null_mut(); p as usize];
    ok(
        HcclCommInitAll(p, devices.as_mut_ptr(), comms.as_mut_ptr()),
        "HcclCommInitAll",
    );
    let comms: Vec<usize> = comms.into_iter().map(|c| c as usize).collect();
    let tl =
        |r: usize| CString::new(dir.0.join(format!("timeline{r}.json")).to_str().unwrap()).unwrap();
    // no timeline on yet
    std::fs::create_dir_all(&dir.0).unwrap();
    assert_eq!(
        HcclRsWriteTimeline(comms[0] as HcclComm, tl(0).as_ptr()),
        E_NOT_SUPPORT
    );

    acl_ok(prof_init(&dir), "aclprofInit");
    let cfg = config_of(&[0, 1]);
    acl_ok(aclprofStart(cfg), "aclprofStart");
    std::thread::scope(|s| {
        for (r, &c) in comms.iter().enumerate() {
            let tl = tl(r);
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                allreduce_loop(r as u32, p, c as HcclComm, stream, 2);
                // the timeline being recorded, on request
                ok(
                    HcclRsWriteTimeline(c as HcclComm, tl.as_ptr()),
                    "HcclRsWriteTimeline",
                );
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });
    for r in 0..p as usize {
        let text = std::fs::read_to_string(dir.0.join(format!("timeline{r}.json"))).unwrap();
        check_trace(&serde_json::from_str(&text).unwrap(), r as u32, 2);
    }
    acl_ok(aclprofDestroyConfig(cfg), "aclprofDestroyConfig");
    // finalize stops what still runs and writes it
    acl_ok(aclprofFinalize(), "aclprofFinalize");
    for d in 0..p {
        check_trace(&profile(&dir.0, d), d, 2);
    }
    // profiling stopped: no timeline on any more
    assert_eq!(
        HcclRsWriteTimeline(comms[0] as HcclComm, tl(0).as_ptr()),
        E_NOT_SUPPORT
    );
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
}

#[test]
fn profiling_bad_input_returns_the_documented_codes() {
    let _one = serial();
    let dir = TempDir::new("bad");
    let path = dir.c_path();
    let len = path.as_bytes().len();

    // aclprofInit: null, zero length, length not the string's
    assert_eq!(aclprofInit(null(), 5), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclprofInit(path.as_ptr(), 0), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclprofInit(path.as_ptr(), len - 1), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclprofInit(path.as_ptr(), len + 1), ACL_ERROR_INVALID_PARAM);
    assert!(
        last_error_message().unwrap().contains("does not match"),
        "{:?}",
        last_error_message()
    );
    // a path that is a file, not a directory
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("a_file");
    std::fs::write(&file, b"x").unwrap();
    let f = CString::new(file.to_str().unwrap()).unwrap();
    assert_eq!(
        aclprofInit(f.as_ptr(), f.as_bytes().len()),
        ACL_ERROR_INVALID_PARAM
    );

    // aclprofCreateConfig: NULL for what cannot be a configuration
    let mut dev = [0u32, 1];
    assert!(aclprofCreateConfig(null_mut(), 1, ACL_AICORE_NONE, null(), 0).is_null());
    assert!(aclprofCreateConfig(dev.as_mut_ptr(), 0, ACL_AICORE_NONE, null(), 0).is_null());
    assert!(aclprofCreateConfig(dev.as_mut_ptr(), 65, ACL_AICORE_NONE, null(), 0).is_null());
    assert!(aclprofCreateConfig(dev.as_mut_ptr(), 2, 9, null(), 0).is_null());
    let events = std::ptr::dangling::<aclprofAicoreEvents>();
    assert!(aclprofCreateConfig(dev.as_mut_ptr(), 2, ACL_AICORE_NONE, events, 0).is_null());
    // every metric of the header is accepted
    for m in [
        ACL_AICORE_ARITHMETIC_UTILIZATION,
        ACL_AICORE_MEMORY_ACCESS,
        ACL_AICORE_NONE,
    ] {
        let c = aclprofCreateConfig(dev.as_mut_ptr(), 2, m, null(), ACL_PROF_TASK_TIME_L0);
        assert!(!c.is_null(), "metric {m}: {:?}", last_error_message());
        acl_ok(aclprofDestroyConfig(c), "aclprofDestroyConfig");
    }

    // before aclprofInit
    let cfg0 = config_of(&[0]);
    assert_eq!(aclprofStart(cfg0), ACL_ERROR_PROF_NOT_RUN);
    assert_eq!(aclprofStop(cfg0), ACL_ERROR_PROF_NOT_RUN);
    assert_eq!(aclprofFinalize(), ACL_ERROR_PROF_NOT_RUN);

    // null and stale configurations
    assert_eq!(aclprofStart(null()), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclprofStop(null()), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclprofDestroyConfig(null()), ACL_ERROR_INVALID_PARAM);
    let stale = config_of(&[0]);
    acl_ok(aclprofDestroyConfig(stale), "aclprofDestroyConfig");
    assert_eq!(aclprofDestroyConfig(stale), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclprofStart(stale), ACL_ERROR_INVALID_PARAM);
    // a pointer that is no handle at all
    let bogus = 0x1234_5600usize as *const aclprofConfig;
    assert_eq!(aclprofStart(bogus), ACL_ERROR_INVALID_PARAM);

    // Init, then Init again
    acl_ok(prof_init(&dir), "aclprofInit");
    assert_eq!(prof_init(&dir), ACL_ERROR_REPEAT_INITIALIZE);

    // Stop without Start
    assert_eq!(aclprofStop(cfg0), ACL_ERROR_PROF_NOT_RUN);

    // device lists: a device twice, a device that does not exist
    let twice = config_of(&[1, 0, 1]);
    assert_eq!(aclprofStart(twice), ACL_ERROR_INVALID_PARAM);
    assert!(last_error_message().unwrap().contains("twice"));
    let missing = config_of(&[0, 99]);
    assert_eq!(aclprofStart(missing), ACL_ERROR_INVALID_DEVICE);
    let huge = config_of(&[u32::MAX]);
    assert_eq!(aclprofStart(huge), ACL_ERROR_INVALID_DEVICE);
    assert_eq!(aclprofStop(twice), ACL_ERROR_INVALID_PARAM);
    // nothing was started by the refused calls
    assert_eq!(aclprofStop(cfg0), ACL_ERROR_PROF_NOT_RUN);

    // a device profiled already: the whole start is refused
    acl_ok(aclprofStart(cfg0), "aclprofStart [0]");
    let both = config_of(&[1, 0]);
    assert_eq!(aclprofStart(both), ACL_ERROR_PROF_ALREADY_RUN);
    let one = config_of(&[1]);
    assert_eq!(
        aclprofStop(one),
        ACL_ERROR_PROF_NOT_RUN,
        "device 1 not started"
    );
    // stopping [1, 0] with device 1 not running stops nothing
    assert_eq!(aclprofStop(both), ACL_ERROR_PROF_NOT_RUN);
    acl_ok(aclprofStop(cfg0), "aclprofStop [0]");
    // nothing ran on device 0 here: an empty trace, still JSON
    let t = profile(&dir.0, 0);
    assert!(t["traceEvents"].is_array(), "{t}");

    // the profile cannot be written: the directory became a file
    acl_ok(aclprofStart(cfg0), "aclprofStart [0] again");
    std::fs::remove_dir_all(&dir.0).unwrap();
    std::fs::write(&dir.0, b"not a directory").unwrap();
    assert_eq!(aclprofStop(cfg0), ACL_ERROR_WRITE_FILE);
    // ...but the device stopped all the same
    assert_eq!(aclprofStop(cfg0), ACL_ERROR_PROF_NOT_RUN);
    std::fs::remove_file(&dir.0).unwrap();

    for c in [cfg0, twice, missing, huge, both, one] {
        acl_ok(aclprofDestroyConfig(c), "aclprofDestroyConfig");
    }
    acl_ok(aclprofFinalize(), "aclprofFinalize");
    assert_eq!(aclprofFinalize(), ACL_ERROR_PROF_NOT_RUN);
    // a new session after the last one ended
    acl_ok(prof_init(&dir), "aclprofInit after aclprofFinalize");
    acl_ok(aclprofFinalize(), "aclprofFinalize");
}

#[test]
fn flight_recorder_dump_on_request_names_the_allreduces() {
    let _one = serial();
    let dir = TempDir::new("fr");
    std::fs::create_dir_all(&dir.0).unwrap();
    let p = 2u32;
    let mut devices: Vec<i32> = (0..p as i32).collect();
    let mut comms = vec![null_mut(); p as usize];
    ok(
        HcclCommInitAll(p, devices.as_mut_ptr(), comms.as_mut_ptr()),
        "HcclCommInitAll",
    );
    let comms: Vec<usize> = comms.into_iter().map(|c| c as usize).collect();
    let dump =
        |r: usize| CString::new(dir.0.join(format!("fr{r}.json")).to_str().unwrap()).unwrap();
    std::thread::scope(|s| {
        for (r, &c) in comms.iter().enumerate() {
            let dump = dump(r);
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                allreduce_loop(r as u32, p, c as HcclComm, stream, 3);
                ok(
                    HcclRsDumpFlightRecorder(c as HcclComm, dump.as_ptr()),
                    "HcclRsDumpFlightRecorder",
                );
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });
    for r in 0..p as usize {
        let text = std::fs::read_to_string(dir.0.join(format!("fr{r}.json"))).unwrap();
        let d: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(d["rank"], r, "{d}");
        assert_eq!(d["size"], p, "{d}");
        assert!(d["reason"]
            .as_str()
            .unwrap()
            .contains("HcclRsDumpFlightRecorder"));
        let entries = d["entries"].as_array().unwrap();
        let done: Vec<&Value> = entries
            .iter()
            .filter(|e| e["op"] == "AllReduce" && e["state"] == "completed")
            .collect();
        assert_eq!(done.len(), 3, "{entries:?}");
        for e in done {
            assert_eq!(e["count"], 1000, "{e}");
            assert_eq!(e["reduce_op"], "sum", "{e}");
        }
    }

    let c0 = comms[0] as HcclComm;
    let path = dump(0);
    // null arguments, an empty path, a path that cannot be written
    assert_eq!(HcclRsDumpFlightRecorder(null_mut(), path.as_ptr()), E_PTR);
    assert_eq!(HcclRsDumpFlightRecorder(c0, null()), E_PTR);
    assert_eq!(HcclRsDumpFlightRecorder(c0, c"".as_ptr()), E_PARA);
    assert_eq!(
        HcclRsDumpFlightRecorder(c0, c"/dev/null/fr.json".as_ptr()),
        E_SYSCALL
    );
    assert_eq!(HcclRsWriteTimeline(null_mut(), path.as_ptr()), E_PTR);
    assert_eq!(HcclRsWriteTimeline(c0, null()), E_PTR);
    // no timeline is being recorded
    assert_eq!(HcclRsWriteTimeline(c0, path.as_ptr()), E_NOT_SUPPORT);
    for &c in &comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
    // a destroyed communicator
    assert_eq!(HcclRsDumpFlightRecorder(c0, path.as_ptr()), E_PARA);

    // recording off: HCCL_RS_FR_BUFFER_SIZE=0 when the communicator is made
    std::env::set_var("HCCL_RS_FR_BUFFER_SIZE", "0");
    let mut dev0 = [0i32];
    let mut off = [null_mut::<c_void>()];
    let code = HcclCommInitAll(1, dev0.as_mut_ptr(), off.as_mut_ptr());
    std::env::remove_var("HCCL_RS_FR_BUFFER_SIZE");
    ok(code, "HcclCommInitAll with the recorder off");
    assert_eq!(
        HcclRsDumpFlightRecorder(off[0], path.as_ptr()),
        E_NOT_SUPPORT
    );
    ok(HcclCommDestroy(off[0]), "HcclCommDestroy");
}
