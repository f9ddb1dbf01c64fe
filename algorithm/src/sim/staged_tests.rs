//! Plans issued a stage at a time ([`crate::CollExecutor::staged`]): the
//! simulator issues them as ranks run, and what it reports does not
//! depend on it.

use super::*;
use crate::executor::{AllReduceRingExecutor, CollExecutor, Named};
use crate::registry;
use crate::resource::AlgResourceRequest;
use crate::StagedOp;
use hccl_platform::{HcclResult, Result};
use std::sync::atomic::AtomicU64;

fn ring_executor(t: &TopoInfo) -> AllReduceRingExecutor {
    AllReduceRingExecutor(Named::new("AllReduceRingExecutor", OpType::AllReduce, t))
}

/// A built-in executor orchestrated whole: offers no stages.
struct Whole(Box<dyn CollExecutor>);

impl CollExecutor for Whole {
    fn name(&self) -> &str {
        "Whole"
    }
    fn calc_res_request(&self, p: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        self.0.calc_res_request(p, topo)
    }
    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        self.0.orchestrate(param, res)
    }
}

/// The ring AllReduce's stages, watched: notes the most tasks its stream
/// held whenever a stage was issued, and fails at `fail_at` of rank
/// `fail_rank` if set.
struct Watched {
    inner: AllReduceRingExecutor,
    rank: u32,
    most_queued: Arc<AtomicU64>,
    fail: Option<(u32, usize)>,
}

/// Stages the watched plans issued (the one test that counts them runs
/// alone in its process under nextest; under `cargo test` others only add).
static STAGES_ISSUED: AtomicU64 = AtomicU64::new(0);

struct WatchedStages {
    inner: Box<dyn StagedOp>,
    stream: Stream,
    most_queued: Arc<AtomicU64>,
    issued: usize,
    fail_at: Option<usize>,
}

impl StagedOp for WatchedStages {
    fn issue_next(&mut self) -> Result<bool> {
        if self.fail_at == Some(self.issued) {
            return Err(HcclError::para("stage refused on purpose"));
        }
        let p = self.stream.progress();
        self.most_queued
            .fetch_max(p.enqueued - p.completed, Ordering::Relaxed);
        self.issued += 1;
        STAGES_ISSUED.fetch_add(1, Ordering::Relaxed);
        self.inner.issue_next()
    }
}

impl CollExecutor for Watched {
    fn name(&self) -> &str {
        "Watched"
    }
    fn calc_res_request(&self, p: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        self.inner.calc_res_request(p, topo)
    }
    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        self.inner.orchestrate(param, res)
    }
    fn staged(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        let inner = self.inner.staged(param, res)?.expect("the ring is staged");
        Ok(Some(Box::new(WatchedStages {
            inner,
            stream: param.stream.clone().into_owned(),
            most_queued: self.most_queued.clone(),
            issued: 0,
            fail_at: self.fail.and_then(|(r, at)| (r == self.rank).then_some(at)),
        })))
    }
}

fn fixtures(most_queued: Arc<AtomicU64>, fail: Option<(u32, usize)>) -> ExecutorRegistry {
    let reg = ExecutorRegistry::empty();
    for (name, _) in STAGED {
        reg.register(
            &format!("Whole{name}"),
            Arc::new(move |t: &TopoInfo| {
                let inner = registry().create(name, t).expect("a built-in executor");
                Box::new(Whole(inner)) as Box<dyn CollExecutor>
            }),
        )
        .unwrap();
    }
    reg.register(
        "Watched",
        Arc::new(move |t: &TopoInfo| {
            Box::new(Watched {
                inner: ring_executor(t),
                rank: t.user_rank,
                most_queued: most_queued.clone(),
                fail,
            }) as Box<dyn CollExecutor>
        }),
    )
    .unwrap();
    reg
}

/// The built-in executors that issue their ops a stage at a time.
const STAGED: [(&str, OpType); 12] = [
    ("AllReduceRingExecutor", OpType::AllReduce),
    ("AllGatherRingExecutor", OpType::AllGather),
    ("ReduceScatterRingExecutor", OpType::ReduceScatter),
    ("AllReduceMultiRingExecutor", OpType::AllReduce),
    ("AllGatherMultiRingExecutor", OpType::AllGather),
    ("ReduceScatterMultiRingExecutor", OpType::ReduceScatter),
    ("BroadcastMultiRingExecutor", OpType::Broadcast),
    ("ReduceMultiRingExecutor", OpType::Reduce),
    ("AllReduceTwoLevelExecutor", OpType::AllReduce),
    ("AllReduceTwoLevelRHDExecutor", OpType::AllReduce),
    ("AllReduceAHCExecutor", OpType::AllReduce),
    ("AllReduceAHCNHRExecutor", OpType::AllReduce),
];

/// `whole` as `staged` should report it. A multi-ring plan runs its
/// channels on several streams of a rank, which share the rank's one
/// logical clock, and its flows across hosts share the host links in the
/// order they run: its step count (the longest chain of hand-offs) and,
/// slightly, its predicted time follow the order the driver happens to
/// run the streams' tasks in, which a plan issued as it runs changes. Its
/// tasks and traffic do not, and its prediction stays within 1 %.
fn comparable(name: &str, whole: &SimReport, staged: &SimReport) -> SimReport {
    let mut w = whole.clone();
    if name.contains("MultiRing") {
        w.steps = staged.steps;
        w.plane_steps = staged.plane_steps;
        if let (Some(a), Some(b)) = (whole.predicted_ns, staged.predicted_ns) {
            let off = (a as f64 - b as f64).abs() / (a.max(1) as f64);
            assert!(off < 0.01, "{name}: predicted {b} ns staged, {a} ns whole");
            w.predicted_ns = staged.predicted_ns;
        }
    }
    w
}

#[test]
fn a_staged_plan_reports_what_the_whole_plan_does() {
    let reg = fixtures(Arc::default(), None);
    let (mut ran, mut refused) = (0, 0);
    for (name, op) in STAGED {
        // 33 ranks make 32 channels of a multi-ring plan, each a stream:
        // slow in a debug build and no other path than 8 ranks' 8
        let most = if name.contains("MultiRing") { 8 } else { 33 };
        for p in [2u32, 3, 5, 8, 33].into_iter().filter(|&p| p <= most) {
            // the last two force several op-base rounds
            for (count, ccl) in [(0u64, None), (1, None), (1000, None), (1024, Some(1024))] {
                for timed in [false, true] {
                    let mut spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum);
                    spec.ccl_buffer_size = ccl.map(|c: usize| c.max(128 * p as usize));
                    if timed {
                        spec = spec
                            .on_hosts(&[p / 2, p - p / 2])
                            .timed(crate::cost::CostParams::default());
                    }
                    let what = format!("{name} p={p} count={count} ccl={ccl:?} timed={timed}");
                    let staged = simulate(registry(), name, &spec);
                    let whole = simulate(&reg, &format!("Whole{name}"), &spec);
                    let (staged, whole) = match (staged, whole) {
                        (Ok(s), Ok(w)) => (s, w),
                        // the multi-ring AllGather and ReduceScatter need
                        // a slot per rank in each channel's share of the
                        // CCL buffer: refused alike, whole or staged
                        (Err(s), Err(w)) if name.contains("MultiRing") => {
                            assert_eq!(s.to_string(), w.to_string(), "{what}");
                            assert!(s.to_string().contains("cannot hold one"), "{what}: {s}");
                            refused += 1;
                            continue;
                        }
                        (s, w) => panic!("{what}: staged {:?}, whole {:?}", s.err(), w.err()),
                    };
                    ran += 1;
                    assert!(staged.checked || count == 0);
                    assert!(staged.tasks > 0 || count == 0);
                    assert_eq!(staged, comparable(name, &whole, &staged), "{what}");
                }
            }
        }
    }
    assert!(refused * 10 < ran, "{refused} of {} refused", ran + refused);
}
#[test]
fn a_staged_plan_is_issued_as_its_ranks_run() {
    // 256 ranks: 510 ring steps of ~6 tasks each per rank, 3,000+ tasks
    let most = Arc::new(AtomicU64::new(0));
    let reg = fixtures(most.clone(), None);
    let spec = SimSpec::all_reduce(256, 4096, DataType::Fp32, ReduceOp::Sum);
    let r = simulate(&reg, "Watched", &spec).unwrap();
    assert!(r.checked);
    assert_eq!(r.steps, 2 * 255);
    assert!(r.tasks > 256 * 3000, "{} tasks", r.tasks);
    // 256 ranks × (510 ring steps + the copy between the phases)
    assert!(STAGES_ISSUED.load(Ordering::Relaxed) >= 256 * 511);
    let most = most.load(Ordering::Relaxed);
    assert!(
        most < ISSUE_BELOW,
        "a stage is issued only while fewer than {ISSUE_BELOW} tasks wait; {most} did"
    );
}

#[test]
fn a_stage_that_fails_names_its_rank_and_op() {
    let reg = fixtures(Arc::default(), Some((3, 7)));
    let spec = SimSpec::all_reduce(6, 600, DataType::Fp32, ReduceOp::Sum);
    let SimFailure::Error(e) = simulate(&reg, "Watched", &spec).unwrap_err() else {
        panic!("expected the stage's error")
    };
    assert_eq!(e.code(), HcclResult::EPara);
    let msg = e.to_string();
    assert!(msg.contains("stage refused on purpose"), "{msg}");
    assert!(msg.contains("rank 3"), "{msg}");
    assert!(msg.contains("sim_allreduce"), "{msg}");
}

#[test]
fn several_drivers_report_what_one_does() {
    let ops = [
        ("AllReduceRingExecutor", OpType::AllReduce),
        ("AllReduceNHRExecutor", OpType::AllReduce),
        ("AllGatherRingExecutor", OpType::AllGather),
        ("ReduceScatterRHDExecutor", OpType::ReduceScatter),
        ("AllToAllMeshExecutor", OpType::AllToAll),
    ];
    for (name, op) in ops {
        for p in [5u32, 7, 64] {
            let spec = SimSpec::op(op, p, 300, DataType::Fp32, ReduceOp::Sum);
            let one = simulate(registry(), name, &spec).unwrap();
            assert!(one.checked);
            // 4 threads for 5 ranks make 3 shards (2, 2, 1); 9 for 7, 7
            for drivers in [2, 3, 4, 9] {
                let many = SimSpec {
                    drivers: Some(drivers),
                    ..spec.clone()
                };
                let many = simulate(registry(), name, &many)
                    .unwrap_or_else(|e| panic!("{name} p={p} drivers={drivers}: {e}"));
                assert_eq!(many, one, "{name} p={p} drivers={drivers}");
            }
        }
    }
}

#[test]
fn a_stage_that_fails_under_several_drivers_names_its_rank() {
    let reg = fixtures(Arc::default(), Some((5, 10)));
    let spec = SimSpec {
        drivers: Some(2),
        ..SimSpec::all_reduce(8, 800, DataType::Fp32, ReduceOp::Sum)
    };
    let SimFailure::Error(e) = simulate(&reg, "Watched", &spec).unwrap_err() else {
        panic!("expected the stage's error")
    };
    let msg = e.to_string();
    assert!(msg.contains("stage refused on purpose"), "{msg}");
    assert!(msg.contains("rank 5"), "{msg}");
}

#[test]
fn a_long_simulation_tells_its_progress() {
    for drivers in [1, 2] {
        let seen = Arc::new(std::sync::Mutex::new(Vec::<SimProgress>::new()));
        let sink = seen.clone();
        let spec = SimSpec {
            drivers: Some(drivers),
            progress: Some(ProgressHook {
                every: std::time::Duration::from_micros(200),
                tell: Arc::new(move |p| sink.lock().unwrap().push(*p)),
            }),
            ..SimSpec::all_reduce(256, 4096, DataType::Fp32, ReduceOp::Sum)
        };
        let r = simulate(registry(), "AllReduceRingExecutor", &spec).unwrap();
        let seen = seen.lock().unwrap();
        let running: Vec<_> = seen
            .iter()
            .filter(|p| p.phase == SimPhase::Running)
            .collect();
        assert!(!running.is_empty(), "drivers={drivers}: {seen:?}");
        for w in running.windows(2) {
            assert!(w[0].tasks <= w[1].tasks, "tasks only grow: {w:?}");
            assert!(w[0].elapsed <= w[1].elapsed);
        }
        for p in seen.iter() {
            assert_eq!(p.ranks, 256);
            assert!(p.ranks_done <= 256 && p.tasks <= r.tasks, "{p:?}");
        }
        let text = running[0].to_string();
        assert!(text.contains("of 256 ranks done"), "{text}");
    }
    // a period longer than the clock can count: never told, no panic
    let spec = SimSpec {
        progress: Some(ProgressHook {
            every: std::time::Duration::MAX,
            tell: Arc::new(|p| panic!("told {p}")),
        }),
        ..SimSpec::all_reduce(8, 100, DataType::Fp32, ReduceOp::Sum)
    };
    assert!(
        simulate(registry(), "AllReduceRingExecutor", &spec)
            .unwrap()
            .checked
    );
}
