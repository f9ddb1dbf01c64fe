//! The fault drills' shared pieces: rank processes of `hccl-mp-worker`
//! in its `drill` and `flap` scenarios, their readiness files and their
//! JSON lines — used by the fault tests (`dead_peers.rs`, `op_retry.rs`)
//! and the fault-tolerance bar's benchmark (`benches/fault_bar.rs`).

use crate::Ranks;
use hccl_tools::netns::{NetnsHosts, HOST_IFNAME};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (the drill lines' `t_ns` clock).
pub fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A fresh temporary directory for one run (`hccl-dead-TAG-PID`).
pub fn tempdir(tag: &str) -> String {
    let d = std::env::temp_dir().join(format!("hccl-dead-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.to_string_lossy().into_owned()
}

/// Variables of a test's own environment that would change what its rank
/// processes do (their rank, placement, executor, transport, retry).
pub const WORKER_CLEARED: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "HCCL_RS_EXECUTOR",
    "HCCL_RS_HOST_ID",
    "HCCL_RS_TRANSPORT",
    "HCCL_ALGO",
    "HCCL_SOCKET_IFNAME",
    "HCCL_OP_RETRY_ENABLE",
    "HCCL_OP_RETRY_PARAMS",
];

/// Removes [`WORKER_CLEARED`] from a rank process's environment.
pub fn clear_worker_env(cmd: &mut Command) {
    for v in WORKER_CLEARED {
        cmd.env_remove(v);
    }
}

/// Sets a drill worker's environment on `cmd`: the variables of the
/// parent that would change placement removed, short timeouts, the op
/// looped (`op`, `bytes`), then `env` on top. Output: stdout piped,
/// stderr dropped.
pub fn drill_env(cmd: &mut Command, op: &str, bytes: usize, env: &[(&str, String)]) {
    clear_worker_env(cmd);
    cmd.env("HCCL_BUFFSIZE", "4")
        .env("HCCL_EXEC_TIMEOUT", "20")
        .env("HCCL_CONNECT_TIMEOUT", "20")
        .env("HCCL_IF_IP", "127.0.0.1")
        .env("DRILL_OP", op)
        .env("DRILL_BYTES", bytes.to_string())
        .env("DRILL_LINGER_MS", "1500");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
}

/// Waits until every rank has run its op once (`DIR/ready.R`); a rank
/// that ends first, or 60 s without, fails the caller.
pub fn wait_ready(dir: &str, ranks: &mut Ranks) {
    let n = ranks.0.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..n).any(|r| !std::path::Path::new(&format!("{dir}/ready.{r}")).exists()) {
        for (r, c) in ranks.0.iter_mut().enumerate() {
            if let Ok(Some(st)) = c.try_wait() {
                panic!("rank {r} ended before the loop ran: {st}");
            }
        }
        assert!(Instant::now() < deadline, "ranks never all started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One rank's lines with `prefix` (`"DRILL "`, `"FLAP "`), as JSON.
pub fn json_lines(out: &str, prefix: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|j| serde_json::from_str(j).expect("a drill line is JSON"))
        .collect()
}

/// Flap trials run by this process (names their logs).
static TRIALS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// What one link-flap trial saw: each rank's `FLAP` line and pid.
pub struct FlapTrial {
    /// By rank.
    pub lines: Vec<serde_json::Value>,
    /// By rank.
    pub pids: Vec<u32>,
}

/// One link-flap trial on `hosts` (2 namespace hosts): `per_host` rank
/// processes of `worker` on each loop checked 16 MiB AllReduces
/// (`hccl-mp-worker ... flap`) with a 100 ms link timeout and `env`; once
/// all are in their loop, host 1's interface goes down for `flap`, then
/// up; the ranks stop half a second later.
pub fn flap_trial(
    worker: &str,
    hosts: &NetnsHosts,
    per_host: u32,
    flap: Duration,
    env: &[(&str, &str)],
    what: &str,
) -> FlapTrial {
    let dir = tempdir(&format!("flap-{}", hosts.tag()));
    let n = 2 * per_host;
    let trial = TRIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut ranks = Ranks(
        (0..n)
            .map(|r| {
                let h = r / per_host;
                let mut cmd = hosts.command(h, worker);
                cmd.args(["root_info", &r.to_string(), &n.to_string(), &dir, "flap"]);
                drill_env(&mut cmd, "allreduce", 16 << 20, &[]);
                cmd.env_remove("HCCL_BUFFSIZE")
                    .env("HCCL_IF_IP", hosts.addr(h).to_string())
                    .env("HCCL_RS_TCP_LINK_TIMEOUT_MS", "100")
                    .envs(env.iter().copied());
                // FLAP_LOG_DIR: each rank's log (HCCL_RS_LOG, default
                // warn) to DIR/flap-<trial>-<rank>.log
                if let Ok(logs) = std::env::var("FLAP_LOG_DIR") {
                    let f = std::fs::File::create(format!("{logs}/flap-{trial}-{r}.log"))
                        .expect("log file");
                    if std::env::var("HCCL_RS_LOG").is_err() {
                        cmd.env("HCCL_RS_LOG", "warn");
                    }
                    cmd.stderr(f);
                }
                cmd.spawn().expect("spawn worker")
            })
            .collect(),
    );
    let pids: Vec<u32> = ranks.0.iter().map(|c| c.id()).collect();
    wait_ready(&dir, &mut ranks);
    // a few ops in, mid-transfer (an op takes tens of ms)
    std::thread::sleep(Duration::from_millis(150));
    let ns = hosts.name(1);
    let ip = |state: &str| {
        let st = Command::new("ip")
            .args(["-n", &ns, "link", "set", HOST_IFNAME, state])
            .status()
            .expect("run ip");
        assert!(st.success(), "{what}: ip link set {state} failed");
    };
    ip("down");
    std::thread::sleep(flap);
    ip("up");
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(format!("{dir}/stop"), b"").unwrap();
    let outs = crate::stdout_of_all(&mut ranks.0, Duration::from_secs(45), what);
    let lines = outs
        .iter()
        .enumerate()
        .map(|(r, out)| {
            json_lines(out, "FLAP ")
                .pop()
                .unwrap_or_else(|| panic!("{what}: rank {r} printed no result: {out}"))
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    FlapTrial { lines, pids }
}
