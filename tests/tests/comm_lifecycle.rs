//! Sub-communicators, abort, async errors and destroy.

use hccl_adapter::{CommConfig, DataType, DeviceMem, HcclComm, HcclResult, ReduceOp};
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(exec_timeout: &str) -> CommConfig {
    CommConfig::from_source(
        &[
            ("HCCL_BUFFSIZE", "1"),
            ("HCCL_EXEC_TIMEOUT", exec_timeout),
            ("HCCL_IF_IP", "127.0.0.1"),
        ][..],
    )
    .unwrap()
}

#[test]
fn sub_communicators_split_the_world() {
    let comms = Arc::new(HcclComm::init_all_with(4, config("20")).unwrap());
    run_ranks(4, Duration::from_secs(60), move |r| {
        let c = &comms[r as usize];
        // odd ranks in reverse order, even ranks in order
        let ids: Vec<u32> = if r % 2 == 1 { vec![3, 1] } else { vec![0, 2] };
        let sub_rank = ids.iter().position(|&x| x == r).unwrap() as u32;
        let sub = c
            .create_sub_comm(&ids, 7 + (r % 2) as u64, sub_rank)
            .unwrap();
        assert_eq!((sub.rank(), sub.size()), (sub_rank, 2));
        let s = sub.create_stream();
        let n = 1000;
        let send = DeviceMem::alloc(n * 4).unwrap();
        send.copy_from_host(&vec![r as i32 + 1; n]).unwrap();
        let recv = DeviceMem::alloc(n * 4).unwrap();
        sub.all_reduce_raw(&send, &recv, n as u64, DataType::Int32, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize().unwrap();
        let want: i32 = ids.iter().map(|&x| x as i32 + 1).sum();
        assert_eq!(recv.to_vec::<i32>(n).unwrap(), vec![want; n]);
        // the parent still works after the split
        let ps = c.create_stream();
        c.all_reduce_raw(&send, &recv, n as u64, DataType::Int32, ReduceOp::Sum, &ps)
            .unwrap();
        ps.synchronize().unwrap();
        assert_eq!(recv.to_vec::<i32>(n).unwrap(), vec![10; n]);
        sub.destroy();
    });
}

#[test]
fn bad_sub_comm_arguments() {
    let comms = HcclComm::init_all_with(2, config("20")).unwrap();
    for (ids, sub_rank, needle) in [
        (vec![], 0, "the rank list is empty"),
        (vec![0, 5], 0, "rank 5 is out of range"),
        (vec![0, 0], 0, "rank 0 is listed twice"),
        (vec![1, 0], 0, "this rank (0) is not at position 0"),
    ] {
        let e = comms[0].create_sub_comm(&ids, 1, sub_rank).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn abort_ends_a_pending_wait_and_refuses_later_ops() {
    let comms = Arc::new(HcclComm::init_all_with(2, config("60")).unwrap());
    let c = &comms[0];
    let s = c.create_stream();
    let send = DeviceMem::alloc(1 << 20).unwrap();
    let recv = DeviceMem::alloc(1 << 20).unwrap();
    // rank 1 never joins the op; abort from another thread after 300 ms
    c.all_reduce_raw(&send, &recv, 1 << 18, DataType::Fp32, ReduceOp::Sum, &s)
        .unwrap();
    let c2 = comms.clone();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        c2[0].abort("test says stop");
    });
    let start = Instant::now();
    let e = s.synchronize().unwrap_err();
    aborter.join().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "abort must end the wait, not the 60 s timeout"
    );
    assert!(
        e.to_string()
            .contains("communicator aborted on rank 0: test says stop"),
        "{e}"
    );
    let e = c
        .all_reduce_raw(&send, &recv, 8, DataType::Fp32, ReduceOp::Sum, &s)
        .unwrap_err();
    assert_eq!(e.code(), HcclResult::ESuspending);
    assert!(s.query(), "a refused op enqueues nothing");
    let async_err = c
        .async_error()
        .expect("the abort is reported asynchronously");
    assert!(async_err.to_string().contains("aborted"), "{async_err}");
    assert!(comms[1].async_error().is_none(), "rank 1 never used a link");
}

/// Issue 20: aborting a communicator dumps its flight recorder into
/// `HCCL_RS_FR_DUMP_DIR`, naming the reason and the ops it ran; with the
/// recorder off, a dump on request is a typed error.
#[test]
fn abort_dumps_the_flight_recorder() {
    let dir = std::env::temp_dir().join(format!("hccl-fr-abort-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap().to_owned();
    let comms = hccl_tests::comms_with_env(2, &[("HCCL_RS_FR_DUMP_DIR", d.as_str())]);
    let c2 = Arc::clone(&comms);
    run_ranks(2, Duration::from_secs(30), move |r| {
        let c = &c2[r as usize];
        let s = c.create_stream();
        let (a, b) = (DeviceMem::alloc(64).unwrap(), DeviceMem::alloc(64).unwrap());
        for _ in 0..3 {
            c.all_reduce_raw(&a, &b, 16, DataType::Fp32, ReduceOp::Sum, &s)
                .unwrap();
        }
        s.synchronize().unwrap();
    });
    comms[1].abort("test abort");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("_rank1.json"))
        .expect("rank 1's dump");
    let dump: hccl_adapter::FrDump =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        dump.reason.contains("communicator aborted: test abort"),
        "{}",
        dump.reason
    );
    let ours: Vec<_> = dump
        .entries
        .iter()
        .filter(|e| e.op == "AllReduce" && e.count == 16)
        .collect();
    assert_eq!(ours.len(), 3, "{:?}", dump.entries);
    assert!(ours.iter().all(|e| e.state == "completed"), "{ours:?}");
    let _ = std::fs::remove_dir_all(&dir);

    let off = hccl_tests::comms_with_env(1, &[("HCCL_RS_FR_BUFFER_SIZE", "0")]);
    let e = off[0]
        .dump_flight_recorder(&std::env::temp_dir().join("never.json"), "asked")
        .unwrap_err();
    assert_eq!(e.code(), HcclResult::ENotSupport);
    assert!(e.to_string().contains("HCCL_RS_FR_BUFFER_SIZE=0"), "{e}");
}
