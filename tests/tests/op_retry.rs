//! Op retry over a flapping link (issue 32, HCCL's `HCCL_OP_RETRY_ENABLE`):
//! rank processes on 2 network namespace hosts loop checked 16 MiB
//! AllReduces (`hccl-mp-worker ... flap`) while the test takes one host's
//! interface down for 300 ms and up again. The link timeout is 100 ms
//! (`HCCL_RS_TCP_LINK_TIMEOUT_MS`), so the flap drops the links between
//! the hosts. With retry on, every op completes with the right sum and
//! the communicator was rebuilt; with retry off, the ops fail with an
//! error naming the dropped link, and nothing hangs.
//!
//! Needs root and iproute2, as the namespace tests (`netns.rs`):
//! without them each test fails saying so, unless `HCCL_RS_SKIP_NETNS=1`.

use hccl_tests::{netns_or_skip, segments_of, Ranks};
use hccl_tools::netns::{NetnsHosts, HOST_IFNAME};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");

/// What one flap trial saw: each rank's `FLAP` line, by rank.
struct Trial {
    lines: Vec<serde_json::Value>,
    pids: Vec<u32>,
}

/// `per_host` ranks on each of 2 namespace hosts loop AllReduces of
/// `bytes`; `flap` after every rank is in its loop, host 1's interface
/// goes down for that long; the ranks stop soon after. `env`: the op
/// retry settings.
fn flap_trial(what: &str, per_host: u32, flap: Duration, env: &[(&str, &str)]) -> Trial {
    let tag = format!("fr{}", std::process::id());
    let hosts = NetnsHosts::up(&tag, 2, None).unwrap();
    let dir = std::env::temp_dir().join(format!("hccl-flap-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let n = 2 * per_host;
    let mut ranks = Ranks(
        (0..n)
            .map(|r| {
                let h = r / per_host;
                let mut cmd = hosts.command(h, WORKER);
                cmd.args(["root_info", &r.to_string(), &n.to_string(), &d, "flap"]);
                for v in [
                    "RANK",
                    "WORLD_SIZE",
                    "HCCL_RS_EXECUTOR",
                    "HCCL_RS_HOST_ID",
                    "HCCL_RS_TRANSPORT",
                    "HCCL_ALGO",
                    "HCCL_SOCKET_IFNAME",
                    "HCCL_OP_RETRY_ENABLE",
                    "HCCL_OP_RETRY_PARAMS",
                ] {
                    cmd.env_remove(v);
                }
                cmd.env("HCCL_IF_IP", hosts.addr(h).to_string())
                    .env("HCCL_EXEC_TIMEOUT", "20")
                    .env("HCCL_CONNECT_TIMEOUT", "20")
                    .env("HCCL_RS_TCP_LINK_TIMEOUT_MS", "100")
                    .envs(env.iter().copied())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                cmd.spawn().expect("spawn worker")
            })
            .collect(),
    );
    let pids: Vec<u32> = ranks.0.iter().map(|c| c.id()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..n).any(|r| !dir.join(format!("ready.{r}")).exists()) {
        for (r, c) in ranks.0.iter_mut().enumerate() {
            if let Ok(Some(st)) = c.try_wait() {
                panic!("{what}: rank {r} ended before its loop ran: {st}");
            }
        }
        assert!(Instant::now() < deadline, "{what}: ranks never all started");
        std::thread::sleep(Duration::from_millis(10));
    }
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
    std::fs::write(dir.join("stop"), b"").unwrap();
    let outs = hccl_tests::stdout_of_all(&mut ranks.0, Duration::from_secs(45), what);
    let lines = outs
        .iter()
        .enumerate()
        .map(|(r, out)| {
            let l = out
                .lines()
                .find_map(|l| l.strip_prefix("FLAP "))
                .unwrap_or_else(|| panic!("{what}: rank {r} printed no result: {out}"));
            serde_json::from_str(l).expect("JSON")
        })
        .collect();
    hosts.down().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Trial { lines, pids }
}

/// Retry on (`L1:1`, no hold): the flap drops the links between the hosts
/// mid-op, every rank takes part in the retry (the ones inside a host too,
/// whose own links never failed), and every op of every rank completes
/// with the right sum.
#[test]
fn with_retry_on_every_op_completes_across_a_300ms_link_flap() {
    let what = "op retry across a link flap";
    if !netns_or_skip(what) {
        return;
    }
    let t = flap_trial(
        what,
        2,
        Duration::from_millis(300),
        &[
            ("HCCL_OP_RETRY_ENABLE", "L0:0,L1:1"),
            (
                "HCCL_OP_RETRY_PARAMS",
                "MaxCnt:3,HoldTime:0,IntervalTime:100",
            ),
        ],
    );
    for (r, l) in t.lines.iter().enumerate() {
        println!("{what}: rank {r}: {l}");
        assert!(
            l.get("code").is_none(),
            "{what}: rank {r} failed: {}",
            l["message"]
        );
        assert!(l["ops"].as_u64().unwrap() >= 2, "{what}: rank {r}: {l}");
        // the flap must have dropped the links: else this tested nothing
        assert!(
            l["recoveries"].as_u64().unwrap() >= 1,
            "{what}: rank {r} never retried (did the flap cut the traffic?): {l}"
        );
    }
    assert!(segments_of(&t.pids).is_empty(), "{what}: segments left");
}

/// Retry off: the ranks on the dropped link fail with an error naming
/// it, and every rank ends (none waits out the exec timeout).
#[test]
fn with_retry_off_the_error_names_the_dropped_link() {
    let what = "a link flap without op retry";
    if !netns_or_skip(what) {
        return;
    }
    let started = Instant::now();
    let t = flap_trial(what, 1, Duration::from_millis(300), &[]);
    for (r, l) in t.lines.iter().enumerate() {
        println!("{what}: rank {r}: {l}");
        let msg = l["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: rank {r} did not fail: {l}"));
        assert!(
            msg.contains("the TCP link between rank 0 and rank 1")
                || msg.contains("the TCP link between rank 1 and rank 0"),
            "{what}: rank {r} must name the dropped link: {msg}"
        );
        assert!(
            msg.contains("dropped") && msg.contains("HCCL_RS_TCP_LINK_TIMEOUT_MS"),
            "{what}: rank {r} must name the dropped link: {msg}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{what}: took {:?}",
        started.elapsed()
    );
    assert!(segments_of(&t.pids).is_empty(), "{what}: segments left");
}
