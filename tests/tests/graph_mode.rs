//! Graph mode with ranks as threads: every primitive captured once on a
//! stream and replayed 100 times, the inputs rewritten between launches,
//! checked after each; captured ops run on the user buffers (the AIV and
//! direct executors) and capture refuses memory peers cannot map.

use hccl_adapter::{CaptureMode, DataType, DeviceMem, HcclResult, ReduceOp};
use hccl_tests::graph_cases::{GraphCase, GRAPH_OPS};
use hccl_tests::{comms_with_env, run_ranks};
use std::time::Duration;

const LAUNCHES: u32 = 100;

fn replay_every_primitive(p: u32, c: usize) {
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(150), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        for &op in GRAPH_OPS {
            let case = GraphCase::new(op, comm, c).unwrap();
            s.begin_capture(CaptureMode::Global).unwrap();
            case.issue(comm, &s).unwrap();
            let graph = s.end_capture().unwrap();
            if op != "send_recv" || r < p - p % 2 {
                assert!(graph.task_count() > 0, "{op}: nothing captured");
            }
            let executor = comm.communicator().last_executor().unwrap_or_default();
            // every primitive but AllToAllV runs in graph mode
            if op != "all_to_all_v" && !(op == "send_recv" && r >= p - p % 2) {
                assert!(
                    executor.contains("Aiv") || executor.contains("Direct"),
                    "{op} p={p} c={c}: captured with {executor}"
                );
            }
            for k in 0..LAUNCHES {
                case.write_inputs(k).unwrap();
                graph.launch(&s).unwrap();
                s.synchronize().unwrap();
                case.check(k).unwrap_or_else(|e| panic!("{e}"));
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
    // 70,000 fp32 per block: past the AIV kernels, the direct executors
    for p in [2, 3, 4] {
        replay_every_primitive(p, 70_000);
    }
}

/// Capturing an op on private memory is refused, naming the buffer, and
/// invalidates nothing already recorded.
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
