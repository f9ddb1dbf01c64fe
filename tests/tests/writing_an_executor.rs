//! The executor guide, `docs/writing-an-executor.md`, checked: its worked
//! example (`hccl_tests::guide_executor`, a bidirectional ring AllReduce
//! built from the public step primitives) runs on the plan simulator for
//! every rank count 1..=64 with the steps and bytes the guide states, runs
//! for real on threads and on processes, and is chosen by the selector
//! without any override where its declared cost is the lowest; and every
//! snippet the guide quotes still appears verbatim at the lines it names.

use hccl_adapter::{CommConfig, DeviceBuffer, HcclComm, ReduceOp};
use hccl_algorithm::cost::CostParams;
use hccl_algorithm::prim::{self, Rx, Tx};
use hccl_algorithm::sim::{simulate, SimFailure, SimSpec};
use hccl_algorithm::{best, model_bytes, SelectLimits, SelectQuery};
use hccl_algorithm::{
    AlgResourceRequest, AlgResourceResponse, CollExecutor, CommPlane, ExecutorRegistry, OpParam,
    OpType, SingleSubCommTransport, TopoInfo,
};
use hccl_platform::{DataType, MemKind, Result};
use hccl_tests::guide_executor::{self, moves, Phase, NAME};
use hccl_tests::Ranks;
use hccl_tests::{comms_with_env, expected_value, input_value, run_ranks};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------
// The doc's snippets
// ---------------------------------------------------------------------

const GUIDE: &str = "docs/writing-an-executor.md";

/// The workspace root (this crate is `tests/`).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// `lines` without their common leading whitespace.
fn dedent(lines: &[&str]) -> Vec<String> {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end().to_owned())
        .collect()
}

/// A quote of the guide: the file and 1-based line range it names, and
/// the code block that follows.
struct Quote {
    at: usize,
    file: String,
    lines: (usize, usize),
    code: Vec<String>,
}

/// Every code block of the guide, in order: `Some` for the quotes (a
/// line ``*From `<file>`, lines <a>–<b>:*`` right before the block),
/// `None` for a block without that line, with its language.
fn quotes(doc: &str) -> Vec<(String, Option<Quote>)> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i + 1;
        let end = start
            + lines[start..]
                .iter()
                .position(|l| l.starts_with("```"))
                .unwrap_or_else(|| panic!("{GUIDE}:{}: unclosed code block", i + 1));
        let header = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
        let quote = header
            .and_then(|h| h.trim().strip_prefix("*From `"))
            .map(|h| {
                let (file, rest) = h.split_once('`').expect("From `file`");
                let range = rest
                    .strip_prefix(", lines ")
                    .and_then(|r| r.strip_suffix(":*"))
                    .unwrap_or_else(|| panic!("{GUIDE}:{i}: bad quote header {h:?}"));
                let (a, b) = range.split_once('–').expect("lines a–b (en dash)");
                Quote {
                    at: i + 1,
                    file: file.to_owned(),
                    lines: (a.parse().unwrap(), b.parse().unwrap()),
                    code: lines[start..end].iter().map(|l| l.to_string()).collect(),
                }
            });
        out.push((lang.to_owned(), quote));
        i = end + 1;
    }
    out
}

/// Every Rust block of the guide quotes the source: the lines it names
/// hold exactly the quoted code (up to indentation), so the guide cannot
/// drift from the code that the tests below run.
#[test]
fn every_snippet_of_the_guide_is_quoted_verbatim_from_the_source() {
    let doc = std::fs::read_to_string(root().join(GUIDE)).unwrap();
    let blocks = quotes(&doc);
    let mut quoted = 0;
    for (lang, quote) in &blocks {
        let Some(q) = quote else {
            assert_ne!(
                lang, "rust",
                "{GUIDE}: a Rust block without a *From `file`, lines a–b:* line"
            );
            continue;
        };
        let src = std::fs::read_to_string(root().join(&q.file))
            .unwrap_or_else(|e| panic!("{GUIDE}:{}: {}: {e}", q.at, q.file));
        let src: Vec<&str> = src.lines().collect();
        let code: Vec<&str> = q.code.iter().map(String::as_str).collect();
        let want = dedent(&code);
        let (a, b) = q.lines;
        assert!(
            a >= 1 && a <= b && b <= src.len(),
            "{GUIDE}:{}: lines {a}–{b}",
            q.at
        );
        if dedent(&src[a - 1..b]) != want {
            // say where the snippet is now, if anywhere
            let n = want.len();
            let now = (0..=src.len().saturating_sub(n))
                .find(|&i| dedent(&src[i..i + n]) == want)
                .map(|i| format!("it is at lines {}–{} now", i + 1, i + n))
                .unwrap_or_else(|| "it is nowhere in the file".into());
            panic!(
                "{GUIDE}:{}: the snippet quoted from {} lines {a}–{b} differs from the source; {now}",
                q.at, q.file
            );
        }
        quoted += 1;
    }
    assert!(
        quoted >= 8,
        "the guide quotes its example ({quoted} quotes)"
    );
}

// ---------------------------------------------------------------------
// The plan simulator
// ---------------------------------------------------------------------

/// A registry with the built-ins and the guide's executor.
fn guide_registry() -> ExecutorRegistry {
    let registry = ExecutorRegistry::with_builtins();
    guide_executor::register(&registry).unwrap();
    registry
}

/// The guide's step table is a ring reduce-scatter and allgather in each
/// direction: at every step each slice a rank receives is the one its
/// neighbour sends, and after the reduce-scatter rank r was the last to
/// receive slice r of both directions.
#[test]
fn the_step_table_is_consistent() {
    for p in 2..=9usize {
        for s in 0..p - 1 {
            for r in 0..p {
                let (left, right) = ((r + p - 1) % p, (r + 1) % p);
                for phase in [Phase::ReduceScatter, Phase::AllGather] {
                    let m = moves(phase, r, p, s);
                    assert_eq!(m.cw.1, moves(phase, left, p, s).cw.0);
                    assert_eq!(m.ccw.1, moves(phase, right, p, s).ccw.0);
                }
            }
        }
        for r in 0..p {
            let last = moves(Phase::ReduceScatter, r, p, p - 2);
            assert_eq!((last.cw.1, last.ccw.1), (r, r), "p={p} r={r}");
        }
    }
}

/// The guide's formulas for one op-base round of n bytes on p ≥ 2 ranks,
/// when n cuts into 2p slices of whole 128-byte lines: 2(p−1) steps; each
/// rank sends 2(p−1)/p·n bytes, (p−1)/p·n over each of its two links
/// (both rings share the one link of p = 2); all ranks together reduce
/// (p−1)·n bytes.
#[test]
fn the_guide_executor_on_the_simulator_for_1_to_64_ranks() {
    let registry = guide_registry();
    for p in 1..=64u32 {
        let count = 64 * p as u64; // f32: 2p slices of 128 bytes
        let spec = SimSpec::all_reduce(p, count, DataType::Fp32, ReduceOp::Sum);
        let report = simulate(&registry, NAME, &spec).unwrap_or_else(|e| panic!("p={p}: {e}"));
        assert!(report.checked, "p={p}: every rank's result was compared");
        let (p64, n) = (p as u64, 4 * count);
        if p == 1 {
            assert_eq!((report.steps, report.max_rank_bytes_sent), (0, 0));
            continue;
        }
        assert_eq!(report.steps, 2 * (p64 - 1), "p={p}: steps");
        assert_eq!(report.max_rank_bytes_sent, 2 * (p64 - 1) * n / p64, "p={p}");
        assert_eq!(report.reduce_bytes, (p64 - 1) * n, "p={p}: bytes reduced");
        let per_link = if p == 2 { n } else { (p64 - 1) * n / p64 };
        assert_eq!(
            report.link_bytes.len(),
            if p == 2 { 2 } else { 2 * p as usize }
        );
        for (&(from, to), &bytes) in &report.link_bytes {
            assert!(to == (from + 1) % p || from == (to + 1) % p, "{from}->{to}");
            assert_eq!(bytes, per_link, "p={p}: bytes over {from}->{to}");
        }
    }
}

/// Counts that do not cut evenly (empty slices, a tail shorter than the
/// others), every data type and reduction, and op-base rounds: results
/// stay exact; rounds multiply the steps.
#[test]
fn the_guide_executor_on_the_simulator_with_awkward_counts_types_and_rounds() {
    let registry = guide_registry();
    for p in 1..=64u32 {
        for count in [0u64, 1, 7, p as u64 + 1000] {
            let spec = SimSpec::all_reduce(p, count, DataType::Fp32, ReduceOp::Sum);
            simulate(&registry, NAME, &spec).unwrap_or_else(|e| panic!("p={p} count={count}: {e}"));
        }
    }
    for p in [2u32, 3, 5, 8] {
        // every type an AllReduce takes (HCCL's FP8 types are refused)
        for dtype in DataType::reducible() {
            for op in ReduceOp::ALL {
                let spec = SimSpec::all_reduce(p, 333, dtype, op);
                simulate(&registry, NAME, &spec)
                    .unwrap_or_else(|e| panic!("p={p} {dtype} {op}: {e}"));
            }
        }
    }
    // a 1 KiB CCL buffer: 4 KiB of data in 4 rounds of 2(p−1) steps
    let mut spec = SimSpec::all_reduce(4, 1024, DataType::Fp32, ReduceOp::Max);
    spec.ccl_buffer_size = Some(1024);
    let report = simulate(&registry, NAME, &spec).unwrap();
    assert_eq!(report.steps, 4 * 2 * 3);
}

/// The mistake the primitives prevent: a ring step written as a send
/// followed by a receive, two handshakes instead of one. Every rank waits
/// for its right neighbour's ack before acking its left neighbour, so no
/// rank ever acks. Wrong on purpose: the guide shows the simulator's
/// report of it.
struct SendThenRecv;

impl CollExecutor for SendThenRecv {
    fn name(&self) -> &str {
        "SendThenRecv"
    }
    fn calc_res_request(&self, _: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
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
        let (s, comm) = (&param.stream, res.sub_comm(CommPlane::Combine, 0)?);
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        let (left, right) = (comm.link((r + p - 1) % p)?, comm.link((r + 1) % p)?);
        let data = res.ccl_input.range(0, param.input_bytes() as usize)?;
        s.set_step(0);
        prim::send(s, Tx::new(right, &data, MemKind::CclOutput, 0))?; // waits for right's ack...
        prim::recv(s, Rx::new(left)) // ...which right gives only here: never
    }
}

#[test]
fn the_simulator_reports_a_deadlock_naming_rank_step_verb_and_peer() {
    let registry = ExecutorRegistry::empty();
    registry
        .register(
            "SendThenRecv",
            Arc::new(|_: &TopoInfo| Box::new(SendThenRecv) as Box<dyn CollExecutor>),
        )
        .unwrap();
    let spec = SimSpec::all_reduce(3, 16, DataType::Fp32, ReduceOp::Sum);
    let e = simulate(&registry, "SendThenRecv", &spec).unwrap_err();
    let SimFailure::Deadlock { stuck } = &e else {
        panic!("expected a deadlock, got {e}")
    };
    assert_eq!(stuck.len(), 3);
    for s in stuck {
        assert_eq!(
            (s.verb, s.peer, s.step),
            (Some("RxAck"), Some((s.rank + 1) % 3), 0)
        );
    }
    // the message the guide quotes
    assert_eq!(
        e.to_string(),
        "deadlock: no rank can progress; 3 stuck task(s): \
         [rank 0 step 0: RxAck with peer rank 1 over the simulated link] \
         [rank 1 step 0: RxAck with peer rank 2 over the simulated link] \
         [rank 2 step 0: RxAck with peer rank 0 over the simulated link]"
    );
}

// ---------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------

/// The smallest AllReduce (in f32 elements, model bytes = 4 × count) on
/// `p` ranks of one host where the ranking of `registry` picks the
/// guide's executor with the default cost parameters and without the AIV
/// and direct-read executors, up to 1 MiB; `None` if it never wins there.
fn first_win(registry: &ExecutorRegistry, p: u32) -> Option<u64> {
    let topo = TopoInfo::single_server(0, p).unwrap();
    let cost = CostParams::default();
    let wins = |count: u64| {
        let bytes = model_bytes(OpType::AllReduce, 4 * count, p);
        let q = SelectQuery::new(
            OpType::AllReduce,
            &topo,
            bytes,
            &cost,
            SelectLimits::default(),
        );
        let c = registry.candidates(&q);
        best(&c).is_some_and(|i| &*c[i].name == NAME)
    };
    let count = (1..=1u64 << 18).find(|&c| wins(c))?;
    // one crossover: it keeps winning above it
    assert!((count..=1 << 18).step_by(997).all(wins), "p={p}");
    Some(count)
}

/// Where the α-β-γ model ranks the guide's executor first: the sizes the
/// guide states (from about 12.7 KB on 3 ranks, 24 KB on 4, 82 KB on 8),
/// never on 2 ranks or on two hosts, which it does not serve.
#[test]
fn the_cost_model_ranks_the_guide_executor_first_above_a_crossover() {
    let registry = guide_registry();
    assert_eq!(first_win(&registry, 2), None);
    assert_eq!(first_win(&registry, 3).map(|c| 4 * c), Some(12_660));
    assert_eq!(first_win(&registry, 4).map(|c| 4 * c), Some(24_004));
    assert_eq!(first_win(&registry, 8).map(|c| 4 * c), Some(82_288));
    let topo = TopoInfo::new(0, vec![0, 0, 0, 1, 1, 1]).unwrap();
    let cost = CostParams::default();
    let q = SelectQuery::new(
        OpType::AllReduce,
        &topo,
        1 << 20,
        &cost,
        SelectLimits::default(),
    );
    assert!(registry.candidates(&q).iter().all(|c| &*c.name != NAME));
}

/// A tuning file with the built-in default cost parameters, so that a
/// calibration file on the developer's machine cannot move the sizes
/// where the selector picks the guide's executor.
fn default_tuning_file(tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("hccl-guide-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tuning.json");
    std::fs::write(
        &path,
        r#"{"version": 1, "host": "defaults", "measured_unix_s": 0,
            "shm": {"alpha_us": 3.0, "gbps": 3.0}, "tcp": {"alpha_us": 30.0, "gbps": 1.5},
            "reduce_gbps": 5.0}"#,
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// Removes what [`default_tuning_file`] made.
fn remove_tuning_file(path: &str) {
    if let Some(dir) = Path::new(path).parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// One f32 AllReduce of `count` elements per rank on `comms`, checked
/// against the reference; returns the executor that ran it.
fn allreduce_on(comms: &Arc<Vec<HcclComm>>, count: usize, op: ReduceOp) -> String {
    let p = comms.len() as u32;
    let c = comms.clone();
    run_ranks(p, Duration::from_secs(60), move |r| {
        let comm = &c[r as usize];
        let stream = comm.create_stream();
        let input: Vec<f32> = (0..count).map(|i| input_value(op, r, i)).collect();
        let send = DeviceBuffer::from_slice(&input).unwrap();
        let mut recv = DeviceBuffer::<f32>::alloc(count).unwrap();
        comm.all_reduce(&send, &mut recv, op, &stream).unwrap();
        stream.synchronize().unwrap();
        for (i, g) in recv.to_vec().unwrap().iter().enumerate() {
            assert_eq!(
                *g,
                expected_value::<f32>(op, p, i),
                "p={p} {op} element {i}"
            );
        }
    });
    let ran: Vec<String> = comms
        .iter()
        .map(|c| c.communicator().last_executor().unwrap_or_default())
        .collect();
    assert!(ran.windows(2).all(|w| w[0] == w[1]), "{ran:?}");
    ran[0].clone()
}

// ---------------------------------------------------------------------
// For real: threads
// ---------------------------------------------------------------------

/// Forced by name, the executor runs on 2, 3 and 4 ranks as threads,
/// including ops larger than the CCL buffer (several op-base rounds).
#[test]
fn forced_by_name_it_runs_on_threads() {
    guide_executor::register_global().unwrap();
    for p in [2u32, 3, 4] {
        let comms = comms_with_env(p, &[("HCCL_BUFFSIZE", "1"), ("HCCL_RS_EXECUTOR", NAME)]);
        for count in [1usize, 1000, (1 << 18) + 5] {
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                assert_eq!(allreduce_on(&comms, count, op), NAME, "p={p} count={count}");
            }
        }
    }
}

/// Registered with its declaration, the executor is chosen by the selector
/// without any override where the cost model ranks it first, and a
/// built-in runs everywhere else: small ops, 2 ranks, two hosts.
#[test]
fn the_selector_chooses_it_where_its_declared_cost_is_lowest() {
    guide_executor::register_global().unwrap();
    let tuning = default_tuning_file("threads");
    let env = [
        ("HCCL_BUFFSIZE", "1"),
        ("HCCL_RS_TUNING_FILE", tuning.as_str()),
        // the one-host fast paths outrank any cost: leave them out here
        ("HCCL_RS_AIV_MAX_BYTES", "off"),
        ("HCCL_RS_DIRECT_MIN_BYTES", "off"),
    ];
    for p in [3u32, 4] {
        let comms = comms_with_env(p, &env);
        assert_ne!(
            allreduce_on(&comms, 1000, ReduceOp::Sum),
            NAME,
            "4 KB, p={p}"
        );
        assert_eq!(
            allreduce_on(&comms, 16 << 10, ReduceOp::Sum),
            NAME,
            "64 KiB, p={p}"
        );
        assert_eq!(
            allreduce_on(&comms, 300_001, ReduceOp::Sum),
            NAME,
            "1.2 MB, p={p}"
        );
    }
    let two = comms_with_env(2, &env);
    assert_ne!(allreduce_on(&two, 16 << 10, ReduceOp::Sum), NAME, "2 ranks");
    let config = CommConfig::from_source(&env[..]).unwrap();
    let hosts = Arc::new(HcclComm::init_all_on_hosts(vec![0, 0, 1, 1], config).unwrap());
    assert_ne!(
        allreduce_on(&hosts, 16 << 10, ReduceOp::Sum),
        NAME,
        "2 hosts"
    );
    remove_tuning_file(&tuning);
}

// ---------------------------------------------------------------------
// For real: processes
// ---------------------------------------------------------------------

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

/// Launcher variables of the environment the test may run in, which would
/// otherwise steer the workers.
const INHERITED: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "HCCL_ROOT_ADDR",
    "HCCL_RS_ROOT_FILE",
    "HCCL_RS_EXECUTOR",
    "HCCL_ALGO",
    "HCCL_RS_HOST_ID",
];

/// Runs `p` worker processes of the `guide_allreduce` scenario with
/// `env`, under a deadline; returns each rank's `ran <count> <executor>`
/// lines as (count, executor), after checking that every rank printed
/// `OK` and that no /dev/shm segment of theirs is left.
fn run_workers(p: u32, env: &[(&str, &str)]) -> Vec<Vec<(usize, String)>> {
    let dir = std::env::temp_dir().join(format!("hccl-guide-mp{p}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_string_lossy().into_owned();
    let mut ranks = Ranks(Vec::new());
    for r in 0..p {
        let mut cmd = Command::new(WORKER);
        cmd.args([
            "root_info",
            &r.to_string(),
            &p.to_string(),
            &dir,
            "guide_allreduce",
        ]);
        for v in INHERITED {
            cmd.env_remove(v);
        }
        cmd.env("HCCL_BUFFSIZE", "1")
            .env("HCCL_EXEC_TIMEOUT", "20")
            .env("HCCL_CONNECT_TIMEOUT", "20")
            .env("HCCL_IF_IP", "127.0.0.1")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        ranks.0.push(cmd.spawn().expect("spawn worker"));
    }
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ranks
        .0
        .iter_mut()
        .all(|c| c.try_wait().ok().flatten().is_some())
    {
        // dropping `ranks` kills them all
        assert!(
            Instant::now() < deadline,
            "{p} ranks did not finish in 120 s: hang"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut all = Vec::new();
    for (r, c) in std::mem::take(&mut ranks.0).into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(
            o.status.success() && out.lines().last() == Some("OK"),
            "p={p} rank {r} exited {:?}\nstdout: {out}\nstderr: {err}",
            o.status.code()
        );
        all.push(
            out.lines()
                .filter_map(|l| l.strip_prefix("ran "))
                .map(|l| {
                    let (n, name) = l.split_once(' ').unwrap();
                    (n.parse().unwrap(), name.to_owned())
                })
                .collect(),
        );
    }
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pids.iter().any(|p| n.starts_with(&format!("hccl-rs-{p}-"))))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "p={p}: segments left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
    all
}

/// Processes on one host (shared-memory links): forced by name on 2, 3
/// and 4 ranks, every op runs the guide's executor with correct results
/// (the worker checks them), the largest in several op-base rounds.
#[test]
fn forced_by_name_it_runs_across_processes() {
    for p in [2u32, 3, 4] {
        for ran in run_workers(p, &[("HCCL_RS_EXECUTOR", NAME)]) {
            assert_eq!(ran.len(), 4, "p={p}: {ran:?}");
            assert!(ran.iter().all(|(_, e)| e == NAME), "p={p}: {ran:?}");
        }
    }
}

/// Processes that register the executor and set no override: the
/// selector runs it for the ops of 64 KiB and 1.2 MB, a built-in for the
/// small ones, with correct results everywhere.
#[test]
fn selected_without_override_it_runs_across_processes() {
    let tuning = default_tuning_file("processes");
    let env = [
        ("HCCL_RS_TUNING_FILE", tuning.as_str()),
        ("HCCL_RS_AIV_MAX_BYTES", "off"),
        ("HCCL_RS_DIRECT_MIN_BYTES", "off"),
    ];
    for p in [3u32, 4] {
        for ran in run_workers(p, &env) {
            for (count, executor) in ran {
                assert_eq!(
                    executor == NAME,
                    count >= 16384,
                    "p={p} count={count}: {executor}"
                );
            }
        }
    }
    remove_tuning_file(&tuning);
}

/// The same bug for real: instead of a report, each rank's wait times out
/// after `HCCL_EXEC_TIMEOUT` with an error naming the op, the executor,
/// the step, the verb and the peer it waited for.
#[test]
fn the_same_bug_for_real_times_out_naming_op_step_verb_and_peer() {
    hccl_algorithm::registry()
        .register(
            "SendThenRecv",
            Arc::new(|_: &TopoInfo| Box::new(SendThenRecv) as Box<dyn CollExecutor>),
        )
        .unwrap();
    let comms = comms_with_env(
        3,
        &[
            ("HCCL_RS_EXECUTOR", "SendThenRecv"),
            ("HCCL_EXEC_TIMEOUT", "1"),
        ],
    );
    let errors = Arc::new(std::sync::Mutex::new(vec![String::new(); 3]));
    let (c, e) = (comms.clone(), errors.clone());
    run_ranks(3, Duration::from_secs(30), move |r| {
        let comm = &c[r as usize];
        let stream = comm.create_stream();
        let send = DeviceBuffer::from_slice(&[1.0f32; 4]).unwrap();
        let mut recv = DeviceBuffer::<f32>::alloc(4).unwrap();
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
            .unwrap();
        let err = hccl_tests::sync_fails_within(&stream, Duration::from_secs(10));
        e.lock().unwrap()[r as usize] = err.to_string();
    });
    // whichever rank times out first tells its peers, which fail at once
    // with its error (`remote error: peer rank 0 failed: timeout: ...`)
    let errors = errors.lock().unwrap();
    let mut timed_out = 0;
    for (r, e) in errors.iter().enumerate() {
        assert!(
            e.contains("(HCCL_EXEC_TIMEOUT) for RxAck with peer rank")
                && e.contains("at step 0 of algorithm SendThenRecv"),
            "rank {r}: {e}"
        );
        if e.starts_with("timeout: ") {
            timed_out += 1;
            let peer = (r + 1) % 3;
            let waited = format!("for RxAck with peer rank {peer} over the in-process link");
            assert!(e.contains(&waited), "rank {r}: {e}");
            assert!(
                e.contains(&format!("[rank {r}, op tag 'AllReduce_")),
                "rank {r}: {e}"
            );
        }
    }
    assert!(timed_out >= 1, "{errors:?}");
}
