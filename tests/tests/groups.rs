//! Group calls (`group_start` / `group_end`, HCCL's `HcclGroupStart` /
//! `HcclGroupEnd`): ops of a group are checked when issued and launched
//! at the end; send/receive pairs that would deadlock one by one complete;
//! small AllReduces are fused and still give every op its own result.

use hccl_adapter::{group, group_end, group_start, group_status, DeviceMem, HcclResult, ReduceOp};
use hccl_adapter::{DataType, HcclComm};
use hccl_tests::{comms_with_env, run_ranks};
use std::time::Duration;

fn mem_of(data: &[f32]) -> DeviceMem {
    let m = DeviceMem::alloc(data.len() * 4).unwrap();
    m.copy_from_host(data).unwrap();
    m
}

/// Every rank sends to both neighbours before receiving from them: one by
/// one on a stream this waits forever (each send waits for its receiver);
/// in a group the pairs are matched.
#[test]
fn send_before_receive_in_a_group_completes() {
    for p in [2u32, 3, 4] {
        let comms = comms_with_env(p, &[]);
        run_ranks(p, Duration::from_secs(60), move |r| {
            let c: &HcclComm = &comms[r as usize];
            let s = c.create_stream();
            let n = 1000usize;
            let (right, left) = ((r + 1) % p, (r + p - 1) % p);
            let out: Vec<f32> = (0..n).map(|i| (r * 10_000) as f32 + i as f32).collect();
            let send = mem_of(&out);
            let (from_left, from_right) = (
                DeviceMem::alloc(n * 4).unwrap(),
                DeviceMem::alloc(n * 4).unwrap(),
            );
            group(|| {
                assert!(group_status());
                c.send_raw(&send, n as u64, DataType::Fp32, right, &s)?;
                c.send_raw(&send, n as u64, DataType::Fp32, left, &s)?;
                c.recv_raw(&from_left, n as u64, DataType::Fp32, left, &s)?;
                c.recv_raw(&from_right, n as u64, DataType::Fp32, right, &s)
            })
            .unwrap();
            assert!(!group_status());
            s.synchronize().unwrap();
            let want =
                |q: u32| -> Vec<f32> { (0..n).map(|i| (q * 10_000) as f32 + i as f32).collect() };
            assert_eq!(
                from_left.to_vec::<f32>(n).unwrap(),
                want(left),
                "rank {r} of {p}"
            );
            assert_eq!(
                from_right.to_vec::<f32>(n).unwrap(),
                want(right),
                "rank {r} of {p}"
            );
        });
    }
}

/// Eight AllReduces of different sizes in one group (fused): each output
/// holds the sum of its own inputs, and inputs are untouched.
#[test]
fn fused_all_reduces_keep_their_results_apart() {
    let p = 3u32;
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let c = &comms[r as usize];
        let s = c.create_stream();
        let sizes = [1usize, 7, 64, 1000, 4096, 3, 250, 16384];
        let ins: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                (0..n)
                    .map(|i| (r + 1) as f32 * (k * 1000 + i) as f32)
                    .collect()
            })
            .collect();
        let bufs: Vec<(DeviceMem, DeviceMem)> = ins
            .iter()
            .map(|v| (mem_of(v), DeviceMem::alloc(v.len() * 4).unwrap()))
            .collect();
        for round in 0..3 {
            group_start();
            for ((i, o), n) in bufs.iter().zip(sizes) {
                c.all_reduce_raw(i, o, n as u64, DataType::Fp32, ReduceOp::Sum, &s)
                    .unwrap();
            }
            group_end().unwrap();
            s.synchronize().unwrap();
            let ranks_sum = (1..=p).sum::<u32>() as f32;
            for (k, ((i, o), n)) in bufs.iter().zip(sizes).enumerate() {
                let want: Vec<f32> = (0..n).map(|e| ranks_sum * (k * 1000 + e) as f32).collect();
                assert_eq!(
                    o.to_vec::<f32>(n).unwrap(),
                    want,
                    "rank {r} op {k} round {round}"
                );
                assert_eq!(i.to_vec::<f32>(n).unwrap(), ins[k], "input {k} changed");
            }
        }
    });
}

/// Bad input inside a group fails that call at once and keeps nothing of
/// it; the rest of the group still runs. An end without a start is an
/// `HCCL_E_PARA` error.
#[test]
fn group_errors() {
    let e = group_end().unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string().contains("without a matching HcclGroupStart"),
        "{e}"
    );
    let p = 2u32;
    let comms = comms_with_env(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let c = &comms[r as usize];
        let s = c.create_stream();
        let buf = mem_of(&[r as f32 + 1.0; 4]);
        let out = DeviceMem::alloc(16).unwrap();
        group_start();
        group_start(); // nested: only the outer end launches
        let bad = c
            .all_reduce_raw(&buf, &out, 5, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap_err();
        assert_eq!(bad.code(), HcclResult::EPara, "{bad}");
        c.all_reduce_raw(&buf, &out, 4, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap();
        group_end().unwrap();
        assert!(group_status());
        // nothing launched yet: the output is still zero
        s.synchronize().unwrap();
        assert_eq!(out.to_vec::<f32>(4).unwrap(), vec![0.0; 4]);
        group_end().unwrap();
        s.synchronize().unwrap();
        assert_eq!(out.to_vec::<f32>(4).unwrap(), vec![3.0; 4]);
    });
}
