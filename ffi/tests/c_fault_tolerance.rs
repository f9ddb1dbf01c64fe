//! Fault tolerance through the C API (issue 32): per-communicator
//! execution timeouts in milliseconds (`HcclRsCommSetExecTimeout` /
//! `HcclRsCommGetExecTimeout`: a Send nobody receives fails after the
//! communicator's own bound, not the process's `HCCL_EXEC_TIMEOUT`; two
//! communicators of one process keep their own bounds; the error names
//! the peer awaited), `HcclRsCommRevoke` (a waiting peer's op ends,
//! later ops are refused, `HcclGetCommAsyncError` reports it) and
//! `HcclRsCommShrink` and `HcclRsCommGrow` for threads as ranks (a rank
//! shrinks alone and grows back, the new rank joining through
//! `HcclCommInitRootInfo` with the grow id; process ranks shrink and grow
//! in `tests/tests/dead_peers.rs`); bad arguments refused.

mod common;
use common::*;
use hccl::acl::*;
use hccl::hccl::*;
use hccl::last_error_message;
use hccl::types::*;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

const E_PARA: u32 = 1;
const E_PTR: u32 = 2;
const E_SUSPENDING: u32 = 22;
// HCCL_DATA_TYPE_FP32
const FP32: u32 = 4;

fn get_ms(c: HcclComm) -> u64 {
    let mut ms = u64::MAX;
    ok(
        HcclRsCommGetExecTimeout(c, &mut ms),
        "HcclRsCommGetExecTimeout",
    );
    ms
}

/// Rank 0 of `comm` sends 8 floats to rank 1, which never receives:
/// returns how long the stream took to fail and the error message.
fn unanswered_send(comm: HcclComm) -> (Duration, String) {
    let x = dev_from(&[1.0f32; 8]);
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    let t = Instant::now();
    ok(HcclSend(x, 8, FP32, 1, comm, stream), "Send");
    let rc = aclrtSynchronizeStream(stream);
    let took = t.elapsed();
    assert_ne!(rc, ACL_SUCCESS, "a send nobody receives must time out");
    let msg = last_error_message().unwrap_or_default();
    acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
    acl_ok(aclrtFree(x), "aclrtFree");
    (took, msg)
}

#[test]
fn a_communicator_times_out_after_its_own_milliseconds() {
    let a = init_all(2);
    let b = init_all(2);
    let (a0, b0) = (a[0] as HcclComm, b[0] as HcclComm);
    ok(HcclRsCommSetExecTimeout(a0, 300), "set 300 ms");
    ok(HcclRsCommSetExecTimeout(b0, 1500), "set 1500 ms");
    assert_eq!(get_ms(a0), 300);
    assert_eq!(get_ms(b0), 1500);
    // the other ranks keep the process default
    assert_ne!(get_ms(a[1] as HcclComm), 300);

    let (took, msg) = unanswered_send(a0);
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(3000),
        "300 ms bound, failed after {took:?}: {msg}"
    );
    assert!(msg.contains("HCCL_EXEC_TIMEOUT"), "{msg}");
    assert!(msg.contains("peer rank 1"), "{msg}");

    let (took, msg) = unanswered_send(b0);
    assert!(
        took >= Duration::from_millis(1490) && took < Duration::from_secs(6),
        "1500 ms bound, failed after {took:?}: {msg}"
    );

    // 0 = wait forever
    ok(HcclRsCommSetExecTimeout(a0, 0), "set forever");
    assert_eq!(get_ms(a0), 0);
    for c in a.into_iter().chain(b) {
        let _ = HcclCommDestroy(c as HcclComm);
    }
}

#[test]
fn timeout_calls_refuse_null_arguments() {
    assert_eq!(HcclRsCommSetExecTimeout(null_mut(), 10), E_PTR);
    let comms = init_all(1);
    let c = comms[0] as HcclComm;
    assert_eq!(HcclRsCommGetExecTimeout(c, null_mut()), E_PTR);
    let msg = last_error_message().unwrap();
    assert!(msg.contains("timeoutMs"), "{msg}");
    let mut ms = 0;
    assert_eq!(HcclRsCommGetExecTimeout(null_mut(), &mut ms), E_PTR);
    ok(HcclCommDestroy(c), "HcclCommDestroy");
}

#[test]
fn a_revoke_ends_a_waiting_peer_and_refuses_later_ops() {
    let comms = init_all(2);
    let (c0, c1) = (comms[0] as HcclComm, comms[1] as HcclComm);
    let c1_addr = comms[1];
    std::thread::scope(|sc| {
        // rank 1 waits for a send rank 0 never makes
        let waiter = sc.spawn(move || {
            let c1 = c1_addr as HcclComm;
            let y = dev_from(&[0.0f32; 8]);
            acl_ok(aclrtSetDevice(1), "aclrtSetDevice");
            let mut stream = null_mut();
            acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
            ok(HcclRecv(y, 8, FP32, 0, c1, stream), "Recv");
            let t = Instant::now();
            let rc = aclrtSynchronizeStream(stream);
            let msg = last_error_message().unwrap_or_default();
            acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
            (rc, msg, t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(200));
        ok(
            HcclRsCommRevoke(c0, c"rank 0 gave up".as_ptr()),
            "HcclRsCommRevoke",
        );
        let (rc, msg, took) = waiter.join().unwrap();
        assert_ne!(rc, ACL_SUCCESS, "the receive must end");
        assert!(msg.contains("revoked by rank 0: rank 0 gave up"), "{msg}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    });
    // later ops are refused on every rank, and the async error says why
    let x = dev_from(&[1.0f32; 8]);
    acl_ok(aclrtSetDevice(0), "aclrtSetDevice");
    let mut stream = null_mut();
    acl_ok(aclrtCreateStream(&mut stream), "aclrtCreateStream");
    assert_eq!(HcclSend(x, 8, FP32, 0, c1, stream), E_SUSPENDING);
    assert!(last_error_message().unwrap().contains("revoked by rank 0"));
    let mut async_err = 0;
    ok(
        HcclGetCommAsyncError(c0, &mut async_err),
        "HcclGetCommAsyncError",
    );
    assert_eq!(async_err, E_SUSPENDING);
    // a NULL reason is allowed; revoking again changes nothing
    ok(HcclRsCommRevoke(c1, std::ptr::null()), "revoke again");
    assert_eq!(HcclRsCommRevoke(null_mut(), std::ptr::null()), E_PTR);
    acl_ok(aclrtDestroyStream(stream), "aclrtDestroyStream");
    acl_ok(aclrtFree(x), "aclrtFree");
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
}

#[test]
fn shrink_refuses_bad_arguments_and_threads_as_ranks_shrink_and_grow() {
    let comms = init_all(2);
    let c = comms[0] as HcclComm;
    let mut out = null_mut();
    let exclude = [1u32];
    assert_eq!(
        HcclRsCommShrink(c, exclude.as_ptr(), 1, std::ptr::null_mut()),
        E_PTR
    );
    assert_eq!(HcclRsCommShrink(c, std::ptr::null(), 1, &mut out), E_PTR);
    assert_eq!(HcclRsCommShrink(c, exclude.as_ptr(), 3, &mut out), E_PARA);
    assert!(out.is_null());
    // threads as ranks shrink: rank 0 alone, without rank 1
    ok(
        HcclRsCommShrink(c, exclude.as_ptr(), 1, &mut out),
        "HcclRsCommShrink",
    );
    assert!(!out.is_null());
    let shrunk = out as HcclComm;
    let (mut size, mut rank) = (0u32, 9u32);
    ok(HcclGetRankSize(shrunk, &mut size), "HcclGetRankSize");
    ok(HcclGetRankId(shrunk, &mut rank), "HcclGetRankId");
    assert_eq!((rank, size), (0, 1));
    // and grow back to 2: the new rank joins through HcclCommInitRootInfo
    let mut id = HcclRootInfo {
        internal: [0; HCCL_ROOT_INFO_BYTES],
    };
    assert_eq!(HcclRsCommGrowId(shrunk, std::ptr::null_mut()), E_PTR);
    ok(HcclRsCommGrowId(shrunk, &mut id), "HcclRsCommGrowId");
    assert_eq!(
        HcclRsCommGrow(shrunk, 3, std::ptr::null(), std::ptr::null_mut()),
        E_PTR
    );
    let id_copy = HcclRootInfo {
        internal: id.internal,
    };
    let newcomer = std::thread::spawn(move || {
        let mut joined = null_mut();
        ok(
            HcclCommInitRootInfo(2, &id_copy, 1, &mut joined),
            "HcclCommInitRootInfo with a grow id",
        );
        joined as usize
    });
    let mut grown = null_mut();
    ok(HcclRsCommGrow(shrunk, 2, &id, &mut grown), "HcclRsCommGrow");
    let joined = newcomer.join().unwrap() as HcclComm;
    for (g, want) in [(grown as HcclComm, 0u32), (joined, 1)] {
        ok(HcclGetRankSize(g, &mut size), "HcclGetRankSize");
        ok(HcclGetRankId(g, &mut rank), "HcclGetRankId");
        assert_eq!((rank, size), (want, 2));
        ok(HcclCommDestroy(g), "HcclCommDestroy");
    }
    // an id is single-use
    assert_eq!(HcclRsCommGrow(shrunk, 2, &id, &mut grown), E_PARA);
    let msg = last_error_message().unwrap();
    assert!(msg.contains("single-use"), "{msg}");
    ok(HcclCommDestroy(shrunk), "HcclCommDestroy");
    for c in comms {
        ok(HcclCommDestroy(c as HcclComm), "HcclCommDestroy");
    }
}

/// `HcclRsCommRecover` (issue 32's op-level recovery), threads as ranks:
/// rank 1 passes another count, so the AllReduce fails on every rank;
/// each rank recovers the same handle and the next AllReduce, on the
/// same ACL stream (which follows the communicator to its new device),
/// is correct.
#[test]
fn a_communicator_recovers_after_a_mismatch() {
    per_rank(3, |r, c, stream| {
        let n = if r == 1 { 9 } else { 8 };
        let x = dev_from(&[1.0f32; 9]);
        let y = dev_from(&[0.0f32; 9]);
        ok(HcclAllReduce(x, y, n, FP32, 0, c, stream), "HcclAllReduce");
        assert_ne!(
            aclrtSynchronizeStream(stream),
            ACL_SUCCESS,
            "rank {r}: the mismatch must fail"
        );
        let msg = last_error_message().unwrap_or_default();
        assert!(
            msg.contains("inconsistent between ranks"),
            "rank {r}: {msg}"
        );
        ok(HcclRsCommRecover(c), "HcclRsCommRecover");
        let x = dev_from(&[(r + 1) as f32; 8]);
        ok(
            HcclAllReduce(x, y, 8, FP32, 0, c, stream),
            "HcclAllReduce after recovering",
        );
        acl_ok(aclrtSynchronizeStream(stream), "sync after recovering");
        assert_eq!(to_host::<f32>(y, 8), vec![6.0; 8], "rank {r}");
    });
}
