//! What an executor declares to the selector: the ops it serves, where it
//! serves them (topology, sizes), what it costs there, and the `HCCL_ALGO`
//! value that forces it.
//!
//! An executor registered with [`ExecutorRegistry::register_with`] and an
//! [`ExecutorInfo`] is a candidate of the framework's selector for every
//! op it declares: the selector asks every declared executor that serves
//! the op on the communicator's topology for an [`Estimate`] and takes the
//! best ([`Estimate::beats`]): the highest score first (UCC's transport
//! layers rank themselves the same way), then the lowest predicted time,
//! then the earliest registration. Built-in executors and executors of
//! other crates are ranked alike. An executor registered with the bare
//! [`ExecutorRegistry::register`] declares nothing: the selector never
//! picks it, it runs only when forced by name (`HCCL_RS_EXECUTOR`).
//!
//! A cost is declared in one of three ways:
//! - α-β-γ coefficients ([`ExecutorInfo::from_terms`]): steps, bytes the
//!   busiest rank sends, bytes it reduces, priced with the selector's
//!   [`CostParams`] (the link of the level a flat plan crosses);
//! - a predicted time ([`ExecutorInfo::new`]), for plans the flat
//!   coefficients do not describe (the hierarchical executors price each
//!   level with its own link);
//! - a score per size range ([`ExecutorInfo::from_scores`]), as UCC's
//!   transport layers do.
//!
//! The selector memoises its choice per (op, bytes) for a topology, so a
//! declaration must depend on nothing else than what a [`SelectQuery`]
//! holds.
//!
//! [`ExecutorRegistry::register_with`]: super::ExecutorRegistry::register_with
//! [`ExecutorRegistry::register`]: super::ExecutorRegistry::register

use crate::cost::{Algo, CostParams, LinkParams};
use crate::executor::HierKind;
use crate::op::OpType;
use crate::topo::TopoInfo;
use hccl_platform::{HcclError, Result};
use std::sync::Arc;

/// What the communicator offers beyond plain links, as the selector was
/// configured with it: each is `None` when switched off or when some link
/// of the communicator cannot do it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelectLimits {
    /// Ops publishing at most this many bytes per rank may run as one AIV
    /// kernel over the ranks' boards (`HCCL_RS_AIV_MAX_BYTES`).
    pub aiv_max_bytes: Option<u64>,
    /// Ops of at least this many bytes may read the peers' user buffers
    /// directly (`HCCL_RS_DIRECT_MIN_BYTES`).
    pub direct_min_bytes: Option<u64>,
    /// The op runs in graph mode (on registered user memory): only
    /// executors that can are offered where one exists, and the direct
    /// Send / Receive (which hold the sender until the receiver has read).
    pub graph: bool,
}

/// The message size the cost formulas use for an op whose every rank
/// passes `input_bytes` on `p` ranks: the gathered output of AllGather,
/// the input of ReduceScatter and AllToAll (`p` blocks), the op's buffer
/// otherwise.
pub fn model_bytes(op: OpType, input_bytes: u64, p: u32) -> u64 {
    match op {
        OpType::AllGather | OpType::ReduceScatter | OpType::AllToAll => input_bytes * p as u64,
        _ => input_bytes,
    }
}

/// One question to the declarations: an op of a size on a topology, with
/// the selector's cost parameters and limits.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SelectQuery<'a> {
    /// The op.
    pub op: OpType,
    /// The message as the cost formulas count it ([`model_bytes`]).
    pub bytes: u64,
    /// The bytes every rank passes as its input (the op's count times its
    /// element size).
    pub block_bytes: u64,
    /// The communicator's topology.
    pub topo: &'a TopoInfo,
    /// Ranks per host, host after host.
    pub host_sizes: Vec<u32>,
    /// The selector's link and reduction parameters.
    pub cost: &'a CostParams,
    /// What the communicator offers beyond plain links.
    pub limits: SelectLimits,
}

impl<'a> SelectQuery<'a> {
    /// The question for `op` of `bytes` (as [`model_bytes`] counts them)
    /// on `topo`.
    pub fn new(
        op: OpType,
        topo: &'a TopoInfo,
        bytes: u64,
        cost: &'a CostParams,
        limits: SelectLimits,
    ) -> Self {
        let p = topo.user_rank_size.max(1);
        let block_bytes = match op {
            OpType::AllGather | OpType::ReduceScatter | OpType::AllToAll => bytes / p as u64,
            _ => bytes,
        };
        let mut host_sizes = vec![0u32; topo.server_num() as usize];
        for &s in topo.rank_to_server.iter() {
            host_sizes[s as usize] += 1;
        }
        SelectQuery {
            op,
            bytes,
            block_bytes,
            topo,
            host_sizes,
            cost,
            limits,
        }
    }

    /// Ranks in the communicator.
    pub fn ranks(&self) -> u32 {
        self.topo.user_rank_size
    }

    /// Hosts (servers) the ranks are on.
    pub fn hosts(&self) -> u32 {
        self.host_sizes.len() as u32
    }

    /// Whether every rank is on one host and there are at least two: what
    /// the one-host executors (AIV, direct read) need.
    pub fn one_host_peers(&self) -> bool {
        self.hosts() == 1 && self.ranks() >= 2
    }

    /// The link a flat plan crosses at every step: between hosts when
    /// there are several, within the host otherwise.
    pub fn flat_link(&self) -> LinkParams {
        if self.hosts() > 1 {
            self.cost.level1
        } else {
            self.cost.level0
        }
    }

    /// µs of a flat plan of `(steps, bytes sent, bytes reduced)` by the
    /// busiest rank ([`flat_link`](Self::flat_link) and the reduction
    /// rate).
    pub fn price(&self, (a, b, c): (f64, f64, f64)) -> f64 {
        let link = self.flat_link();
        a * link.alpha_us + b * link.beta_us_per_byte + c * self.cost.gamma_us_per_byte
    }
}

/// A declared executor's answer to a [`SelectQuery`]: a score and a
/// predicted time. The higher score wins; among equal scores the lower
/// time; among equal times the earlier registration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The score (UCC's TL score): what the α-β-γ model prices carries
    /// [`MODEL_SCORE`](Self::MODEL_SCORE).
    pub score: u32,
    /// Predicted time, µs: finite or `+∞` ("serves, but no prediction":
    /// chosen only when nothing else is), never NaN or negative.
    pub micros: f64,
}

impl Estimate {
    /// The score of an executor whose prediction is offered to the
    /// selector (and logged beside the others) but that has not been
    /// measured faster than the executors the model would rank it against:
    /// it ranks after every cost-model prediction, so it runs only where
    /// nothing else serves or when forced (`HCCL_ALGO`,
    /// `HCCL_RS_EXECUTOR`). The multi-ring executors declare it (see
    /// docs/performance.md for the measurement).
    pub const PROVISIONAL_SCORE: u32 = 5;
    /// The score of a plain cost-model prediction.
    pub const MODEL_SCORE: u32 = 10;
    /// The direct-read executors' score where `HCCL_RS_DIRECT_MIN_BYTES`
    /// lets them run: above every cost-model prediction.
    pub const DIRECT_SCORE: u32 = 20;
    /// The AIV executors' score where `HCCL_RS_AIV_MAX_BYTES` lets them
    /// run: above direct read.
    pub const AIV_SCORE: u32 = 30;

    /// A cost-model prediction of `micros` µs.
    pub fn predicted(micros: f64) -> Self {
        Estimate {
            score: Self::MODEL_SCORE,
            micros,
        }
    }

    /// A prediction with its own `score`.
    pub fn scored(score: u32, micros: f64) -> Self {
        Estimate { score, micros }
    }

    /// Whether this estimate ranks strictly before `other`.
    pub fn beats(&self, other: &Estimate) -> bool {
        self.score > other.score || (self.score == other.score && self.micros < other.micros)
    }

    /// Whether the time is a usable prediction (not NaN, not negative).
    pub fn is_valid(&self) -> bool {
        self.micros >= 0.0
    }
}

/// Which `HCCL_ALGO` value forces an executor for the ops it declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgoTag {
    /// A flat algorithm: `level0:<name>` on one host, and `level1:<name>`
    /// on several when no hierarchical executor answers it.
    Flat(Algo),
    /// A hierarchical executor of this kind whose inter-host allreduce is
    /// the level-1 algorithm named so (`Level1Algorithm::algo_name`):
    /// `level1:<name>` picks TwoLevel, `level1:AHC` AHC with `ring`,
    /// `level1:pipeline` Pipeline with `ring`.
    Hier(HierKind, &'static str),
    /// The multi-ring executors (one ring per channel, [`crate::rings`]):
    /// `level0:multiring` on one host, `level1:multiring` on several.
    MultiRing,
}

/// A score over a range of message sizes (bytes as [`model_bytes`] counts
/// them, both ends included), as UCC's transport layers declare theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreRange {
    /// Smallest message served.
    pub min_bytes: u64,
    /// Largest message served.
    pub max_bytes: u64,
    /// The score there (see [`Estimate::MODEL_SCORE`] and the others).
    pub score: u32,
}

/// Whether the executor serves a query (besides declaring its op).
pub type ServesFn = Arc<dyn Fn(&SelectQuery<'_>) -> bool + Send + Sync>;

/// The executor's estimate for a query it serves; `None` = no estimate
/// (not a candidate for this query).
pub type CostFn = Arc<dyn Fn(&SelectQuery<'_>) -> Option<Estimate> + Send + Sync>;

/// What an executor declares to the selector (see the module docs).
#[derive(Clone)]
pub struct ExecutorInfo {
    ops: Arc<[OpType]>,
    algo: Option<AlgoTag>,
    serves: Option<ServesFn>,
    cost: CostFn,
    scores: Option<Arc<[ScoreRange]>>,
    note: Option<&'static str>,
}

impl std::fmt::Debug for ExecutorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorInfo")
            .field("ops", &self.ops)
            .field("algo", &self.algo)
            .field("scores", &self.scores)
            .finish_non_exhaustive()
    }
}

impl ExecutorInfo {
    /// Serves `ops` everywhere, at the estimate `cost` returns.
    pub fn new(
        ops: &[OpType],
        cost: impl Fn(&SelectQuery<'_>) -> Option<Estimate> + Send + Sync + 'static,
    ) -> Self {
        ExecutorInfo {
            ops: ops.into(),
            algo: None,
            serves: None,
            cost: Arc::new(cost),
            scores: None,
            note: None,
        }
    }

    /// Serves `ops` at the α-β-γ coefficients `terms` returns: (steps,
    /// bytes the busiest rank sends, bytes it reduces), priced by
    /// [`SelectQuery::price`] with the cost-model score.
    pub fn from_terms(
        ops: &[OpType],
        terms: impl Fn(&SelectQuery<'_>) -> Option<(f64, f64, f64)> + Send + Sync + 'static,
    ) -> Self {
        Self::new(ops, move |q| {
            terms(q).map(|t| Estimate::predicted(q.price(t)))
        })
    }

    /// Serves `ops` for message sizes in `ranges`, at the highest score of
    /// the ranges a size falls in (a score carries no time: equal scores
    /// keep the earlier registration).
    pub fn from_scores(ops: &[OpType], ranges: &[ScoreRange]) -> Self {
        let ranges: Arc<[ScoreRange]> = ranges.into();
        let r = ranges.clone();
        let mut info = Self::new(ops, move |q| {
            r.iter()
                .filter(|s| (s.min_bytes..=s.max_bytes).contains(&q.bytes))
                .map(|s| s.score)
                .max()
                .map(|score| Estimate::scored(score, 0.0))
        });
        info.scores = Some(ranges);
        info
    }

    /// Serves only the queries `serves` accepts (a topology, a size range,
    /// what the communicator offers).
    pub fn serving(
        mut self,
        serves: impl Fn(&SelectQuery<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.serves = Some(Arc::new(serves));
        self
    }

    /// Answers the `HCCL_ALGO` value `tag` (at most one executor per op and
    /// tag).
    pub fn forced_by(mut self, tag: AlgoTag) -> Self {
        self.algo = Some(tag);
        self
    }

    /// Why the executor is chosen when it wins, for the decision's log
    /// line (e.g. "payload within HCCL_RS_AIV_MAX_BYTES: one AIV kernel").
    pub fn noting(mut self, note: &'static str) -> Self {
        self.note = Some(note);
        self
    }

    /// The ops declared.
    pub fn ops(&self) -> &[OpType] {
        &self.ops
    }

    /// The `HCCL_ALGO` value that forces it, if any.
    pub fn algo(&self) -> Option<AlgoTag> {
        self.algo
    }

    /// The log note of [`noting`](Self::noting).
    pub fn note(&self) -> Option<&'static str> {
        self.note
    }

    /// The estimate for `q`: `None` when the op is not declared, the query
    /// is not served or the cost function gives none.
    pub fn estimate(&self, q: &SelectQuery<'_>) -> Option<Estimate> {
        if !self.ops.contains(&q.op) || self.serves.as_ref().is_some_and(|s| !s(q)) {
            return None;
        }
        (self.cost)(q)
    }

    /// Checks the declaration of `name`: it must declare at least one op
    /// (and, from scores, at least one range, each `min ≤ max`), and give
    /// no NaN or negative time on a grid of sizes over one and several
    /// hosts. A bad declaration is `HCCL_E_PARA` naming what is wrong.
    pub fn validate(&self, name: &str) -> Result<()> {
        let bad = |why: String| {
            HcclError::para(format!(
                "executor '{name}' declares a bad selection entry: {why}"
            ))
        };
        if self.ops.is_empty() {
            return Err(bad("it serves no op".into()));
        }
        if let Some(r) = &self.scores {
            if r.is_empty() {
                return Err(bad("it serves no message size (no score range)".into()));
            }
            if let Some(s) = r.iter().find(|s| s.min_bytes > s.max_bytes) {
                return Err(bad(format!(
                    "score range {}..={} bytes is empty",
                    s.min_bytes, s.max_bytes
                )));
            }
        }
        let cost = CostParams::default();
        let limits = SelectLimits {
            aiv_max_bytes: Some(u64::MAX),
            direct_min_bytes: Some(0),
            graph: false,
        };
        let maps: [&[u32]; 5] = [
            &[0, 0],
            &[0, 0, 0],
            &[0; 8],
            &[0, 0, 1, 1],
            &[0, 0, 0, 1, 1, 1, 1],
        ];
        for map in maps {
            let topo = TopoInfo::new(0, map.to_vec())?;
            for &op in self.ops.iter() {
                for block in [0u64, 4, 4096, 1 << 20, 16 << 20] {
                    let bytes = model_bytes(op, block, topo.user_rank_size);
                    let q = SelectQuery::new(op, &topo, bytes, &cost, limits);
                    if let Some(e) = self.estimate(&q).filter(|e| !e.is_valid()) {
                        return Err(bad(format!(
                            "a cost of {} µs for {op} of {bytes} bytes on {} ranks ({} hosts); \
                             a cost must be a non-negative number of µs (or +∞)",
                            e.micros,
                            q.ranks(),
                            q.hosts()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One executor the selector considered: its name and estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The registered name.
    pub name: Arc<str>,
    /// Its estimate for the query.
    pub estimate: Estimate,
    /// Its declaration's log note.
    pub note: Option<&'static str>,
}

/// The index of the best of `candidates` ([`Estimate::beats`]; ties keep
/// the earlier one), `None` when there is none.
pub fn best(candidates: &[Candidate]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .fold(None, |best: Option<usize>, (i, c)| match best {
            Some(b) if !c.estimate.beats(&candidates[b].estimate) => Some(b),
            _ => Some(i),
        })
}
