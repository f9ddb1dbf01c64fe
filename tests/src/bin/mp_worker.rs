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
