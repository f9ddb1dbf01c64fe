//! `HCCL_DETERMINISTIC=strict`: every AllReduce executor, forced one at a
//! time (`HCCL_RS_EXECUTOR`), at p = 3 and p = 8, on one host and on two
//! declared hosts, gives bit-identical fp32 results over 100 repeated runs
//! of the same input, on every rank, and the same bits on every rank.
//! The inputs mix magnitudes and signs so that any change of reduction
//! order would change low bits.

use hccl_adapter::{CommConfig, DeviceBuffer, HcclComm, HcclResult, ReduceOp};
use hccl_tests::run_ranks;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every AllReduce executor of the built-in registry.
fn all_reduce_executors() -> Vec<String> {
    hccl_algorithm::registry()
        .names()
        .into_iter()
        .filter(|n| n.starts_with("AllReduce"))
        .collect()
}

/// Rank `r`'s element `i`: magnitudes from 1e-3 to 1e5, both signs, so
/// that sums depend on their order.
fn input(r: u32, i: usize) -> f32 {
    let x = (i as u64 * 7919 + r as u64 * 104_729) % 1000;
    let scale = [1e-3f32, 1.0, 37.5, 1e5][(i + r as usize) % 4];
    let sign = if (i + 3 * r as usize) % 3 == 0 {
        -1.0
    } else {
        1.0
    };
    sign * scale * (x as f32 + 0.123)
}

/// What one (executor, p, hosts, count) run did: `None` = the executor
/// does not serve that topology (refused before anything ran).
type Outcome = Option<Vec<u32>>;

fn run(executor: &str, p: u32, two_hosts: bool, count: usize) -> Outcome {
    let cfg = CommConfig::from_source(
        &[
            ("HCCL_DETERMINISTIC", "strict"),
            ("HCCL_RS_EXECUTOR", executor),
            ("HCCL_EXEC_TIMEOUT", "60"),
        ][..],
    )
    .unwrap();
    let comms = if two_hosts {
        let hosts: Vec<u32> = (0..p).map(|r| u32::from(r >= p / 2)).collect();
        HcclComm::init_all_on_hosts(hosts, cfg).unwrap()
    } else {
        HcclComm::init_all_with(p, cfg).unwrap()
    };
    let comms = Arc::new(comms);
    let results: Arc<Mutex<BTreeMap<u32, Outcome>>> = Arc::default();
    let (c2, r2, name) = (comms.clone(), results.clone(), executor.to_owned());
    run_ranks(p, Duration::from_secs(170), move |r| {
        let comm = &c2[r as usize];
        let stream = comm.create_stream();
        let data: Vec<f32> = (0..count).map(|i| input(r, i)).collect();
        let send = DeviceBuffer::from_slice(&data).unwrap();
        let mut recv = DeviceBuffer::<f32>::alloc(count).unwrap();
        let mut first: Option<Vec<u32>> = None;
        for rep in 0..100 {
            match comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream) {
                Ok(()) => {}
                Err(e) if rep == 0 && e.code() == HcclResult::ENotSupport => {
                    r2.lock().unwrap().insert(r, None);
                    return;
                }
                Err(e) => panic!("{name} p={p} rank {r} run {rep}: {e}"),
            }
            stream.synchronize().unwrap();
            let bits: Vec<u32> = recv.to_vec().unwrap().iter().map(|x| x.to_bits()).collect();
            match &first {
                None => first = Some(bits),
                Some(f) => assert!(
                    *f == bits,
                    "{name} p={p} two_hosts={two_hosts} count={count} rank {r}: run {rep} differs \
                     from run 0 at element {:?}",
                    f.iter().zip(&bits).position(|(a, b)| a != b)
                ),
            }
        }
        r2.lock().unwrap().insert(r, first);
    });
    let res = std::mem::take(&mut *results.lock().unwrap());
    assert_eq!(res.len(), p as usize, "{executor}: every rank reports");
    let served: Vec<bool> = res.values().map(Option::is_some).collect();
    assert!(
        served.iter().all(|&s| s == served[0]),
        "{executor} p={p}: ranks disagree on whether the executor serves the topology"
    );
    let mut it = res.into_values();
    let r0 = it.next().unwrap();
    for (q, other) in it.enumerate() {
        assert!(
            other == r0,
            "{executor} p={p} two_hosts={two_hosts} count={count}: rank {} differs from rank 0",
            q + 1
        );
    }
    // the reduction is right, too (within fp32 rounding of some order)
    if let Some(bits) = &r0 {
        for (i, b) in bits.iter().enumerate().step_by(97) {
            let want: f64 = (0..p).map(|r| f64::from(input(r, i))).sum();
            let got = f64::from(f32::from_bits(*b));
            let mag: f64 = (0..p).map(|r| f64::from(input(r, i)).abs()).sum();
            assert!(
                (got - want).abs() <= mag * 1e-5 + 1e-6,
                "{executor} element {i}: {got} vs {want}"
            );
        }
    }
    r0
}

fn check(p: u32) {
    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    for e in all_reduce_executors() {
        for two_hosts in [false, true] {
            // a small count (every executor, the AIV kernel included) and
            // one of 256 KiB + 4 bytes (several slices per rank)
            for count in [1003usize, 65_537] {
                if run(&e, p, two_hosts, count).is_some() {
                    *ran.entry(e.clone()).or_default() += 1;
                }
            }
        }
    }
    let missing: Vec<String> = all_reduce_executors()
        .into_iter()
        .filter(|e| !ran.contains_key(e))
        .collect();
    eprintln!("p={p}: runs per executor {ran:?}");
    assert!(
        missing.is_empty(),
        "p={p}: these AllReduce executors served no topology tried: {missing:?}"
    );
}

#[test]
fn strict_allreduce_is_bit_identical_at_3_ranks() {
    check(3);
}

#[test]
fn strict_allreduce_is_bit_identical_at_8_ranks() {
    check(8);
}
