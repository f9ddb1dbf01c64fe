//! Issue 32's performance bar, measured over many trials:
//! `cargo bench -p hccl-tests --bench fault_bar -- [TRIALS] [ITEMS]`
//! (default 20 trials; ITEMS a comma list of `kill`, `kill-hosts`,
//! `flap-on`, `flap-off`, default all; the namespace items need root).
//!
//! - `kill`: 8 rank processes loop 1 MiB AllReduces; one is killed
//!   (`kill -9`); every survivor shrinks by agreement (not told who
//!   died) and runs a checked AllReduce on the shrunk communicator. Time:
//!   from the kill to the last survivor's correct op. Then the shrunk
//!   communicator grows back to 8 with a fresh process. Time: from the new
//!   process's start to its first correct AllReduce on the grown one.
//! - `kill-hosts`: the same with 2 namespace hosts × 4 ranks (the victim
//!   and its replacement on host 1).
//! - `flap-on` / `flap-off`: 2 namespace hosts loop checked 16 MiB
//!   AllReduces while host 1's interface goes down for 300 ms (link
//!   timeout 100 ms). On: op retry `L1:1` (2 × 2 ranks); a trial passes
//!   when every op of every rank completed with the right sum after a
//!   retry; time: the slowest op (the one retried). Off (1 + 1 ranks): a
//!   trial passes when every rank's error names the dropped link; time:
//!   none.
//!
//! Prints each trial, then per item: passed/trials and min / median / max
//! of the times, with the CPU model.

use hccl_tests::drill::{drill_env, flap_trial, json_lines, tempdir, unix_ns, wait_ready};
use hccl_tests::{segments_of, Ranks};
use hccl_tools::netns::NetnsHosts;
use std::process::{Child, Command};
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_hccl-mp-worker");
const RANKS: u32 = 8;
const VICTIM: u32 = 5;

/// Where rank processes run: this host, or namespace hosts (`per_host`
/// ranks on each).
enum Place<'a> {
    Local,
    Hosts(&'a NetnsHosts, u32),
}

impl Place<'_> {
    fn command(&self, rank: u32) -> Command {
        match self {
            Place::Local => Command::new(WORKER),
            Place::Hosts(h, per) => h.command(rank / per, WORKER),
        }
    }

    fn ip(&self, rank: u32) -> String {
        match self {
            Place::Local => "127.0.0.1".into(),
            Place::Hosts(h, per) => h.addr(rank / per).to_string(),
        }
    }
}

fn spawn(place: &Place<'_>, args: [&str; 5], env: &[(&str, String)]) -> Child {
    let mut cmd = place.command(args[1].parse().unwrap());
    cmd.args(args);
    drill_env(&mut cmd, "allreduce", 1 << 20, env);
    cmd.env("HCCL_IF_IP", place.ip(args[1].parse().unwrap()));
    cmd.spawn().expect("spawn worker")
}

/// One kill + shrink + grow trial: (kill → every survivor's checked op,
/// new process start → its checked op on the grown communicator).
fn kill_trial(place: &Place<'_>) -> Result<(Duration, Duration), String> {
    let dir = tempdir("bar");
    let env = [
        ("DRILL_SHRINK", "agree".to_string()),
        ("DRILL_GROW", "1".to_string()),
    ];
    let n = RANKS.to_string();
    let mut ranks = Ranks(
        (0..RANKS)
            .map(|r| {
                spawn(
                    place,
                    ["root_info", &r.to_string(), &n, &dir, "drill"],
                    &env,
                )
            })
            .collect(),
    );
    let mut pids: Vec<u32> = ranks.0.iter().map(Child::id).collect();
    wait_ready(&dir, &mut ranks);
    std::thread::sleep(Duration::from_millis(50));
    let t_kill = unix_ns();
    ranks.0[VICTIM as usize].kill().unwrap();
    let id = format!("{dir}/grow.bin");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::path::Path::new(&id).exists() {
        if std::time::Instant::now() > deadline {
            return Err("no grow id written".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let t_spawn = unix_ns();
    // the survivors keep their order as ranks 0..7; the new process
    // takes the last rank of the grown communicator
    let last = (RANKS - 1).to_string();
    let fresh = spawn(place, ["grow", &last, &n, &dir, "grown"], &[]);
    pids.push(fresh.id());
    ranks.0[VICTIM as usize] = fresh;
    let outs = hccl_tests::stdout_of_all(&mut ranks.0, Duration::from_secs(40), "fault bar");
    let since = |l: &serde_json::Value, t0: u128| {
        Duration::from_nanos((l["t_ns"].as_u64().unwrap_or(0) as u128).saturating_sub(t0) as u64)
    };
    let mut shrink = Duration::ZERO;
    let mut grow = Duration::ZERO;
    for (r, out) in outs.iter().enumerate() {
        let lines = json_lines(out, "DRILL ");
        if r as u32 != VICTIM {
            let s = lines
                .iter()
                .find(|l| l["event"] == "shrunk")
                .ok_or_else(|| format!("rank {r} did not shrink: {out}"))?;
            if s["new_size"] != RANKS - 1 {
                return Err(format!("rank {r}: shrunk to {}", s["new_size"]));
            }
            shrink = shrink.max(since(s, t_kill));
        }
        let g = lines
            .iter()
            .find(|l| l["event"] == "grown")
            .ok_or_else(|| format!("rank {r} did not grow: {out}"))?;
        if r as u32 == VICTIM {
            grow = since(g, t_spawn);
        }
    }
    let left = segments_of(&pids);
    let _ = std::fs::remove_dir_all(&dir);
    if !left.is_empty() {
        return Err(format!("segments left: {left:?}"));
    }
    Ok((shrink, grow))
}

/// One flap trial; when it passed with retry on, the slowest op's time
/// and whether a retry ran (a flap that caught no data in flight is
/// ridden out by TCP: every op correct, none retried).
fn flap(hosts: &NetnsHosts, retry: bool) -> Result<Option<(Duration, bool)>, String> {
    let what = if retry { "flap-on" } else { "flap-off" };
    let env: &[(&str, &str)] = if retry {
        &[
            ("HCCL_OP_RETRY_ENABLE", "L0:0,L1:1"),
            (
                "HCCL_OP_RETRY_PARAMS",
                "MaxCnt:3,HoldTime:0,IntervalTime:100",
            ),
        ]
    } else {
        &[]
    };
    let per_host = if retry { 2 } else { 1 };
    let t = flap_trial(
        WORKER,
        hosts,
        per_host,
        Duration::from_millis(300),
        env,
        what,
    );
    if !segments_of(&t.pids).is_empty() {
        return Err("segments left".into());
    }
    if retry {
        let mut slowest: f64 = 0.0;
        let mut retried = false;
        for (r, l) in t.lines.iter().enumerate() {
            if l.get("code").is_some() {
                let all: Vec<String> = t.lines.iter().map(|l| l.to_string()).collect();
                return Err(format!("rank {r} failed; every rank: {}", all.join("\n  ")));
            }
            retried |= l["recoveries"].as_u64() >= Some(1);
            slowest = slowest.max(l["max_ms"].as_f64().unwrap_or(0.0));
        }
        Ok(Some((Duration::from_secs_f64(slowest / 1e3), retried)))
    } else {
        for (r, l) in t.lines.iter().enumerate() {
            let msg = l["message"].as_str().unwrap_or_default();
            if !(msg.contains("the TCP link between rank")
                && (msg.contains("dropped") || msg.contains("reset")))
            {
                return Err(format!("rank {r} did not name the link: {l}"));
            }
        }
        Ok(None)
    }
}

fn summary(name: &str, trials: usize, times: &mut [Duration]) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if times.iter().all(|t| t.is_zero()) {
        // an item that passes or fails without a time (flap-off)
        println!("{name}: {}/{trials} passed", times.len());
        return;
    }
    println!(
        "{name}: {}/{trials} passed; min {:.1} ms, median {:.1} ms, max {:.1} ms",
        times.len(),
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1])
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let trials: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20);
    let items: Vec<String> = args
        .get(1)
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|| {
            ["kill", "kill-hosts", "flap-on", "flap-off"]
                .map(String::from)
                .to_vec()
        });
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    println!(
        "fault bar: {trials} trials per item, CPU {cpu}, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut report = Vec::new();
    for item in &items {
        match item.as_str() {
            "kill" | "kill-hosts" => {
                let hosts = (item == "kill-hosts").then(|| {
                    NetnsHosts::up(&format!("fb{}", std::process::id()), 2, None).unwrap()
                });
                let place = match &hosts {
                    Some(h) => Place::Hosts(h, RANKS / 2),
                    None => Place::Local,
                };
                let (mut shrinks, mut grows) = (Vec::new(), Vec::new());
                for t in 0..trials {
                    match kill_trial(&place) {
                        Ok((s, g)) => {
                            println!("{item} trial {t}: shrunk and checked {:.1} ms after the kill; grown and checked {:.1} ms after the new process started", s.as_secs_f64() * 1e3, g.as_secs_f64() * 1e3);
                            shrinks.push(s);
                            grows.push(g);
                        }
                        Err(e) => println!("{item} trial {t}: FAILED: {e}"),
                    }
                }
                if let Some(h) = hosts {
                    h.down().unwrap();
                }
                report.push((format!("{item}: kill -9 of 1 of {RANKS} -> every survivor's checked op on the shrunk communicator"), shrinks));
                report.push((
                    format!(
                        "{item}: new process start -> its checked op on the grown communicator"
                    ),
                    grows,
                ));
            }
            "flap-on" | "flap-off" => {
                let hosts = NetnsHosts::up(&format!("fb{}", std::process::id()), 2, None).unwrap();
                let mut times = Vec::new();
                let mut retried = 0;
                for t in 0..trials {
                    match flap(&hosts, item == "flap-on") {
                        Ok(d) => {
                            retried += usize::from(d.is_some_and(|d| d.1));
                            let d = d.map(|d| d.0);
                            println!(
                                "{item} trial {t}: passed{}",
                                d.map_or(String::new(), |d| format!(
                                    ", slowest op {:.1} ms",
                                    d.as_secs_f64() * 1e3
                                ))
                            );
                            times.push(d.unwrap_or_default());
                        }
                        Err(e) => println!("{item} trial {t}: FAILED: {e}"),
                    }
                }
                hosts.down().unwrap();
                report.push((
                    format!(
                        "{item}: 300 ms flap of a host's interface during 16 MiB AllReduces{}",
                        if item == "flap-on" {
                            format!(
                                " (every op checked; {retried} trials needed a retry, the others' flap caught no data in flight; slowest op)"
                            )
                        } else {
                            " (every rank's error names the dropped link)".to_owned()
                        }
                    ),
                    times,
                ));
            }
            other => panic!("unknown item {other}: kill, kill-hosts, flap-on, flap-off"),
        }
    }
    println!();
    for (name, mut times) in report {
        summary(&name, trials, &mut times);
    }
}
