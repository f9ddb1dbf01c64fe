//! Bad input gets a typed error with a clear message, and nothing is enqueued.

use hccl_adapter::{
    CommConfig, DataType, DeviceBuffer, DeviceMem, HcclComm, HcclError, HcclResult, InProcGroup,
    ReduceOp, Stream,
};

fn comms(n: u32) -> Vec<HcclComm> {
    let cfg = CommConfig::from_source(&[("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "20")][..])
        .unwrap();
    HcclComm::init_all_with(n, cfg).unwrap()
}

fn assert_err(r: hccl_adapter::Result<()>, code: HcclResult, needle: &str) -> HcclError {
    let e = r.expect_err("call must fail");
    assert_eq!(e.code(), code, "wrong code for: {e}");
    assert!(
        e.to_string().contains(needle),
        "'{needle}' missing from: {e}"
    );
    e
}

fn assert_nothing_enqueued(stream: &Stream, bufs: &[&DeviceMem]) {
    assert!(stream.query(), "a rejected call must not enqueue anything");
    stream.synchronize().unwrap();
    for b in bufs {
        // host access would fail if a task still held the buffer
        b.fill_bytes(0).unwrap();
    }
}

#[test]
fn null_and_short_buffers() {
    let cs = comms(2);
    let c = &cs[0];
    let s = c.create_stream();
    let good = DeviceMem::alloc(64).unwrap();
    let short = DeviceMem::alloc(60).unwrap();
    let null = DeviceMem::null();
    let e = assert_err(
        c.all_reduce_raw(&null, &good, 16, DataType::Fp32, ReduceOp::Sum, &s),
        HcclResult::EPtr,
        "sendBuf is null",
    );
    assert_eq!(e.context().rank, Some(0));
    assert!(e.to_string().contains("HcclAllReduce"), "{e}");
    assert_err(
        c.all_reduce_raw(&good, &null, 16, DataType::Fp32, ReduceOp::Sum, &s),
        HcclResult::EPtr,
        "recvBuf is null",
    );
    assert_err(
        c.all_reduce_raw(&good, &short, 16, DataType::Fp32, ReduceOp::Sum, &s),
        HcclResult::EPara,
        "recvBuf holds 60 bytes but the op needs 64",
    );
    assert_err(
        c.all_reduce_raw(&short, &good, 16, DataType::Fp32, ReduceOp::Sum, &s),
        HcclResult::EPara,
        "sendBuf holds 60 bytes",
    );
    // typed form: recv shorter than send
    let send = DeviceBuffer::<i32>::alloc(8).unwrap();
    let mut recv = DeviceBuffer::<i32>::alloc(4).unwrap();
    assert_err(
        c.all_reduce(&send, &mut recv, ReduceOp::Max, &s),
        HcclResult::EPara,
        "recvBuf holds 16 bytes",
    );
    // partial overlap
    assert_err(
        c.all_reduce_raw(
            &good.range(0, 32).unwrap(),
            &good.range(16, 32).unwrap(),
            8,
            DataType::Fp32,
            ReduceOp::Sum,
            &s,
        ),
        HcclResult::EPara,
        "partly overlap",
    );
    assert_nothing_enqueued(&s, &[&good, &short, send.mem(), recv.mem()]);
    // count 0 is a successful no-op even with null buffers, as in HCCL
    c.all_reduce_raw(&null, &null, 0, DataType::Fp32, ReduceOp::Sum, &s)
        .unwrap();
    assert_nothing_enqueued(&s, &[]);
}

#[test]
fn count_overflow() {
    let cs = comms(2);
    let s = cs[0].create_stream();
    let m = DeviceMem::alloc(64).unwrap();
    assert_err(
        cs[0].all_reduce_raw(&m, &m, u64::MAX / 2, DataType::Fp64, ReduceOp::Sum, &s),
        HcclResult::EPara,
        "overflows the address space",
    );
    assert_nothing_enqueued(&s, &[&m]);
}

#[test]
fn unknown_dtype_and_op_codes() {
    let e = DataType::from_code(12).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("unknown data type code 12"), "{e}");
    let e = ReduceOp::from_code(7).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("unknown reduce op code 7"), "{e}");
}

#[test]
fn rank_out_of_range_and_double_join() {
    let g = InProcGroup::new(2, CommConfig::default()).unwrap();
    let e = HcclComm::join(&g, 2).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string()
            .contains("rank 2 is out of range for a communicator of 2 ranks"),
        "{e}"
    );
    let _r0 = HcclComm::join(&g, 0).unwrap();
    let e = HcclComm::join(&g, 0).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("already joined"), "{e}");
    let e = HcclComm::init_all_with(0, CommConfig::default()).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(e.to_string().contains("at least one rank"), "{e}");
}

#[test]
fn stream_of_another_rank() {
    let cs = comms(2);
    let foreign = cs[1].create_stream();
    let mine = cs[0].create_stream();
    let m = DeviceMem::alloc(64).unwrap();
    let r = DeviceMem::alloc(64).unwrap();
    assert_err(
        cs[0].all_reduce_raw(&m, &r, 16, DataType::Fp32, ReduceOp::Sum, &foreign),
        HcclResult::EPara,
        "the stream belongs to device 1",
    );
    assert_nothing_enqueued(&foreign, &[&m, &r]);
    assert_nothing_enqueued(&mine, &[]);
}

#[test]
fn bad_buffsize_values_name_the_variable() {
    for v in ["0", "lots", "-1", ""] {
        let e = CommConfig::from_source(&[("HCCL_BUFFSIZE", v)][..]).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(
            e.to_string().contains(&format!("HCCL_BUFFSIZE='{v}'")),
            "{e}"
        );
    }
}

#[test]
fn a_peer_that_never_calls_times_out_naming_it() {
    // direct reads off so the staged ring executor (and its step numbering) is exercised
    let cfg = CommConfig::from_source(
        &[
            ("HCCL_BUFFSIZE", "1"),
            ("HCCL_EXEC_TIMEOUT", "1"),
            ("HCCL_RS_DIRECT_MIN_BYTES", "off"),
        ][..],
    )
    .unwrap();
    let cs = HcclComm::init_all_with(2, cfg).unwrap();
    let s = cs[0].create_stream();
    // large enough (256 KiB) that the ring executor is selected
    let send = DeviceBuffer::from_slice(&vec![1.0f32; 65536]).unwrap();
    let mut recv = DeviceBuffer::<f32>::alloc(65536).unwrap();
    cs[0]
        .all_reduce(&send, &mut recv, ReduceOp::Sum, &s)
        .unwrap();
    let start = std::time::Instant::now();
    let e = s.synchronize().unwrap_err();
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(e.code(), HcclResult::ETimeout);
    let msg = e.to_string();
    for needle in [
        "peer rank 1",
        "AllReduceRingExecutor",
        "AllReduce_",
        "rank 0",
        "step 0",
    ] {
        assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
    }
}

#[test]
fn a_peer_that_never_calls_a_direct_read_op_times_out_naming_it() {
    let cfg =
        CommConfig::from_source(&[("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "1")][..]).unwrap();
    let cs = HcclComm::init_all_with(2, cfg).unwrap();
    let s = cs[0].create_stream();
    // 1 MiB: above the direct-read threshold, so the selector reads peers'
    // buffers where this host lets it and stages through the ring where not
    let send = DeviceBuffer::from_slice(&vec![1.0f32; 1 << 18]).unwrap();
    let mut recv = DeviceBuffer::<f32>::alloc(1 << 18).unwrap();
    cs[0]
        .all_reduce(&send, &mut recv, ReduceOp::Sum, &s)
        .unwrap();
    let start = std::time::Instant::now();
    let e = s.synchronize().unwrap_err();
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(e.code(), HcclResult::ETimeout);
    let expected = if hccl_platform::cross_memory_attach_permitted() {
        "AllReduceDirectExecutor"
    } else {
        "AllReduceRingExecutor"
    };
    let msg = e.to_string();
    for needle in ["peer rank 1", expected, "rank 0", "HCCL_EXEC_TIMEOUT"] {
        assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
    }
}

#[test]
fn ranks_calling_with_different_counts_both_get_the_inconsistency_error() {
    let cs = std::sync::Arc::new(comms(2));
    let errs: Vec<_> = (0..2)
        .map(|r| {
            let cs = cs.clone();
            std::thread::spawn(move || {
                let c = &cs[r];
                let s = c.create_stream();
                let n = if r == 0 { 16512 } else { 8320 };
                let send = DeviceMem::alloc(n * 4).unwrap();
                let recv = DeviceMem::alloc(n * 4).unwrap();
                c.all_reduce_raw(&send, &recv, n as u64, DataType::Fp32, ReduceOp::Sum, &s)
                    .unwrap();
                s.synchronize().unwrap_err()
            })
        })
        .collect::<Vec<_>>() // spawn both before joining either
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert!(errs[0].to_string().contains(
        "The arguments for collective communication are inconsistent between ranks: parameter count, local end 16512, remote end 8320"
    ), "{}", errs[0]);
    assert!(
        errs[1]
            .to_string()
            .contains("parameter count, local end 8320, remote end 16512"),
        "{}",
        errs[1]
    );
    for e in &errs {
        assert_eq!(e.code(), HcclResult::EPara);
    }
}

/// Every rank of an AllGatherV passes all ranks' receive counts, and of a
/// ReduceScatterV all ranks' send counts; ranks that disagree about any
/// rank's count (here rank 2 sends 4 elements where its peers expect 2)
/// are each told so by the consistency check before any data moves,
/// instead of receiving a block of the wrong length.
#[test]
fn ranks_disagreeing_about_a_v_ops_counts_get_the_inconsistency_error() {
    for op in ["AllGatherV", "ReduceScatterV"] {
        // a communicator of its own: a failed op's links are failed
        let cs = std::sync::Arc::new(comms(3));
        let errs: Vec<_> = (0..3)
            .map(|r| {
                let cs = cs.clone();
                std::thread::spawn(move || {
                    let c = &cs[r];
                    let s = c.create_stream();
                    let counts: [u64; 3] = if r == 2 { [3, 5, 4] } else { [3, 5, 2] };
                    let displs = [0, 3, 8];
                    let all = DeviceMem::alloc(12 * 4).unwrap();
                    let mine = DeviceMem::alloc(counts[r] as usize * 4).unwrap();
                    all.fill_bytes(1).unwrap();
                    mine.fill_bytes(1).unwrap();
                    if op == "AllGatherV" {
                        c.all_gather_v_raw(
                            &mine,
                            counts[r],
                            &all,
                            &counts,
                            &displs,
                            DataType::Fp32,
                            &s,
                        )
                    } else {
                        c.reduce_scatter_v_raw(
                            &all,
                            &counts,
                            &displs,
                            &mine,
                            counts[r],
                            DataType::Fp32,
                            ReduceOp::Sum,
                            &s,
                        )
                    }
                    .unwrap();
                    s.synchronize().unwrap_err()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        for (r, e) in errs.iter().enumerate() {
            assert_eq!(e.code(), HcclResult::EPara, "{op}, rank {r}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("inconsistent between ranks: parameter counts (every rank's count"),
                "{op}, rank {r}: {msg}"
            );
            // ranks 0 and 1 agree with each other: each names rank 2
            if r < 2 {
                assert!(msg.contains("peer rank 2"), "{op}, rank {r}: {msg}");
            }
        }
    }
}
