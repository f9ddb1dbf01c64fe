//! Hosts as network namespaces (issue 16): every primitive checked across
//! 2 and 3 namespace hosts with uneven ranks per host, launched by
//! `hccl-test --netns` and by Open MPI's `mpirun` through
//! `tools/netns-mpirun.sh`; ranks in different namespaces are different
//! hosts (TCP between them, shared memory inside one); a rank killed in
//! another namespace is named by the survivors; the hosts are removed when
//! a run ends, fails, loses a rank or is interrupted, and those of killed
//! runs are swept; `tools/netns.sh` makes, lists and removes them.
//!
//! Needs root and iproute2 (and Open MPI for the mpirun tests). Without
//! them every test fails saying so, unless `HCCL_RS_SKIP_NETNS=1`. Each
//! test's hosts have a tag of their own ending in this process's id, so
//! the tests run side by side, and a guard removes them even when a test
//! fails (and a later run's sweep, if this process is killed).

use hccl_tests::drill::drill_env;
use hccl_tests::{netns_or_skip, segments_of, Ranks};
use hccl_tools::netns::{self, Layout, NetnsHosts};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const HCCL_TEST: &str = env!("CARGO_BIN_EXE_hccl-test-twin");
const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

/// Every primitive hccl-test has, each checked against the reference.
const OPS: [&str; 13] = [
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
];

/// hccl-test's arguments for a checked sweep of `op`: two sizes (one
/// through the shared-memory kernels inside a host, one chunked), root 1.
fn sweep_args(op: &str) -> Vec<String> {
    [
        op,
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
        "-c",
        "1",
        "--transport",
        "process",
        "--format",
        "json",
    ]
    .map(String::from)
    .to_vec()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A tag of this test: `prefix` and this process's id (swept if it dies).
fn tag(prefix: &str) -> String {
    format!("{prefix}{}", std::process::id())
}

/// Removes the hosts of a tag when dropped, whoever made them: what a
/// failing test (or a killed hccl-test) would otherwise leave.
struct TagGuard(String);

impl Drop for TagGuard {
    fn drop(&mut self) {
        let _ = netns::down_tag(&self.0);
    }
}

/// The namespaces present whose name starts with `hccl-TAG-`.
fn namespaces_of(tag: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("hccl-{tag}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// The bridge of a tag, if present.
fn bridge_of(tag: &str) -> Option<String> {
    std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .find_map(|e| {
            let alias = std::fs::read_to_string(e.path().join("ifalias")).ok()?;
            (alias.trim() == format!("hccl-{tag}"))
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
}

fn alive(pid: u32) -> bool {
    // a zombie is not alive: its /proc entry stays until it is reaped
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            state != Some("Z")
        })
        .unwrap_or(false)
}

/// Runs `cmd` to the end, its output collected, under a watchdog: past
/// `limit` it is sent SIGTERM (the wrappers then tear down), then SIGKILL,
/// and the test fails.
fn run_limited(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    run_limited_pid(cmd, limit, what).1
}

/// [`run_limited`], also returning the process id it had.
fn run_limited_pid(cmd: &mut Command, limit: Duration, what: &str) -> (u32, Output) {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => (pid, out.expect("output")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            if rx.recv_timeout(Duration::from_secs(10)).is_err() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!("{what}: did not finish within {limit:?}");
        }
    }
}

/// Removes terminal colour codes (tracing writes them to pipes too).
fn plain(s: &[u8]) -> String {
    let s = String::from_utf8_lossy(s);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
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

/// The JSON result rows in `stdout`.
fn rows(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with("{\"op\""))
        .map(|l| serde_json::from_str(l).expect("a result row is JSON"))
        .collect()
}

/// Checks that `rows` has, for every op of [`OPS`], its sizes with results
/// that checked out.
fn assert_every_op_checked(rows: &[serde_json::Value], what: &str) {
    for op in OPS {
        let mine: Vec<&serde_json::Value> = rows.iter().filter(|r| r["op"] == op).collect();
        let want = if op == "barrier" { 1 } else { 2 };
        assert_eq!(mine.len(), want, "{what}: {op}: rows {mine:?}");
        for r in mine {
            assert_eq!(r["check"], "success", "{what}: {op}: {r}");
        }
    }
}

/// From the ranks' `communicator formed` debug lines: every rank saw
/// `hosts` servers and shared memory with exactly the other ranks of its
/// host (ranks in other namespaces are other hosts). Returns how many
/// communicators were checked.
fn assert_hosts_seen(stderr: &str, layout: &Layout, p: u32, what: &str) -> usize {
    let field = |l: &str, k: &str| -> u32 {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what}: no {k}= in {l}"))
    };
    // the launchers give each host a slice of this machine's CPUs when
    // there are enough; a driver spins only with a CPU per rank on its
    // host's slice and on the machine
    let cpus = netns::allowed_cpus();
    let slices = netns::cpu_slices(&cpus, layout.hosts());
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = netns::parse_cpu_list(online.trim()).len() as u32;
    let mut n = 0;
    for l in stderr.lines().filter(|l| l.contains("communicator formed")) {
        let (rank, size) = (field(l, "rank"), field(l, "size"));
        assert_eq!(size, p, "{what}: {l}");
        assert_eq!(field(l, "servers"), layout.hosts(), "{what}: {l}");
        let host = layout.host_of(rank, p);
        let on_host = (0..p).filter(|&r| layout.host_of(r, p) == host).count() as u32;
        assert_eq!(field(l, "shm_peers"), on_host - 1, "{what}: {l}");
        let mask = slices
            .as_ref()
            .map_or(cpus.len(), |s| s[host as usize].len()) as u32;
        let spins = on_host <= mask && p <= online;
        assert_eq!(
            field(l, "spin_us") > 0,
            spins,
            "{what}: {on_host} ranks on a host of {mask} CPUs, {p} on {online}: {l}"
        );
        n += 1;
    }
    n
}

/// Every primitive through `hccl-test --netns SPEC` with p ranks, results
/// checked, each rank on the host the layout says; the hosts are gone
/// after each run.
fn every_primitive_by_hccl_test(spec: &str, p: u32) {
    let what = format!("hccl-test --netns {spec} -p {p}");
    if !netns_or_skip(&what) {
        return;
    }
    let layout = Layout::parse(spec).unwrap();
    let t = Instant::now();
    for op in OPS {
        let mut args = sweep_args(op);
        args.extend(["-p".into(), p.to_string(), "--netns".into(), spec.into()]);
        let (pid, out) = run_limited_pid(
            Command::new(HCCL_TEST)
                .args(&args)
                .env("HCCL_RS_LOG", "hccl_framework::multi_process=debug")
                .env("HCCL_EXEC_TIMEOUT", "60"),
            Duration::from_secs(60),
            &what,
        );
        let (stdout, stderr) = (plain(&out.stdout), plain(&out.stderr));
        assert!(out.status.success(), "{what} {op}: {stdout}\n{stderr}");
        let rows = rows(&stdout);
        assert_eq!(
            rows.len(),
            if op == "barrier" { 1 } else { 2 },
            "{what} {op}: {stdout}"
        );
        assert!(
            rows.iter().all(|r| r["check"] == "success"),
            "{what} {op}: {stdout}"
        );
        let formed = assert_hosts_seen(&stderr, &layout, p, &format!("{what} {op}"));
        assert_eq!(
            formed, p as usize,
            "{what} {op}: one communicator per rank\n{stderr}"
        );
        // the run removed its hosts (tag ht<its pid>)
        let t = format!("ht{pid}");
        assert!(
            namespaces_of(&t).is_empty(),
            "{what} {op}: {:?}",
            namespaces_of(&t)
        );
        assert_eq!(bridge_of(&t), None, "{what} {op}");
    }
    println!("{what}: {} ops checked in {:?}", OPS.len(), t.elapsed());
}

#[test]
fn every_primitive_on_2_namespace_hosts_by_hccl_test() {
    // 3 ranks on 2 hosts: 2 and 1
    every_primitive_by_hccl_test("2", 3);
}

/// One rank per namespace host, as many hosts as the machine has CPUs (at
/// most 4): every rank has a CPU of its own, so its driver spins while it
/// waits (a rank counted all ranks as its host's and parked instead: p99
/// of an 8 B AllReduce across the hosts 0.5-1 µs longer); results checked.
#[test]
fn a_rank_alone_on_its_namespace_host_spins_when_the_machine_has_a_cpu_per_rank() {
    let hosts = (netns::allowed_cpus().len() as u32).clamp(2, 4);
    let what = format!("hccl-test --netns {hosts} -p {hosts}");
    if !netns_or_skip(&what) {
        return;
    }
    let mut args = sweep_args("all_reduce");
    args.extend([
        "-p".into(),
        hosts.to_string(),
        "--netns".into(),
        hosts.to_string(),
    ]);
    let out = run_limited(
        Command::new(HCCL_TEST)
            .args(&args)
            .env("HCCL_RS_LOG", "hccl_framework::multi_process=debug")
            .env_remove("HCCL_RS_SPIN_US")
            .env("HCCL_EXEC_TIMEOUT", "60"),
        Duration::from_secs(60),
        &what,
    );
    let (stdout, stderr) = (plain(&out.stdout), plain(&out.stderr));
    assert!(out.status.success(), "{what}: {stdout}\n{stderr}");
    assert!(
        rows(&stdout).iter().all(|r| r["check"] == "success"),
        "{what}: {stdout}"
    );
    let layout = Layout::parse(&hosts.to_string()).unwrap();
    assert_eq!(
        assert_hosts_seen(&stderr, &layout, hosts, &what),
        hosts as usize,
        "{what}: {stderr}"
    );
    if netns::allowed_cpus().len() as u32 >= hosts {
        assert!(
            stderr
                .lines()
                .filter(|l| l.contains("communicator formed"))
                .all(|l| !l.contains("spin_us=0 ")),
            "{what}: every rank has a CPU and should spin: {stderr}"
        );
    }
}

#[test]
fn every_primitive_on_3_namespace_hosts_2_1_3_by_hccl_test() {
    every_primitive_by_hccl_test("2,1,3", 6);
}

/// Every primitive with `hccl-test --transport process` as the ranks of
/// one `mpirun` job across namespace hosts (tools/netns-mpirun.sh): each
/// rank runs hccl-test once per op, the rendezvous a root file per op.
fn every_primitive_by_mpirun(spec: &str, prefix: &str) {
    let what = format!("netns-mpirun.sh --hosts {spec}");
    if !netns_or_skip(&what) {
        return;
    }
    assert!(
        Command::new("mpirun")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "{what}: mpirun not found: install Open MPI (apt-get install -y openmpi-bin), \
         or set HCCL_RS_SKIP_NETNS=1 to skip the namespace tests"
    );
    let layout = Layout::parse(spec).unwrap();
    let p: u32 = match &layout {
        Layout::PerHost(c) => c.iter().sum(),
        Layout::Blocks(h) => h + 1,
    };
    let t = tag(prefix);
    let _guard = TagGuard(t.clone());
    let dir = std::env::temp_dir().join(format!("hccl-netns-{t}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // one hccl-test per op in every rank; rank 0 of each writes the root
    // file of that op, the others wait for it
    let args = sweep_args("$op").join(" ");
    let script = format!(
        "for op in {ops}; do HCCL_RS_ROOT_FILE={dir}/root.$op {bin} {args} || exit $?; done",
        ops = OPS.join(" "),
        dir = dir.display(),
        bin = HCCL_TEST,
    );
    let started = Instant::now();
    let out = run_limited(
        Command::new(repo().join("tools/netns-mpirun.sh"))
            .args(["--hosts", spec, "-np", &p.to_string(), "--tag", &t, "--"])
            .args(["-x", "HCCL_RS_LOG", "-x", "HCCL_EXEC_TIMEOUT"])
            .args(["--mca", "btl", "self,vader,tcp", "sh", "-c", &script])
            .env("HCCL_RS_LOG", "hccl_framework::multi_process=debug")
            .env("HCCL_EXEC_TIMEOUT", "60"),
        Duration::from_secs(120),
        &what,
    );
    let (stdout, stderr) = (plain(&out.stdout), plain(&out.stderr));
    assert!(out.status.success(), "{what}: {stdout}\n{stderr}");
    assert_every_op_checked(&rows(&stdout), &what);
    let formed = assert_hosts_seen(&stderr, &layout, p, &what);
    assert_eq!(formed, OPS.len() * p as usize, "{what}: {stderr}");
    // the wrapper removed its hosts
    assert!(
        namespaces_of(&t).is_empty(),
        "{what}: {:?}",
        namespaces_of(&t)
    );
    assert_eq!(bridge_of(&t), None, "{what}");
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{what}: {} ops checked in {:?}",
        OPS.len(),
        started.elapsed()
    );
}

#[test]
fn every_primitive_on_2_namespace_hosts_by_mpirun() {
    // 3 ranks on 2 hosts: 2 and 1 (blocks, as hccl-test --hosts)
    every_primitive_by_mpirun("2", "nma");
}

#[test]
fn every_primitive_on_3_namespace_hosts_2_1_3_by_mpirun() {
    every_primitive_by_mpirun("2,1,3", "nmb");
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// 4 drill workers (`hccl-mp-worker drill`, looping a 1 MiB AllReduce) on
/// 2 namespace hosts, 2 each; rank 2 (host 1) is killed; every survivor,
/// in its namespace or the other, fails with ERemote naming rank 2, its
/// process and its host, within 3 s (the aim is 1 s), and no segment or
/// process is left.
#[test]
fn a_rank_killed_in_another_namespace_is_named_by_the_survivors() {
    let what = "kill across namespaces";
    if !netns_or_skip(what) {
        return;
    }
    let hosts = NetnsHosts::up(&tag("nkill"), 2, None).unwrap();
    let dir = std::env::temp_dir().join(format!("hccl-netns-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let (n, victim) = (4u32, 2u32);
    let host_of = |r: u32| r * 2 / n;
    let mut ranks = Ranks(
        (0..n)
            .map(|r| {
                let h = host_of(r);
                let mut cmd = hosts.command(h, WORKER);
                cmd.args(["root_info", &r.to_string(), &n.to_string(), &d, "drill"]);
                drill_env(&mut cmd, "allreduce", 1 << 20, &[]);
                cmd.env("HCCL_IF_IP", hosts.addr(h).to_string())
                    .spawn()
                    .expect("spawn worker")
            })
            .collect(),
    );
    let pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..n).any(|r| !dir.join(format!("ready.{r}")).exists()) {
        for (r, c) in ranks.0.iter_mut().enumerate() {
            if let Ok(Some(st)) = c.try_wait() {
                panic!("{what}: rank {r} ended before the loop ran: {st}");
            }
        }
        assert!(Instant::now() < deadline, "{what}: ranks never all started");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    let t_loss = unix_ns();
    ranks.0[victim as usize].kill().unwrap();
    let outs = hccl_tests::stdout_of_all(&mut ranks.0, Duration::from_secs(30), what);
    let victim_host = hosts.name(host_of(victim));
    for (r, out) in outs.iter().enumerate() {
        if r as u32 == victim {
            continue;
        }
        let line = out
            .lines()
            .filter_map(|l| l.strip_prefix("DRILL "))
            .map(|j| serde_json::from_str::<serde_json::Value>(j).expect("JSON"))
            .find(|l| l.get("message").is_some())
            .unwrap_or_else(|| panic!("{what}: rank {r} reported no error: {out}"));
        let msg = line["message"].as_str().unwrap();
        let took = Duration::from_nanos(
            (line["t_ns"].as_u64().unwrap() as u128).saturating_sub(t_loss) as u64,
        );
        println!(
            "{what}: rank {r} (host {}) failed {took:?} after the loss: {msg}",
            host_of(r as u32)
        );
        assert_eq!(
            line["code"], 21,
            "{what}: rank {r}: ERemote expected: {msg}"
        );
        assert!(
            msg.contains(&format!("rank {victim} (process {}", pids[victim as usize])),
            "{what}: rank {r} must name rank {victim} and its process: {msg}"
        );
        assert!(
            msg.contains(&victim_host),
            "{what}: rank {r} must name the lost rank's host {victim_host}: {msg}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{what}: rank {r} took {took:?}: {msg}"
        );
    }
    assert!(
        segments_of(&pids).is_empty(),
        "{what}: {:?}",
        segments_of(&pids)
    );
    hosts.down().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The worker processes of an hccl-test parent: pid by rank.
fn workers_of(parent: u32) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&str> = cmdline.split('\0').collect();
        if let Some(i) = args.iter().position(|a| *a == "--worker-rank") {
            if let Some(r) = args.get(i + 1).and_then(|r| r.parse().ok()) {
                v.push((r, pid));
            }
        }
    }
    v.sort();
    v
}

/// A long `hccl-test --netns 2 -p 4` run, started; returns the parent and
/// its stdout lines (a row once every rank is in its loop).
fn start_long_run() -> (Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(HCCL_TEST)
        .args([
            "all_reduce",
            "-p",
            "4",
            "--netns",
            "2",
            "-b",
            "64K",
            "-e",
            "16M",
        ])
        .args(["-f", "2", "-n", "200", "-w", "1", "--transport", "process"])
        .env("HCCL_EXEC_TIMEOUT", "20")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hccl-test");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            let _ = tx.send(l);
        }
    });
    (child, rx)
}

/// Waits for the first result row (every rank is in its op loop then).
fn first_row(rx: &std::sync::mpsc::Receiver<String>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("success") => return,
            Ok(_) => continue,
            Err(e) => panic!("{what}: no result row: {e}"),
        }
    }
}

/// Waits (bounded) for `child` to end; returns its status and stderr.
fn finish(mut child: Child, what: &str) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = Vec::new();
            std::io::Read::read_to_end(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (st, plain(&err));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: hccl-test did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `hccl-test --netns` removes its hosts and leaves no rank behind when a
/// rank is killed (the survivors' errors name it and its namespace host)
/// and when the parent is interrupted (SIGINT, as Ctrl-C sends).
#[test]
fn hccl_test_removes_its_hosts_when_a_rank_dies_and_on_ctrl_c() {
    let what = "hccl-test --netns teardown";
    if !netns_or_skip(what) {
        return;
    }
    // a rank killed
    let (child, rx) = start_long_run();
    let parent = child.id();
    let _guard = TagGuard(format!("ht{parent}"));
    first_row(&rx, what);
    let workers = workers_of(parent);
    assert_eq!(workers.len(), 4, "{what}: workers {workers:?}");
    assert_eq!(namespaces_of(&format!("ht{parent}")).len(), 2);
    let (_, victim) = workers[2];
    Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap();
    let (st, err) = finish(child, what);
    assert!(!st.success(), "{what}: {err}");
    assert!(
        err.contains(&format!("lost peer rank 2 (process {victim} on host "))
            && err.contains(&format!("hccl-ht{parent}-h1")),
        "{what}: the survivors must name rank 2, its process and its host: {err}"
    );
    assert!(
        err.contains("rank 2 exited with signal: 9"),
        "{what}: {err}"
    );
    assert!(
        namespaces_of(&format!("ht{parent}")).is_empty(),
        "{what}: hosts left"
    );
    assert_eq!(bridge_of(&format!("ht{parent}")), None);
    assert!(
        workers.iter().all(|&(_, p)| !alive(p)),
        "{what}: ranks left: {workers:?}"
    );

    // interrupted
    let (child, rx) = start_long_run();
    let parent = child.id();
    let _guard = TagGuard(format!("ht{parent}"));
    first_row(&rx, what);
    let workers = workers_of(parent);
    assert_eq!(workers.len(), 4, "{what}: workers {workers:?}");
    Command::new("kill")
        .args(["-INT", &parent.to_string()])
        .status()
        .unwrap();
    let t = Instant::now();
    let (st, err) = finish(child, what);
    assert!(!st.success(), "{what}: {err}");
    assert!(err.contains("interrupted"), "{what}: {err}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{what}: took {:?}",
        t.elapsed()
    );
    assert!(
        namespaces_of(&format!("ht{parent}")).is_empty(),
        "{what}: hosts left"
    );
    assert_eq!(bridge_of(&format!("ht{parent}")), None);
    assert!(
        workers.iter().all(|&(_, p)| !alive(p)),
        "{what}: ranks left: {workers:?}"
    );
}

/// Hosts whose owner process is gone are swept; those of a live owner,
/// or of a tag that names no process, are not.
#[test]
fn hosts_of_a_dead_owner_are_swept() {
    let what = "sweep";
    if !netns_or_skip(what) {
        return;
    }
    // The stale hosts' owner lives while they are made: a sweep of a
    // test running beside this one (hccl-test --netns sweeps at start)
    // would otherwise remove them half-made. It dies before our sweep.
    let mut owner = Command::new("sleep").arg("60").spawn().unwrap();
    let dead = owner.id();
    let stale = format!("nsweep{dead}");
    let _g1 = TagGuard(stale.clone());
    // left as a killed run leaves them: nothing removes them but the sweep
    std::mem::forget(NetnsHosts::up(&stale, 2, None).unwrap());
    let _ = owner.kill();
    owner.wait().unwrap();
    assert!(!alive(dead));
    let live = NetnsHosts::up(&tag("nlive"), 1, None).unwrap();
    let named = NetnsHosts::up(&format!("nnamed{}x", std::process::id()), 1, None).unwrap();
    let swept = netns::sweep_stale();
    // (an hccl-test --netns of a test running beside this one sweeps too,
    // and may have been first)
    println!("{what}: swept {swept:?}");
    assert!(
        namespaces_of(&stale).is_empty(),
        "{what}: {:?}",
        namespaces_of(&stale)
    );
    assert_eq!(bridge_of(&stale), None);
    assert_eq!(
        namespaces_of(live.tag()).len(),
        1,
        "a live owner's hosts stay"
    );
    assert_eq!(
        namespaces_of(named.tag()).len(),
        1,
        "a tag naming no process stays"
    );
    live.down().unwrap();
    named.down().unwrap();
}

/// `--netns-rate` limits every host's link: a 1 MiB AllReduce between 2
/// hosts at 100 Mbit/s cannot beat 12.5 MB/s of bus bandwidth.
#[test]
fn netns_rate_limits_the_links() {
    let what = "hccl-test --netns-rate";
    if !netns_or_skip(what) {
        return;
    }
    let out = run_limited(
        Command::new(HCCL_TEST)
            .args([
                "all_reduce",
                "-p",
                "2",
                "--netns",
                "2",
                "--netns-rate",
                "100mbit",
            ])
            .args(["-b", "1M", "-e", "1M", "-n", "2", "-w", "1"])
            .args(["--transport", "process", "--format", "json"]),
        Duration::from_secs(60),
        what,
    );
    let stdout = plain(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {stdout}\n{}",
        plain(&out.stderr)
    );
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 1, "{stdout}");
    assert_eq!(rows[0]["check"], "success");
    let busbw = rows[0]["busbw_gbps"].as_f64().unwrap();
    // p=2: each rank sends the whole message over its link per AllReduce
    assert!(
        busbw > 0.0 && busbw < 0.0135,
        "{what}: bus bandwidth {busbw} GB/s over 100 Mbit/s links"
    );
}

/// Without root, `hccl-test --netns` and the script refuse with a message
/// saying so, before printing anything else.
#[test]
fn without_root_namespace_hosts_are_refused_clearly() {
    let what = "not root";
    if !netns_or_skip(what) {
        return;
    }
    let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let out = run_limited(
        Command::new("setpriv").args(nobody).arg(HCCL_TEST).args([
            "all_reduce",
            "-p",
            "2",
            "--netns",
            "2",
            "--transport",
            "process",
        ]),
        Duration::from_secs(30),
        what,
    );
    let err = plain(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    assert!(
        err.contains("network namespace hosts need root"),
        "{what}: {err}"
    );
    assert!(out.stdout.is_empty(), "{what}: nothing else is printed");
    let out = run_limited(
        Command::new("setpriv")
            .args(nobody)
            .arg(repo().join("tools/netns.sh"))
            .args(["up", "2", "--tag", &tag("nroot")]),
        Duration::from_secs(30),
        what,
    );
    let err = plain(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    assert!(err.contains("need root"), "{what}: {err}");
}

/// `tools/netns.sh`: up makes the hosts (and refuses a tag in use), addr
/// and subnet agree with it, down removes them and is idempotent; run
/// gives the command the hosts, returns its status and removes them,
/// also when it is killed.
#[test]
fn netns_script_up_down_and_run() {
    let what = "netns.sh";
    if !netns_or_skip(what) {
        return;
    }
    let script = repo().join("tools/netns.sh");
    let sh = |args: &[&str]| {
        run_limited(
            Command::new(&script).args(args),
            Duration::from_secs(30),
            &format!("{what} {args:?}"),
        )
    };
    let t = tag("nscript");
    let _guard = TagGuard(t.clone());
    let up = sh(&["up", "2", "--tag", &t, "--rate", "1gbit"]);
    assert!(up.status.success(), "{}", plain(&up.stderr));
    let listing = plain(&up.stdout);
    let lines: Vec<Vec<&str>> = listing.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 2, "{listing}");
    assert_eq!(lines[1][0], format!("hccl-{t}-h1"));
    assert_eq!(namespaces_of(&t).len(), 2);
    let again = sh(&["up", "1", "--tag", &t]);
    assert!(!again.status.success());
    assert!(plain(&again.stderr).contains("exist already"));
    let addr = sh(&["addr", "1", "--tag", &t]);
    assert_eq!(plain(&addr.stdout).trim(), lines[1][1]);
    let subnet = plain(&sh(&["subnet", "--tag", &t]).stdout);
    let net: Vec<&str> = lines[1][1].split('.').collect();
    assert_eq!(subnet.trim(), format!("198.18.{}.0/24", net[2]));
    for _ in 0..2 {
        let down = sh(&["down", "--tag", &t]);
        assert!(down.status.success(), "{}", plain(&down.stderr));
        assert!(namespaces_of(&t).is_empty());
        assert_eq!(bridge_of(&t), None);
    }

    let t = tag("nrun");
    let _guard = TagGuard(t.clone());
    let run = sh(&[
        "run",
        "3",
        "--tag",
        &t,
        "--",
        "sh",
        "-c",
        "echo $HCCL_NETNS_HOSTS; exit 3",
    ]);
    assert_eq!(run.status.code(), Some(3), "{}", plain(&run.stderr));
    assert_eq!(
        plain(&run.stdout).trim(),
        (0..3)
            .map(|h| format!("hccl-{t}-h{h}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(namespaces_of(&t).is_empty());

    let t = tag("nkilled");
    let _guard = TagGuard(t.clone());
    let mut child = Command::new(&script)
        .args(["run", "1", "--tag", &t, "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while namespaces_of(&t).is_empty() {
        assert!(Instant::now() < deadline, "{what}: run never made its host");
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let t0 = Instant::now();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(143));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(
        namespaces_of(&t).is_empty(),
        "{what}: a killed run removes its hosts"
    );
    assert_eq!(bridge_of(&t), None);
}

/// The fused ops across namespace hosts (the stream path: each block's
/// collective over TCP between hosts, shared memory inside one): every op
/// on odd shapes, the fused result checked against the unfused one
/// (itself checked against a reference in the fused crate's tests).
fn fused_ops_on_hosts(spec: &str, p: u32) {
    let what = format!("hccl-test --fused all --netns {spec} -p {p}");
    if !netns_or_skip(&what) {
        return;
    }
    let (pid, out) = run_limited_pid(
        Command::new(HCCL_TEST)
            .args([
                "--fused",
                "all",
                "--shapes",
                "97x33x45,301x64x129",
                "-n",
                "2",
                "-w",
                "1",
                "-c",
                "1",
                "--transport",
                "process",
                "--format",
                "json",
                "-p",
                &p.to_string(),
                "--netns",
                spec,
            ])
            .env("HCCL_EXEC_TIMEOUT", "60")
            // small shapes: `auto` would run them unfused
            .env("HCCL_RS_FUSED_PATH", "stream")
            .env("HCCL_RS_FUSED_BLOCK_ROWS", "16"),
        Duration::from_secs(90),
        &what,
    );
    let (stdout, stderr) = (plain(&out.stdout), plain(&out.stderr));
    assert!(out.status.success(), "{what}: {stdout}\n{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 6, "{what}: three ops × two shapes\n{stdout}");
    for r in &rows {
        assert_eq!(r["check"], "success", "{what}: {r}");
        assert_eq!(r["path"], "stream", "{what}: across hosts: {r}");
        assert!(r["blocks"].as_u64().unwrap() >= 2, "{what}: pipelined: {r}");
    }
    assert!(namespaces_of(&format!("ht{pid}")).is_empty(), "{what}");
}

#[test]
fn fused_ops_on_2_namespace_hosts() {
    fused_ops_on_hosts("2", 2);
}

#[test]
fn fused_ops_on_3_namespace_hosts_2_1_3() {
    fused_ops_on_hosts("2,1,3", 6);
}
