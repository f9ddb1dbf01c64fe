//! Issue 18's C surface exercised as a C program would: communicator state
//! (suspend, resume, status, callbacks, lookup by name, working NIC,
//! configuration queries), the version-11 `HcclCommConfig`, one-sided
//! `HcclBatchPut` / `HcclBatchGet`, and the ACL device, stream and
//! virtual-memory calls; each with its bad-input matrix.

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::ffi::{c_char, c_void, CStr};
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;
use std::sync::{Barrier, Mutex};

const E_PARA: u32 = 1;
const E_PTR: u32 = 2;
const E_NOT_SUPPORT: u32 = 5;
const E_NOT_FOUND: u32 = 6;
const E_SUSPENDING: u32 = 22;
const FP32: u32 = 4;
const SUM: u32 = 0;

fn name_of(c: HcclComm) -> Vec<c_char> {
    let mut name = vec![0 as c_char; COMM_NAME_MAX_LENGTH];
    ok(HcclGetCommName(c, name.as_mut_ptr()), "HcclGetCommName");
    name
}

/// Runs `f(rank, stream)` on one thread per rank (device = rank).
fn on_ranks(p: u32, f: impl Fn(u32, aclrtStream) + Sync) {
    std::thread::scope(|s| {
        for r in 0..p {
            let f = &f;
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                f(r, stream);
                acl_ok(aclrtSynchronizeStream(stream), "final sync");
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });
}

/// (comm, phase, args) of every state callback call.
static CALLS: Mutex<Vec<(usize, i32, usize)>> = Mutex::new(Vec::new());

unsafe extern "C" fn record(
    comm: HcclComm,
    phase: HcclCommStatePhase,
    args: *mut c_void,
) -> HcclResult {
    CALLS
        .lock()
        .unwrap()
        .push((comm as usize, phase, args as usize));
    0
}

unsafe extern "C" fn failing(_: HcclComm, _: HcclCommStatePhase, _: *mut c_void) -> HcclResult {
    4
}

#[test]
fn suspend_resume_status_callbacks_and_lookup_by_name() {
    let comms = init_all(2);
    let (c0, c1) = (comms[0] as HcclComm, comms[1] as HcclComm);
    let name = name_of(c0);
    assert_eq!(name, name_of(c1), "threads as ranks share the name");
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");

    // callbacks: bad input, a replaced registration, one that fails
    assert_eq!(
        HcclCommRegCommStateCallback(std::ptr::null(), Some(record), null_mut()),
        E_PTR
    );
    assert_eq!(
        HcclCommRegCommStateCallback(c"t".as_ptr(), None, null_mut()),
        E_PTR
    );
    assert_eq!(
        HcclCommRegCommStateCallback(c"".as_ptr(), Some(record), null_mut()),
        E_PARA
    );
    ok(
        HcclCommRegCommStateCallback(c"test".as_ptr(), Some(failing), null_mut()),
        "register",
    );
    ok(
        HcclCommRegCommStateCallback(c"test".as_ptr(), Some(record), 0x77 as *mut c_void),
        "replace",
    );

    // status and lookup by name
    let mut st = 99;
    ok(
        HcclCommGetStatus(name.as_ptr(), &mut st),
        "HcclCommGetStatus",
    );
    assert_eq!(st, HCCL_COMM_STATUS_READY);
    assert_eq!(HcclCommGetStatus(std::ptr::null(), &mut st), E_PTR);
    assert_eq!(HcclCommGetStatus(name.as_ptr(), null_mut()), E_PTR);
    assert_eq!(
        HcclCommGetStatus(c"no such comm".as_ptr(), &mut st),
        E_NOT_FOUND
    );
    let long = vec![b'x' as c_char; 300]
        .into_iter()
        .chain([0])
        .collect::<Vec<_>>();
    assert_eq!(HcclCommGetStatus(long.as_ptr(), &mut st), E_PARA);
    let mut h = null_mut();
    ok(HcclCommGetHandleWithName(name.as_ptr(), &mut h), "by name");
    assert_eq!(h, c0, "the communicator on this thread's device 0");
    let c1u = c1 as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            let c1 = c1u;
            acl_ok(aclrtSetDevice(1), "aclrtSetDevice");
            let mut h = null_mut();
            ok(
                HcclCommGetHandleWithName(name.as_ptr(), &mut h),
                "by name on 1",
            );
            assert_eq!(h as usize, c1);
            acl_ok(aclrtSetDevice(5), "aclrtSetDevice");
            assert_eq!(
                HcclCommGetHandleWithName(name.as_ptr(), &mut h),
                E_PARA,
                "ambiguous"
            );
        });
    });
    assert_eq!(
        HcclCommGetHandleWithName(c"nope".as_ptr(), &mut h),
        E_NOT_FOUND
    );
    assert_eq!(HcclCommGetHandleWithName(std::ptr::null(), &mut h), E_PTR);
    assert_eq!(HcclCommGetHandleWithName(name.as_ptr(), null_mut()), E_PTR);

    // suspended: ops refused, nothing enqueued
    assert_eq!(HcclCommSuspend(null_mut()), E_PTR);
    assert_eq!(HcclCommSuspend(0x1234 as HcclComm), E_PARA);
    ok(HcclCommSuspend(c0), "suspend");
    ok(HcclCommSuspend(c0), "suspend twice");
    ok(HcclCommGetStatus(name.as_ptr(), &mut st), "status");
    assert_eq!(st, HCCL_COMM_STATUS_SUSPENDING);
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    let src = dev_from(&[1.0f32; 16]);
    let dst = dev_from(&[-3.0f32; 16]);
    assert_eq!(
        HcclAllReduce(src, dst, 16, FP32, SUM, c0, stream),
        E_SUSPENDING
    );
    assert!(
        last_error_message().unwrap().contains("suspended"),
        "{:?}",
        last_error_message()
    );
    assert_eq!(HcclBarrier(c0, stream), E_SUSPENDING);
    let mut d = [HcclOneSideOpDesc {
        localAddr: src,
        remoteAddr: dst,
        count: 1,
        dataType: FP32,
    }];
    assert_eq!(HcclBatchPut(c0, 1, d.as_mut_ptr(), 1, stream), E_SUSPENDING);
    acl_ok(aclrtSynchronizeStream(stream), "sync");
    assert_eq!(to_host::<f32>(dst, 16), vec![-3.0; 16], "nothing ran");

    // resumed: callbacks before and after, ops run again
    assert_eq!(HcclCommResume(0x1234 as HcclComm), E_PARA);
    ok(HcclCommResume(c0), "resume");
    ok(HcclCommGetStatus(name.as_ptr(), &mut st), "status");
    assert_eq!(st, HCCL_COMM_STATUS_READY);
    assert_eq!(
        *CALLS.lock().unwrap(),
        vec![
            (c0 as usize, HCCL_COMM_STATE_PHASE_RESUME_PRE, 0x77),
            (c0 as usize, HCCL_COMM_STATE_PHASE_RESUME_POST, 0x77)
        ]
    );
    acl_ok(aclrtDestroyStream(stream), "destroy stream");
    let handles = [c0 as usize, c1 as usize];
    on_ranks(2, |r, stream| {
        let c = handles[r as usize] as HcclComm;
        let x = dev_from(&[r as f32 + 1.0; 16]);
        let y = dev_from(&[0.0f32; 16]);
        ok(
            HcclAllReduce(x, y, 16, FP32, SUM, c, stream),
            "AllReduce after resume",
        );
        acl_ok(aclrtSynchronizeStream(stream), "sync");
        assert_eq!(to_host::<f32>(y, 16), vec![3.0; 16]);
    });

    // destroy: callbacks before and after; the name is gone with both ranks
    CALLS.lock().unwrap().clear();
    ok(HcclCommDestroy(c0), "destroy 0");
    assert_eq!(
        *CALLS.lock().unwrap(),
        vec![
            (c0 as usize, HCCL_COMM_STATE_PHASE_DESTROY_PRE, 0x77),
            (c0 as usize, HCCL_COMM_STATE_PHASE_DESTROY_POST, 0x77)
        ]
    );
    ok(
        HcclCommGetHandleWithName(name.as_ptr(), &mut h),
        "rank 1 remains",
    );
    assert_eq!(h as usize, c1 as usize);
    ok(HcclCommDestroy(c1), "destroy 1");
    assert_eq!(HcclCommGetStatus(name.as_ptr(), &mut st), E_NOT_FOUND);
    assert_eq!(HcclCommSuspend(c0), E_PARA, "destroyed");
}

#[test]
fn working_nic_and_config_info() {
    let comms = init_all(3);
    let c0 = comms[0] as HcclComm;
    let mut ranks = [1u32, 2];
    let mut backup = [true, false];
    ok(
        HcclCommWorkingDevNicSet(c0, ranks.as_mut_ptr(), backup.as_mut_ptr(), 2),
        "WorkingDevNicSet",
    );
    assert_eq!(
        HcclCommWorkingDevNicSet(null_mut(), ranks.as_mut_ptr(), backup.as_mut_ptr(), 2),
        E_PTR
    );
    assert_eq!(
        HcclCommWorkingDevNicSet(0x99 as HcclComm, ranks.as_mut_ptr(), backup.as_mut_ptr(), 2),
        E_PARA
    );
    assert_eq!(
        HcclCommWorkingDevNicSet(c0, null_mut(), backup.as_mut_ptr(), 2),
        E_PTR
    );
    assert_eq!(
        HcclCommWorkingDevNicSet(c0, ranks.as_mut_ptr(), null_mut(), 2),
        E_PTR
    );
    assert_eq!(
        HcclCommWorkingDevNicSet(c0, ranks.as_mut_ptr(), backup.as_mut_ptr(), 0),
        E_PARA
    );
    assert_eq!(
        HcclCommWorkingDevNicSet(c0, ranks.as_mut_ptr(), backup.as_mut_ptr(), 4),
        E_PARA
    );
    let mut bad = [3u32, 1];
    assert_eq!(
        HcclCommWorkingDevNicSet(c0, bad.as_mut_ptr(), backup.as_mut_ptr(), 2),
        E_PARA
    );
    let mut dup = [1u32, 1];
    assert_eq!(
        HcclCommWorkingDevNicSet(c0, dup.as_mut_ptr(), backup.as_mut_ptr(), 2),
        E_PARA
    );

    let mut mode: i32 = -7;
    let info = (&mut mode as *mut i32).cast::<c_void>();
    ok(
        HcclConfigGetInfo(c0, HCCL_CONFIG_TYPE_OP_EXPANSION_MODE, 4, info),
        "HcclConfigGetInfo",
    );
    assert_eq!(mode, HCCL_OP_EXPANSION_MODE_HOST);
    assert_eq!(HcclConfigGetInfo(c0, 1, 4, info), E_PARA);
    assert_eq!(HcclConfigGetInfo(c0, -1, 4, info), E_PARA);
    assert_eq!(HcclConfigGetInfo(c0, 0, 2, info), E_PARA);
    assert_eq!(HcclConfigGetInfo(c0, 0, 4, null_mut()), E_PTR);
    assert_eq!(HcclConfigGetInfo(null_mut(), 0, 4, info), E_PTR);
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "destroy");
    }
}

fn set_text(field: &mut [c_char], s: &str) {
    for (d, b) in field.iter_mut().zip(s.bytes().chain([0])) {
        *d = b as c_char;
    }
}

fn header(c: &mut HcclCommConfig, size: usize, version: u32) {
    let hdr = size
        .to_ne_bytes()
        .into_iter()
        .chain(HCCL_COMM_CONFIG_MAGIC_WORD.to_ne_bytes())
        .chain(version.to_ne_bytes());
    for (d, s) in c.reserved.iter_mut().zip(hdr) {
        *d = s as c_char;
    }
}

/// `HcclCommInitRootInfoConfig` with a root nobody serves: a config error
/// is reported before any connection is tried.
fn init_code(cfg: &HcclCommConfig) -> u32 {
    let mut comm = null_mut();
    HcclCommInitRootInfoConfig(
        2,
        &HcclRootInfo {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        },
        0,
        cfg,
        &mut comm,
    )
}

#[test]
fn version_11_config_layout_checks_and_effects() {
    // HCCL's layout
    assert_eq!(size_of::<HcclCommConfig>(), 2248);
    assert_eq!(offset_of!(HcclCommConfig, hcclWorldRankID), 300);
    assert_eq!(offset_of!(HcclCommConfig, hcclJobID), 304);
    assert_eq!(offset_of!(HcclCommConfig, aclGraphZeroCopyEnable), 312);
    assert_eq!(offset_of!(HcclCommConfig, hcclExecTimeOut), 316);
    assert_eq!(offset_of!(HcclCommConfig, hcclAlgo), 320);
    assert_eq!(offset_of!(HcclCommConfig, hcclRetryEnable), 1920);
    assert_eq!(offset_of!(HcclCommConfig, hcclRetryParams), 1970);
    assert_eq!(offset_of!(HcclCommConfig, hcclBufferName), 2098);
    assert_eq!(offset_of!(HcclCommConfig, hcclQos), 2228);
    assert_eq!(
        offset_of!(HcclCommConfig, hcclSymWinMaxMemSizePerRank),
        2232
    );
    assert_eq!(offset_of!(HcclCommConfig, hcclChannelSqDepth), 2240);
    assert_eq!(HcclGetCommConfigCapability(), 12);

    // bad values: HCCL_E_PARA naming the field, before any connection
    type Edit = fn(&mut HcclCommConfig);
    let bad: [(&str, Edit); 11] = [
        ("hcclDeterministic", |c| c.hcclDeterministic = 3),
        ("hcclOpExpansionMode", |c| c.hcclOpExpansionMode = 7),
        ("aclGraphZeroCopyEnable", |c| c.aclGraphZeroCopyEnable = 2),
        ("hcclExecTimeOut", |c| c.hcclExecTimeOut = -5),
        ("hcclAlgo", |c| set_text(&mut c.hcclAlgo, "level0:bogus")),
        ("hcclQos", |c| c.hcclQos = 8),
        ("hcclSymWinMaxMemSizePerRank", |c| {
            c.hcclSymWinMaxMemSizePerRank = 0
        }),
        ("hcclBufferName", |c| {
            c.hcclBufferName = [b'a' as c_char; 128]
        }),
        ("hcclRetryParams", |c| {
            c.hcclRetryParams = [b'a' as c_char; 128]
        }),
        // HCCL's op retry strings are read, not only stored
        ("hcclRetryEnable", |c| {
            set_text(&mut c.hcclRetryEnable, "L1:2")
        }),
        ("hcclRetryParams", |c| {
            set_text(&mut c.hcclRetryParams, "MaxCnt:11")
        }),
    ];
    for (field, f) in bad {
        let mut c = HcclCommConfig::default();
        f(&mut c);
        assert_eq!(init_code(&c), E_PARA, "{field}");
        let msg = last_error_message().unwrap();
        assert!(msg.contains(field), "{field}: {msg}");
    }
    // accepted values still reach the connection step (which then fails:
    // nobody serves the zero root info), not a parameter error
    let mut c = HcclCommConfig {
        hcclDeterministic: 2,
        hcclOpExpansionMode: 6,
        hcclQos: 7,
        aclGraphZeroCopyEnable: 1,
        hcclExecTimeOut: 0,
        ..Default::default()
    };
    set_text(&mut c.hcclAlgo, "level0:NA;level1:ring");
    set_text(&mut c.hcclRetryEnable, "L0:0,L1:1,L2:1");
    set_text(
        &mut c.hcclRetryParams,
        "MaxCnt:3,HoldTime:0,IntervalTime:1000",
    );
    let code = init_code(&c);
    assert!(
        !last_error_message().unwrap().contains("config"),
        "{code}: {:?}",
        last_error_message()
    );
    // an older, shorter config (version 5, 300 bytes): what lies beyond
    // its size is never read
    let mut c = HcclCommConfig::default();
    header(&mut c, 300, 5);
    c.hcclQos = 99;
    c.hcclExecTimeOut = -9;
    let _ = init_code(&c);
    assert!(!last_error_message().unwrap().contains("config"));
    // hcclQos is read from version 10 on only
    let mut c = HcclCommConfig::default();
    header(&mut c, size_of::<HcclCommConfig>(), 9);
    c.hcclQos = 99;
    let _ = init_code(&c);
    assert!(!last_error_message().unwrap().contains("hcclQos"));

    // the process-wide setting takes 2 (strict) and reads back
    ok(
        HcclSetConfig(HCCL_DETERMINISTIC, HcclConfigValue { value: 2 }),
        "HcclSetConfig",
    );
    let mut v = HcclConfigValue { value: 0 };
    ok(HcclGetConfig(HCCL_DETERMINISTIC, &mut v), "HcclGetConfig");
    // SAFETY: the union's only member.
    assert_eq!(unsafe { v.value }, 2);
    assert_eq!(
        HcclSetConfig(HCCL_DETERMINISTIC, HcclConfigValue { value: 3 }),
        E_PARA
    );
}

/// Communicators of `p` threads from one root info with `cfg`.
fn init_with_config(p: u32, cfg: &HcclCommConfig) -> Vec<usize> {
    let mut root = HcclRootInfo {
        internal: [0; HCCL_ROOT_INFO_BYTES],
    };
    ok(HcclGetRootInfo(&mut root), "HcclGetRootInfo");
    let out = Mutex::new(vec![0usize; p as usize]);
    std::thread::scope(|s| {
        for r in 0..p {
            let (root, out) = (&root, &out);
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut c = null_mut();
                ok(
                    HcclCommInitRootInfoConfig(p, root, r, cfg, &mut c),
                    "init with config",
                );
                out.lock().unwrap()[r as usize] = c as usize;
            });
        }
    });
    out.into_inner().unwrap()
}

#[test]
fn version_11_fields_take_effect() {
    let mut cfg = HcclCommConfig::default();
    set_text(&mut cfg.hcclCommName, "cfg11");
    // pairwise serves AlltoAll only: an AllReduce under it is refused,
    // which shows the algorithm string reached selection
    set_text(&mut cfg.hcclAlgo, "allreduce=level0:pairwise");
    cfg.hcclExecTimeOut = 2;
    cfg.hcclSymWinMaxMemSizePerRank = 1;
    cfg.hcclDeterministic = 2;
    let comms = init_with_config(2, &cfg);
    let c0 = comms[0] as HcclComm;
    let name = name_of(c0);
    assert_eq!(
        CStr::from_bytes_until_nul(bytemuck(&name)).unwrap(),
        c"cfg11"
    );
    let x = dev_from(&[1.0f32; 8]);
    let y = dev_from(&[0.0f32; 8]);
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    assert_eq!(HcclAllReduce(x, y, 8, FP32, SUM, c0, stream), E_NOT_SUPPORT);
    // the symmetric-window bound (1 GB): refused before anything collective
    let mut win = null_mut();
    assert_eq!(
        HcclCommSymWinRegister(c0, x, (1 << 30) + 4096, &mut win, 0),
        E_PARA
    );
    assert!(last_error_message()
        .unwrap()
        .contains("hcclSymWinMaxMemSizePerRank"));
    // the execution timeout: a Send nobody receives fails in seconds, not 1836 s
    let t = std::time::Instant::now();
    ok(HcclSend(x, 8, FP32, 1, c0, stream), "Send");
    assert_ne!(
        aclrtSynchronizeStream(stream),
        ACL_SUCCESS,
        "the send times out"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t.elapsed()
    );
    acl_ok(aclrtDestroyStream(stream), "destroy stream");
    for c in comms {
        let _ = HcclCommDestroy(c as HcclComm);
    }
}

fn bytemuck(v: &[c_char]) -> &[u8] {
    // SAFETY: c_char and u8 have the same size and alignment.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len()) }
}

#[test]
fn batch_put_and_get_into_registered_exchanged_memory() {
    const N: usize = 1024;
    let comms = init_all(2);
    let addrs = Mutex::new([0usize; 2]);
    let barrier = Barrier::new(2);
    on_ranks(2, |r, stream| {
        let c = comms[r as usize] as HcclComm;
        let peer = 1 - r;
        // each rank's window: N floats of 100·r + i
        let mine: Vec<f32> = (0..N).map(|i| (100 * r as usize + i) as f32).collect();
        let buf = dev_from(&mine);
        let mut reg = null_mut();
        ok(
            HcclCommRegister(c, buf, (N * 4) as u64, &mut reg, 0),
            "register",
        );
        let mut peers = [peer];
        ok(
            HcclCommExchangeMem(c, reg, peers.as_mut_ptr(), 1),
            "exchange",
        );
        addrs.lock().unwrap()[r as usize] = buf as usize;
        barrier.wait();
        let theirs = addrs.lock().unwrap()[peer as usize];
        let local = dev_from(&[-1.0f32; 64]);
        let at = |i: usize| (theirs + 4 * i) as *mut c_void;
        let one = |l: *mut c_void, rem: *mut c_void, n: u64, dt: u32| HcclOneSideOpDesc {
            localAddr: l,
            remoteAddr: rem,
            count: n,
            dataType: dt,
        };

        // bad input: nothing is enqueued when any descriptor is wrong
        let good = one(local, at(0), 16, FP32);
        let mut d = [good, one(local, at(N - 8), 16, FP32)];
        assert_eq!(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            E_PARA,
            "past the end"
        );
        assert!(last_error_message().unwrap().contains("desc[1]"));
        let mut d = [good, one(local, at(0), 16, 99)];
        assert_eq!(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            E_PARA,
            "dtype"
        );
        let mut d = [good, one(null_mut(), at(0), 16, FP32)];
        assert_eq!(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            E_PTR,
            "local null"
        );
        let mut d = [good, one(local, null_mut(), 16, FP32)];
        assert_eq!(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            E_PTR,
            "remote null"
        );
        let mut d = [good, one(local, at(0), u64::MAX, FP32)];
        assert_eq!(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            E_PARA,
            "overflow"
        );
        let mut d = [good, one(local, 0x10 as *mut c_void, 1, FP32)];
        assert_eq!(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            E_PARA,
            "not registered"
        );
        let mut d = [good];
        assert_eq!(
            HcclBatchGet(c, r, d.as_mut_ptr(), 1, stream),
            E_PARA,
            "self"
        );
        assert_eq!(
            HcclBatchGet(c, 2, d.as_mut_ptr(), 1, stream),
            E_PARA,
            "out of range"
        );
        assert_eq!(
            HcclBatchGet(c, peer, null_mut(), 1, stream),
            E_PTR,
            "desc null"
        );
        assert_eq!(
            HcclBatchGet(null_mut(), peer, d.as_mut_ptr(), 1, stream),
            E_PTR
        );
        assert_eq!(
            HcclBatchPut(0x1234 as HcclComm, peer, d.as_mut_ptr(), 1, stream),
            E_PARA
        );
        ok(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 0, stream),
            "no descriptors",
        );
        acl_ok(aclrtSynchronizeStream(stream), "sync");
        assert_eq!(to_host::<f32>(local, 64), vec![-1.0; 64], "nothing ran");

        // get: two slices of the peer's window
        let mut d = [
            one(local, at(10), 16, FP32),
            one((local as usize + 64) as *mut c_void, at(500), 16, FP32),
        ];
        ok(
            HcclBatchGet(c, peer, d.as_mut_ptr(), 2, stream),
            "HcclBatchGet",
        );
        acl_ok(aclrtSynchronizeStream(stream), "sync");
        let got = to_host::<f32>(local, 32);
        let base = 100 * peer as usize;
        let want: Vec<f32> = (10..26)
            .chain(500..516)
            .map(|i| (base + i) as f32)
            .collect();
        assert_eq!(got, want, "rank {r} got the peer's values");
        barrier.wait(); // both have read before anyone writes

        // put: rank r writes 8 values of its own into the peer's window at 100·r
        let src = dev_from(&[r as f32 + 0.5; 8]);
        let mut d = [one(src, at(100 * r as usize), 8, FP32)];
        ok(
            HcclBatchPut(c, peer, d.as_mut_ptr(), 1, stream),
            "HcclBatchPut",
        );
        acl_ok(aclrtSynchronizeStream(stream), "sync");
        barrier.wait();
        let now = to_host::<f32>(buf, N);
        let from = 100 * peer as usize;
        for (i, v) in now.iter().enumerate() {
            let want = if (from..from + 8).contains(&i) {
                peer as f32 + 0.5
            } else {
                (100 * r as usize + i) as f32
            };
            assert_eq!(*v, want, "rank {r} window element {i}");
        }
        barrier.wait();
        ok(HcclCommDeregister(c, reg), "deregister");
    });
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "destroy");
    }
}

#[test]
fn acl_modes_and_memory_info() {
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    acl_ok(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_INFNAN), "INFNAN");
    assert_eq!(
        aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION),
        ACL_ERROR_FEATURE_UNSUPPORTED
    );
    assert_eq!(
        aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_UNDEF),
        ACL_ERROR_INVALID_PARAM
    );
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    acl_ok(
        aclrtSetStreamFailureMode(stream, ACL_STOP_ON_FAILURE),
        "stop",
    );
    acl_ok(
        aclrtSetStreamFailureMode(stream, ACL_CONTINUE_ON_FAILURE),
        "continue",
    );
    assert_eq!(
        aclrtSetStreamFailureMode(stream, 2),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtSetStreamFailureMode(0x4242 as aclrtStream, 1),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    acl_ok(aclrtDestroyStream(stream), "destroy");

    let (mut free, mut total) = (0usize, 0usize);
    acl_ok(
        aclrtGetMemInfo(ACL_DDR_MEM, &mut free, &mut total),
        "aclrtGetMemInfo",
    );
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: usize = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(total, kb * 1024, "MemTotal");
    assert!(free > 0 && free <= total, "free {free} total {total}");
    assert_eq!(
        aclrtGetMemInfo(ACL_MEM_P2P_HUGE1G + 1, &mut free, &mut total),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtGetMemInfo(ACL_DDR_MEM, null_mut(), &mut total),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtGetMemInfo(ACL_DDR_MEM, &mut free, null_mut()),
        ACL_ERROR_INVALID_PARAM
    );
}

fn prop() -> aclrtPhysicalMemProp {
    aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: 1,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    }
}

#[test]
fn virtual_memory_reserve_map_unmap_release() {
    let page = 4096usize;
    let mut p = prop();
    let mut g = 0usize;
    acl_ok(
        aclrtMemGetAllocationGranularity(&mut p, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &mut g),
        "granularity",
    );
    assert!(g >= page && g.is_power_of_two());
    let gmin = g;
    acl_ok(
        aclrtMemGetAllocationGranularity(&mut p, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED, &mut g),
        "recommended",
    );
    assert_eq!(g, (2 << 20).max(gmin));
    assert_eq!(
        aclrtMemGetAllocationGranularity(&mut p, 7, &mut g),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtMemGetAllocationGranularity(null_mut(), 0, &mut g),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtMemGetAllocationGranularity(&mut p, 0, null_mut()),
        ACL_ERROR_INVALID_PARAM
    );
    for bad in [
        |p: &mut aclrtPhysicalMemProp| p.handleType = 1,
        |p: &mut aclrtPhysicalMemProp| p.allocationType = 1,
        |p: &mut aclrtPhysicalMemProp| p.memAttr = ACL_MEM_P2P_HUGE1G + 1,
        |p: &mut aclrtPhysicalMemProp| p.location.type_ = 2,
    ] {
        let mut q = prop();
        bad(&mut q);
        assert_eq!(
            aclrtMemGetAllocationGranularity(&mut q, 0, &mut g),
            ACL_ERROR_INVALID_PARAM
        );
    }
    let mut q = prop();
    q.location.id = 99;
    assert_eq!(
        aclrtMemGetAllocationGranularity(&mut q, 0, &mut g),
        ACL_ERROR_INVALID_DEVICE
    );

    // reserve 4 granules aligned to 1 MiB
    let size = 4 * gmin;
    let mut va = null_mut();
    acl_ok(
        aclrtReserveMemAddress(&mut va, size, 1 << 20, null_mut(), 0),
        "reserve",
    );
    assert_eq!(va as usize % (1 << 20), 0, "aligned");
    assert_eq!(
        aclrtReserveMemAddress(null_mut(), size, 0, null_mut(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtReserveMemAddress(&mut va.clone(), 0, 0, null_mut(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtReserveMemAddress(&mut va.clone(), 100, 0, null_mut(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtReserveMemAddress(&mut va.clone(), size, 3, null_mut(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtReserveMemAddress(&mut va.clone(), size, 0, null_mut(), 2),
        ACL_ERROR_INVALID_PARAM
    );

    // physical memory of 2 granules, mapped twice: at the start of the
    // reservation and at its third granule; both views share the bytes
    let mut h = null_mut();
    acl_ok(
        aclrtMallocPhysical(&mut h, 2 * gmin, &prop(), 0),
        "malloc physical",
    );
    assert_eq!(
        aclrtMallocPhysical(null_mut(), gmin, &prop(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtMallocPhysical(&mut h.clone(), 10, &prop(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtMallocPhysical(&mut h.clone(), gmin, std::ptr::null(), 0),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtMallocPhysical(&mut h.clone(), gmin, &prop(), 2),
        ACL_ERROR_INVALID_PARAM
    );
    let second = (va as usize + 2 * gmin) as *mut c_void;
    acl_ok(aclrtMapMem(va, 2 * gmin, 0, h, 0), "map");
    acl_ok(
        aclrtMapMem(second, gmin, gmin, h, 0),
        "map the second granule again",
    );
    // bad maps
    assert_eq!(
        aclrtMapMem(va, gmin, 0, h, 0),
        ACL_ERROR_INVALID_PARAM,
        "overlap"
    );
    let fourth = (va as usize + 3 * gmin) as *mut c_void;
    assert_eq!(
        aclrtMapMem(fourth, 2 * gmin, 0, h, 0),
        ACL_ERROR_INVALID_PARAM,
        "past the reservation"
    );
    assert_eq!(
        aclrtMapMem(fourth, gmin, 2 * gmin, h, 0),
        ACL_ERROR_INVALID_PARAM,
        "past the memory"
    );
    assert_eq!(
        aclrtMapMem(fourth, gmin, 1, h, 0),
        ACL_ERROR_INVALID_PARAM,
        "offset"
    );
    assert_eq!(
        aclrtMapMem((fourth as usize + 8) as *mut c_void, gmin, 0, h, 0),
        ACL_ERROR_MEMORY_ADDRESS_UNALIGNED
    );
    assert_eq!(
        aclrtMapMem(fourth, gmin, 0, h, 1),
        ACL_ERROR_INVALID_PARAM,
        "flags"
    );
    assert_eq!(
        aclrtMapMem(fourth, gmin, 0, 0x77 as aclrtDrvMemHandle, 0),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtMapMem(0x1000 as *mut c_void, gmin, 0, h, 0),
        ACL_ERROR_INVALID_PARAM,
        "not reserved"
    );

    // loads and stores through the mappings
    // SAFETY: [va, va + 2 granules) and [second, second + 1 granule) are
    // mapped read-write (checked above).
    unsafe {
        let a = va.cast::<u32>();
        for i in 0..(2 * gmin / 4) {
            a.add(i).write(i as u32);
        }
        let b = second.cast::<u32>();
        assert_eq!(
            b.read(),
            (gmin / 4) as u32,
            "the second view sees granule 1"
        );
        b.add(5).write(0xdead);
        assert_eq!(a.add(gmin / 4 + 5).read(), 0xdead, "and writes through it");
    }
    // the mapped memory works as a collective's buffer
    {
        let comms = init_all(1);
        let c = comms[0] as HcclComm;
        acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
        let mut stream = null_mut();
        acl_ok(aclrtCreateStream(&mut stream), "stream");
        ok(
            HcclAllReduce(va, second, 16, 2, SUM, c, stream),
            "AllReduce on mapped memory",
        );
        acl_ok(aclrtSynchronizeStream(stream), "sync");
        // SAFETY: mapped (above); the stream is synchronized.
        let got: Vec<u32> = (0..16)
            .map(|i| unsafe { second.cast::<u32>().add(i).read() })
            .collect();
        assert_eq!(got, (0..16).collect::<Vec<u32>>());
        acl_ok(aclrtDestroyStream(stream), "destroy stream");
        ok(HcclCommDestroy(c), "destroy");
    }

    // teardown order is checked
    assert_eq!(
        aclrtFreePhysical(h),
        ACL_ERROR_INVALID_PARAM,
        "still mapped"
    );
    assert_eq!(
        aclrtReleaseMemAddress(va),
        ACL_ERROR_INVALID_PARAM,
        "still mapped in"
    );
    assert_eq!(
        aclrtUnmapMem((va as usize + 4096) as *mut c_void),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(aclrtUnmapMem(null_mut()), ACL_ERROR_INVALID_PARAM);
    acl_ok(aclrtUnmapMem(va), "unmap");
    acl_ok(aclrtUnmapMem(second), "unmap second");
    assert_eq!(aclrtUnmapMem(va), ACL_ERROR_INVALID_PARAM, "twice");
    acl_ok(aclrtFreePhysical(h), "free physical");
    assert_eq!(
        aclrtFreePhysical(h),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "twice"
    );
    assert_eq!(aclrtFreePhysical(null_mut()), ACL_ERROR_INVALID_PARAM);
    assert_eq!(
        aclrtReleaseMemAddress((va as usize + gmin) as *mut c_void),
        ACL_ERROR_INVALID_PARAM
    );
    acl_ok(aclrtReleaseMemAddress(va), "release");
    assert_eq!(aclrtReleaseMemAddress(va), ACL_ERROR_INVALID_PARAM, "twice");
    assert_eq!(aclrtReleaseMemAddress(null_mut()), ACL_ERROR_INVALID_PARAM);
}
