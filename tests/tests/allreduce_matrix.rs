//! AllReduce through every layer for ranks {1,2,3,4,5,7,8} × every dtype ×
//! every op × counts {0, 1, 7, 128, 4097, more than the CCL buffer}, checked
//! against a reference computed here.

use half::{bf16, f16};
use hccl_adapter::{CommConfig, DeviceBuffer, HcclComm, ReduceOp};
use hccl_tests::{expected_value, input_value, run_ranks, TestElem};
use std::sync::Arc;
use std::time::Duration;

/// HCCL_BUFFSIZE=1 (MB) so the largest count needs several op-base chunks.
fn config(executor: Option<&str>) -> CommConfig {
    let mut env = vec![("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "20")];
    if let Some(e) = executor {
        env.push(("HCCL_RS_EXECUTOR", e));
    }
    CommConfig::from_source(&env[..]).unwrap()
}

fn counts<T>() -> Vec<usize> {
    let ccl_elems = (1usize << 20) / std::mem::size_of::<T>();
    vec![0, 1, 7, 128, 4097, 2 * ccl_elems + 3]
}

fn check_type<T: TestElem>(comm: &HcclComm, stream: &hccl_adapter::Stream) {
    let (rank, size) = (comm.rank(), comm.size());
    for op in ReduceOp::ALL {
        for count in counts::<T>() {
            let input: Vec<T> = (0..count).map(|i| input_value::<T>(op, rank, i)).collect();
            let send = DeviceBuffer::from_slice(&input).unwrap();
            let mut recv = DeviceBuffer::<T>::alloc(count).unwrap();
            comm.all_reduce(&send, &mut recv, op, stream).unwrap();
            stream.synchronize().unwrap();
            let got = recv.to_vec().unwrap();
            for (i, g) in got.iter().enumerate() {
                let want = expected_value::<T>(op, size, i);
                assert!(
                    *g == want,
                    "{:?} {op} p={size} count={count} rank {rank} element {i}: got {g:?}, want {want:?}",
                    T::DTYPE
                );
            }
            // the input is left untouched
            assert_eq!(send.to_vec().unwrap(), input);
        }
    }
    // in place
    let count = 4097;
    let op = ReduceOp::Sum;
    let data: Vec<T> = (0..count).map(|i| input_value::<T>(op, rank, i)).collect();
    let mut buf = DeviceBuffer::from_slice(&data).unwrap();
    comm.all_reduce_in_place(&mut buf, op, stream).unwrap();
    stream.synchronize().unwrap();
    let got = buf.to_vec().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert!(
            *g == expected_value::<T>(op, size, i),
            "in-place {:?} element {i}",
            T::DTYPE
        );
    }
}

fn run(p: u32) {
    run_with(p, None)
}

fn run_with(p: u32, executor: Option<&str>) {
    let comms: Arc<Vec<HcclComm>> = Arc::new(HcclComm::init_all_with(p, config(executor)).unwrap());
    run_ranks(p, Duration::from_secs(240), move |r| {
        let comm = &comms[r as usize];
        let stream = comm.create_stream();
        check_type::<i8>(comm, &stream);
        check_type::<i16>(comm, &stream);
        check_type::<i32>(comm, &stream);
        check_type::<i64>(comm, &stream);
        check_type::<u8>(comm, &stream);
        check_type::<u16>(comm, &stream);
        check_type::<u32>(comm, &stream);
        check_type::<u64>(comm, &stream);
        check_type::<f16>(comm, &stream);
        check_type::<bf16>(comm, &stream);
        check_type::<f32>(comm, &stream);
        check_type::<f64>(comm, &stream);
    });
}

/// The ring executor at every count (the default picks mesh for small ones).
#[test]
fn ring_forced_ranks_3() {
    run_with(3, Some("AllReduceRingExecutor"));
}
#[test]
fn rhd_forced_ranks_5() {
    run_with(5, Some("AllReduceRHDExecutor"));
}
#[test]
fn ring_forced_ranks_8() {
    run_with(8, Some("AllReduceRingExecutor"));
}

#[test]
fn ranks_1() {
    run(1);
}
#[test]
fn ranks_2() {
    run(2);
}
#[test]
fn ranks_3() {
    run(3);
}
#[test]
fn ranks_4() {
    run(4);
}
#[test]
fn ranks_5() {
    run(5);
}
#[test]
fn ranks_7() {
    run(7);
}
#[test]
fn ranks_8() {
    run(8);
}

#[test]
fn reference_values_exercise_wrapping_and_signs() {
    // sanity of the test's own reference: int8 products over 8 ranks wrap,
    // and values include negatives for signed types
    let mut wrapped = false;
    for i in 0..50 {
        let exact: i64 = (0..8)
            .map(|r| input_value::<i64>(ReduceOp::Prod, r, i))
            .product();
        let w = expected_value::<i8>(ReduceOp::Prod, 8, i);
        assert_eq!(w, exact as i8);
        wrapped |= exact != w as i64;
    }
    assert!(wrapped, "the int8 product case should overflow somewhere");
    assert!((0..5).any(|i| input_value::<f32>(ReduceOp::Sum, 0, i) < 0.0));
}
