//! The C API exercised as a C program would: handles, raw pointers, codes.
//! Data is checked against references; errors by code (and message).

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

const E_PARA: u32 = 1;
const E_PTR: u32 = 2;
const FP32: u32 = 4;
const INT32: u32 = 2;
const SUM: u32 = 0;

fn dev_zeroed(bytes: usize) -> *mut c_void {
    let mut p = null_mut();
    acl_ok(aclrtMalloc(&mut p, bytes.max(1), 0), "aclrtMalloc");
    p
}

fn sync(stream: aclrtStream) {
    acl_ok(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
}

#[test]
fn every_collective_through_the_c_api_at_3_and_4_ranks() {
    for p in [3u32, 4] {
        let n = 1001usize; // not divisible by p
        per_rank(p, |r, comm, stream| {
            let pu = p as usize;
            // AllReduce (and in place)
            let x: Vec<f32> = (0..n).map(|i| (r as usize * n + i) as f32).collect();
            let (s, ard) = (dev_from(&x), dev_zeroed(4 * n));
            ok(
                HcclAllReduce(s, ard, n as u64, FP32, SUM, comm, stream),
                "AllReduce",
            );
            ok(
                HcclAllReduce(s, s, n as u64, FP32, 2, comm, stream),
                "AllReduce max in place",
            );
            sync(stream);
            let want: Vec<f32> = (0..n)
                .map(|i| (0..pu).map(|q| (q * n + i) as f32).sum())
                .collect();
            assert_eq!(to_host::<f32>(ard, n), want, "allreduce p={p}");
            let max: Vec<f32> = (0..n).map(|i| ((pu - 1) * n + i) as f32).collect();
            assert_eq!(to_host::<f32>(s, n), max, "in-place max p={p}");

            // Broadcast from the last rank
            let b: Vec<i32> = (0..n as i32)
                .map(|i| if r == p - 1 { i * 3 } else { -1 })
                .collect();
            let bd = dev_from(&b);
            ok(
                HcclBroadcast(bd, n as u64, INT32, p - 1, comm, stream),
                "Broadcast",
            );
            sync(stream);
            assert_eq!(
                to_host::<i32>(bd, n),
                (0..n as i32).map(|i| i * 3).collect::<Vec<_>>()
            );

            // ReduceScatter: block b from rank q holds q + b
            let rs: Vec<i32> = (0..pu * n).map(|i| (r as usize + i / n) as i32).collect();
            let (rsd, rso) = (dev_from(&rs), dev_zeroed(4 * n));
            ok(
                HcclReduceScatter(rsd, rso, n as u64, INT32, SUM, comm, stream),
                "ReduceScatter",
            );
            sync(stream);
            let want = (0..pu).map(|q| (q + r as usize) as i32).sum::<i32>();
            assert!(
                to_host::<i32>(rso, n).iter().all(|&v| v == want),
                "reduce_scatter"
            );

            // AllGather
            let ag: Vec<i32> = vec![r as i32 + 10; n];
            let (agd, ago) = (dev_from(&ag), dev_zeroed(4 * n * pu));
            ok(
                HcclAllGather(agd, ago, n as u64, INT32, comm, stream),
                "AllGather",
            );
            sync(stream);
            let want: Vec<i32> = (0..pu * n).map(|i| (i / n) as i32 + 10).collect();
            assert_eq!(to_host::<i32>(ago, n * pu), want);

            // AllGatherV: rank q sends q + 1 elements, packed with one gap element each
            let counts: Vec<u64> = (0..p as u64).map(|q| q + 1).collect();
            let displs: Vec<u64> = (0..p as u64).map(|q| q * (q + 1) / 2 + q).collect();
            let mine = vec![r as i32 * 7; r as usize + 1];
            let total = (displs[pu - 1] + counts[pu - 1]) as usize;
            let (gvd, gvo) = (dev_from(&mine), dev_from(&vec![-5i32; total]));
            ok(
                HcclAllGatherV(
                    gvd,
                    counts[r as usize],
                    gvo,
                    counts.as_ptr().cast(),
                    displs.as_ptr().cast(),
                    INT32,
                    comm,
                    stream,
                ),
                "AllGatherV",
            );
            sync(stream);
            let got = to_host::<i32>(gvo, total);
            for q in 0..pu {
                let d = displs[q] as usize;
                assert!(
                    got[d..d + q + 1].iter().all(|&v| v == q as i32 * 7),
                    "agv block {q}: {got:?}"
                );
                if q + 1 < pu {
                    assert_eq!(got[d + q + 1], -5, "agv gap untouched");
                }
            }

            // ReduceScatterV with the same layout
            let src: Vec<i32> = (0..total).map(|i| i as i32 + r as i32).collect();
            let (sd, so) = (dev_from(&src), dev_zeroed(4 * (r as usize + 1)));
            ok(
                HcclReduceScatterV(
                    sd,
                    counts.as_ptr().cast(),
                    displs.as_ptr().cast(),
                    so,
                    counts[r as usize],
                    INT32,
                    SUM,
                    comm,
                    stream,
                ),
                "ReduceScatterV",
            );
            sync(stream);
            let d = displs[r as usize] as usize;
            let want: Vec<i32> = (0..r as usize + 1)
                .map(|j| (0..pu).map(|q| (d + j) as i32 + q as i32).sum())
                .collect();
            assert_eq!(to_host::<i32>(so, r as usize + 1), want, "reduce_scatter_v");

            // Scatter from rank 1
            let sc: Vec<i32> = (0..pu * n)
                .map(|i| if r == 1 { i as i32 } else { 0 })
                .collect();
            let (scd, sco) = (dev_from(&sc), dev_zeroed(4 * n));
            ok(
                HcclScatter(scd, sco, n as u64, INT32, 1, comm, stream),
                "Scatter",
            );
            sync(stream);
            let want: Vec<i32> = (0..n).map(|i| (r as usize * n + i) as i32).collect();
            assert_eq!(to_host::<i32>(sco, n), want, "scatter");

            // Reduce (prod) to rank 0: only the root's recvBuf is written
            let rd: Vec<i32> = vec![r as i32 + 2; n];
            let (rdd, rdo) = (dev_from(&rd), dev_from(&vec![-1i32; n]));
            ok(
                HcclReduce(rdd, rdo, n as u64, INT32, 1, 0, comm, stream),
                "Reduce",
            );
            sync(stream);
            let want = if r == 0 {
                (0..p as i32).map(|q| q + 2).product()
            } else {
                -1
            };
            assert!(to_host::<i32>(rdo, n).iter().all(|&v| v == want), "reduce");

            // AlltoAll
            let a2a: Vec<i32> = (0..pu * n)
                .map(|i| (r as usize * 100 + i / n) as i32)
                .collect();
            let (ad, ao) = (dev_from(&a2a), dev_zeroed(4 * pu * n));
            ok(
                HcclAlltoAll(ad, n as u64, INT32, ao, n as u64, INT32, comm, stream),
                "AlltoAll",
            );
            sync(stream);
            let want: Vec<i32> = (0..pu * n)
                .map(|i| ((i / n) * 100 + r as usize) as i32)
                .collect();
            assert_eq!(to_host::<i32>(ao, pu * n), want, "alltoall");

            // AlltoAllV: rank q sends q + j + 1 elements to rank j
            let sc: Vec<u64> = (0..p as u64).map(|j| r as u64 + j + 1).collect();
            let sdp: Vec<u64> = sc
                .iter()
                .scan(0, |a, c| {
                    let d = *a;
                    *a += c;
                    Some(d)
                })
                .collect();
            let rc: Vec<u64> = (0..p as u64).map(|q| q + r as u64 + 1).collect();
            let rdp: Vec<u64> = rc
                .iter()
                .scan(0, |a, c| {
                    let d = *a;
                    *a += c;
                    Some(d)
                })
                .collect();
            let sendv: Vec<i32> = (0..pu)
                .flat_map(|j| vec![(r as usize * 10 + j) as i32; sc[j] as usize])
                .collect();
            let rtot = rc.iter().sum::<u64>() as usize;
            let (vd, vo) = (dev_from(&sendv), dev_zeroed(4 * rtot));
            ok(
                HcclAlltoAllV(
                    vd,
                    sc.as_ptr().cast(),
                    sdp.as_ptr().cast(),
                    INT32,
                    vo,
                    rc.as_ptr().cast(),
                    rdp.as_ptr().cast(),
                    INT32,
                    comm,
                    stream,
                ),
                "AlltoAllV",
            );
            sync(stream);
            let want: Vec<i32> = (0..pu)
                .flat_map(|q| vec![(q * 10 + r as usize) as i32; rc[q] as usize])
                .collect();
            assert_eq!(to_host::<i32>(vo, rtot), want, "alltoallv");

            // Send/Recv around the ring, ordered so no rank waits on itself
            let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
            let token = dev_from(&[r as i32; 33]);
            let got = dev_zeroed(4 * 33);
            if r % 2 == 0 {
                ok(HcclSend(token, 33, INT32, next, comm, stream), "Send");
                ok(HcclRecv(got, 33, INT32, prev, comm, stream), "Recv");
            } else {
                ok(HcclRecv(got, 33, INT32, prev, comm, stream), "Recv");
                ok(HcclSend(token, 33, INT32, next, comm, stream), "Send");
            }
            sync(stream);
            assert!(
                to_host::<i32>(got, 33).iter().all(|&v| v == prev as i32),
                "send/recv"
            );

            // BatchSendRecv: a ring shift in both directions at once (every rank
            // sends first in its list; a naive single-stream order would deadlock)
            let fwd = dev_from(&vec![r as i32 * 2; 500]);
            let bwd = dev_from(&vec![r as i32 * 2 + 1; 500]);
            let (from_prev, from_next) = (dev_zeroed(2000), dev_zeroed(2000));
            let mut items = [
                HcclSendRecvItem {
                    sendRecvType: 0,
                    buf: fwd,
                    count: 500,
                    dataType: INT32,
                    remoteRank: next,
                },
                HcclSendRecvItem {
                    sendRecvType: 0,
                    buf: bwd,
                    count: 500,
                    dataType: INT32,
                    remoteRank: prev,
                },
                HcclSendRecvItem {
                    sendRecvType: 1,
                    buf: from_prev,
                    count: 500,
                    dataType: INT32,
                    remoteRank: prev,
                },
                HcclSendRecvItem {
                    sendRecvType: 1,
                    buf: from_next,
                    count: 500,
                    dataType: INT32,
                    remoteRank: next,
                },
            ];
            ok(
                HcclBatchSendRecv(items.as_mut_ptr(), 4, comm, stream),
                "BatchSendRecv",
            );
            sync(stream);
            assert!(
                to_host::<i32>(from_prev, 500)
                    .iter()
                    .all(|&v| v == prev as i32 * 2),
                "batch fwd"
            );
            assert!(
                to_host::<i32>(from_next, 500)
                    .iter()
                    .all(|&v| v == next as i32 * 2 + 1),
                "batch bwd"
            );

            ok(HcclBarrier(comm, stream), "Barrier");
            sync(stream);
            for m in [
                s, ard, bd, rsd, rso, agd, ago, gvd, gvo, sd, so, scd, sco, rdd, rdo, ad, ao, vd,
                vo, token, got, fwd, bwd, from_prev, from_next,
            ] {
                acl_ok(aclrtFree(m), "aclrtFree");
            }
        });
    }
}

#[test]
fn threads_join_with_root_info_and_form_a_sub_communicator() {
    let mut root = HcclRootInfo {
        internal: [0; HCCL_ROOT_INFO_BYTES],
    };
    ok(HcclGetRootInfo(&mut root), "HcclGetRootInfo");
    let p = 4u32;
    std::thread::scope(|s| {
        for r in 0..p {
            let root = &root;
            s.spawn(move || {
                acl_ok(aclrtSetDevice(r as i32), "aclrtSetDevice");
                let mut stream = null_mut();
                // created before the communicator: moved to it at the first op
                acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
                let mut comm = null_mut();
                ok(
                    HcclCommInitRootInfo(p, root, r, &mut comm),
                    "HcclCommInitRootInfo",
                );
                let (mut size, mut id) = (0, 0);
                ok(HcclGetRankSize(comm, &mut size), "HcclGetRankSize");
                ok(HcclGetRankId(comm, &mut id), "HcclGetRankId");
                assert_eq!((size, id), (p, r));
                let mut err = 99;
                ok(
                    HcclGetCommAsyncError(comm, &mut err),
                    "HcclGetCommAsyncError",
                );
                assert_eq!(err, 0);

                let buf = dev_from(&[r as f32 + 1.0; 64]);
                ok(
                    HcclAllReduce(buf, buf, 64, FP32, SUM, comm, stream),
                    "AllReduce",
                );
                sync(stream);
                assert_eq!(to_host::<f32>(buf, 64), vec![10.0; 64]);

                // even ranks form a sub-communicator with a configured name
                if r % 2 == 0 {
                    let mut ids = [0u32, 2];
                    let mut cfg = config_init();
                    let name = b"evens\0";
                    for (d, s) in cfg.hcclCommName.iter_mut().zip(name) {
                        *d = *s as _;
                    }
                    let mut sub = null_mut();
                    ok(
                        HcclCreateSubCommConfig(
                            &mut comm,
                            2,
                            ids.as_mut_ptr(),
                            7,
                            r / 2,
                            &mut cfg,
                            &mut sub,
                        ),
                        "HcclCreateSubCommConfig",
                    );
                    let mut name = [0 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
                    ok(HcclGetCommName(sub, name.as_mut_ptr()), "HcclGetCommName");
                    // SAFETY-free: CStr from a NUL-terminated array we own
                    let got = CStr::from_bytes_until_nul(&name.map(|c| c as u8))
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_owned();
                    assert_eq!(got, "evens");
                    let (mut size, mut id) = (0, 0);
                    ok(HcclGetRankSize(sub, &mut size), "sub size");
                    ok(HcclGetRankId(sub, &mut id), "sub id");
                    assert_eq!((size, id), (2, r / 2));
                    let b = dev_from(&[r as i32; 10]);
                    ok(
                        HcclAllReduce(b, b, 10, INT32, SUM, sub, stream),
                        "sub AllReduce",
                    );
                    sync(stream);
                    assert_eq!(to_host::<i32>(b, 10), vec![2; 10]);
                    ok(HcclCommDestroy(sub), "destroy sub");
                }
                ok(HcclCommDestroy(comm), "HcclCommDestroy");
                acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            });
        }
    });
}

/// What `static inline HcclCommConfigInit` writes (the header's function is not exported).
fn config_init() -> HcclCommConfig {
    HcclCommConfig::default()
}

#[test]
fn bad_input_returns_the_documented_codes_and_enqueues_nothing() {
    let comms = init_all(2);
    let c0 = comms[0] as HcclComm;
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    let src = dev_from(&[1.0f32; 16]);
    let dst = dev_from(&[-3.0f32; 16]);
    let mut v = 0u32;

    // null pointers
    assert_eq!(HcclGetRankSize(null_mut(), &mut v), E_PTR);
    assert_eq!(HcclGetRankSize(c0, null_mut()), E_PTR);
    assert_eq!(HcclGetRootInfo(null_mut()), E_PTR);
    assert_eq!(
        HcclAllReduce(null_mut(), dst, 16, FP32, SUM, c0, stream),
        E_PTR
    );
    assert!(
        last_error_message().unwrap().contains("sendBuf is null"),
        "{:?}",
        last_error_message()
    );
    assert_eq!(
        HcclAllReduce(src, null_mut(), 16, FP32, SUM, c0, stream),
        E_PTR
    );
    assert_eq!(HcclCommInitRootInfo(2, null(), 0, &mut null_mut()), E_PTR);
    assert_eq!(HcclCommInitAll(2, null_mut(), null_mut()), E_PTR);
    assert_eq!(HcclBatchSendRecv(null_mut(), 1, c0, stream), E_PTR);
    // null buffers are fine when nothing moves
    assert_eq!(
        HcclAllReduce(null_mut(), null_mut(), 0, FP32, SUM, c0, stream),
        SUCCESS
    );

    // out-of-range enums
    assert_eq!(HcclAllReduce(src, dst, 16, 99, SUM, c0, stream), E_PARA);
    assert_eq!(
        HcclAllReduce(src, dst, 16, 12, SUM, c0, stream),
        E_PARA,
        "INT128 is not supported"
    );
    assert_eq!(HcclAllReduce(src, dst, 16, FP32, 4, c0, stream), E_PARA);
    assert_eq!(HcclAllReduce(src, dst, 16, FP32, 255, c0, stream), E_PARA);
    let mut bad_item = [HcclSendRecvItem {
        sendRecvType: 7,
        buf: src,
        count: 1,
        dataType: FP32,
        remoteRank: 1,
    }];
    assert_eq!(
        HcclBatchSendRecv(bad_item.as_mut_ptr(), 1, c0, stream),
        E_PARA
    );
    assert_eq!(HcclSetConfig(3, HcclConfigValue { value: 1 }), E_PARA);
    assert_eq!(HcclSetConfig(0, HcclConfigValue { value: 3 }), E_PARA);

    // out-of-range ranks and counts
    assert_eq!(HcclBroadcast(src, 16, FP32, 2, c0, stream), E_PARA);
    assert!(last_error_message()
        .unwrap()
        .contains("root 2 is out of range for 2 ranks"));
    assert_eq!(
        HcclSend(src, 16, FP32, 0, c0, stream),
        E_PARA,
        "send to self"
    );
    assert_eq!(HcclSend(src, 16, FP32, 9, c0, stream), E_PARA);
    assert_eq!(
        HcclAllReduce(src, dst, u64::MAX, FP32, SUM, c0, stream),
        E_PARA
    );
    assert!(last_error_message().unwrap().contains("overflows"));
    assert_eq!(
        HcclAllGather(src, dst, u64::MAX / 2, FP32, c0, stream),
        E_PARA
    );
    // 17 floats do not fit the 16-float allocation
    assert_eq!(HcclAllReduce(src, dst, 17, FP32, SUM, c0, stream), E_PARA);
    assert!(
        last_error_message()
            .unwrap()
            .contains("holds only 64 bytes"),
        "{:?}",
        last_error_message()
    );
    // partly overlapping send and receive buffers
    let big = dev_zeroed(64);
    let shifted = (big as usize + 4) as *mut c_void;
    assert_eq!(
        HcclAllReduce(big, shifted, 8, FP32, SUM, c0, stream),
        E_PARA
    );
    assert_eq!(
        HcclCommInitRootInfo(
            0,
            &HcclRootInfo {
                internal: [0; HCCL_ROOT_INFO_BYTES]
            },
            0,
            &mut null_mut()
        ),
        E_PARA
    );
    assert_eq!(
        HcclCommInitRootInfo(
            2,
            &HcclRootInfo {
                internal: [0; HCCL_ROOT_INFO_BYTES]
            },
            2,
            &mut null_mut()
        ),
        E_PARA
    );
    let mut devs = [0, 0];
    let mut out = [null_mut(); 2];
    assert_eq!(
        HcclCommInitAll(2, devs.as_mut_ptr(), out.as_mut_ptr()),
        E_PARA,
        "duplicate device"
    );
    assert_eq!(
        HcclCommInitAll(0, devs.as_mut_ptr(), out.as_mut_ptr()),
        E_PARA
    );

    // configs
    let mut cfg = config_init();
    cfg.reserved[8] = 0; // break the magic word
    assert_eq!(
        HcclCommInitRootInfoConfig(
            2,
            &HcclRootInfo {
                internal: [0; HCCL_ROOT_INFO_BYTES]
            },
            0,
            &cfg,
            &mut null_mut()
        ),
        E_PARA
    );
    assert!(last_error_message().unwrap().contains("HcclCommConfigInit"));
    let mut cfg = config_init();
    cfg.hcclBufferSize = 0;
    assert_eq!(
        HcclCommInitRootInfoConfig(
            2,
            &HcclRootInfo {
                internal: [0; HCCL_ROOT_INFO_BYTES]
            },
            0,
            &cfg,
            &mut null_mut()
        ),
        E_PARA
    );

    // foreign and destroyed handles are detected, not dereferenced
    assert_eq!(HcclGetRankSize(0x1234 as HcclComm, &mut v), E_PARA);
    assert_eq!(
        HcclGetRankSize(stream, &mut v),
        E_PARA,
        "a stream handle is not a comm"
    );
    assert_eq!(
        HcclAllReduce(src, dst, 16, FP32, SUM, c0, 0x99 as aclrtStream),
        E_PARA,
        "unknown stream"
    );
    ok(HcclCommDestroy(comms[1] as HcclComm), "destroy rank 1");
    assert_eq!(HcclGetRankSize(comms[1] as HcclComm, &mut v), E_PARA);
    assert!(last_error_message()
        .unwrap()
        .contains("not a live communicator"));
    assert_eq!(
        HcclAllReduce(src, dst, 16, FP32, SUM, comms[1] as HcclComm, stream),
        E_PARA
    );
    assert_eq!(
        HcclCommDestroy(comms[1] as HcclComm),
        E_PARA,
        "double destroy"
    );

    // nothing was enqueued or written by any of the failed calls
    let mut status = 7;
    let mut ev = null_mut();
    acl_ok(aclrtCreateEvent(&mut ev), "aclrtCreateEvent");
    acl_ok(aclrtRecordEvent(ev, stream), "aclrtRecordEvent");
    acl_ok(aclrtSynchronizeStream(stream), "sync");
    acl_ok(aclrtQueryEventStatus(ev, &mut status), "query");
    assert_eq!(status, 1);
    assert_eq!(to_host::<f32>(dst, 16), vec![-3.0; 16], "dst untouched");
    ok(HcclCommDestroy(c0), "destroy rank 0");
}

#[test]
fn error_strings_are_hccls() {
    let want = [
        "no error",
        "parameter error",
        "empty pointer",
        "memory error",
        "internal error",
        "not support feature",
        "not found specific resource",
        "resource unavailable",
        "call system interface error",
        "timeout",
        "open file fail",
        "tcp connect fail",
        "roce connect fail",
        "tcp transfer fail",
        "roce transfer fail",
        "call runtime api fail",
        "call driver api fail",
        "call profiling api fail",
        "call cce api fail",
        "call network api fail",
        "try again",
        "error cqe",
    ];
    for (code, text) in want.iter().enumerate() {
        // SAFETY-free: the library returns static NUL-terminated strings
        let s = unsafe_free_cstr(HcclGetErrorString(code as u32));
        assert_eq!(&s, text, "code {code}");
    }
    for (code, text) in [
        (22, "error communication suspending"),
        (23, "retry constraint"),
        (24, "out of memory"),
        (1041, "the error information is in the status"),
    ] {
        assert_eq!(
            unsafe_free_cstr(HcclGetErrorString(code)),
            text,
            "code {code}"
        );
    }
    assert_eq!(unsafe_free_cstr(HcclGetErrorString(999)), "unknown error");
    assert_eq!(unsafe_free_cstr(HcclGetErrorString(1042)), "unknown error");
    assert_eq!(HcclGetCommConfigCapability(), 12);
}

/// Reads a static C string through the ACL memcpy, keeping the test free of `unsafe`.
fn unsafe_free_cstr(p: *const std::ffi::c_char) -> String {
    let mut buf = [0u8; 128];
    let mut n = 0;
    while n < buf.len() {
        acl_ok(
            aclrtMemcpy(
                buf[n..].as_mut_ptr().cast(),
                1,
                (p as usize + n) as *const c_void,
                1,
                0,
            ),
            "copy",
        );
        if buf[n] == 0 {
            break;
        }
        n += 1;
    }
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[test]
fn acl_runtime_streams_events_and_memory() {
    let mut n = 0;
    acl_ok(aclrtGetDeviceCount(&mut n), "count");
    assert_eq!(n, 8);
    assert_eq!(aclrtSetDevice(8), ACL_ERROR_INVALID_DEVICE);
    assert_eq!(aclrtSetDevice(-1), ACL_ERROR_INVALID_DEVICE);
    acl_ok(aclrtSetDevice(3), "set");
    let mut d = -1;
    acl_ok(aclrtGetDevice(&mut d), "get");
    assert_eq!(d, 3);
    assert_eq!(unsafe_free_cstr(aclrtGetSocName()), "hccl-rs-cpu");

    // memory
    assert_eq!(aclrtMalloc(null_mut(), 8, 0), ACL_ERROR_INVALID_PARAM);
    let mut p = null_mut();
    assert_eq!(aclrtMalloc(&mut p, 0, 0), ACL_ERROR_INVALID_PARAM);
    assert_eq!(aclrtMalloc(&mut p, 8, 99), ACL_ERROR_INVALID_PARAM);
    let a = dev_from(&(0..1 << 20).map(|i| i as u32).collect::<Vec<_>>());
    let b = dev_zeroed(4 << 20);
    assert_eq!(
        aclrtMemcpy(b, 4, a, 8, 3),
        ACL_ERROR_INVALID_PARAM,
        "count > destMax"
    );
    assert_eq!(
        aclrtMemcpy(b, 8, a, 8, 9),
        ACL_ERROR_INVALID_PARAM,
        "bad kind"
    );
    assert_eq!(aclrtFree(0x10 as *mut c_void), ACL_ERROR_INVALID_PARAM);
    assert_eq!(
        aclrtFreeHost(a),
        ACL_ERROR_INVALID_PARAM,
        "device memory freed as host memory"
    );

    // stream order: copy, fill, events with timestamps
    let mut s = null_mut();
    acl_ok(aclrtCreateStream(&mut s), "stream");
    let (mut e0, mut e1) = (null_mut(), null_mut());
    acl_ok(aclrtCreateEvent(&mut e0), "e0");
    acl_ok(aclrtCreateEvent(&mut e1), "e1");
    let mut ms = 0.0f32;
    assert_eq!(
        aclrtEventElapsedTime(&mut ms, e0, e1),
        ACL_ERROR_INVALID_PARAM,
        "not recorded"
    );
    acl_ok(aclrtRecordEvent(e0, s), "record e0");
    acl_ok(
        aclrtMemcpyAsync(b, 4 << 20, a, 4 << 20, 3, s),
        "memcpy async",
    );
    acl_ok(aclrtMemsetAsync(b, 4 << 20, 0x7f, 16, s), "memset async");
    acl_ok(aclrtRecordEvent(e1, s), "record e1");
    assert_eq!(
        aclrtFree(a),
        ACL_ERROR_INVALID_PARAM,
        "in use by the queued copy"
    );
    acl_ok(aclrtSynchronizeEvent(e1), "sync e1");
    acl_ok(aclrtEventElapsedTime(&mut ms, e0, e1), "elapsed");
    assert!(ms >= 0.0, "{ms}");
    let got = to_host::<u32>(b, 1 << 20);
    assert_eq!(&got[..4], &[0x7f7f_7f7f; 4]);
    assert!(got[4..].iter().enumerate().all(|(i, &v)| v == i as u32 + 4));
    acl_ok(aclrtStreamWaitEvent(s, e1), "wait");
    acl_ok(aclrtDestroyEvent(e0), "destroy e0");
    assert_eq!(aclrtDestroyEvent(e0), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    acl_ok(aclrtDestroyStream(s), "destroy stream");
    assert_eq!(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    acl_ok(aclrtFree(a), "free a");
    acl_ok(aclrtFree(b), "free b");
    assert_eq!(aclrtFree(b), ACL_ERROR_INVALID_PARAM, "double free");
    let mut h = null_mut();
    acl_ok(aclrtMallocHost(&mut h, 100), "malloc host");
    acl_ok(aclrtMemset(h, 100, 1, 100), "memset");
    assert_eq!(to_host::<u8>(h, 100), vec![1u8; 100]);
    acl_ok(aclrtFreeHost(h), "free host");
}

#[test]
fn memory_registration_follows_hccls_rules() {
    let comms = init_all(1);
    let c = comms[0] as HcclComm;
    let base = dev_zeroed(1 << 16);
    let inner = (base as usize + 4096) as *mut c_void;
    let handle = 0x1 as aclrtDrvMemHandle;
    assert_eq!(
        HcclCommActivateCommMemory(c, inner, 4096, 0, handle, 0),
        E_PARA,
        "no range set"
    );
    assert_eq!(
        HcclCommSetMemoryRange(c, base, 1 << 16, 64, 0),
        E_PARA,
        "alignment must be 0"
    );
    assert_eq!(
        HcclCommSetMemoryRange(c, base, 1 << 16, 0, 1),
        E_PARA,
        "flags must be 0"
    );
    ok(HcclCommSetMemoryRange(c, base, 1 << 16, 0, 0), "set");
    assert_eq!(
        HcclCommSetMemoryRange(c, inner, 16, 0, 0),
        E_PARA,
        "overlapping range"
    );
    assert_eq!(
        HcclCommActivateCommMemory(c, inner, 1 << 16, 0, handle, 0),
        E_PARA,
        "past the range"
    );
    assert_eq!(
        HcclCommActivateCommMemory(c, inner, 4096, 0, null_mut(), 0),
        E_PTR
    );
    ok(
        HcclCommActivateCommMemory(c, inner, 4096, 0, handle, 0),
        "activate",
    );
    assert_eq!(HcclCommUnsetMemoryRange(c, base), E_PARA, "still active");
    assert_eq!(
        HcclCommDeactivateCommMemory(c, base),
        E_PARA,
        "not active at base"
    );
    ok(HcclCommDeactivateCommMemory(c, inner), "deactivate");
    ok(HcclCommUnsetMemoryRange(c, base), "unset");
    assert_eq!(HcclCommUnsetMemoryRange(c, base), E_PARA, "already unset");
    ok(HcclCommDestroy(c), "destroy");
    acl_ok(aclrtFree(base), "free");
}

#[test]
fn group_calls_batch_sends_and_fuse_all_reduces() {
    // outside a group
    let mut in_group = true;
    ok(HcclGroupStatusGet(&mut in_group), "HcclGroupStatusGet");
    assert!(!in_group);
    assert_eq!(HcclGroupEnd(), E_PARA);
    let msg = last_error_message().unwrap_or_default();
    assert!(msg.contains("without a matching HcclGroupStart"), "{msg}");
    assert_eq!(HcclGroupStatusGet(null_mut()), E_PTR);
    // every rank sends to its right neighbour before receiving from its
    // left, and issues two AllReduces, all in one group
    let p = 3u32;
    per_rank(p, |r, comm, stream| {
        let n = 256usize;
        let mine: Vec<f32> = (0..n).map(|i| (r * 1000) as f32 + i as f32).collect();
        let send = dev_from(&mine);
        let recv = dev_zeroed(n * 4);
        let (a, b) = (dev_from(&[r as f32 + 1.0; 8]), dev_from(&[2.0f32; 3]));
        let (ao, bo) = (dev_zeroed(32), dev_zeroed(12));
        ok(HcclGroupStart(), "HcclGroupStart");
        let mut in_group = false;
        ok(HcclGroupStatusGet(&mut in_group), "HcclGroupStatusGet");
        assert!(in_group);
        ok(
            HcclSend(send, n as u64, FP32, (r + 1) % p, comm, stream),
            "HcclSend",
        );
        ok(
            HcclRecv(recv, n as u64, FP32, (r + p - 1) % p, comm, stream),
            "HcclRecv",
        );
        ok(
            HcclAllReduce(a, ao, 8, FP32, SUM, comm, stream),
            "HcclAllReduce a",
        );
        ok(
            HcclAllReduce(b, bo, 3, FP32, SUM, comm, stream),
            "HcclAllReduce b",
        );
        ok(HcclGroupEnd(), "HcclGroupEnd");
        sync(stream);
        let left = (r + p - 1) % p;
        let want: Vec<f32> = (0..n).map(|i| (left * 1000) as f32 + i as f32).collect();
        assert_eq!(to_host::<f32>(recv, n), want, "rank {r}");
        assert_eq!(to_host::<f32>(ao, 8), vec![6.0; 8], "rank {r}");
        assert_eq!(to_host::<f32>(bo, 3), vec![6.0; 3], "rank {r}");
        for m in [send, recv, a, b, ao, bo] {
            acl_ok(aclrtFree(m), "aclrtFree");
        }
    });
}

const E_NOT_FOUND: u32 = 6;

/// How many times this process read peers' buffers through mappings and
/// with cross-memory attach.
fn reads() -> (u64, u64) {
    let s = hccl_adapter::peer_access_stats();
    (s.mapped_reads, s.cma_reads)
}

/// An AllReduce of `n` f32 (rank r: r + i) from `send` into `recv`, checked.
fn all_reduce_checked(
    r: u32,
    c: HcclComm,
    s: aclrtStream,
    send: *mut c_void,
    recv: *mut c_void,
    n: usize,
) {
    let data: Vec<f32> = (0..n).map(|i| (r as usize + i) as f32).collect();
    acl_ok(
        aclrtMemcpy(send, n * 4, data.as_ptr().cast(), n * 4, 1),
        "H2D",
    );
    ok(
        HcclAllReduce(send, recv, n as u64, FP32, SUM, c, s),
        "HcclAllReduce",
    );
    sync(s);
    let got = to_host::<f32>(recv, n);
    assert!(
        (0..n).all(|i| got[i] == (1 + 2 * i) as f32),
        "rank {r}: allreduce result"
    );
}

/// Large enough for the direct-read executor (selected from 256 KiB on
/// one host when cross-memory attach is permitted).
const DIRECT_N: usize = 200_000;

#[test]
fn registered_memory_through_the_c_api_is_read_through_mappings() {
    if !hccl_adapter::cross_memory_attach_permitted() {
        return;
    }
    let before = reads();
    per_rank(2, |r, c, s| {
        let (send, recv) = (dev_zeroed(DIRECT_N * 4), dev_zeroed(DIRECT_N * 4));
        let (mut hs, mut hr) = (null_mut(), null_mut());
        ok(
            HcclCommRegister(c, send, (DIRECT_N * 4) as u64, &mut hs, 0),
            "register send",
        );
        ok(
            HcclCommRegister(c, recv, (DIRECT_N * 4) as u64, &mut hr, 0),
            "register recv",
        );
        let mut peer = [1 - r];
        ok(HcclCommExchangeMem(c, hs, peer.as_mut_ptr(), 1), "exchange");
        all_reduce_checked(r, c, s, send, recv, DIRECT_N);
        ok(HcclCommDeregister(c, hs), "deregister send");
        ok(HcclCommDeregister(c, hr), "deregister recv");
        assert_eq!(HcclCommDeregister(c, hs), E_PARA, "deregistered twice");
        acl_ok(aclrtFree(send), "free");
        acl_ok(aclrtFree(recv), "free");
    });
    let after = reads();
    assert!(after.0 > before.0, "no read through a mapping: {after:?}");
    assert_eq!(
        after.1, before.1,
        "registered buffers read with cross-memory attach"
    );
}

#[test]
fn activated_memory_is_registered_for_the_data_path() {
    if !hccl_adapter::cross_memory_attach_permitted() {
        return;
    }
    let counts = std::sync::Mutex::new(Vec::new());
    per_rank(2, |r, c, s| {
        let handle = 0x1 as aclrtDrvMemHandle;
        let base = dev_zeroed(2 * DIRECT_N * 4);
        let (send, recv) = (base, (base as usize + DIRECT_N * 4) as *mut c_void);
        ok(
            HcclCommSetMemoryRange(c, base, 2 * DIRECT_N * 4, 0, 0),
            "set",
        );
        ok(
            HcclCommActivateCommMemory(c, base, 2 * DIRECT_N * 4, 0, handle, 0),
            "activate",
        );
        let before = reads();
        all_reduce_checked(r, c, s, send, recv, DIRECT_N);
        ok(HcclBarrier(c, s), "barrier");
        sync(s);
        let mid = reads();
        ok(HcclCommDeactivateCommMemory(c, base), "deactivate");
        all_reduce_checked(r, c, s, send, recv, DIRECT_N);
        ok(HcclBarrier(c, s), "barrier");
        sync(s);
        let end = reads();
        counts.lock().unwrap().push((before, mid, end));
        ok(HcclCommUnsetMemoryRange(c, base), "unset");
        acl_ok(aclrtFree(base), "free");
    });
    // the two ranks' counts are one process's: compare the whole span
    let c = counts.into_inner().unwrap();
    let first = c.iter().map(|x| x.0).min().unwrap();
    let last = c.iter().map(|x| x.2).max().unwrap();
    assert!(
        last.0 > first.0,
        "active memory was never read through a mapping: {c:?}"
    );
    assert!(
        last.1 > first.1,
        "deactivated memory was not read with cross-memory attach: {c:?}"
    );
}

#[test]
fn registration_bad_input_returns_the_documented_codes() {
    let comms = init_all(2);
    let (c0, c1) = (comms[0] as HcclComm, comms[1] as HcclComm);
    let dev = dev_zeroed(8192);
    let mut host = null_mut();
    acl_ok(aclrtMallocHost(&mut host, 4096), "malloc host");
    let mut own = vec![0u8; 4096];
    let mut h = null_mut();
    assert_eq!(
        HcclCommRegister(c0, host, 4096, &mut h, 0),
        E_PARA,
        "aclrtMallocHost memory"
    );
    assert!(
        last_error_message()
            .unwrap_or_default()
            .contains("aclrtMalloc allocation"),
        "{:?}",
        last_error_message()
    );
    assert_eq!(
        HcclCommRegister(c0, own.as_mut_ptr().cast(), 4096, &mut h, 0),
        E_PARA,
        "malloc'd memory"
    );
    assert_eq!(
        HcclCommRegister(c0, dev, 8193, &mut h, 0),
        E_PARA,
        "past the allocation"
    );
    assert_eq!(HcclCommRegister(c0, dev, 4096, &mut h, 1), E_PARA, "flag");
    assert_eq!(HcclCommRegister(c0, dev, 4096, null_mut(), 0), E_PTR);
    assert_eq!(HcclCommRegister(c0, null_mut(), 4096, &mut h, 0), E_PTR);
    ok(HcclCommRegister(c0, dev, 4096, &mut h, 0), "register");
    let mut h2 = null_mut();
    let inner = (dev as usize + 2048) as *mut c_void;
    assert_eq!(
        HcclCommRegister(c0, inner, 4096, &mut h2, 0),
        E_PARA,
        "overlap"
    );
    assert!(
        last_error_message()
            .unwrap_or_default()
            .contains("overlaps"),
        "{:?}",
        last_error_message()
    );
    // the same memory with the other communicator is its own registration
    ok(
        HcclCommRegister(c1, inner, 4096, &mut h2, 0),
        "register with comm 1",
    );
    assert_eq!(HcclCommDeregister(c1, h), E_PARA, "another comm's handle");
    let mut bad_peers = [0u32];
    assert_eq!(
        HcclCommExchangeMem(c0, h, bad_peers.as_mut_ptr(), 1),
        E_PARA,
        "self"
    );
    let mut bad_peers = [7u32];
    assert_eq!(
        HcclCommExchangeMem(c0, h, bad_peers.as_mut_ptr(), 1),
        E_PARA,
        "range"
    );
    assert_eq!(HcclCommExchangeMem(c0, h, null_mut(), 1), E_PTR);
    assert_eq!(
        HcclCommExchangeMem(c0, 0x2e as *mut c_void, null_mut(), 0),
        E_PARA,
        "forged"
    );
    ok(HcclCommDeregister(c0, h), "deregister");
    ok(HcclCommDeregister(c1, h2), "deregister");
    assert_eq!(HcclCommDeregister(c0, null_mut()), E_PTR);
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "destroy");
    }
    acl_ok(aclrtFree(dev), "free");
    acl_ok(aclrtFreeHost(host), "free host");
}

#[test]
fn symmetric_windows_through_the_c_api() {
    let size = 4096usize;
    per_rank(2, |r, c, s| {
        let mine = dev_zeroed(size);
        let mut w = null_mut();
        ok(
            HcclCommSymWinRegister(c, mine, size as u64, &mut w, 1),
            "register window",
        );
        let peer = 1 - r;
        let mut p = null_mut();
        ok(
            HcclSymWinGetPeerPointer(w, 4 * r as usize, peer, &mut p),
            "peer pointer",
        );
        // SAFETY: the peer's window is mapped here while registered, 4096
        // bytes from its start; word r is written only by this rank.
        unsafe { p.cast::<u32>().write_volatile(r * 1000 + peer) };
        ok(HcclBarrier(c, s), "barrier");
        sync(s);
        let got = to_host::<u32>(mine, 2);
        assert_eq!(
            got[peer as usize],
            peer * 1000 + r,
            "rank {r}: the peer's store"
        );
        let (mut found, mut off) = (null_mut(), 0usize);
        let inner = (mine as usize + 8) as *mut c_void;
        ok(
            HcclCommSymWinGet(c, inner, 8, &mut found, &mut off),
            "window get",
        );
        assert_eq!((found, off), (w, 8));
        assert_eq!(
            HcclCommSymWinGet(c, inner, size, &mut found, &mut off),
            E_NOT_FOUND,
            "past the window"
        );
        assert_eq!(
            HcclSymWinGetPeerPointer(w, size, peer, &mut p),
            E_PARA,
            "offset"
        );
        assert_eq!(HcclSymWinGetPeerPointer(w, 0, 2, &mut p), E_PARA, "rank");
        assert_eq!(HcclSymWinGetPeerPointer(w, 0, peer, null_mut()), E_PTR);
        ok(HcclCommSymWinDeregister(w), "deregister window");
        assert_eq!(
            HcclSymWinGetPeerPointer(w, 0, peer, &mut p),
            E_PARA,
            "deregistered"
        );
        assert_eq!(HcclCommSymWinDeregister(w), E_PARA, "twice");
        // sizes that differ: an error on both ranks
        let other = dev_zeroed(size * (1 + r as usize));
        assert_eq!(
            HcclCommSymWinRegister(c, other, (size * (1 + r as usize)) as u64, &mut w, 1),
            E_PARA,
            "rank {r}: sizes differ"
        );
        assert!(
            last_error_message()
                .unwrap_or_default()
                .contains("rank 1: 8192 bytes"),
            "{:?}",
            last_error_message()
        );
        assert_eq!(
            HcclCommSymWinRegister(c, mine, size as u64, &mut w, 2),
            E_PARA,
            "flag"
        );
        acl_ok(aclrtFree(other), "free");
        acl_ok(aclrtFree(mine), "free");
    });
}

#[test]
fn a_window_goes_with_its_communicator() {
    let comms = init_all(1);
    let c = comms[0] as HcclComm;
    let mine = dev_zeroed(4096);
    let mut w = null_mut();
    ok(
        HcclCommSymWinRegister(c, mine, 4096, &mut w, 0),
        "register window",
    );
    let mut p = null_mut();
    ok(HcclSymWinGetPeerPointer(w, 16, 0, &mut p), "own pointer");
    assert_eq!(
        p as usize,
        mine as usize + 16,
        "a rank's own part is its memory"
    );
    let mut h = null_mut();
    assert_eq!(
        HcclCommRegister(c, mine, 64, &mut h, 0),
        E_PARA,
        "the window registered its memory with the communicator"
    );
    ok(HcclCommDestroy(c), "destroy");
    assert_eq!(
        HcclCommSymWinDeregister(w),
        E_PARA,
        "communicator destroyed"
    );
    assert_eq!(
        HcclSymWinGetPeerPointer(w, 0, 0, &mut p),
        E_PARA,
        "window gone"
    );
    acl_ok(aclrtFree(mine), "free");
}

/// HCCL's FP8 codes: HIF8, FP8E4M3, FP8E5M2, FP8E8M0.
const FP8_CODES: [(u32, &str); 4] = [
    (14, "HCCL_DATA_TYPE_HIF8"),
    (15, "HCCL_DATA_TYPE_FP8E4M3"),
    (16, "HCCL_DATA_TYPE_FP8E5M2"),
    (17, "HCCL_DATA_TYPE_FP8E8M0"),
];
const E_NOT_SUPPORT: u32 = 5;

/// Byte `i` of rank `rank`'s data for type `code`: 0x01..=0x65, a positive
/// finite number in every FP8 format (no NaN or infinity pattern).
fn fp8_byte(code: u32, rank: u32, i: usize) -> u8 {
    1 + ((code as usize * 7 + rank as usize * 31 + i * 13) % 101) as u8
}

/// Exclusive prefix sums (displacements of `counts`).
fn displs_of(counts: &[u64]) -> Vec<u64> {
    counts
        .iter()
        .scan(0, |a, c| {
            let d = *a;
            *a += c;
            Some(d)
        })
        .collect()
}

/// Every op that moves data without reducing it takes HCCL's FP8 types
/// through the C API, and the bytes arrive unchanged; every reducing op
/// refuses them with HCCL_E_NOT_SUPPORT naming the type and the op, and
/// enqueues nothing (the stream runs a following op, the output is
/// untouched).
#[test]
fn fp8_types_move_through_the_c_api_and_reductions_refuse_them() {
    for p in [3u32, 4] {
        per_rank(p, |r, comm, stream| {
            let pu = p as usize;
            let n = 333usize;
            for (code, name) in FP8_CODES {
                let mine: Vec<u8> = (0..pu * n).map(|i| fp8_byte(code, r, i)).collect();
                let src = dev_from(&mine);

                // AllGather
                let ag = dev_zeroed(pu * n);
                ok(
                    HcclAllGather(src, ag, n as u64, code, comm, stream),
                    "AllGather",
                );
                // AllGatherV: rank q sends q + 1 + code % 3 bytes
                let gc: Vec<u64> = (0..p as u64).map(|q| q + 1 + code as u64 % 3).collect();
                let gd = displs_of(&gc);
                let agv = dev_zeroed(gc.iter().sum::<u64>() as usize);
                ok(
                    HcclAllGatherV(
                        src,
                        gc[r as usize],
                        agv,
                        gc.as_ptr().cast(),
                        gd.as_ptr().cast(),
                        code,
                        comm,
                        stream,
                    ),
                    "AllGatherV",
                );
                // Broadcast from the last rank
                let bc = if r == p - 1 {
                    dev_from(&mine[..n])
                } else {
                    dev_zeroed(n)
                };
                ok(
                    HcclBroadcast(bc, n as u64, code, p - 1, comm, stream),
                    "Broadcast",
                );
                // AlltoAll
                let a2a = dev_zeroed(pu * n);
                ok(
                    HcclAlltoAll(src, n as u64, code, a2a, n as u64, code, comm, stream),
                    "AlltoAll",
                );
                // AlltoAllV: r sends (r * 2 + q) % 4 + 1 bytes to q
                let m = |from: usize, to: usize| ((from * 2 + to) % 4 + 1) as u64;
                let sc: Vec<u64> = (0..pu).map(|q| m(r as usize, q)).collect();
                let rc: Vec<u64> = (0..pu).map(|q| m(q, r as usize)).collect();
                let (sd, rd) = (displs_of(&sc), displs_of(&rc));
                let a2av = dev_zeroed(rc.iter().sum::<u64>() as usize);
                ok(
                    HcclAlltoAllV(
                        src,
                        sc.as_ptr().cast(),
                        sd.as_ptr().cast(),
                        code,
                        a2av,
                        rc.as_ptr().cast(),
                        rd.as_ptr().cast(),
                        code,
                        comm,
                        stream,
                    ),
                    "AlltoAllV",
                );
                // Scatter from rank 1
                let sco = dev_zeroed(n);
                ok(
                    HcclScatter(src, sco, n as u64, code, 1, comm, stream),
                    "Scatter",
                );
                // Send/Recv around the ring, then BatchSendRecv backwards
                let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
                let got = dev_zeroed(n);
                if r % 2 == 0 {
                    ok(HcclSend(src, n as u64, code, next, comm, stream), "Send");
                    ok(HcclRecv(got, n as u64, code, prev, comm, stream), "Recv");
                } else {
                    ok(HcclRecv(got, n as u64, code, prev, comm, stream), "Recv");
                    ok(HcclSend(src, n as u64, code, next, comm, stream), "Send");
                }
                let batch = dev_zeroed(n);
                let mut items = [
                    HcclSendRecvItem {
                        sendRecvType: 0,
                        buf: src,
                        count: n as u64,
                        dataType: code,
                        remoteRank: prev,
                    },
                    HcclSendRecvItem {
                        sendRecvType: 1,
                        buf: batch,
                        count: n as u64,
                        dataType: code,
                        remoteRank: next,
                    },
                ];
                ok(
                    HcclBatchSendRecv(items.as_mut_ptr(), 2, comm, stream),
                    "BatchSendRecv",
                );
                sync(stream);

                let of = |q: u32, from: usize, len: usize| -> Vec<u8> {
                    (from..from + len).map(|i| fp8_byte(code, q, i)).collect()
                };
                let want: Vec<u8> = (0..p).flat_map(|q| of(q, 0, n)).collect();
                assert_eq!(to_host::<u8>(ag, pu * n), want, "{name} AllGather p={p}");
                let want: Vec<u8> = (0..p)
                    .flat_map(|q| of(q, 0, gc[q as usize] as usize))
                    .collect();
                assert_eq!(
                    to_host::<u8>(agv, want.len()),
                    want,
                    "{name} AllGatherV p={p}"
                );
                assert_eq!(
                    to_host::<u8>(bc, n),
                    of(p - 1, 0, n),
                    "{name} Broadcast p={p}"
                );
                let want: Vec<u8> = (0..p).flat_map(|q| of(q, r as usize * n, n)).collect();
                assert_eq!(to_host::<u8>(a2a, pu * n), want, "{name} AlltoAll p={p}");
                let want: Vec<u8> = (0..pu)
                    .flat_map(|q| {
                        let at =
                            displs_of(&(0..pu).map(|j| m(q, j)).collect::<Vec<_>>())[r as usize];
                        of(q as u32, at as usize, rc[q] as usize)
                    })
                    .collect();
                assert_eq!(
                    to_host::<u8>(a2av, want.len()),
                    want,
                    "{name} AlltoAllV p={p}"
                );
                assert_eq!(
                    to_host::<u8>(sco, n),
                    of(1, r as usize * n, n),
                    "{name} Scatter p={p}"
                );
                assert_eq!(
                    to_host::<u8>(got, n),
                    of(prev, 0, n),
                    "{name} Send/Recv p={p}"
                );
                assert_eq!(
                    to_host::<u8>(batch, n),
                    of(next, 0, n),
                    "{name} BatchSendRecv p={p}"
                );

                // every reducing op refuses the type, enqueuing nothing
                let out = dev_from(&vec![0xEEu8; pu * n]);
                let cnt: Vec<u64> = vec![n as u64; pu];
                let dsp = displs_of(&cnt);
                let refused: [(&str, &dyn Fn() -> u32); 5] = [
                    ("HcclAllReduce", &|| {
                        HcclAllReduce(src, out, n as u64, code, SUM, comm, stream)
                    }),
                    ("HcclAllReduce", &|| {
                        HcclAllReduce(out, out, n as u64, code, 2, comm, stream)
                    }),
                    ("HcclReduce", &|| {
                        HcclReduce(src, out, n as u64, code, SUM, 0, comm, stream)
                    }),
                    ("HcclReduceScatter", &|| {
                        HcclReduceScatter(src, out, n as u64, code, SUM, comm, stream)
                    }),
                    ("HcclReduceScatterV", &|| {
                        HcclReduceScatterV(
                            src,
                            cnt.as_ptr().cast(),
                            dsp.as_ptr().cast(),
                            out,
                            n as u64,
                            code,
                            SUM,
                            comm,
                            stream,
                        )
                    }),
                ];
                for (api, call) in refused {
                    assert_eq!(call(), E_NOT_SUPPORT, "{api} {name}");
                    let msg = last_error_message().unwrap_or_default();
                    assert!(
                        msg.contains(name) && msg.contains(api) && msg.contains("reducing op"),
                        "{api} {name}: {msg}"
                    );
                }
                // the stream is usable and nothing touched the output
                let after = dev_zeroed(pu * n);
                ok(
                    HcclAllGather(src, after, n as u64, code, comm, stream),
                    "AllGather after the refusals",
                );
                sync(stream);
                assert_eq!(to_host::<u8>(out, pu * n), vec![0xEEu8; pu * n], "{name}");
                let want: Vec<u8> = (0..p).flat_map(|q| of(q, 0, n)).collect();
                assert_eq!(to_host::<u8>(after, pu * n), want, "{name} after refusals");
                for d in [src, ag, agv, bc, a2a, a2av, sco, got, batch, out, after] {
                    acl_ok(aclrtFree(d), "aclrtFree");
                }
            }
        });
    }
}

/// The count matrices of the AllToAllVC tests: irregular with zeros, a
/// whole zero row (rank 1 % p sends nothing) and column (rank p - 1
/// receives nothing), and all zero.
fn vc_matrices(p: usize) -> Vec<Vec<u64>> {
    let irregular = |i: usize, j: usize| -> u64 {
        let b = ((i * 7 + j * 13 + i * j) % 6) as u64;
        if b == 0 {
            0
        } else {
            b * 37 + (i + 2 * j) as u64
        }
    };
    let (zr, zc) = (1 % p, p - 1);
    vec![
        (0..p * p).map(|x| irregular(x / p, x % p)).collect(),
        (0..p * p)
            .map(|x| {
                let (i, j) = (x / p, x % p);
                if i == zr || j == zc {
                    0
                } else {
                    irregular(i, j) + 1
                }
            })
            .collect(),
        vec![0; p * p],
    ]
}

#[test]
fn alltoallvc_through_the_c_api_at_2_3_4_8_ranks() {
    // element k of rank q's packed send buffer
    let val = |q: usize, k: usize| (q * 1_000_000 + k) as i32;
    for p in [2u32, 3, 4, 8] {
        let pu = p as usize;
        let mats = vc_matrices(pu);
        per_rank(p, |r, comm, stream| {
            let ru = r as usize;
            for (case, m) in mats.iter().enumerate() {
                let row = &m[ru * pu..(ru + 1) * pu];
                let st = row.iter().sum::<u64>() as usize;
                let rt = (0..pu).map(|i| m[i * pu + ru]).sum::<u64>() as usize;
                let send: Vec<i32> = (0..st).map(|k| val(ru, k)).collect();
                let sd = dev_from(&send);
                let rd = dev_from(&vec![-1i32; rt + 1]);
                ok(
                    HcclAlltoAllVC(sd, m.as_ptr().cast(), INT32, rd, INT32, comm, stream),
                    "HcclAlltoAllVC",
                );
                sync(stream);
                // rank i's block for me sits after its blocks for ranks below me
                let mut want: Vec<i32> = (0..pu)
                    .flat_map(|i| {
                        let at = m[i * pu..i * pu + ru].iter().sum::<u64>() as usize;
                        (at..at + m[i * pu + ru] as usize).map(move |k| val(i, k))
                    })
                    .collect();
                want.push(-1);
                assert_eq!(
                    to_host::<i32>(rd, rt + 1),
                    want,
                    "alltoallvc p={p} rank {r} case {case}"
                );
                acl_ok(aclrtFree(sd), "aclrtFree");
                acl_ok(aclrtFree(rd), "aclrtFree");
            }
        });
    }
}

#[test]
fn alltoallvc_bad_input_returns_the_documented_codes_and_enqueues_nothing() {
    let comms = init_all(2);
    let c0 = comms[0] as HcclComm;
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    let src = dev_from(&[1i32; 16]);
    let dst = dev_from(&[-3i32; 16]);
    let m: [u64; 4] = [2, 3, 4, 5]; // rank 0 sends 5, receives 6
    let vc = |s: *const c_void, mat: *const u64, st: u32, r: *const c_void, rt: u32| {
        HcclAlltoAllVC(s, mat.cast(), st, r, rt, c0, stream)
    };

    // null pointers
    assert_eq!(vc(src, null(), INT32, dst, INT32), E_PTR);
    assert!(last_error_message()
        .unwrap()
        .contains("sendCountMatrix is null"));
    assert_eq!(vc(null(), m.as_ptr(), INT32, dst, INT32), E_PTR);
    assert_eq!(vc(src, m.as_ptr(), INT32, null(), INT32), E_PTR);
    assert_eq!(
        HcclAlltoAllVC(
            src,
            m.as_ptr().cast(),
            INT32,
            dst,
            INT32,
            null_mut(),
            stream
        ),
        E_PTR
    );
    // null buffers are fine when nothing moves (an all-zero matrix: no rank takes part)
    let z: [u64; 4] = [0; 4];
    assert_eq!(vc(null(), z.as_ptr(), INT32, null(), INT32), SUCCESS);

    // bad types, and types that differ
    assert_eq!(vc(src, m.as_ptr(), 99, dst, INT32), E_PARA);
    assert_eq!(vc(src, m.as_ptr(), INT32, dst, 99), E_PARA);
    assert_eq!(vc(src, m.as_ptr(), 12, dst, 12), E_PARA, "INT128");
    assert_eq!(vc(src, m.as_ptr(), INT32, dst, FP32), E_PARA);
    assert!(
        last_error_message().unwrap().contains("must match"),
        "{:?}",
        last_error_message()
    );

    // counts whose sums overflow, or that exceed the aclrtMalloc buffers
    let row_overflow: [u64; 4] = [u64::MAX, 1, 0, 0];
    assert_eq!(vc(src, row_overflow.as_ptr(), INT32, dst, INT32), E_PARA);
    assert!(last_error_message().unwrap().contains("overflow"));
    let col_overflow: [u64; 4] = [1, 0, u64::MAX, 0];
    assert_eq!(vc(src, col_overflow.as_ptr(), INT32, dst, INT32), E_PARA);
    let bytes_overflow: [u64; 4] = [u64::MAX / 2, 0, 0, 0];
    assert_eq!(vc(src, bytes_overflow.as_ptr(), INT32, dst, INT32), E_PARA);
    let send_too_big: [u64; 4] = [9, 8, 0, 0];
    assert_eq!(vc(src, send_too_big.as_ptr(), INT32, dst, INT32), E_PARA);
    assert!(
        last_error_message()
            .unwrap()
            .contains("holds only 64 bytes"),
        "{:?}",
        last_error_message()
    );
    let recv_too_big: [u64; 4] = [1, 0, 16, 0];
    assert_eq!(vc(src, recv_too_big.as_ptr(), INT32, dst, INT32), E_PARA);
    // sendBuf == recvBuf
    assert_eq!(vc(src, m.as_ptr(), INT32, src, INT32), E_PARA);
    // unknown communicator and stream
    assert_eq!(
        HcclAlltoAllVC(
            src,
            m.as_ptr().cast(),
            INT32,
            dst,
            INT32,
            0x1234 as HcclComm,
            stream
        ),
        E_PARA
    );
    assert_eq!(
        HcclAlltoAllVC(
            src,
            m.as_ptr().cast(),
            INT32,
            dst,
            INT32,
            c0,
            0x99 as aclrtStream
        ),
        E_PARA
    );

    // nothing was enqueued or written by any of the failed calls
    let mut status = 7;
    let mut ev = null_mut();
    acl_ok(aclrtCreateEvent(&mut ev), "aclrtCreateEvent");
    acl_ok(aclrtRecordEvent(ev, stream), "aclrtRecordEvent");
    acl_ok(aclrtSynchronizeStream(stream), "sync");
    acl_ok(aclrtQueryEventStatus(ev, &mut status), "query");
    assert_eq!(status, 1);
    assert_eq!(to_host::<i32>(dst, 16), vec![-3; 16], "dst untouched");
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "destroy");
    }
}
