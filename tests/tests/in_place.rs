//! In-place AllGather(V) and ReduceScatter(V) through the adapter (issue
//! 31): ranks as threads and as processes, p = 2, 3, 4, op-base and graph
//! mode (registered buffers), every element checked
//! (`hccl_tests::in_place`); and the overlaps that are not an in-place form
//! refused with a clear error and nothing enqueued. The simulator checks
//! the same forms through every built-in executor at p = 1..9
//! (`in_place_through_every_executor` in hccl-algorithm).

use hccl_adapter::{CommConfig, DataType, DeviceMem, HcclComm, HcclResult, ReduceOp};
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::Duration;

fn config() -> CommConfig {
    CommConfig::from_source(&[("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "20")][..]).unwrap()
}

fn threads(p: u32) {
    let comms = Arc::new(HcclComm::init_all_with(p, config()).unwrap());
    run_ranks(p, Duration::from_secs(120), move |r| {
        for register in [false, true] {
            hccl_tests::in_place::run(&comms[r as usize], register)
                .unwrap_or_else(|e| panic!("rank {r}: {e}"));
        }
    });
}

#[test]
fn threads_p2() {
    threads(2);
}
#[test]
fn threads_p3() {
    threads(3);
}
#[test]
fn threads_p4() {
    threads(4);
}

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

#[test]
fn processes_p2_p3_p4() {
    let env = [
        ("HCCL_EXEC_TIMEOUT", "20"),
        ("HCCL_CONNECT_TIMEOUT", "20"),
        ("HCCL_BUFFSIZE", "1"),
    ];
    let limit = Duration::from_secs(90);
    hccl_tests::assert_worker_ranks_ok(WORKER, &[2, 3, 4], "in_place", &env, limit);
}

#[test]
fn overlaps_that_are_not_in_place_are_refused() {
    let comms = HcclComm::init_all_with(3, config()).unwrap();
    let c = &comms[1]; // rank 1: its block starts 16 bytes in
    let s = c.create_stream();
    let t = DataType::Int32;
    let buf = DeviceMem::alloc(48).unwrap();
    let check = |e: hccl_adapter::HcclError, what: &str| {
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        assert!(e.to_string().contains(what), "{e}");
        assert!(s.query(), "nothing enqueued");
    };
    // AllGather with the input at rank 0's block, or straddling blocks
    for off in [0usize, 8, 32] {
        let send = buf.range(off, 16).unwrap();
        let e = c.all_gather_raw(&send, &buf, 4, t, &s).unwrap_err();
        check(
            e,
            "sendBuf and recvBuf overlap but not in place: sendBuf must be exactly this rank's \
             block of recvBuf (bytes [16, 32) of it, rank 1)",
        );
    }
    // the input as the whole output
    let e = c.all_gather_raw(&buf, &buf, 4, t, &s).unwrap_err();
    check(e, "overlap but not in place");
    // ReduceScatter with the output anywhere but rank 1's block
    for off in [0usize, 4, 32] {
        let recv = buf.range(off, 16).unwrap();
        let e = c
            .reduce_scatter_raw(&buf, &recv, 4, t, ReduceOp::Sum, &s)
            .unwrap_err();
        check(
            e,
            "recvBuf must be exactly this rank's block of sendBuf (bytes [16, 32) of it, rank 1)",
        );
    }
    // AllGatherV: the block is at recvDispls[rank]
    let send = buf.range(0, 8).unwrap();
    let e = c
        .all_gather_v_raw(&send, 2, &buf, &[2, 2, 2], &[0, 4, 8], t, &s)
        .unwrap_err();
    check(e, "bytes [16, 24) of it, rank 1");
    // AllReduce in place must be the same memory, not a part of it
    let half = buf.range(0, 24).unwrap();
    let e = c
        .all_reduce_raw(&buf.range(8, 24).unwrap(), &half, 6, t, ReduceOp::Sum, &s)
        .unwrap_err();
    check(e, "partly overlap (in place, they must be the same memory)");
    // AllToAll has no in-place form
    let e = c.all_to_all_raw(&buf, 4, t, &buf, 4, t, &s).unwrap_err();
    check(
        e,
        "sendBuf and recvBuf overlap, which this op does not allow",
    );
    // the typed in-place forms need equal blocks
    let mut odd = hccl_adapter::DeviceBuffer::<i32>::alloc(10).unwrap();
    let e = c.all_gather_in_place(&mut odd, &s).unwrap_err();
    check(
        e,
        "an in-place buffer of 10 elements does not divide into 3 equal blocks",
    );
    let e = c
        .reduce_scatter_in_place(&mut odd, ReduceOp::Sum, &s)
        .unwrap_err();
    check(e, "does not divide into 3 equal blocks");
}
