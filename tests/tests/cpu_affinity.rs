//! `HCCL_RS_CPU_AFFINITY` on process ranks: with `auto` and a mask with a
//! CPU per rank, each rank (its calling thread and its device's worker)
//! ends up on a single CPU of its own; with `off` it keeps the full mask.

use std::process::{Command, Stdio};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

/// The Cpus_allowed_list of this (test) process: what the ranks inherit.
fn inherited() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned()
}

/// CPUs in a list like `0-1,4`.
fn count(list: &str) -> usize {
    list.split(',')
        .map(|p| match p.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// Runs 2 ranks with `setting`; returns each rank's (main, worker) lists.
fn run(setting: &str) -> Vec<(String, String)> {
    let dir = std::env::temp_dir().join(format!("hccl-affinity-{setting}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_string_lossy().into_owned();
    let children: Vec<_> = (0..2u32)
        .map(|r| {
            Command::new(WORKER)
                .args(["root_info", &r.to_string(), "2", &dir, "affinity"])
                .env("HCCL_BUFFSIZE", "1")
                .env("HCCL_EXEC_TIMEOUT", "20")
                .env("HCCL_CONNECT_TIMEOUT", "20")
                .env("HCCL_IF_IP", "127.0.0.1")
                .env("HCCL_RS_EXEC_MODE", "worker")
                .env("HCCL_RS_CPU_AFFINITY", setting)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let out: Vec<(String, String)> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                o.status.success() && out.lines().last() == Some("OK"),
                "{setting}: {out}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let line = |k: &str| {
                out.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .unwrap_or_else(|| panic!("no '{k}' line in {out}"))
                    .to_owned()
            };
            (line("main "), line("worker "))
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn auto_pins_each_rank_to_its_own_cpu_and_off_keeps_the_mask() {
    let mask = inherited();
    let off = run("off");
    for (main, worker) in &off {
        assert_eq!((main, worker), (&mask, &mask), "off must keep the mask");
    }
    if count(&mask) < 2 {
        // fewer CPUs than ranks: auto must keep the mask too
        for (main, worker) in run("auto") {
            assert_eq!((&main, &worker), (&mask, &mask));
        }
        return;
    }
    let auto = run("auto");
    for (main, worker) in &auto {
        assert_eq!(count(main), 1, "auto: main thread on {main}");
        assert_eq!(main, worker, "the worker runs on its rank's CPU");
    }
    assert_ne!(auto[0].0, auto[1].0, "the ranks share a CPU: {auto:?}");
}
