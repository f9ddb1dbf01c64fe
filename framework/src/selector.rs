//! Algorithm selection: which executor runs an op.
//!
//! In order: a forced executor name (`HCCL_RS_EXECUTOR`); the user's
//! `HCCL_ALGO` for the op and the level that matters for the topology
//! (level 1 when the communicator spans servers, else level 0); otherwise
//! the α-β-γ cost model picks the cheapest implemented algorithm for the op
//! and message size. The decision is logged at debug level with the
//! predicted time of each candidate.

use crate::algo_env::AlgoConfig;
use hccl_algorithm::cost::{predict, Algo, CostParams};
use hccl_algorithm::{ExecutorRegistry, OpParam, OpType, TopoInfo};
use hccl_platform::{HcclError, Result};

/// Picks an executor name for an op. The framework only ever handles names;
/// the registry turns them into executors.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    override_name: Option<String>,
    algo: AlgoConfig,
    cost: CostParams,
}

/// The executor implementing `algo` for `op`, if there is one.
pub fn executor_name(algo: Algo, op: OpType) -> Option<&'static str> {
    Some(match (algo, op) {
        (Algo::Ring, OpType::AllReduce) => "AllReduceRingExecutor",
        (Algo::Rhd, OpType::AllReduce) => "AllReduceRHDExecutor",
        (Algo::Ring, OpType::Broadcast) => "BroadcastRingExecutor",
        (Algo::PairWise, OpType::AllToAll) => "AllToAllPairWiseExecutor",
        (Algo::PairWise, OpType::AllToAllV) => "AllToAllVPairWiseExecutor",
        (Algo::Ring, OpType::AllGather) => "AllGatherRingExecutor",
        (Algo::Ring, OpType::ReduceScatter) => "ReduceScatterRingExecutor",
        (Algo::Mesh, OpType::AllReduce) => "AllReduceMeshExecutor",
        (Algo::Mesh, OpType::AllGather) => "AllGatherMeshExecutor",
        (Algo::Mesh, OpType::AllGatherV) => "AllGatherVMeshExecutor",
        (Algo::Mesh, OpType::ReduceScatter) => "ReduceScatterMeshExecutor",
        (Algo::Mesh, OpType::ReduceScatterV) => "ReduceScatterVMeshExecutor",
        (Algo::Mesh, OpType::Broadcast) => "BroadcastMeshExecutor",
        (Algo::Mesh, OpType::Reduce) => "ReduceMeshExecutor",
        (Algo::Mesh, OpType::Scatter) => "ScatterMeshExecutor",
        (Algo::Mesh, OpType::Gather) => "GatherMeshExecutor",
        (Algo::Mesh, OpType::AllToAll) => "AllToAllMeshExecutor",
        (Algo::Mesh, OpType::AllToAllV) => "AllToAllVMeshExecutor",
        (Algo::Mesh, OpType::Send) => "SendExecutor",
        (Algo::Mesh, OpType::Receive) => "ReceiveExecutor",
        (Algo::Ring, OpType::Reduce) => "ReduceRingExecutor",
        (Algo::Ring, OpType::Scatter) => "ScatterRingExecutor",
        (Algo::Ring, OpType::Gather) => "GatherRingExecutor",
        (Algo::Star, OpType::Broadcast) => "BroadcastStarExecutor",
        (Algo::Star, OpType::Reduce) => "ReduceStarExecutor",
        (Algo::Star, OpType::Scatter) => "ScatterStarExecutor",
        (Algo::Star, OpType::Gather) => "GatherStarExecutor",
        (Algo::Rhd, OpType::AllGather) => "AllGatherRHDExecutor",
        (Algo::Rhd, OpType::ReduceScatter) => "ReduceScatterRHDExecutor",
        (Algo::Rhd, OpType::Broadcast) => "BroadcastRHDExecutor",
        (Algo::Rhd, OpType::Reduce) => "ReduceRHDExecutor",
        (Algo::Nhr, OpType::AllReduce) => "AllReduceNHRExecutor",
        (Algo::Nhr, OpType::AllGather) => "AllGatherNHRExecutor",
        (Algo::Nhr, OpType::ReduceScatter) => "ReduceScatterNHRExecutor",
        (Algo::Nhr, OpType::Broadcast) => "BroadcastNHRExecutor",
        (Algo::Nhr, OpType::Scatter) => "ScatterNHRExecutor",
        (Algo::Nb, OpType::AllReduce) => "AllReduceNBExecutor",
        (Algo::Nb, OpType::AllGather) => "AllGatherNBExecutor",
        (Algo::Nb, OpType::ReduceScatter) => "ReduceScatterNBExecutor",
        (Algo::Nb, OpType::Broadcast) => "BroadcastNBExecutor",
        (Algo::Nb, OpType::Scatter) => "ScatterNBExecutor",
        _ => return None,
    })
}

/// The message size the cost formulas use for `param` on `p` ranks.
fn model_bytes(param: &OpParam, p: u32) -> u64 {
    let n = param.input_bytes();
    match param.op_type {
        OpType::AllGather | OpType::ReduceScatter | OpType::AllToAll => n * p as u64,
        _ => n,
    }
}

impl Selector {
    /// A selector; `override_name` forces one executor for every op, `algo`
    /// is the parsed `HCCL_ALGO`.
    pub fn new(override_name: Option<String>, algo: AlgoConfig) -> Self {
        Selector {
            override_name,
            algo,
            cost: CostParams::default(),
        }
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
        let link = if multi_server {
            self.cost.level1
        } else {
            self.cost.level0
        };
        let bytes = model_bytes(param, p);
        let (name, why) = if let Some(n) = &self.override_name {
            (n.clone(), String::from("HCCL_RS_EXECUTOR"))
        } else if let Some(choice) = self.algo.for_op(op.name()).and_then(|l| {
            if multi_server {
                l.level1.clone()
            } else {
                l.level0.clone()
            }
        }) {
            let algo = match choice.as_str() {
                "ring" => Some(Algo::Ring),
                "fullmesh" | "mesh" => Some(Algo::Mesh),
                "H-D_R" => Some(Algo::Rhd),
                "pairwise" => Some(Algo::PairWise),
                "star" => Some(Algo::Star),
                // HCCL's NHR_V1 is an older NHR: the same algorithm here
                "NHR" | "NHR_V1" => Some(Algo::Nhr),
                "NB" => Some(Algo::Nb),
                _ => None,
            };
            let level = if multi_server { "level1" } else { "level0" };
            let name = algo.and_then(|a| executor_name(a, op)).ok_or_else(|| {
                HcclError::not_support(format!(
                    "HCCL_ALGO asks for {level} algorithm '{choice}' for {op}, which hccl-rs does not implement for it yet"
                ))
            })?;
            (name.to_owned(), format!("HCCL_ALGO {level}:{choice}"))
        } else {
            let mut best: Option<(f64, Algo)> = None;
            let mut considered = Vec::new();
            // Star after Mesh and NB after NHR: they cost the same in the
            // model, and a tie keeps the first (so does Ring over NHR at p = 2, 3)
            for algo in [
                Algo::Ring,
                Algo::Mesh,
                Algo::Rhd,
                Algo::Star,
                Algo::Nhr,
                Algo::Nb,
            ] {
                if executor_name(algo, op).is_none() {
                    continue;
                }
                let t = predict(algo, op, p, bytes, link, self.cost.gamma_us_per_byte)
                    .unwrap_or(f64::INFINITY);
                considered.push((algo, t));
                if best.is_none_or(|(bt, _)| t < bt) {
                    best = Some((t, algo));
                }
            }
            let (t, algo) =
                best.ok_or_else(|| HcclError::not_support(format!("no executor implements {op}")))?;
            let name = executor_name(algo, op).expect("filtered above");
            // formatting the reason costs more than the selection: only
            // when it will be logged
            let why = if tracing::enabled!(tracing::Level::DEBUG) {
                let c: Vec<String> = considered
                    .iter()
                    .map(|(a, t)| format!("{a:?}={t:.1}us"))
                    .collect();
                format!("cost model: predicted {t:.1}us ({})", c.join(", "))
            } else {
                String::new()
            };
            (name.to_owned(), why)
        };
        if !registry.contains(&name) {
            return Err(HcclError::not_found(format!(
                "selected executor '{name}' is not registered (known: {})",
                registry.names().join(", ")
            )));
        }
        tracing::debug!(tag = %param.tag, %op, ranks = p, servers = topo.server_num(), bytes, executor = %name, reason = %why, "selected executor");
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_platform::{DataType, Device, DeviceConfig, DeviceMem, ReduceOp, Stream};

    fn pick(algo: &str, op: OpType, p: u32, count: u64) -> Result<String> {
        let device = Device::new(0, DeviceConfig::default());
        let param = OpParam::new(
            "t",
            op,
            Stream::new(&device),
            DeviceMem::null(),
            DeviceMem::null(),
            count,
            DataType::Fp32,
            ReduceOp::Sum,
            0,
        );
        let algo = if algo.is_empty() {
            AlgoConfig::default()
        } else {
            AlgoConfig::parse(algo)?
        };
        let topo = TopoInfo::single_server(0, p)?;
        Selector::new(None, algo).select(&param, &topo, hccl_algorithm::registry())
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
}
