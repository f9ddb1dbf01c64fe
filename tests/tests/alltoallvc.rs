//! AllToAllVC through the Rust API, ranks as threads, p ∈ {2, 3, 4, 8}:
//! irregular count matrices (zeros, whole zero rows and columns, one
//! sender, the diagonal only, all zero) at a few elements per block and at
//! blocks larger than the 1 MiB CCL buffer, with the default selection and
//! with each AllToAllV executor forced; results checked against a host
//! reference (`hccl_tests::alltoallvc`). Bad matrices are refused with
//! `HCCL_E_PARA` before anything is enqueued.

use hccl_adapter::{all_to_all_vc_layout, CommConfig, DataType, DeviceMem, HcclComm, HcclResult};
use hccl_tests::{alltoallvc, run_ranks};
use std::sync::Arc;
use std::time::Duration;

fn config(executor: Option<&str>) -> CommConfig {
    let mut env = vec![("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "20")];
    if let Some(e) = executor {
        env.push(("HCCL_RS_EXECUTOR", e));
    }
    CommConfig::from_source(&env[..]).unwrap()
}

fn run(p: u32, executor: Option<&'static str>, scales: &'static [u64]) {
    let comms = Arc::new(HcclComm::init_all_with(p, config(executor)).unwrap());
    run_ranks(p, Duration::from_secs(180), move |r| {
        let c = &comms[r as usize];
        let s = c.create_stream();
        for &scale in scales {
            alltoallvc::run_all(c, &s, scale)
                .unwrap_or_else(|e| panic!("p={p} {executor:?} scale {scale}: {e}"));
        }
    });
}

#[test]
fn default_selection_p2() {
    run(2, None, &[1, 100_000]);
}

#[test]
fn default_selection_p3() {
    run(3, None, &[1, 70_000]);
}

#[test]
fn default_selection_p4() {
    run(4, None, &[1, 50_000]);
}

#[test]
fn default_selection_p8() {
    run(8, None, &[1, 20_000]);
}

#[test]
fn every_alltoallv_executor_forced() {
    for name in ["AllToAllVMeshExecutor", "AllToAllVPairWiseExecutor"] {
        for p in [2u32, 3, 4, 8] {
            run(p, Some(name), &[3]);
        }
    }
}

#[test]
fn the_layout_is_the_row_and_the_column_packed_in_rank_order() {
    // rank i sends m[i][j] to rank j
    let m = [
        1, 0, 2, //
        0, 0, 0, //
        3, 4, 5,
    ];
    let l = all_to_all_vc_layout(&m, 3, 2).unwrap();
    assert_eq!(
        (l.send_counts, l.sdispls, l.send_total),
        (vec![3, 4, 5], vec![0, 3, 7], 12)
    );
    assert_eq!(
        (l.recv_counts, l.rdispls, l.recv_total),
        (vec![2, 0, 5], vec![0, 2, 2], 7)
    );
    let l = all_to_all_vc_layout(&m, 3, 1).unwrap();
    assert_eq!((l.send_total, l.recv_counts), (0, vec![0, 0, 4]));
    assert_eq!(
        alltoallvc::expected(&m, 3, 0),
        vec![
            alltoallvc::val(0, 0),
            alltoallvc::val(2, 0),
            alltoallvc::val(2, 1),
            alltoallvc::val(2, 2),
        ]
    );
}

#[test]
fn bad_matrices_and_types_are_refused_before_anything_runs() {
    let comms = Arc::new(HcclComm::init_all_with(2, config(None)).unwrap());
    let c = &comms[0];
    let s = c.create_stream();
    let send = DeviceMem::alloc(64).unwrap();
    let recv = DeviceMem::alloc(64).unwrap();
    recv.copy_from_host(&[7i32; 16]).unwrap();
    let i32t = DataType::Int32;
    let para = |r: hccl_adapter::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.code(), HcclResult::EPara, "{what}: {e}");
        e.to_string()
    };
    // not rankSize × rankSize
    let msg = para(
        c.all_to_all_vc_raw(&send, &[1, 1, 1], i32t, &recv, i32t, &s),
        "3 entries",
    );
    assert!(msg.contains("2 × 2"), "{msg}");
    // a row whose sum overflows
    para(
        c.all_to_all_vc_raw(&send, &[u64::MAX, 1, 1, 1], i32t, &recv, i32t, &s),
        "row overflow",
    );
    // a column whose sum overflows (rank 0 receives m[0][0] + m[1][0])
    para(
        c.all_to_all_vc_raw(&send, &[1, 1, u64::MAX, 1], i32t, &recv, i32t, &s),
        "column overflow",
    );
    // elements whose bytes overflow
    para(
        c.all_to_all_vc_raw(&send, &[u64::MAX / 2, 0, 0, 0], i32t, &recv, i32t, &s),
        "bytes overflow",
    );
    // more than the buffers hold (16 int32 each)
    para(
        c.all_to_all_vc_raw(&send, &[10, 7, 1, 1], i32t, &recv, i32t, &s),
        "send too big",
    );
    para(
        c.all_to_all_vc_raw(&send, &[1, 1, 16, 1], i32t, &recv, i32t, &s),
        "recv too big",
    );
    // sendType != recvType
    let msg = para(
        c.all_to_all_vc_raw(&send, &[1, 1, 1, 1], i32t, &recv, DataType::Fp32, &s),
        "types differ",
    );
    assert!(msg.contains("must match"), "{msg}");
    // the same buffer for both
    para(
        c.all_to_all_vc_raw(&send, &[1, 1, 1, 1], i32t, &send, i32t, &s),
        "same buffer",
    );
    // nothing was enqueued: the stream is idle and recv untouched
    s.synchronize().unwrap();
    assert_eq!(recv.to_vec::<i32>(16).unwrap(), vec![7; 16]);
    // an all-zero matrix moves nothing and needs no buffers
    let null = DeviceMem::null();
    c.all_to_all_vc_raw(&null, &[0; 4], i32t, &null, i32t, &s)
        .unwrap();
    s.synchronize().unwrap();
}
