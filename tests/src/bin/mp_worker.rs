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
//! printing `ran <count> <executor>` after each). Prints `OK` or
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
//! and aborts the communicator while they are queued). On failure a rank
//! prints one line `DRILL {json}` with its rank, pid, the error's code and
//! message, and the wall-clock time (`t_ns`, since the Unix epoch); the
//! victim prints one with `"event"` when it leaves. Exits 2 after an error,
//! `DRILL_LINGER_MS` (default 0) later: a survivor that lingers is not
//! itself taken for a lost peer by slower survivors.

#![forbid(unsafe_code)]

use hccl_adapter::{read_root_file, DataType, DeviceMem, HcclComm, ReduceOp};
use std::time::Duration;

fn main() {
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
    let s = c.create_stream();
    let f = DataType::Fp32;
    let p = size as usize;
    match scenario {
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
            if rank == 1 {
                std::thread::sleep(Duration::from_secs(3600));
            }
            let send = DeviceMem::alloc(1 << 20)?;
            let recv = DeviceMem::alloc(1 << 20)?;
            c.all_reduce_raw(&send, &recv, 1 << 18, f, ReduceOp::Sum, &s)?;
            return s.synchronize();
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
    let fail = |e: hccl_adapter::HcclError| -> ! {
        drill_line(serde_json::json!({
            "rank": rank,
            "pid": std::process::id(),
            "code": e.code().code(),
            "message": e.to_string(),
            "t_ns": unix_ns() as u64,
        }));
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
    let mut ready_at: Option<std::time::Instant> = None;
    loop {
        if let Err(e) = enqueue(&c).and_then(|_| s.synchronize()) {
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
            other => panic!("unknown DRILL_VICTIM action {other}"),
        }
    }
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
