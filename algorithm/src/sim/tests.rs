use super::*;
use crate::executor::{AllReduceRingExecutor, CollExecutor};
use crate::registry;
use crate::resource::{AlgResourceRequest, SingleSubCommTransport};
use hccl_platform::{HcclResult, Result};

fn ring(spec: &SimSpec) -> std::result::Result<SimReport, SimFailure> {
    simulate(registry(), "AllReduceRingExecutor", spec)
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
        for dtype in DataType::reducible() {
            for op in ReduceOp::ALL {
                let spec = SimSpec::all_reduce(p, 333, dtype, op);
                let r = ring(&spec).unwrap_or_else(|e| panic!("p={p} {dtype} {op}: {e}"));
                check_ring_report(p, 333, dtype, &r);
            }
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
            Box::new(NoReduce(crate::executor::AllReduceRingExecutor(
                crate::executor::Named::new("AllReduceRingExecutor", OpType::AllReduce, t),
            ))) as Box<dyn CollExecutor>
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
fn a_deadlock_under_several_drivers_names_every_stuck_rank() {
    for drivers in [2, 3] {
        let spec = SimSpec {
            drivers: Some(drivers),
            ..SimSpec::all_reduce(5, 100, DataType::Fp32, ReduceOp::Sum)
        };
        let e = simulate(&fixtures(), "DeadlockRing", &spec).unwrap_err();
        let SimFailure::Deadlock { stuck } = &e else {
            panic!("expected a deadlock, got {e}")
        };
        let ranks: Vec<u32> = stuck.iter().map(|s| s.rank).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 4], "drivers={drivers}");
        for s in stuck {
            assert_eq!(s.peer, Some((s.rank + 1) % 5));
        }
    }
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
            ("AllGatherRingExecutor", OpType::AllGather),
            ("ReduceScatterRingExecutor", OpType::ReduceScatter),
        ])
        .collect();
    for (name, op) in cases {
        for p in 1..=33u32 {
            for count in [0u64, 1, 7, (p as u64).saturating_sub(1), 300] {
                // root in the middle; uneven V blocks, including empty ones
                let spec = super::scale_tests::spec_for(op, &[p], count);
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
    for dtype in DataType::reducible() {
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

/// The rooted ring, star and RHD executors (issue 3's second batch).
fn rooted_and_rhd_cases() -> Vec<(&'static str, OpType)> {
    crate::executor::RING_ROOTED_EXECUTORS
        .iter()
        .chain(crate::executor::STAR_EXECUTORS)
        .chain(crate::executor::RHD_EXECUTORS)
        .copied()
        .collect()
}

/// Runs `name` for `op` on p ranks and checks the result against the
/// reference (on every rank that has one).
fn check_case(name: &str, op: OpType, p: u32, count: u64, root: u32) -> SimReport {
    let mut spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum);
    spec.root = root;
    let r = simulate(registry(), name, &spec)
        .unwrap_or_else(|e| panic!("{name} p={p} count={count} root={root}: {e}"));
    assert!(
        r.checked || count == 0,
        "{name} p={p} root={root}: result not checked"
    );
    r
}

#[test]
fn rooted_ring_star_rhd_and_nonuniform_every_rank_count() {
    for (name, op) in rooted_and_rhd_cases().into_iter().chain(nonuniform_cases()) {
        for p in 1..=33u32 {
            // roots inside and (for RHD, p not a power of two) outside the core
            let mut roots = vec![0, p / 2, p - 1];
            roots.dedup();
            for count in [0u64, 1, 7, (p as u64).saturating_sub(1), p as u64 + 3, 300] {
                for &root in &roots {
                    check_case(name, op, p, count, root);
                }
            }
        }
    }
}

#[test]
fn rooted_ring_star_rhd_and_nonuniform_every_dtype_and_op() {
    for (name, op) in rooted_and_rhd_cases().into_iter().chain(nonuniform_cases()) {
        for dtype in DataType::ALL
            .into_iter()
            .filter(|d| !op.reduces() || d.is_reducible())
        {
            for rop in ReduceOp::ALL {
                let mut spec = SimSpec::op(op, 6, 333, dtype, rop);
                spec.root = 5;
                simulate(registry(), name, &spec)
                    .unwrap_or_else(|e| panic!("{name} {dtype} {rop}: {e}"));
            }
        }
    }
}

#[test]
fn rooted_ring_star_rhd_and_nonuniform_run_in_rounds_with_small_ccl_buffers() {
    for (name, op) in rooted_and_rhd_cases().into_iter().chain(nonuniform_cases()) {
        for p in [3u32, 5, 8] {
            let mut spec = SimSpec::op(op, p, 1000, DataType::Int16, ReduceOp::Max);
            spec.root = p - 2;
            // a few hundred bytes: several rounds for every op
            spec.ccl_buffer_size = Some(p as usize * 2 * 64);
            let r =
                simulate(registry(), name, &spec).unwrap_or_else(|e| panic!("{name} p={p}: {e}"));
            assert!(r.checked, "{name}");
        }
    }
}

/// Critical-path steps of the RHD broadcast/reduce trees as the simulator
/// counts them (a rank's sends overlap; a hop waits for the data it
/// forwards and for the receiver to be ready), computed here from the
/// trees' definition.
fn rhd_tree_steps(op: OpType, p: u32, root: u32) -> u64 {
    let m = 1u32 << (31 - p.leading_zeros());
    let outside = root >= m;
    let cr = if outside { root - m } else { root };
    let mut t = vec![0u64; p as usize];
    if op == OpType::Broadcast {
        // when each core rank has the data
        let mut k = m / 2;
        while k >= 1 {
            for v in (0..m).filter(|v| v & (2 * k - 1) == 0) {
                let r = v ^ cr;
                t[(r ^ k) as usize] = t[r as usize] + 1;
            }
            k /= 2;
        }
        let base = outside as u64;
        return (0..p)
            .map(|r| match r {
                r if r < m => t[r as usize] + base,
                r if r == root => 0,
                r => t[(r - m) as usize] + base + 1,
            })
            .max()
            .unwrap_or(0);
    }
    // reduce: when each rank's partial is complete
    for r in 0..p.saturating_sub(m) {
        t[r as usize] = 1;
    }
    let mut k = 1;
    while k < m {
        for v in (0..m).filter(|v| v & (2 * k - 1) == k) {
            let r = v ^ cr;
            let to = (r ^ k) as usize;
            // the sender waits for the receiver's ack, sent once the
            // receiver has reduced what it got before
            t[to] = t[to].max(t[r as usize]) + 1;
        }
        k *= 2;
    }
    t[cr as usize] + outside as u64
}

#[test]
fn rhd_ops_take_log_steps() {
    for &(name, op) in crate::executor::RHD_EXECUTORS {
        for p in (2..=33u32).chain([64, 100, 127, 128]) {
            let m = 1u64 << (31 - p.leading_zeros());
            let (log, fold) = (m.trailing_zeros() as u64, (m < p as u64) as u64);
            for root in [0, p - 1] {
                let r = check_case(name, op, p, 100, root);
                let want = match op {
                    OpType::AllGather | OpType::ReduceScatter => log + 2 * fold,
                    _ => rhd_tree_steps(op, p, root),
                };
                // the tree never takes longer than its sequential schedule
                assert!(want <= log + 2, "{name} p={p} root={root}");
                assert_eq!(r.steps, want, "{name} p={p} root={root}");
            }
        }
    }
}

#[test]
fn ring_scatter_and_gather_take_p_minus_1_steps_over_ring_links() {
    for name in ["ScatterRingExecutor", "GatherRingExecutor"] {
        let op = if name.starts_with("Scatter") {
            OpType::Scatter
        } else {
            OpType::Gather
        };
        for p in [2u32, 3, 5, 8, 33] {
            let r = check_case(name, op, p, 64, p / 3);
            assert_eq!(r.steps, p as u64 - 1, "{name} p={p}");
            for &(from, to) in r.link_bytes.keys() {
                assert!(
                    to == (from + 1) % p || from == (to + 1) % p,
                    "{name}: {from}->{to} is not a ring link"
                );
            }
        }
    }
}

#[test]
fn forced_executor_for_another_op_is_an_error() {
    for (name, op) in rooted_and_rhd_cases().into_iter().chain(nonuniform_cases()) {
        let other = if op == OpType::Gather {
            OpType::AllReduce
        } else {
            OpType::Gather
        };
        let spec = SimSpec::op(other, 4, 8, DataType::Fp32, ReduceOp::Sum);
        let e = simulate(registry(), name, &spec).unwrap_err();
        let want = format!("{name} runs {op}, not {other}");
        assert!(e.to_string().contains(&want), "{name}: {e}");
    }
}

/// Uneven two-level topologies (host sizes) every hierarchical executor
/// must handle.
const HOSTS: &[&[u32]] = &[
    &[2, 3],
    &[1, 4],
    &[3, 3, 2],
    &[4, 4],
    &[1, 1, 1],
    &[5, 2, 7],
    &[2, 2],
    &[3],
    &[1, 2, 1, 3],
];

#[test]
fn hierarchical_executors_on_uneven_hosts() {
    for (name, op, _) in crate::executor::hier_executors() {
        for &hosts in HOSTS {
            let p: u32 = hosts.iter().sum();
            for count in [
                0u64,
                1,
                7,
                (p as u64).saturating_sub(1),
                p as u64 + 3,
                300,
                1025,
            ] {
                let spec =
                    SimSpec::op(op, p, count, DataType::Int32, ReduceOp::Sum).on_hosts(hosts);
                let r = simulate(registry(), &name, &spec)
                    .unwrap_or_else(|e| panic!("{name} hosts={hosts:?} count={count}: {e}"));
                assert!(r.checked || count == 0, "{name} {hosts:?}: not checked");
            }
        }
    }
}

/// The NHR and NB executors (issue 3's third batch).
fn nonuniform_cases() -> Vec<(&'static str, OpType)> {
    crate::executor::NHR_EXECUTORS
        .iter()
        .chain(crate::executor::NB_EXECUTORS)
        .copied()
        .collect()
}

fn rooted(op: OpType) -> bool {
    matches!(op, OpType::Broadcast | OpType::Scatter)
}

/// ⌈log2 p⌉.
fn ceil_log2(p: u32) -> u64 {
    (32 - (p - 1).leading_zeros()) as u64
}

/// Longest path of the scatter trees: a block at offset d from the root
/// takes one hop per set bit of d (both families decompose d in binary).
fn scatter_depth(p: u32) -> u64 {
    (1..p).map(|d| d.count_ones() as u64).max().unwrap_or(0)
}

/// ⌈log2 p⌉ steps per phase on the critical path; the rooted ops' trees
/// are as deep as their longest block path, and the root sends once per
/// step (to a different peer each time).
#[test]
fn nhr_and_nb_step_counts() {
    for (name, op) in nonuniform_cases() {
        for p in (2..=33u32).chain([64, 127, 128, 1000]) {
            let k = ceil_log2(p);
            // enough elements that no block is empty, few enough to be quick
            let count = match op {
                OpType::AllReduce | OpType::Broadcast => 32 * p as u64,
                _ => 2,
            };
            let roots: &[u32] = if rooted(op) { &[0, p / 3, p - 1] } else { &[0] };
            for &root in roots {
                let r = check_case(name, op, p, count, root);
                let want = match op {
                    OpType::AllReduce => 2 * k,
                    OpType::Broadcast => k + scatter_depth(p),
                    OpType::Scatter => scatter_depth(p),
                    _ => k,
                };
                assert_eq!(r.steps, want, "{name} p={p} root={root}");
                if op == OpType::Scatter {
                    // one sequential send per step from the root
                    let from_root = r.link_bytes.keys().filter(|(f, _)| *f == root).count();
                    assert_eq!(from_root as u64, k, "{name} p={p} root={root}");
                }
                if p.is_power_of_two() {
                    let per_phase = if matches!(op, OpType::AllReduce | OpType::Broadcast) {
                        2 * k
                    } else {
                        k
                    };
                    assert_eq!(r.steps, per_phase, "{name} p={p}");
                }
            }
        }
    }
}

/// NHR talks to ranks at distances 2^k only, NB likewise; every rank
/// sends the optimum (p−1)/p of an allreduce phase's data.
#[test]
fn nhr_and_nb_use_power_of_two_distances() {
    for (name, op) in nonuniform_cases() {
        for p in [5u32, 12, 33] {
            let r = check_case(name, op, p, 64 * p as u64, 1);
            for &(from, to) in r.link_bytes.keys() {
                let d = (to + p - from) % p;
                let back = p - d;
                assert!(
                    d.is_power_of_two() || back.is_power_of_two(),
                    "{name} p={p}: {from}->{to}"
                );
            }
        }
    }
}

/// NHR and NB as the level-1 allreduce of TwoLevel and AHC: registered
/// under their names (so `hierarchical_executors_on_uneven_hosts` checks
/// them on every uneven host set with awkward counts), and on five
/// hosts their level 1 takes 2⌈log2 5⌉ = 6 steps where the ring takes
/// 2(5 − 1) = 8, with no more bytes per rank.
#[test]
fn nhr_and_nb_as_level1_of_hierarchical_allreduce() {
    let names = [
        "AllReduceTwoLevelNHRExecutor",
        "AllReduceTwoLevelNBExecutor",
        "AllReduceAHCNHRExecutor",
        "AllReduceAHCNBExecutor",
    ];
    let known: Vec<String> = crate::executor::hier_executors()
        .into_iter()
        .map(|(n, ..)| n)
        .collect();
    let l1 = CommPlane::Level1 as usize;
    for name in names {
        assert!(known.iter().any(|k| k == name), "{name} not registered");
        let ring = name.replace("NHR", "").replace("NB", "");
        let five: &[u32] = &[2, 2, 2, 2, 2];
        let spec =
            SimSpec::op(OpType::AllReduce, 10, 1280, DataType::Fp32, ReduceOp::Sum).on_hosts(five);
        let a = simulate(registry(), name, &spec).unwrap();
        let b = simulate(registry(), &ring, &spec).unwrap();
        assert_eq!(a.plane_steps[l1], 6, "{name}");
        assert_eq!(b.plane_steps[l1], 8, "{ring}");
        assert_eq!(
            a.plane_max_rank_bytes[l1], b.plane_max_rank_bytes[l1],
            "{name}"
        );
    }
}

/// Rank counts of the algorithms meant for scale, with their small,
/// awkward counts: none, one (fewer than p), and not divisible by p.
/// Allgather-like ops move p² blocks and a ring p² tasks, so a few
/// elements at 1,000 ranks is what keeps the simulation fast.
const SCALE: &[(u32, &[u64])] = &[
    (64, &[0, 1, 65]),
    (127, &[0, 1, 128]),
    (128, &[0, 1, 129]),
    (1000, &[0, 3]),
];

/// Checks every (executor, op) of `cases` at every [`SCALE`] rank count
/// and count, rooted ops from the last rank (outside the RHD core when p
/// is not a power of two); `extra` sees each report.
fn at_scale(cases: &[(&str, OpType)], mut extra: impl FnMut(&str, u32, u64, &SimReport)) {
    for &(name, op) in cases {
        for &(p, counts) in SCALE {
            let root = if matches!(
                op,
                OpType::AllReduce | OpType::AllGather | OpType::ReduceScatter
            ) {
                0
            } else {
                p - 1
            };
            for &count in counts {
                let r = check_case(name, op, p, count, root);
                extra(name, p, count, &r);
            }
        }
    }
}

/// Every ring pair at scale; the allreduce also keeps its step and byte
/// counts.
#[test]
fn ring_ops_at_scale() {
    let cases: Vec<(&str, OpType)> = [
        ("AllReduceRingExecutor", OpType::AllReduce),
        ("AllGatherRingExecutor", OpType::AllGather),
        ("ReduceScatterRingExecutor", OpType::ReduceScatter),
        ("BroadcastRingExecutor", OpType::Broadcast),
    ]
    .into_iter()
    .chain(crate::executor::RING_ROOTED_EXECUTORS.iter().copied())
    .collect();
    assert_eq!(cases.len(), 7);
    at_scale(&cases, |name, p, count, r| {
        if name == "AllReduceRingExecutor" {
            check_ring_report(p, count, DataType::Fp32, r);
        }
    });
}

/// Every RHD pair at scale (fold-in/out at 127 and 1,000).
#[test]
fn rhd_ops_at_scale() {
    let mut cases = vec![("AllReduceRHDExecutor", OpType::AllReduce)];
    cases.extend(crate::executor::RHD_EXECUTORS.iter().copied());
    assert_eq!(cases.len(), 5);
    at_scale(&cases, |_, _, _, _| {});
}

/// Every NHR and NB pair at scale.
#[test]
fn nhr_and_nb_at_scale() {
    let cases = nonuniform_cases();
    assert_eq!(cases.len(), 10);
    at_scale(&cases, |_, _, _, _| {});
}

/// The direct-read executors (peers' user buffers read with cross-memory
/// attach), for every rank count up to 33, awkward counts, roots in the
/// middle, and staging windows smaller than the data.
#[test]
fn direct_executors_every_rank_count() {
    if !hccl_platform::cross_memory_attach_permitted() {
        eprintln!("cross-memory attach is not permitted here; skipping");
        return;
    }
    for &(name, op) in crate::executor::DIRECT_EXECUTORS {
        // the simulator runs collectives; Send / Receive are tested
        // across ranks (tests/tests/graph_mode.rs)
        if matches!(op, OpType::Send | OpType::Receive) {
            continue;
        }
        for p in 1..=33u32 {
            for count in [0u64, 1, 7, (p as u64).saturating_sub(1), 300, 70_001] {
                if count == 70_001 && p > 9 {
                    continue; // large counts at a few p keep the test fast
                }
                let mut spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum);
                spec.root = p / 2;
                // uneven V blocks, including empty ones
                spec.v_counts = Some(
                    (0..p as u64)
                        .map(|r| (count + r * 3) % (count + 5))
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
fn direct_allreduce_reads_each_byte_once_and_stages_in_windows() {
    if !hccl_platform::cross_memory_attach_permitted() {
        eprintln!("cross-memory attach is not permitted here; skipping");
        return;
    }
    // 4 ranks, 1 MiB of int32 max, staging window smaller than a slice
    let count = 1u64 << 18;
    let mut spec = SimSpec::all_reduce(4, count, DataType::Int32, ReduceOp::Max);
    spec.ccl_buffer_size = Some(64 << 10);
    let r = simulate(registry(), "AllReduceDirectExecutor", &spec).unwrap();
    assert!(r.checked);
    // reduce-scatter + allgather reads: 2 (p-1)/p of the data per rank
    let bytes = count * 4;
    assert_eq!(r.max_rank_bytes_sent, 2 * 3 * bytes / 4);
    // reads are sequential on the reading rank: the 256 KiB slice in four
    // 64 KiB windows from each of 3 peers, then 3 allgather reads
    assert_eq!(r.steps, 4 * 3 + 3);
}

/// The AIV kernel runs on the simulator's in-process boards: correct for
/// every p in 1..=33 and every awkward count up to a board entry, with
/// every reduction the fp32 and int8 kernels have.
#[test]
fn aiv_allreduce_for_every_p_up_to_33() {
    let max = (crate::executor::AIV_MAX_BYTES / 4) as u64;
    for p in 1..=33u32 {
        for count in [0, 1, 7, 33, max] {
            for (dtype, op) in [
                (DataType::Fp32, ReduceOp::Sum),
                (DataType::Int8, ReduceOp::Max),
            ] {
                let spec = SimSpec::all_reduce(p, count, dtype, op);
                let r = simulate(registry(), "AllReduceMeshAivExecutor", &spec)
                    .unwrap_or_else(|e| panic!("p={p} count={count} {dtype}: {e}"));
                assert!(r.checked, "p={p} count={count} {dtype}");
            }
        }
    }
}

/// The other AIV kernels on the simulator's boards: every op, every p in
/// 1..=17, counts up to what a board entry carries at that p, root 0 and
/// the last rank.
#[test]
fn aiv_kernels_of_every_op_for_p_up_to_17() {
    use crate::executor::AIV_EXECUTORS;
    for &(name, op) in AIV_EXECUTORS {
        if op == OpType::AllReduce {
            continue;
        }
        for p in 1..=17u32 {
            let per = match op {
                OpType::ReduceScatter | OpType::AllToAll | OpType::Scatter => p as usize,
                _ => 1,
            };
            let max = (crate::executor::AIV_MAX_BYTES / 4 / per) as u64;
            for count in [0, 1, 5, max] {
                for root in [0, p - 1] {
                    let mut spec = SimSpec::op(op, p, count, DataType::Int32, ReduceOp::Max);
                    spec.root = root;
                    let r = simulate(registry(), name, &spec)
                        .unwrap_or_else(|e| panic!("{name} p={p} count={count} root={root}: {e}"));
                    assert!(r.checked, "{name} p={p} count={count} root={root}");
                }
            }
        }
    }
}

/// The template executors that run on the user buffers in graph mode.
const GRAPH_TEMPLATE_CASES: &[(&str, OpType)] = &[
    ("AllReduceRingExecutor", OpType::AllReduce),
    ("AllGatherRingExecutor", OpType::AllGather),
    ("BroadcastRingExecutor", OpType::Broadcast),
    ("AllReduceRHDExecutor", OpType::AllReduce),
    ("AllReduceNHRExecutor", OpType::AllReduce),
    ("AllGatherNHRExecutor", OpType::AllGather),
    ("BroadcastNHRExecutor", OpType::Broadcast),
    ("AllReduceNBExecutor", OpType::AllReduce),
    ("AllGatherNBExecutor", OpType::AllGather),
    ("BroadcastNBExecutor", OpType::Broadcast),
];

/// Graph mode on the template executors (ring, RHD, NHR, NB): every rank
/// count up to 33, awkward counts, roots in the middle, and CCL buffers
/// smaller than the data (several rounds, partials landing in the CCL
/// output, results written straight into the peers' user outputs).
#[test]
fn template_executors_in_graph_mode_every_rank_count() {
    let topo = TopoInfo::new(0, vec![0, 0]).unwrap();
    for &(name, op) in GRAPH_TEMPLATE_CASES {
        let exec = registry().create(name, &topo).unwrap();
        assert!(exec.supports_graph(), "{name} should run in graph mode");
        for p in 1..=33u32 {
            for count in [0u64, 1, 7, (p as u64).saturating_sub(1), 300, 5_001] {
                if count == 5_001 && p > 9 {
                    continue;
                }
                for ccl in [None, Some(4096)] {
                    let mut spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum);
                    spec.root = p / 2;
                    spec.mode = WorkflowMode::Graph;
                    spec.ccl_buffer_size = ccl;
                    let before = hccl_platform::peer_access_stats().mapped_write_bytes;
                    let r = simulate(registry(), name, &spec).unwrap_or_else(|e| {
                        panic!("{name} graph p={p} count={count} ccl={ccl:?}: {e}")
                    });
                    assert!(
                        r.checked || count == 0 || p == 1,
                        "{name} p={p}: result not checked"
                    );
                    // the results went straight into the peers' user outputs
                    let wrote = hccl_platform::peer_access_stats().mapped_write_bytes - before;
                    let (p64, bytes) = (p as u64, count * 4);
                    if op == OpType::AllGather {
                        // every block reaches every other rank exactly once
                        assert_eq!(wrote, p64 * (p64 - 1) * bytes, "{name} p={p} count={count}");
                    } else if p > 1 && count >= p as u64 {
                        assert!(wrote > 0, "{name} p={p} count={count}: no mapped writes");
                    }
                }
            }
        }
    }
}

/// The template executors that stage (ReduceScatter's working buffer is
/// p blocks, more than its user output holds) refuse graph mode with a
/// clear error; the framework runs them op-base.
#[test]
fn staging_template_executors_refuse_graph_mode() {
    let topo = TopoInfo::new(0, vec![0, 0]).unwrap();
    for (name, op) in [
        ("ReduceScatterRingExecutor", OpType::ReduceScatter),
        ("ReduceRingExecutor", OpType::Reduce),
        ("ScatterNHRExecutor", OpType::Scatter),
    ] {
        let exec = registry().create(name, &topo).unwrap();
        assert!(!exec.supports_graph(), "{name}");
        let mut spec = SimSpec::op(op, 2, 16, DataType::Fp32, ReduceOp::Sum);
        spec.mode = WorkflowMode::Graph;
        let e = simulate(registry(), name, &spec).unwrap_err().to_string();
        assert!(e.contains("runs in op-base mode only"), "{name}: {e}");
    }
}

/// The TwoLevel AllReduce with every built-in level-1 algorithm in graph
/// mode, on uneven hosts and with CCL buffers smaller than the data: the
/// level-0 and level-1 gathers write into the peers' user outputs.
#[test]
fn two_level_all_reduce_in_graph_mode_on_uneven_hosts() {
    let mut ran = 0;
    for (name, op, kind) in crate::executor::hier_executors() {
        let topo = TopoInfo::new(0, vec![0, 1]).unwrap();
        let graph = registry().create(&name, &topo).unwrap().supports_graph();
        let want = op == OpType::AllReduce && kind == crate::executor::HierKind::TwoLevel;
        assert_eq!(graph, want, "{name}: graph mode");
        if !graph {
            continue;
        }
        ran += 1;
        for &hosts in HOSTS {
            let p: u32 = hosts.iter().sum();
            for count in [1u64, 7, p as u64 + 3, 300, 5_001] {
                for ccl in [None, Some(4096)] {
                    let mut spec =
                        SimSpec::op(op, p, count, DataType::Int32, ReduceOp::Sum).on_hosts(hosts);
                    spec.mode = WorkflowMode::Graph;
                    spec.ccl_buffer_size = ccl;
                    let before = hccl_platform::peer_access_stats().mapped_write_bytes;
                    let r = simulate(registry(), &name, &spec).unwrap_or_else(|e| {
                        panic!("{name} graph hosts={hosts:?} count={count} ccl={ccl:?}: {e}")
                    });
                    assert!(r.checked, "{name} {hosts:?}: not checked");
                    let wrote = hccl_platform::peer_access_stats().mapped_write_bytes - before;
                    assert!(
                        wrote > 0 || count < p as u64,
                        "{name} {hosts:?}: no mapped writes"
                    );
                }
            }
        }
    }
    assert_eq!(
        ran, 4,
        "one TwoLevel AllReduce per built-in level-1 algorithm"
    );
}

/// HCCL's FP8 formats through every built-in executor that moves data
/// without reducing it: wherever an executor runs an fp32 op (one host of
/// 2–5 ranks, or hosts of 2 and 3), it runs the same op on each 1-byte
/// format, and the simulator compares the outputs byte for byte. Reducing
/// ops refuse them with HCCL_E_NOT_SUPPORT.
#[test]
fn fp8_types_through_every_moving_executor() {
    let reg = registry();
    let mut ran = 0;
    for name in reg.names() {
        let info = reg.info(&name).expect("a registered name has info");
        for &op in info.ops() {
            if matches!(op, OpType::Send | OpType::Receive) {
                continue;
            }
            for hosts in [&[2u32][..], &[3], &[4], &[5], &[2, 3]] {
                let p: u32 = hosts.iter().sum();
                let mut base =
                    SimSpec::op(op, p, 333, DataType::Fp32, ReduceOp::Sum).on_hosts(hosts);
                base.root = p - 1;
                if simulate(reg, &name, &base).is_err() {
                    continue; // not for this topology
                }
                for dtype in DataType::FP8 {
                    let spec = SimSpec {
                        dtype,
                        ..base.clone()
                    };
                    let r = simulate(reg, &name, &spec);
                    if op.reduces() {
                        // refused before any executor runs (the adapter
                        // and Communicator::exec_op check the type first);
                        // the simulator, which skips that check, fails too
                        let e = op.check_dtype(dtype).unwrap_err();
                        assert_eq!(e.code(), HcclResult::ENotSupport);
                        assert!(r.is_err(), "{name} reduced {dtype}");
                    } else {
                        let r = r
                            .unwrap_or_else(|e| panic!("{name} {op} hosts={hosts:?} {dtype}: {e}"));
                        assert!(
                            r.checked,
                            "{name} {op} hosts={hosts:?} {dtype}: not checked"
                        );
                        ran += 1;
                    }
                }
            }
        }
    }
    assert!(ran > 100, "only {ran} fp8 runs");
}

/// In-place AllGather(V), ReduceScatter(V) and AllReduce (NCCL's and
/// `MPI_IN_PLACE`'s forms: the input is this rank's block of the output, or
/// the output this rank's block of the input) through every built-in
/// executor that runs the op, on one host of 1–9 ranks and on uneven hosts,
/// in op-base mode (with a CCL buffer small enough to need several rounds)
/// and in graph mode (where executors work on the user buffers directly,
/// so a plan that writes a block before reading the input it aliases
/// would show). Wherever an executor runs the op out of place, it must run
/// it in place with the same result.
#[test]
fn in_place_through_every_executor() {
    let reg = registry();
    let mut ran = 0;
    let layouts: Vec<Vec<u32>> = (1..=9)
        .map(|p| vec![p])
        .chain([vec![2, 2], vec![2, 3], vec![3, 3, 2], vec![1, 2, 1, 3]])
        .collect();
    for name in reg.names() {
        let info = reg.info(&name).expect("a registered name has info");
        for &op in info.ops() {
            if !matches!(
                op,
                OpType::AllGather
                    | OpType::AllGatherV
                    | OpType::ReduceScatter
                    | OpType::ReduceScatterV
                    | OpType::AllReduce
            ) {
                continue;
            }
            for hosts in &layouts {
                let p: u32 = hosts.iter().sum();
                for count in [1u64, 7, 300, 1025] {
                    for (mode, ccl) in [
                        (WorkflowMode::OpBase, Some(p as usize * 4 * 64)),
                        (WorkflowMode::OpBase, None),
                        (WorkflowMode::Graph, None),
                    ] {
                        let mut base = SimSpec::op(op, p, count, DataType::Int32, ReduceOp::Sum)
                            .on_hosts(hosts);
                        base.mode = mode;
                        base.ccl_buffer_size = ccl;
                        base.v_counts = Some(
                            (0..p as u64)
                                .map(|r| (count + r * 3) % (count + 5))
                                .collect(),
                        );
                        if simulate(reg, &name, &base).is_err() {
                            continue; // not for this topology or mode
                        }
                        let spec = base.in_place();
                        let r = simulate(reg, &name, &spec).unwrap_or_else(|e| {
                            panic!("{name} {op} in place, hosts={hosts:?} count={count} {mode:?} ccl={ccl:?}: {e}")
                        });
                        assert!(r.checked, "{name} {op} in place: not checked");
                        ran += 1;
                    }
                }
            }
        }
    }
    assert!(ran > 500, "only {ran} in-place runs");
}

#[test]
fn in_place_is_refused_for_ops_without_that_form() {
    let spec = SimSpec::op(OpType::AllToAll, 3, 8, DataType::Int32, ReduceOp::Sum).in_place();
    let e = simulate(registry(), "AllToAllMeshExecutor", &spec).unwrap_err();
    assert!(e.to_string().contains("has no in-place form"), "{e}");
}

#[test]
fn the_drive_order_follows_a_ring_however_its_ranks_are_numbered() {
    // a zigzag ring over 8 ranks (a multi-ring plan's first channel on
    // one host): each rank's peers as it asks for them, right then left
    let ring = [0u32, 1, 7, 2, 6, 3, 5, 4];
    let mut peers = vec![Vec::new(); 8];
    for (i, &r) in ring.iter().enumerate() {
        peers[r as usize] = vec![ring[(i + 1) % 8], ring[(i + 7) % 8]];
    }
    assert_eq!(locality_order(&peers), ring);
    // ranks no link reaches follow in rank order; a rank without peers
    // is its own walk
    let mut peers = vec![Vec::new(); 6];
    peers[0] = vec![3];
    peers[3] = vec![0, 5];
    assert_eq!(locality_order(&peers), [0, 3, 5, 1, 2, 4]);
    // permuting and back restores every index
    let ids = locality_order(&peers);
    let v: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    let driven = permute(v.clone(), &ids);
    assert_eq!(driven[1], "r3");
    assert_eq!(unpermute(driven, &ids), v);
}

#[test]
fn a_failed_rank_is_reported_rather_than_the_ranks_left_waiting_for_it() {
    // Gather Direct's root reads every rank's buffer by address, which
    // symbolic data cannot serve: the root's read from rank 1 fails, that
    // link tells rank 1, and ranks 2..p wait for the root for good. The
    // report names the failure, not the deadlock it left.
    let p = 8;
    let spec = SimSpec::op(OpType::Gather, p, 4, DataType::Fp32, ReduceOp::Sum)
        .with_data(DataMode::Symbolic);
    let e = simulate(registry(), "GatherDirectExecutor", &spec).unwrap_err();
    let SimFailure::Error(err) = &e else {
        panic!("expected the failure, got {e}")
    };
    assert_eq!(err.code(), HcclResult::ENotSupport, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("virtual memory"), "{msg}");
    assert!(
        msg.contains(&format!(
            "{} rank(s) left waiting for it (first: rank 2)",
            p - 2
        )),
        "{msg}"
    );
    // auto mode then runs it on bytes, and it passes
    let auto = SimSpec::op(OpType::Gather, p, 4, DataType::Fp32, ReduceOp::Sum);
    let r = simulate(registry(), "GatherDirectExecutor", &auto).unwrap();
    assert!(r.checked && !r.symbolic);
}
