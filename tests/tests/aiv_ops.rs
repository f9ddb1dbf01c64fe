//! AIV kernels of the other primitives (AllGather, ReduceScatter,
//! AllToAll, Broadcast, Reduce, Scatter, Gather), ranks as threads: chosen
//! by default for small ops on one host, exact for every count up to what
//! a board entry carries, for every root, back to back with rotating roots;
//! ops whose per-rank payload does not fit take another executor; a root
//! that differs between ranks fails the consistency check instead of
//! mixing data; a rank that needs none of a peer's data (a Broadcast's
//! root, a Reduce's non-root) still reports that peer's different
//! arguments, at the synchronize; a silent peer times out naming the
//! kernel and the peer.

use hccl_adapter::{DataType, DeviceMem, HcclComm, HcclResult, ReduceOp};
use hccl_algorithm::AIV_MAX_BYTES;
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::Duration;

fn comms(p: u32, env: &[(&str, &str)]) -> Arc<Vec<HcclComm>> {
    hccl_tests::comms_with_env(p, env)
}

/// Element `i` of rank `r`'s input: distinct across ranks and positions.
fn val(r: u32, i: usize) -> i32 {
    (r as i32 + 1) * 100_003 + i as i32 * 7 - 50_000
}

fn mem_i32(v: &[i32]) -> DeviceMem {
    let m = DeviceMem::alloc((v.len() * 4).max(1)).unwrap();
    m.copy_from_host(v).unwrap();
    m
}

fn input(r: u32, n: usize) -> DeviceMem {
    mem_i32(&(0..n).map(|i| val(r, i)).collect::<Vec<_>>())
}

fn read(m: &DeviceMem, n: usize) -> Vec<i32> {
    m.to_vec::<i32>(n).unwrap()
}

/// The primitives with a kernel besides AllReduce.
#[derive(Clone, Copy, Debug)]
enum Op {
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    Scatter,
    Gather,
}

const OPS: [Op; 7] = [
    Op::AllGather,
    Op::ReduceScatter,
    Op::AllToAll,
    Op::Broadcast,
    Op::Reduce,
    Op::Scatter,
    Op::Gather,
];

impl Op {
    fn executor(self) -> String {
        format!("{self:?}MeshAivExecutor")
    }

    /// Whether one rank publishes every rank's block.
    fn publishes_all_blocks(self) -> bool {
        matches!(self, Op::ReduceScatter | Op::AllToAll | Op::Scatter)
    }

    /// The largest count whose payload fits a board entry at `p` ranks.
    fn max_count(self, p: u32) -> usize {
        let per = if self.publishes_all_blocks() {
            p as usize
        } else {
            1
        };
        AIV_MAX_BYTES / 4 / per
    }

    /// Runs the op for `c` elements per block on rank `r` of `p` and checks
    /// the result against a reference computed from `val`.
    fn run_and_check(self, comm: &HcclComm, s: &hccl_adapter::Stream, p: u32, c: usize, root: u32) {
        let r = comm.rank();
        let pc = p as usize * c;
        let d = DataType::Int32;
        let cc = c as u64;
        let sum = |i: usize| (0..p).map(|q| val(q, i)).fold(0i32, i32::wrapping_add);
        let (out, want): (DeviceMem, Vec<i32>) = match self {
            Op::AllGather => {
                let (send, recv) = (input(r, c), DeviceMem::alloc(pc * 4).unwrap());
                comm.all_gather_raw(&send, &recv, cc, d, s).unwrap();
                (recv, (0..pc).map(|i| val((i / c) as u32, i % c)).collect())
            }
            Op::ReduceScatter => {
                let (send, recv) = (input(r, pc), DeviceMem::alloc(c * 4).unwrap());
                comm.reduce_scatter_raw(&send, &recv, cc, d, ReduceOp::Sum, s)
                    .unwrap();
                (recv, (0..c).map(|i| sum(r as usize * c + i)).collect())
            }
            Op::AllToAll => {
                let (send, recv) = (input(r, pc), DeviceMem::alloc(pc * 4).unwrap());
                comm.all_to_all_raw(&send, cc, d, &recv, cc, d, s).unwrap();
                let want = (0..pc)
                    .map(|i| val((i / c) as u32, r as usize * c + i % c))
                    .collect();
                (recv, want)
            }
            Op::Broadcast => {
                let buf = if r == root {
                    input(r, c)
                } else {
                    mem_i32(&vec![-1; c])
                };
                comm.broadcast_raw(&buf, cc, d, root, s).unwrap();
                (buf, (0..c).map(|i| val(root, i)).collect())
            }
            Op::Reduce => {
                let (send, recv) = (input(r, c), mem_i32(&vec![-1; c]));
                comm.reduce_raw(&send, &recv, cc, d, ReduceOp::Sum, root, s)
                    .unwrap();
                // off the root the receive buffer is untouched
                let want = if r == root {
                    (0..c).map(sum).collect()
                } else {
                    vec![-1; c]
                };
                (recv, want)
            }
            Op::Scatter => {
                let send = if r == root {
                    input(r, pc)
                } else {
                    DeviceMem::null()
                };
                let recv = DeviceMem::alloc(c * 4).unwrap();
                comm.scatter_raw(&send, &recv, cc, d, root, s).unwrap();
                (
                    recv,
                    (0..c).map(|i| val(root, r as usize * c + i)).collect(),
                )
            }
            Op::Gather => {
                let send = input(r, c);
                let recv = mem_i32(&vec![-1; pc]);
                comm.gather_raw(&send, &recv, cc, d, root, s).unwrap();
                let want = if r == root {
                    (0..pc).map(|i| val((i / c) as u32, i % c)).collect()
                } else {
                    vec![-1; pc]
                };
                (recv, want)
            }
        };
        s.synchronize().unwrap();
        assert_eq!(
            comm.communicator().last_executor(),
            Some(self.executor()),
            "{self:?} p={p} c={c}"
        );
        assert_eq!(
            read(&out, want.len()),
            want,
            "{self:?} p={p} c={c} root={root} rank {r}"
        );
    }
}

fn every_op_every_count(p: u32) {
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        for op in OPS {
            for c in [1, 3, 17, op.max_count(p)] {
                for root in [0, p - 1] {
                    op.run_and_check(comm, &s, p, c, root);
                }
            }
        }
    });
}

#[test]
fn every_op_every_count_p2() {
    every_op_every_count(2);
}

#[test]
fn every_op_every_count_p3() {
    every_op_every_count(3);
}

#[test]
fn every_op_every_count_p5() {
    every_op_every_count(5);
}

#[test]
fn broadcasts_and_reduces_back_to_back_with_rotating_roots() {
    let p = 4;
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        // 50 different ops, one synchronize
        let rounds: Vec<(DeviceMem, DeviceMem)> = (0..50)
            .map(|k| (input(r + k, 3), DeviceMem::alloc(3 * 4).unwrap()))
            .collect();
        for (k, (send, recv)) in rounds.iter().enumerate() {
            let root = k as u32 % p;
            if k % 2 == 0 {
                comm.broadcast_raw(send, 3, DataType::Int32, root, &s)
                    .unwrap();
            } else {
                comm.reduce_raw(send, recv, 3, DataType::Int32, ReduceOp::Max, root, &s)
                    .unwrap();
            }
        }
        s.synchronize().unwrap();
        for (k, (send, recv)) in rounds.iter().enumerate() {
            let root = k as u32 % p;
            let k = k as u32;
            if k % 2 == 0 {
                let want: Vec<i32> = (0..3).map(|i| val(root + k, i)).collect();
                assert_eq!(read(send, 3), want, "broadcast {k}");
            } else if r == root {
                let want: Vec<i32> = (0..3)
                    .map(|i| (0..p).map(|q| val(q + k, i)).max().unwrap())
                    .collect();
                assert_eq!(read(recv, 3), want, "reduce {k}");
            }
        }
    });
}

#[test]
fn ops_whose_payload_does_not_fit_take_another_executor() {
    let p = 4;
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        // an AllToAll publishes every rank's block: p × c × 4 bytes
        let c = AIV_MAX_BYTES / 4 / p as usize + 1;
        let pc = p as usize * c;
        let (send, recv) = (input(r, pc), DeviceMem::alloc(pc * 4).unwrap());
        comm.all_to_all_raw(
            &send,
            c as u64,
            DataType::Int32,
            &recv,
            c as u64,
            DataType::Int32,
            &s,
        )
        .unwrap();
        s.synchronize().unwrap();
        assert_ne!(
            comm.communicator().last_executor(),
            Some(Op::AllToAll.executor())
        );
        let want: Vec<i32> = (0..pc)
            .map(|i| val((i / c) as u32, r as usize * c + i % c))
            .collect();
        assert_eq!(read(&recv, pc), want);
        // the same count fits an AllGather's entry
        let (send, recv) = (input(r, c), DeviceMem::alloc(pc * 4).unwrap());
        comm.all_gather_raw(&send, &recv, c as u64, DataType::Int32, &s)
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(
            comm.communicator().last_executor(),
            Some(Op::AllGather.executor())
        );
    });
}

#[test]
fn a_root_that_differs_between_ranks_fails_the_consistency_check() {
    let comms = comms(2, &[]);
    run_ranks(2, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let buf = input(r, 4);
        // each rank names itself the root
        comm.broadcast_raw(&buf, 4, DataType::Int32, r, &s).unwrap();
        let e = s.synchronize().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("inconsistent between ranks") && msg.contains("root"),
            "rank {r}: {msg}"
        );
        // nothing of the peer's was written into the buffer
        assert_eq!(read(&buf, 4), (0..4).map(|i| val(r, i)).collect::<Vec<_>>());
    });
}

/// Ops 1..=3 agree on every rank; op 4 is issued by rank `odd` with a
/// different count. Every rank synchronizes once at the end.
fn rooted_ops_then_one_mismatch(op: Op, odd: u32) -> Vec<Result<(), hccl_adapter::HcclError>> {
    let p = 3;
    let comms = comms(p, &[]);
    let out = Arc::new(std::sync::Mutex::new(vec![None; p as usize]));
    let o = out.clone();
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        let bufs: Vec<_> = (0..4)
            .map(|_| (input(r, 12), DeviceMem::alloc(12 * 4).unwrap()))
            .collect();
        for (i, (send, recv)) in bufs.iter().enumerate() {
            let c = if i == 3 && r == odd { 2 } else { 4 };
            match op {
                Op::Broadcast => comm.broadcast_raw(send, c, DataType::Int32, 0, &s),
                Op::Reduce => comm.reduce_raw(send, recv, c, DataType::Int32, ReduceOp::Sum, 0, &s),
                Op::Scatter => comm.scatter_raw(send, recv, c, DataType::Int32, 0, &s),
                Op::Gather => comm.gather_raw(send, recv, c, DataType::Int32, 0, &s),
                _ => unreachable!("rooted ops only"),
            }
            .unwrap();
        }
        o.lock().unwrap()[r as usize] = Some(s.synchronize());
    });
    let v = out
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.clone().expect("every rank ran"))
        .collect();
    v
}

#[test]
fn a_rank_that_needs_no_data_from_a_peer_still_reports_its_different_arguments() {
    // (op, the rank issuing a different op 4, ranks that read its entry
    // for their output and so see it in the kernel; the others see it at
    // the synchronize)
    for (op, odd) in [
        (Op::Broadcast, 2), // the root needs nothing; rank 1 needs only the root's
        (Op::Scatter, 1),
        (Op::Reduce, 2), // the root needs everyone's; rank 1 needs nothing
        (Op::Gather, 1),
        (Op::Broadcast, 0), // the root differs: every non-root sees it
    ] {
        let res = rooted_ops_then_one_mismatch(op, odd);
        for (r, res) in res.iter().enumerate() {
            let r = r as u32;
            // a rank compares its descriptor with every peer's: the odd rank
            // differs from both others, the others differ from the odd one
            let e = res
                .as_ref()
                .expect_err(&format!("{op:?}: rank {r} must fail"));
            assert_eq!(e.code(), HcclResult::EPara, "{op:?} rank {r}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("inconsistent between ranks") && msg.contains("parameter count"),
                "{op:?} rank {r}: {msg}"
            );
            let (mine, theirs) = if r == odd { (2, 4) } else { (4, 2) };
            assert!(
                msg.contains(&format!("local end {mine}, remote end {theirs}")),
                "{op:?} rank {r}: {msg}"
            );
        }
    }
}

#[test]
fn a_root_runs_ahead_of_its_peers_and_every_result_is_exact() {
    // the root issues 40 broadcasts and scatters (more than a board's
    // entries) before the peers issue any: it completes what its board
    // allows, the peers catch up, and every buffer holds its op's data
    let p = 3;
    let comms = comms(p, &[]);
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &comms[r as usize];
        let s = comm.create_stream();
        if r != 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        let n = 40;
        let bufs: Vec<_> = (0..n)
            .map(|i| {
                (
                    input(r + 10 * i as u32, 6),
                    DeviceMem::alloc(2 * 4).unwrap(),
                )
            })
            .collect();
        for (i, (send, recv)) in bufs.iter().enumerate() {
            if i % 2 == 0 {
                comm.broadcast_raw(send, 6, DataType::Int32, 0, &s).unwrap();
            } else {
                comm.scatter_raw(send, recv, 2, DataType::Int32, 0, &s)
                    .unwrap();
            }
        }
        s.synchronize().unwrap();
        for (i, (send, recv)) in bufs.iter().enumerate() {
            let root_in = |k: usize| val(10 * i as u32, k);
            if i % 2 == 0 {
                assert_eq!(
                    read(send, 6),
                    (0..6).map(root_in).collect::<Vec<_>>(),
                    "op {i}"
                );
            } else {
                let want: Vec<i32> = (0..2).map(|k| root_in(r as usize * 2 + k)).collect();
                assert_eq!(read(recv, 2), want, "rank {r} op {i}");
            }
        }
    });
}

/// Issue 30: a root 300 rooted ops (past the 256 header slots) ahead of
/// peers that sleep, at every size class, p = 2..9 (threads; the root is
/// the last rank, then rank 0), every result exact.
#[test]
fn a_root_300_ops_ahead_of_sleeping_peers_at_p_2_to_9() {
    for p in 2..=9u32 {
        for root in [p - 1, 0] {
            let comms = comms(p, &[]);
            run_ranks(p, Duration::from_secs(120), move |r| {
                hccl_tests::root_ahead::run(&comms[r as usize], root, Duration::from_millis(100))
                    .unwrap_or_else(|e| panic!("{e}"));
            });
        }
    }
}

#[test]
fn a_gather_whose_peer_never_calls_times_out_naming_it() {
    let comms = comms(3, &[("HCCL_EXEC_TIMEOUT", "1")]);
    let comm = &comms[0];
    let s = comm.create_stream();
    let send = input(0, 2);
    let recv = DeviceMem::alloc(6 * 4).unwrap();
    comm.gather_raw(&send, &recv, 2, DataType::Int32, 0, &s)
        .unwrap();
    let e = hccl_tests::sync_fails_within(&s, Duration::from_secs(10));
    assert_eq!(e.code(), HcclResult::ETimeout, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("AIV Gather kernel") && msg.contains("peer rank 1"),
        "{msg}"
    );
}
