//! Graph mode with ranks as threads: every primitive (the cases of
//! `hccl_tests::capture`) captured on its own and replayed 100 times, the
//! inputs rewritten between launches and checked after each; captured ops
//! run on the user buffers (the AIV and direct executors, AllToAllV
//! excepted), and capture refuses memory peers cannot map.

use hccl_adapter::{CaptureMode, DataType, DeviceMem, HcclResult, ReduceOp};
use hccl_tests::capture::{capture_and_replay, cases};
use hccl_tests::{comms_with_env, run_ranks};
use std::time::Duration;

fn replay_every_primitive(p: u32, c: usize) {
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(150), move |r| {
        let comm = &comms[r as usize];
        for case in cases(comm, c).unwrap() {
            capture_and_replay(comm, std::slice::from_ref(&case), false, 100)
                .unwrap_or_else(|e| panic!("p={p} c={c}: {e}"));
            // every primitive but AllToAllV runs in graph mode
            let executor = comm.communicator().last_executor().unwrap_or_default();
            if case.name != "AllToAllV" {
                assert!(
                    executor.contains("Aiv") || executor.contains("Direct"),
                    "{} p={p} c={c} rank {r}: captured with {executor}",
                    case.name
                );
            }
        }
    });
}

#[test]
fn every_primitive_replayed_small_p2_p3() {
    for p in [2, 3] {
        replay_every_primitive(p, 300);
    }
}

#[test]
fn every_primitive_replayed_small_p4_p8() {
    for p in [4, 8] {
        replay_every_primitive(p, 300);
    }
}

#[test]
fn every_primitive_replayed_large() {
    // 70,000 elements per block: past the AIV kernels, the direct executors
    for p in [2, 3, 4] {
        replay_every_primitive(p, 70_000);
    }
}

/// Capturing an op on private memory is refused, naming the buffer.
#[test]
fn capture_refuses_memory_peers_cannot_map() {
    let p = 2;
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(30), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let private = DeviceMem::alloc(64).unwrap();
        let out = DeviceMem::alloc_shareable(64).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        let e = comm
            .all_reduce_raw(&private, &out, 16, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        assert!(e.to_string().contains("sendBuf cannot be captured"), "{e}");
        assert!(e.to_string().contains("private host memory"), "{e}");
        let _ = s.end_capture();
    });
}

/// The template executors (ring, RHD, NHR, NB; forced with `HCCL_ALGO`
/// or by name)
/// run captured AllReduce, AllGather and Broadcast on the user buffers:
/// replayed 30 times with the data checked, the executor named, and the
/// results written straight into the peers' user outputs. Large blocks
/// take several rounds through the CCL output (the AllReduce landing).
#[test]
fn template_executors_replayed_in_graph_mode() {
    let algos = [
        (
            "HCCL_ALGO",
            "level0:ring",
            "Ring",
            &["AllReduce", "AllGather", "Broadcast"][..],
        ),
        // RHD is a level-1 algorithm in HCCL_ALGO: forced by name here
        (
            "HCCL_RS_EXECUTOR",
            "AllReduceRHDExecutor",
            "RHD",
            &["AllReduce"][..],
        ),
        (
            "HCCL_ALGO",
            "level0:NHR",
            "NHR",
            &["AllReduce", "AllGather", "Broadcast"][..],
        ),
        (
            "HCCL_ALGO",
            "level0:NB",
            "NB",
            &["AllReduce", "AllGather", "Broadcast"][..],
        ),
    ];
    for (var, algo, family, ops) in algos {
        for (p, c) in [(2, 300), (3, 70_000), (4, 300_000)] {
            let comms = comms_with_env(p, &[(var, algo), ("HCCL_BUFFSIZE", "1")]);
            run_ranks(p, Duration::from_secs(120), move |r| {
                let comm = &comms[r as usize];
                for case in cases(comm, c).unwrap() {
                    if !ops.contains(&case.name) {
                        continue;
                    }
                    let before = hccl_adapter::peer_access_stats().mapped_write_bytes;
                    capture_and_replay(comm, std::slice::from_ref(&case), false, 30)
                        .unwrap_or_else(|e| panic!("{algo} {} p={p} c={c}: {e}", case.name));
                    let executor = comm.communicator().last_executor().unwrap_or_default();
                    assert!(
                        executor.contains(family) && executor.contains(case.name),
                        "{algo} {} p={p} rank {r}: captured with {executor}",
                        case.name
                    );
                    let wrote = hccl_adapter::peer_access_stats().mapped_write_bytes - before;
                    assert!(
                        wrote > 0,
                        "{executor} p={p}: nothing written into peers' buffers"
                    );
                }
            });
        }
    }
}
