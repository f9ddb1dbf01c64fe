//! The performance sweep behind `hccl-test`.

use crate::check::{expected_value, input_value, CheckElem};
use clap::{Parser, ValueEnum};
use half::{bf16, f16};
use hccl_adapter::{CommConfig, DataType, DeviceBuffer, HcclComm, HcclError, ReduceOp, Result};
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// hccl_test's table.
    Text,
    /// One JSON object per size.
    Json,
}

/// Command-line arguments (hccl_test's flags).
#[derive(Clone, Debug, Parser)]
#[command(
    name = "hccl-test",
    about = "Collective performance test (hccl_test-compatible flags and output)"
)]
pub struct PerfArgs {
    /// The collective: all_reduce.
    pub op_name: String,
    /// Ranks (threads of this process).
    #[arg(short = 'p', long = "npus", default_value_t = 8)]
    pub npus: u32,
    /// Smallest message size (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub minbytes: u64,
    /// Largest message size (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub maxbytes: u64,
    /// Additive step between sizes (used when no step factor is given).
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size)]
    pub stepbytes: Option<u64>,
    /// Multiplicative step between sizes.
    #[arg(short = 'f', long = "stepfactor")]
    pub stepfactor: Option<u64>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Untimed warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 10)]
    pub warmup_iters: u32,
    /// Reduction: sum, prod, max, min.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Data type: int8, int16, int32, int64, uint8, uint16, uint32, uint64, fp16, bf16, fp32, fp64.
    #[arg(short = 'd', long = "datatype", default_value = "fp32")]
    pub datatype: String,
    /// Root rank (rooted collectives).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Check results: 1 = yes, 0 = no.
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Output format.
    #[arg(long = "format", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// How the rank threads talk: `inproc` (shared address space) or `tcp`
    /// (loopback sockets, as ranks in different processes would).
    #[arg(long = "transport", default_value = "inproc", value_parser = ["inproc", "tcp"])]
    pub transport: String,
    /// Also measure single-thread memcpy bandwidth at the largest size and
    /// print the best bus bandwidth as a ratio of it (a same-run baseline).
    #[arg(long = "baseline")]
    pub baseline: bool,
}

/// Parses `8`, `64K`, `16M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 8, 64K, 16M, 1G)"))
}

/// The collectives hccl-test can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfOp {
    /// AllReduce.
    AllReduce,
}

impl PerfOp {
    /// Parses hccl_test's op names.
    pub fn parse(name: &str) -> Result<PerfOp> {
        match name.to_ascii_lowercase().replace('-', "_").as_str() {
            "all_reduce" | "allreduce" | "all_reduce_test" => Ok(PerfOp::AllReduce),
            other => Err(HcclError::not_support(format!(
                "collective '{other}' is not available in hccl-test yet (available: all_reduce)"
            ))),
        }
    }

    /// Name printed in results.
    pub fn name(self) -> &'static str {
        match self {
            PerfOp::AllReduce => "all_reduce",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `p` ranks.
    pub fn bus_factor(self, p: u32) -> f64 {
        let p = p as f64;
        match self {
            PerfOp::AllReduce => 2.0 * (p - 1.0) / p,
        }
    }
}

/// The sizes the sweep visits, in bytes (multiples of the element size).
pub fn sizes(args: &PerfArgs, elem: u64) -> Result<Vec<u64>> {
    if args.minbytes > args.maxbytes {
        return Err(HcclError::para(format!(
            "minbytes {} is larger than maxbytes {}",
            args.minbytes, args.maxbytes
        )));
    }
    let mut out = Vec::new();
    let mut b = args.minbytes;
    loop {
        let rounded = b / elem * elem;
        if out.last() != Some(&rounded) {
            out.push(rounded);
        }
        let next = match (args.stepfactor, args.stepbytes) {
            (Some(f), _) if f >= 2 => b.saturating_mul(f),
            (Some(f), _) => {
                return Err(HcclError::para(format!(
                    "stepfactor must be at least 2 (got {f})"
                )))
            }
            (None, Some(s)) if s > 0 => b.saturating_add(s),
            (None, Some(_)) => return Err(HcclError::para("stepbytes must be positive")),
            (None, None) => b.saturating_mul(2),
        };
        if next > args.maxbytes || next == b {
            break;
        }
        b = next.max(1);
    }
    Ok(out)
}

/// One row of results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// Collective name.
    pub op: String,
    /// Ranks.
    pub ranks: u32,
    /// Message size, bytes.
    pub bytes: u64,
    /// Elements.
    pub count: u64,
    /// Data type name.
    pub dtype: String,
    /// Average time per op, µs (slowest rank).
    pub time_us: f64,
    /// bytes / time.
    pub algbw_gbps: f64,
    /// algbw × bus factor.
    pub busbw_gbps: f64,
    /// `success`, `failed` or `NULL` (not checked).
    pub check: String,
    /// The executor that ran.
    pub algorithm: String,
}

/// Runs the sweep and writes the results to `out`.
pub fn run_sweep(args: &PerfArgs, out: &mut dyn Write) -> Result<()> {
    let op = PerfOp::parse(&args.op_name)?;
    let dtype = DataType::from_name(&args.datatype)?;
    let rop = ReduceOp::from_name(&args.op)?;
    if args.npus == 0 {
        return Err(HcclError::para("-p/--npus must be at least 1"));
    }
    if args.iters == 0 {
        return Err(HcclError::para("-n/--iters must be at least 1"));
    }
    let sizes = sizes(args, dtype.size() as u64)?;
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    if args.format == Format::Text {
        writeln!(
            out,
            "the minbytes is {}, maxbytes is {}, iters is {}, warmup_iters is {}",
            args.minbytes, args.maxbytes, args.iters, args.warmup_iters
        )
        .map_err(io)?;
        writeln!(
            out,
            "{:>18} | {:>16} | {:>22} | {:>14} | {:>20}",
            "data_size(Bytes):",
            "aveg_time(us):",
            "alg_bandwidth(GB/s):",
            "check_result:",
            "bus_bandwidth(GB/s):"
        )
        .map_err(io)?;
    }
    let config = CommConfig::from_env()?;
    let comms = Arc::new(if args.transport == "tcp" {
        let root = hccl_framework_root(&config)?;
        let handles: Vec<_> = (0..args.npus)
            .map(|r| {
                let (root, config, n) = (root.clone(), config.clone(), args.npus);
                std::thread::spawn(move || HcclComm::init_root_info_with(n, &root, r, config))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| HcclError::internal("a rank thread panicked"))?
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        HcclComm::init_all_with(args.npus, config)?
    });
    let mut all_ok = true;
    let mut best_busbw: f64 = 0.0;
    for bytes in sizes {
        let row = match dtype {
            DataType::Int8 => measure::<i8>(args, op, rop, &comms, bytes),
            DataType::Int16 => measure::<i16>(args, op, rop, &comms, bytes),
            DataType::Int32 => measure::<i32>(args, op, rop, &comms, bytes),
            DataType::Int64 => measure::<i64>(args, op, rop, &comms, bytes),
            DataType::Uint8 => measure::<u8>(args, op, rop, &comms, bytes),
            DataType::Uint16 => measure::<u16>(args, op, rop, &comms, bytes),
            DataType::Uint32 => measure::<u32>(args, op, rop, &comms, bytes),
            DataType::Uint64 => measure::<u64>(args, op, rop, &comms, bytes),
            DataType::Fp16 => measure::<f16>(args, op, rop, &comms, bytes),
            DataType::Bf16 => measure::<bf16>(args, op, rop, &comms, bytes),
            DataType::Fp32 => measure::<f32>(args, op, rop, &comms, bytes),
            DataType::Fp64 => measure::<f64>(args, op, rop, &comms, bytes),
        }?;
        all_ok &= row.check != "failed";
        best_busbw = best_busbw.max(row.busbw_gbps);
        match args.format {
            Format::Text => writeln!(
                out,
                "{:>18} | {:>16.2} | {:>22.6} | {:>14} | {:>20.6}",
                row.bytes, row.time_us, row.algbw_gbps, row.check, row.busbw_gbps
            ),
            Format::Json => writeln!(
                out,
                "{}",
                serde_json::to_string(&row).map_err(|e| HcclError::internal(e.to_string()))?
            ),
        }
        .map_err(io)?;
        out.flush().map_err(io)?;
    }
    if args.baseline {
        let memcpy = memcpy_gbps(args.maxbytes.max(1) as usize);
        let ratio = if memcpy > 0.0 {
            best_busbw / memcpy
        } else {
            0.0
        };
        match args.format {
            Format::Text => writeln!(
                out,
                "baseline: memcpy of {} bytes (1 thread) {memcpy:.3} GB/s; best bus bandwidth {best_busbw:.6} GB/s = {ratio:.6}x memcpy",
                args.maxbytes
            ),
            Format::Json => writeln!(
                out,
                "{{\"baseline\":\"memcpy\",\"bytes\":{},\"memcpy_gbps\":{memcpy:.6},\"best_busbw_gbps\":{best_busbw:.6},\"ratio\":{ratio:.6}}}",
                args.maxbytes
            ),
        }
        .map_err(io)?;
    }
    if all_ok {
        Ok(())
    } else {
        Err(HcclError::internal(
            "result check failed for at least one size",
        ))
    }
}

fn measure<T: CheckElem>(
    args: &PerfArgs,
    op: PerfOp,
    rop: ReduceOp,
    comms: &Arc<Vec<HcclComm>>,
    bytes: u64,
) -> Result<Row> {
    let p = args.npus;
    let count = (bytes / std::mem::size_of::<T>() as u64) as usize;
    let barrier = Barrier::new(p as usize);
    let results: Vec<Result<(f64, bool)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p)
            .map(|rank| {
                let (comms, barrier) = (&comms, &barrier);
                s.spawn(move || rank_run::<T>(args, op, rop, &comms[rank as usize], count, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(HcclError::internal("a rank thread panicked")))
            })
            .collect()
    });
    let mut time_us: f64 = 0.0;
    let mut ok = true;
    for r in results {
        let (t, good) = r?;
        time_us = time_us.max(t);
        ok &= good;
    }
    let algbw = if time_us > 0.0 {
        bytes as f64 / time_us / 1e3
    } else {
        0.0
    };
    Ok(Row {
        op: op.name().into(),
        ranks: p,
        bytes,
        count: count as u64,
        dtype: T::DTYPE.name().into(),
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * op.bus_factor(p),
        check: if args.check == 0 {
            "NULL".into()
        } else if ok {
            "success".into()
        } else {
            "failed".into()
        },
        algorithm: comms[0].communicator().last_executor().unwrap_or_default(),
    })
}

fn hccl_framework_root(config: &CommConfig) -> Result<hccl_adapter::RootInfo> {
    let mut c = config.clone();
    if c.if_ip.is_none() && c.socket_ifname.is_none() {
        c.if_ip = Some("127.0.0.1".into());
    }
    HcclComm::get_root_info_with(&c)
}

/// Best-of-5 single-thread memcpy bandwidth for `bytes`, GB/s.
pub fn memcpy_gbps(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e9
}

/// One rank's part: warm up, time `iters` ops, check the last result.
/// Every rank reaches both barriers even when it fails, so one failing rank
/// cannot leave the others waiting at a barrier (they fail on their own,
/// with a timeout naming the missing peer).
fn rank_run<T: CheckElem>(
    args: &PerfArgs,
    op: PerfOp,
    rop: ReduceOp,
    comm: &HcclComm,
    count: usize,
    barrier: &Barrier,
) -> Result<(f64, bool)> {
    let rank = comm.rank();
    let stream = comm.create_stream();
    let setup = (|| {
        let input: Vec<T> = (0..count).map(|i| input_value::<T>(rop, rank, i)).collect();
        let send = DeviceBuffer::from_slice(&input)?;
        let recv = DeviceBuffer::<T>::alloc(count)?;
        Ok::<_, HcclError>((send, recv))
    })();
    let run = |bufs: &mut (DeviceBuffer<T>, DeviceBuffer<T>), n: u32| -> Result<()> {
        for _ in 0..n {
            match op {
                PerfOp::AllReduce => comm.all_reduce(&bufs.0, &mut bufs.1, rop, &stream)?,
            }
        }
        stream.synchronize()
    };
    let warm = setup.and_then(|mut b| run(&mut b, args.warmup_iters).map(|_| b));
    barrier.wait();
    let start = Instant::now();
    let timed = warm.and_then(|mut b| run(&mut b, args.iters).map(|_| b));
    let elapsed = start.elapsed();
    barrier.wait();
    let (_, recv) = timed?;
    let ok = if args.check != 0 {
        let got = recv.to_vec()?;
        got.iter()
            .enumerate()
            .all(|(i, g)| *g == expected_value::<T>(rop, comm.size(), i))
    } else {
        true
    };
    Ok((elapsed.as_secs_f64() * 1e6 / args.iters as f64, ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> PerfArgs {
        let mut v = vec!["hccl-test", "all_reduce"];
        v.extend_from_slice(extra);
        PerfArgs::parse_from(v)
    }

    #[test]
    fn size_parsing() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn sweep_sizes() {
        let a = args(&["-b", "8", "-e", "64", "-f", "2"]);
        assert_eq!(sizes(&a, 4).unwrap(), vec![8, 16, 32, 64]);
        let a = args(&["-b", "8", "-e", "40", "-i", "16"]);
        assert_eq!(sizes(&a, 4).unwrap(), vec![8, 24, 40]);
        let a = args(&["-b", "64", "-e", "8"]);
        assert!(sizes(&a, 4).is_err());
    }

    #[test]
    fn bus_factors() {
        assert_eq!(PerfOp::AllReduce.bus_factor(4), 1.5);
        assert!(PerfOp::parse("alltoallv").is_err());
    }
}
