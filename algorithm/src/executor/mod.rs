//! Executors: one op each, composed from the templates of
//! [`crate::template`]. One file per algorithm family:
//!
//! | file | executors |
//! |---|---|
//! | `ring.rs` | `{AllReduce,AllGather,ReduceScatter,Broadcast}RingExecutor`, `RING_ROOTED_EXECUTORS` |
//! | `rhd.rs` | `AllReduceRHDExecutor`, `RHD_EXECUTORS` |
//! | `nhr_nb.rs` | `NHR_EXECUTORS`, `NB_EXECUTORS` |
//! | `mesh.rs` | `MESH_EXECUTORS`, `STAR_EXECUTORS`, `PAIRWISE_EXECUTORS` (one engine) |
//! | `direct_read.rs` | `DIRECT_EXECUTORS` (reads peers' user buffers) |
//! | `multi_ring.rs` | `MULTI_RING_EXECUTORS` (one ring per channel, [`crate::rings`]) |
//! | `aiv.rs` | `AIV_EXECUTORS` (one kernel task per op) |
//! | `hier/` | TwoLevel, AHC and Pipeline over hosts (`hier_executors`) |
//!
//! `flat.rs` holds what every flat-plane executor shares (name, op,
//! topology, op check, resource request, the `CollExecutor` impl);
//! `registry.rs` the executors by name.

mod aiv;
mod decl;
mod direct_read;
mod flat;
pub(crate) mod hier;
mod mesh;
mod multi_ring;
mod nhr_nb;
mod registry;
mod rhd;
mod ring;

// The crate root re-exports what users need: the contract, the registry,
// the declaration and selection vocabulary, and the level-1 plug-in point
// of the hierarchical executors.
pub use aiv::AIV_MAX_BYTES;
pub use decl::{
    best, model_bytes, AlgoTag, Candidate, CostFn, Estimate, ExecutorInfo, ScoreRange,
    SelectLimits, SelectQuery, ServesFn,
};
pub use hier::{hier_name, register_level1, HierKind, Level1Algorithm};
pub use registry::{registry, ExecutorFactory, ExecutorRegistry};

// The built-in executors are reached by name through the registry, so
// their types stay inside (the registry's table builds them).
pub(crate) use aiv::AivExecutor;
pub(crate) use direct_read::DirectExecutor;
pub(crate) use hier::{HierExecutor, NonuniformLevel1, PipelineExecutor, RhdLevel1, RingLevel1};
pub(crate) use mesh::MeshExecutor;
pub(crate) use multi_ring::MultiRingExecutor;
pub(crate) use nhr_nb::NonuniformExecutor;
pub(crate) use rhd::{AllReduceRhdExecutor, RhdExecutor};
pub(crate) use ring::{
    AllGatherRingExecutor, AllReduceRingExecutor, BroadcastRingExecutor, ReduceScatterRingExecutor,
    RingRootedExecutor,
};
// the names `aiv.rs` uses (kept so that file compiles unchanged)
pub(crate) use flat::{all_peers, check_op, flat_request, Named};

// What the registry's and the simulator's tests check the registry against.
#[cfg(test)]
pub(crate) use aiv::{aiv_payload_bytes, AIV_EXECUTORS};
#[cfg(test)]
pub(crate) use direct_read::DIRECT_EXECUTORS;
#[cfg(test)]
pub(crate) use hier::hier_executors;
#[cfg(test)]
pub(crate) use mesh::{MESH_EXECUTORS, PAIRWISE_EXECUTORS, STAR_EXECUTORS};
#[cfg(test)]
pub(crate) use multi_ring::MULTI_RING_EXECUTORS;
#[cfg(test)]
pub(crate) use nhr_nb::{NB_EXECUTORS, NHR_EXECUTORS};
#[cfg(test)]
pub(crate) use rhd::RHD_EXECUTORS;
#[cfg(test)]
pub(crate) use ring::RING_ROOTED_EXECUTORS;

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

    /// The op of [`orchestrate`](Self::orchestrate), to be enqueued a stage
    /// at a time instead of all at once: issuing every stage in order
    /// enqueues exactly the tasks `orchestrate` would (executors that
    /// offer it orchestrate that way). The plan simulator issues a rank's
    /// next stage when its queue runs short, so a plan of O(p) steps per
    /// rank is never stored whole for all ranks (the ring AllReduce's
    /// 2(p−1) steps are 3.4 billion tasks at 16,384 ranks). `None` (the
    /// default): the op is orchestrated whole. The stages hold what they
    /// need ([`OpParam`]'s and the grant's handles); they must be issued
    /// before `param`'s buffers are dropped, as any enqueued task.
    fn staged(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn StagedOp>>> {
        let _ = (param, res);
        Ok(None)
    }

    /// What the resources [`calc_res_request`](Self::calc_res_request)
    /// asks for depend on beyond the op's tag, if anything: the framework
    /// keeps one executor and one grant per value (a rooted mesh op links
    /// its ranks to the root only, so its root). `None` (the default): the
    /// request is the same for every op of the tag.
    fn resource_variant(&self, param: &OpParam) -> Option<u32> {
        let _ = param;
        None
    }

    /// Whether the executor's own tasks compare the op descriptors of the
    /// ranks (as the AIV kernels do, in their flag lines). If not, the
    /// framework runs HCCL's consistency check before the op.
    fn checks_consistency(&self) -> bool {
        false
    }

    /// Whether the executor runs in graph mode (`OpParam::mode` =
    /// [`WorkflowMode::Graph`](crate::WorkflowMode::Graph)): straight on the
    /// op's user buffers, with no staging through the CCL buffers and no
    /// op-base loop. The framework runs an executor that cannot in op-base
    /// mode instead (and says so in its debug log).
    fn supports_graph(&self) -> bool {
        false
    }

    /// The op [`orchestrate`](Self::orchestrate) just ran for `param`,
    /// prepared to run again with exactly the same arguments (buffers,
    /// count, type, root, mode) as a few loads and stores: the framework's
    /// repeat path launches it instead of orchestrating again when a
    /// caller repeats the op. `None` (the default) when the executor
    /// cannot (its tasks depend on more than the arguments, or there is
    /// nothing to gain); asked only after a successful orchestration.
    fn repeat_plan(
        &mut self,
        param: &OpParam,
        res: &AlgResourceResponse,
    ) -> Result<Option<Box<dyn RepeatLaunch>>> {
        let _ = (param, res);
        Ok(None)
    }
}

/// An op an executor enqueues a stage at a time (see
/// [`CollExecutor::staged`]).
pub trait StagedOp: Send {
    /// Enqueues the next stage's tasks; `Ok(false)`, enqueueing nothing,
    /// once every stage has been.
    fn issue_next(&mut self) -> Result<bool>;
}

/// Issues every stage of `stages`, if there are any (an executor's
/// `orchestrate` through its [`CollExecutor::staged`] plan); returns
/// whether there were.
pub(crate) fn issue_all(stages: Option<Box<dyn StagedOp>>) -> Result<bool> {
    let Some(mut stages) = stages else {
        return Ok(false);
    };
    while stages.issue_next()? {}
    Ok(true)
}

/// An op prepared by an executor to run again on the same arguments (see
/// [`CollExecutor::repeat_plan`]). Each launch enqueues the whole op on
/// `stream`, as the orchestration it repeats did. It holds no user
/// memory (a cached plan must not keep a freed buffer alive): every
/// launch is handed the op's input and output, exactly what
/// [`OpParam::input`] and [`OpParam::output`] were.
pub trait RepeatLaunch: Send + Sync + std::fmt::Debug {
    /// Enqueues the op once more on `stream`, on `input` and `output`.
    fn launch(
        &self,
        stream: &hccl_platform::Stream,
        input: &hccl_platform::DeviceMem,
        output: &hccl_platform::DeviceMem,
    ) -> Result<()>;
}
