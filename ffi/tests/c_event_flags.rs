//! Issue 31 (ACL shim completeness): the event flags of
//! `aclrtCreateEventWithFlag`, checked and honoured as Ascend's runtime
//! does, and Ascend's constants as a C program sees them.
//!
//! The first test builds `tests/c/acl_event_flags.c` with the system C
//! compiler (`-std=c11 -Wall -Wextra -Werror -pedantic`) against
//! `include/` and the `libhccl.so` of this build, and runs it: the new
//! constants compile with Ascend's values and as case labels, and every
//! flag behaves as documented (docs/c-api.md). The others call the C ABI
//! directly, as the other `c_*` tests do.

mod common;
use common::*;
use hccl::acl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::null_mut;

/// `code` is `want`, and the kept message mentions `needle`.
fn acl_fails(code: i32, want: i32, needle: &str) {
    let msg = last_error_message().unwrap_or_default();
    assert_eq!(code, want, "{msg}");
    assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
}

/// The directory of the `libhccl.so` built with this test (cargo puts it
/// next to the test binary, in `deps/`, or one level up).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    [
        deps.clone(),
        deps.parent().map(Path::to_path_buf).unwrap_or(deps),
    ]
    .into_iter()
    .find(|d| d.join("libhccl.so").exists())
    .expect("libhccl.so next to the test binary (the cdylib of hccl-ffi)")
}

#[test]
fn a_c_program_uses_the_constants_and_every_event_flag() {
    let ffi = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = ffi.parent().expect("workspace root").join("include");
    let lib = lib_dir();
    let exe = std::env::temp_dir().join(format!("acl_event_flags-{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(&include)
        .arg(ffi.join("tests/c/acl_event_flags.c"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhccl", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("{cc} (a C compiler) must be installed: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // the library of this build, whatever LD_LIBRARY_PATH cargo set: the
    // linker writes a RUNPATH, which LD_LIBRARY_PATH would override with a
    // stale copy one directory up
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("run the C program");
    let _ = std::fs::remove_file(&exe);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "ok", "{stderr}");
}

/// Every single bit and the combinations: accepted exactly as Ascend's
/// `rtEventCreateWithFlag` accepts them (a non-empty OR of 0x1, 0x2, 0x4,
/// 0x8; 0x10 or 0x20 alone), refused with `ACL_ERROR_RT_PARAM_INVALID`
/// otherwise, the output left alone.
#[test]
fn flags_are_checked_as_ascend_checks_them() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let accepted = |f: u32| (f != 0 && f & !0xf == 0) || f == 0x10 || f == 0x20;
    let probes =
        (0..32)
            .map(|b| 1u32 << b)
            .chain(0..=0x7f)
            .chain([0x11, 0x21, 0x30, 0x48, 0xffff_ffff]);
    for f in probes {
        let mut ev = null_mut();
        let code = aclrtCreateEventWithFlag(&mut ev, f);
        if accepted(f) {
            acl_ok(code, &format!("flag {f:#x}"));
            assert!(!ev.is_null());
            acl_ok(aclrtDestroyEvent(ev), "aclrtDestroyEvent");
        } else {
            acl_fails(
                code,
                ACL_ERROR_RT_PARAM_INVALID,
                &format!("event flag {f:#x}"),
            );
            assert!(ev.is_null(), "flag {f:#x}: event written");
        }
    }
    acl_fails(
        aclrtCreateEventWithFlag(null_mut(), ACL_EVENT_SYNC),
        ACL_ERROR_INVALID_PARAM,
        "event is null",
    );
}

/// Elapsed time needs ACL_EVENT_TIME_LINE on both events (aclrtCreateEvent
/// gives it); one without fails with ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
/// whichever end it is.
#[test]
fn elapsed_time_needs_time_line_on_both_events() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "aclrtCreateStream");
    let make = |flag: Option<u32>| {
        let mut e = null_mut();
        match flag {
            Some(f) => acl_ok(aclrtCreateEventWithFlag(&mut e, f), "create"),
            None => acl_ok(aclrtCreateEvent(&mut e), "aclrtCreateEvent"),
        }
        e
    };
    let kinds = [
        (Some(ACL_EVENT_TIME_LINE), true),
        (Some(ACL_EVENT_TIME_LINE | ACL_EVENT_SYNC), true),
        (Some(0x4 | ACL_EVENT_TIME_LINE), true),
        (None, true),
        (Some(ACL_EVENT_SYNC), false),
        (Some(ACL_EVENT_CAPTURE_STREAM_PROGRESS), false),
        (
            Some(ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | 0x4),
            false,
        ),
    ];
    for (fa, ta) in kinds {
        for (fb, tb) in kinds {
            let (a, b) = (make(fa), make(fb));
            acl_ok(aclrtRecordEvent(a, s), "record a");
            acl_ok(aclrtSynchronizeStream(s), "sync");
            std::thread::sleep(std::time::Duration::from_millis(2));
            acl_ok(aclrtRecordEvent(b, s), "record b");
            acl_ok(aclrtSynchronizeStream(s), "sync");
            let mut ms = -1.0f32;
            let code = aclrtEventElapsedTime(&mut ms, a, b);
            if ta && tb {
                acl_ok(code, &format!("elapsed {fa:?} -> {fb:?}"));
                assert!(ms >= 1.5, "{fa:?} -> {fb:?}: {ms} ms");
            } else {
                acl_fails(
                    code,
                    ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                    "ACL_EVENT_TIME_LINE",
                );
            }
            acl_ok(aclrtDestroyEvent(a), "destroy a");
            acl_ok(aclrtDestroyEvent(b), "destroy b");
        }
    }
    acl_ok(aclrtDestroyStream(s), "aclrtDestroyStream");
}

/// An ACL_EVENT_SYNC event orders another stream after the recording one;
/// an event without it is refused by aclrtStreamWaitEvent and
/// aclrtResetEvent (ACL_ERROR_RT_FEATURE_NOT_SUPPORT) but can still be
/// synchronized on and queried.
#[test]
fn only_sync_events_order_streams() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let (mut s1, mut s2) = (null_mut(), null_mut());
    acl_ok(aclrtCreateStream(&mut s1), "s1");
    acl_ok(aclrtCreateStream(&mut s2), "s2");
    let n = 4 << 20;
    let src = dev_from(&vec![7u8; n]);
    let (mid, dst) = (dev_from(&vec![0u8; n]), dev_from(&vec![0u8; n]));

    let mut sync = null_mut();
    acl_ok(
        aclrtCreateEventWithFlag(&mut sync, ACL_EVENT_SYNC),
        "create SYNC",
    );
    // s1: src -> mid, then the event; s2 waits for it, then mid -> dst
    acl_ok(
        aclrtMemcpyAsync(mid, n, src, n, ACL_MEMCPY_DEVICE_TO_DEVICE, s1),
        "copy 1",
    );
    acl_ok(aclrtRecordEvent(sync, s1), "record");
    acl_ok(aclrtStreamWaitEvent(s2, sync), "wait");
    acl_ok(
        aclrtMemcpyAsync(dst, n, mid, n, ACL_MEMCPY_DEVICE_TO_DEVICE, s2),
        "copy 2",
    );
    acl_ok(aclrtSynchronizeStream(s2), "sync s2");
    assert!(to_host::<u8>(dst, n).iter().all(|&v| v == 7));
    acl_ok(aclrtResetEvent(sync, s1), "reset");

    for flag in [ACL_EVENT_TIME_LINE, ACL_EVENT_CAPTURE_STREAM_PROGRESS] {
        let mut e = null_mut();
        acl_ok(aclrtCreateEventWithFlag(&mut e, flag), "create");
        acl_ok(aclrtRecordEvent(e, s1), "record");
        acl_fails(
            aclrtStreamWaitEvent(s2, e),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "without ACL_EVENT_SYNC",
        );
        // refused on the recording stream too (Ascend checks the flag first)
        acl_fails(
            aclrtStreamWaitEvent(s1, e),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "without ACL_EVENT_SYNC",
        );
        acl_fails(
            aclrtResetEvent(e, s1),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "without ACL_EVENT_SYNC",
        );
        acl_ok(aclrtSynchronizeEvent(e), "synchronize");
        let mut st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        acl_ok(aclrtQueryEventStatus(e, &mut st), "query");
        assert_eq!(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
        acl_ok(aclrtDestroyEvent(e), "destroy");
    }
    acl_ok(aclrtDestroyEvent(sync), "destroy");
    for p in [src, mid, dst] {
        acl_ok(aclrtFree(p), "aclrtFree");
    }
    acl_ok(aclrtDestroyStream(s1), "s1");
    acl_ok(aclrtDestroyStream(s2), "s2");
}

/// ACL_EVENT_DEVICE_USE_ONLY: created (programs hand it to device code),
/// but the host may not record, wait for or reset it. ACL_EVENT_EXTERNAL:
/// recorded and waited for, but not synchronized on, queried or timed.
#[test]
fn device_only_and_external_events_refuse_what_ascend_refuses() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "aclrtCreateStream");
    let (mut dev_only, mut ext, mut timed) = (null_mut(), null_mut(), null_mut());
    acl_ok(
        aclrtCreateEventWithFlag(&mut dev_only, ACL_EVENT_DEVICE_USE_ONLY),
        "DEVICE_USE_ONLY",
    );
    acl_ok(
        aclrtCreateEventWithFlag(&mut ext, ACL_EVENT_EXTERNAL),
        "EXTERNAL",
    );
    acl_ok(aclrtCreateEvent(&mut timed), "aclrtCreateEvent");
    for code in [
        aclrtRecordEvent(dev_only, s),
        aclrtStreamWaitEvent(s, dev_only),
        aclrtResetEvent(dev_only, s),
    ] {
        acl_fails(
            code,
            ACL_ERROR_RT_PARAM_INVALID,
            "ACL_EVENT_DEVICE_USE_ONLY",
        );
    }

    acl_ok(aclrtRecordEvent(ext, s), "record EXTERNAL");
    acl_ok(aclrtRecordEvent(timed, s), "record timed");
    acl_ok(aclrtStreamWaitEvent(s, ext), "wait EXTERNAL");
    acl_ok(aclrtSynchronizeStream(s), "sync");
    let mut st = 0;
    let mut ms = 0.0f32;
    for code in [
        aclrtSynchronizeEvent(ext),
        aclrtQueryEventStatus(ext, &mut st),
        aclrtEventElapsedTime(&mut ms, timed, ext),
        aclrtEventElapsedTime(&mut ms, ext, timed),
    ] {
        acl_fails(code, ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "ACL_EVENT_EXTERNAL");
    }
    acl_ok(aclrtResetEvent(ext, s), "reset EXTERNAL");
    for e in [dev_only, ext, timed] {
        acl_ok(aclrtDestroyEvent(e), "destroy");
    }
    acl_ok(aclrtDestroyStream(s), "aclrtDestroyStream");
}

/// ACL_EVENT_CAPTURE_STREAM_PROGRESS tracks a stream's progress, also
/// through a captured graph: a record captured changes nothing until the
/// graph is launched, and each launch records the event anew, so
/// synchronizing on it waits for that launch's copy.
#[test]
fn progress_events_mark_each_replay_of_a_capture() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "aclrtCreateStream");
    let (a, b) = (dev_from(&[1u32; 256]), dev_from(&[0u32; 256]));
    let mut mark = null_mut();
    acl_ok(
        aclrtCreateEventWithFlag(&mut mark, ACL_EVENT_CAPTURE_STREAM_PROGRESS),
        "create",
    );
    let status = || {
        let mut st = 99;
        acl_ok(aclrtQueryEventStatus(mark, &mut st), "query");
        st
    };
    let before = status();
    acl_ok(
        aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
        "CaptureBegin",
    );
    acl_ok(
        aclrtMemcpyAsync(b, 1024, a, 1024, ACL_MEMCPY_DEVICE_TO_DEVICE, s),
        "captured copy",
    );
    acl_ok(aclrtRecordEvent(mark, s), "captured record");
    let mut ri = null_mut();
    acl_ok(aclmdlRICaptureEnd(s, &mut ri), "CaptureEnd");
    assert_eq!(status(), before, "a captured record is not a record");
    for round in 0..20u32 {
        acl_ok(
            aclrtMemcpy(a, 1024, [round + 2; 256].as_ptr().cast(), 1024, 1),
            "new input",
        );
        acl_ok(aclmdlRIExecuteAsync(ri, s), "ExecuteAsync");
        acl_ok(aclrtSynchronizeEvent(mark), "synchronize on the mark");
        assert_eq!(
            status(),
            ACL_EVENT_RECORDED_STATUS_COMPLETE,
            "round {round}"
        );
        assert_eq!(to_host::<u32>(b, 256), vec![round + 2; 256]);
    }
    acl_ok(aclmdlRIDestroy(ri), "aclmdlRIDestroy");
    acl_ok(aclrtDestroyEvent(mark), "destroy");
    acl_ok(aclrtFree(a), "free a");
    acl_ok(aclrtFree(b), "free b");
    acl_ok(aclrtDestroyStream(s), "aclrtDestroyStream");
}
