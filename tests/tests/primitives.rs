//! Every primitive through every layer, ranks as threads, p ∈ {2,3,4,5,8},
//! with the default selection (mesh for small, ring for large) and with
//! each applicable executor forced; results checked against references
//! computed here.

use hccl_adapter::{CommConfig, DataType, DeviceMem, HcclComm, HcclResult, ReduceOp};
use hccl_tests::run_ranks;
use std::sync::Arc;
use std::time::Duration;

/// A distinct value per (rank, element) for data-movement checks.
fn val(rank: u32, i: usize) -> i32 {
    (rank as i32 + 1) * 100_000 + i as i32
}

fn mem(data: &[i32]) -> DeviceMem {
    let m = DeviceMem::alloc(data.len() * 4).unwrap();
    m.copy_from_host(data).unwrap();
    m
}

fn read(m: &DeviceMem, n: usize) -> Vec<i32> {
    m.to_vec::<i32>(n).unwrap()
}

fn config(executor: Option<&str>) -> CommConfig {
    let mut env = vec![("HCCL_BUFFSIZE", "1"), ("HCCL_EXEC_TIMEOUT", "20")];
    if let Some(e) = executor {
        env.push(("HCCL_RS_EXECUTOR", e));
    }
    CommConfig::from_source(&env[..]).unwrap()
}

/// Counts: small, not divisible by p, and larger than one CCL buffer
/// (1 MiB) so every op-base loop runs several rounds.
const COUNTS: [usize; 3] = [1, 1003, 300_001];

fn check_all(comm: &HcclComm, only: Option<&str>) {
    let (r, p) = (comm.rank(), comm.size());
    let (ru, pu) = (r as usize, p as usize);
    let s = comm.create_stream();
    let t = DataType::Int32;
    let want = |name: &str| only.is_none_or(|o| o == name);
    for c in COUNTS {
        if want("AllGather") {
            let send = mem(&(0..c).map(|i| val(r, i)).collect::<Vec<_>>());
            let recv = DeviceMem::alloc(pu * c * 4).unwrap();
            comm.all_gather_raw(&send, &recv, c as u64, t, &s).unwrap();
            s.synchronize().unwrap();
            let expect: Vec<i32> = (0..p)
                .flat_map(|q| (0..c).map(move |i| val(q, i)))
                .collect();
            assert!(read(&recv, pu * c) == expect, "allgather p={p} c={c}");
        }
        if want("ReduceScatter") {
            let send = mem(&(0..pu * c).map(|i| val(r, i) % 1000).collect::<Vec<_>>());
            let recv = DeviceMem::alloc(c * 4).unwrap();
            comm.reduce_scatter_raw(&send, &recv, c as u64, t, ReduceOp::Sum, &s)
                .unwrap();
            s.synchronize().unwrap();
            let expect: Vec<i32> = (0..c)
                .map(|i| (0..p).map(|q| val(q, ru * c + i) % 1000).sum())
                .collect();
            assert!(read(&recv, c) == expect, "reducescatter p={p} c={c}");
        }
        if want("AllReduce") {
            let send = mem(&(0..c).map(|i| val(r, i) % 977).collect::<Vec<_>>());
            let recv = DeviceMem::alloc(c * 4).unwrap();
            comm.all_reduce_raw(&send, &recv, c as u64, t, ReduceOp::Max, &s)
                .unwrap();
            s.synchronize().unwrap();
            let expect: Vec<i32> = (0..c)
                .map(|i| (0..p).map(|q| val(q, i) % 977).max().unwrap())
                .collect();
            assert!(read(&recv, c) == expect, "allreduce p={p} c={c}");
        }
        let root = (c as u32 + 1) % p;
        if want("Broadcast") {
            let buf = mem(&(0..c)
                .map(|i| if r == root { val(r, i) } else { -1 })
                .collect::<Vec<_>>());
            comm.broadcast_raw(&buf, c as u64, t, root, &s).unwrap();
            s.synchronize().unwrap();
            assert!(
                read(&buf, c) == (0..c).map(|i| val(root, i)).collect::<Vec<_>>(),
                "broadcast p={p} c={c}"
            );
        }
        if want("Reduce") {
            let send = mem(&(0..c).map(|i| val(r, i) % 13 - 6).collect::<Vec<_>>());
            let recv = if r == root {
                DeviceMem::alloc(c * 4).unwrap()
            } else {
                DeviceMem::null()
            };
            comm.reduce_raw(&send, &recv, c as u64, t, ReduceOp::Prod, root, &s)
                .unwrap();
            s.synchronize().unwrap();
            if r == root {
                let expect: Vec<i32> = (0..c)
                    .map(|i| (0..p).fold(1i32, |a, q| a.wrapping_mul(val(q, i) % 13 - 6)))
                    .collect();
                assert!(read(&recv, c) == expect, "reduce p={p} c={c}");
            }
        }
        if want("Scatter") {
            let send = if r == root {
                mem(&(0..pu * c).map(|i| val(r, i)).collect::<Vec<_>>())
            } else {
                DeviceMem::null()
            };
            let recv = DeviceMem::alloc(c * 4).unwrap();
            comm.scatter_raw(&send, &recv, c as u64, t, root, &s)
                .unwrap();
            s.synchronize().unwrap();
            assert!(
                read(&recv, c) == (0..c).map(|i| val(root, ru * c + i)).collect::<Vec<_>>(),
                "scatter p={p} c={c}"
            );
        }
        if want("Gather") {
            let send = mem(&(0..c).map(|i| val(r, i)).collect::<Vec<_>>());
            let recv = if r == root {
                DeviceMem::alloc(pu * c * 4).unwrap()
            } else {
                DeviceMem::null()
            };
            comm.gather_raw(&send, &recv, c as u64, t, root, &s)
                .unwrap();
            s.synchronize().unwrap();
            if r == root {
                let expect: Vec<i32> = (0..p)
                    .flat_map(|q| (0..c).map(move |i| val(q, i)))
                    .collect();
                assert!(read(&recv, pu * c) == expect, "gather p={p} c={c}");
            }
        }
        if want("AllToAll") {
            let send = mem(&(0..pu * c).map(|i| val(r, i)).collect::<Vec<_>>());
            let recv = DeviceMem::alloc(pu * c * 4).unwrap();
            comm.all_to_all_raw(&send, c as u64, t, &recv, c as u64, t, &s)
                .unwrap();
            s.synchronize().unwrap();
            let expect: Vec<i32> = (0..p)
                .flat_map(|q| (0..c).map(move |i| val(q, ru * c + i)))
                .collect();
            assert!(read(&recv, pu * c) == expect, "alltoall p={p} c={c}");
        }
    }
    // V variants: uneven blocks, one of them empty
    let vc = |q: u32| ((q as usize * 7919) % 5000) * (q as usize % 3);
    if want("AllGatherV") {
        let counts: Vec<u64> = (0..p).map(|q| vc(q) as u64).collect();
        let displs: Vec<u64> = counts
            .iter()
            .scan(0, |a, c| {
                let d = *a;
                *a += c + 3;
                Some(d)
            })
            .collect();
        let total = (displs[pu - 1] + counts[pu - 1]) as usize;
        let send = mem(&(0..vc(r)).map(|i| val(r, i)).collect::<Vec<_>>());
        let recv = mem(&vec![-7; total]);
        comm.all_gather_v_raw(&send, vc(r) as u64, &recv, &counts, &displs, t, &s)
            .unwrap();
        s.synchronize().unwrap();
        let got = read(&recv, total);
        for q in 0..p {
            let d = displs[q as usize] as usize;
            assert!(
                got[d..d + vc(q)] == (0..vc(q)).map(|i| val(q, i)).collect::<Vec<_>>(),
                "allgatherv block {q}"
            );
        }
        assert!(
            p < 2 || got[displs[1] as usize - 3..displs[1] as usize] == [-7, -7, -7],
            "gaps untouched"
        );
    }
    if want("ReduceScatterV") {
        let counts: Vec<u64> = (0..p).map(|q| vc(q) as u64).collect();
        let displs: Vec<u64> = counts
            .iter()
            .scan(0, |a, c| {
                let d = *a;
                *a += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().sum::<u64>() as usize;
        let send = mem(&(0..total).map(|i| val(r, i) % 1000).collect::<Vec<_>>());
        let recv = DeviceMem::alloc(vc(r).max(1) * 4).unwrap();
        comm.reduce_scatter_v_raw(
            &send,
            &counts,
            &displs,
            &recv,
            vc(r) as u64,
            t,
            ReduceOp::Sum,
            &s,
        )
        .unwrap();
        s.synchronize().unwrap();
        let d = displs[ru] as usize;
        let expect: Vec<i32> = (0..vc(r))
            .map(|i| (0..p).map(|q| val(q, d + i) % 1000).sum())
            .collect();
        assert!(read(&recv, vc(r)) == expect, "reducescatterv p={p}");
    }
    if want("AllToAllV") {
        // rank a sends m(a, b) elements to rank b
        let m = |a: u32, b: u32| ((a as usize * 31 + b as usize * 17) % 7) * 40_000;
        let sc: Vec<u64> = (0..p).map(|q| m(r, q) as u64).collect();
        let sd: Vec<u64> = sc
            .iter()
            .scan(0, |a, c| {
                let d = *a;
                *a += c;
                Some(d)
            })
            .collect();
        let rc: Vec<u64> = (0..p).map(|q| m(q, r) as u64).collect();
        let rd: Vec<u64> = rc
            .iter()
            .scan(0, |a, c| {
                let d = *a;
                *a += c;
                Some(d)
            })
            .collect();
        let (st, rt) = (
            sc.iter().sum::<u64>() as usize,
            rc.iter().sum::<u64>() as usize,
        );
        let send = mem(&(0..st).map(|i| val(r, i)).collect::<Vec<_>>());
        let recv = DeviceMem::alloc(rt.max(1) * 4).unwrap();
        comm.all_to_all_v_raw(&send, &sc, &sd, t, &recv, &rc, &rd, t, &s)
            .unwrap();
        s.synchronize().unwrap();
        let got = read(&recv, rt);
        for q in 0..p {
            // rank q's block for me starts at its send displacement for me
            let qsd: usize = (0..r).map(|b| m(q, b)).sum();
            let d = rd[q as usize] as usize;
            assert!(
                got[d..d + m(q, r)] == (qsd..qsd + m(q, r)).map(|i| val(q, i)).collect::<Vec<_>>(),
                "alltoallv from {q}"
            );
        }
    }
    if only.is_none() {
        // send/recv around the ring: even ranks send first, odd ranks receive first
        let c = 300_001;
        let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
        let out = mem(&(0..c).map(|i| val(r, i)).collect::<Vec<_>>());
        let inb = DeviceMem::alloc(c * 4).unwrap();
        if r % 2 == 0 {
            comm.send_raw(&out, c as u64, t, next, &s).unwrap();
            comm.recv_raw(&inb, c as u64, t, prev, &s).unwrap();
        } else {
            comm.recv_raw(&inb, c as u64, t, prev, &s).unwrap();
            comm.send_raw(&out, c as u64, t, next, &s).unwrap();
        }
        s.synchronize().unwrap();
        assert!(
            read(&inb, c) == (0..c).map(|i| val(prev, i)).collect::<Vec<_>>(),
            "send/recv p={p}"
        );
        comm.barrier(&s).unwrap();
        s.synchronize().unwrap();
    }
}

fn run(p: u32, executor: Option<&'static str>) {
    let comms = Arc::new(HcclComm::init_all_with(p, config(executor)).unwrap());
    run_ranks(p, Duration::from_secs(120), move |r| {
        check_all(
            &comms[r as usize],
            executor.map(|e| {
                // the op name prefix of the forced executor selects which checks run
                let op = e
                    .trim_end_matches("Executor")
                    .trim_end_matches("Mesh")
                    .trim_end_matches("Ring")
                    .trim_end_matches("RHD")
                    .trim_end_matches("Star")
                    .trim_end_matches("PairWise")
                    .trim_end_matches("NHR")
                    .trim_end_matches("NB")
                    .trim_end_matches("Direct");
                Box::leak(op.to_string().into_boxed_str()) as &str
            }),
        )
    });
}

#[test]
fn default_selection_p2() {
    run(2, None);
}
#[test]
fn default_selection_p3() {
    run(3, None);
}
#[test]
fn default_selection_p4() {
    run(4, None);
}
#[test]
fn default_selection_p5() {
    run(5, None);
}
#[test]
fn default_selection_p8() {
    run(8, None);
}

#[test]
fn every_executor_forced() {
    let names = [
        "AllReduceMeshExecutor",
        "AllReduceRingExecutor",
        "AllReduceRHDExecutor",
        "AllGatherMeshExecutor",
        "AllGatherRingExecutor",
        "ReduceScatterMeshExecutor",
        "ReduceScatterRingExecutor",
        "AllGatherVMeshExecutor",
        "ReduceScatterVMeshExecutor",
        "BroadcastMeshExecutor",
        "BroadcastRingExecutor",
        "ReduceMeshExecutor",
        "ScatterMeshExecutor",
        "GatherMeshExecutor",
        "AllToAllMeshExecutor",
        "AllToAllVMeshExecutor",
        "AllToAllPairWiseExecutor",
        "AllToAllVPairWiseExecutor",
    ];
    for p in [2u32, 3, 5] {
        for name in names {
            run(p, Some(name));
        }
    }
}

/// The rooted ring, star and RHD executors, each forced, on every rank
/// count the issue names (one test per rank count so they run in parallel).
fn rooted_ring_star_rhd_forced(p: u32) {
    let names = [
        "ReduceRingExecutor",
        "ScatterRingExecutor",
        "GatherRingExecutor",
        "BroadcastStarExecutor",
        "ReduceStarExecutor",
        "ScatterStarExecutor",
        "GatherStarExecutor",
        "AllGatherRHDExecutor",
        "ReduceScatterRHDExecutor",
        "BroadcastRHDExecutor",
        "ReduceRHDExecutor",
    ];
    for name in names {
        run(p, Some(name));
    }
}

#[test]
fn rooted_ring_star_rhd_forced_p2() {
    rooted_ring_star_rhd_forced(2);
}
#[test]
fn rooted_ring_star_rhd_forced_p3() {
    rooted_ring_star_rhd_forced(3);
}
#[test]
fn rooted_ring_star_rhd_forced_p4() {
    rooted_ring_star_rhd_forced(4);
}
#[test]
fn rooted_ring_star_rhd_forced_p5() {
    rooted_ring_star_rhd_forced(5);
}
#[test]
fn rooted_ring_star_rhd_forced_p8() {
    rooted_ring_star_rhd_forced(8);
}

/// The NHR and NB executors, each forced, on every rank count the issue
/// names.
fn nhr_nb_forced(p: u32) {
    for algo in ["NHR", "NB"] {
        for op in [
            "AllReduce",
            "AllGather",
            "ReduceScatter",
            "Broadcast",
            "Scatter",
        ] {
            let name = format!("{op}{algo}Executor");
            run(p, Some(Box::leak(name.into_boxed_str())));
        }
    }
}

#[test]
fn nhr_nb_forced_p2() {
    nhr_nb_forced(2);
}
#[test]
fn nhr_nb_forced_p3() {
    nhr_nb_forced(3);
}
#[test]
fn nhr_nb_forced_p4() {
    nhr_nb_forced(4);
}
#[test]
fn nhr_nb_forced_p5() {
    nhr_nb_forced(5);
}
#[test]
fn nhr_nb_forced_p8() {
    nhr_nb_forced(8);
}

/// The direct-read executors (peers' user buffers read with cross-memory
/// attach), each forced, on every rank count the issue names. Where this
/// host forbids cross-memory attach the forced executor must fail clearly
/// instead (checked by `direct_forced_without_cma_is_a_clear_error`).
fn direct_forced(p: u32) {
    if !hccl_platform::cross_memory_attach_permitted() {
        eprintln!("cross-memory attach not permitted here: direct executors not run");
        return;
    }
    for op in [
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "AllToAll",
        "Broadcast",
        "Reduce",
        "Scatter",
        "Gather",
    ] {
        let name = format!("{op}DirectExecutor");
        run(p, Some(Box::leak(name.into_boxed_str())));
    }
}

#[test]
fn direct_forced_p2() {
    direct_forced(2);
}
#[test]
fn direct_forced_p3() {
    direct_forced(3);
}
#[test]
fn direct_forced_p4() {
    direct_forced(4);
}
#[test]
fn direct_forced_p5() {
    direct_forced(5);
}
#[test]
fn direct_forced_p8() {
    direct_forced(8);
}

#[test]
fn a_forced_executor_for_another_op_is_a_clear_error() {
    for (name, op) in [
        ("ScatterRingExecutor", "scatter"),
        ("AllGatherNHRExecutor", "allgather"),
        ("ScatterNBExecutor", "scatter"),
    ] {
        let comms = HcclComm::init_all_with(3, config(Some(name))).unwrap();
        let s = comms[0].create_stream();
        let m = DeviceMem::alloc(64).unwrap();
        let e = comms[0]
            .all_reduce_raw(&m, &m, 4, DataType::Int32, ReduceOp::Sum, &s)
            .unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotSupport);
        let want = format!("{name} runs {op}, not allreduce");
        assert!(e.to_string().contains(&want), "{e}");
        assert!(s.query(), "nothing enqueued");
    }
}

#[test]
fn rooted_and_peer_arguments_are_checked() {
    let comms = HcclComm::init_all_with(3, config(None)).unwrap();
    let s = comms[0].create_stream();
    let m = DeviceMem::alloc(64).unwrap();
    let e = comms[0]
        .broadcast_raw(&m, 4, DataType::Int32, 3, &s)
        .unwrap_err();
    assert_eq!(e.code(), HcclResult::EPara);
    assert!(
        e.to_string().contains("root 3 is out of range for 3 ranks"),
        "{e}"
    );
    let e = comms[0]
        .send_raw(&m, 4, DataType::Int32, 0, &s)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("cannot send to or receive from itself"),
        "{e}"
    );
    let e = comms[0]
        .recv_raw(&m, 4, DataType::Int32, 9, &s)
        .unwrap_err();
    assert!(e.to_string().contains("peer rank 9 is out of range"), "{e}");
    let e = comms[0]
        .all_gather_v_raw(&m, 1, &m, &[1, 1], &[0, 1], DataType::Int32, &s)
        .unwrap_err();
    assert!(
        e.to_string().contains("must have one entry per rank (3)"),
        "{e}"
    );
    let e = comms[0]
        .all_to_all_raw(&m, 2, DataType::Int32, &m, 3, DataType::Int32, &s)
        .unwrap_err();
    assert!(e.to_string().contains("must match"), "{e}");
    // rank 0's input must be the first 16 bytes of the output to run in place
    let e = comms[0]
        .all_gather_raw(&m.range(4, 16).unwrap(), &m, 4, DataType::Int32, &s)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("sendBuf and recvBuf overlap but not in place"),
        "{e}"
    );
    let e = comms[0]
        .all_to_all_raw(&m, 1, DataType::Int32, &m, 1, DataType::Int32, &s)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("sendBuf and recvBuf overlap, which this op does not allow"),
        "{e}"
    );
    let big = DeviceMem::alloc(64).unwrap();
    let e = comms[0]
        .all_gather_raw(&m, &big, 8, DataType::Int32, &s)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("recvBuf holds 64 bytes but the op needs 96"),
        "{e}"
    );
    assert!(s.query(), "nothing enqueued");
}

/// Declared topologies (host of each rank) for the hierarchical
/// executors: p ∈ {2, 3, 4, 5, 8}, uneven hosts and hosts whose ranks are
/// not numbered contiguously included.
const TOPOLOGIES: &[&[u32]] = &[
    &[0, 1],
    &[0, 1, 1],
    &[0, 0, 1, 1],
    &[0, 1, 1, 1],
    &[0, 0, 1, 1, 1],
    &[0, 1, 0, 1, 1],
    &[0, 0, 0, 1, 1, 1, 2, 2],
    &[0, 1, 1, 1, 1, 1, 1, 1],
];

/// Runs the checks of `op` with `executor` forced on every declared topology.
fn run_hier(executor: &'static str, op: &'static str) {
    for &map in TOPOLOGIES {
        let p = map.len() as u32;
        let comms =
            Arc::new(HcclComm::init_all_on_hosts(map.to_vec(), config(Some(executor))).unwrap());
        run_ranks(p, Duration::from_secs(120), move |r| {
            check_all(&comms[r as usize], Some(op));
            let last = comms[r as usize].communicator().last_executor();
            assert_eq!(last.as_deref(), Some(executor));
        });
    }
}

#[test]
fn all_reduce_two_level() {
    run_hier("AllReduceTwoLevelExecutor", "AllReduce");
}
#[test]
fn all_reduce_two_level_rhd() {
    run_hier("AllReduceTwoLevelRHDExecutor", "AllReduce");
}
#[test]
fn all_reduce_two_level_nhr() {
    run_hier("AllReduceTwoLevelNHRExecutor", "AllReduce");
}
#[test]
fn all_reduce_two_level_nb() {
    run_hier("AllReduceTwoLevelNBExecutor", "AllReduce");
}
#[test]
fn all_reduce_ahc_nhr() {
    run_hier("AllReduceAHCNHRExecutor", "AllReduce");
}
#[test]
fn all_reduce_ahc_nb() {
    run_hier("AllReduceAHCNBExecutor", "AllReduce");
}
#[test]
fn all_gather_two_level() {
    run_hier("AllGatherTwoLevelExecutor", "AllGather");
}
#[test]
fn reduce_scatter_two_level() {
    run_hier("ReduceScatterTwoLevelExecutor", "ReduceScatter");
}
#[test]
fn all_reduce_ahc() {
    run_hier("AllReduceAHCExecutor", "AllReduce");
}
#[test]
fn reduce_scatter_ahc() {
    run_hier("ReduceScatterAHCExecutor", "ReduceScatter");
}
#[test]
fn all_reduce_pipeline() {
    run_hier("AllReducePipelineExecutor", "AllReduce");
}
#[test]
fn all_gather_pipeline() {
    run_hier("AllGatherPipelineExecutor", "AllGather");
}
#[test]
fn reduce_scatter_pipeline() {
    run_hier("ReduceScatterPipelineExecutor", "ReduceScatter");
}

/// Without a forced executor or HCCL_ALGO, declared hosts let the cost
/// model pick a hierarchical executor for large messages (Pipeline with
/// the default parameters, on 4 + 4 and 2 + 3 ranks); the data is checked
/// for every count, the executor after the largest one.
#[test]
fn default_selection_across_declared_hosts() {
    for map in [&[0u32, 0, 0, 0, 1, 1, 1, 1][..], &[0, 0, 1, 1, 1]] {
        let p = map.len() as u32;
        let comms = Arc::new(HcclComm::init_all_on_hosts(map.to_vec(), config(None)).unwrap());
        run_ranks(p, Duration::from_secs(120), move |r| {
            for (op, name) in [
                ("AllReduce", "AllReducePipelineExecutor"),
                ("AllGather", "AllGatherPipelineExecutor"),
                ("ReduceScatter", "ReduceScatterPipelineExecutor"),
            ] {
                check_all(&comms[r as usize], Some(op));
                let last = comms[r as usize].communicator().last_executor();
                assert_eq!(last.as_deref(), Some(name), "hosts {map:?}");
            }
        });
    }
}
