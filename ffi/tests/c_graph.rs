//! ACL graphs through the C API (issue 17): HCCL calls and runtime tasks
//! captured with `aclmdlRICaptureBegin`/`End`, replayed with
//! `aclmdlRIExecuteAsync` as a C program would; bad input by code.

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::ffi::c_void;
use std::ptr::null_mut;

const E_PARA: u32 = 1;
const INT32: u32 = 2;
const SUM: u32 = 0;

/// `code` is `want`, and the kept message mentions `needle`.
fn acl_fails(code: i32, want: i32, needle: &str) {
    let msg = last_error_message().unwrap_or_default();
    assert_eq!(code, want, "{msg}");
    assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
}

fn dev(bytes: usize) -> *mut c_void {
    let mut p = null_mut();
    acl_ok(aclrtMalloc(&mut p, bytes, 0), "aclrtMalloc");
    p
}

fn put(p: *mut c_void, v: &[i32]) {
    let bytes = std::mem::size_of_val(v);
    acl_ok(
        aclrtMemcpy(p, bytes, v.as_ptr().cast(), bytes, 1),
        "aclrtMemcpy H2D",
    );
}

fn get(p: *const c_void, n: usize) -> Vec<i32> {
    let mut v = vec![0i32; n];
    acl_ok(
        aclrtMemcpy(v.as_mut_ptr().cast(), 4 * n, p, 4 * n, 2),
        "aclrtMemcpy D2H",
    );
    v
}

fn status(stream: aclrtStream) -> (aclmdlRICaptureStatus, aclmdlRI) {
    let (mut st, mut ri) = (99, null_mut());
    acl_ok(aclmdlRICaptureGetInfo(stream, &mut st, &mut ri), "GetInfo");
    (st, ri)
}

fn value(r: u32, i: usize, k: i32) -> i32 {
    (r as i32 + 1) * 1000 + i as i32 * 3 + k * 7
}

/// Ranks as threads: an AllReduce, an AllGather, a Broadcast, an async
/// copy and memset and an event record captured once per rank and
/// executed 100 times, the inputs rewritten before every execution.
#[test]
fn captured_hccl_calls_replay_100_times() {
    let p = 3u32;
    let n = 257usize;
    let comms = init_all(p);
    std::thread::scope(|sc| {
        for (r, &c) in comms.iter().enumerate() {
            sc.spawn(move || {
                let (r, comm, pu) = (r as u32, c as HcclComm, p as usize);
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                let (send, sum, all, bc, copy, zero) = (
                    dev(4 * n),
                    dev(4 * n),
                    dev(4 * n * pu),
                    dev(4 * n),
                    dev(4 * n),
                    dev(4 * n),
                );
                let mut ev = null_mut();
                acl_ok(aclrtCreateEvent(&mut ev), "aclrtCreateEvent");
                // each rank captures on its own thread: THREAD_LOCAL keeps
                // the other ranks' host copies allowed meanwhile
                acl_ok(
                    aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL),
                    "CaptureBegin",
                );
                let (st, during) = status(stream);
                assert_eq!(st, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
                assert!(!during.is_null());
                let n64 = n as u64;
                ok(
                    HcclAllReduce(send, sum, n64, INT32, SUM, comm, stream),
                    "AllReduce",
                );
                ok(
                    HcclAllGather(send, all, n64, INT32, comm, stream),
                    "AllGather",
                );
                ok(
                    HcclBroadcast(bc, n64, INT32, p - 1, comm, stream),
                    "Broadcast",
                );
                acl_ok(
                    aclrtMemcpyAsync(copy, 4 * n, sum, 4 * n, 3, stream),
                    "MemcpyAsync",
                );
                acl_ok(
                    aclrtMemsetAsync(zero, 4 * n, 0, 4 * n, stream),
                    "MemsetAsync",
                );
                acl_ok(aclrtRecordEvent(ev, stream), "RecordEvent");
                let mut ri = null_mut();
                acl_ok(aclmdlRICaptureEnd(stream, &mut ri), "CaptureEnd");
                assert_eq!(ri, during, "GetInfo named the instance End returns");
                assert_eq!(
                    status(stream),
                    (ACL_MODEL_RI_CAPTURE_STATUS_NONE, null_mut())
                );
                acl_ok(aclmdlRISetName(ri, c"allreduce-graph".as_ptr()), "SetName");
                for k in 0..100 {
                    put(send, &(0..n).map(|i| value(r, i, k)).collect::<Vec<_>>());
                    let b: Vec<i32> = (0..n)
                        .map(|i| if r == p - 1 { value(r, i, k) } else { -1 })
                        .collect();
                    put(bc, &b);
                    put(zero, &vec![-5; n]);
                    acl_ok(aclmdlRIExecuteAsync(ri, stream), "ExecuteAsync");
                    acl_ok(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
                    let want: Vec<i32> = (0..n)
                        .map(|i| (0..p).map(|q| value(q, i, k)).sum())
                        .collect();
                    assert_eq!(get(sum, n), want, "AllReduce, execution {k}");
                    assert_eq!(get(copy, n), want, "async copy, execution {k}");
                    assert_eq!(get(zero, n), vec![0; n], "async memset, execution {k}");
                    let gathered: Vec<i32> = (0..p)
                        .flat_map(|q| (0..n).map(move |i| value(q, i, k)))
                        .collect();
                    assert_eq!(get(all, n * pu), gathered, "AllGather, execution {k}");
                    let root: Vec<i32> = (0..n).map(|i| value(p - 1, i, k)).collect();
                    assert_eq!(get(bc, n), root, "Broadcast, execution {k}");
                    let mut ev_st = 0;
                    acl_ok(aclrtQueryEventStatus(ev, &mut ev_st), "QueryEventStatus");
                    assert_eq!(ev_st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
                }
                // memory a live instance uses cannot be freed
                acl_fails(aclrtFree(send), ACL_ERROR_INVALID_PARAM, "allreduce-graph");
                acl_ok(aclmdlRIDestroy(ri), "aclmdlRIDestroy");
                for m in [send, sum, all, bc, copy, zero] {
                    acl_ok(aclrtFree(m), "aclrtFree");
                }
                acl_ok(aclrtDestroyEvent(ev), "aclrtDestroyEvent");
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
}

#[test]
fn bad_input_is_refused_with_acl_codes() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "aclrtCreateStream");
    let mut ri = null_mut();
    // unknown mode, bad handles, NULL pointers
    acl_fails(
        aclmdlRICaptureBegin(s, 3),
        ACL_ERROR_INVALID_PARAM,
        "aclmdlRICaptureMode 3",
    );
    acl_fails(
        aclmdlRICaptureBegin(0x1234 as aclrtStream, 0),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclrtStream",
    );
    let mut st = 0;
    acl_fails(
        aclmdlRICaptureGetInfo(s, null_mut(), &mut ri),
        ACL_ERROR_INVALID_PARAM,
        "status is null",
    );
    acl_fails(
        aclmdlRICaptureGetInfo(s, &mut st, null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "modelRI is null",
    );
    acl_fails(
        aclmdlRICaptureEnd(s, null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "modelRI is null",
    );
    acl_fails(
        aclmdlRICaptureThreadExchangeMode(null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "mode is null",
    );
    let mut bad_mode = 7;
    acl_fails(
        aclmdlRICaptureThreadExchangeMode(&mut bad_mode),
        ACL_ERROR_INVALID_PARAM,
        "7",
    );
    acl_fails(
        aclmdlRIExecuteAsync(null_mut(), s),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclmdlRI",
    );
    acl_fails(
        aclmdlRIDestroy(null_mut()),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclmdlRI",
    );
    // end without begin
    acl_fails(
        aclmdlRICaptureEnd(s, &mut ri),
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        "without aclmdlRICaptureBegin",
    );

    // double begin; an instance still capturing can be neither executed
    // nor destroyed; the capturing stream can be neither synchronized
    // (which invalidates the capture) nor destroyed
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
        "CaptureBegin",
    );
    acl_fails(
        aclmdlRICaptureBegin(s, 0),
        ACL_ERROR_RT_STREAM_CAPTURED,
        "already capturing",
    );
    let (_, capturing) = status(s);
    let mut other = null_mut();
    acl_ok(aclrtCreateStream(&mut other), "aclrtCreateStream");
    acl_fails(
        aclmdlRIExecuteAsync(capturing, other),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "still being captured",
    );
    acl_fails(
        aclmdlRIDestroy(capturing),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "still being captured",
    );
    acl_fails(
        aclrtDestroyStream(s),
        ACL_ERROR_RT_STREAM_CAPTURED,
        "capturing",
    );
    acl_fails(
        aclrtSynchronizeStream(s),
        ACL_ERROR_RT_STREAM_CAPTURED,
        "is capturing",
    );
    assert_eq!(status(s).0, ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED);
    ri = 0x5 as aclmdlRI;
    acl_fails(
        aclmdlRICaptureEnd(s, &mut ri),
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
        "invalidated",
    );
    assert!(ri.is_null(), "no instance from an invalidated capture");
    acl_fails(
        aclmdlRIDestroy(capturing),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclmdlRI",
    );

    // a finished instance: executed, destroyed, then refused
    let m = dev(64);
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL),
        "CaptureBegin",
    );
    acl_ok(aclrtMemsetAsync(m, 64, 9, 64, s), "MemsetAsync");
    // executing into a capture is refused
    acl_ok(
        aclmdlRICaptureBegin(other, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
        "CaptureBegin other",
    );
    acl_ok(aclmdlRICaptureEnd(s, &mut ri), "CaptureEnd");
    acl_fails(
        aclmdlRIExecuteAsync(ri, other),
        ACL_ERROR_RT_STREAM_CAPTURED,
        "capturing",
    );
    let mut ri2 = null_mut();
    acl_ok(aclmdlRICaptureEnd(other, &mut ri2), "CaptureEnd other");
    acl_ok(aclmdlRIDestroy(ri2), "Destroy other");
    acl_ok(aclmdlRIExecuteAsync(ri, s), "ExecuteAsync");
    acl_ok(aclrtSynchronizeStream(s), "sync");
    assert_eq!(get(m, 16), vec![0x0909_0909; 16]);
    acl_ok(aclmdlRIDestroy(ri), "Destroy");
    acl_fails(
        aclmdlRIExecuteAsync(ri, s),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclmdlRI",
    );
    acl_fails(
        aclmdlRIDestroy(ri),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclmdlRI",
    );
    acl_fails(
        aclmdlRISetName(ri, c"x".as_ptr()),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "not a live aclmdlRI",
    );
    acl_fails(
        aclmdlRISetName(ri, std::ptr::null()),
        ACL_ERROR_INVALID_PARAM,
        "name is null",
    );
    acl_ok(aclrtFree(m), "aclrtFree");
    acl_ok(aclrtDestroyStream(other), "aclrtDestroyStream");
    acl_ok(aclrtDestroyStream(s), "aclrtDestroyStream");
}

/// A capture ends on the thread that began it unless RELAXED; the modes
/// limit the synchronous copies as ACL documents.
#[test]
fn capture_modes_limit_threads_and_unsafe_calls() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "aclrtCreateStream");
    let (a, b) = (dev(16), dev(16));
    let copy = || aclrtMemcpy(a, 16, b, 16, 3);
    // from another thread, with that thread's mode set first
    let elsewhere = |mode: Option<aclmdlRICaptureMode>| {
        let (a, b) = (a as usize, b as usize);
        std::thread::spawn(move || {
            if let Some(mut m) = mode {
                acl_ok(aclmdlRICaptureThreadExchangeMode(&mut m), "ExchangeMode");
            }
            aclrtMemcpy(a as *mut c_void, 16, b as *const c_void, 16, 3)
        })
        .join()
        .unwrap()
    };
    let sv = s as usize;
    let end_elsewhere = move || {
        std::thread::spawn(move || {
            let mut ri = null_mut();
            let code = aclmdlRICaptureEnd(sv as aclrtStream, &mut ri);
            (code, ri as usize, last_error_message().unwrap_or_default())
        })
        .join()
        .unwrap()
    };

    // GLOBAL: refused here (until this thread is RELAXED) and on threads
    // still in GLOBAL mode (THREAD_LOCAL or RELAXED ones may)
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL),
        "CaptureBegin",
    );
    acl_fails(
        copy(),
        ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
        "ACL_MODEL_RI_CAPTURE_MODE_GLOBAL",
    );
    acl_fails(
        aclrtMemset(a, 16, 0, 16),
        ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
        "aclrtMemset is not allowed",
    );
    assert_eq!(elsewhere(None), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    assert_eq!(
        elsewhere(Some(ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL)),
        ACL_SUCCESS
    );
    let mut m = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    acl_ok(aclmdlRICaptureThreadExchangeMode(&mut m), "ExchangeMode");
    assert_eq!(
        m, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL,
        "the previous mode comes back"
    );
    acl_ok(copy(), "aclrtMemcpy on a RELAXED thread");
    acl_ok(
        aclmdlRICaptureThreadExchangeMode(&mut m),
        "ExchangeMode back",
    );
    assert_eq!(m, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    // the capture is not invalidated by refused copies, and ends only here
    let (code, ri, msg) = end_elsewhere();
    assert_eq!(code, ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, "{msg}");
    assert!(msg.contains("another thread"), "{msg}");
    assert_eq!(ri, 0);
    assert_eq!(status(s).0, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    let mut ri = null_mut();
    acl_ok(aclmdlRICaptureEnd(s, &mut ri), "CaptureEnd");
    acl_ok(aclmdlRIDestroy(ri), "Destroy");
    acl_ok(copy(), "aclrtMemcpy after the capture");

    // THREAD_LOCAL: only this thread is limited
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL),
        "CaptureBegin",
    );
    acl_fails(
        copy(),
        ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
        "THREAD_LOCAL",
    );
    assert_eq!(elsewhere(None), ACL_SUCCESS);
    assert_eq!(end_elsewhere().0, ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    acl_ok(aclmdlRICaptureEnd(s, &mut ri), "CaptureEnd");
    acl_ok(aclmdlRIDestroy(ri), "Destroy");

    // RELAXED: nothing is limited, and another thread may end it
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
        "CaptureBegin",
    );
    acl_ok(copy(), "aclrtMemcpy in a RELAXED capture");
    assert_eq!(elsewhere(None), ACL_SUCCESS);
    let (code, ri, msg) = end_elsewhere();
    assert_eq!(code, ACL_SUCCESS, "{msg}");
    acl_ok(aclmdlRIDestroy(ri as aclmdlRI), "Destroy");
    acl_ok(aclrtFree(a), "free");
    acl_ok(aclrtFree(b), "free");
    acl_ok(aclrtDestroyStream(s), "aclrtDestroyStream");
}

/// A capture records the calls of one device: an HCCL call of a
/// communicator on another device is refused, and the capture is
/// invalidated (it would lack the call).
#[test]
fn a_capture_refuses_another_communicators_device() {
    let comms = init_all(2);
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "aclrtCreateStream");
    let (x, y) = (dev(64), dev(64));
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL),
        "CaptureBegin",
    );
    let code = HcclAllReduce(x, y, 16, INT32, SUM, comms[1] as HcclComm, s);
    assert_eq!(code, E_PARA, "{:?}", last_error_message());
    assert!(last_error_message().unwrap().contains("capturing"));
    assert_eq!(status(s).0, ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED);
    let mut ri = null_mut();
    acl_fails(
        aclmdlRICaptureEnd(s, &mut ri),
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
        "device",
    );
    assert!(ri.is_null());
    acl_ok(aclrtDestroyStream(s), "aclrtDestroyStream");
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
}
