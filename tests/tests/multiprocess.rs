//! Ranks as separate OS processes over TCP on loopback: communicators
//! created by root info, by rank table and by each launcher's variables;
//! collectives checked; a killed rank makes the others fail fast, naming it.
//!
//! Every child runs under a watchdog and is killed when the test ends,
//! whether it passed or not.

use hccl_tests::{segments_of, Ranks};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

const LAUNCHER_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "HCCL_ROOT_ADDR",
    "HCCL_RS_ROOT_FILE",
    "HCCL_BUFFSIZE",
    "HCCL_RS_EXECUTOR",
];

fn tempdir(tag: &str) -> String {
    let d = std::env::temp_dir().join(format!("hccl-mp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.to_string_lossy().into_owned()
}

/// A port free now, below the ephemeral range (32768 and up): a port the
/// kernel handed out could be taken by an outgoing connection of another
/// test before the worker binds it (seen under load: the worker then
/// failed and its peers saw a reset).
fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seed = u64::from(std::process::id()).wrapping_mul(7919);
    for _ in 0..2000 {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = 20000 + ((seed + i * 104_729) % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000");
}

/// One worker process: rank `r` of `n`.
fn worker(
    r: u32,
    n: u32,
    mode: &str,
    scenario: &str,
    dir: &str,
    env: &[(String, String)],
) -> Child {
    let mut cmd = Command::new(WORKER);
    cmd.args([mode, &r.to_string(), &n.to_string(), dir, scenario]);
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
    cmd.env("HCCL_BUFFSIZE", "1")
        .env("HCCL_EXEC_TIMEOUT", "20")
        .env("HCCL_CONNECT_TIMEOUT", "20")
        .env("HCCL_IF_IP", "127.0.0.1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn worker")
}

fn spawn(
    n: u32,
    mode: &str,
    scenario: &str,
    dir: &str,
    env: impl Fn(u32) -> Vec<(String, String)>,
) -> Ranks {
    Ranks(
        (0..n)
            .map(|r| worker(r, n, mode, scenario, dir, &env(r)))
            .collect(),
    )
}

/// Waits for every rank (up to `limit`); returns (exit code, stdout, stderr) per rank.
fn wait(mut ranks: Ranks, limit: Duration) -> Vec<(Option<i32>, String, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let done = ranks
            .0
            .iter_mut()
            .all(|c| c.try_wait().ok().flatten().is_some());
        if done {
            break;
        }
        if Instant::now() > deadline {
            let out: Vec<String> = std::mem::take(&mut ranks.0)
                .into_iter()
                .map(|mut c| {
                    let _ = c.kill();
                    let o = c.wait_with_output().unwrap();
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .collect();
            panic!("ranks did not finish within {limit:?} (hang); output: {out:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::mem::take(&mut ranks.0)
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .collect()
}

fn assert_all_ok(results: &[(Option<i32>, String, String)], what: &str) {
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert!(
            *code == Some(0) && out.trim() == "OK",
            "{what}: rank {r} exited {code:?}\nstdout: {out}\nstderr: {err}"
        );
    }
}

#[test]
fn root_info_2_3_4_processes() {
    for n in [2u32, 3, 4] {
        let dir = tempdir(&format!("root{n}"));
        let ranks = spawn(n, "root_info", "collectives", &dir, |_| vec![]);
        let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
        let r = wait(ranks, Duration::from_secs(120));
        assert_all_ok(&r, &format!("root info, {n} processes"));
        assert!(
            segments_of(&pids).is_empty(),
            "segments left after a normal exit: {:?}",
            segments_of(&pids)
        );
    }
}

/// AllToAllVC (issue 18) across 2 and 4 processes: irregular count
/// matrices with zero rows and columns, checked against a host reference.
#[test]
fn alltoallvc_across_2_and_4_processes() {
    for n in [2u32, 4] {
        let dir = tempdir(&format!("a2avc{n}"));
        let ranks = spawn(n, "root_info", "alltoallvc", &dir, |_| vec![]);
        let r = wait(ranks, Duration::from_secs(180));
        assert_all_ok(&r, &format!("alltoallvc, {n} processes"));
    }
}

/// Capture and replay across processes (issue 17): every primitive
/// captured on a stream, each graph launched 100 times with the inputs
/// rewritten and the outputs checked, then all primitives in one graph.
#[test]
fn captured_graphs_replay_across_2_and_4_processes() {
    for n in [2u32, 4] {
        let dir = tempdir(&format!("capture{n}"));
        let ranks = spawn(n, "root_info", "capture", &dir, |_| vec![]);
        let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
        let r = wait(ranks, Duration::from_secs(180));
        assert_all_ok(&r, &format!("capture and replay, {n} processes"));
        assert!(segments_of(&pids).is_empty(), "segments left");
    }
    // two declared hosts: TCP links between them, hierarchical executors
    let dir = tempdir("capture-hosts");
    let r = wait(
        spawn(4, "root_info", "capture", &dir, |r| {
            vec![("HCCL_RS_HOST_ID".into(), format!("host{}", r % 2))]
        }),
        Duration::from_secs(180),
    );
    assert_all_ok(&r, "capture and replay, 4 processes on two hosts");
}

/// HCCL's FP8 types across processes (2 and 3 on one host, shared memory;
/// 3 on two declared hosts, TCP between them): every moving op carries
/// each type byte for byte, every reducing op refuses it with
/// HCCL_E_NOT_SUPPORT and enqueues nothing (`hccl_tests::fp8`).
#[test]
fn fp8_types_across_2_and_3_processes() {
    for n in [2u32, 3] {
        let dir = tempdir(&format!("fp8-{n}"));
        let r = wait(
            spawn(n, "root_info", "fp8", &dir, |_| vec![]),
            Duration::from_secs(150),
        );
        assert_all_ok(&r, &format!("fp8, {n} processes"));
    }
    let dir = tempdir("fp8-hosts");
    let r = wait(
        spawn(3, "root_info", "fp8", &dir, |r| {
            vec![("HCCL_RS_HOST_ID".into(), format!("host{}", r % 2))]
        }),
        Duration::from_secs(150),
    );
    assert_all_ok(&r, "fp8, 3 processes on two hosts");
}

/// Ranks declared to be on two hosts: shared memory inside each "host",
/// TCP between them.
#[test]
fn two_declared_hosts_mix_shm_and_tcp() {
    for n in [3u32, 4] {
        let dir = tempdir(&format!("hosts{n}"));
        let r = wait(
            spawn(n, "root_info", "collectives", &dir, |r| {
                vec![("HCCL_RS_HOST_ID".into(), format!("host{}", r % 2))]
            }),
            Duration::from_secs(120),
        );
        assert_all_ok(&r, &format!("two hosts, {n} processes"));
    }
}

/// The hierarchical executors across processes on two declared hosts:
/// level 0 over shared memory, level 1 over TCP (the worker checks the
/// allreduce and allgather results).
#[test]
fn hierarchical_executors_over_two_declared_hosts() {
    for algo in [
        "allreduce=level1:H-D_R/allgather=level1:ring",
        "allreduce=level1:AHC/allgather=level1:pipeline",
        "allreduce=level1:pipeline",
    ] {
        let n = 5u32;
        let dir = tempdir("hier");
        let r = wait(
            spawn(n, "root_info", "collectives", &dir, |r| {
                vec![
                    ("HCCL_RS_HOST_ID".into(), format!("host{}", (r >= 2) as u32)),
                    ("HCCL_ALGO".into(), algo.into()),
                ]
            }),
            Duration::from_secs(120),
        );
        assert_all_ok(&r, &format!("two hosts (2 + 3 ranks), HCCL_ALGO={algo}"));
    }
}

#[test]
fn abort_fails_the_waiters_and_leaves_no_segment() {
    let dir = tempdir("abort");
    let mut ranks = spawn(3, "root_info", "abort", &dir, |_| {
        // rank 2 waits on the stalled rank 1 too: it fails by timeout
        vec![("HCCL_EXEC_TIMEOUT".into(), "3".into())]
    });
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    // rank 1 stalls forever; ranks 0 (aborts itself) and 2 must finish on their own
    let deadline = Instant::now() + Duration::from_secs(15);
    while ![0usize, 2]
        .iter()
        .all(|&r| ranks.0[r].try_wait().ok().flatten().is_some())
    {
        assert!(Instant::now() < deadline, "abort did not end the waits");
        std::thread::sleep(Duration::from_millis(20));
    }
    ranks.0[1].kill().unwrap();
    let results = wait(ranks, Duration::from_secs(10));
    let (c0, o0, _) = &results[0];
    assert_eq!(*c0, Some(2), "{o0}");
    assert!(
        o0.contains("communicator aborted on rank 0: the application gave up"),
        "{o0}"
    );
    let (c2, o2, _) = &results[2];
    assert_eq!(*c2, Some(2), "{o2}");
    assert!(o2.contains("rank 0") || o2.contains("rank 1"), "{o2}");
    assert!(
        segments_of(&pids).is_empty(),
        "segments left after abort: {:?}",
        segments_of(&pids)
    );
}

#[test]
fn rank_table_2_3_4_processes() {
    for n in [2u32, 3, 4] {
        let dir = tempdir(&format!("table{n}"));
        let devices: Vec<String> = (0..n)
            .map(|r| {
                format!(
                    r#"{{"device_id": "{r}", "device_ip": "127.0.0.1", "device_port": "{}", "rank_id": "{r}"}}"#,
                    free_port()
                )
            })
            .collect();
        let table = format!(
            r#"{{"status": "completed", "version": "1.0", "server_count": "1",
                "server_list": [{{"server_id": "node_0", "device": [{}]}}]}}"#,
            devices.join(",")
        );
        std::fs::write(format!("{dir}/rank_table.json"), table).unwrap();
        let r = wait(
            spawn(n, "rank_table", "collectives", &dir, |_| vec![]),
            Duration::from_secs(120),
        );
        assert_all_ok(&r, &format!("rank table, {n} processes"));
    }
}

#[test]
fn every_launcher_style() {
    type Style = (
        &'static str,
        fn(u32, u32, u16, &str) -> Vec<(String, String)>,
    );
    let styles: [Style; 4] = [
        ("torchrun", |r, n, port, _| {
            vec![
                ("RANK".into(), r.to_string()),
                ("WORLD_SIZE".into(), n.to_string()),
                ("LOCAL_RANK".into(), r.to_string()),
                ("MASTER_ADDR".into(), "127.0.0.1".into()),
                ("MASTER_PORT".into(), port.to_string()),
            ]
        }),
        ("ompi", |r, n, port, _| {
            vec![
                ("OMPI_COMM_WORLD_RANK".into(), r.to_string()),
                ("OMPI_COMM_WORLD_SIZE".into(), n.to_string()),
                ("OMPI_COMM_WORLD_LOCAL_RANK".into(), r.to_string()),
                ("HCCL_ROOT_ADDR".into(), format!("127.0.0.1:{port}")),
            ]
        }),
        ("pmi", |r, n, port, _| {
            vec![
                ("PMI_RANK".into(), r.to_string()),
                ("PMI_SIZE".into(), n.to_string()),
                ("HCCL_ROOT_ADDR".into(), "127.0.0.1".into()),
                ("HCCL_IF_BASE_PORT".into(), port.to_string()),
            ]
        }),
        ("slurm", |r, n, _, dir| {
            vec![
                ("SLURM_PROCID".into(), r.to_string()),
                ("SLURM_NTASKS".into(), n.to_string()),
                ("SLURM_LOCALID".into(), r.to_string()),
                ("HCCL_RS_ROOT_FILE".into(), format!("{dir}/root.bin")),
            ]
        }),
    ];
    for (name, env) in styles {
        let dir = tempdir(name);
        let port = free_port();
        let d2 = dir.clone();
        let r = wait(
            spawn(3, "env", "collectives", &dir, move |r| env(r, 3, port, &d2)),
            Duration::from_secs(120),
        );
        assert_all_ok(&r, name);
    }
}

#[test]
fn a_killed_rank_makes_the_others_fail_naming_it() {
    let dir = tempdir("kill");
    let mut ranks = spawn(3, "root_info", "stall", &dir, |_| {
        vec![
            ("HCCL_EXEC_TIMEOUT".into(), "5".into()),
            ("HCCL_CONNECT_TIMEOUT".into(), "5".into()),
        ]
    });
    // let everyone join and rank 0 and 2 enter the collective, then kill rank 1
    std::thread::sleep(Duration::from_millis(1500));
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    ranks.0[1].kill().unwrap();
    let start = Instant::now();
    let results = wait(ranks, Duration::from_secs(30));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "survivors must give up within the timeouts"
    );
    for r in [0usize, 2] {
        let (code, out, err) = &results[r];
        assert_eq!(*code, Some(2), "rank {r} must fail: {out} {err}");
        assert!(out.starts_with("ERROR "), "rank {r}: {out}");
        assert!(
            out.contains("rank 1"),
            "rank {r}'s error must name the lost rank 1: {out}"
        );
    }
    assert!(
        segments_of(&pids).is_empty(),
        "segments left after a killed rank: {:?}",
        segments_of(&pids)
    );
}

/// `HCCL_RS_EXEC_TIMEOUT_MS` bounds a wait for a hung (alive, silent)
/// peer in milliseconds, over HCCL's seconds: the ranks waiting for it fail
/// in well under a second of waiting, naming it, while `HCCL_EXEC_TIMEOUT`
/// says half an hour.
#[test]
fn a_hung_rank_is_given_up_on_after_the_milliseconds_set() {
    let dir = tempdir("hung_ms");
    let mut ranks = spawn(3, "root_info", "stall", &dir, |_| {
        vec![
            ("HCCL_EXEC_TIMEOUT".into(), "1836".into()),
            ("HCCL_RS_EXEC_TIMEOUT_MS".into(), "400".into()),
        ]
    });
    let start = Instant::now();
    let mut outs = Vec::new();
    for r in [0usize, 2] {
        let c = &mut ranks.0[r];
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "rank {r} still waits for the hung rank 1 after 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        std::io::Read::read_to_string(c.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert_eq!(status.code(), Some(2), "rank {r} must fail: {out}");
        outs.push((r, out));
    }
    for (r, out) in &outs {
        assert!(out.contains("(HCCL_EXEC_TIMEOUT)"), "rank {r}: {out}");
        assert!(out.contains("rank 1"), "rank {r} must name rank 1: {out}");
        // "waited 4xxms": the bound in force was the milliseconds
        let waited: u64 = out
            .split("waited ")
            .nth(1)
            .and_then(|w| w.split("ms").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("rank {r}: no 'waited Nms' in {out}"));
        // (room for a loaded machine: the point is milliseconds, not
        // HCCL_EXEC_TIMEOUT's half hour)
        assert!(
            (400..3000).contains(&waited),
            "rank {r} waited {waited} ms: {out}"
        );
    }
}

/// `HCCL_RS_CONNECT_TIMEOUT_MS`: two of three ranks start, the third
/// never does; both give up on the rendezvous after the milliseconds set
/// (HCCL's `HCCL_CONNECT_TIMEOUT` says 20 s here) with a clear error.
#[test]
fn a_rank_that_never_starts_is_given_up_on_after_the_milliseconds_set() {
    let dir = tempdir("connect_ms");
    let env = [("HCCL_RS_CONNECT_TIMEOUT_MS".to_string(), "800".to_string())];
    let start = Instant::now();
    let ranks = Ranks(
        (0..2)
            .map(|r| worker(r, 3, "root_info", "collectives", &dir, &env))
            .collect(),
    );
    let results = wait(ranks, Duration::from_secs(15));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(8), "gave up after {took:?}");
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(2), "rank {r} must fail: {out} {err}");
        assert!(out.starts_with("ERROR "), "rank {r}: {out}");
        assert!(
            out.contains("timeout") || out.contains("timed out"),
            "rank {r} must say it timed out: {out}"
        );
    }
}

#[test]
fn inconsistent_arguments_are_reported_on_both_ranks() {
    for (scenario, needle) in [
        ("count_mismatch", "parameter count, local end"),
        ("op_mismatch", "parameter op type, local end"),
    ] {
        let dir = tempdir(scenario);
        let results = wait(
            spawn(2, "root_info", scenario, &dir, |_| vec![]),
            Duration::from_secs(60),
        );
        for (r, (code, out, err)) in results.iter().enumerate() {
            assert_eq!(
                *code,
                Some(2),
                "{scenario}: rank {r} must fail: {out} {err}"
            );
            assert!(
                out.contains(
                    "The arguments for collective communication are inconsistent between ranks"
                ) && out.contains(needle),
                "{scenario}: rank {r}: {out}"
            );
        }
        let (_, out0, _) = &results[0];
        if scenario == "count_mismatch" {
            assert!(out0.contains("local end 16512, remote end 8320"), "{out0}");
        }
    }
}

/// Issue 32's op-level recovery between processes: a count mismatch and
/// then a hung rank (300 ms exec timeout, rank 2 800 ms late) each fail
/// the op; every rank calls `recover` on the same handle and a checked
/// AllReduce follows; a stream of the old device is refused
/// (mp_worker's `recover` scenario). Over shared memory, and over TCP.
#[test]
fn processes_recover_after_a_mismatch_and_a_timeout() {
    for transport in ["auto", "tcp"] {
        let dir = tempdir(&format!("recover-{transport}"));
        let results = wait(
            spawn(3, "root_info", "recover", &dir, |_| {
                vec![("HCCL_RS_TRANSPORT".into(), transport.into())]
            }),
            Duration::from_secs(60),
        );
        for (r, (code, out, err)) in results.iter().enumerate() {
            assert_eq!(*code, Some(0), "{transport}: rank {r}: {out} {err}");
            let lines: Vec<serde_json::Value> = out
                .lines()
                .filter_map(|l| l.strip_prefix("RECOVER "))
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let ev = |e: &str| {
                lines
                    .iter()
                    .find(|l| l["event"] == e)
                    .unwrap_or_else(|| panic!("{transport}: rank {r}: no {e}: {out}"))
            };
            assert!(
                ev("mismatch")["message"]
                    .as_str()
                    .unwrap()
                    .contains("inconsistent between ranks"),
                "{transport}: rank {r}: {out}"
            );
            if r != 2 {
                // HCCL_E_TIMEOUT, or HCCL_E_REMOTE passing on a peer's
                // timeout (the first rank to give up tells its peers)
                let hung = ev("hung");
                assert!(
                    (hung["code"] == 9 || hung["code"] == 21)
                        && hung["message"].as_str().unwrap().contains("timeout"),
                    "{transport}: rank {r}: {out}"
                );
            }
            assert_eq!(ev("done")["recoveries"], 2, "{transport}: rank {r}: {out}");
            for l in lines.iter().filter(|l| l["event"] == "recovered") {
                println!(
                    "{transport}: rank {r} recovered after the {} in {} us",
                    l["after"], l["us"]
                );
            }
        }
    }
}

#[test]
fn strangers_at_the_root_are_dropped_while_the_communicator_forms() {
    use std::io::Write;
    let dir = tempdir("strangers");
    // rank 0 first: it writes the root info, which tells us where the root listens
    let mut ranks = Ranks(vec![worker(0, 3, "root_info", "collectives", &dir, &[])]);
    let path = format!("{dir}/root.bin");
    let deadline = Instant::now() + Duration::from_secs(20);
    let blob = loop {
        if let Ok(b) = std::fs::read(&path) {
            if b.len() == 4108 {
                break b;
            }
        }
        assert!(
            Instant::now() < deadline,
            "rank 0 never wrote its root info"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let port = u16::from_le_bytes([blob[24], blob[25]]);
    let ip_end = blob[28..92].iter().position(|&c| c == 0).unwrap() + 28;
    let addr = format!("{}:{port}", std::str::from_utf8(&blob[28..ip_end]).unwrap());
    // random bytes, then a well-formed hello with a wrong unique id
    let mut junk = std::net::TcpStream::connect(&addr).unwrap();
    junk.write_all(&[0x5a; 300]).unwrap();
    let mut wrong = std::net::TcpStream::connect(&addr).unwrap();
    let hello = br#"{"magic":"hccl-rs","unique_id":"00000000000000000000000000000000","n_ranks":3,"info":{"rank":1,"host_id":"x","link_addr":"127.0.0.1:1","buffer_size":1048576}}"#;
    wrong
        .write_all(&(hello.len() as u32).to_le_bytes())
        .unwrap();
    wrong.write_all(hello).unwrap();
    // then the real ranks: the communicator must still form and work
    for r in 1..3 {
        ranks
            .0
            .push(worker(r, 3, "root_info", "collectives", &dir, &[]));
    }
    let results = wait(ranks, Duration::from_secs(120));
    assert_all_ok(&results, "with strangers at the root");
}

/// Graph mode across processes: every primitive captured and replayed 100
/// times with inputs rewritten, at 2, 3, 4 and 8 ranks, checked each time
/// (the worker's `graph` scenario); the direct executors read the peers'
/// registered buffers through mappings, never with cross-memory attach.
/// With the ring (p=3) and NHR (p=4) forced, AllReduce, AllGather and
/// Broadcast run those templates on the user buffers, writing into the
/// peers' mapped outputs.
#[test]
fn graph_mode_every_primitive_replayed_across_processes() {
    let ring = "allreduce=level0:ring/allgather=level0:ring/broadcast=level0:ring";
    let nhr = "allreduce=level0:NHR/allgather=level0:NHR/broadcast=level0:NHR";
    let runs = [(2u32, ""), (3, ""), (4, ""), (8, ""), (3, ring), (4, nhr)];
    for (p, algo) in runs {
        let dir = tempdir(&format!("graph{p}{}", algo.len()));
        let env = |_| match algo {
            "" => vec![],
            a => vec![("HCCL_ALGO".to_string(), a.to_string())],
        };
        let ranks = spawn(p, "root_info", "graph", &dir, env);
        let results = wait(ranks, Duration::from_secs(150));
        for (r, (code, out, err)) in results.iter().enumerate() {
            let lines: Vec<&str> = out.lines().collect();
            assert!(
                *code == Some(0) && lines.last() == Some(&"OK"),
                "p={p} {algo} rank {r} exited {code:?}\nstdout: {out}\nstderr: {err}"
            );
            let stats = lines
                .iter()
                .find_map(|l| l.strip_prefix("mapped "))
                .unwrap_or_else(|| panic!("p={p} rank {r}: no access line in {out}"));
            let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("{s} in {out}")) };
            let (mapped, rest) = stats.split_once(" cma ").unwrap();
            let (cma, wrote) = rest.split_once(" wrote ").unwrap();
            let (mapped, cma, wrote) = (num(mapped), num(cma), num(wrote));
            if !algo.is_empty() {
                assert!(wrote > 0, "p={p} {algo} rank {r}: no mapped write ({out})");
            }
            assert!(mapped > 0, "p={p} rank {r}: no mapped read ({out})");
            assert_eq!(
                cma, 0,
                "p={p} rank {r}: cross-memory reads in graph mode ({out})"
            );
        }
    }
}

/// Issue 20: one of 4 processes never calls the 3rd AllReduce. The others
/// time out and their stream failures dump their flight recorders
/// (`HCCL_RS_FR_DUMP_DIR`); the missing rank dumps on `SIGUSR1`. Every
/// rank's dump is written, and hccl-trace's analysis names the missing
/// rank and the op.
#[test]
fn flight_recorder_names_the_rank_that_never_joined() {
    let dir = tempdir("fr_missing");
    let frdir = format!("{dir}/fr");
    let env = |_| {
        vec![
            ("HCCL_RS_FR_DUMP_DIR".to_string(), frdir.clone()),
            ("HCCL_EXEC_TIMEOUT".to_string(), "3".to_string()),
        ]
    };
    let ranks = spawn(4, "root_info", "fr_missing", &dir, env);
    // the three that time out dump on their own
    let dumped = |r: u32| {
        std::path::Path::new(&frdir)
            .read_dir()
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("_rank{r}.json"))
            })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while ![0, 1, 3].iter().all(|&r| dumped(r)) {
        assert!(Instant::now() < deadline, "ranks 0, 1, 3 did not dump");
        std::thread::sleep(Duration::from_millis(50));
    }
    // rank 2 dumps on request
    let pid = ranks.0[2].id().to_string();
    let sent = Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    assert!(sent.success(), "SIGUSR1 to rank 2");
    let results = wait(ranks, Duration::from_secs(60));
    for (r, (code, out, err)) in results.iter().enumerate() {
        let want = if r == 2 { Some(0) } else { Some(2) };
        assert_eq!(*code, want, "rank {r}: {out} {err}");
    }
    let dumps = hccl_tools::trace::load_dumps(&[frdir.clone().into()]).unwrap();
    assert_eq!(dumps.len(), 4, "every rank's dump");
    let reports = hccl_tools::trace::analyse(&dumps);
    assert_eq!(reports.len(), 1);
    let rep = &reports[0];
    assert_eq!(rep.never_entered, vec![2], "{rep:?}");
    let (seq, what) = rep.stuck_op.clone().unwrap();
    assert_eq!(seq, 3, "{what}");
    assert!(what.starts_with("AllReduce count 4096 fp32 sum"), "{what}");
    for s in rep.ranks.iter().filter(|s| s.rank != 2) {
        assert_eq!(s.state, "failed", "{s:?}");
        assert!(s.error.is_some(), "{s:?}");
    }
    let text = hccl_tools::trace::render(&reports);
    assert!(
        text.contains("first op not completed everywhere: #3 AllReduce"),
        "{text}"
    );
    assert!(text.contains("never entered by rank 2"), "{text}");
    assert!(
        text.contains("rank 2: never entered it (issued 2 ops)"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20: an op whose count differs between the ranks: both fail the
/// consistency check and dump, and hccl-trace names both sides'
/// arguments.
#[test]
fn flight_recorder_shows_both_sides_of_a_mismatched_op() {
    let dir = tempdir("fr_mismatch");
    let frdir = format!("{dir}/fr");
    let env = |_| vec![("HCCL_RS_FR_DUMP_DIR".to_string(), frdir.clone())];
    let results = wait(
        spawn(2, "root_info", "count_mismatch", &dir, env),
        Duration::from_secs(60),
    );
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(2), "rank {r} must fail: {out} {err}");
    }
    let dumps = hccl_tools::trace::load_dumps(&[frdir.clone().into()]).unwrap();
    assert_eq!(dumps.len(), 2);
    let reports = hccl_tools::trace::analyse(&dumps);
    let m = &reports[0].mismatches;
    assert_eq!(m.len(), 1, "{reports:?}");
    assert_eq!(m[0].seq, 1);
    let sides: Vec<&str> = m[0].sides.iter().map(|(s, _)| s.as_str()).collect();
    assert!(
        sides.contains(&"AllReduce count 16512 fp32 sum"),
        "{sides:?}"
    );
    assert!(
        sides.contains(&"AllReduce count 8320 fp32 sum"),
        "{sides:?}"
    );
    let text = hccl_tools::trace::render(&reports);
    assert!(
        text.contains("mismatched op #1: rank 0: AllReduce count 16512 fp32 sum vs rank 1: AllReduce count 8320 fp32 sum")
            || text.contains("mismatched op #1: rank 1: AllReduce count 8320 fp32 sum vs rank 0: AllReduce count 16512 fp32 sum"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20: rank 2 of 3 computes 2 ms longer before every AllReduce. The
/// ranks' timelines (`HCCL_RS_TRACE`), merged, show it entering nearly
/// every op last, by about the extra compute.
#[test]
fn the_merged_timeline_names_the_slow_rank() {
    let dir = tempdir("slow_rank");
    let trace = format!("{dir}/trace");
    let env = |_| vec![("HCCL_RS_TRACE".to_string(), trace.clone())];
    let results = wait(
        spawn(3, "root_info", "slow_rank", &dir, env),
        Duration::from_secs(120),
    );
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}: {out} {err}");
    }
    let merged = hccl_tools::trace::merge_timelines(&[trace.clone().into()]).unwrap();
    let late = hccl_tools::trace::late_ranks(&merged);
    let first = &late[0];
    assert_eq!(first.rank, 2, "{late:?}");
    // 100 AllReduces. Three ranks share two cores here and other tests
    // may run beside this one, so the scheduler sometimes delays another
    // rank too: the straggler must come first, last in at least half of
    // the ops, by about its extra compute
    assert!(first.ops >= 100, "{late:?}");
    assert!(
        first.last_in * 2 >= first.ops,
        "last in at least half of the ops: {late:?}"
    );
    assert!(first.mean_lag_us > 1000.0, "{late:?}");
    let text = hccl_tools::trace::render_late(&late);
    assert!(text.contains("rank 2: "), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
