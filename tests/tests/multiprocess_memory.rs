//! Memory peers address, ranks as processes on one host (shared-memory
//! links; `hccl-mp-worker ... mem_*`, see its `memory.rs`): symmetric
//! windows written through peers' mappings (p = 2 and 4); the direct
//! executors on registered buffers correct *and* reading the peers'
//! buffers through their mappings (no cross-memory read), on
//! unregistered ones through cross-memory attach; `exchange_mem` mapping
//! a peer's registration once; bad input a typed error on every rank; a
//! peer on another declared host not addressable, naming it. Every child
//! runs under a deadline and is killed when the test ends; no rank leaves
//! a /dev/shm entry.

use hccl_tests::{segments_of, stdout_of_all, Ranks};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");
const LIMIT: Duration = Duration::from_secs(90);

/// Runs `n` ranks of `scenario` (root info in a fresh directory), each
/// with `env(rank)`; returns each rank's stdout, failing the test unless
/// every rank printed `OK` last and left no /dev/shm segment.
fn run(n: u32, scenario: &str, env: impl Fn(u32) -> Vec<(String, String)>) -> Vec<String> {
    let dir =
        std::env::temp_dir().join(format!("hccl-mpmem-{scenario}-{n}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let mut ranks = Ranks(
        (0..n)
            .map(|r| {
                let mut cmd = Command::new(WORKER);
                cmd.args(["root_info", &r.to_string(), &n.to_string(), &d, scenario]);
                hccl_tests::drill::clear_worker_env(&mut cmd);
                // a parent's HCCL_RS_CMA would change which path the
                // registered-memory scenarios take
                cmd.env_remove("HCCL_RS_CMA");
                cmd.env("HCCL_BUFFSIZE", "1")
                    .env("HCCL_EXEC_TIMEOUT", "20")
                    .env("HCCL_CONNECT_TIMEOUT", "20")
                    .env("HCCL_IF_IP", "127.0.0.1");
                for (k, v) in env(r) {
                    cmd.env(k, v);
                }
                cmd.stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("spawn worker")
            })
            .collect(),
    );
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    let out = stdout_of_all(&mut ranks.0, LIMIT, scenario);
    for (r, o) in out.iter().enumerate() {
        assert_eq!(
            o.lines().last(),
            Some("OK"),
            "{scenario}, {n} ranks: rank {r} printed:\n{o}"
        );
    }
    assert!(
        segments_of(&pids).is_empty(),
        "segments left: {:?}",
        segments_of(&pids)
    );
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn cma() -> bool {
    hccl_platform::cross_memory_attach_permitted()
}

#[test]
fn symmetric_windows_across_2_and_4_processes() {
    for n in [2, 4] {
        run(n, "mem_window", |_| vec![]);
    }
}

/// `stats <what> mapped=<m> cma=<c>` of one rank's output.
fn stats(out: &str, what: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("stats {what} ")))
        .unwrap_or_else(|| panic!("no {what} stats in:\n{out}"));
    let num = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    (num("mapped="), num("cma="))
}

#[test]
fn direct_executors_on_registered_buffers_read_through_mappings_across_processes() {
    if !cma() {
        return; // the direct executors need cross-memory attach as their fallback
    }
    for (n, op, executor) in [
        (2, "allreduce", "AllReduceDirectExecutor"),
        (4, "allreduce", "AllReduceDirectExecutor"),
        (2, "allgather", "AllGatherDirectExecutor"),
        (3, "alltoall", "AllToAllDirectExecutor"),
    ] {
        let out = run(n, "mem_direct", |_| {
            vec![
                ("HCCL_RS_EXECUTOR".into(), executor.into()),
                ("MEM_OP".into(), op.into()),
            ]
        });
        for (r, o) in out.iter().enumerate() {
            let (mapped, cma) = stats(o, "registered");
            assert!(
                mapped > 0,
                "{op} p={n} rank {r}: no read through a mapping\n{o}"
            );
            assert_eq!(
                cma, 0,
                "{op} p={n} rank {r}: registered buffers read with CMA\n{o}"
            );
            let (mapped2, cma2) = stats(o, "unregistered");
            assert_eq!(
                mapped2, mapped,
                "{op} p={n} rank {r}: unregistered buffers mapped\n{o}"
            );
            assert!(
                cma2 > 0,
                "{op} p={n} rank {r}: unregistered buffers not read with CMA\n{o}"
            );
        }
    }
}

#[test]
fn exchange_mem_maps_the_peer_registration_once_across_processes() {
    if !cma() {
        return;
    }
    run(2, "mem_exchange", |_| {
        vec![("HCCL_RS_EXECUTOR".into(), "AllReduceDirectExecutor".into())]
    });
}

#[test]
fn bad_registrations_and_window_sizes_fail_on_every_process() {
    run(3, "mem_bad", |_| vec![]);
}

/// Ranks 0, 1 on one declared host, 2, 3 on another: windows work among
/// each host's ranks, and a peer pointer across is not supported.
#[test]
fn a_window_peer_on_another_declared_host_is_not_supported() {
    run(4, "mem_window", |r| {
        let host = r / 2;
        let peers = if host == 0 { "0,1" } else { "2,3" };
        vec![
            ("HCCL_RS_HOST_ID".into(), format!("host{host}")),
            ("MEM_HOST_PEERS".into(), peers.into()),
            (
                "MEM_OTHER_HOST".into(),
                (if host == 0 { 2 } else { 0 }).to_string(),
            ),
        ]
    });
}
