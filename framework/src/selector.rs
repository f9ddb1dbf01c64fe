//! Algorithm selection: which executor runs an op.

use hccl_algorithm::executor::{
    AllGatherRingExecutor, AllReduceRingExecutor, ReduceScatterRingExecutor,
};
use hccl_algorithm::{ExecutorRegistry, OpParam, OpType, TopoInfo};
use hccl_platform::{HcclError, Result};

/// Picks an executor name for an op. The framework only ever handles names;
/// the registry turns them into executors.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    override_name: Option<String>,
}

impl Selector {
    /// A selector; `override_name` (from `HCCL_RS_EXECUTOR` or the config)
    /// forces one executor for every op.
    pub fn new(override_name: Option<String>) -> Self {
        Selector { override_name }
    }

    /// The executor name for `param` on `topo`, checked against `registry`.
    pub fn select(
        &self,
        param: &OpParam,
        topo: &TopoInfo,
        registry: &ExecutorRegistry,
    ) -> Result<String> {
        let name = match &self.override_name {
            Some(n) => n.clone(),
            None => default_executor(param, topo)?.to_owned(),
        };
        if !registry.contains(&name) {
            return Err(HcclError::not_found(format!(
                "selected executor '{name}' is not registered (known: {})",
                registry.names().join(", ")
            )));
        }
        tracing::debug!(
            tag = %param.tag,
            op = %param.op_type,
            ranks = topo.user_rank_size,
            bytes = param.input_bytes(),
            executor = %name,
            forced = self.override_name.is_some(),
            "selected executor"
        );
        Ok(name)
    }
}

/// AllReduce at or below this many bytes runs one-shot mesh (one step, every
/// rank reduces all inputs); above it, ring (bandwidth-optimal).
pub const MESH_ALLREDUCE_MAX_BYTES: u64 = 64 << 10;
/// AllGather / ReduceScatter with at most this many bytes in total run mesh.
pub const MESH_GATHER_MAX_BYTES: u64 = 256 << 10;

/// The built-in choice for an op: mesh for small messages and single-source
/// ops, ring for large reductions and gathers.
fn default_executor(param: &OpParam, topo: &TopoInfo) -> Result<&'static str> {
    let bytes = param.input_bytes();
    let p = topo.user_rank_size as u64;
    Ok(match param.op_type {
        OpType::AllReduce if bytes <= MESH_ALLREDUCE_MAX_BYTES => "AllReduceMeshExecutor",
        OpType::AllReduce => AllReduceRingExecutor::NAME,
        OpType::AllGather if bytes * p <= MESH_GATHER_MAX_BYTES => "AllGatherMeshExecutor",
        OpType::AllGather => AllGatherRingExecutor::NAME,
        OpType::ReduceScatter if bytes * p <= MESH_GATHER_MAX_BYTES => "ReduceScatterMeshExecutor",
        OpType::ReduceScatter => ReduceScatterRingExecutor::NAME,
        OpType::AllGatherV => "AllGatherVMeshExecutor",
        OpType::ReduceScatterV => "ReduceScatterVMeshExecutor",
        OpType::Broadcast => "BroadcastMeshExecutor",
        OpType::Reduce => "ReduceMeshExecutor",
        OpType::Scatter => "ScatterMeshExecutor",
        OpType::Gather => "GatherMeshExecutor",
        OpType::AllToAll => "AllToAllMeshExecutor",
        OpType::AllToAllV => "AllToAllVMeshExecutor",
        OpType::Send => "SendExecutor",
        OpType::Receive => "ReceiveExecutor",
    })
}
