//! Capture and replay through the adapter, ranks as threads (issue 17):
//! every primitive captured on a stream and its graph launched 100 times,
//! the inputs rewritten by the host before every launch and the outputs
//! checked after it; all primitives in one graph; executors that issue on
//! slave streams (pipeline, multi-ring), whose streams join the capture.

use hccl_adapter::{
    CaptureMode, CaptureStatus, CommConfig, DataType, DeviceMem, HcclComm, HcclResult, ReduceOp,
};
use hccl_tests::capture::{capture_and_replay, cases};
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::Duration;

fn config(extra: &[(&str, &str)]) -> CommConfig {
    let mut env = vec![("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "30")];
    env.extend_from_slice(extra);
    CommConfig::from_source(&env[..]).unwrap()
}

fn on_threads(comms: Vec<HcclComm>, f: impl Fn(&HcclComm) + Send + Sync + 'static) {
    let p = comms.len() as u32;
    let comms = Arc::new(comms);
    run_ranks(p, Duration::from_secs(240), move |r| f(&comms[r as usize]));
}

/// Counts: an AIV kernel (one task per op), a mesh-sized op, and one
/// larger than the 1 MiB CCL buffer for the gathers (op-base rounds).
const COUNTS: [usize; 3] = [7, 1003, 70_000];

#[test]
fn every_primitive_replays_100_times_with_fresh_inputs() {
    for p in [2u32, 3, 4] {
        on_threads(HcclComm::init_all_with(p, config(&[])).unwrap(), |comm| {
            for c in COUNTS {
                let v = cases(comm, c).unwrap();
                capture_and_replay(comm, &v, false, 100)
                    .unwrap_or_else(|e| panic!("p={} c={c}: {e}", comm.size()));
            }
        });
    }
}

#[test]
fn all_primitives_in_one_graph() {
    on_threads(HcclComm::init_all_with(4, config(&[])).unwrap(), |comm| {
        for c in [7, 1003, 70_000] {
            let v = cases(comm, c).unwrap();
            capture_and_replay(comm, &v, true, 30).unwrap_or_else(|e| panic!("c={c}: {e}"));
        }
    });
}

/// AllReduce forced onto each flat executor: each plan replays alike.
#[test]
fn forced_allreduce_executors_replay() {
    for exe in [
        "AllReduceRingExecutor",
        "AllReduceRHDExecutor",
        "AllReduceNHRExecutor",
        "AllReduceNBExecutor",
        "AllReduceMeshExecutor",
        "AllReduceDirectExecutor",
        "AllReduceMeshAivExecutor",
    ] {
        let comms = HcclComm::init_all_with(3, config(&[("HCCL_RS_EXECUTOR", exe)])).unwrap();
        on_threads(comms, move |comm| {
            let c = if exe.contains("Aiv") { 1003 } else { 70_000 };
            let v: Vec<_> = cases(comm, c)
                .unwrap()
                .into_iter()
                .filter(|k| k.name == "AllReduce")
                .collect();
            capture_and_replay(comm, &v, false, 100).unwrap_or_else(|e| panic!("{exe}: {e}"));
            assert_eq!(
                comm.communicator().last_executor().as_deref(),
                Some(exe),
                "the forced executor ran"
            );
        });
    }
}

/// Executors that issue on slave streams (the pipeline's level-0 stream,
/// the multi-ring channel groups): their streams join the capture as
/// lanes of the graph, ordered with the op's stream by notifies.
#[test]
fn slave_streams_join_the_capture() {
    for algo in ["level1:pipeline", "level1:multiring"] {
        let comms =
            HcclComm::init_all_on_hosts(vec![0, 0, 1, 1], config(&[("HCCL_ALGO", algo)])).unwrap();
        on_threads(comms, move |comm| {
            let v: Vec<_> = cases(comm, 70_000)
                .unwrap()
                .into_iter()
                .filter(|k| matches!(k.name, "AllReduce" | "AllGather" | "ReduceScatter"))
                .collect();
            capture_and_replay(comm, &v, false, 100).unwrap_or_else(|e| panic!("{algo}: {e}"));
            // the AllReduce's graph has a lane per slave stream
            let s = comm.create_stream();
            let send = DeviceMem::alloc_shareable(70_000 * 4).unwrap();
            let recv = DeviceMem::alloc_shareable(70_000 * 4).unwrap();
            s.begin_capture(CaptureMode::Global).unwrap();
            comm.all_reduce_raw(&send, &recv, 70_000, DataType::Int32, ReduceOp::Sum, &s)
                .unwrap();
            let g = s.end_capture().unwrap();
            let ran = comm.communicator().last_executor().unwrap_or_default();
            assert!(
                g.lane_count() > 1,
                "{algo}: {ran} captured into {} lane(s)",
                g.lane_count()
            );
            assert_eq!(g.op_count(), 1);
            g.launch(&s).unwrap();
            s.synchronize().unwrap();
        });
    }
}

/// Bad arguments on a capturing stream are refused before anything is
/// recorded (the capture goes on); a stream of another rank's device is
/// refused too; synchronizing the capturing stream invalidates it.
#[test]
fn refused_calls_while_capturing() {
    on_threads(HcclComm::init_all_with(2, config(&[])).unwrap(), |comm| {
        let s = comm.create_stream();
        let (a, b) = (
            DeviceMem::alloc_shareable(64).unwrap(),
            DeviceMem::alloc_shareable(64).unwrap(),
        );
        s.begin_capture(CaptureMode::ThreadLocal).unwrap();
        let e = comm
            .all_reduce_raw(&a, &b, 1000, DataType::Int32, ReduceOp::Sum, &s)
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        assert_eq!(s.capture_status(), CaptureStatus::Active);
        comm.all_reduce_raw(&a, &b, 16, DataType::Int32, ReduceOp::Sum, &s)
            .unwrap();
        let e = s.synchronize().unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotSupport, "{e}");
        assert_eq!(s.capture_status(), CaptureStatus::Invalidated);
        let e = s.end_capture().unwrap_err();
        assert!(e.to_string().contains("invalidated"), "{e}");
        // the rank's peer recorded its op too and never ran it: both
        // communicators are still usable
        s.begin_capture(CaptureMode::Global).unwrap();
        comm.all_reduce_raw(&a, &b, 16, DataType::Int32, ReduceOp::Sum, &s)
            .unwrap();
        let g = s.end_capture().unwrap();
        a.copy_from_host(&[comm.rank() as i32 + 1; 16]).unwrap();
        g.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(b.to_vec::<i32>(16).unwrap(), vec![3; 16]);
    });
}
