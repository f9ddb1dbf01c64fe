//! Observability end to end: timelines of a p=4 AllReduce sweep across
//! processes (`HCCL_RS_TRACE`), merged by `hccl-trace merge` into one
//! Chrome trace / Perfetto file whose fields are checked; the init and
//! entry logs (`HCCL_RS_LOG=info`, `HCCL_ENTRY_LOG_ENABLE=1`).

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `bin args` with `env` under a watchdog (a hang fails in 120 s).
fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .env("HCCL_EXEC_TIMEOUT", "60")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{bin} {args:?} did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn tempdir(what: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("hccl-obs-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn num(e: &Value, k: &str) -> f64 {
    e.get(k)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("event without a numeric '{k}': {e}"))
}

#[test]
fn a_p4_allreduce_sweep_leaves_timelines_that_merge_into_valid_trace_json() {
    let dir = tempdir("trace");
    let traces = dir.join("traces");
    let out = run(
        env!("CARGO_BIN_EXE_hccl-test"),
        &[
            "all_reduce",
            "-p",
            "4",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "32",
            "-n",
            "3",
            "-w",
            "1",
            "--transport",
            "process",
        ],
        &[("HCCL_RS_TRACE", traces.to_str().unwrap())],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // one timeline per rank
    let files: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for r in 0..4 {
        assert!(
            files
                .iter()
                .any(|f| f.starts_with("hccl_trace_") && f.ends_with(&format!("_rank{r}.json"))),
            "no timeline of rank {r}: {files:?}"
        );
    }
    let merged = dir.join("merged.json");
    let m = run(
        env!("CARGO_BIN_EXE_hccl-trace"),
        &[
            "merge",
            "-o",
            merged.to_str().unwrap(),
            traces.to_str().unwrap(),
        ],
        &[],
    );
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    let mut pids = BTreeSet::new();
    let (mut ops, mut tasks, mut link_tasks, mut named) = (0, 0, 0, 0);
    let mut op_sizes = BTreeSet::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        let pid = e["pid"].as_u64().expect("pid") as u32;
        assert!(e["tid"].is_u64(), "tid: {e}");
        pids.insert(pid);
        match ph {
            "M" => {
                if e["name"] == "process_name" {
                    let n = e["args"]["name"].as_str().unwrap();
                    assert!(n.starts_with(&format!("rank {pid} (")), "{n}");
                    named += 1;
                }
            }
            "X" => {
                assert!(num(e, "ts") > 1.0e15, "ts in µs since the epoch: {e}");
                assert!(num(e, "dur") >= 0.0, "{e}");
                assert!(e["name"].is_string(), "{e}");
                match e["cat"].as_str() {
                    Some("op") => {
                        ops += 1;
                        assert_eq!(e["name"], "AllReduce", "{e}");
                        let a = &e["args"];
                        assert!(a["seq"].as_u64().unwrap() >= 1, "{e}");
                        assert!(
                            a["algorithm"].as_str().unwrap().starts_with("AllReduce"),
                            "{e}"
                        );
                        // hccl-test's barriers are AllReduces tagged Barrier_
                        let tag = a["tag"].as_str().unwrap();
                        assert!(
                            tag.starts_with("AllReduce_") || tag.starts_with("Barrier_"),
                            "{e}"
                        );
                        if a["dtype"] == "fp32" && a["reduce_op"] == "sum" {
                            op_sizes.insert(a["bytes"].as_u64().unwrap());
                        }
                    }
                    Some("task") => {
                        tasks += 1;
                        let a = &e["args"];
                        assert!(a["step"].is_u64(), "{e}");
                        if let Some(p) = a.get("peer") {
                            let p = p.as_u64().unwrap() as u32;
                            assert!(p < 4 && p != pid, "a peer other than the rank: {e}");
                            link_tasks += 1;
                        }
                    }
                    other => panic!("unexpected category {other:?}: {e}"),
                }
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    assert_eq!(pids, (0..4).collect(), "pid = rank, every rank");
    assert_eq!(named, 4, "a process name per rank");
    assert!(
        ops > 0 && tasks > ops && link_tasks > 0,
        "{ops} ops, {tasks} tasks, {link_tasks} link tasks"
    );
    // the largest size (256 KiB) queues tasks, so its ops have spans (the
    // small ones may run as kernels inside their launch: a kernel task
    // alone is the op)
    assert!(
        op_sizes.contains(&262144),
        "no op span of 256 KiB: {op_sizes:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn init_and_entry_logs_name_rank_transports_executors_and_arguments() {
    let out = run(
        env!("CARGO_BIN_EXE_hccl-test"),
        &[
            "all_reduce",
            "-p",
            "2",
            "-b",
            "64",
            "-e",
            "64",
            "-n",
            "1",
            "-w",
            "0",
            "--transport",
            "process",
        ],
        &[
            ("HCCL_RS_LOG", "info"),
            ("HCCL_ENTRY_LOG_ENABLE", "1"),
            ("NO_COLOR", "1"),
        ],
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    let plain = strip_ansi(&all);
    for r in 0..2 {
        let init = plain
            .lines()
            .find(|l| {
                l.contains("hccl-rs communicator initialised") && l.contains(&format!(" rank={r} "))
            })
            .unwrap_or_else(|| panic!("no init line of rank {r}:\n{plain}"));
        for want in [
            "size=2",
            "level0=shm to 1 peer",
            "level1=none",
            "buffer_bytes=",
        ] {
            assert!(init.contains(want), "{want} missing: {init}");
        }
    }
    let choices = plain
        .lines()
        .find(|l| l.contains("executor choices by size") && l.contains("op=allreduce"))
        .unwrap_or_else(|| panic!("no executor choices:\n{plain}"));
    assert!(
        choices.contains("8 B: AllReduce") && choices.contains("64 MiB: AllReduce"),
        "{choices}"
    );
    let entry = plain
        .lines()
        .find(|l| l.contains("op entry") && l.contains("op=allreduce") && l.contains("count=16"))
        .unwrap_or_else(|| panic!("no entry line of the 64 B AllReduce:\n{plain}"));
    for want in ["dtype=fp32", "reduce_op=sum", "input=0x", "stream="] {
        assert!(entry.contains(want), "{want} missing: {entry}");
    }
}

/// `s` without ANSI colour sequences (the log's formatter may colour).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
