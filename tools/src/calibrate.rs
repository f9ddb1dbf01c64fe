//! `hccl-test --calibrate`: measures the cost model's parameters on this
//! machine and writes the tuning file the selector reads.
//!
//! α and β of a level come from two processes exchanging messages through
//! the library (`send_recv`, both directions at once, as one algorithm step
//! does): α = the time of an 8-byte exchange, β = (t(16 MiB) − α) / 16 MiB.
//! Level 0 runs over shared memory, level 1 over loopback TCP
//! (`HCCL_RS_TRANSPORT=tcp`), or, with `--netns`, between two network
//! namespace hosts (over their veths and bridge, rate-limited by
//! `--netns-rate` if given: what a job across those hosts will see); γ is
//! the fp32-sum reduce throughput of one stream on one core.

use crate::args::PerfArgs;
use hccl_adapter::{
    DataType, Device, DeviceMem, HcclError, LinkTuning, ReduceOp, Result, Stream, Tuning,
    TUNING_VERSION,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Bytes of the large exchange (β).
const LARGE: u64 = 16 << 20;

/// How the two processes of a measurement are placed: the transport
/// (`auto` or `tcp`) and extra hccl-test arguments (e.g. `--netns 2`).
struct Placement {
    transport: &'static str,
    extra: Vec<String>,
}

/// Time of one `send_recv` exchange of `bytes` between two rank processes
/// placed as `at`, µs: the fastest of three runs.
fn exchange_us(at: &Placement, bytes: u64, iters: u32) -> Result<f64> {
    let transport = at.transport;
    let exe = std::env::current_exe()
        .map_err(|e| HcclError::from_io("finding the hccl-test binary", e))?;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let size = bytes.to_string();
        let out = std::process::Command::new(&exe)
            .args(["send_recv", "-p", "2", "-b", &size, "-e", &size])
            .args(["-n", &iters.to_string(), "-w", "5", "-c", "0"])
            .args(["--transport", "process", "--format", "json"])
            .args(&at.extra)
            .env("HCCL_RS_TRANSPORT", transport)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| HcclError::from_io("running a calibration exchange", e))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(HcclError::internal(format!(
                "calibration exchange over {transport} failed: {}",
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

fn link(at: &Placement) -> Result<LinkTuning> {
    let alpha = exchange_us(at, 8, 500)?;
    let large = exchange_us(at, LARGE, 5)?;
    // β from the difference; a large exchange never faster than α's share
    let per_byte = ((large - alpha) / LARGE as f64).max(1e-9);
    Ok(LinkTuning {
        alpha_us: alpha.max(1e-3),
        gbps: 1.0 / (per_byte * 1e3),
    })
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
        "calibrating (2 processes per measurement; takes a few seconds)"
    )
    .map_err(io)?;
    let shm = link(&Placement {
        transport: "auto",
        extra: Vec::new(),
    })?;
    writeln!(
        out,
        "level 0 (shared memory): alpha {:.2} us, {:.3} GB/s per direction",
        shm.alpha_us, shm.gbps
    )
    .map_err(io)?;
    let (tcp_at, between) = match &args.netns {
        Some(_) => {
            let mut extra = vec!["--netns".to_owned(), "2".to_owned()];
            if let Some(rate) = &args.netns_rate {
                extra.extend(["--netns-rate".to_owned(), rate.clone()]);
            }
            let what = format!(
                "TCP between two namespace hosts{}",
                args.netns_rate
                    .as_deref()
                    .map(|r| format!(", links limited to {r}"))
                    .unwrap_or_default()
            );
            (
                Placement {
                    transport: "auto",
                    extra,
                },
                what,
            )
        }
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
        "level 1 ({between}): alpha {:.2} us, {:.3} GB/s per direction",
        tcp.alpha_us, tcp.gbps
    )
    .map_err(io)?;
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
    };
    tuning.save(&path)?;
    writeln!(
        out,
        "wrote {} (communicators read it at creation; HCCL_RS_TUNING_FILE overrides the path)",
        path.display()
    )
    .map_err(io)
}
