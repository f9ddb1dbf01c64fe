//! `hccl-test --calibrate`: measures the cost model's parameters on this
//! machine and writes the tuning file the selector reads.
//!
//! Per level, with two rank processes: α = the time of an 8-byte exchange
//! through the library (`send_recv`, both directions at once, as one
//! algorithm step does); β = the time per byte of ONE flow in one
//! direction, (t(16 MiB) − t(8 B)) / 16 MiB of a one-way transfer (a
//! broadcast from rank 0 to rank 1 forced onto [`ONE_WAY_EXECUTOR`]:
//! direct writes into the receiver's buffer, no chain). An exchange's large
//! message is not used for β: across rate-limited hosts its two directions
//! took twice a one-way transfer, which halved β for the one flow the cost
//! model prices. Level 0 runs over shared memory, level 1 over loopback TCP
//! (`HCCL_RS_TRANSPORT=tcp`), or, with `--netns`, between two network
//! namespace hosts (over their veths and bridge, rate-limited by
//! `--netns-rate` if given: what a job across those hosts will see).
//!
//! With `--netns` it also measures the capacity of one host's link that
//! the flows leaving it share (`host_gbps`): three namespace hosts of one
//! rank each (same rate limit), rank 0 broadcasting to the other two at
//! once on the same executor; host_gbps = the 2 × 16 MiB leaving rank 0's
//! host / (t(16 MiB) − t(8 B)). Without `--netns` it stays absent. γ is the
//! fp32-sum reduce throughput of one stream on one core.

use crate::args::PerfArgs;
use hccl_adapter::{
    DataType, Device, DeviceMem, HcclError, LinkTuning, ReduceOp, Result, Stream, Tuning,
    TUNING_VERSION,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Bytes of the large transfer (β, host capacity).
const LARGE: u64 = 16 << 20;

/// The executor of the one-way and fan-out measurements: the root writes
/// the message straight into each receiver's CCL buffer, to every receiver
/// at once, in 1 MiB rounds one after another (`PIPELINE_CHUNK_BYTES`),
/// each copied out by the receiver. At p = 2 that is one flow in one
/// direction: no chain, nothing overlapping it.
const ONE_WAY_EXECUTOR: &str = "BroadcastStarExecutor";

/// A bandwidth clearly above another's: beyond run-to-run spread.
const CLEARLY_ABOVE: f64 = 1.3;

/// How the rank processes of a measurement are placed: the transport
/// (`auto` or `tcp`) and extra hccl-test arguments (e.g. `--netns 2`).
struct Placement {
    transport: &'static str,
    extra: Vec<String>,
}

impl Placement {
    /// One rank on each of `hosts` namespace hosts, links limited to `rate`.
    fn netns(hosts: u32, rate: Option<&str>) -> Placement {
        let mut extra = vec!["--netns".to_owned(), hosts.to_string()];
        if let Some(rate) = rate {
            extra.extend(["--netns-rate".to_owned(), rate.to_owned()]);
        }
        Placement {
            transport: "auto",
            extra,
        }
    }
}

/// What one measurement runs: an hccl-test op on `ranks` rank processes,
/// optionally forced onto an executor.
struct Op {
    name: &'static str,
    ranks: u32,
    algo: Option<&'static str>,
}

/// The exchange step of α: both directions at once.
const EXCHANGE: Op = Op {
    name: "send_recv",
    ranks: 2,
    algo: None,
};

/// One flow, one direction: rank 0 to rank 1.
const ONE_WAY: Op = Op {
    name: "broadcast",
    ranks: 2,
    algo: Some(ONE_WAY_EXECUTOR),
};

/// Rank 0 to ranks 1 and 2 at once (one rank per host: two flows leaving
/// rank 0's host).
const FAN_OUT: Op = Op {
    name: "broadcast",
    ranks: 3,
    algo: Some(ONE_WAY_EXECUTOR),
};

/// Time of one `op` of `bytes` with its rank processes placed as `at`, µs:
/// the fastest of three runs of `iters` ops each.
fn time_us(at: &Placement, op: &Op, bytes: u64, iters: u32) -> Result<f64> {
    let transport = at.transport;
    let exe = std::env::current_exe()
        .map_err(|e| HcclError::from_io("finding the hccl-test binary", e))?;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let size = bytes.to_string();
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            op.name,
            "-p",
            &op.ranks.to_string(),
            "-b",
            &size,
            "-e",
            &size,
        ])
        .args(["-n", &iters.to_string(), "-w", "5", "-c", "0"])
        .args(["--transport", "process", "--format", "json"])
        .args(&at.extra)
        .env("HCCL_RS_TRANSPORT", transport)
        .stdin(std::process::Stdio::null());
        if let Some(algo) = op.algo {
            cmd.args(["--algo", algo]);
        }
        let out = cmd
            .output()
            .map_err(|e| HcclError::from_io("running a calibration measurement", e))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(HcclError::internal(format!(
                "calibration {} over {transport} failed: {}",
                op.name,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let row: serde_json::Value = stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| HcclError::internal(format!("no result row in: {stdout}")))?;
        let t = row["time_us"]
            .as_f64()
            .ok_or_else(|| HcclError::internal(format!("no time_us in {row}")))?;
        best = best.min(t);
    }
    Ok(best)
}

/// Bandwidth, GB/s, of `bytes` more taking `extra_us` longer (never below
/// 1 kB/s: a large transfer measured no slower than a small one).
fn gbps(bytes: f64, extra_us: f64) -> f64 {
    let per_byte = (extra_us / bytes).max(1e-9);
    (1.0 / (per_byte * 1e3)).max(1e-6)
}

/// α from the exchange step, β from one one-way flow.
fn link(at: &Placement) -> Result<LinkTuning> {
    let alpha = time_us(at, &EXCHANGE, 8, 500)?;
    let small = time_us(at, &ONE_WAY, 8, 200)?;
    let large = time_us(at, &ONE_WAY, LARGE, 5)?;
    Ok(LinkTuning {
        alpha_us: alpha.max(1e-3),
        gbps: gbps(LARGE as f64, large - small),
    })
}

/// Capacity of one host's link, GB/s: the bytes leaving rank 0's host
/// while it sends to two other hosts at once, per second.
fn host_capacity(at: &Placement) -> Result<f64> {
    let small = time_us(at, &FAN_OUT, 8, 200)?;
    let large = time_us(at, &FAN_OUT, LARGE, 5)?;
    Ok(gbps(2.0 * LARGE as f64, large - small))
}

/// fp32-sum reduce throughput of one stream, GB/s (bytes reduced into).
fn reduce_gbps() -> Result<f64> {
    let dev = Device::new(0, Default::default());
    let s = Stream::new(&dev);
    let (a, b) = (
        DeviceMem::alloc(LARGE as usize)?,
        DeviceMem::alloc(LARGE as usize)?,
    );
    // touch every page: untouched pages all map the shared zero page,
    // which would make the source look cache-resident
    a.fill_bytes(0)?;
    b.fill_bytes(0x3c)?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        s.reduce_async(&a, &b, DataType::Fp32, ReduceOp::Sum)?;
        s.synchronize()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(LARGE as f64 / best / 1e9)
}

fn target(args: &PerfArgs) -> Result<PathBuf> {
    args.tuning_file
        .clone()
        .or_else(|| std::env::var("HCCL_RS_TUNING_FILE").ok())
        .filter(|p| !p.trim().is_empty())
        .map(PathBuf::from)
        .or_else(Tuning::default_path)
        .ok_or_else(|| {
            HcclError::para("no tuning file path: pass --tuning-file or set HCCL_RS_TUNING_FILE")
        })
}

/// Runs the calibration and writes the tuning file; prints what it measured.
pub(crate) fn run(args: &PerfArgs, out: &mut dyn Write) -> Result<()> {
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    let path = target(args)?;
    writeln!(
        out,
        "calibrating (2 processes per measurement{}; takes a few seconds)",
        if args.netns.is_some() {
            ", 3 for the host link"
        } else {
            ""
        }
    )
    .map_err(io)?;
    writeln!(
        out,
        "alpha: 8-byte send_recv exchange; beta: one-way broadcast rank 0 -> 1 on {ONE_WAY_EXECUTOR}, (t(16 MiB) - t(8 B)) / 16 MiB"
    )
    .map_err(io)?;
    let shm = link(&Placement {
        transport: "auto",
        extra: Vec::new(),
    })?;
    writeln!(
        out,
        "level 0 (shared memory): alpha {:.2} us, {:.3} GB/s one flow, one direction",
        shm.alpha_us, shm.gbps
    )
    .map_err(io)?;
    let rate = args.netns_rate.as_deref();
    let limited = rate
        .map(|r| format!(", links limited to {r}"))
        .unwrap_or_default();
    let (tcp_at, between) = match &args.netns {
        Some(_) => (
            Placement::netns(2, rate),
            format!("TCP between two namespace hosts{limited}"),
        ),
        None => (
            Placement {
                transport: "tcp",
                extra: Vec::new(),
            },
            "TCP, loopback".to_owned(),
        ),
    };
    let tcp = link(&tcp_at)?;
    writeln!(
        out,
        "level 1 ({between}): alpha {:.2} us, {:.3} GB/s one flow, one direction",
        tcp.alpha_us, tcp.gbps
    )
    .map_err(io)?;
    let host_gbps = match &args.netns {
        Some(_) => {
            let h = host_capacity(&Placement::netns(3, rate))?;
            let ratio = h / tcp.gbps;
            let verdict = if ratio > CLEARLY_ABOVE {
                "clearly above one flow's rate: the link is not what limits flows sharing it"
            } else {
                "flows leaving a host share this"
            };
            writeln!(
                out,
                "host link (3 namespace hosts{limited}, one sending to two at once on {ONE_WAY_EXECUTOR}): {h:.3} GB/s leaving the host = {ratio:.2}x one flow ({verdict})"
            )
            .map_err(io)?;
            Some(h)
        }
        None => None,
    };
    let reduce = reduce_gbps()?;
    writeln!(out, "reduce (fp32 sum, one core): {reduce:.3} GB/s").map_err(io)?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let tuning = Tuning {
        version: TUNING_VERSION,
        host,
        measured_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        shm,
        tcp,
        reduce_gbps: reduce,
        host_gbps,
    };
    tuning.save(&path)?;
    writeln!(
        out,
        "wrote {} (communicators read it at creation; HCCL_RS_TUNING_FILE overrides the path)",
        path.display()
    )
    .map_err(io)
}
