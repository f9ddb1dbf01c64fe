use super::*;
use crate::executor::{AllReduceRingExecutor, CollExecutor};
use crate::registry;
use crate::resource::{AlgResourceRequest, SingleSubCommTransport};
use hccl_platform::{HcclResult, Result};

fn ring(spec: &SimSpec) -> std::result::Result<SimReport, SimFailure> {
    simulate(registry(), AllReduceRingExecutor::NAME, spec)
}

fn check_ring_report(p: u32, count: u64, dtype: DataType, r: &SimReport) {
    let bytes = count * dtype.size() as u64;
    assert!(r.checked);
    assert_eq!(r.ranks, p);
    if p == 1 || bytes == 0 {
        assert_eq!(r.link_bytes.values().sum::<u64>(), 0);
        return;
    }
    assert_eq!(r.steps, 2 * (p as u64 - 1), "α term: 2(p-1) steps");
    // β term: each of p slices travels p-1 hops in each phase
    assert_eq!(
        r.link_bytes.values().sum::<u64>(),
        2 * (p as u64 - 1) * bytes
    );
    assert_eq!(
        r.reduce_bytes,
        (p as u64 - 1) * bytes,
        "γ term: each slice reduced p-1 times"
    );
    // only ring neighbours talk
    for &(from, to) in r.link_bytes.keys() {
        assert_eq!(to, (from + 1) % p, "ring sends go to the right neighbour");
    }
}

#[test]
fn ring_allreduce_every_rank_count_to_33_with_awkward_counts() {
    for p in 1..=33u32 {
        for count in [0u64, 1, 7, (p as u64).saturating_sub(1), 1000, 4097] {
            let spec = SimSpec::all_reduce(p, count, DataType::Fp32, ReduceOp::Sum);
            let r = ring(&spec).unwrap_or_else(|e| panic!("p={p} count={count}: {e}"));
            check_ring_report(p, count, DataType::Fp32, &r);
        }
    }
}

#[test]
fn ring_allreduce_every_dtype_and_op() {
    for p in [2u32, 3, 5, 8] {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                let spec = SimSpec::all_reduce(p, 333, dtype, op);
                let r = ring(&spec).unwrap_or_else(|e| panic!("p={p} {dtype} {op}: {e}"));
                check_ring_report(p, 333, dtype, &r);
            }
        }
    }
}

#[test]
fn ring_allreduce_at_scale() {
    for p in [64u32, 127, 128, 1000] {
        for count in [5u64, 4099] {
            let spec = SimSpec::all_reduce(p, count, DataType::Fp32, ReduceOp::Sum);
            let r = ring(&spec).unwrap_or_else(|e| panic!("p={p} count={count}: {e}"));
            check_ring_report(p, count, DataType::Fp32, &r);
        }
    }
}

#[test]
fn op_base_chunks_multiply_steps() {
    // a CCL buffer of 1 KiB forces 4 chunks of a 4 KiB allreduce
    let mut spec = SimSpec::all_reduce(4, 1024, DataType::Fp32, ReduceOp::Max);
    spec.ccl_buffer_size = Some(1024);
    let r = ring(&spec).unwrap();
    assert_eq!(r.steps, 4 * 2 * 3);
    assert_eq!(r.link_bytes.values().sum::<u64>(), 2 * 3 * 4096);
}

/// A broken ring: every rank waits for its right neighbour's ack before
/// acking its left neighbour, so nobody ever acks.
struct DeadlockRing;

impl CollExecutor for DeadlockRing {
    fn name(&self) -> &str {
        "DeadlockRing"
    }
    fn calc_res_request(&self, _p: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        let mut req = AlgResourceRequest::default();
        req.op_transport[CommPlane::Combine as usize].push(SingleSubCommTransport::ring(
            topo.plane_ranks(CommPlane::Combine),
            topo.user_rank,
            MemKind::CclInput,
            MemKind::CclOutput,
        )?);
        Ok(req)
    }
    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        param.stream.set_step(4);
        comm.link((r + 1) % p)?.rx_ack(&param.stream)?;
        comm.link((r + p - 1) % p)?.tx_ack(&param.stream)
    }
}

/// A ring allreduce that forgets to reduce: runs to completion, wrong data.
struct NoReduce(AllReduceRingExecutor);

impl CollExecutor for NoReduce {
    fn name(&self) -> &str {
        "NoReduce"
    }
    fn calc_res_request(&self, p: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        self.0.calc_res_request(p, topo)
    }
    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        // run the ring with MAX instead of the requested op
        let mut p = param.clone();
        p.reduce_op = ReduceOp::Max;
        self.0.orchestrate(&p, res)
    }
}

fn fixtures() -> ExecutorRegistry {
    let reg = ExecutorRegistry::empty();
    reg.register(
        "DeadlockRing",
        Arc::new(|_t: &TopoInfo| Box::new(DeadlockRing) as Box<dyn CollExecutor>),
    )
    .unwrap();
    reg.register(
        "NoReduce",
        Arc::new(|t: &TopoInfo| {
            Box::new(NoReduce(AllReduceRingExecutor::new(t))) as Box<dyn CollExecutor>
        }),
    )
    .unwrap();
    reg
}

#[test]
fn a_broken_executor_is_reported_as_a_deadlock() {
    let spec = SimSpec::all_reduce(5, 100, DataType::Fp32, ReduceOp::Sum);
    let e = simulate(&fixtures(), "DeadlockRing", &spec).unwrap_err();
    let SimFailure::Deadlock { stuck } = &e else {
        panic!("expected a deadlock, got {e}")
    };
    assert_eq!(stuck.len(), 5, "every rank is stuck");
    for s in stuck {
        assert_eq!(s.verb, Some("RxAck"));
        assert_eq!(s.peer, Some((s.rank + 1) % 5));
        assert_eq!(s.step, 4);
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with("deadlock: no rank can progress; 5 stuck task(s):"),
        "{msg}"
    );
    assert!(
        msg.contains("[rank 0 step 4: RxAck with peer rank 1 over the simulated link]"),
        "{msg}"
    );
}

#[test]
fn a_wrong_result_is_reported() {
    let spec = SimSpec::all_reduce(3, 64, DataType::Int32, ReduceOp::Sum);
    let e = simulate(&fixtures(), "NoReduce", &spec).unwrap_err();
    assert!(matches!(e, SimFailure::WrongResult { rank: 0, .. }), "{e}");
    assert!(e.to_string().contains("wrong result on rank 0"), "{e}");
}

#[test]
fn unknown_executor_and_unsupported_op_are_errors() {
    let spec = SimSpec::all_reduce(2, 8, DataType::Fp32, ReduceOp::Sum);
    let e = simulate(&fixtures(), "Nope", &spec).unwrap_err();
    let SimFailure::Error(e) = e else { panic!() };
    assert_eq!(e.code(), HcclResult::ENotFound);
    let mut spec = spec;
    spec.op_type = OpType::Broadcast;
    let e = ring(&spec).unwrap_err();
    assert!(
        e.to_string().contains("runs allreduce, not broadcast"),
        "{e}"
    );
}

/// Every mesh executor and the ring gather/scatter executors, for every
/// rank count up to 33 and awkward counts, checked against the reference.
#[test]
fn every_executor_every_rank_count() {
    let cases: Vec<(&str, OpType)> = crate::executor::MESH_EXECUTORS
        .iter()
        .filter(|(_, op)| !matches!(op, OpType::Send | OpType::Receive))
        .copied()
        .chain([
            (
                crate::executor::AllGatherRingExecutor::NAME,
                OpType::AllGather,
            ),
            (
                crate::executor::ReduceScatterRingExecutor::NAME,
                OpType::ReduceScatter,
            ),
        ])
        .collect();
    for (name, op) in cases {
        for p in 1..=33u32 {
            for count in [0u64, 1, 7, (p as u64).saturating_sub(1), 300] {
                let mut spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum);
                spec.root = p / 2;
                // uneven V blocks, including empty ones
                spec.v_counts = Some(
                    (0..p as u64)
                        .map(|r| (count + r * 3) % (count + 5))
                        .collect(),
                );
                spec.matrix = Some(
                    (0..p as u64)
                        .map(|r| {
                            (0..p as u64)
                                .map(|q| (count + r * 5 + q * 3) % (count + 4))
                                .collect()
                        })
                        .collect(),
                );
                let r = simulate(registry(), name, &spec)
                    .unwrap_or_else(|e| panic!("{name} p={p} count={count}: {e}"));
                assert!(
                    r.checked || count == 0 || p == 1,
                    "{name} p={p}: result not checked"
                );
            }
        }
    }
}

#[test]
fn mesh_ops_with_small_ccl_buffers_run_in_rounds() {
    for (name, op) in crate::executor::MESH_EXECUTORS.iter().copied() {
        if matches!(op, OpType::Send | OpType::Receive) {
            continue;
        }
        let mut spec = SimSpec::op(op, 5, 1000, DataType::Int16, ReduceOp::Max);
        spec.root = 3;
        spec.ccl_buffer_size = Some(5 * 2 * 64); // 64 elements per slot
        spec.v_counts = Some(vec![1000, 0, 17, 999, 640]);
        spec.matrix = Some(
            (0..5)
                .map(|r| (0..5).map(|q| (r * 211 + q * 97) % 700).collect())
                .collect(),
        );
        let r = simulate(registry(), name, &spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.checked, "{name}");
        assert!(
            r.steps >= 2,
            "{name} must have needed several rounds, got {} steps",
            r.steps
        );
    }
}

#[test]
fn one_shot_mesh_allreduce_is_one_step_and_identical_on_all_ranks() {
    let spec = SimSpec::all_reduce(8, 100, DataType::Fp32, ReduceOp::Sum);
    let r = simulate(registry(), "AllReduceMeshExecutor", &spec).unwrap();
    assert_eq!(r.steps, 1);
    assert_eq!(r.link_bytes.len(), 8 * 7, "every rank writes to every peer");
    assert_eq!(r.max_rank_bytes_sent, 7 * 400);
}

#[test]
fn rhd_allreduce_any_rank_count() {
    for p in (1..=33u32).chain([64, 100, 127, 128]) {
        for count in [0u64, 1, 7, p as u64 + 3, 1000] {
            let spec = SimSpec::all_reduce(p, count, DataType::Fp32, ReduceOp::Sum);
            let r = simulate(registry(), "AllReduceRHDExecutor", &spec)
                .unwrap_or_else(|e| panic!("p={p} count={count}: {e}"));
            assert!(r.checked);
            if p > 1 && count > 0 {
                let m = 1u64 << (63 - (p as u64).leading_zeros());
                let fold = if m == p as u64 { 0 } else { 2 };
                assert_eq!(
                    r.steps,
                    2 * m.trailing_zeros() as u64 + fold,
                    "p={p}: 2 log2 m (+ fold) steps"
                );
            }
        }
    }
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            let spec = SimSpec::all_reduce(6, 333, dtype, op);
            simulate(registry(), "AllReduceRHDExecutor", &spec)
                .unwrap_or_else(|e| panic!("{dtype} {op}: {e}"));
        }
    }
}

#[test]
fn pairwise_alltoall_takes_p_minus_1_steps() {
    for p in [2u32, 3, 5, 8] {
        let spec = SimSpec::op(OpType::AllToAll, p, 64, DataType::Int32, ReduceOp::Sum);
        let r = simulate(registry(), "AllToAllPairWiseExecutor", &spec).unwrap();
        assert!(r.checked);
        assert_eq!(r.steps, p as u64 - 1, "p={p}");
    }
}

#[test]
fn ring_broadcast_pipelines_segments() {
    for p in [2u32, 3, 5, 8] {
        let mut spec = SimSpec::op(
            OpType::Broadcast,
            p,
            32 * p as u64 * 4,
            DataType::Fp32,
            ReduceOp::Sum,
        );
        spec.root = 1 % p;
        let r = simulate(registry(), "BroadcastRingExecutor", &spec).unwrap();
        assert!(r.checked);
        // p segments through a chain of p-1 hops: p + (p-2) steps
        assert_eq!(r.steps, 2 * p as u64 - 2, "p={p}");
        // every rank but the last of the chain sends the data once
        assert_eq!(r.max_rank_bytes_sent, 32 * p as u64 * 4 * 4);
    }
}
