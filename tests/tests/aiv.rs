//! AIV kernels (one task per small op over the ranks' boards), ranks as
//! threads: chosen by default for small AllReduce on one host, correct for
//! every count up to the board's payload, in place, back to back without
//! synchronizing, bit-identical on every rank; mismatched calls and
//! silent peers fail with clear errors instead of hanging.

use hccl_adapter::{CommConfig, DataType, DeviceMem, HcclComm, HcclResult, ReduceOp};
use hccl_algorithm::AIV_MAX_BYTES;
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::Duration;

const AIV: &str = "AllReduceMeshAivExecutor";

fn comms(p: u32, env: &[(&str, &str)]) -> Arc<Vec<HcclComm>> {
    hccl_tests::comms_with_env(p, env)
}

/// An fp32 value per (rank, element, round) whose sums depend on the order
/// of addition (so a rank that folded in another order would differ).
fn fval(rank: u32, i: usize, round: usize) -> f32 {
    1.0 / (rank as f32 + 1.0 + i as f32 * 0.37 + round as f32 * 0.011) * 1e-3 + (rank as f32) * 1e5
}

/// An AllReduce of 3 elements on every rank but `odd`, which asks for 2:
/// it must fail HCCL's consistency check on rank `r`; returns the error.
fn mismatched_all_reduce(comm: &HcclComm, s: &hccl_adapter::Stream, r: u32, odd: u32) -> String {
    let c = if r == odd { 2 } else { 3 };
    let send = mem_f32(&vec![1.0; c]);
    let recv = DeviceMem::alloc(c * 4).unwrap();
    comm.all_reduce_raw(&send, &recv, c as u64, DataType::Fp32, ReduceOp::Sum, s)
        .unwrap();
    let msg = s.synchronize().unwrap_err().to_string();
    assert!(
        msg.contains("inconsistent between ranks"),
        "rank {r}: {msg}"
    );
    msg
}

fn mem_f32(v: &[f32]) -> DeviceMem {
    let m = DeviceMem::alloc(v.len() * 4).unwrap();
    m.copy_from_host(v).unwrap();
    m
}

/// Per round k: rank `r`'s fp32 input of `c` elements and an output buffer.
fn round_buffers(r: u32, c: usize, rounds: usize) -> (Vec<DeviceMem>, Vec<DeviceMem>) {
    let sends = (0..rounds)
        .map(|k| mem_f32(&(0..c).map(|i| fval(r, i, k)).collect::<Vec<_>>()))
        .collect();
    let recvs = (0..rounds)
        .map(|_| DeviceMem::alloc(c * 4).unwrap())
        .collect();
    (sends, recvs)
}

/// fp32 sum of round `k` in `(sends, recvs)`, out of place.
fn sum_round(
    comm: &HcclComm,
    bufs: &(Vec<DeviceMem>, Vec<DeviceMem>),
    k: usize,
    c: usize,
    s: &hccl_adapter::Stream,
) {
    comm.all_reduce_raw(
        &bufs.0[k],
        &bufs.1[k],
        c as u64,
        DataType::Fp32,
        ReduceOp::Sum,
        s,
    )
    .unwrap();
}

/// fp32 sums in rank order, as the kernel folds them.
fn rank_order_sum(p: u32, c: usize, round: usize) -> Vec<f32> {
    (0..c)
        .map(|i| {
            let mut acc = fval(0, i, round);
            for q in 1..p {
                acc += fval(q, i, round);
            }
            acc
        })
        .collect()
}

fn all_counts() -> Vec<usize> {
    vec![1, 2, 3, 7, 64, 100, AIV_MAX_BYTES / 4]
}

fn default_selection_runs_the_kernel(p: u32) {
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        for c in all_counts() {
            // out of place, fp32 sum: bit-identical to the rank-order sum
            let send = mem_f32(&(0..c).map(|i| fval(r, i, 0)).collect::<Vec<_>>());
            let recv = DeviceMem::alloc(c * 4).unwrap();
            comm.all_reduce_raw(&send, &recv, c as u64, DataType::Fp32, ReduceOp::Sum, &s)
                .unwrap();
            s.synchronize().unwrap();
            assert_eq!(comm.communicator().last_executor().as_deref(), Some(AIV));
            let got = recv.to_vec::<f32>(c).unwrap();
            let want = rank_order_sum(p, c, 0);
            assert!(
                got.iter()
                    .map(|x| x.to_bits())
                    .eq(want.iter().map(|x| x.to_bits())),
                "fp32 sum p={p} c={c} rank {r}: {got:?} != {want:?}"
            );
            // in place, int32 max
            let buf = DeviceMem::alloc(c * 4).unwrap();
            let mine: Vec<i32> = (0..c)
                .map(|i| ((r as i32 * 7919 + i as i32 * 31) % 1009) - 500)
                .collect();
            buf.copy_from_host(&mine).unwrap();
            comm.all_reduce_raw(&buf, &buf, c as u64, DataType::Int32, ReduceOp::Max, &s)
                .unwrap();
            s.synchronize().unwrap();
            let want: Vec<i32> = (0..c)
                .map(|i| {
                    (0..p as i32)
                        .map(|q| ((q * 7919 + i as i32 * 31) % 1009) - 500)
                        .max()
                        .unwrap()
                })
                .collect();
            assert_eq!(
                buf.to_vec::<i32>(c).unwrap(),
                want,
                "int32 max in place p={p} c={c}"
            );
        }
    });
}

#[test]
fn default_selection_runs_the_kernel_p2() {
    default_selection_runs_the_kernel(2);
}
#[test]
fn default_selection_runs_the_kernel_p3() {
    default_selection_runs_the_kernel(3);
}
#[test]
fn default_selection_runs_the_kernel_p4() {
    default_selection_runs_the_kernel(4);
}
#[test]
fn default_selection_runs_the_kernel_p5() {
    default_selection_runs_the_kernel(5);
}
#[test]
fn default_selection_runs_the_kernel_p8() {
    default_selection_runs_the_kernel(8);
}

/// Many ops enqueued before one synchronize: ranks drift apart by whole
/// ops, so the boards' two entries are reused while peers still run the
/// previous op; every round's result must still be its own.
#[test]
fn back_to_back_ops_without_synchronizing() {
    for p in [2u32, 3, 5] {
        let comms = comms(p, &[]);
        run_ranks(p, Duration::from_secs(60), move |r| {
            let comm = &comms[r as usize];
            let s = comm.create_stream();
            let c = 5;
            let rounds = 200;
            let bufs = round_buffers(r, c, rounds);
            for k in 0..rounds {
                sum_round(comm, &bufs, k, c, &s);
            }
            s.synchronize().unwrap();
            for (k, recv) in bufs.1.iter().enumerate() {
                let got = recv.to_vec::<f32>(c).unwrap();
                assert_eq!(got, rank_order_sum(p, c, k), "p={p} round {k} rank {r}");
            }
        });
    }
}

/// A rank far ahead of its peer stops queueing: once twice the ops the
/// boards let it publish ahead are outstanding, its launch drives the
/// stream instead, so it runs at most that far ahead and its queue (and
/// heap) stays bounded; every result is still exact. Small payloads (up
/// to 72 bytes, in the boards' 256 header slots) may run 512 ops ahead,
/// larger ones (in the 16 data entries) 32.
#[test]
fn a_rank_far_ahead_is_held_back_instead_of_queueing_without_bound() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    // (floats per op, rounds, how far rank 0 gets before rank 1 starts)
    for (c, rounds, held_at) in [(3usize, 600usize, 512usize), (100, 100, 32)] {
        let comms = comms(2, &[]);
        let launched = Arc::new(AtomicUsize::new(0));
        let peer_started = Arc::new(AtomicBool::new(false));
        let (l, started) = (launched.clone(), peer_started.clone());
        run_ranks(2, Duration::from_secs(60), move |r| {
            let comm = &comms[r as usize];
            let s = comm.create_stream();
            let bufs = round_buffers(r, c, rounds);
            if r == 0 {
                for k in 0..rounds {
                    sum_round(comm, &bufs, k, c, &s);
                    if !started.load(Ordering::SeqCst) {
                        l.store(k + 1, Ordering::SeqCst);
                    }
                }
            } else {
                // let rank 0 run ahead while this rank has launched nothing
                std::thread::sleep(Duration::from_millis(300));
                started.store(true, Ordering::SeqCst);
                for k in 0..rounds {
                    sum_round(comm, &bufs, k, c, &s);
                }
            }
            s.synchronize().unwrap();
            for (k, recv) in bufs.1.iter().enumerate() {
                let got = recv.to_vec::<f32>(c).unwrap();
                assert_eq!(got, rank_order_sum(2, c, k), "round {k} rank {r}");
            }
        });
        let ahead = launched.load(Ordering::SeqCst);
        assert!(
            (held_at..=held_at + 2).contains(&ahead),
            "{c} floats: rank 0 launched {ahead} ops before rank 1 launched any \
             (expected it held at {held_at}-{})",
            held_at + 1
        );
    }
}

/// The rank that launches last finds every peer's part published and
/// completes the op inside the launch: nothing queued, its buffers never
/// pinned, the result there before any synchronize. The ranks that
/// launched earlier complete it at their next synchronize. Launch order
/// is forced: rank 0 first, then 1, ..., each after the previous one's
/// launch returned.
#[test]
fn the_last_rank_to_launch_completes_the_op_inside_the_launch() {
    use std::sync::atomic::{AtomicU32, Ordering};
    for p in [2u32, 4] {
        let comms = comms(p, &[]);
        let turn = Arc::new(AtomicU32::new(0));
        run_ranks(p, Duration::from_secs(60), move |r| {
            let comm = &comms[r as usize];
            let s = comm.create_stream();
            let c = 6;
            for round in 0..3 {
                let send = mem_f32(&(0..c).map(|i| fval(r, i, round)).collect::<Vec<_>>());
                let recv = DeviceMem::alloc(c * 4).unwrap();
                let base = round as u32 * p;
                while turn.load(Ordering::Acquire) != base + r {
                    std::thread::yield_now();
                }
                comm.all_reduce_raw(&send, &recv, c as u64, DataType::Fp32, ReduceOp::Sum, &s)
                    .unwrap();
                if r == p - 1 {
                    assert!(
                        s.query(),
                        "p={p} round {round}: the last launcher queued its kernel"
                    );
                    assert_eq!(recv.tasks_in_flight(), 0);
                    assert_eq!(send.tasks_in_flight(), 0);
                    // readable without synchronizing: nothing holds it
                    let got = recv.to_vec::<f32>(c).unwrap();
                    assert_eq!(got, rank_order_sum(p, c, round), "p={p} round {round}");
                } else {
                    assert!(
                        !s.query(),
                        "p={p} round {round} rank {r}: completed before its peers launched"
                    );
                    assert!(
                        recv.tasks_in_flight() > 0,
                        "a queued kernel pins its output"
                    );
                }
                turn.fetch_add(1, Ordering::AcqRel);
                s.synchronize().unwrap();
                assert_eq!(recv.to_vec::<f32>(c).unwrap(), rank_order_sum(p, c, round));
                assert_eq!(comm.communicator().last_executor().as_deref(), Some(AIV));
                // the next round starts when every rank is done with this one
                while turn.load(Ordering::Acquire) < base + p {
                    std::thread::yield_now();
                }
            }
        });
    }
}

/// Kernels queued behind a pending one publish ahead when no earlier
/// kernel writes their input: after rank 0 launched five independent ops,
/// rank 1 completes every one of its five inside its launch. A chain of
/// in-place ops (each reading what the previous one writes) must not
/// publish ahead: rank 1's second launch then waits, and every result of
/// the chain is still exact.
#[test]
fn independent_kernels_publish_ahead_and_dependent_ones_wait() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let comms = comms(2, &[]);
    let turn = Arc::new(AtomicU32::new(0));
    run_ranks(2, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let c = 3;
        let ops = 5;
        let wait_for = |t: u32| {
            while turn.load(Ordering::Acquire) < t {
                std::thread::yield_now();
            }
        };
        // independent: own send and recv buffers per op
        let bufs = round_buffers(r, c, ops);
        wait_for(r);
        for k in 0..ops {
            sum_round(comm, &bufs, k, c, &s);
            if r == 1 {
                assert!(s.query(), "op {k} did not complete inside rank 1's launch");
            }
        }
        turn.fetch_add(1, Ordering::AcqRel);
        s.synchronize().unwrap();
        for (k, recv) in bufs.1.iter().enumerate() {
            assert_eq!(
                recv.to_vec::<f32>(c).unwrap(),
                rank_order_sum(2, c, k),
                "rank {r} op {k}"
            );
        }
        wait_for(2);
        // dependent: in place on one buffer, so op k reads op k-1's output
        let buf = DeviceMem::alloc(c * 4).unwrap();
        buf.copy_from_host(&vec![r as i32 + 1; c]).unwrap();
        wait_for(2 + r);
        for k in 0..ops {
            comm.all_reduce_raw(&buf, &buf, c as u64, DataType::Int32, ReduceOp::Sum, &s)
                .unwrap();
            if r == 1 && k == 1 {
                assert!(
                    !s.query(),
                    "an op reading a pending op's output published ahead"
                );
            }
        }
        turn.fetch_add(1, Ordering::AcqRel);
        // rank 0 drives its queue (publishing op 1 in its turn) only once
        // rank 1 has launched everything, so rank 1's second launch
        // cannot have found op 1 published for a legitimate reason
        wait_for(4);
        s.synchronize().unwrap();
        // 1 + 2 = 3, then doubled by every further op
        assert_eq!(
            buf.to_vec::<i32>(c).unwrap(),
            vec![3 << (ops - 1); c],
            "rank {r}"
        );
    });
}

#[test]
fn larger_ops_and_other_hosts_do_not_take_the_kernel() {
    // one byte more than a board entry carries: another executor
    let comms2 = comms(2, &[]);
    run_ranks(2, Duration::from_secs(60), move |r| {
        let comm = &comms2[r as usize];
        let s = comm.create_stream();
        let c = AIV_MAX_BYTES / 4 + 1;
        let send = mem_f32(&vec![1.0; c]);
        let recv = DeviceMem::alloc(c * 4).unwrap();
        comm.all_reduce_raw(&send, &recv, c as u64, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize().unwrap();
        assert_ne!(comm.communicator().last_executor().as_deref(), Some(AIV));
        assert_eq!(recv.to_vec::<f32>(c).unwrap(), vec![2.0; c]);
    });
    // off by configuration
    let comms2 = comms(2, &[("HCCL_RS_AIV_MAX_BYTES", "off")]);
    run_ranks(2, Duration::from_secs(60), move |r| {
        let comm = &comms2[r as usize];
        let s = comm.create_stream();
        let send = mem_f32(&[1.5]);
        let recv = DeviceMem::alloc(4).unwrap();
        comm.all_reduce_raw(&send, &recv, 1, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize().unwrap();
        assert_ne!(comm.communicator().last_executor().as_deref(), Some(AIV));
        assert_eq!(recv.to_vec::<f32>(1).unwrap(), vec![3.0]);
    });
    // a bad value names the variable and the limit
    let too_many = (AIV_MAX_BYTES + 1).to_string();
    let e =
        CommConfig::from_source(&[("HCCL_RS_AIV_MAX_BYTES", too_many.as_str())][..]).unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string().contains("HCCL_RS_AIV_MAX_BYTES")
            && e.to_string().contains(&AIV_MAX_BYTES.to_string()),
        "{e}"
    );
    // ranks declared on two hosts: level 1 cannot reach the boards
    let config = CommConfig::from_source(&[("HCCL_EXEC_TIMEOUT", "20")][..]).unwrap();
    let comms4 = Arc::new(HcclComm::init_all_on_hosts(vec![0, 0, 1, 1], config).unwrap());
    run_ranks(4, Duration::from_secs(60), move |r| {
        let comm = &comms4[r as usize];
        let s = comm.create_stream();
        let send = mem_f32(&[r as f32]);
        let recv = DeviceMem::alloc(4).unwrap();
        comm.all_reduce_raw(&send, &recv, 1, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize().unwrap();
        assert_ne!(comm.communicator().last_executor().as_deref(), Some(AIV));
        assert_eq!(recv.to_vec::<f32>(1).unwrap(), vec![6.0]);
    });
}

#[test]
fn forcing_the_kernel_on_too_large_an_op_is_a_clear_error() {
    let comms = comms(2, &[("HCCL_RS_EXECUTOR", AIV)]);
    run_ranks(2, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let c = AIV_MAX_BYTES / 4 + 1;
        let send = mem_f32(&vec![1.0; c]);
        let recv = DeviceMem::alloc(c * 4).unwrap();
        let e = comm
            .all_reduce_raw(&send, &recv, c as u64, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotSupport, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("at most {AIV_MAX_BYTES} bytes")),
            "{e}"
        );
        // nothing was enqueued: the stream is idle and usable
        s.synchronize().unwrap();
    });
}

#[test]
fn mismatched_counts_fail_the_consistency_check_on_the_kernel() {
    let comms = comms(2, &[]);
    run_ranks(2, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let msg = mismatched_all_reduce(comm, &s, r, 0);
        assert!(msg.contains("parameter count"), "rank {r}: {msg}");
    });
}

#[test]
fn a_peer_that_never_calls_times_out_naming_it() {
    let comms = comms(2, &[("HCCL_EXEC_TIMEOUT", "1")]);
    let comm = &comms[0];
    let s = comm.create_stream();
    let send = mem_f32(&[1.0]);
    let recv = DeviceMem::alloc(4).unwrap();
    comm.all_reduce_raw(&send, &recv, 1, DataType::Fp32, ReduceOp::Sum, &s)
        .unwrap();
    let e = hccl_tests::sync_fails_within(&s, Duration::from_secs(10));
    let msg = e.to_string();
    assert!(
        msg.contains("AIV AllReduce kernel") && msg.contains("peer rank 1"),
        "{msg}"
    );
}

/// A mismatch is reported once: the communicator stays usable, and the
/// next ops (an AllReduce, whose every rank reads every entry, and a
/// Broadcast, whose root checks its peers' entries later) give the right
/// results on every rank, round after round.
#[test]
fn after_a_mismatch_the_next_ops_run_on_every_rank() {
    let p = 3;
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        for round in 0..20u32 {
            mismatched_all_reduce(comm, &s, r, round % p);
            let v = (round * 10 + r) as f32;
            let send = mem_f32(&[v; 4]);
            let recv = DeviceMem::alloc(16).unwrap();
            comm.all_reduce_raw(&send, &recv, 4, DataType::Fp32, ReduceOp::Sum, &s)
                .unwrap();
            let bcast = mem_f32(&[v; 5]);
            comm.broadcast_raw(&bcast, 5, DataType::Fp32, round % p, &s)
                .unwrap();
            s.synchronize().unwrap_or_else(|e| {
                panic!("round {round} rank {r}: the op after a mismatch failed: {e}")
            });
            let sum: f32 = (0..p).map(|q| (round * 10 + q) as f32).sum();
            assert_eq!(
                recv.to_vec::<f32>(4).unwrap(),
                vec![sum; 4],
                "round {round} rank {r}"
            );
            let root_v = (round * 10 + round % p) as f32;
            assert_eq!(
                bcast.to_vec::<f32>(5).unwrap(),
                vec![root_v; 5],
                "round {round} rank {r}"
            );
        }
    });
}

/// A peer's report of a mismatch it found reaches the other ranks over
/// their links; an op after it, still waiting on that peer when its
/// kernel checks its links, must not take that old report for a failure
/// of its own. Rank 0 is late to the op after the mismatch, so the
/// others' kernels wait on it long enough to check their links.
#[test]
fn a_mismatch_reported_by_a_peer_does_not_fail_a_later_op() {
    let p = 3;
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        mismatched_all_reduce(comm, &s, r, 1);
        if r == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let send = mem_f32(&[r as f32 + 1.0; 4]);
        let recv = DeviceMem::alloc(16).unwrap();
        comm.all_reduce_raw(&send, &recv, 4, DataType::Fp32, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize()
            .unwrap_or_else(|e| panic!("rank {r}: the op after a mismatch failed: {e}"));
        assert_eq!(recv.to_vec::<f32>(4).unwrap(), vec![6.0; 4], "rank {r}");
    });
}
