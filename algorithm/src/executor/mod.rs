//! Executors: one op each, composed from templates.

mod aiv;
pub(crate) mod all_reduce_rhd;
pub(crate) mod all_reduce_ring;
mod broadcast_ring;
mod decl;
mod direct;
mod flat_request;
pub(crate) mod hier;
mod mesh;
mod nonuniform;
mod nonuniform_ops;
mod op_base_loop;
mod registry;
pub(crate) mod rhd;
mod rhd_ops;
pub(crate) mod ring_gather_scatter;
mod ring_rooted;
pub(crate) mod transfer;

pub use aiv::{aiv_kind, aiv_payload_bytes, AivExecutor, AIV_EXECUTORS, AIV_MAX_BYTES};
pub use all_reduce_rhd::AllReduceRhdExecutor;
pub use all_reduce_ring::AllReduceRingExecutor;
pub use broadcast_ring::BroadcastRingExecutor;
pub use decl::{
    best, model_bytes, AlgoTag, Candidate, CostFn, Estimate, ExecutorInfo, ScoreRange,
    SelectLimits, SelectQuery, ServesFn,
};
pub use direct::{DirectExecutor, DIRECT_EXECUTORS, DIRECT_STAGE_BYTES};
pub(crate) use flat_request::{all_peers, check_op, flat_request, ring_peers, Named};
pub use hier::{
    builtin_level1, hier_executors, hier_name, register_level1, HierExecutor, HierKind,
    Level1Algorithm, NonuniformLevel1, PipelineExecutor, RhdLevel1, RingLevel1,
};
pub use mesh::{MeshExecutor, MESH_EXECUTORS, PAIRWISE_EXECUTORS, STAR_EXECUTORS};
pub use nonuniform_ops::{NonuniformExecutor, NB_EXECUTORS, NHR_EXECUTORS};
pub use op_base_loop::{copy_through, round_capacity, run_op_base_loop, Chunk};
pub use registry::{registry, ExecutorFactory, ExecutorRegistry};
pub use rhd_ops::{RhdExecutor, RHD_EXECUTORS};
pub use ring_gather_scatter::{AllGatherRingExecutor, ReduceScatterRingExecutor};
pub use ring_rooted::{RingRootedExecutor, RING_ROOTED_EXECUTORS};

/// Upper bound on the bytes an op-base round stages at once. Rounds this
/// small keep the staging copies, transfers and reductions of a round in
/// cache instead of streaming the whole message through DRAM several times
/// (measured: 32 MiB allreduce between two processes 2.0 → 3.2 GB/s bus
/// bandwidth going from a 200 MiB round to 1 MiB; 256 KiB–1 MiB is flat).
pub const PIPELINE_CHUNK_BYTES: usize = 1 << 20;

use crate::op::OpParam;
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::topo::TopoInfo;
use hccl_platform::Result;

/// The contract between the framework and an algorithm (HCCL's `CollExecutorBase`).
///
/// The framework creates an executor through the [`ExecutorRegistry`] for
/// the communicator's topology, asks it what it needs for an op, grants
/// that, and calls `orchestrate`. For repeated ops with the same tag the
/// framework reuses the executor and the granted resources and only calls
/// `orchestrate` again.
pub trait CollExecutor: Send {
    /// The registered name (e.g. `AllReduceRingExecutor`).
    fn name(&self) -> &str;

    /// What this algorithm needs for `param` on `topo`: scratch bytes, extra
    /// streams, notifies, and which links (peer pairs per plane, on which memory).
    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest>;

    /// Enqueues the tasks that perform the op on `param.stream` (and the
    /// granted slave streams), using only what the framework granted.
    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()>;

    /// Whether the executor's own tasks compare the op descriptors of the
    /// ranks (as the AIV kernels do, in their flag lines). If not, the
    /// framework runs HCCL's consistency check before the op.
    fn checks_consistency(&self) -> bool {
        false
    }
}
