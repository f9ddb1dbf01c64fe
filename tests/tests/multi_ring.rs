//! The multi-ring executors (one ring per channel, joined host to host)
//! for real: ranks as threads with declared hosts, p = 2..8 on uneven
//! hosts, several channel counts (`HCCL_RS_MIN_CHANNELS` /
//! `HCCL_RS_MAX_CHANNELS`), every data type and reduction, counts that
//! divide neither by the channels nor by the ranks, and a 1 MB CCL buffer
//! so that large counts take several rounds per channel. Every result is
//! checked against the reference of `hccl_tests`.

use half::{bf16, f16};
use hccl_adapter::{CommConfig, DeviceBuffer, DeviceMem, HcclComm, ReduceOp, Stream};
use hccl_tests::{expected_value, input_value, run_ranks, TestElem};
use std::sync::Arc;
use std::time::Duration;

/// Odd, and neither a multiple of any channel count nor of any p here.
const COUNT: usize = 3001;

fn comms(map: &[u32], env: &[(&str, &str)]) -> Arc<Vec<HcclComm>> {
    let mut all = vec![
        ("HCCL_BUFFSIZE", "1"),
        ("HCCL_EXEC_TIMEOUT", "30"),
        // every op that has a multi-ring executor runs it, on one host or several
        ("HCCL_ALGO", "level0:multiring;level1:multiring"),
    ];
    all.extend_from_slice(env);
    let config = CommConfig::from_source(&all[..]).unwrap();
    Arc::new(HcclComm::init_all_on_hosts(map.to_vec(), config).unwrap())
}

fn upload<T: TestElem>(v: &[T]) -> DeviceBuffer<T> {
    DeviceBuffer::from_slice(v).unwrap()
}

fn ran(comm: &HcclComm, what: &str) {
    let name = comm.communicator().last_executor().unwrap_or_default();
    assert!(name.ends_with("MultiRingExecutor"), "{what} ran {name}");
}

/// AllReduce, ReduceScatter and Reduce for every reduction, AllGather and
/// Broadcast, of `count` elements of `T`, checked on every rank.
fn check_type<T: TestElem>(comm: &HcclComm, s: &Stream, count: usize) {
    let (rank, p) = (comm.rank(), comm.size());
    let pu = p as usize;
    let ty = T::DTYPE;
    for op in ReduceOp::ALL {
        let ctx = format!("{ty:?} {op} p={p} rank {rank} count={count}");
        // allreduce
        let input: Vec<T> = (0..count).map(|i| input_value::<T>(op, rank, i)).collect();
        let send = upload(&input);
        let mut recv = DeviceBuffer::<T>::alloc(count).unwrap();
        comm.all_reduce(&send, &mut recv, op, s).unwrap();
        s.synchronize().unwrap();
        ran(comm, "allreduce");
        for (i, g) in recv.to_vec().unwrap().iter().enumerate() {
            let want = expected_value::<T>(op, p, i);
            assert!(*g == want, "allreduce {ctx} element {i}: {g:?} != {want:?}");
        }
        // reduce-scatter: block q of every rank's input is element range q
        let input: Vec<T> = (0..count * pu)
            .map(|i| input_value::<T>(op, rank, i))
            .collect();
        let send = upload(&input);
        let mut recv = DeviceBuffer::<T>::alloc(count).unwrap();
        comm.reduce_scatter(&send, &mut recv, op, s).unwrap();
        s.synchronize().unwrap();
        ran(comm, "reduce-scatter");
        let base = rank as usize * count;
        for (i, g) in recv.to_vec().unwrap().iter().enumerate() {
            let want = expected_value::<T>(op, p, base + i);
            assert!(*g == want, "reduce-scatter {ctx} element {i}");
        }
        // reduce to a root in the middle
        let root = p / 2;
        let input: Vec<T> = (0..count).map(|i| input_value::<T>(op, rank, i)).collect();
        let send = upload(&input);
        let recv = DeviceMem::alloc(count * std::mem::size_of::<T>()).unwrap();
        comm.reduce_raw(send.mem(), &recv, count as u64, ty, op, root, s)
            .unwrap();
        s.synchronize().unwrap();
        ran(comm, "reduce");
        if rank == root {
            for (i, g) in recv.to_vec::<T>(count).unwrap().iter().enumerate() {
                let want = expected_value::<T>(op, p, i);
                assert!(*g == want, "reduce {ctx} element {i}");
            }
        }
    }
    let op = ReduceOp::Sum;
    // allgather
    let input: Vec<T> = (0..count).map(|i| input_value::<T>(op, rank, i)).collect();
    let send = upload(&input);
    let mut all = DeviceBuffer::<T>::alloc(count * pu).unwrap();
    comm.all_gather(&send, &mut all, s).unwrap();
    s.synchronize().unwrap();
    ran(comm, "allgather");
    let got = all.to_vec().unwrap();
    for q in 0..p {
        for i in 0..count {
            let want = input_value::<T>(op, q, i);
            assert!(
                got[q as usize * count + i] == want,
                "allgather {ty:?} p={p} rank {rank}: block {q} element {i}"
            );
        }
    }
    // broadcast from the last rank
    let root = p - 1;
    let mut buf: Vec<T> = vec![T::from_i8(0); count];
    if rank == root {
        buf = (0..count).map(|i| input_value::<T>(op, root, i)).collect();
    }
    let mut dev = upload(&buf);
    comm.broadcast(&mut dev, root, s).unwrap();
    s.synchronize().unwrap();
    ran(comm, "broadcast");
    for (i, g) in dev.to_vec().unwrap().iter().enumerate() {
        assert!(
            *g == input_value::<T>(op, root, i),
            "broadcast {ty:?} p={p} rank {rank} element {i}"
        );
    }
}

/// Every data type at [`COUNT`], and f32 at a count that takes several
/// rounds per channel of the 1 MB CCL buffer.
fn run(map: &[u32], env: &[(&str, &str)]) {
    let p = map.len() as u32;
    let comms = comms(map, env);
    run_ranks(p, Duration::from_secs(150), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        check_type::<i8>(comm, &s, COUNT);
        check_type::<i16>(comm, &s, COUNT);
        check_type::<i32>(comm, &s, COUNT);
        check_type::<i64>(comm, &s, COUNT);
        check_type::<u8>(comm, &s, COUNT);
        check_type::<u16>(comm, &s, COUNT);
        check_type::<u32>(comm, &s, COUNT);
        check_type::<u64>(comm, &s, COUNT);
        check_type::<f16>(comm, &s, COUNT);
        check_type::<bf16>(comm, &s, COUNT);
        check_type::<f32>(comm, &s, COUNT);
        check_type::<f64>(comm, &s, COUNT);
        check_type::<f32>(comm, &s, 300_007);
    });
}

#[test]
fn two_hosts_of_one_rank() {
    run(&[0, 1], &[]);
}

#[test]
fn hosts_of_two_and_one_one_channel() {
    run(&[0, 0, 1], &[("HCCL_RS_MAX_CHANNELS", "1")]);
}

#[test]
fn hosts_of_one_and_three() {
    run(&[0, 1, 1, 1], &[]);
}

/// The first two channels, repeated to five (NCCL's min above max).
#[test]
fn hosts_of_two_and_two_five_channels() {
    run(
        &[0, 0, 1, 1],
        &[("HCCL_RS_MIN_CHANNELS", "5"), ("HCCL_RS_MAX_CHANNELS", "2")],
    );
}

#[test]
fn three_hosts_of_two_one_two() {
    run(&[0, 0, 1, 2, 2], &[("HCCL_RS_MAX_CHANNELS", "32")]);
}

#[test]
fn hosts_of_three_and_three_three_channels() {
    run(&[0, 0, 0, 1, 1, 1], &[("HCCL_RS_MAX_CHANNELS", "3")]);
}

#[test]
fn hosts_of_four_and_three() {
    run(&[0, 0, 0, 0, 1, 1, 1], &[]);
}

/// Four channels on four streams.
#[test]
fn hosts_of_four_and_four() {
    run(&[0, 0, 0, 0, 1, 1, 1, 1], &[]);
}

/// NCCL's doubling: eight channels on four streams (the duplicates share
/// their originals' streams).
#[test]
fn hosts_of_four_and_four_doubled() {
    run(&[0, 0, 0, 0, 1, 1, 1, 1], &[("HCCL_RS_MAX_CHANNELS", "32")]);
}

#[test]
fn three_hosts_of_three_two_three() {
    run(&[0, 0, 0, 1, 1, 2, 2, 2], &[("HCCL_RS_MIN_CHANNELS", "7")]);
}

/// On one host the channels close on themselves; forced there, the
/// executors still compute the right result.
#[test]
fn one_host_forced() {
    run(&[0, 0, 0, 0, 0], &[]);
}
