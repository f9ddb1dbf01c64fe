//! One rank of a multi-process test: `hccl-mp-worker <mode> <rank> <size> <dir> [scenario]`.
//!
//! Modes: `root_info` (rank 0 writes the root info to `<dir>/root.bin`),
//! `rank_table` (`<dir>/rank_table.json`), `env` (launcher variables set by
//! the parent). Scenarios: `collectives` (default: allreduce, allgather,
//! broadcast, alltoall, checked), `count_mismatch`, `op_mismatch`
//! (rank 1 calls differently), `stall` (rank 1 sleeps forever after
//! joining, for the kill test), `guide_allreduce` (registers the executor
//! guide's bidirectional ring, `hccl_tests::guide_executor`, before joining,
//! then runs checked f32 allreduces of 1, 1000, 16384 and 300001 elements,
//! printing `ran <count> <executor>` after each), `soak` (issue 15: see `fn soak`),
//! `capture` (issue 17: every primitive captured and replayed 100 times,
//! `hccl_tests::capture`), `fp8` (HCCL's FP8 types moved byte for byte by
//! every non-reducing op and refused by the reducing ones, `hccl_tests::fp8`),
//! `alltoallvc` (issue 18: `hccl_tests::alltoallvc`'s matrices), `mem_*`
//! (registered memory and symmetric windows: `memory.rs`), `fused_*`
//! (the fused compute/communication ops: `fused.rs`). Prints `OK` or
//! `ERROR <code> <message>`.
//!
//! Scenario `drill` (the fault drills, `tools/fault-drill.sh`): loops one
//! op until it fails. `DRILL_OP` is `allreduce`, `allgather`, `broadcast`,
//! `alltoall` or `barrier`; `DRILL_BYTES` the bytes each rank sends
//! (default 4 MiB); `DRILL_ROOT` the broadcast root (default 0). After its
//! first op a rank creates `<dir>/ready.<rank>`, so the driver knows when
//! the loop runs. `DRILL_VICTIM=<rank>:<how>` makes one rank leave on its
//! own `DRILL_AFTER_MS` (default 300) after it is ready: `exit` (the process
//! exits at once, communicator and all), `destroy` (destroys its
//! communicator, then lives on for a minute), `abort` (enqueues ops
//! and aborts the communicator while they are queued), `revoke` (revokes
//! the communicator, then tries one more op, which must be refused),
//! `revoke_exit` (revokes and exits at once). `DRILL_SHRINK=<ranks>`: after
//! its first failed op, a survivor prints its error line, shrinks the
//! communicator without those ranks (`agree`: without the ranks the
//! survivors agree are lost), runs one checked AllReduce on the new
//! one and prints `{"event": "shrunk", "new_rank", "new_size", "t_ns"}`
//! (with `DRILL_REG=1` each rank first registers a buffer and exchanges it
//! with every peer, and after the shrink checks that the registration and
//! the peers' exchanged memory came along: `"carried": true`). On failure a rank
//! prints one line `DRILL {json}` with its rank, pid, the error's code and
//! message, and the wall-clock time (`t_ns`, since the Unix epoch); the
//! victim prints one with `"event"` when it leaves. Exits 2 after an error,
//! `DRILL_LINGER_MS` (default 0) later: a survivor that lingers is not
//! itself taken for a lost peer by slower survivors.
//!
//! Scenario `flap` (op retry over a link that goes down and up): see
//! `mp_worker/flap.rs`.

#![forbid(unsafe_code)]

#[path = "mp_worker/flap.rs"]
mod flap;
#[path = "mp_worker/fused.rs"]
mod fused;
#[path = "mp_worker/memory.rs"]
mod memory;

use hccl_adapter::{read_root_file, DataType, DeviceMem, HcclComm, ReduceOp};
use std::time::Duration;

fn main() {
    // logs to stderr when asked (HCCL_RS_LOG=debug, ...), as hccl-test
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("HCCL_RS_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let args: Vec<String> = std::env::args().collect();
    let (mode, rank, size, dir) = (
        &args[1],
        args[2].parse::<u32>().unwrap(),
        args[3].parse::<u32>().unwrap(),
        &args[4],
    );
    let scenario = args.get(5).map(String::as_str).unwrap_or("collectives");
    if scenario == "drill" {
        drill(mode, rank, size, dir);
    }
    if scenario == "flap" {
        flap::run(comm(mode, rank, size, dir), rank, size, dir);
    }
    match run(mode, rank, size, dir, scenario) {
        Ok(()) => println!("OK"),
        Err(e) => {
            println!("ERROR {} {e}", e.code().code());
            std::process::exit(2);
        }
    }
}

fn comm(mode: &str, rank: u32, size: u32, dir: &str) -> hccl_adapter::Result<HcclComm> {
    match mode {
        "root_info" => {
            let path = format!("{dir}/root.bin");
            let root = if rank == 0 {
                let root = HcclComm::get_root_info()?;
                std::fs::write(format!("{path}.tmp"), root.0).unwrap();
                std::fs::rename(format!("{path}.tmp"), &path).unwrap();
                root
            } else {
                read_root_file(&path, Duration::from_secs(30))?
            };
            HcclComm::init_root_info(size, &root, rank)
        }
        "rank_table" => HcclComm::init_cluster_info(&format!("{dir}/rank_table.json"), rank),
        "env" => HcclComm::init_from_env(),
        // a new rank of a communicator being grown (DRILL_GROW)
        "grow" => {
            let path = format!("{dir}/grow.bin");
            let bytes = std::fs::read(&path)
                .map_err(|e| hccl_adapter::HcclError::from_io(format!("reading {path}"), e))?;
            let id =
                hccl_adapter::RootInfo(bytes.try_into().map_err(|_| {
                    hccl_adapter::HcclError::para(format!("{path} is not a grow id"))
                })?);
            HcclComm::join_grown(size, &id, rank)
        }
        other => panic!("unknown mode {other}"),
    }
}

fn val(rank: u32, i: usize) -> f32 {
    ((rank as usize * 131 + i * 7) % 1000) as f32
}

fn run(mode: &str, rank: u32, size: u32, dir: &str, scenario: &str) -> hccl_adapter::Result<()> {
    if scenario == "guide_allreduce" {
        // a user program registers its executors before its first op:
        // from then on the selector ranks them beside the built-ins
        hccl_tests::guide_executor::register_global()?;
    }
    let c = comm(mode, rank, size, dir)?;
    assert_eq!((c.rank(), c.size()), (rank, size));
    if let Some(what) = scenario.strip_prefix("mem_") {
        return memory::run(&c, what);
    }
    if let Some(what) = scenario.strip_prefix("fused_") {
        return fused::run(&c, what, dir);
    }
    let s = c.create_stream();
    let f = DataType::Fp32;
    let p = size as usize;
    match scenario {
        "grown" => {
            let (r, _) = check_allreduce(&c, "on the grown communicator")?;
            drill_line(
                serde_json::json!({"event": "grown", "grown_rank": r, "t_ns": unix_ns() as u64}),
            );
            return c.barrier(&s).and_then(|_| s.synchronize());
        }
        "recover" => return recover_scenario(&c, dir),
        "count_mismatch" | "op_mismatch" => {
            let n = if scenario == "count_mismatch" && rank == 1 {
                8320
            } else {
                16512
            };
            let send = DeviceMem::alloc(n * 4)?;
            let recv = DeviceMem::alloc(n * 4)?;
            if scenario == "op_mismatch" && rank == 1 {
                c.all_gather_raw(&send, &DeviceMem::alloc(n * 4 * p)?, n as u64, f, &s)?;
            } else {
                c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s)?;
            }
            return s.synchronize();
        }
        "abort" => {
            if rank == 1 {
                std::thread::sleep(Duration::from_secs(3600));
            }
            let c = std::sync::Arc::new(c);
            if rank == 0 {
                let c2 = c.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(500));
                    c2.abort("the application gave up");
                });
            }
            let send = DeviceMem::alloc(1 << 20)?;
            let recv = DeviceMem::alloc(1 << 20)?;
            c.all_reduce_raw(&send, &recv, 1 << 18, f, ReduceOp::Sum, &s)?;
            return s.synchronize();
        }
        "stall" => {
            // STALL_RANK (default 1) joins and then does nothing
            let stalled: u32 = std::env::var("STALL_RANK")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            if rank == stalled {
                std::thread::sleep(Duration::from_secs(3600));
            }
            let send = DeviceMem::alloc(1 << 20)?;
            let recv = DeviceMem::alloc(1 << 20)?;
            c.all_reduce_raw(&send, &recv, 1 << 18, f, ReduceOp::Sum, &s)?;
            return s.synchronize();
        }
        "slow_rank" => {
            // issue 20: rank 2 computes 2 ms longer before each of 100
            // AllReduces (a straggler); the timeline (HCCL_RS_TRACE) shows
            // it entering the ops last
            let n = 16384;
            let send = DeviceMem::alloc(n * 4)?;
            let recv = DeviceMem::alloc(n * 4)?;
            for _ in 0..100 {
                if rank == 2 {
                    let t = std::time::Instant::now();
                    while t.elapsed() < Duration::from_millis(2) {
                        std::hint::spin_loop();
                    }
                }
                c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s)?;
                s.synchronize()?;
            }
            return Ok(());
        }
        "fr_missing" => {
            // issue 20: rank 2 never calls the third AllReduce; the others
            // time out and their streams' failure dumps their flight
            // recorders; rank 2 dumps on the test's SIGUSR1, then leaves
            let n = 4096;
            let send = DeviceMem::alloc(n * 4)?;
            let recv = DeviceMem::alloc(n * 4)?;
            for k in 0..3 {
                if k == 2 && rank == 2 {
                    let dir = std::env::var("HCCL_RS_FR_DUMP_DIR").unwrap_or_default();
                    let mine = format!("_rank{rank}.json");
                    let deadline = std::time::Instant::now() + Duration::from_secs(60);
                    while std::time::Instant::now() < deadline {
                        let dumped = std::fs::read_dir(&dir)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .any(|e| e.file_name().to_string_lossy().ends_with(&mine));
                        if dumped {
                            println!("dumped");
                            return Ok(());
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    return Err(hccl_adapter::HcclError::timeout("no SIGUSR1 dump came"));
                }
                c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s)?;
                s.synchronize()?;
            }
            return Ok(());
        }
        "affinity" => {
            // where HCCL_RS_CPU_AFFINITY left this rank's threads
            println!("main {}", cpus_allowed("/proc/thread-self"));
            for t in std::fs::read_dir("/proc/self/task")
                .into_iter()
                .flatten()
                .flatten()
            {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                if comm.starts_with("hccl-dev") {
                    println!("worker {}", cpus_allowed(&t.path().to_string_lossy()));
                }
            }
            return Ok(());
        }
        "guide_allreduce" => {
            for n in [1usize, 1000, 16384, 300_001] {
                let send = DeviceMem::alloc(n * 4)?;
                send.copy_from_host(&(0..n).map(|i| val(rank, i)).collect::<Vec<_>>())?;
                let recv = DeviceMem::alloc(n * 4)?;
                c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s)?;
                s.synchronize()?;
                let got = recv.to_vec::<f32>(n)?;
                for (i, g) in got.iter().enumerate() {
                    let want: f32 = (0..size).map(|q| val(q, i)).sum();
                    assert_eq!(*g, want, "allreduce n={n} element {i}");
                }
                let ran = c.communicator().last_executor().unwrap_or_default();
                println!("ran {n} {ran}");
            }
            return Ok(());
        }
        "soak" => return soak(&c, &s, rank, size),
        "fp8" => return hccl_tests::fp8::run(&c, &[1, 1000, 300_001]),
        // issue 30: the root 300 rooted ops ahead of sleeping peers
        "root_ahead" => {
            return hccl_tests::root_ahead::run(&c, size - 1, Duration::from_millis(300));
        }
        // issue 30: the repeat path (same buffers, senders ahead,
        // interleaved ops), root the last rank
        "repeat" => {
            return hccl_tests::repeat::run(&c, size - 1, Duration::from_millis(200));
        }
        // issue 31: in-place AllGather(V) / ReduceScatter(V), unregistered
        // (op-base) and registered (graph mode) buffers
        "in_place" => {
            hccl_tests::in_place::run(&c, false)?;
            return hccl_tests::in_place::run(&c, true);
        }
        "alltoallvc" => {
            // issue 18: AllToAllVC's matrices, small blocks and blocks
            // larger than the CCL buffer
            for scale in [1u64, 60_000] {
                hccl_tests::alltoallvc::run_all(&c, &s, scale)?;
            }
            return Ok(());
        }
        "graph" => return graph(&c, rank, size),
        "capture" => {
            // issue 17: every primitive captured, each graph launched 100
            // times with the inputs rewritten, then all in one graph
            for n in [7usize, 1003, 70_000] {
                let cases = hccl_tests::capture::cases(&c, n)?;
                hccl_tests::capture::capture_and_replay(&c, &cases, false, 100)?;
                hccl_tests::capture::capture_and_replay(&c, &cases, true, 20)?;
            }
            return Ok(());
        }
        _ => {}
    }
    for n in [1usize, 1000, 300_001] {
        // allreduce
        let send = DeviceMem::alloc(n * 4)?;
        send.copy_from_host(&(0..n).map(|i| val(rank, i)).collect::<Vec<_>>())?;
        let recv = DeviceMem::alloc(n * 4)?;
        c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s)?;
        s.synchronize()?;
        let got = recv.to_vec::<f32>(n)?;
        for (i, g) in got.iter().enumerate() {
            let want: f32 = (0..size).map(|q| val(q, i)).sum();
            assert_eq!(*g, want, "allreduce n={n} element {i}");
        }
        // allgather
        let all = DeviceMem::alloc(n * 4 * p)?;
        c.all_gather_raw(&send, &all, n as u64, f, &s)?;
        s.synchronize()?;
        let got = all.to_vec::<f32>(n * p)?;
        for q in 0..p {
            for i in (0..n).step_by(97) {
                assert_eq!(
                    got[q * n + i],
                    val(q as u32, i),
                    "allgather n={n} block {q}"
                );
            }
        }
        // broadcast from the last rank
        let root = size - 1;
        let buf = DeviceMem::alloc(n * 4)?;
        if rank == root {
            buf.copy_from_host(&(0..n).map(|i| val(root, i)).collect::<Vec<_>>())?;
        }
        c.broadcast_raw(&buf, n as u64, f, root, &s)?;
        s.synchronize()?;
        assert_eq!(
            buf.to_vec::<f32>(n)?,
            (0..n).map(|i| val(root, i)).collect::<Vec<_>>(),
            "broadcast n={n}"
        );
        // alltoall
        let a_send = DeviceMem::alloc(n * 4 * p)?;
        a_send.copy_from_host(&(0..n * p).map(|i| val(rank, i)).collect::<Vec<_>>())?;
        let a_recv = DeviceMem::alloc(n * 4 * p)?;
        c.all_to_all_raw(&a_send, n as u64, f, &a_recv, n as u64, f, &s)?;
        s.synchronize()?;
        let got = a_recv.to_vec::<f32>(n * p)?;
        for q in 0..p {
            for i in (0..n).step_by(89) {
                assert_eq!(
                    got[q * n + i],
                    val(q as u32, rank as usize * n + i),
                    "alltoall n={n} from {q}"
                );
            }
        }
    }
    c.barrier(&s)?;
    s.synchronize()
}

/// Nanoseconds since the Unix epoch (comparable across processes).
fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn drill_line(fields: serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "DRILL {fields}");
    let _ = out.flush();
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The `drill` scenario (see the module docs). Never returns.
fn drill(mode: &str, rank: u32, size: u32, dir: &str) -> ! {
    let op = std::env::var("DRILL_OP").unwrap_or_else(|_| "allreduce".into());
    let bytes: usize = env_or("DRILL_BYTES", 4usize << 20);
    let root: u32 = env_or("DRILL_ROOT", 0);
    let after = Duration::from_millis(env_or("DRILL_AFTER_MS", 300));
    let linger = Duration::from_millis(env_or("DRILL_LINGER_MS", 0));
    let victim = std::env::var("DRILL_VICTIM").ok().and_then(|v| {
        let (r, how) = v.split_once(':')?;
        Some((r.parse::<u32>().ok()?, how.to_owned()))
    });
    let error_line = |e: &hccl_adapter::HcclError| {
        drill_line(serde_json::json!({
            "rank": rank,
            "pid": std::process::id(),
            "code": e.code().code(),
            "message": e.to_string(),
            "t_ns": unix_ns() as u64,
        }))
    };
    let fail = |e: hccl_adapter::HcclError| -> ! {
        error_line(&e);
        std::thread::sleep(linger);
        std::process::exit(2)
    };
    let c = comm(mode, rank, size, dir).unwrap_or_else(|e| fail(e));
    let s = c.create_stream();
    let f = DataType::Fp32;
    let p = size as usize;
    let n = (bytes / 4).max(p);
    let send = DeviceMem::alloc(n * 4).unwrap_or_else(|e| fail(e));
    let recv = DeviceMem::alloc(n * 4 * p).unwrap_or_else(|e| fail(e));
    let enqueue = |c: &HcclComm| -> hccl_adapter::Result<()> {
        match op.as_str() {
            "allreduce" => c.all_reduce_raw(&send, &recv, n as u64, f, ReduceOp::Sum, &s),
            "allgather" => c.all_gather_raw(&send, &recv, n as u64, f, &s),
            "broadcast" => c.broadcast_raw(&send, n as u64, f, root, &s),
            "alltoall" => {
                let per = (n / p) as u64;
                c.all_to_all_raw(&send, per, f, &recv, per, f, &s)
            }
            "barrier" => c.barrier(&s),
            other => panic!("unknown DRILL_OP {other}"),
        }
    };
    // DRILL_SHRINK=<ranks>: after the first failed op, the survivors
    // shrink the communicator without those ranks and run one checked
    // AllReduce on the new one
    // (`agree`: without a list, the survivors agreeing on the lost ranks)
    let shrink: Option<Option<Vec<u32>>> = std::env::var("DRILL_SHRINK").ok().map(|v| {
        (v != "agree").then(|| v.split(',').filter_map(|r| r.trim().parse().ok()).collect())
    });
    let reg = if std::env::var("DRILL_REG").is_ok() {
        Some(register_pattern(&c).unwrap_or_else(|e| fail(e)))
    } else {
        None
    };
    let mut ready_at: Option<std::time::Instant> = None;
    loop {
        if let Err(e) = enqueue(&c).and_then(|_| s.synchronize()) {
            if let Some(exclude) = &shrink {
                error_line(&e);
                match shrink_and_check(&c, exclude.as_deref()) {
                    Ok((n, new_rank, new_size)) => {
                        let t_ns = unix_ns() as u64;
                        let carried = reg.as_ref().map(|r| check_carried(&n, r));
                        if let Some(Err(e)) = carried {
                            fail(e);
                        }
                        drill_line(serde_json::json!({
                            "rank": rank,
                            "event": "shrunk",
                            "new_rank": new_rank,
                            "new_size": new_size,
                            "t_ns": t_ns,
                            "carried": carried.is_some(),
                        }));
                        if std::env::var("DRILL_GROW").is_ok() {
                            if let Err(e) = grow_back(&n, size, dir) {
                                fail(e);
                            }
                        }
                        std::process::exit(0)
                    }
                    Err(e) => fail(e),
                }
            }
            fail(e);
        }
        let t = *ready_at.get_or_insert_with(|| {
            let _ = std::fs::write(format!("{dir}/ready.{rank}"), b"");
            std::time::Instant::now()
        });
        let Some((v, how)) = &victim else { continue };
        if *v != rank || t.elapsed() < after {
            continue;
        }
        let event = |what: &str| {
            drill_line(serde_json::json!({
                "rank": rank,
                "pid": std::process::id(),
                "event": what,
                "t_ns": unix_ns() as u64,
            }))
        };
        match how.as_str() {
            "exit" => {
                event("exit");
                std::process::exit(0);
            }
            "destroy" => {
                event("destroy");
                c.destroy();
                std::thread::sleep(Duration::from_secs(60));
                std::process::exit(0);
            }
            "abort" => {
                for _ in 0..4 {
                    if let Err(e) = enqueue(&c) {
                        fail(e);
                    }
                }
                event("abort");
                c.abort("the drill aborted with ops queued");
                match s.synchronize() {
                    Err(e) => fail(e),
                    Ok(()) => {
                        drill_line(serde_json::json!({"rank": rank, "event": "abort-finished"}));
                        std::process::exit(0)
                    }
                }
            }
            "revoke" | "revoke_exit" => {
                // the others are in (or entering) their next op, which
                // cannot complete without this rank
                event("revoke");
                c.revoke("the drill revoked");
                if how == "revoke_exit" {
                    std::process::exit(0);
                }
                // this rank's own next op is refused
                match enqueue(&c).and_then(|_| s.synchronize()) {
                    Err(e) => fail(e),
                    Ok(()) => {
                        drill_line(serde_json::json!({"rank": rank, "event": "ran-after-revoke"}));
                        std::process::exit(0)
                    }
                }
            }
            other => panic!("unknown DRILL_VICTIM action {other}"),
        }
    }
}

/// The `recover` scenario (issue 32's op-level recovery): a count
/// mismatch (rank 1 passes another count) must fail the op on every rank;
/// every rank recovers and runs a checked AllReduce on the same handle;
/// a stream of the old device is refused. Then a hung rank: rank 2 enters
/// the next op 800 ms late with a 300 ms exec timeout on every rank; the
/// others time out (rank 2 may complete or fail), all recover and run a
/// checked AllReduce. Prints `RECOVER {json}` lines: the errors and how
/// long each `recover` took.
fn recover_scenario(c: &HcclComm, _dir: &str) -> hccl_adapter::Result<()> {
    let rank = c.rank();
    let line = |v: serde_json::Value| println!("RECOVER {v}");
    let recover = |what: &str| -> hccl_adapter::Result<()> {
        let t = std::time::Instant::now();
        c.recover()?;
        line(
            serde_json::json!({"rank": rank, "event": "recovered", "after": what,
            "us": t.elapsed().as_micros() as u64}),
        );
        Ok(())
    };
    let f = DataType::Fp32;
    let s = c.create_stream();
    let send = DeviceMem::alloc(16512 * 4)?;
    let recv = DeviceMem::alloc(16512 * 4)?;
    let n = if rank == 1 { 8320 } else { 16512 };
    match c
        .all_reduce_raw(&send, &recv, n, f, ReduceOp::Sum, &s)
        .and_then(|_| s.synchronize())
    {
        Ok(()) => {
            return Err(hccl_adapter::HcclError::internal(
                "the mismatched AllReduce succeeded",
            ))
        }
        Err(e) => line(serde_json::json!({"rank": rank, "event": "mismatch",
            "code": e.code().code(), "message": e.to_string()})),
    }
    recover("mismatch")?;
    check_allreduce(c, "after recovering from a mismatch")?;
    match c.all_reduce_raw(&send, &recv, 16512, f, ReduceOp::Sum, &s) {
        Err(e) if e.to_string().contains("stream belongs to device") => {}
        other => {
            return Err(hccl_adapter::HcclError::internal(format!(
                "an old stream after recovering: {other:?}"
            )))
        }
    }
    c.set_exec_timeout(Some(Duration::from_millis(300)));
    if rank == 2 {
        std::thread::sleep(Duration::from_millis(800));
    }
    let s = c.create_stream();
    let res = c
        .all_reduce_raw(&send, &recv, 16512, f, ReduceOp::Sum, &s)
        .and_then(|_| s.synchronize());
    line(serde_json::json!({"rank": rank, "event": "hung",
        "code": res.as_ref().err().map(|e| e.code().code()),
        "message": res.as_ref().err().map(|e| e.to_string())}));
    c.set_exec_timeout(None);
    recover("timeout")?;
    check_allreduce(c, "after recovering from a timeout")?;
    line(serde_json::json!({"rank": rank, "event": "done", "recoveries": c.recoveries()}));
    let s = c.create_stream();
    c.barrier(&s)?;
    s.synchronize()
}

/// Elements of the DRILL_REG buffer: element i of rank r's is r·10⁴ + i.
const REG_COUNT: usize = 1024;

/// DRILL_REG: a shareable buffer holding this rank's pattern, registered
/// with `c` and exchanged with every peer.
fn register_pattern(c: &HcclComm) -> hccl_adapter::Result<hccl_adapter::MemRegistration> {
    let mem = DeviceMem::alloc_shareable(REG_COUNT * 4)?;
    let r = c.rank() as i32;
    mem.copy_from_host(
        &(0..REG_COUNT as i32)
            .map(|i| r * 10_000 + i)
            .collect::<Vec<_>>(),
    )?;
    let reg = c.register_mem(&mem)?;
    let peers: Vec<u32> = (0..c.size()).filter(|&q| q != c.rank()).collect();
    c.exchange_mem(&reg, &peers)?;
    Ok(reg)
}

/// After a shrink: `reg` (made on the old communicator) is registered
/// with `n`; the peers' exchanged buffers came along under their new
/// ranks, in the survivors' order (their old ranks, read from their
/// patterns, increase with the new ranks); an AllReduce from the
/// registered buffer sums every survivor's pattern; and the old handle
/// deregisters it from `n`.
fn check_carried(n: &HcclComm, reg: &hccl_adapter::MemRegistration) -> hccl_adapter::Result<()> {
    let bad = |what: String| hccl_adapter::HcclError::internal(format!("carried memory: {what}"));
    if !n.is_registered(reg.mem()) {
        return Err(bad(
            "the buffer is not registered with the new communicator".into(),
        ));
    }
    let old_rank = |m: &DeviceMem| -> hccl_adapter::Result<i32> {
        let v = m.to_vec::<i32>(REG_COUNT)?;
        let r = v[0] / 10_000;
        match v
            .iter()
            .enumerate()
            .find(|(i, &x)| x != r * 10_000 + *i as i32)
        {
            Some((i, x)) => Err(bad(format!("element {i} of a peer's buffer is {x}"))),
            None => Ok(r),
        }
    };
    let mut olds = vec![None; n.size() as usize];
    olds[n.rank() as usize] = Some(old_rank(reg.mem())?);
    let peers = n.exchanged_peers(reg);
    if peers.len() != n.size() as usize - 1 {
        return Err(bad(format!(
            "{} exchanged peers for {} ranks",
            peers.len(),
            n.size()
        )));
    }
    for (q, m) in &peers {
        olds[*q as usize] = Some(old_rank(m)?);
    }
    let olds: Vec<i32> = olds
        .into_iter()
        .map(|o| o.ok_or_else(|| bad("a rank has no peer entry".into())))
        .collect::<hccl_adapter::Result<_>>()?;
    if olds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad(format!(
            "old ranks by new rank {olds:?} are out of order"
        )));
    }
    let s = n.create_stream();
    let out = DeviceMem::alloc(REG_COUNT * 4)?;
    n.all_reduce_raw(
        reg.mem(),
        &out,
        REG_COUNT as u64,
        DataType::Int32,
        ReduceOp::Sum,
        &s,
    )?;
    s.synchronize()?;
    let base: i32 = olds.iter().map(|r| r * 10_000).sum();
    let got = out.to_vec::<i32>(REG_COUNT)?;
    let p = olds.len() as i32;
    if let Some((i, x)) = got
        .iter()
        .enumerate()
        .find(|(i, &x)| x != base + p * *i as i32)
    {
        return Err(bad(format!(
            "AllReduce from the registered buffer: element {i} is {x}"
        )));
    }
    n.deregister_mem(reg)?;
    if n.is_registered(reg.mem()) {
        return Err(bad("still registered after deregistering".into()));
    }
    Ok(())
}

/// Shrinks `c` without `exclude` (`None`: the ranks the survivors agree
/// are lost) and runs one AllReduce on the new
/// communicator, checked against the sum of the survivors' new ranks + 1;
/// returns the new rank and size.
fn shrink_and_check(
    c: &HcclComm,
    exclude: Option<&[u32]>,
) -> hccl_adapter::Result<(HcclComm, u32, u32)> {
    let n = match exclude {
        Some(list) => c.shrink(list)?,
        None => c.shrink_agreed()?,
    };
    let (r, p) = check_allreduce(&n, "after the shrink")?;
    Ok((n, r, p))
}

/// DRILL_GROW: the shrunk communicator `n` grows back to `size` ranks: its
/// rank 0 makes the id and writes it to `<dir>/grow.bin` (the test starts
/// the new processes with it: `hccl-mp-worker grow <rank> <size> <dir>
/// grown`), every member grows, and one checked AllReduce runs on the
/// grown communicator; prints `{"event": "grown", "grown_rank", "t_ns"}`.
fn grow_back(n: &HcclComm, size: u32, dir: &str) -> hccl_adapter::Result<()> {
    let id = if n.rank() == 0 {
        let id = n.grow_id()?;
        let tmp = format!("{dir}/grow.bin.tmp");
        std::fs::write(&tmp, id.0)
            .and_then(|_| std::fs::rename(&tmp, format!("{dir}/grow.bin")))
            .map_err(|e| hccl_adapter::HcclError::from_io("writing the grow id", e))?;
        Some(id)
    } else {
        None
    };
    let g = n.grow(size, id.as_ref())?;
    let (r, _) = check_allreduce(&g, "after the grow")?;
    drill_line(serde_json::json!({"event": "grown", "grown_rank": r, "t_ns": unix_ns() as u64}));
    // the new ranks may still read this rank's part of the last op
    let s = g.create_stream();
    g.barrier(&s)?;
    s.synchronize()
}

/// One AllReduce on `n`, checked against the sum of every rank + 1;
/// returns the rank and size.
fn check_allreduce(n: &HcclComm, when: &str) -> hccl_adapter::Result<(u32, u32)> {
    let (r, p) = (n.rank(), n.size());
    let s = n.create_stream();
    let count = 4096;
    let send = DeviceMem::alloc(count * 4)?;
    let recv = DeviceMem::alloc(count * 4)?;
    send.copy_from_host(&vec![(r + 1) as f32; count])?;
    n.all_reduce_raw(
        &send,
        &recv,
        count as u64,
        DataType::Fp32,
        ReduceOp::Sum,
        &s,
    )?;
    s.synchronize()?;
    let want = (p * (p + 1) / 2) as f32;
    let got = recv.to_vec::<f32>(count)?;
    if let Some(i) = got.iter().position(|&v| v != want) {
        return Err(hccl_adapter::HcclError::internal(format!(
            "{when}, element {i} is {} instead of {want}",
            got[i]
        )));
    }
    Ok((r, p))
}

/// The `Cpus_allowed_list` of the task at `proc_dir` (e.g. `/proc/thread-self`).
fn cpus_allowed(proc_dir: &str) -> String {
    std::fs::read_to_string(format!("{proc_dir}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

/// SplitMix64: a tiny deterministic generator. Every rank seeds it alike,
/// so every rank draws the same sequence of ops, sizes and roots.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (the modulo bias is irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A message size in bytes, skewed small so that 10^5 ops take minutes:
    /// 90% up to 4 KiB, 9% up to 256 KiB, 1% up to 4 MiB.
    fn bytes(&mut self) -> usize {
        let cap: u64 = match self.below(100) {
            0..=89 => 4 << 10,
            90..=98 => 256 << 10,
            _ => 4 << 20,
        };
        (self.below(cap) + 1) as usize
    }
}

/// The soak's input: element `i` of rank `q`'s send buffer in op `k`.
/// Small integers, so f32 sums, maxima and minima over 4 ranks are exact;
/// `k` in the formula makes a stale result from an earlier op show.
fn soak_val(k: u64, q: u32, i: usize) -> f32 {
    ((k as usize % 997 * 31 + q as usize * 131 + i * 7) % 1000) as f32
}

fn soak_reduce(op: ReduceOp, a: f32, b: f32) -> f32 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
        ReduceOp::Prod => a * b,
    }
}

/// One process's footprint: resident set (KiB, `VmRSS`), open fds, its own
/// /dev/shm segments (`hccl-rs-<pid>-*`), every `hccl-rs-*` segment
/// (other processes' included, so only informative when nothing runs
/// beside) and the `hccl-rs-*` segments it has mapped (`shm_mapped`).
fn soak_sample() -> serde_json::Value {
    let rss_kib: u64 = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    let prefix = hccl_platform::SHM_PREFIX.trim_start_matches('/');
    let own = format!("{prefix}{}-", std::process::id());
    let names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    // segments are unlinked once every peer has mapped them, so the names
    // alone undercount: the distinct hccl-rs segments still mapped count too
    let mut mapped: Vec<String> = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once(&format!("/dev/shm/{prefix}"))
                .map(|(_, n)| n.to_owned())
        })
        .collect();
    mapped.sort();
    mapped.dedup();
    serde_json::json!({
        "rss_kib": rss_kib,
        "shm_mapped": mapped.len(),
        "fds": fds,
        "shm_own": names.iter().filter(|n| n.starts_with(&own)).count(),
        "shm_all": names.len(),
    })
}

/// The `soak` scenario (issue 15): `SOAK_OPS` (default 10,000) seeded
/// pseudo-random ops over every primitive, the same sequence on every rank
/// (`SOAK_SEED`, default 15), each result checked against a host reference
/// (every `SOAK_CHECK_EVERY`-th op, default every op). Samples the
/// footprint after a warm-up of 100 ops (`start`; the first 13 run every
/// primitive at 4 MiB), halfway (`mid`) and at the end, and prints one line
/// `SOAK {json}`; a wrong result is counted (`bad`), the first described.
fn soak(c: &HcclComm, s: &hccl_adapter::Stream, rank: u32, size: u32) -> hccl_adapter::Result<()> {
    let ops: u64 = env_or("SOAK_OPS", 10_000);
    let seed: u64 = env_or("SOAK_SEED", 15);
    let every: u64 = env_or::<u64>("SOAK_CHECK_EVERY", 1).max(1);
    let warmup = ops.min(100);
    let f = DataType::Fp32;
    let p = size as usize;
    let r = rank as usize;
    let mut rng = SplitMix(seed);
    let (mut bad, mut checked, mut first_bad) = (0u64, 0u64, None::<String>);
    let mut per_op = [0u64; 13];
    let mut start = soak_sample();
    let mut mid = start.clone();
    let t0 = std::time::Instant::now();
    let host = |k: u64, q: u32, len: usize| (0..len).map(|i| soak_val(k, q, i)).collect::<Vec<_>>();
    let load = |k: u64, len: usize| -> hccl_adapter::Result<DeviceMem> {
        let m = DeviceMem::alloc(len.max(1) * 4)?;
        m.copy_from_host(&host(k, rank, len))?;
        Ok(m)
    };
    for k in 0..ops {
        if k == warmup {
            start = soak_sample();
        }
        if k == ops / 2 {
            mid = soak_sample();
        }
        let (mut kind, mut bytes) = (rng.below(13), rng.bytes());
        if k < 13 && warmup >= 13 {
            // the warm-up opens with every primitive at the largest size,
            // so the allocator's high-water mark is set before the start
            // sample and later growth means a leak, not a first big op
            (kind, bytes) = (k, 4 << 20);
        }
        let root = rng.below(size as u64) as u32;
        let red = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][rng.below(3) as usize];
        // whole-buffer ops move `bytes`; per-rank blocks are `bytes / p`,
        // so no buffer exceeds 4 MiB
        let n = (bytes / 4).max(1);
        let b = (bytes / 4 / p).max(1);
        per_op[kind as usize] += 1;
        // (what we got, what we want) for the check
        let x = |q: u32, i: usize| soak_val(k, q, i);
        let rx = |i: usize| (1..size).fold(x(0, i), |a, q| soak_reduce(red, a, x(q, i)));
        let (name, got, want): (&str, Vec<f32>, Vec<f32>) = match kind {
            0 => {
                let send = load(k, n)?;
                let recv = DeviceMem::alloc(n * 4)?;
                c.all_reduce_raw(&send, &recv, n as u64, f, red, s)?;
                s.synchronize()?;
                ("allreduce", recv.to_vec(n)?, (0..n).map(rx).collect())
            }
            1 => {
                let send = load(k, b)?;
                let recv = DeviceMem::alloc(b * p * 4)?;
                c.all_gather_raw(&send, &recv, b as u64, f, s)?;
                s.synchronize()?;
                let want = (0..b * p).map(|j| x((j / b) as u32, j % b)).collect();
                ("allgather", recv.to_vec(b * p)?, want)
            }
            2 => {
                let send = load(k, b * p)?;
                let recv = DeviceMem::alloc(b * 4)?;
                c.reduce_scatter_raw(&send, &recv, b as u64, f, red, s)?;
                s.synchronize()?;
                (
                    "reduce_scatter",
                    recv.to_vec(b)?,
                    (0..b).map(|i| rx(r * b + i)).collect(),
                )
            }
            3 => {
                let buf = if rank == root {
                    load(k, n)?
                } else {
                    DeviceMem::alloc(n * 4)?
                };
                c.broadcast_raw(&buf, n as u64, f, root, s)?;
                s.synchronize()?;
                ("broadcast", buf.to_vec(n)?, host(k, root, n))
            }
            4 => {
                let send = load(k, n)?;
                let recv = DeviceMem::alloc(n * 4)?;
                c.reduce_raw(&send, &recv, n as u64, f, red, root, s)?;
                s.synchronize()?;
                if rank == root {
                    ("reduce", recv.to_vec(n)?, (0..n).map(rx).collect())
                } else {
                    ("reduce", vec![], vec![])
                }
            }
            5 => {
                let send = if rank == root {
                    load(k, b * p)?
                } else {
                    DeviceMem::alloc(b * p * 4)?
                };
                let recv = DeviceMem::alloc(b * 4)?;
                c.scatter_raw(&send, &recv, b as u64, f, root, s)?;
                s.synchronize()?;
                (
                    "scatter",
                    recv.to_vec(b)?,
                    (0..b).map(|i| x(root, r * b + i)).collect(),
                )
            }
            6 => {
                let send = load(k, b)?;
                let recv = DeviceMem::alloc(b * p * 4)?;
                c.gather_raw(&send, &recv, b as u64, f, root, s)?;
                s.synchronize()?;
                if rank == root {
                    let want = (0..b * p).map(|j| x((j / b) as u32, j % b)).collect();
                    ("gather", recv.to_vec(b * p)?, want)
                } else {
                    ("gather", vec![], vec![])
                }
            }
            7 => {
                let send = load(k, b * p)?;
                let recv = DeviceMem::alloc(b * p * 4)?;
                c.all_to_all_raw(&send, b as u64, f, &recv, b as u64, f, s)?;
                s.synchronize()?;
                let want = (0..b * p)
                    .map(|j| x((j / b) as u32, r * b + j % b))
                    .collect();
                ("alltoall", recv.to_vec(b * p)?, want)
            }
            8 => {
                c.barrier(s)?;
                s.synchronize()?;
                ("barrier", vec![], vec![])
            }
            9 => {
                // a ring shift: even ranks send first, odd ranks receive first
                let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
                let out = load(k, n)?;
                let inb = DeviceMem::alloc(n * 4)?;
                if rank % 2 == 0 {
                    c.send_raw(&out, n as u64, f, next, s)?;
                    c.recv_raw(&inb, n as u64, f, prev, s)?;
                } else {
                    c.recv_raw(&inb, n as u64, f, prev, s)?;
                    c.send_raw(&out, n as u64, f, next, s)?;
                }
                s.synchronize()?;
                ("send_recv", inb.to_vec(n)?, host(k, prev, n))
            }
            10 => {
                // rank q contributes b + q elements (at least one)
                let counts: Vec<u64> = (0..p).map(|q| (b + q) as u64).collect();
                let displs: Vec<u64> = counts
                    .iter()
                    .scan(0, |a, &c| {
                        let d = *a;
                        *a += c;
                        Some(d)
                    })
                    .collect();
                let total = counts.iter().sum::<u64>() as usize;
                let send = load(k, counts[r] as usize)?;
                let recv = DeviceMem::alloc(total * 4)?;
                c.all_gather_v_raw(&send, counts[r], &recv, &counts, &displs, f, s)?;
                s.synchronize()?;
                let mut want = vec![0.0; total];
                for q in 0..p {
                    for i in 0..counts[q] as usize {
                        want[displs[q] as usize + i] = x(q as u32, i);
                    }
                }
                ("allgather_v", recv.to_vec(total)?, want)
            }
            11 => {
                let counts: Vec<u64> = (0..p).map(|q| (b + q) as u64).collect();
                let displs: Vec<u64> = counts
                    .iter()
                    .scan(0, |a, &c| {
                        let d = *a;
                        *a += c;
                        Some(d)
                    })
                    .collect();
                let total = counts.iter().sum::<u64>() as usize;
                let send = load(k, total)?;
                let recv = DeviceMem::alloc(counts[r] as usize * 4)?;
                c.reduce_scatter_v_raw(&send, &counts, &displs, &recv, counts[r], f, red, s)?;
                s.synchronize()?;
                let want = (0..counts[r] as usize)
                    .map(|i| rx(displs[r] as usize + i))
                    .collect();
                ("reduce_scatter_v", recv.to_vec(counts[r] as usize)?, want)
            }
            _ => {
                // rank a sends b + (a + 2 q) % 3 elements to rank q
                let cnt = |a: usize, q: usize| (b + (a + 2 * q) % 3) as u64;
                let prefix = |v: &[u64]| -> Vec<u64> {
                    v.iter()
                        .scan(0, |a, &c| {
                            let d = *a;
                            *a += c;
                            Some(d)
                        })
                        .collect()
                };
                let sc: Vec<u64> = (0..p).map(|q| cnt(r, q)).collect();
                let rc: Vec<u64> = (0..p).map(|a| cnt(a, r)).collect();
                let (sd, rd) = (prefix(&sc), prefix(&rc));
                let (st, rt) = (
                    sc.iter().sum::<u64>() as usize,
                    rc.iter().sum::<u64>() as usize,
                );
                let send = load(k, st)?;
                let recv = DeviceMem::alloc(rt * 4)?;
                c.all_to_all_v_raw(&send, &sc, &sd, f, &recv, &rc, &rd, f, s)?;
                s.synchronize()?;
                let mut want = vec![0.0; rt];
                for a in 0..p {
                    let from = prefix(&(0..p).map(|q| cnt(a, q)).collect::<Vec<_>>())[r] as usize;
                    for i in 0..rc[a] as usize {
                        want[rd[a] as usize + i] = x(a as u32, from + i);
                    }
                }
                ("alltoall_v", recv.to_vec(rt)?, want)
            }
        };
        if k % every == 0 {
            checked += 1;
            if got != want {
                bad += 1;
                if first_bad.is_none() {
                    let at = got.iter().zip(&want).position(|(g, w)| g != w);
                    first_bad = Some(format!(
                        "op {k} {name} bytes={bytes} root={root} {red:?}: first difference at {at:?} (len {} vs {})",
                        got.len(),
                        want.len()
                    ));
                }
            }
        }
    }
    let end = soak_sample();
    // nobody leaves (closing its links) before every rank has sampled: a
    // peer's exit closes sockets here and would show as an fd change
    c.barrier(s)?;
    s.synchronize()?;
    let line = serde_json::json!({
        "rank": rank,
        "pid": std::process::id(),
        "ops": ops,
        "warmup": warmup,
        "checked": checked,
        "bad": bad,
        "first_bad": first_bad,
        "per_op": per_op,
        "secs": t0.elapsed().as_secs_f64(),
        "start": start,
        "mid": mid,
        "end": end,
    });
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "SOAK {line}");
        let _ = out.flush();
    }
    Ok(())
}

/// Every primitive captured on its own and replayed 100 times with the
/// inputs rewritten between launches, each result checked (the cases of
/// `hccl_tests::capture`): small blocks (AIV kernels) and larger ones (the
/// direct executors on mapped peer buffers). Prints the peer-buffer reads
/// by load/store and by cross-memory attach.
fn graph(c: &HcclComm, rank: u32, size: u32) -> hccl_adapter::Result<()> {
    for n in [300usize, 20_000] {
        for case in hccl_tests::capture::cases(c, n)? {
            hccl_tests::capture::capture_and_replay(c, std::slice::from_ref(&case), false, 100)
                .map_err(|e| e.during(format!("rank {rank} of {size}")))?;
        }
    }
    let st = hccl_platform::peer_access_stats();
    println!(
        "mapped {} cma {} wrote {}",
        st.mapped_reads, st.cma_reads, st.mapped_writes
    );
    Ok(())
}
