//! hccl-test end to end: the README's sweep prints `success` on every row.

use std::process::Command;
use std::time::Duration;

fn hccl_test(args: &[&str]) -> std::process::Output {
    hccl_test_env(args, &[])
}

/// `hccl-test args` with extra environment variables, under a watchdog.
fn hccl_test_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hccl-test"))
        .args(args)
        .env("HCCL_EXEC_TIMEOUT", "60")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn hccl-test");
    // watchdog: a hang fails the test instead of stalling CI
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("hccl-test {args:?} did not finish within 240 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn four_rank_allreduce_sweep_succeeds_on_every_row() {
    for transport in ["inproc", "process"] {
        four_rank_sweep(transport);
    }
}

/// The README's main job (fewer iterations), ranks as threads or processes.
fn four_rank_sweep(transport: &str) {
    let out = hccl_test(&[
        "--transport",
        transport,
        "all_reduce",
        "-p",
        "4",
        "-b",
        "8",
        "-e",
        "64M",
        "-f",
        "2",
        "-n",
        "2",
        "-w",
        "1",
        "-o",
        "sum",
        "-d",
        "fp32",
        "-c",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next().unwrap(),
        "the minbytes is 8, maxbytes is 67108864, iters is 2, warmup_iters is 1"
    );
    let header = lines.next().unwrap();
    for col in [
        "data_size(Bytes):",
        "aveg_time(us):",
        "alg_bandwidth(GB/s):",
        "check_result:",
        "bus_bandwidth(GB/s):",
    ] {
        assert!(header.contains(col), "header lacks {col}: {header}");
    }
    // the spread columns come after hccl_test's, in this order
    let spread_cols = ["p50_time(us):", "p99_time(us):", "max_time(us):"];
    let names: Vec<&str> = header.split('|').map(str::trim).collect();
    assert_eq!(&names[5..], &spread_cols, "{header}");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(
        rows.len(),
        24,
        "8 B .. 64 MiB by factor 2 is 24 sizes:\n{stdout}"
    );
    let mut expected_size = 8u64;
    for row in rows {
        let cols: Vec<&str> = row.split('|').map(str::trim).collect();
        // hccl_test's five columns, then p50, p99 and max
        assert_eq!(cols.len(), 5 + 3, "{row}");
        let spread: Vec<f64> = cols[5..].iter().map(|c| c.parse().unwrap()).collect();
        assert!(
            0.0 < spread[0] && spread[0] <= spread[1] && spread[1] <= spread[2],
            "0 < p50 <= p99 <= max: {row}"
        );
        assert_eq!(cols[0].parse::<u64>().unwrap(), expected_size);
        assert!(cols[1].parse::<f64>().unwrap() > 0.0);
        assert_eq!(cols[3], "success", "{row}");
        let (alg, bus): (f64, f64) = (cols[2].parse().unwrap(), cols[4].parse().unwrap());
        assert!(
            (bus - alg * 1.5).abs() <= 1e-5 + alg * 1e-3,
            "bus = 2(p-1)/p × alg for p=4: {row}"
        );
        expected_size *= 2;
    }
}

#[test]
fn json_rows_carry_every_key() {
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "3",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "2",
        "-w",
        "0",
        "-d",
        "bf16",
        "-o",
        "max",
        "--format",
        "json",
    ]);
    let rows = json_rows(&out, 2, "json keys");
    for (row, bytes) in rows.iter().zip([1024u64, 4096]) {
        for key in [
            "op",
            "ranks",
            "bytes",
            "count",
            "dtype",
            "time_us",
            "algbw_gbps",
            "busbw_gbps",
            "check",
            "algorithm",
            "p50_us",
            "p99_us",
            "max_us",
        ] {
            assert!(row.get(key).is_some(), "missing {key}: {row}");
        }
        assert_spread_ordered(row);
        assert_eq!(row["bytes"], bytes);
        assert_eq!(row["count"], bytes / 2);
        assert_eq!(row["ranks"], 3);
        assert_eq!(row["dtype"], "bf16");
        assert_eq!(row["check"], "success");
        // messages a board entry carries run the AIV kernel, larger small
        // ones the one-shot mesh executor
        let want = if bytes <= hccl_algorithm::AIV_MAX_BYTES as u64 {
            "AllReduceMeshAivExecutor"
        } else {
            "AllReduceMeshExecutor"
        };
        assert_eq!(row["algorithm"], want);
    }
}

/// `p50_us <= p99_us <= max_us`, all positive and finite; returns them.
fn assert_spread_ordered(row: &serde_json::Value) -> [f64; 3] {
    let v = |k: &str| {
        row[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} is not a number: {row}"))
    };
    let s = [v("p50_us"), v("p99_us"), v("max_us")];
    assert!(s.iter().all(|x| x.is_finite()), "{row}");
    assert!(
        0.0 < s[0] && s[0] <= s[1] && s[1] <= s[2],
        "0 < p50 <= p99 <= max: {row}"
    );
    s
}

/// The spread keys: per size p50 <= p99 <= max, for ranks as threads and as
/// processes (where the per-iteration times travel through a reduction
/// over the ranks), and with one iteration all three are that iteration.
///
/// They are not bracketed around the average, on purpose: the average
/// (`time_us`) times `-n` ops enqueued back to back with one synchronize,
/// the spread `-n` iterations of one op and a synchronize each, in a pass
/// of their own. Either can be the larger: the synchronize per op makes an
/// iteration a latency that can exceed the average per op, while 50 small
/// ops enqueued at once queue behind each other where one op alone
/// completes in its launch (seen here: 2 processes, 16 KiB, average 3.7 µs,
/// slowest of 50 iterations 1.5 µs), and a stall during one pass lifts
/// only that pass.
#[test]
fn json_rows_report_p50_p99_max_per_size() {
    let run = |transport: &str, iters: &str| {
        let out = hccl_test(&[
            "all_reduce",
            "-p",
            "2",
            "-b",
            "1K",
            "-e",
            "256K",
            "-f",
            "16",
            "-n",
            iters,
            "-w",
            "2",
            "--format",
            "json",
            "--transport",
            transport,
        ]);
        json_rows(&out, 3, transport)
    };
    for transport in ["inproc", "process"] {
        for row in run(transport, "30") {
            assert_eq!(row["check"], "success", "{row}");
            assert_spread_ordered(&row);
        }
        for row in run(transport, "1") {
            let [p50, p99, max] = assert_spread_ordered(&row);
            assert!(p50 == p99 && p99 == max, "one iteration: {row}");
        }
    }
}

/// `--transport tcp` measures TCP: no rank maps another's memory, so the
/// selector offers neither the AIV kernels (board memory) nor the direct
/// reads, even for 8 bytes, and a forced AIV executor is refused.
#[test]
fn the_tcp_transport_selects_executors_that_use_tcp() {
    for op in ["all_reduce", "broadcast", "all_gather"] {
        let out = hccl_test(&[
            op,
            "-p",
            "2",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "64",
            "-n",
            "5",
            "-w",
            "1",
            "--format",
            "json",
            "--transport",
            "tcp",
        ]);
        for row in json_rows(&out, 3, op) {
            assert_eq!(row["check"], "success", "{row}");
            let algo = row["algorithm"].as_str().unwrap_or_default().to_owned();
            assert!(
                !algo.is_empty() && !algo.contains("Aiv") && !algo.contains("Direct"),
                "{op} over TCP chose {algo}: {row}"
            );
        }
    }
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "2",
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "2",
        "-w",
        "0",
        "--transport",
        "tcp",
        "--algo",
        "AllReduceMeshAivExecutor",
    ]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("cannot reach AIV boards"), "{all}");
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let out = hccl_test(&["all_reduce", "-p", "2", "-d", "fp8"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown data type name 'fp8'"));
    let out = hccl_test(&["all_reduce", "-p", "2", "-b", "64", "-e", "8"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("minbytes 64 is larger than maxbytes 8"));
}

/// hccl_test's defaults and steps: no -b/-e is one 64 MiB size; -f takes a
/// fractional factor; -c takes 0 or 1 only.
#[test]
fn hccl_test_defaults_and_flags() {
    let out = hccl_test(&["all_gather", "-p", "2", "-n", "1", "-w", "0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "the minbytes is 67108864, maxbytes is 67108864, iters is 1, warmup_iters is 0"
        ),
        "{stdout}"
    );
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("success")).collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert!(rows[0].trim_start().starts_with("67108864"), "{stdout}");
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "2",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "1.5",
        "-n",
        "1",
        "-w",
        "0",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let sizes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("success"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(sizes, ["1024", "1536", "2304", "3456"], "{stdout}");
    let out = hccl_test(&["all_reduce", "-p", "2", "-c", "2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--check"));
    let out = hccl_test(&["all_reduce", "-p", "2", "-f", "1.0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stepfactor must be a number above 1.0"));
}

/// `-d hif8|fp8e4m3|fp8e5m2|fp8e8m0`: every op that moves data without
/// reducing it checks each FP8 type byte for byte (ranks as threads, and
/// as processes for AllGather, Broadcast and AllToAll); the reducing ops
/// refuse them with a message naming the type and the op.
#[test]
fn fp8_types_run_the_moving_ops_and_are_refused_by_reductions() {
    let sweep = [
        "-b", "96", "-e", "3M", "-f", "32", "-n", "2", "-w", "1", "-r", "1",
    ];
    for d in ["hif8", "fp8e4m3", "fp8e5m2", "fp8e8m0"] {
        for op in [
            "all_gather",
            "all_gatherv",
            "broadcast",
            "alltoall",
            "alltoallv",
            "scatter",
            "gather",
            "send_recv",
        ] {
            let mut args = vec![op, "-p", "3", "-d", d];
            args.extend(sweep);
            assert_rows_succeed(&hccl_test(&args), 4, &format!("{op} -d {d}"));
        }
        for op in ["all_reduce", "reduce", "reduce_scatter", "reduce_scatterv"] {
            let out = hccl_test(&[op, "-p", "2", "-d", d]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{op} -d {d}: {err}");
            assert!(
                err.contains(&format!("-d {d} cannot be used with {op}"))
                    && err.contains("never reduces"),
                "{op} -d {d}: {err}"
            );
        }
    }
    for op in ["all_gather", "broadcast", "alltoall"] {
        for p in ["2", "3"] {
            let mut args = vec![op, "-p", p, "-d", "fp8e4m3", "--transport", "process"];
            args.extend(sweep);
            assert_rows_succeed(&hccl_test(&args), 4, &format!("{op} -p {p} processes"));
        }
    }
}

#[test]
fn baseline_line_reports_a_ratio_to_memcpy() {
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "2",
        "-b",
        "1K",
        "-e",
        "64K",
        "-f",
        "8",
        "-n",
        "3",
        "-w",
        "1",
        "--baseline",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap();
    assert!(
        last.starts_with("baseline: memcpy of 65536 bytes (1 thread) "),
        "{last}"
    );
    // "... (1 thread) M GB/s; best bus bandwidth B GB/s = R x memcpy"
    let num = |s: &str| {
        s.split_whitespace()
            .next()
            .unwrap()
            .trim_end_matches('x')
            .parse::<f64>()
            .unwrap()
    };
    let memcpy = num(last.split("(1 thread) ").nth(1).unwrap());
    let best = num(last.split("best bus bandwidth ").nth(1).unwrap());
    let ratio = num(last.rsplit(" = ").next().unwrap());
    assert!(memcpy > 0.0 && best > 0.0, "{last}");
    assert!(
        (ratio - best / memcpy).abs() <= 1e-3 * (1.0 + ratio),
        "{last}"
    );
}

#[test]
fn process_ranks_run_every_collective_and_leave_no_segment_behind() {
    let before = leftover_segments();
    for op in [
        "all_reduce",
        "all_gather",
        "all_gatherv",
        "reduce_scatter",
        "reduce_scatterv",
        "broadcast",
        "reduce",
        "scatter",
        "gather",
        "alltoall",
        "alltoallv",
        "send_recv",
        "barrier",
    ] {
        let out = hccl_test(&[
            op,
            "-p",
            "3",
            "-b",
            "96",
            "-e",
            "3M",
            "-f",
            "32",
            "-n",
            "2",
            "-w",
            "1",
            "-r",
            "1",
            "--transport",
            "process",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{op}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<&str> = stdout.lines().skip(2).collect();
        let want_rows = if op == "barrier" { 1 } else { 4 };
        assert_eq!(rows.len(), want_rows, "{op}: {stdout}");
        assert!(rows.iter().all(|r| r.contains("success")), "{op}: {stdout}");
    }
    assert_no_segment_left(&before, "no /dev/shm segment may outlive the run");
}

/// hccl-rs segments in /dev/shm whose creating process is gone: what a run
/// leaked. Segments of live processes belong to other tests running at the
/// same time (nextest runs tests in parallel), so they are not counted.
/// Asserts that an `hccl-test` run exited cleanly and printed `n` result
/// rows, every one checked `success`.
/// The JSON rows of a successful run (`--format json`): exactly `n` of them.
fn json_rows(out: &std::process::Output, n: usize, what: &str) -> Vec<serde_json::Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), n, "{what}: {stdout}");
    rows
}

fn assert_rows_succeed(out: &std::process::Output, n: usize, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = stdout.lines().skip(2).collect();
    assert_eq!(rows.len(), n, "{what}: {stdout}");
    assert!(
        rows.iter().all(|r| r.contains("success")),
        "{what}: {stdout}"
    );
}

/// Fails with `what` if a segment of a gone process is in `/dev/shm` that
/// was not there `before` the runs. Only new ones count: one that was
/// there may be swept meanwhile (every multi-process run removes the
/// segments of dead processes when it starts).
fn assert_no_segment_left(before: &[String], what: &str) {
    let new: Vec<String> = leftover_segments()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(new.is_empty(), "{what}: {new:?}");
}

fn leftover_segments() -> Vec<String> {
    let owner_gone = |name: &str| {
        name.strip_prefix("hccl-rs-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("hccl-rs-") && owner_gone(n))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn list_executors_prints_one_name_per_line_and_algo_forces_one() {
    let out = hccl_test(&["--list-executors"]);
    assert!(out.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    for want in [
        "AllReduceRingExecutor",
        "AllReduceRHDExecutor",
        "AllGatherRingExecutor",
        "AllToAllPairWiseExecutor",
        "ReduceRingExecutor",
        "BroadcastStarExecutor",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    assert!(names
        .iter()
        .all(|n| n.ends_with("Executor") && !n.contains(' ')));

    // forced, in-process and across processes: the row names the executor
    for transport in ["inproc", "process"] {
        let out = hccl_test(&[
            "all_reduce",
            "-p",
            "3",
            "-b",
            "4K",
            "-e",
            "4K",
            "-n",
            "2",
            "-w",
            "1",
            "--algo",
            "AllReduceRHDExecutor",
            "--format",
            "json",
            "--transport",
            transport,
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let row: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(row["algorithm"], "AllReduceRHDExecutor", "{transport}");
        assert_eq!(row["check"], "success");
    }

    // a name that does not serve the op, and a name that does not exist
    let out = hccl_test(&[
        "all_gather",
        "-p",
        "2",
        "-b",
        "1K",
        "-e",
        "1K",
        "--algo",
        "ReduceRingExecutor",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ReduceRingExecutor runs reduce, not allgather"),
        "{err}"
    );
    let out = hccl_test(&["all_gather", "-p", "2", "--algo", "NoSuchExecutor"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--algo NoSuchExecutor: no such executor")
    );
}

#[test]
fn calibrate_writes_a_tuning_file_that_communicators_read() {
    let dir = std::env::temp_dir().join(format!("hccl-cal-{}", std::process::id()));
    let path = dir.join("tuning.json");
    let p = path.to_str().unwrap();
    let out = hccl_test(&["--calibrate", "--tuning-file", p]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let t = hccl_adapter::Tuning::load(&path).expect("a valid tuning file");
    assert!(t.shm.alpha_us > 0.0 && t.shm.gbps > 0.0 && t.tcp.gbps > 0.0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("level 0 (shared memory): alpha"));

    // a communicator created with it runs; a missing file is a clear error
    let run = |file: &str| {
        Command::new(env!("CARGO_BIN_EXE_hccl-test"))
            .args([
                "all_reduce",
                "-p",
                "2",
                "-b",
                "1K",
                "-e",
                "1K",
                "-n",
                "2",
                "-w",
                "1",
            ])
            .env("HCCL_RS_TUNING_FILE", file)
            .env("HCCL_EXEC_TIMEOUT", "60")
            .output()
            .expect("run hccl-test")
    };
    let ok = run(p);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let missing = dir.join("missing.json");
    let bad = run(missing.to_str().unwrap());
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("cannot read tuning file") && err.contains("HCCL_RS_TUNING_FILE"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every primitive across processes at p = 2, 4, 8 (8 oversubscribes the 2
/// cores), on one host (shared memory) and on two declared hosts (shared
/// memory inside each, TCP between), results checked on every row.
#[test]
fn every_primitive_across_processes_at_2_4_8_ranks_on_one_and_two_hosts() {
    let before = leftover_segments();
    for (p, hosts) in [
        ("2", "1"),
        ("4", "1"),
        ("8", "1"),
        ("2", "2"),
        ("5", "2"),
        ("8", "2"),
    ] {
        for op in [
            "all_reduce",
            "all_gather",
            "all_gatherv",
            "reduce_scatter",
            "reduce_scatterv",
            "broadcast",
            "reduce",
            "scatter",
            "gather",
            "alltoall",
            "alltoallv",
            "send_recv",
            "barrier",
        ] {
            let out = hccl_test(&[
                op,
                "-p",
                p,
                "-b",
                "8K",
                "-e",
                "1M",
                "-f",
                "128",
                "-n",
                "2",
                "-w",
                "1",
                "-r",
                "1",
                "--transport",
                "process",
                "--hosts",
                hosts,
            ]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{op} p={p} hosts={hosts}: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let rows: Vec<&str> = stdout.lines().skip(2).collect();
            let want_rows = if op == "barrier" { 1 } else { 2 };
            assert_eq!(rows.len(), want_rows, "{op} p={p} hosts={hosts}: {stdout}");
            assert!(
                rows.iter().all(|r| r.contains("success")),
                "{op} p={p} hosts={hosts}: {stdout}"
            );
        }
    }
    assert_no_segment_left(&before, "no /dev/shm segment may outlive the runs");
}

/// The direct-read executors across processes: each forced at p = 2, 3, 4,
/// 8 with results checked; with cross-memory attach switched off
/// (`HCCL_RS_CMA=0`) forcing one is a clear error naming the switch, and
/// the default selection falls back to staged executors and still succeeds.
#[test]
fn direct_executors_across_processes_and_their_fallback() {
    let before = leftover_segments();
    let sweep = |op: &str, p: &str, algo: Option<&str>, env: &[(&str, &str)]| {
        let mut args = vec![
            op,
            "-p",
            p,
            "-b",
            "4",
            "-e",
            "2M",
            "-f",
            "512",
            "-n",
            "2",
            "-w",
            "1",
            "-r",
            "1",
            "--transport",
            "process",
        ];
        if let Some(a) = algo {
            args.extend(["--algo", a]);
        }
        hccl_test_env(&args, env)
    };
    let ops = [
        ("all_reduce", "AllReduce"),
        ("all_gather", "AllGather"),
        ("reduce_scatter", "ReduceScatter"),
        ("alltoall", "AllToAll"),
        ("broadcast", "Broadcast"),
        ("reduce", "Reduce"),
        ("scatter", "Scatter"),
        ("gather", "Gather"),
    ];
    // what hccl-rs checks before reading peers' buffers (HCCL_RS_CMA auto):
    // Yama's ptrace scope 0 (or no Yama) and the switch not off
    let cma_here = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map_or(true, |s| s.trim() == "0")
        && !matches!(
            std::env::var("HCCL_RS_CMA").as_deref(),
            Ok("0" | "off" | "false")
        );
    for p in ["2", "3", "4", "8"] {
        for (op, name) in ops {
            if !cma_here {
                break;
            }
            let algo = format!("{name}DirectExecutor");
            let out = sweep(op, p, Some(&algo), &[]);
            assert_rows_succeed(&out, 3, &format!("{algo} p={p}"));
        }
    }
    let off = [("HCCL_RS_CMA", "0")];
    let out = sweep("all_reduce", "2", Some("AllReduceDirectExecutor"), &off);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "forced direct without CMA must fail");
    assert!(
        stderr.contains("HCCL_RS_CMA"),
        "the error must name the switch: {stderr}"
    );
    for (op, _) in ops {
        let out = sweep(op, "3", None, &off);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{op} without CMA: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.lines().skip(2).all(|r| r.contains("success")),
            "{op} without CMA: {stdout}"
        );
    }
    assert_no_segment_left(&before, "no /dev/shm segment may outlive the runs");
}

/// The AIV kernels across processes (boards in the ranks' shared
/// segments): every primitive with a kernel, forced at p = 2, 3, 4, 8 for
/// sizes whose payload fits a board entry, results checked, and no segment
/// left behind.
#[test]
fn aiv_kernels_across_processes() {
    let before = leftover_segments();
    for (op, executor) in [
        ("all_reduce", "AllReduceMeshAivExecutor"),
        ("all_gather", "AllGatherMeshAivExecutor"),
        ("reduce_scatter", "ReduceScatterMeshAivExecutor"),
        ("alltoall", "AllToAllMeshAivExecutor"),
        ("broadcast", "BroadcastMeshAivExecutor"),
        ("reduce", "ReduceMeshAivExecutor"),
        ("scatter", "ScatterMeshAivExecutor"),
        ("gather", "GatherMeshAivExecutor"),
    ] {
        for p in ["2", "3", "4", "8"] {
            let out = hccl_test_env(
                &[
                    op,
                    "-p",
                    p,
                    "-b",
                    "64",
                    "-e",
                    "1024",
                    "-f",
                    "4",
                    "-n",
                    "20",
                    "-w",
                    "2",
                    "-c",
                    "1",
                    "--transport",
                    "process",
                    "--algo",
                    executor,
                ],
                &[],
            );
            assert_rows_succeed(&out, 3, &format!("{op} p={p}"));
        }
    }
    assert_no_segment_left(&before, "no /dev/shm segment may outlive the runs");
}

/// Strays at every rank's listener (`--strays`: silent and trickling
/// connections held open for the whole sweep, and one sending garbage)
/// leave a TCP AllReduce loop across processes correct; the garbage one is
/// dropped with a log line naming why. (What they cost in time per op is
/// a benchmark's business: docs/performance.md.)
#[test]
fn stray_connections_leave_a_tcp_allreduce_loop_correct() {
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "2",
        "--hosts",
        "2",
        "--transport",
        "process",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "32",
        "-n",
        "50",
        "-w",
        "2",
        "--strays",
        "6",
        "--format",
        "json",
    ]);
    let rows = json_rows(&out, 4, "strays");
    for row in &rows {
        assert_eq!(row["check"], "success", "{row}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dropped a link connection with a wrong magic"),
        "the garbage connection was not seen: {err}"
    );
}

/// The multi-ring executors across processes on declared hosts (shared
/// memory inside a host, TCP between hosts), forced with `--algo`: an odd
/// size and one that takes several rounds per channel of a 1 MB CCL
/// buffer, for several data types and reductions and a root that is not
/// rank 0, results checked on every row. `HCCL_RS_MAX_CHANNELS` reaches
/// every rank process.
fn multi_ring_across_processes(p: &str, hosts: &str, channels: &str) {
    let before = leftover_segments();
    for (op, name, dtype, rop) in [
        ("all_reduce", "AllReduce", "fp32", "sum"),
        ("all_reduce", "AllReduce", "int8", "max"),
        ("all_reduce", "AllReduce", "bf16", "prod"),
        ("reduce_scatter", "ReduceScatter", "int32", "min"),
        ("all_gather", "AllGather", "fp16", "sum"),
        ("broadcast", "Broadcast", "uint8", "sum"),
        ("reduce", "Reduce", "fp64", "sum"),
    ] {
        let algo = format!("{name}MultiRingExecutor");
        let out = hccl_test_env(
            &[
                op,
                "-p",
                p,
                "-b",
                "3001",
                "-e",
                "5M",
                "-f",
                "1397",
                "-n",
                "2",
                "-w",
                "1",
                "-d",
                dtype,
                "-o",
                rop,
                "-r",
                "1",
                "--transport",
                "process",
                "--hosts",
                hosts,
                "--algo",
                &algo,
                "--format",
                "json",
            ],
            &[("HCCL_BUFFSIZE", "1"), ("HCCL_RS_MAX_CHANNELS", channels)],
        );
        let what = format!("{algo} {dtype} {rop} p={p} hosts={hosts} channels<={channels}");
        for row in json_rows(&out, 2, &what) {
            assert_eq!(row["check"], "success", "{what}: {row}");
        }
    }
    assert_no_segment_left(&before, "no /dev/shm segment may outlive the runs");
}

#[test]
fn multi_ring_across_processes_3_ranks_on_2_hosts() {
    multi_ring_across_processes("3", "2", "32");
}

#[test]
fn multi_ring_across_processes_5_ranks_on_2_hosts() {
    multi_ring_across_processes("5", "2", "3");
}

#[test]
fn multi_ring_across_processes_8_ranks_on_3_hosts() {
    multi_ring_across_processes("8", "3", "32");
}

/// With ranks as processes the `algorithm` column names the executor of
/// the measured op, not that of the max-reduction of the figures that
/// follows it on the same communicator (an AllReduce).
#[test]
fn process_rows_name_the_measured_ops_executor() {
    for op in ["all_gather", "broadcast", "reduce_scatter"] {
        let out = hccl_test(&[
            op,
            "-p",
            "4",
            "--hosts",
            "2",
            "--transport",
            "process",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "2",
            "-w",
            "1",
            "--format",
            "json",
        ]);
        let want = match op {
            "all_gather" => "AllGather",
            "broadcast" => "Broadcast",
            _ => "ReduceScatter",
        };
        for row in json_rows(&out, 1, op) {
            let algo = row["algorithm"].as_str().unwrap_or_default();
            assert!(algo.starts_with(want), "{op} reported {algo}: {row}");
        }
    }
}

/// The zero-copy flags across processes: `-z 1`, `-m 1` (symmetric
/// windows) and `--graph --bucket 8` (eight AllReduces per loop op,
/// captured and fused; on separate buffers and on slices of one with
/// `--bucket-flat`) check every row; the graph-mode ones run the
/// user-buffer executors (AIV below its limit, direct above it).
#[test]
fn zero_copy_symmetric_and_bucketed_graph_runs_check_every_row() {
    for extra in [
        &["-z", "1"][..],
        &["-m", "1"][..],
        &["--graph", "--bucket", "8"][..],
        &["--graph", "--bucket", "8", "--bucket-flat"][..],
    ] {
        for op in ["all_reduce", "all_gather"] {
            let mut args = vec![
                op,
                "-p",
                "3",
                "--transport",
                "process",
                "-b",
                "1K",
                "-e",
                "1M",
                "-f",
                "32",
                "-n",
                "3",
                "-w",
                "1",
                "--format",
                "json",
            ];
            args.extend_from_slice(extra);
            let out = hccl_test(&args);
            let what = format!("{op} {extra:?}");
            for row in json_rows(&out, 3, &what) {
                assert_eq!(row["check"], "success", "{what}: {row}");
                let algo = row["algorithm"].as_str().unwrap_or_default();
                assert!(
                    algo.contains("Aiv") || algo.contains("Direct"),
                    "{what}: ran {algo} ({row})"
                );
            }
        }
    }
}

/// A `--graph` row names the executor of the captured op, not that of the
/// barriers hccl-test runs between passes (a replay skips the framework).
#[test]
fn graph_rows_name_the_captured_ops_executor() {
    let out = hccl_test(&[
        "all_reduce",
        "-p",
        "2",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "3",
        "-w",
        "1",
        "--graph",
        "-z",
        "1",
        "--transport",
        "process",
        "--format",
        "json",
    ]);
    let rows = json_rows(&out, 1, "graph row");
    assert_eq!(rows[0]["check"], "success", "{:?}", rows[0]);
    assert_eq!(
        rows[0]["algorithm"], "AllReduceDirectExecutor",
        "{:?}",
        rows[0]
    );
}

fn hccl_sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hccl-sim"))
        .args(args)
        .output()
        .expect("hccl-sim runs")
}

/// `hccl-sim` predicts an op's time on the given hosts with a tuning
/// file's parameters and a host link rate, names the busiest host link,
/// writes the timed plan as Perfetto JSON, runs the V ops with uneven
/// counts, and refuses a missing tuning file or a bad rate by name.
#[test]
fn hccl_sim_predicts_time_and_writes_a_timeline() {
    let dir = std::env::temp_dir().join(format!("hccl-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tuning = dir.join("tuning.json");
    std::fs::write(
        &tuning,
        r#"{"version":1,"host":"t","measured_unix_s":1,
            "shm":{"alpha_us":2.0,"gbps":4.0},"tcp":{"alpha_us":20.0,"gbps":0.125},
            "reduce_gbps":8.0,"host_gbps":0.125}"#,
    )
    .unwrap();
    let plan = dir.join("plan.json");
    let out = hccl_sim(&[
        "--executor",
        "AllReduceRingExecutor",
        "--servers",
        "2,2",
        "--count",
        "262144",
        "--tuning-file",
        tuning.to_str().unwrap(),
        "--timeline",
        plan.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // a ring across two hosts: 6 steps of α + 256 KiB / 0.125 GB/s, and γ
    // for 3 reductions of 256 KiB: the cost model's formula
    let want = 6.0 * (20.0 + 262144.0 / 125.0) + 3.0 * 262144.0 / 8e3;
    let got: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("predicted time:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no predicted time in {text}"));
    assert!(
        (got / want - 1.0).abs() < 1e-3,
        "predicted {got} µs, formula {want} µs"
    );
    assert!(text.contains("busiest host link: host "), "{text}");
    // a ring: every link carries 6 transfers of 256 KiB
    assert!(text.contains(" bytes in 6 transfers"), "{text}");
    assert!(
        text.contains(&format!(
            "busiest link:    rank 0 -> rank 1, {} bytes",
            6 * 262144
        )),
        "{text}"
    );
    assert!(text.contains("result check:    success"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e["name"].as_str().unwrap().starts_with("send to"))
            .count(),
        24
    );
    // the V ops run with uneven counts, checked
    for exe in [
        "AllGatherVMeshExecutor",
        "ReduceScatterVMeshExecutor",
        "AllToAllVPairWiseExecutor",
    ] {
        let out = hccl_sim(&["--executor", exe, "--ranks", "5", "--count", "10"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("success"),
            "{exe}: {text}"
        );
    }
    // errors name what is wrong
    let out = hccl_sim(&[
        "--executor",
        "AllReduceRingExecutor",
        "--tuning-file",
        "/nonexistent/t.json",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("cannot read tuning file /nonexistent/t.json"));
    let out = hccl_sim(&["--executor", "AllReduceRingExecutor", "--host-gbps", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--host-gbps 0: expected a positive rate")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hccl_sim_drivers_share_the_ranks_and_report_the_same() {
    // the value of a report line, e.g. "steps (α count): 126"
    let line = |text: &str, key: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key:?} in {text}"))[key.len()..]
            .trim()
            .to_owned()
    };
    let mut reports = Vec::new();
    for drivers in ["1", "2", "3"] {
        let out = hccl_sim(&[
            "--executor",
            "AllGatherRingExecutor",
            "--ranks",
            "64",
            "--count",
            "100",
            "--drivers",
            drivers,
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(line(&text, "result check:"), "success (bytes)");
        assert_eq!(line(&text, "steps (α count):"), "63");
        reports.push((
            line(&text, "tasks run:"),
            line(&text, "total link bytes:"),
            line(&text, "busiest link:"),
        ));
    }
    assert!(reports.windows(2).all(|w| w[0] == w[1]), "{reports:?}");
}
