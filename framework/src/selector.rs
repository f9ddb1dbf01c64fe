//! Algorithm selection: which executor runs an op.
//!
//! In order: a forced executor name (`HCCL_RS_EXECUTOR`); the user's
//! `HCCL_ALGO` for the op and the level that matters for the topology
//! (level 1 when the communicator spans servers, else level 0), which
//! names the executor whose declaration answers that value
//! ([`AlgoTag`]); otherwise a ranking of every executor declared in the
//! registry ([`ExecutorInfo`](hccl_algorithm::ExecutorInfo)),
//! built-in or registered by another crate, that serves the op on the
//! topology: the highest declared score wins (the AIV executors' within
//! `HCCL_RS_AIV_MAX_BYTES`, then the direct-read ones' from
//! `HCCL_RS_DIRECT_MIN_BYTES`, both on one host whose links can), then the
//! lowest predicted time of the α-β-γ model (flat algorithms priced with
//! the link they cross, hierarchical ones with each level's link), then the
//! earliest registration. The selector knows no executor name: it asks the
//! registry. The choice is memoised per (op, bytes) for the topology and
//! the registry's generation, so a repeated op does not rank again. The
//! decision is logged at debug level with every candidate's estimate.

use crate::algo_env::AlgoConfig;
use hccl_algorithm::cost::{Algo, CostParams};
use hccl_algorithm::{
    best, AlgoTag, Candidate, Estimate, ExecutorRegistry, HierKind, OpParam, OpType, SelectLimits,
    SelectQuery, TopoInfo, WorkflowMode,
};
use hccl_platform::{HcclError, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Picks an executor name for an op. The framework only ever handles names;
/// the registry turns them into executors.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    override_name: Option<String>,
    algo: AlgoConfig,
    cost: CostParams,
    /// What the communicator offers the one-host executors.
    limits: SelectLimits,
    memo: Arc<Mutex<SelectionMemo>>,
}

/// The ranking's choices per (op, model bytes), for the topology and the
/// registry (address and generation) they were worked out on: ranking
/// asks every declared executor (the hierarchical ones walk every host and
/// part), too much to redo on every op call, and a communicator's ops
/// repeat a few sizes.
#[derive(Debug, Default)]
struct SelectionMemo {
    rank_to_server: Arc<[u32]>,
    registry: (usize, u64),
    chosen: HashMap<(OpType, u64, bool), Arc<str>>,
}

impl SelectionMemo {
    /// Starts over when the topology or the registry differs from the one
    /// memoised.
    fn for_topo(&mut self, topo: &TopoInfo, registry: (usize, u64)) -> &mut Self {
        if *self.rank_to_server != *topo.rank_to_server || self.registry != registry {
            self.rank_to_server = Arc::clone(&topo.rank_to_server);
            self.registry = registry;
            self.chosen.clear();
        }
        self
    }
}

/// A candidate of the ranking as the tests see it: name and predicted µs.
#[cfg(test)]
type Considered = (String, f64);

/// Entries kept before the memo starts over (a size sweep must not grow it
/// without bound).
const MEMO_CAP: usize = 256;

/// The message size the cost formulas use for `param` on `p` ranks.
///
/// Every rank must pick the same executor, so the size must be one every
/// rank computes alike: a V op's own count differs per rank (a rank with
/// an empty block would pick the small-message executor while its peers
/// pick another, and both wait forever), so AllGatherV and ReduceScatterV
/// count the whole op from their count vectors, which all ranks share.
fn model_bytes(param: &OpParam, p: u32) -> u64 {
    let u = param.dtype.size() as u64;
    let total = |v: &Option<hccl_algorithm::VCounts>| {
        v.as_ref().map(|v| {
            v.counts
                .iter()
                .fold(0u64, |a, &c| a.saturating_add(c))
                .saturating_mul(u)
        })
    };
    match param.op_type {
        OpType::AllGatherV => total(&param.recv_v),
        OpType::ReduceScatterV => total(&param.send_v),
        _ => None,
    }
    .unwrap_or_else(|| hccl_algorithm::model_bytes(param.op_type, param.input_bytes(), p))
}

/// The level-1 algorithm `HCCL_ALGO` names, as the level-1 algorithms
/// name themselves (`Level1Algorithm::algo_name`).
fn level1_name(choice: &str) -> Option<&'static str> {
    Some(match choice {
        "ring" => "ring",
        "H-D_R" => "H-D_R",
        // HCCL's NHR_V1 is an older NHR: the same algorithm here
        "NHR" | "NHR_V1" => "NHR",
        "NB" => "NB",
        _ => return None,
    })
}

/// The flat algorithm `HCCL_ALGO` names (or the multi-ring executors,
/// `multiring`, which run one flat ring per channel).
fn flat_tag(choice: &str) -> Option<AlgoTag> {
    Some(AlgoTag::Flat(match choice {
        "ring" => Algo::Ring,
        "fullmesh" | "mesh" => Algo::Mesh,
        "H-D_R" => Algo::Rhd,
        "pairwise" => Algo::PairWise,
        "star" => Algo::Star,
        "NHR" | "NHR_V1" => Algo::Nhr,
        "NB" => Algo::Nb,
        "multiring" => return Some(AlgoTag::MultiRing),
        _ => return None,
    }))
}

/// The log line's reason for a ranked pick: the winner's estimate (or its
/// declaration's note when a score above the cost model's won) and every
/// candidate's, e.g. `cost model: predicted 12.0us
/// (AllReduceRingExecutor=20.5us, AllReduceMeshExecutor=12.0us, ...)`.
fn rank_reason(candidates: &[Candidate], i: usize) -> String {
    let list: Vec<String> = candidates
        .iter()
        .map(|c| {
            let e = &c.estimate;
            if e.score == Estimate::MODEL_SCORE {
                format!("{}={:.1}us", c.name, e.micros)
            } else {
                format!("{}={:.1}us score {}", c.name, e.micros, e.score)
            }
        })
        .collect();
    let (won, list) = (&candidates[i], list.join(", "));
    if won.estimate.score == Estimate::MODEL_SCORE {
        format!(
            "cost model: predicted {:.1}us ({list})",
            won.estimate.micros
        )
    } else {
        format!(
            "{}: declared score {} ({list})",
            won.note.unwrap_or("declared score"),
            won.estimate.score
        )
    }
}

impl Selector {
    /// On a multi-host communicator, the hierarchical executor `HCCL_ALGO`
    /// asks for: `level1:AHC`, `level1:pipeline`, or a level-1 algorithm
    /// (`ring`, `H-D_R`, `NHR`/`NHR_V1`, `NB`) for the TwoLevel executor
    /// of the op, when the registry has one answering it. Otherwise `None`
    /// (the flat mapping applies).
    fn hierarchical_choice(
        &self,
        op: OpType,
        topo: &TopoInfo,
        registry: &ExecutorRegistry,
    ) -> Option<(String, String)> {
        if topo.server_num() <= 1 {
            return None;
        }
        let choice = self.algo.for_op(op.name())?.level1.clone()?;
        let tag = match choice.as_str() {
            "AHC" => AlgoTag::Hier(HierKind::Ahc, "ring"),
            "pipeline" => AlgoTag::Hier(HierKind::Pipeline, "ring"),
            other => AlgoTag::Hier(HierKind::TwoLevel, level1_name(other)?),
        };
        let name = registry.forced(op, tag)?;
        Some((
            name.to_string(),
            format!("HCCL_ALGO level1:{choice} on {} hosts", topo.server_num()),
        ))
    }

    /// A selector; `override_name` forces one executor for every op, `algo`
    /// is the parsed `HCCL_ALGO`.
    pub fn new(override_name: Option<String>, algo: AlgoConfig) -> Self {
        Self::with_cost(override_name, algo, CostParams::default())
    }

    /// A selector whose cost model uses `cost` (e.g. calibrated by
    /// `hccl-test --calibrate`).
    pub fn with_cost(override_name: Option<String>, algo: AlgoConfig, cost: CostParams) -> Self {
        Selector {
            override_name,
            algo,
            cost,
            limits: SelectLimits::default(),
            memo: Arc::default(),
        }
    }

    /// Lets the selector pick the direct-read executors (peers' user
    /// buffers read with cross-memory attach) for ops of at least
    /// `min_bytes` on one host. Only for communicators whose every link
    /// can read peers' buffers.
    pub fn with_direct(mut self, min_bytes: Option<u64>) -> Self {
        self.limits.direct_min_bytes = min_bytes;
        // choices memoised under other limits no longer hold (a clone
        // shares the memo)
        self.memo = Arc::default();
        self
    }

    /// Lets the selector pick the AIV executors (one kernel task over the
    /// ranks' boards) for ops of at most `max_bytes` on one host. Only for
    /// communicators whose every link reaches the boards.
    pub fn with_aiv(mut self, max_bytes: Option<u64>) -> Self {
        self.limits.aiv_max_bytes = max_bytes;
        self.memo = Arc::default();
        self
    }

    /// Every declared executor of `registry` serving `op` of `bytes` (as
    /// the formulas count them) on `topo`, with its estimate, in
    /// registration order, and the index of the best.
    fn rank(
        &self,
        op: OpType,
        topo: &TopoInfo,
        bytes: u64,
        registry: &ExecutorRegistry,
        graph: bool,
    ) -> (Vec<Candidate>, Option<usize>) {
        let q = SelectQuery::new(op, topo, bytes, &self.cost, self.limits_for(graph));
        let candidates = registry.candidates(&q);
        let i = best(&candidates);
        (candidates, i)
    }

    /// What the selector picks for `op` at a few message sizes on `topo`
    /// (`8 B: Name, 64 KiB: Name, ...`), or what forces the choice, for
    /// the communicator's init log.
    pub(crate) fn summary(
        &self,
        op: OpType,
        topo: &TopoInfo,
        registry: &ExecutorRegistry,
    ) -> String {
        if let Some(n) = &self.override_name {
            return format!("{n} (HCCL_RS_EXECUTOR)");
        }
        if self.algo.for_op(op.name()).is_some() {
            return "as HCCL_ALGO says".into();
        }
        let sizes: [(u64, &str); 4] = [
            (8, "8 B"),
            (64 << 10, "64 KiB"),
            (1 << 20, "1 MiB"),
            (64 << 20, "64 MiB"),
        ];
        sizes
            .iter()
            .map(|&(bytes, label)| {
                let (c, i) = self.rank(op, topo, bytes, registry, false);
                let name = i.map_or("none", |i| c[i].name.as_ref());
                format!("{label}: {name}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether ops of this communicator can run in graph mode: every peer
    /// is on this host and its link can reach the peers' user buffers
    /// (the direct executors are offered).
    pub fn graph_capable(&self) -> bool {
        self.limits.direct_min_bytes.is_some()
    }

    /// The limits of an op in graph mode (`graph`) or op-base mode: in
    /// graph mode the direct executors serve every size the AIV kernels
    /// do not (the user buffers are registered: reading them is the
    /// single copy), and the direct Send / Receive are offered.
    fn limits_for(&self, graph: bool) -> SelectLimits {
        let mut limits = self.limits;
        if graph && self.graph_capable() {
            limits.direct_min_bytes = Some(0);
            limits.graph = true;
        }
        limits
    }

    /// The executor name for `param` on `topo`, checked against `registry`.
    pub fn select(
        &self,
        param: &OpParam,
        topo: &TopoInfo,
        registry: &ExecutorRegistry,
    ) -> Result<String> {
        let op = param.op_type;
        let p = topo.user_rank_size;
        let multi_server = topo.server_num() > 1;
        let bytes = model_bytes(param, p);
        let graph = param.mode == WorkflowMode::Graph;
        let mut ranked_at = None;
        let (name, why) = if let Some(n) = &self.override_name {
            (n.clone(), String::from("HCCL_RS_EXECUTOR"))
        } else if let Some((n, why)) = self.hierarchical_choice(op, topo, registry) {
            (n, why)
        } else if let Some(choice) = self.algo.for_op(op.name()).and_then(|l| {
            if multi_server {
                l.level1.clone()
            } else {
                l.level0.clone()
            }
        }) {
            let level = if multi_server { "level1" } else { "level0" };
            let name = flat_tag(&choice)
                .and_then(|tag| registry.forced(op, tag))
                .ok_or_else(|| {
                    HcclError::not_support(format!(
                        "HCCL_ALGO asks for {level} algorithm '{choice}' for {op}, which hccl-rs does not implement for it yet"
                    ))
                })?;
            (name.to_string(), format!("HCCL_ALGO {level}:{choice}"))
        } else {
            let generation = (
                registry as *const ExecutorRegistry as usize,
                registry.generation(),
            );
            let memoised = self
                .memo
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .for_topo(topo, generation)
                .chosen
                .get(&(op, bytes, graph))
                .cloned();
            if let Some(name) = memoised {
                return Ok(name.to_string());
            }
            let (candidates, best) = self.rank(op, topo, bytes, registry, graph);
            let i = best.ok_or_else(|| {
                HcclError::not_support(format!(
                    "no executor implements {op} on {p} ranks ({} hosts): none registered declares it",
                    topo.server_num()
                ))
            })?;
            ranked_at = Some(generation);
            // formatting the reason costs more than the selection: only
            // when it will be logged
            let why = if tracing::enabled!(tracing::Level::DEBUG) {
                rank_reason(&candidates, i)
            } else {
                String::new()
            };
            (candidates[i].name.to_string(), why)
        };
        if !registry.contains(&name) {
            return Err(HcclError::not_found(format!(
                "selected executor '{name}' is not registered (known: {})",
                registry.names().join(", ")
            )));
        }
        tracing::debug!(tag = %param.tag, %op, ranks = p, servers = topo.server_num(), bytes, executor = %name, reason = %why, "selected executor");
        if let Some(generation) = ranked_at {
            let mut guard = self.memo.lock().unwrap_or_else(|p| p.into_inner());
            let memo = guard.for_topo(topo, generation);
            if memo.chosen.len() >= MEMO_CAP {
                memo.chosen.clear();
            }
            memo.chosen
                .insert((op, bytes, graph), Arc::from(name.as_str()));
        }
        Ok(name)
    }

    /// The ranking's pick for `op` of `bytes` on `topo` as (name,
    /// predicted µs, every candidate with its prediction).
    #[cfg(test)]
    fn by_cost(
        &self,
        op: OpType,
        topo: &TopoInfo,
        bytes: u64,
        registry: &ExecutorRegistry,
    ) -> Result<(String, f64, Vec<Considered>)> {
        let (c, i) = self.rank(op, topo, bytes, registry, false);
        let i = i.ok_or_else(|| HcclError::not_support(format!("no executor implements {op}")))?;
        let all = c
            .iter()
            .map(|c| (c.name.to_string(), c.estimate.micros))
            .collect();
        Ok((c[i].name.to_string(), c[i].estimate.micros, all))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algorithm::cost::predict;
    use hccl_platform::{DataType, Device, DeviceConfig, DeviceMem, ReduceOp, Stream};
    use std::sync::{Arc, Mutex};

    fn pick(algo: &str, op: OpType, p: u32, count: u64) -> Result<String> {
        pick_with(algo, op, count, vec![0; p as usize])
    }

    /// The selection for `count` elements on ranks on hosts `map`.
    fn pick_with(algo: &str, op: OpType, count: u64, map: Vec<u32>) -> Result<String> {
        pick_full(algo, op, count, map, CostParams::default())
    }

    /// The selection on one host of `p` ranks with cost parameters `cost`.
    fn pick_cost(algo: &str, op: OpType, p: u32, count: u64, cost: CostParams) -> Result<String> {
        pick_full(algo, op, count, vec![0; p as usize], cost)
    }

    fn pick_full(
        algo: &str,
        op: OpType,
        count: u64,
        map: Vec<u32>,
        cost: CostParams,
    ) -> Result<String> {
        let param = param(op, count);
        let algo = if algo.is_empty() {
            AlgoConfig::default()
        } else {
            AlgoConfig::parse(algo)?
        };
        let topo = TopoInfo::new(0, map)?;
        Selector::with_cost(None, algo, cost).select(&param, &topo, hccl_algorithm::registry())
    }

    /// Calibrated parameters change decisions: on a latency-bound machine
    /// the 16 MiB reduce takes mesh's single step, on a bandwidth-bound one
    /// the chain that spreads the reduction.
    #[test]
    fn calibrated_parameters_steer_the_choice() {
        use hccl_algorithm::cost::LinkParams;
        let latency_bound = CostParams {
            level0: LinkParams::new(10_000.0, 1000.0),
            level1: LinkParams::new(10_000.0, 1000.0),
            gamma_us_per_byte: 1e-9,
            host_gbps: None,
        };
        let bandwidth_bound = CostParams {
            level0: LinkParams::new(0.001, 0.01),
            level1: LinkParams::new(0.001, 0.01),
            gamma_us_per_byte: 1e-3,
            host_gbps: None,
        };
        let a = pick_cost("", OpType::Reduce, 8, 4 << 20, latency_bound).unwrap();
        let b = pick_cost("", OpType::Reduce, 8, 4 << 20, bandwidth_bound).unwrap();
        assert_ne!(a, b, "the tuning must be able to change the decision");
        assert_eq!(b, "ReduceRingExecutor");
    }

    /// The cost model picks the rooted ring and RHD executors where their
    /// formulas are cheapest, and mesh (not star, which costs the same)
    /// for small rooted ops.
    #[test]
    fn the_cost_model_picks_the_new_executors_where_they_win() {
        // 64 MiB reduce on 8 ranks: mesh makes the root reduce 7 copies,
        // the chain spreads them
        assert_eq!(
            pick("", OpType::Reduce, 8, 16 << 20).unwrap(),
            "ReduceRingExecutor"
        );
        // 16 KiB broadcast on 8 ranks: 3 tree steps beat 7 root sends and
        // 14 chain steps
        assert_eq!(
            pick("", OpType::Broadcast, 8, 4096).unwrap(),
            "BroadcastRHDExecutor"
        );
        for op in [OpType::Broadcast, OpType::Scatter, OpType::Gather] {
            assert!(
                pick("", op, 8, 4).unwrap().ends_with("MeshExecutor"),
                "{op}"
            );
        }
    }

    /// `multiring` on either level forces the multi-ring executor of the
    /// ops that have one (on one host through level 0, on several through
    /// level 1); without it the ranking never picks them.
    #[test]
    fn hccl_algo_multiring_selects_the_multi_ring_executors() {
        let two = vec![0, 0, 1, 1, 1];
        for op in [
            OpType::AllReduce,
            OpType::AllGather,
            OpType::ReduceScatter,
            OpType::Broadcast,
            OpType::Reduce,
        ] {
            let want = format!("{}MultiRingExecutor", hier_prefix(op));
            assert_eq!(pick_on("level1:multiring", op, two.clone()).unwrap(), want);
            assert_eq!(pick_on("level0:multiring", op, vec![0; 3]).unwrap(), want);
            for count in [100u64, 16 << 20] {
                let got = pick_with("", op, count, two.clone()).unwrap();
                assert!(!got.contains("MultiRing"), "{op} {count}: {got}");
            }
        }
        let e = pick_on("level1:multiring", OpType::AllToAll, two).unwrap_err();
        assert_eq!(e.code(), hccl_platform::HcclResult::ENotSupport);
        assert!(
            e.to_string()
                .contains("level1 algorithm 'multiring' for alltoall"),
            "{e}"
        );
    }

    /// The op as executor names spell it.
    fn hier_prefix(op: OpType) -> &'static str {
        match op {
            OpType::AllReduce => "AllReduce",
            OpType::AllGather => "AllGather",
            OpType::ReduceScatter => "ReduceScatter",
            OpType::Broadcast => "Broadcast",
            _ => "Reduce",
        }
    }

    fn pick_on(algo: &str, op: OpType, map: Vec<u32>) -> Result<String> {
        pick_with(algo, op, 100, map)
    }

    /// HCCL_ALGO's level-1 names pick the hierarchical executors on
    /// several hosts, and the flat ones on one host.
    #[test]
    fn hccl_algo_level1_selects_hierarchical_executors_across_hosts() {
        let two = vec![0, 0, 1, 1, 1];
        for (algo, op, name) in [
            (
                "level1:ring",
                OpType::AllReduce,
                "AllReduceTwoLevelExecutor",
            ),
            (
                "level1:H-D_R",
                OpType::AllReduce,
                "AllReduceTwoLevelRHDExecutor",
            ),
            (
                "level1:NHR",
                OpType::AllReduce,
                "AllReduceTwoLevelNHRExecutor",
            ),
            (
                "level1:NHR_V1",
                OpType::AllReduce,
                "AllReduceTwoLevelNHRExecutor",
            ),
            (
                "level1:NB",
                OpType::AllReduce,
                "AllReduceTwoLevelNBExecutor",
            ),
            (
                "level1:ring",
                OpType::AllGather,
                "AllGatherTwoLevelExecutor",
            ),
            (
                "level1:ring",
                OpType::ReduceScatter,
                "ReduceScatterTwoLevelExecutor",
            ),
            ("level1:AHC", OpType::AllReduce, "AllReduceAHCExecutor"),
            (
                "level1:AHC",
                OpType::ReduceScatter,
                "ReduceScatterAHCExecutor",
            ),
            (
                "level1:pipeline",
                OpType::AllReduce,
                "AllReducePipelineExecutor",
            ),
            (
                "allgather=level1:pipeline",
                OpType::AllGather,
                "AllGatherPipelineExecutor",
            ),
            (
                "level1:pipeline",
                OpType::ReduceScatter,
                "ReduceScatterPipelineExecutor",
            ),
            // no hierarchical variant: the flat mapping
            ("level1:H-D_R", OpType::Broadcast, "BroadcastRHDExecutor"),
            ("level1:NHR", OpType::AllGather, "AllGatherNHRExecutor"),
            ("level1:NB", OpType::Scatter, "ScatterNBExecutor"),
        ] {
            assert_eq!(pick_on(algo, op, two.clone()).unwrap(), name, "{algo} {op}");
        }
        // one host: level 1 does not apply
        let flat = pick_on("level1:ring", OpType::AllReduce, vec![0; 4]).unwrap();
        assert!(!flat.contains("TwoLevel"), "{flat}");
        let e = pick_on("level1:AHC", OpType::AllGather, two).unwrap_err();
        assert!(e.to_string().contains("'AHC' for allgather"), "{e}");
    }

    /// NHR wins where the model says so: large allreduces on rank counts
    /// where ring needs p−1 steps and RHD folds; at p = 2, 3 ring (first
    /// in the tie) keeps it, and NB, costed the same, never displaces NHR.
    #[test]
    fn the_cost_model_picks_nhr_where_it_wins() {
        for p in [5u32, 6, 12] {
            assert_eq!(
                pick("", OpType::AllReduce, p, 16 << 20).unwrap(),
                "AllReduceNHRExecutor",
                "p={p}"
            );
        }
        // p = 2 and 3: ⌈log2 p⌉ = p − 1, a tie
        for p in [2u32, 3] {
            assert_eq!(
                pick("", OpType::AllReduce, p, 16 << 20).unwrap(),
                "AllReduceRingExecutor"
            );
        }
        // small allreduce: one mesh step beats 2⌈log2 p⌉
        assert_eq!(
            pick("", OpType::AllReduce, 6, 4).unwrap(),
            "AllReduceMeshExecutor"
        );
        // the mesh moves as little in one step for these
        for op in [OpType::AllGather, OpType::ReduceScatter, OpType::Scatter] {
            assert!(
                pick("", op, 6, 1 << 20).unwrap().ends_with("MeshExecutor"),
                "{op}"
            );
        }
        let d = CostParams::default();
        for (op, n) in [
            (OpType::AllReduce, 1u64 << 26),
            (OpType::Broadcast, 16 << 10),
        ] {
            let t = |a| predict(a, op, 12, n, d.level0, d.gamma_us_per_byte).unwrap();
            assert!(t(Algo::Nhr) < t(Algo::Ring), "{op}");
            assert_eq!(t(Algo::Nhr), t(Algo::Nb), "{op}");
        }
    }

    #[test]
    fn hccl_algo_nhr_and_nb_select_their_executors() {
        for (algo, name) in [("NHR", "NHR"), ("NHR_V1", "NHR"), ("NB", "NB")] {
            for (op, prefix) in [
                (OpType::AllReduce, "AllReduce"),
                (OpType::AllGather, "AllGather"),
                (OpType::ReduceScatter, "ReduceScatter"),
                (OpType::Broadcast, "Broadcast"),
                (OpType::Scatter, "Scatter"),
            ] {
                assert_eq!(
                    pick(&format!("level0:{algo}"), op, 5, 100).unwrap(),
                    format!("{prefix}{name}Executor")
                );
            }
            let e = pick(&format!("level0:{algo}"), OpType::Gather, 5, 100).unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "level0 algorithm '{algo}' for gather, which hccl-rs does not implement"
                )),
                "{e}"
            );
        }
        assert_eq!(
            pick("allgather=level0:NB", OpType::AllGather, 7, 100).unwrap(),
            "AllGatherNBExecutor"
        );
    }

    #[test]
    fn hccl_algo_star_selects_star_executors_for_rooted_ops_only() {
        for (op, name) in [
            (OpType::Broadcast, "BroadcastStarExecutor"),
            (OpType::Reduce, "ReduceStarExecutor"),
            (OpType::Scatter, "ScatterStarExecutor"),
            (OpType::Gather, "GatherStarExecutor"),
        ] {
            assert_eq!(pick("level0:star", op, 4, 100).unwrap(), name);
        }
        let e = pick("level0:star", OpType::AllGather, 4, 100).unwrap_err();
        assert!(
            e.to_string().contains(
                "level0 algorithm 'star' for allgather, which hccl-rs does not implement"
            ),
            "{e}"
        );
        assert_eq!(
            pick("scatter=level0:ring", OpType::Scatter, 4, 100).unwrap(),
            "ScatterRingExecutor"
        );
    }

    /// A (non-null) op param for `count` fp32 elements.
    fn param(op: OpType, count: u64) -> OpParam<'static> {
        let device = Device::new(0, DeviceConfig::default());
        OpParam::new(
            "t",
            op,
            Stream::new(&device),
            DeviceMem::null(),
            DeviceMem::null(),
            count,
            DataType::Fp32,
            ReduceOp::Sum,
            0,
        )
    }

    fn is_hier(name: &str) -> bool {
        ["TwoLevel", "AHC", "Pipeline"]
            .iter()
            .any(|k| name.contains(k))
    }

    /// Without HCCL_ALGO, several hosts put the hierarchical executors in
    /// the ranking: small messages stay on the flat mesh (one inter-host
    /// step beats a level-0 phase plus level-1 steps), large ones go
    /// hierarchical, Pipeline first since it overlaps the levels, and
    /// TwoLevel/AHC beat every flat algorithm except the 2 + 3
    /// reduce-scatter, where one rank carries two parts. One selector serves
    /// both topologies (its memo follows the topology).
    #[test]
    fn the_cost_model_ranks_hierarchical_executors_across_hosts() {
        let reg = hccl_algorithm::registry();
        let sel = Selector::new(None, AlgoConfig::default());
        for map in [vec![0, 0, 0, 0, 1, 1, 1, 1], vec![0, 0, 1, 1, 1]] {
            let topo = TopoInfo::new(0, map.clone()).unwrap();
            for (op, prefix) in [
                (OpType::AllReduce, "AllReduce"),
                (OpType::AllGather, "AllGather"),
                (OpType::ReduceScatter, "ReduceScatter"),
            ] {
                let small = sel.select(&param(op, 4), &topo, reg).unwrap();
                assert_eq!(small, format!("{prefix}MeshExecutor"), "{map:?} {op}");
                let large = sel.select(&param(op, 16 << 20), &topo, reg).unwrap();
                assert_eq!(large, format!("{prefix}PipelineExecutor"), "{map:?} {op}");
                let bytes = model_bytes(&param(op, 16 << 20), topo.user_rank_size);
                let (_, t, considered) = sel.by_cost(op, &topo, bytes, reg).unwrap();
                // (the multi-ring executors rank below every prediction,
                // at their provisional score: not part of this comparison)
                let best = |hier: bool| {
                    considered
                        .iter()
                        .filter(|(n, _)| is_hier(n) == hier && !n.contains("Pipeline"))
                        .filter(|(n, _)| !n.contains("MultiRing"))
                        .map(|&(_, t)| t)
                        .fold(f64::INFINITY, f64::min)
                };
                assert!(t < best(true), "{map:?} {op}: pipeline wins");
                // on 2 + 3 ranks the TwoLevel reduce-scatter's stand-in
                // rank sends and reduces two parts: the flat mesh beats it
                if map.len() == 5 && op == OpType::ReduceScatter {
                    assert!(best(true) > best(false), "{map:?} {op}: {considered:?}");
                } else {
                    assert!(best(true) < best(false), "{map:?} {op}: {considered:?}");
                }
                let fresh = Selector::new(None, AlgoConfig::default());
                assert_eq!(
                    fresh.select(&param(op, 16 << 20), &topo, reg).unwrap(),
                    large
                );
            }
            // every level-1 algorithm of TwoLevel and AHC is ranked for allreduce
            let (.., considered) = sel.by_cost(OpType::AllReduce, &topo, 1 << 20, reg).unwrap();
            for name in [
                "AllReduceTwoLevelExecutor",
                "AllReduceTwoLevelRHDExecutor",
                "AllReduceTwoLevelNHRExecutor",
                "AllReduceTwoLevelNBExecutor",
                "AllReduceAHCExecutor",
                "AllReduceAHCNHRExecutor",
                "AllReducePipelineExecutor",
            ] {
                assert!(considered.iter().any(|(n, _)| n == name), "{name}");
            }
        }
        // one host: flat candidates only
        let one = TopoInfo::new(0, vec![0; 8]).unwrap();
        let (.., considered) = sel.by_cost(OpType::AllReduce, &one, 64 << 20, reg).unwrap();
        assert!(
            considered.iter().all(|(n, _)| !is_hier(n)),
            "{considered:?}"
        );
    }

    /// An executor registered without a declaration is never ranked,
    /// whatever the op and size, only forced by name; one registered with
    /// a declaration is ranked at once, even after the choice for its op
    /// was memoised (the memo follows the registry's generation), and
    /// below the AIV executors' score.
    #[test]
    fn only_declared_executors_are_ranked() {
        use hccl_algorithm::{Estimate, ExecutorFactory, ExecutorInfo};
        let reg = ExecutorRegistry::with_builtins();
        // any plain executor will do: the built-in ring, built by name
        let f: ExecutorFactory = Arc::new(|t: &TopoInfo| {
            hccl_algorithm::registry()
                .create("AllReduceRingExecutor", t)
                .expect("a built-in executor")
        });
        reg.register("PlainTestExecutor", f.clone()).unwrap();
        let sel = Selector::new(None, AlgoConfig::default())
            .with_aiv(Some(16456))
            .with_direct(Some(256 << 10));
        for map in [vec![0; 4], vec![0, 0, 1, 1]] {
            let topo = TopoInfo::new(0, map).unwrap();
            for op in [OpType::AllReduce, OpType::AllGather, OpType::AllToAllV] {
                for count in [1u64, 1000, 1 << 16, 1 << 20] {
                    let name = sel.select(&param(op, count), &topo, &reg).unwrap();
                    assert_ne!(name, "PlainTestExecutor");
                }
            }
        }
        let topo = TopoInfo::single_server(0, 4).unwrap();
        let mid = param(OpType::AllReduce, 1 << 14);
        assert_ne!(sel.select(&mid, &topo, &reg).unwrap(), "CheapTestExecutor");
        let cheap = ExecutorInfo::new(&[OpType::AllReduce], |_| Some(Estimate::predicted(0.0)));
        reg.register_with("CheapTestExecutor", f, cheap).unwrap();
        assert_eq!(sel.select(&mid, &topo, &reg).unwrap(), "CheapTestExecutor");
        assert_eq!(
            sel.select(&param(OpType::AllReduce, 4), &topo, &reg)
                .unwrap(),
            "AllReduceMeshAivExecutor"
        );
        let forced = Selector::new(Some("PlainTestExecutor".into()), AlgoConfig::default());
        assert_eq!(
            forced.select(&mid, &topo, &reg).unwrap(),
            "PlainTestExecutor"
        );
    }

    /// A writer the test's tracing subscriber appends to.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The debug log line of a cost-model decision names the chosen
    /// executor and every candidate's predicted time, hierarchical ones
    /// included.
    #[test]
    fn the_decision_log_names_predicted_times() {
        let out = Captured::default();
        let w = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        let topo = TopoInfo::new(0, vec![0, 0, 0, 0, 1, 1, 1, 1]).unwrap();
        let name = tracing::subscriber::with_default(subscriber, || {
            Selector::new(None, AlgoConfig::default())
                .select(
                    &param(OpType::AllReduce, 16 << 20),
                    &topo,
                    hccl_algorithm::registry(),
                )
                .unwrap()
        });
        let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("selected executor"))
            .unwrap_or_else(|| panic!("no decision line in {log:?}"));
        assert!(line.contains(&format!("executor={name}")), "{line}");
        assert!(line.contains("reason=cost model: predicted "), "{line}");
        for candidate in [
            "AllReduceRingExecutor=",
            "AllReduceMeshExecutor=",
            "AllReduceTwoLevelNHRExecutor=",
            "AllReduceAHCNBExecutor=",
            "AllReducePipelineExecutor=",
        ] {
            let at = line
                .find(candidate)
                .unwrap_or_else(|| panic!("{candidate}: {line}"));
            let time = &line[at + candidate.len()..];
            let end = time.find("us").unwrap_or_else(|| panic!("{line}"));
            time[..end]
                .parse::<f64>()
                .unwrap_or_else(|e| panic!("{candidate} {e}: {line}"));
        }
    }
}
