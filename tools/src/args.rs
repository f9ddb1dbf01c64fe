//! The command-line arguments of `hccl-test` (hccl_test's flags), shared by
//! the sweep (`perf`) and the calibration (`calibrate`).

use clap::{Parser, ValueEnum};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// hccl_test's table.
    Text,
    /// One JSON object per size.
    Json,
}

/// What the result columns (and JSON keys) mean, printed after `--help`.
pub(crate) const COLUMNS_HELP: &str = "\
Columns (JSON keys), per message size:
  aveg_time(us) (time_us)      -n ops enqueued back to back, one synchronize at the end:
                               elapsed / n, on the slowest rank (the throughput per op)
  alg_bandwidth, bus_bandwidth (algbw_gbps, busbw_gbps) from aveg_time, as nccl-tests
  p50_time, p99_time, max_time (p50_us, p99_us, max_us)
                               a second pass of n iterations, each one op + synchronize,
                               run after the first; an iteration's time is the slowest
                               rank's; nearest-rank percentiles over the n iterations.
                               A stalled op stands out as max where an average would
                               spread it over n ops. The passes differ, so the spread does
                               not bracket the average: an iteration pays a synchronize the
                               average shares among n ops, and ops enqueued back to back
                               may queue where one op alone would not.
Ranks as processes (--transport process): rank 0 prints; every figure is
the slowest rank's, gathered by a max-reduction over the ranks.
Under a launcher (mpirun, srun, torchrun: OMPI_COMM_WORLD_*, PMI_*,
SLURM_*, RANK/WORLD_SIZE set), --transport process makes this process one
rank of the launcher's job instead of starting ranks itself (-p is the
job's size; the rendezvous is HCCL_ROOT_ADDR, MASTER_ADDR or
HCCL_RS_ROOT_FILE, see docs/launching.md).";

/// Command-line arguments (hccl_test's flags).
#[derive(Clone, Debug, Parser)]
#[command(
    name = "hccl-test",
    about = "Collective performance test (hccl_test-compatible flags and output)",
    after_help = COLUMNS_HELP
)]
pub struct PerfArgs {
    /// The collective: all_reduce, all_gather, all_gatherv, reduce_scatter,
    /// reduce_scatterv, broadcast, reduce, scatter, gather, alltoall,
    /// alltoallv, send_recv, barrier.
    #[arg(required_unless_present_any = ["list_executors", "calibrate", "fused"])]
    pub op_name: Option<String>,
    /// Ranks (threads of this process; processes with --transport process).
    /// Default, as hccl_test: the number of devices (`HCCL_RS_DEVICE_COUNT`,
    /// else 8).
    #[arg(short = 'p', long = "npus", default_value_t = default_npus())]
    pub npus: u32,
    /// Smallest message size (K/M/G suffixes; hccl_test's default 64M).
    #[arg(short = 'b', long = "minbytes", default_value = "64M", value_parser = parse_size)]
    pub minbytes: u64,
    /// Largest message size (K/M/G suffixes; hccl_test's default 64M).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub maxbytes: u64,
    /// Additive step between sizes (K/M/G suffixes). Neither this nor
    /// `-f` given: (maxbytes − minbytes) / 10, as hccl_test; 0 = minbytes
    /// only.
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size)]
    pub stepbytes: Option<u64>,
    /// Multiplicative step between sizes, a number above 1.0 (e.g. 2 or
    /// 1.5); wins over `-i` when both are given (with a warning), as in
    /// hccl_test.
    #[arg(short = 'f', long = "stepfactor")]
    pub stepfactor: Option<f64>,
    /// Timed iterations per size (the average), and iterations of the
    /// per-op pass behind p50/p99/max (see the columns below).
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Untimed warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 10)]
    pub warmup_iters: u32,
    /// Reduction: sum, prod, max, min.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Data type: int8, int16, int32, int64, uint8, uint16, uint32, uint64, fp16, bf16, fp32, fp64;
    /// and HCCL's 1-byte FP8 formats hif8, fp8e4m3, fp8e5m2, fp8e8m0, for the ops that move
    /// data without reducing it (all_gather(v), broadcast, alltoall(v), scatter, gather,
    /// send_recv; checked byte for byte), refused by all_reduce, reduce and reduce_scatter(v).
    #[arg(short = 'd', long = "datatype", default_value = "fp32")]
    pub datatype: String,
    /// Root rank (rooted collectives).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Check results: 1 = yes, 0 = no (hccl_test refuses other values).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Zero copy: 1 = the send and receive buffers are shareable memory
    /// registered with the communicator, so ops run in graph mode straight
    /// on them (peers on this host map them); 0 = private buffers, op-base
    /// mode.
    #[arg(short = 'z', long = "zero_copy", default_value_t = 0)]
    pub zero_copy: u8,
    /// Symmetric memory: 1 = the send and receive buffers lie in one
    /// symmetric window (`HcclCommSymWinRegister`: every rank registers a
    /// buffer of the same size, peers on this host address it directly),
    /// so ops run in graph mode on it; 0 = as `-z` says.
    #[arg(short = 'm', long = "symmetric", default_value_t = 0)]
    pub symmetric: u8,
    /// Graph mode: capture the timed loop (and the single op of the spread
    /// pass) once on the stream and time its replays. Consecutive small
    /// AllReduces of a capture are fused into one op.
    #[arg(long = "graph")]
    pub graph: bool,
    /// Gradient bucketing: each op of the loop is this many ops of the
    /// message size on as many separate buffers (as a model's gradients
    /// are); times and bandwidth are per op of the bucket. With `--graph`
    /// a bucket of small AllReduces is captured as one fused op.
    #[arg(long = "bucket", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub bucket: u32,
    /// The bucket's buffers are back-to-back slices of one send and one
    /// receive allocation (a framework's flat gradient buffer) instead of
    /// separate allocations: a fused op then reads and writes them in
    /// place, with no pack or unpack copy.
    #[arg(long = "bucket-flat")]
    pub bucket_flat: bool,
    /// Output format.
    #[arg(long = "format", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// After the sweep, draw its rows to this SVG file (rank 0 draws): bus
    /// bandwidth and time (average, p50, p99) against message size, with
    /// the cost model's prediction for the executor that ran, priced as
    /// the selector prices it (tuning file if there is one). See
    /// docs/performance.md, "Plots"; `hccl-plot` draws several runs.
    #[arg(long = "plot", value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// What a rank is and how ranks talk: `inproc` (threads of this
    /// process), `tcp` (threads over loopback TCP), `process` (one process
    /// per rank: shared memory on this host, as real jobs run).
    #[arg(long = "transport", default_value = "inproc", value_parser = ["inproc", "tcp", "process"])]
    pub transport: String,
    /// With `--transport process`: declare the ranks as this many hosts
    /// (consecutive blocks of ranks, via `HCCL_RS_HOST_ID`), so links inside
    /// a block use shared memory and links between blocks TCP, and
    /// hierarchical algorithms see several servers.
    #[arg(long = "hosts", default_value_t = 1)]
    pub hosts: u32,
    /// With `--transport process`: run the ranks on this many hosts that
    /// are network namespaces made for the run (root and iproute2 needed),
    /// or on as many hosts as counts are listed, with that many ranks each
    /// (`2,1,3`: ranks 0-1, 2, 3-5; the counts must add up to -p). A count
    /// alone places ranks in consecutive blocks, as --hosts. Ranks on one
    /// host share memory; hosts talk TCP over veths on a bridge
    /// (198.18.K.0/24). The namespaces are removed when the run ends,
    /// fails or is interrupted; those of runs that were killed are swept.
    #[arg(long = "netns", value_name = "H|N,N,..")]
    pub netns: Option<String>,
    /// With --netns: limit each host's link to this rate in both directions
    /// (tc htb; e.g. 1gbit, 100mbit).
    #[arg(long = "netns-rate", value_name = "RATE", requires = "netns")]
    pub netns_rate: Option<String>,
    /// Internal: this process is rank N of a `--transport process` run.
    #[arg(long = "worker-rank", hide = true)]
    pub worker_rank: Option<u32>,
    /// Internal: where the process ranks meet.
    #[arg(long = "root-file", hide = true)]
    pub root_file: Option<String>,
    /// With `--transport process`: rank 0 keeps this many silent and as
    /// many trickling (a byte per 100 ms) connections open to every
    /// rank's TCP listener while the sweep runs, reopening those the
    /// listeners drop (a stray connection must not slow real traffic).
    #[arg(long = "strays", default_value_t = 0)]
    pub strays: usize,
    /// Also measure single-thread memcpy bandwidth at the largest size and
    /// print the best bus bandwidth as a ratio of it (a same-run baseline).
    #[arg(long = "baseline")]
    pub baseline: bool,
    /// Run every op with this registered executor (see --list-executors);
    /// a name that does not serve the op fails with the executor's error.
    #[arg(long = "algo")]
    pub algo: Option<String>,
    /// Print the registered executor names, one per line, and exit.
    #[arg(long = "list-executors")]
    pub list_executors: bool,
    /// Measure α (8-byte exchange) and β (one flow, one way) of shared
    /// memory and TCP between two processes (with --netns: between two
    /// namespace hosts, and the capacity of one host's link across three),
    /// and the reduce throughput; write them to the tuning file the
    /// selector reads (see --tuning-file), and exit.
    #[arg(long = "calibrate")]
    pub calibrate: bool,
    /// Benchmark the fused compute/communication ops instead of a
    /// collective: `mm_rs`, `ag_mm`, `mm_ar` or `all` (comma-separated).
    /// Each op and shape (--shapes) is timed as matmul alone, collective
    /// alone, unfused and fused, with the speed-up and CATCCOS's overlap
    /// (docs/fused.md). -n/-w are its iterations, -c 1 checks the fused
    /// result against the unfused one.
    #[arg(long = "fused", value_name = "OPS")]
    pub fused: Option<String>,
    /// Shapes for --fused, `MxKxN` comma-separated (default: CATCCOS's
    /// 1792x768x1280, 5416x6144x1408, 4084x2048x4096 and a tall-skinny
    /// 16384x1024x1024). M is the global row count.
    #[arg(long = "shapes", requires = "fused")]
    pub shapes: Option<String>,
    /// Where --calibrate writes (default: $HCCL_RS_TUNING_FILE, else
    /// ~/.cache/hccl-rs/tuning.json).
    #[arg(long = "tuning-file")]
    pub tuning_file: Option<String>,
}

/// Parses `8`, `64K`, `16M`, `1G` (binary multiples).
/// hccl_test's `-p` default: the number of devices the runtime reports
/// (`HCCL_RS_DEVICE_COUNT`, else 8, as the ACL shim).
fn default_npus() -> u32 {
    std::env::var("HCCL_RS_DEVICE_COUNT")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(8)
}

pub(crate) fn parse_size(s: &str) -> std::result::Result<u64, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_parsing() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("lots").is_err());
    }
}
