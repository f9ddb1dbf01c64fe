//! hccl-fused: compute/communication fusion (seed 003, CATCCOS; HCCL's
//! MC2 ops) on CPUs. A layer above the collectives: it uses the adapter's
//! communicators, symmetric windows and collectives, and nothing below
//! depends on it.
//!
//! Three ops, every rank calling them with its operands (row-major, any
//! leading dimension, fp32, bf16 or fp16, products accumulated in f32):
//!
//! - [`Fused::matmul_reduce_scatter`]: rank r gets its rows of Σ_q A_q·B_q
//!   (rows split as [`split_rows`]: the first `M mod p` ranks get one
//!   more);
//! - [`Fused::all_gather_matmul`]: every rank gets (A gathered by rows)·B,
//!   and optionally the gathered A;
//! - [`Fused::matmul_all_reduce`]: every rank gets Σ_q A_q·B_q.
//!
//! Each op cuts its output into blocks of rows and pipelines them (see
//! [`FusedPath`]): on one host through symmetric windows — blocks computed
//! into the rank's window, receivers reducing straight out of their
//! peers' windows while later blocks are computed, a counter per block in
//! shared memory, `stages` blocks in flight, peers visited in a
//! rank-shifted order — and across hosts through the communicator's
//! collectives on a stream that a second thread drives while the next
//! blocks are computed. See docs/fused.md.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The README's code is compiled and run as doc tests (`cargo test --doc`),
// so the page a registry shows cannot hold examples that no longer build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod all_gather_matmul;
mod config;
mod gemm;
mod matmul_all_reduce;
mod matmul_reduce_scatter;
mod pipeline;
mod shape;
mod tune;

pub use config::{FusedConfig, FusedPath};
pub use hccl_platform::cube::{self, Mat};
pub use shape::split_rows;
pub use tune::TRIALS as AUTO_TRIALS;

use hccl_adapter::{HcclComm, Stream};
use hccl_platform::{HcclError, PeerProcess, Result};
use pipeline::{Scratch, Waits, Workspace};
use shape::{OpKind, Record};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Below this many flops (2·M·K·N) `auto` runs the unfused op: about a
/// millisecond of one core's GEMM, too little to hide anything behind.
const AUTO_MIN_FLOPS: f64 = 1e8;

/// What a fused op did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedReport {
    /// The pipeline it ran on.
    pub path: FusedPath,
    /// Blocks it was cut into.
    pub blocks: usize,
    /// Rows of a block.
    pub block_rows: usize,
    /// Blocks in flight.
    pub stages: usize,
    /// GEMM threads.
    pub threads: usize,
    /// Time this rank spent waiting for its peers' blocks (window path).
    pub waited: Duration,
}

/// The fused ops of one communicator. Holds the communicator's fused
/// workspace (a symmetric window, registered at the first windowed op and
/// grown when an op needs more) and reusable scratch buffers; ops on one
/// `Fused` run one at a time.
pub struct Fused {
    comm: HcclComm,
    config: FusedConfig,
    state: Mutex<State>,
}

struct State {
    ws: Option<Workspace>,
    scratch: Scratch,
    stream: Stream,
    /// Whether an earlier windowed op failed midway (the window's
    /// counters can no longer be trusted): the next op re-registers it.
    broken: bool,
    /// What `auto` measured per shape (rank 0's decides).
    tuner: tune::Tuner,
}

/// What every op path gets.
pub(crate) struct Ctx<'a> {
    pub comm: &'a HcclComm,
    pub p: usize,
    pub r: usize,
    pub block: usize,
    pub stages: usize,
    pub threads: usize,
    pub recs: &'a [Record],
    pub scratch: &'a mut Scratch,
    pub stream: &'a Stream,
}

impl Fused {
    /// The fused ops of `comm`, configured from the environment
    /// (`HCCL_RS_FUSED_*`, see [`FusedConfig::from_env`]).
    pub fn new(comm: &HcclComm) -> Result<Fused> {
        Ok(Self::with_config(comm, FusedConfig::from_env()?))
    }

    /// The fused ops of `comm` with an explicit configuration.
    pub fn with_config(comm: &HcclComm, config: FusedConfig) -> Fused {
        Fused {
            comm: comm.clone(),
            config,
            state: Mutex::new(State {
                ws: None,
                scratch: Scratch::default(),
                stream: comm.create_stream(),
                broken: false,
                tuner: tune::Tuner::default(),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FusedConfig {
        &self.config
    }

    /// The communicator.
    pub fn comm(&self) -> &HcclComm {
        &self.comm
    }

    /// MatMul+ReduceScatter: every rank holds `a` (M×K) and `b` (K×N);
    /// rank r receives in `out` its rows of Σ_q A_q·B_q: rows
    /// [`split_rows`]`(M, p, r)`, so `out` is that many rows × N.
    /// Collective. Errors before anything runs (every rank gets one when
    /// any rank's operands are wrong, naming the rank or the mismatch):
    /// types other than fp32/bf16/fp16 or mixed, shapes that do not chain,
    /// `out` overlapping an operand, M, K or N differing across ranks.
    pub fn matmul_reduce_scatter(&self, a: &Mat, b: &Mat, out: &Mat) -> Result<FusedReport> {
        let p = self.comm.size() as usize;
        let r = self.comm.rank() as usize;
        let local = shape::check_local(OpKind::MatmulReduceScatter, a, b, out).and_then(|_| {
            let want = split_rows(a.row_count(), p, r).1;
            if out.row_count() != want {
                return Err(HcclError::para(format!(
                    "matmul_reduce_scatter: the output has {} rows; rank {r} of {p} gets {want} \
                     of A's {} rows",
                    out.row_count(),
                    a.row_count()
                )));
            }
            Ok(())
        });
        self.run(OpKind::MatmulReduceScatter, local, a, b, out, None, 0)
    }

    /// AllGather+MatMul: every rank holds a row block `a` of A (any number
    /// of rows, K columns; rank order is row order) and the whole `b`
    /// (K×N); every rank receives A·B in `out` (ΣM_q × N) and, if
    /// `gathered` is given, A itself (ΣM_q × K), as PyTorch's
    /// `fused_all_gather_matmul` returns it. Collective; errors as
    /// [`matmul_reduce_scatter`](Self::matmul_reduce_scatter).
    pub fn all_gather_matmul(
        &self,
        a: &Mat,
        b: &Mat,
        out: &Mat,
        gathered: Option<&Mat>,
    ) -> Result<FusedReport> {
        let mut local = shape::check_local(OpKind::AllGatherMatmul, a, b, out);
        if let (Ok(()), Some(g)) = (&local, gathered) {
            local = if g.dtype() != a.dtype() || g.col_count() != a.col_count() {
                Err(HcclError::para(format!(
                    "all_gather_matmul: the gathered A must be {} with {} columns, not {} with {}",
                    a.dtype().name(),
                    a.col_count(),
                    g.dtype().name(),
                    g.col_count()
                )))
            } else if shape::overlaps(g, out) || shape::overlaps(g, a) || shape::overlaps(g, b) {
                Err(HcclError::para(
                    "all_gather_matmul: the gathered A overlaps another operand",
                ))
            } else {
                Ok(())
            };
        }
        let g_rows = gathered.map_or(u64::MAX, |g| g.row_count() as u64);
        self.run(OpKind::AllGatherMatmul, local, a, b, out, gathered, g_rows)
    }

    /// MatMul+AllReduce: every rank holds `a` (M×K) and `b` (K×N); every
    /// rank receives Σ_q A_q·B_q in `out` (M×N). Collective; errors as
    /// [`matmul_reduce_scatter`](Self::matmul_reduce_scatter).
    pub fn matmul_all_reduce(&self, a: &Mat, b: &Mat, out: &Mat) -> Result<FusedReport> {
        let local = shape::check_local(OpKind::MatmulAllReduce, a, b, out).and_then(|_| {
            if out.row_count() != a.row_count() {
                return Err(HcclError::para(format!(
                    "matmul_all_reduce: the output has {} rows, A has {}",
                    out.row_count(),
                    a.row_count()
                )));
            }
            Ok(())
        });
        self.run(OpKind::MatmulAllReduce, local, a, b, out, None, 0)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        kind: OpKind,
        local: Result<()>,
        a: &Mat,
        b: &Mat,
        out: &Mat,
        gathered: Option<&Mat>,
        gathered_rows: u64,
    ) -> Result<FusedReport> {
        let comm = &self.comm;
        let (p, r) = (comm.size() as usize, comm.rank() as usize);
        let me = r as u32;
        // every error names the op once (the checks' own messages do)
        let ctx = |e: HcclError| {
            let e = e.rank(me);
            if e.message().starts_with(kind.name()) {
                e
            } else {
                e.during(kind.name())
            }
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let started = Instant::now();
        let key: tune::ShapeKey = (
            kind as u32,
            a.dtype() as u32,
            a.row_count(),
            a.col_count(),
            b.col_count(),
        );
        let proposed = match self.config.path {
            FusedPath::Auto => st.tuner.propose(&key),
            x => x,
        };
        let mut mine = shape::record_of(
            kind,
            &local,
            a,
            b,
            proposed,
            self.config.block_rows.unwrap_or(0),
            self.config.stages,
        );
        mine.out_rows = out.row_count() as u64;
        mine.gathered_rows = gathered_rows;
        let recs = match shape::agree(comm, kind, mine) {
            Ok(recs) => recs,
            Err(e) => return Err(ctx(local.err().unwrap_or(e))),
        };
        local.map_err(ctx)?;
        if kind == OpKind::AllGatherMatmul {
            shape::check_gathered_rows(&recs).map_err(ctx)?;
        }
        let lead = recs[0];
        let m_part = match kind {
            OpKind::MatmulReduceScatter => split_rows(lead.m as usize, p, 0).1,
            OpKind::AllGatherMatmul => recs.iter().map(|x| x.m as usize).max().unwrap_or(0),
            OpKind::MatmulAllReduce => lead.m as usize,
        };
        let one_host = comm
            .communicator()
            .topo()
            .rank_to_server
            .iter()
            .all(|&s| s == 0);
        let path =
            match FusedPath::from_code(lead.path) {
                FusedPath::Window if !one_host => return Err(ctx(HcclError::not_support(
                    "the window path needs every rank on one host (symmetric windows are mapped \
                     memory); use the stream path across hosts",
                ))),
                x => x,
            };
        let pipe = match path {
            FusedPath::Auto if one_host => FusedPath::Window,
            FusedPath::Auto => FusedPath::Stream,
            x => x,
        };
        // Blocks: a GEMM call re-packs B, so blocks under ~256 rows cost
        // several percent (measured: 64 rows +75%, 256 +8%, 1024 +1.5% at
        // 4084x2048x4096); on one host a few big blocks do, across hosts
        // more blocks hide more of the wire (the last one's transfer is
        // exposed).
        let block = match lead.block_rows as usize {
            0 if pipe == FusedPath::Window => m_part.div_ceil(4).clamp(128, 1024),
            0 => m_part.div_ceil(8).clamp(128, 1024),
            b => b,
        };
        let blocks = gemm::blocks_of(m_part, block);
        // where a pipeline cannot pay: fewer than two blocks, or a product
        // too small to hide anything behind (under ~1 ms of GEMM)
        let flops = 2.0 * m_part as f64 * p as f64 * lead.k as f64 * lead.n as f64;
        let path = match path {
            FusedPath::Auto if blocks < 2 || flops < AUTO_MIN_FLOPS => FusedPath::Unfused,
            FusedPath::Auto => pipe,
            x => x,
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = self.config.threads.unwrap_or((cores / p).max(1));
        let stages = (lead.stages as usize).max(1);
        let State {
            ws,
            scratch,
            stream,
            broken,
            tuner,
        } = &mut *st;
        let mut cx = Ctx {
            comm,
            p,
            r,
            block,
            stages,
            threads,
            recs: &recs,
            scratch,
            stream,
        };
        let mut waited = Duration::ZERO;
        let used = match path {
            FusedPath::Window => {
                let need = match kind {
                    OpKind::MatmulReduceScatter => stages * p * block * lead.n as usize * 4,
                    OpKind::AllGatherMatmul => m_part * lead.k as usize * a.dtype().size(),
                    OpKind::MatmulAllReduce => stages * 2 * block * lead.n as usize * 4,
                };
                // every rank takes the same branch: the shapes, the
                // window's size and `broken` are the same everywhere
                // (`broken` is set on every rank whose op failed, and a
                // failed op fails on every rank that sees it end)
                if *broken || ws.as_ref().is_none_or(|w| w.capacity() < need) {
                    if let Some(old) = ws.take() {
                        old.close(comm).map_err(ctx)?;
                    }
                    let size = need.max(1 << 20).next_power_of_two();
                    *ws = Some(Workspace::open(comm, size).map_err(ctx)?);
                    *broken = false;
                }
                let w = ws.as_mut().expect("opened above");
                let watch = recs
                    .iter()
                    .enumerate()
                    .map(|(q, x)| {
                        (x.pid != std::process::id())
                            .then(|| PeerProcess::new(q as u32, x.pid, "this host"))
                    })
                    .collect();
                let deadline = comm
                    .communicator()
                    .config()
                    .exec_timeout
                    .map(|t| Instant::now() + t);
                let mut waits = Waits {
                    ws: w,
                    op: kind.name(),
                    watch,
                    deadline,
                    spin: p <= cores,
                    waited: Duration::ZERO,
                };
                let res = match kind {
                    OpKind::MatmulReduceScatter => {
                        matmul_reduce_scatter::window(&mut cx, &mut waits, a, b, out)
                    }
                    OpKind::AllGatherMatmul => {
                        all_gather_matmul::window(&mut cx, &mut waits, a, b, out, gathered)
                    }
                    OpKind::MatmulAllReduce => {
                        matmul_all_reduce::window(&mut cx, &mut waits, a, b, out)
                    }
                };
                waited = waits.waited;
                match res {
                    Ok(n) => {
                        w.base += n as u64;
                        w.ops += 1;
                        n
                    }
                    Err(e) => {
                        w.abort();
                        *broken = true;
                        return Err(ctx(e));
                    }
                }
            }
            FusedPath::Stream => match kind {
                OpKind::MatmulReduceScatter => matmul_reduce_scatter::stream(&mut cx, a, b, out),
                OpKind::AllGatherMatmul => all_gather_matmul::stream(&mut cx, a, b, out, gathered),
                OpKind::MatmulAllReduce => matmul_all_reduce::stream(&mut cx, a, b, out),
            }
            .map_err(ctx)?,
            FusedPath::Unfused | FusedPath::Auto => match kind {
                OpKind::MatmulReduceScatter => matmul_reduce_scatter::unfused(&mut cx, a, b, out),
                OpKind::AllGatherMatmul => all_gather_matmul::unfused(&mut cx, a, b, out, gathered),
                OpKind::MatmulAllReduce => matmul_all_reduce::unfused(&mut cx, a, b, out),
            }
            .map_err(ctx)?,
        };
        if r == 0 && self.config.path == FusedPath::Auto {
            tuner.record(key, proposed, path, started.elapsed());
        }
        Ok(FusedReport {
            path,
            blocks: used,
            block_rows: block,
            stages,
            threads,
            waited,
        })
    }
}

impl Drop for Fused {
    fn drop(&mut self) {
        // Deregistering is collective and a drop cannot wait for peers:
        // the window stays registered with the communicator, which frees
        // it when it is destroyed.
    }
}
