//! The performance sweep behind `hccl-test`.

use crate::check::{expected_value, input_value, CheckElem};
use half::{bf16, f16};
use hccl_adapter::{
    CommConfig, DataType, DeviceMem, HcclComm, HcclError, ReduceOp, Result, SendRecvItem,
    SendRecvKind,
};
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use std::time::Instant;

use crate::args::{Format, PerfArgs};
use crate::netns::{self, Layout, NetnsHosts};

/// The registered executor names, sorted (`--list-executors`).
pub(crate) fn executor_names() -> Vec<String> {
    hccl_algorithm::registry().names()
}

/// The collectives hccl-test can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PerfOp {
    /// AllReduce.
    AllReduce,
    /// AllGather (size = gathered output).
    AllGather,
    /// ReduceScatter (size = input).
    ReduceScatter,
    /// Broadcast.
    Broadcast,
    /// Reduce.
    Reduce,
    /// Scatter (size = root's input).
    Scatter,
    /// AllToAll (size = each rank's input).
    AllToAll,
    /// Gather (size = root's output).
    Gather,
    /// AllGatherV with equal counts (size = gathered output).
    AllGatherV,
    /// ReduceScatterV with equal counts (size = input).
    ReduceScatterV,
    /// AllToAllV with equal counts (size = each rank's input).
    AllToAllV,
    /// Every rank sends to the next and receives from the previous rank in
    /// one batch (size = each message).
    SendRecv,
    /// Barrier (no data; one row).
    Barrier,
}

impl PerfOp {
    /// Every op, in hccl_test's order.
    pub(crate) const ALL: [PerfOp; 13] = [
        PerfOp::AllReduce,
        PerfOp::AllGather,
        PerfOp::AllGatherV,
        PerfOp::ReduceScatter,
        PerfOp::ReduceScatterV,
        PerfOp::Broadcast,
        PerfOp::Reduce,
        PerfOp::Scatter,
        PerfOp::Gather,
        PerfOp::AllToAll,
        PerfOp::AllToAllV,
        PerfOp::SendRecv,
        PerfOp::Barrier,
    ];

    /// Parses hccl_test's op names (`all_reduce`, `all_reduce_test`, `allreduce`).
    pub(crate) fn parse(name: &str) -> Result<PerfOp> {
        let n = name.to_ascii_lowercase().replace('-', "_");
        let n = n.trim_end_matches("_test").replace('_', "");
        PerfOp::ALL
            .iter()
            .copied()
            .find(|o| o.name().replace('_', "") == n)
            .ok_or_else(|| {
                let names: Vec<_> = PerfOp::ALL.iter().map(|o| o.name()).collect();
                HcclError::not_support(format!(
                    "collective '{name}' is not available in hccl-test (available: {})",
                    names.join(", ")
                ))
            })
    }

    /// Whether the op reduces (and so needs a reducible data type).
    pub(crate) fn reduces(self) -> bool {
        matches!(
            self,
            PerfOp::AllReduce | PerfOp::ReduceScatter | PerfOp::Reduce | PerfOp::ReduceScatterV
        )
    }

    /// Name printed in results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PerfOp::AllReduce => "all_reduce",
            PerfOp::AllGather => "all_gather",
            PerfOp::ReduceScatter => "reduce_scatter",
            PerfOp::Broadcast => "broadcast",
            PerfOp::Reduce => "reduce",
            PerfOp::Scatter => "scatter",
            PerfOp::AllToAll => "alltoall",
            PerfOp::Gather => "gather",
            PerfOp::AllGatherV => "all_gatherv",
            PerfOp::ReduceScatterV => "reduce_scatterv",
            PerfOp::AllToAllV => "alltoallv",
            PerfOp::SendRecv => "send_recv",
            PerfOp::Barrier => "barrier",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `p` ranks.
    pub(crate) fn bus_factor(self, p: u32) -> f64 {
        let p = p as f64;
        match self {
            PerfOp::AllReduce => 2.0 * (p - 1.0) / p,
            PerfOp::Broadcast | PerfOp::Reduce | PerfOp::SendRecv => 1.0,
            PerfOp::Barrier => 0.0,
            _ => (p - 1.0) / p,
        }
    }

    /// Whether the size counts all ranks' blocks (so it is split p ways).
    pub(crate) fn split(self) -> bool {
        matches!(
            self,
            PerfOp::AllGather
                | PerfOp::ReduceScatter
                | PerfOp::Scatter
                | PerfOp::AllToAll
                | PerfOp::Gather
                | PerfOp::AllGatherV
                | PerfOp::ReduceScatterV
                | PerfOp::AllToAllV
        )
    }
}

/// The sizes the sweep visits, in bytes (multiples of the element size).
pub(crate) fn sizes(args: &PerfArgs, elem: u64) -> Result<Vec<u64>> {
    if args.minbytes > args.maxbytes {
        return Err(HcclError::para(format!(
            "minbytes {} is larger than maxbytes {}",
            args.minbytes, args.maxbytes
        )));
    }
    // hccl_test's steps: -f (a factor above 1.0) wins over -i; without
    // either, a tenth of the range; -i 0 (or an empty range) visits
    // minbytes only
    enum Step {
        Factor(f64),
        Bytes(u64),
    }
    let step = match (args.stepfactor, args.stepbytes) {
        (Some(f), _) if !(f > 1.0 && f.is_finite()) => {
            return Err(HcclError::para(format!(
                "stepfactor must be a number above 1.0 (got {f})"
            )))
        }
        (Some(f), bytes) => {
            if bytes.is_some() {
                tracing::warn!("both -f/--stepfactor and -i/--stepbytes given: -f is used");
            }
            Step::Factor(f)
        }
        (None, Some(s)) => Step::Bytes(s),
        (None, None) => Step::Bytes((args.maxbytes - args.minbytes) / 10),
    };
    let mut out = Vec::new();
    let mut b = args.minbytes;
    loop {
        let rounded = b / elem * elem;
        if out.last() != Some(&rounded) {
            out.push(rounded);
        }
        let next = match step {
            Step::Factor(f) => {
                let n = (b.max(1) as f64 * f).ceil();
                if n >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    (n as u64).max(b + 1)
                }
            }
            Step::Bytes(0) => break,
            Step::Bytes(s) => b.saturating_add(s),
        };
        if next > args.maxbytes || next == b {
            break;
        }
        b = next;
    }
    Ok(out)
}

/// One row of results.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Row {
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
    /// Median of the per-iteration times, µs (see [`Spread`]).
    pub p50_us: f64,
    /// 99th percentile of the per-iteration times, µs.
    pub p99_us: f64,
    /// Slowest iteration, µs.
    pub max_us: f64,
}

/// The spread of one size's per-iteration times, µs.
///
/// The times come from a pass of their own that runs after the timed one
/// (the average): `iters` iterations, each one op followed by a stream
/// synchronize, timed on every rank; an iteration's time is the slowest
/// rank's. The timed pass enqueues its `iters` ops and synchronizes once,
/// so its average is the throughput of back-to-back ops and cannot say
/// which op was slow; this pass can, at the price of one synchronize per op.
/// Percentiles are nearest-rank: p50 is the ⌈n/2⌉-th smallest time, p99
/// the ⌈0.99·n⌉-th (the largest up to 100 iterations).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Spread {
    /// Median, µs.
    pub(crate) p50_us: f64,
    /// 99th percentile, µs.
    pub(crate) p99_us: f64,
    /// Maximum, µs.
    pub(crate) max_us: f64,
}

impl Spread {
    /// The spread of `times_us` (all zero when empty).
    pub(crate) fn of(times_us: &[f64]) -> Spread {
        if times_us.is_empty() {
            return Spread::default();
        }
        let mut v = times_us.to_vec();
        v.sort_by(f64::total_cmp);
        // nearest rank: the smallest value with at least q·n values at or below it
        let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Spread {
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: v[v.len() - 1],
        }
    }
}

/// What one size's run measured, over the ranks.
#[derive(Clone, Copy, Debug)]
struct Measured {
    /// Average time per op of the timed pass, µs (slowest rank).
    time_us: f64,
    /// Spread of the per-iteration pass.
    spread: Spread,
    /// Every rank's result checked out (or checking is off).
    ok: bool,
}

/// Per iteration, the slowest of the ranks' times (`per_rank[r][i]`).
fn slowest_per_iteration(per_rank: &[Vec<f64>]) -> Vec<f64> {
    let n = per_rank.iter().map(Vec::len).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            per_rank
                .iter()
                .filter_map(|t| t.get(i).copied())
                .fold(0.0, f64::max)
        })
        .collect()
}

fn header(args: &PerfArgs, out: &mut dyn Write) -> std::io::Result<()> {
    if args.format == Format::Text {
        writeln!(
            out,
            "the minbytes is {}, maxbytes is {}, iters is {}, warmup_iters is {}",
            args.minbytes, args.maxbytes, args.iters, args.warmup_iters
        )?;
        writeln!(
            out,
            "{:>18} | {:>16} | {:>22} | {:>14} | {:>20} | {:>14} | {:>14} | {:>14}",
            "data_size(Bytes):",
            "aveg_time(us):",
            "alg_bandwidth(GB/s):",
            "check_result:",
            "bus_bandwidth(GB/s):",
            "p50_time(us):",
            "p99_time(us):",
            "max_time(us):"
        )?;
    }
    Ok(())
}

fn print_row(args: &PerfArgs, row: &Row, out: &mut dyn Write) -> Result<()> {
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    match args.format {
        Format::Text => writeln!(
            out,
            "{:>18} | {:>16.2} | {:>22.6} | {:>14} | {:>20.6} | {:>14.2} | {:>14.2} | {:>14.2}",
            row.bytes,
            row.time_us,
            row.algbw_gbps,
            row.check,
            row.busbw_gbps,
            row.p50_us,
            row.p99_us,
            row.max_us
        ),
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(row).map_err(|e| HcclError::internal(e.to_string()))?
        ),
    }
    .map_err(io)?;
    out.flush().map_err(io)
}

fn make_row(
    args: &PerfArgs,
    op: PerfOp,
    dtype: DataType,
    bytes: u64,
    m: Measured,
    algorithm: String,
) -> Row {
    let Measured {
        time_us,
        spread,
        ok,
    } = m;
    let algbw = if time_us > 0.0 {
        bytes as f64 / time_us / 1e3
    } else {
        0.0
    };
    Row {
        op: op.name().into(),
        ranks: args.npus,
        bytes,
        count: bytes / dtype.size() as u64,
        dtype: dtype.name().into(),
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * op.bus_factor(args.npus),
        check: if args.check == 0 {
            "NULL".into()
        } else if ok {
            "success".into()
        } else {
            "failed".into()
        },
        algorithm,
        p50_us: spread.p50_us,
        p99_us: spread.p99_us,
        max_us: spread.max_us,
    }
}

macro_rules! by_dtype {
    ($dtype:expr, $f:ident :: <T> ($($arg:expr),*)) => {
        match $dtype {
            DataType::Int8 => $f::<i8>($($arg),*),
            DataType::Int16 => $f::<i16>($($arg),*),
            DataType::Int32 => $f::<i32>($($arg),*),
            DataType::Int64 => $f::<i64>($($arg),*),
            DataType::Uint8 => $f::<u8>($($arg),*),
            DataType::Uint16 => $f::<u16>($($arg),*),
            DataType::Uint32 => $f::<u32>($($arg),*),
            DataType::Uint64 => $f::<u64>($($arg),*),
            DataType::Fp16 => $f::<f16>($($arg),*),
            DataType::Bf16 => $f::<bf16>($($arg),*),
            DataType::Fp32 => $f::<f32>($($arg),*),
            DataType::Fp64 => $f::<f64>($($arg),*),
            DataType::Hif8 => $f::<hccl_adapter::Hif8>($($arg),*),
            DataType::Fp8E4M3 => $f::<hccl_adapter::Fp8E4M3>($($arg),*),
            DataType::Fp8E5M2 => $f::<hccl_adapter::Fp8E5M2>($($arg),*),
            DataType::Fp8E8M0 => $f::<hccl_adapter::Fp8E8M0>($($arg),*),
        }
    };
}

/// Runs the sweep and writes the results to `out`.
pub fn run_sweep(args: &PerfArgs, out: &mut dyn Write) -> Result<()> {
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    if args.list_executors {
        for name in executor_names() {
            writeln!(out, "{name}").map_err(io)?;
        }
        return Ok(());
    }
    if args.calibrate {
        return crate::calibrate::run(args, out);
    }
    if args.fused.is_some() {
        return crate::fused_bench::run(args, out);
    }
    // Under a launcher (mpirun, srun, torchrun) this process is one rank
    // of the launcher's job, whose size -p becomes.
    let launched = if args.transport == "process" && args.worker_rank.is_none() {
        hccl_adapter::launched_as()?
    } else {
        None
    };
    let with_size;
    let args = match &launched {
        Some(l) => {
            if args.netns.is_some() || args.hosts > 1 {
                return Err(HcclError::para(format!(
                    "--netns and --hosts place the ranks hccl-test starts; this process is rank {} of a job {} started (its hosts are the launcher's)",
                    l.rank, l.launcher
                )));
            }
            with_size = PerfArgs {
                npus: l.size,
                ..args.clone()
            };
            &with_size
        }
        None => args,
    };
    let op = PerfOp::parse(args.op_name.as_deref().unwrap_or_default())?;
    if let Some(name) = &args.algo {
        let known = executor_names();
        if !known.contains(name) {
            return Err(HcclError::para(format!(
                "--algo {name}: no such executor (see --list-executors; known: {})",
                known.join(", ")
            )));
        }
    }
    if args.hosts == 0 || args.hosts > args.npus.max(1) {
        return Err(HcclError::para(format!(
            "--hosts {} must be between 1 and the rank count {}",
            args.hosts, args.npus
        )));
    }
    if args.hosts > 1 && args.transport != "process" {
        return Err(HcclError::para(
            "--hosts needs --transport process (hosts are told apart per process)",
        ));
    }
    if let Some(spec) = &args.netns {
        if args.transport != "process" {
            return Err(HcclError::para(
                "--netns needs --transport process (each rank is a process placed in a namespace)",
            ));
        }
        if args.hosts > 1 {
            return Err(HcclError::para(
                "--netns and --hosts both place ranks on hosts: give one",
            ));
        }
        Layout::parse(spec)?.check(args.npus)?;
        if args.worker_rank.is_none() {
            // before the header: a run that cannot start prints only why
            netns::available()?;
        }
    }
    if op == PerfOp::SendRecv && args.npus < 2 {
        return Err(HcclError::para("send_recv needs at least 2 ranks (-p 2)"));
    }
    let dtype = DataType::from_name(&args.datatype)?;
    let rop = ReduceOp::from_name(&args.op)?;
    if op.reduces() && !dtype.is_reducible() {
        let reducible: Vec<&str> = DataType::reducible().map(|d| d.name()).collect();
        return Err(HcclError::not_support(format!(
            "-d {dtype} cannot be used with {}: HCCL moves the FP8 types (hif8, fp8e4m3, \
             fp8e5m2, fp8e8m0) but never reduces them; use them with all_gather, \
             all_gatherv, broadcast, alltoall, alltoallv, scatter, gather or send_recv, or \
             pick a reducible type ({})",
            op.name(),
            reducible.join(", ")
        )));
    }
    if args.npus == 0 {
        return Err(HcclError::para("-p/--npus must be at least 1"));
    }
    if args.iters == 0 {
        return Err(HcclError::para("-n/--iters must be at least 1"));
    }
    if args.root >= args.npus {
        return Err(HcclError::para(format!(
            "-r/--root {} is out of range for {} ranks",
            args.root, args.npus
        )));
    }
    let sizes = if op == PerfOp::Barrier {
        vec![0]
    } else {
        sizes(args, dtype.size() as u64)?
    };
    if let Some(path) = &args.plot {
        // the process that draws checks first: a run that cannot write
        // its plot fails before it measures anything
        let draws = args.worker_rank.is_none() && launched.as_ref().is_none_or(|l| l.rank == 0);
        if draws {
            crate::plot::check_writable(path).map_err(HcclError::open_file)?;
        }
    }
    if args.transport == "process" {
        return match (args.worker_rank, launched) {
            (Some(rank), _) => process_rank(args, op, dtype, rop, rank, &sizes, out),
            (None, Some(l)) => launched_rank(args, op, dtype, rop, l.rank, &sizes, out),
            (None, None) => {
                header(args, out).map_err(io)?;
                out.flush().map_err(io)?;
                launch_processes(args)?;
                baseline(args, None, out)
            }
        };
    }
    header(args, out).map_err(io)?;
    let mut config = CommConfig::from_env()?;
    if args.algo.is_some() {
        config.executor_override = args.algo.clone();
    }
    let comms = Arc::new(if args.transport == "tcp" {
        // every link over TCP, as HCCL_RS_TRANSPORT=tcp: the ranks share
        // a host, and would otherwise map each other's memory (and the
        // selector pick kernels over it), measuring no TCP at all
        config.transport = "tcp".to_owned();
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
    let mut rows = Vec::new();
    for bytes in sizes {
        let m = by_dtype!(dtype, measure_threads::<T>(args, op, rop, &comms, bytes))?;
        let row = make_row(
            args,
            op,
            dtype,
            bytes,
            m,
            comms[0].communicator().last_executor().unwrap_or_default(),
        );
        all_ok &= row.check != "failed";
        best_busbw = best_busbw.max(row.busbw_gbps);
        print_row(args, &row, out)?;
        rows.push(row);
    }
    baseline(args, Some(best_busbw), out)?;
    draw_plot(args, op, &rows, &comms[0])?;
    if all_ok {
        Ok(())
    } else {
        Err(HcclError::internal(
            "result check failed for at least one size",
        ))
    }
}

/// Draws `rows` to the `--plot` file, with the model's prediction for
/// `comm`, the communicator the measured ops ran on (nothing without
/// `--plot`).
fn draw_plot(args: &PerfArgs, op: PerfOp, rows: &[Row], comm: &HcclComm) -> Result<()> {
    let Some(path) = &args.plot else {
        return Ok(());
    };
    let ctx = crate::sweep_plot::ModelContext::of(comm);
    let chart = crate::sweep_plot::sweep_chart(args, op, rows, &ctx);
    crate::plot::write_svg(&chart, path).map_err(HcclError::open_file)
}

/// Prints the memcpy baseline (`--baseline`); `best` is the best bus
/// bandwidth of the sweep when known here.
fn baseline(args: &PerfArgs, best: Option<f64>, out: &mut dyn Write) -> Result<()> {
    if !args.baseline {
        return Ok(());
    }
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    let memcpy = memcpy_gbps(args.maxbytes.max(1) as usize);
    match (args.format, best) {
        (Format::Text, Some(best)) => writeln!(
            out,
            "baseline: memcpy of {} bytes (1 thread) {memcpy:.3} GB/s; best bus bandwidth {best:.6} GB/s = {:.6}x memcpy",
            args.maxbytes,
            if memcpy > 0.0 { best / memcpy } else { 0.0 }
        ),
        (Format::Text, None) => writeln!(out, "baseline: memcpy of {} bytes (1 thread) {memcpy:.3} GB/s", args.maxbytes),
        (Format::Json, _) => writeln!(
            out,
            "{{\"baseline\":\"memcpy\",\"bytes\":{},\"memcpy_gbps\":{memcpy:.6},\"best_busbw_gbps\":{:.6}}}",
            args.maxbytes,
            best.unwrap_or(0.0)
        ),
    }
    .map_err(io)
}

/// Threads as ranks: each rank on its own thread, the slowest one's time
/// (and per iteration of the spread pass, the slowest one's).
fn measure_threads<T: CheckElem>(
    args: &PerfArgs,
    op: PerfOp,
    rop: ReduceOp,
    comms: &Arc<Vec<HcclComm>>,
    bytes: u64,
) -> Result<Measured> {
    let p = args.npus;
    let barrier = Barrier::new(p as usize);
    let results: Vec<Result<RankTimes>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p)
            .map(|rank| {
                let (comms, barrier) = (&comms, &barrier);
                s.spawn(move || {
                    rank_run::<T>(args, op, rop, &comms[rank as usize], bytes, &|| {
                        barrier.wait();
                    })
                })
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
    let mut per_rank = Vec::with_capacity(results.len());
    for r in results {
        let r = r?;
        time_us = time_us.max(r.avg_us);
        ok &= r.ok;
        per_rank.push(r.iter_us);
    }
    Ok(Measured {
        time_us,
        spread: Spread::of(&slowest_per_iteration(&per_rank)),
        ok,
    })
}

/// How long the other ranks may run on after one failed (they normally
/// fail within a second, naming it) before the parent stops them.
const AFTER_FAILURE: Duration = Duration::from_secs(30);

/// Child processes that are killed (and reaped) unless they ended.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// While alive, SIGINT, SIGTERM and SIGHUP set a flag instead of ending
/// the process, so the parent can stop its ranks and remove what it made
/// (namespaces, files); a second signal ends it at once.
struct Interrupts {
    flag: Arc<std::sync::atomic::AtomicBool>,
    ids: Vec<signal_hook::SigId>,
}

impl Interrupts {
    fn catch() -> Interrupts {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut ids = Vec::new();
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            // the shutdown first: it fires only once the flag is set, by
            // an earlier signal
            let r = signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone())
                .and_then(|a| Ok((a, signal_hook::flag::register(sig, flag.clone())?)));
            match r {
                Ok((a, b)) => ids.extend([a, b]),
                Err(e) => tracing::warn!(sig, error = %e, "cannot catch a signal"),
            }
        }
        Interrupts { flag, ids }
    }

    fn raised(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Processes as ranks: the parent spawns one child per rank (with
/// --netns, inside the namespace of its host) and waits for them.
pub(crate) fn launch_processes(args: &PerfArgs) -> Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| HcclError::from_io("finding the hccl-test binary", e))?;
    let layout = args.netns.as_deref().map(Layout::parse).transpose()?;
    let interrupts = Interrupts::catch();
    // Declared before the children: dropped after them, so the ranks are
    // gone before their namespaces are.
    let hosts = match &layout {
        Some(l) => {
            netns::sweep_stale();
            let tag = format!("ht{}", std::process::id());
            Some(NetnsHosts::up(&tag, l.hosts(), args.netns_rate.as_deref())?)
        }
        None => None,
    };
    let dir = TempDir(std::env::temp_dir().join(format!("hccl-test-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)
        .map_err(|e| HcclError::from_io("creating a temporary directory", e))?;
    let root_file = dir.0.join("root.bin");
    let mut forwarded: Vec<String> = std::env::args().skip(1).collect();
    // the parent prints the header and the baseline; children only rows
    forwarded.retain(|a| a != "--baseline");
    // Each namespace host gets CPUs of its own when there are enough (a
    // slice of this process's mask, given by taskset), so ranks pinning
    // themselves inside their host do not all take the first CPU; with
    // fewer CPUs than hosts, the hosts share them and ranks are not pinned
    // (unless HCCL_RS_CPU_AFFINITY says otherwise).
    let slices = match &layout {
        Some(l) if netns::program_path("taskset").is_some() => {
            netns::cpu_slices(&netns::allowed_cpus(), l.hosts())
        }
        _ => None,
    };
    let user_affinity = std::env::var_os("HCCL_RS_CPU_AFFINITY").is_some();
    let mut children = Children(Vec::new());
    for r in 0..args.npus {
        let mut cmd = match (&hosts, &layout) {
            (Some(hosts), Some(layout)) => {
                let h = layout.host_of(r, args.npus);
                let mut c = match &slices {
                    Some(s) => {
                        let list: Vec<String> =
                            s[h as usize].iter().map(usize::to_string).collect();
                        let mut c = hosts.command(h, "taskset");
                        c.arg("-c").arg(list.join(",")).arg(&exe);
                        c
                    }
                    None => {
                        let mut c = hosts.command(h, &exe);
                        if !user_affinity {
                            c.env("HCCL_RS_CPU_AFFINITY", "off");
                        }
                        c
                    }
                };
                // every link and the rendezvous over the host's veth; the
                // namespace is the host identity
                c.env("HCCL_IF_IP", hosts.addr(h).to_string())
                    .env_remove("HCCL_SOCKET_IFNAME")
                    .env_remove("HCCL_RS_HOST_ID");
                c
            }
            _ => std::process::Command::new(&exe),
        };
        cmd.args(&forwarded)
            .arg("--worker-rank")
            .arg(r.to_string())
            .arg("--root-file")
            .arg(&root_file)
            .stdin(std::process::Stdio::null());
        if args.hosts > 1 {
            // consecutive blocks, sizes differing by at most one
            let host = (r as u64 * args.hosts as u64 / args.npus as u64) as u32;
            cmd.env(
                "HCCL_RS_HOST_ID",
                format!("hccl-test-{}-host{host}", std::process::id()),
            );
        }
        if r != 0 {
            cmd.stdout(std::process::Stdio::null());
        }
        children.0.push(
            cmd.spawn()
                .map_err(|e| HcclError::from_io("starting a rank process", e))?,
        );
    }
    let mut failed = Vec::new();
    let mut done = vec![false; children.0.len()];
    let mut first_failure: Option<std::time::Instant> = None;
    while done.contains(&false) {
        for (r, c) in children.0.iter_mut().enumerate() {
            if done[r] {
                continue;
            }
            match c.try_wait() {
                Ok(None) => continue,
                Ok(Some(s)) if s.success() => {}
                Ok(Some(s)) => failed.push(format!("rank {r} exited with {s}")),
                Err(e) => failed.push(format!("rank {r}: {e}")),
            }
            done[r] = true;
            if !failed.is_empty() {
                first_failure.get_or_insert_with(std::time::Instant::now);
            }
        }
        let stop = if interrupts.raised() {
            Some("interrupted: stopped the ranks".to_owned())
        } else {
            first_failure
                .filter(|t| t.elapsed() > AFTER_FAILURE)
                .map(|_| {
                    format!(
                        "stopped the ranks still running {AFTER_FAILURE:?} after the first failure"
                    )
                })
        };
        if let Some(why) = stop {
            if done.contains(&false) {
                failed.push(why);
            }
            break;
        }
        // a poll, not a blocking wait: a signal or one rank's failure must
        // be acted on while the others run
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(children);
    if let Some(hosts) = hosts {
        hosts.down()?;
    }
    if interrupts.raised() && failed.is_empty() {
        failed.push("interrupted".into());
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(HcclError::internal(failed.join("; ")))
    }
}

/// This process is rank `rank` of a launcher's job (mpirun, srun,
/// torchrun): join with `init_from_env`, print the header on rank 0 and run
/// the sweep as a process rank does.
fn launched_rank(
    args: &PerfArgs,
    op: PerfOp,
    dtype: DataType,
    rop: ReduceOp,
    rank: u32,
    sizes: &[u64],
    out: &mut dyn Write,
) -> Result<()> {
    let config = CommConfig::from_env()?;
    let comm = HcclComm::init_from_env()?;
    // With --algo the measured ops run on a communicator of their own (the
    // timing barrier and the result exchange keep the default selection):
    // the same ranks, formed over the links this one has.
    let forced = match &args.algo {
        Some(name) => {
            let mut c = config;
            c.executor_override = Some(name.clone());
            let all: Vec<u32> = (0..comm.size()).collect();
            Some(comm.create_sub_comm_with(&all, 1, rank, c)?)
        }
        None => None,
    };
    if rank == 0 {
        let io = |e: std::io::Error| HcclError::from_io("writing results", e);
        header(args, out).map_err(io)?;
        out.flush().map_err(io)?;
    }
    rank_sweep(
        args,
        op,
        dtype,
        rop,
        rank,
        forced.as_ref().unwrap_or(&comm),
        &comm,
        sizes,
        out,
    )?;
    if rank == 0 {
        baseline(args, None, out)?;
    }
    Ok(())
}

/// One rank process: join through the root file, run the sweep, and let
/// rank 0 print each row with the slowest rank's time.
fn process_rank(
    args: &PerfArgs,
    op: PerfOp,
    dtype: DataType,
    rop: ReduceOp,
    rank: u32,
    sizes: &[u64],
    out: &mut dyn Write,
) -> Result<()> {
    let path = args
        .root_file
        .clone()
        .ok_or_else(|| HcclError::para("--worker-rank needs --root-file"))?;
    let config = CommConfig::from_env()?;
    let join = |path: &str, config: CommConfig| join_at(args, rank, path, config);
    let comm = join(&path, config.clone())?;
    // With --algo every op of `comm` runs the forced executor, so the
    // timing barrier and the result exchange need a communicator of their own.
    let forced;
    let (measured, control) = match &args.algo {
        Some(name) => {
            let mut c = config;
            c.executor_override = Some(name.clone());
            forced = join(&format!("{path}.algo"), c)?;
            (&forced, &comm)
        }
        None => (&comm, &comm),
    };
    let _strays = (args.strays > 0 && rank == 0)
        .then(|| crate::strays::Strays::start(args.strays, comm.communicator().tcp_listeners()));
    rank_sweep(args, op, dtype, rop, rank, measured, control, sizes, out)
}

/// Process rank `rank` joins the run's communicator through the root
/// file at `path` (rank 0 writes it).
fn join_at(args: &PerfArgs, rank: u32, path: &str, config: CommConfig) -> Result<HcclComm> {
    let root = if rank == 0 {
        let root = HcclComm::get_root_info_with(&config)?;
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, root.0)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| HcclError::from_io("writing the root info", e))?;
        root
    } else {
        hccl_adapter::read_root_file(path, config.connect_timeout)?
    };
    HcclComm::init_root_info_with(args.npus, &root, rank, config)
}

/// This process is rank `rank` of a `--transport process` run started by
/// hccl-test: its communicator, joined through `--root-file`.
pub(crate) fn join_process(args: &PerfArgs, rank: u32) -> Result<HcclComm> {
    let path = args
        .root_file
        .clone()
        .ok_or_else(|| HcclError::para("--worker-rank needs --root-file"))?;
    join_at(args, rank, &path, CommConfig::from_env()?)
}

/// A process rank's sweep: `measured` runs the ops, `control` the timing
/// barriers and the max-reduction of every rank's figures; rank 0 prints
/// each row.
#[allow(clippy::too_many_arguments)]
fn rank_sweep(
    args: &PerfArgs,
    op: PerfOp,
    dtype: DataType,
    rop: ReduceOp,
    rank: u32,
    measured: &HcclComm,
    control: &HcclComm,
    sizes: &[u64],
    out: &mut dyn Write,
) -> Result<()> {
    let stream = control.create_stream();
    let barrier = || {
        let _ = control.barrier(&stream).and_then(|_| stream.synchronize());
    };
    // [average, -1 if the check passed else 0, one time per iteration]:
    // one max-reduction gives the slowest rank's average, whether all
    // passed, and per iteration the slowest rank's time
    let n_stats = 2 + args.iters as usize;
    let stats_send = DeviceMem::alloc(n_stats * 8)?;
    let stats_recv = DeviceMem::alloc(n_stats * 8)?;
    let mut all_ok = true;
    let mut rows = Vec::new();
    for &bytes in sizes {
        let r = by_dtype!(
            dtype,
            rank_run::<T>(args, op, rop, measured, bytes, &barrier)
        )?;
        let mut stats = Vec::with_capacity(n_stats);
        stats.extend([r.avg_us, if r.ok { -1.0 } else { 0.0 }]);
        stats.extend(&r.iter_us);
        stats.resize(n_stats, 0.0);
        stats_send.copy_from_host(&stats)?;
        control.all_reduce_raw(
            &stats_send,
            &stats_recv,
            n_stats as u64,
            DataType::Fp64,
            ReduceOp::Max,
            &stream,
        )?;
        stream.synchronize()?;
        let v = stats_recv.to_vec::<f64>(n_stats)?;
        let row = make_row(
            args,
            op,
            dtype,
            bytes,
            Measured {
                time_us: v[0],
                spread: Spread::of(&v[2..]),
                ok: v[1] < 0.0,
            },
            r.executor.clone(),
        );
        all_ok &= row.check != "failed";
        if rank == 0 {
            print_row(args, &row, out)?;
            rows.push(row);
        }
    }
    if rank == 0 {
        draw_plot(args, op, &rows, measured)?;
    }
    std::thread::sleep(Duration::from_millis(1));
    if all_ok {
        Ok(())
    } else {
        Err(HcclError::internal(
            "result check failed for at least one size",
        ))
    }
}

fn hccl_framework_root(config: &CommConfig) -> Result<hccl_adapter::RootInfo> {
    let mut c = config.clone();
    if c.if_ip.is_none() && c.socket_ifname.is_none() {
        c.if_ip = Some("127.0.0.1".into());
    }
    HcclComm::get_root_info_with(&c)
}

/// Best-of-5 single-thread memcpy bandwidth for `bytes`, GB/s.
pub(crate) fn memcpy_gbps(bytes: usize) -> f64 {
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

/// One rank's times for one size.
struct RankTimes {
    /// Average per op of the timed pass, µs.
    avg_us: f64,
    /// Each iteration of the spread pass (op + synchronize), µs.
    iter_us: Vec<f64>,
    /// The result checked out (or checking is off).
    ok: bool,
    /// The executor the measured op ran (read before any barrier on the
    /// same communicator runs one of its own).
    executor: String,
}

/// One rank's part: set up buffers, warm up, time `iters` ops enqueued
/// back to back with one synchronize (the average), then time `iters`
/// iterations of one op and a synchronize each (the spread), and check the
/// result. `sync` is a barrier over the ranks; every rank reaches every
/// barrier even when it fails, so one failing rank cannot leave the others
/// waiting at a barrier (they fail on their own, with a timeout naming it).
fn rank_run<T: CheckElem>(
    args: &PerfArgs,
    op: PerfOp,
    rop: ReduceOp,
    comm: &HcclComm,
    bytes: u64,
    sync: &dyn Fn(),
) -> Result<RankTimes> {
    let (rank, p) = (comm.rank(), comm.size() as usize);
    let root = args.root;
    let total = (bytes / std::mem::size_of::<T>() as u64) as usize;
    let c = if op.split() { total / p } else { total };
    let (send_n, recv_n) = match op {
        PerfOp::AllReduce | PerfOp::Broadcast | PerfOp::Reduce | PerfOp::SendRecv => (c, c),
        PerfOp::AllGather | PerfOp::AllGatherV | PerfOp::Gather => (c, p * c),
        PerfOp::ReduceScatter | PerfOp::ReduceScatterV => (p * c, c),
        PerfOp::Scatter => (p * c, c),
        PerfOp::AllToAll | PerfOp::AllToAllV => (p * c, p * c),
        PerfOp::Barrier => (0, 0),
    };
    // V ops run with equal counts, block q at q·c
    let counts = vec![c as u64; p];
    let displs: Vec<u64> = (0..p as u64).map(|q| q * c as u64).collect();
    let (next, prev) = ((rank + 1) % p as u32, (rank + p as u32 - 1) % p as u32);
    let value = |r: u32, i: usize| input_value::<T>(rop, r, i);
    let reduced = |i: usize| expected_value::<T>(rop, p as u32, i);
    let stream = comm.create_stream();
    let symmetric = args.symmetric != 0;
    let shareable = args.zero_copy != 0 || args.graph || symmetric;
    let setup = (|| {
        let unit = std::mem::size_of::<T>();
        let alloc_bytes = |bytes: usize| {
            if shareable {
                DeviceMem::alloc_shareable(bytes)
            } else {
                DeviceMem::alloc(bytes)
            }
        };
        let alloc = |n: usize| alloc_bytes((n * unit).max(1));
        let input: Vec<T> = (0..send_n).map(|i| value(rank, i)).collect();
        let mut bufs = Vec::with_capacity(args.bucket as usize);
        // --bucket-flat: one allocation per side, sliced
        let flat = if args.bucket_flat && !symmetric {
            let (s, r) = ((send_n * unit).max(1), (recv_n * unit).max(1));
            let k = args.bucket as usize;
            Some(((alloc_bytes(s * k)?, s), (alloc_bytes(r * k)?, r)))
        } else {
            None
        };
        for t in 0..args.bucket as usize {
            let (send, recv) = if let Some(((ws, s), (wr, r))) = &flat {
                (ws.range(t * s, *s)?, wr.range(t * r, *r)?)
            } else if symmetric {
                // one window per pair, the same size on every rank: send
                // then receive, each at a 4 KiB boundary
                let at = (send_n * unit).max(1).next_multiple_of(4096);
                let win = DeviceMem::alloc_shareable(at + (recv_n * unit).max(1))?;
                comm.sym_win_register(&win)?;
                (
                    win.range(0, (send_n * unit).max(1))?,
                    win.range(at, (recv_n * unit).max(1))?,
                )
            } else {
                (alloc(send_n)?, alloc(recv_n)?)
            };
            send.copy_from_host(&input)?;
            // the output too holds real bytes before timing: a fresh
            // mapping's pages would fault (or read the zero page) in the
            // first ops instead of being what every later op sees
            recv.fill_bytes(0x5a)?;
            if args.zero_copy != 0 && !symmetric {
                let domain = comm.device().uid();
                send.register_in(domain)?;
                recv.register_in(domain)?;
            }
            bufs.push((send, recv));
        }
        Ok::<_, HcclError>(bufs)
    })();
    let d = T::DTYPE;
    let issue = |bufs: &[(DeviceMem, DeviceMem)], n: u32| -> Result<()> {
        for (send, recv) in (0..n).flat_map(|_| bufs.iter()) {
            let cc = c as u64;
            match op {
                PerfOp::AllReduce => comm.all_reduce_raw(send, recv, cc, d, rop, &stream)?,
                PerfOp::AllGather => comm.all_gather_raw(send, recv, cc, d, &stream)?,
                PerfOp::ReduceScatter => {
                    comm.reduce_scatter_raw(send, recv, cc, d, rop, &stream)?
                }
                PerfOp::Broadcast => {
                    let buf = if rank == root { send } else { recv };
                    comm.broadcast_raw(buf, cc, d, root, &stream)?
                }
                PerfOp::Reduce => comm.reduce_raw(send, recv, cc, d, rop, root, &stream)?,
                PerfOp::Scatter => comm.scatter_raw(send, recv, cc, d, root, &stream)?,
                PerfOp::AllToAll => comm.all_to_all_raw(send, cc, d, recv, cc, d, &stream)?,
                PerfOp::Gather => comm.gather_raw(send, recv, cc, d, root, &stream)?,
                PerfOp::AllGatherV => {
                    comm.all_gather_v_raw(send, cc, recv, &counts, &displs, d, &stream)?
                }
                PerfOp::ReduceScatterV => {
                    comm.reduce_scatter_v_raw(send, &counts, &displs, recv, cc, d, rop, &stream)?
                }
                PerfOp::AllToAllV => comm.all_to_all_v_raw(
                    send, &counts, &displs, d, recv, &counts, &displs, d, &stream,
                )?,
                PerfOp::SendRecv => {
                    let item = |kind, buf: &DeviceMem, peer| SendRecvItem {
                        kind,
                        buf: buf.clone(),
                        count: cc,
                        dtype: d,
                        peer,
                    };
                    comm.batch_send_recv(
                        &[
                            item(SendRecvKind::Send, send, next),
                            item(SendRecvKind::Recv, recv, prev),
                        ],
                        &stream,
                    )?
                }
                PerfOp::Barrier => comm.barrier(&stream)?,
            }
        }
        Ok(())
    };
    // --graph: the loop of n ops (and the single op) captured once
    let graphs = std::cell::RefCell::new(std::collections::HashMap::new());
    // the executor of the captured ops (a replay skips the framework, so
    // its last executor afterwards is that of a barrier between passes)
    let captured_executor = std::cell::RefCell::new(None::<String>);
    let run = |b: &[(DeviceMem, DeviceMem)], n: u32| -> Result<()> {
        if !args.graph {
            issue(b, n)?;
            return stream.synchronize();
        }
        let mut graphs = graphs.borrow_mut();
        let g = match graphs.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                stream.begin_capture(hccl_adapter::CaptureMode::Global)?;
                let r = issue(b, n);
                let g = stream.end_capture();
                *captured_executor.borrow_mut() = comm.communicator().last_executor();
                r?;
                e.insert(g?)
            }
        };
        g.launch(&stream)?;
        stream.synchronize()
    };
    let warm = setup.and_then(|b| run(&b, args.warmup_iters).map(|_| b));
    // --graph: the timed loop's graph is captured and launched once before
    // the clock starts (its first launch maps the peers' new buffers, a
    // one-time cost that is not the replay's)
    let warm = warm.and_then(|b| {
        if args.graph {
            run(&b, args.iters)?;
            run(&b, 1)?;
        }
        Ok(b)
    });
    // Twice: a rank that parked in the first barrier may leave it a wakeup
    // latency late (milliseconds on a virtual machine); the second one
    // starts every rank awake, so the clock does not time a wakeup.
    sync();
    sync();
    let start = Instant::now();
    let timed = warm.and_then(|b| run(&b, args.iters).map(|_| b));
    let elapsed = start.elapsed();
    // the reported time is the slowest rank's: each rank's own, to see who
    tracing::debug!(
        rank,
        us_per_op = elapsed.as_secs_f64() * 1e6 / args.iters.max(1) as f64,
        "timed loop"
    );
    sync();
    // The spread pass: after the timed one, so the average keeps timing
    // exactly what it did (with -w 0 it includes the first call's set-up);
    // same double barrier, so no rank starts it a wake-up late.
    sync();
    let spread = timed.and_then(|b| {
        let mut iter_us = Vec::with_capacity(args.iters as usize);
        for _ in 0..args.iters {
            let t = Instant::now();
            run(&b, 1)?;
            iter_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok((b, iter_us))
    });
    let executor = match captured_executor.borrow().clone() {
        Some(e) if args.graph => e,
        _ => comm.communicator().last_executor().unwrap_or_default(),
    };
    sync();
    let (bufs, iter_us) = spread?;
    // every pair of a bucket was reduced alike: the last one is checked
    let (send, recv) = bufs
        .last()
        .cloned()
        .unwrap_or_else(|| (DeviceMem::null(), DeviceMem::null()));
    let ok = if args.check == 0 {
        true
    } else {
        let got: Vec<T> = match op {
            PerfOp::Broadcast if rank == root => send.to_vec(c)?,
            PerfOp::Barrier => Vec::new(),
            _ => recv.to_vec(recv_n)?,
        };
        let r = rank as usize;
        got.iter().enumerate().all(|(i, g)| {
            let want = match op {
                PerfOp::AllReduce => reduced(i),
                PerfOp::AllGather | PerfOp::AllGatherV => {
                    value((i / c.max(1)) as u32, i % c.max(1))
                }
                PerfOp::Gather if rank == root => value((i / c.max(1)) as u32, i % c.max(1)),
                PerfOp::Gather => *g,
                PerfOp::ReduceScatter | PerfOp::ReduceScatterV => {
                    expected_value::<T>(rop, p as u32, r * c + i)
                }
                PerfOp::SendRecv => value(prev, i),
                PerfOp::Barrier => *g,
                PerfOp::Broadcast => value(root, i),
                PerfOp::Reduce if rank == root => reduced(i),
                PerfOp::Reduce => *g,
                PerfOp::Scatter => value(root, r * c + i),
                PerfOp::AllToAll | PerfOp::AllToAllV => {
                    value((i / c.max(1)) as u32, r * c + i % c.max(1))
                }
            };
            *g == want
        })
    };
    // times per op of a bucket
    let per = args.bucket.max(1) as f64;
    Ok(RankTimes {
        avg_us: elapsed.as_secs_f64() * 1e6 / args.iters as f64 / per,
        iter_us: iter_us.into_iter().map(|t| t / per).collect(),
        ok,
        executor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> PerfArgs {
        let mut v = vec!["hccl-test", "all_reduce"];
        v.extend_from_slice(extra);
        PerfArgs::parse_from(v)
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
    fn hccl_test_defaults_and_steps() {
        // hccl_test: 64M to 64M (one size), 20 iterations, 10 warm-ups, check on
        let a = args(&[]);
        assert_eq!((a.minbytes, a.maxbytes), (64 << 20, 64 << 20));
        assert_eq!((a.iters, a.warmup_iters, a.check), (20, 10, 1));
        assert_eq!(sizes(&a, 4).unwrap(), vec![64 << 20]);
        // no step given: a tenth of the range
        let a = args(&["-b", "0", "-e", "1000"]);
        assert_eq!(
            sizes(&a, 4).unwrap(),
            (0..=10).map(|i| i * 100).collect::<Vec<u64>>()
        );
        // -i 0: minbytes only
        let a = args(&["-b", "8", "-e", "64", "-i", "0"]);
        assert_eq!(sizes(&a, 4).unwrap(), vec![8]);
        // a fractional factor, and -f winning over -i
        let a = args(&["-b", "1K", "-e", "4K", "-f", "1.5", "-i", "8"]);
        assert_eq!(sizes(&a, 4).unwrap(), vec![1024, 1536, 2304, 3456]);
        for bad in ["1", "1.0", "0.5", "-2", "inf"] {
            let a = PerfArgs::try_parse_from(["hccl-test", "all_reduce", "-f", bad]);
            assert!(a.is_err() || sizes(&a.unwrap(), 4).is_err(), "-f {bad}");
        }
        // -c takes 0 or 1 only
        assert!(PerfArgs::try_parse_from(["hccl-test", "all_reduce", "-c", "2"]).is_err());
        assert_eq!(args(&["-c", "0"]).check, 0);
    }

    #[test]
    fn spread_is_nearest_rank() {
        assert_eq!(Spread::of(&[]), Spread::default());
        let one = Spread::of(&[7.0]);
        assert_eq!((one.p50_us, one.p99_us, one.max_us), (7.0, 7.0, 7.0));
        // 1..=200 shuffled: p50 is the 100th, p99 the 198th value
        let v: Vec<f64> = (1..=200).map(|i| ((i * 37) % 200 + 1) as f64).collect();
        let s = Spread::of(&v);
        assert_eq!((s.p50_us, s.p99_us, s.max_us), (100.0, 198.0, 200.0));
        // up to 100 iterations p99 is the maximum: one stall shows in both
        let mut v = vec![1.0; 20];
        v[13] = 900.0;
        let s = Spread::of(&v);
        assert_eq!((s.p50_us, s.p99_us, s.max_us), (1.0, 900.0, 900.0));
        let s = Spread::of(&[3.0, 1.0]);
        assert_eq!((s.p50_us, s.p99_us, s.max_us), (1.0, 3.0, 3.0));
    }

    #[test]
    fn slowest_rank_per_iteration() {
        let per_rank = vec![vec![1.0, 5.0, 2.0], vec![4.0, 1.0, 3.0]];
        assert_eq!(slowest_per_iteration(&per_rank), vec![4.0, 5.0, 3.0]);
        assert!(slowest_per_iteration(&[]).is_empty());
    }

    #[test]
    fn bus_factors() {
        assert_eq!(PerfOp::AllReduce.bus_factor(4), 1.5);
        assert_eq!(PerfOp::AllGather.bus_factor(4), 0.75);
        assert_eq!(PerfOp::Broadcast.bus_factor(4), 1.0);
        assert_eq!(PerfOp::parse("all_gather_test").unwrap(), PerfOp::AllGather);
        assert_eq!(PerfOp::parse("alltoall").unwrap(), PerfOp::AllToAll);
        assert_eq!(PerfOp::parse("alltoallv").unwrap(), PerfOp::AllToAllV);
        assert_eq!(PerfOp::parse("send_recv_test").unwrap(), PerfOp::SendRecv);
        assert!(PerfOp::parse("allthethings").is_err());
    }
}
