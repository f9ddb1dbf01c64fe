//! Hierarchical executors: ops over hosts (level 0, intra-host) and the
//! ranks that correspond across hosts (level 1, inter-host), for any host
//! sizes, uneven ones included.
//!
//! - **TwoLevel** (HCCL's hierarchical executors): AllReduce = level-0
//!   reduce-scatter → level-1 allreduce (a [`Level1Algorithm`]: ring,
//!   RHD, NHR, NB, or one registered later) → level-0 allgather; ReduceScatter =
//!   level-0 reduce-scatter → level-1 ring reduce-scatter; AllGather =
//!   level-1 ring allgather → level-0 allgather. Data is cut into as many
//!   parts as the largest host has ranks; on a smaller host a rank owns
//!   several parts and joins several level-1 groups (see `hosts.rs`).
//! - **AHC** (seed 002 §3.9): AllReduce and ReduceScatter with the data
//!   cut into LCM(host sizes) parts, so every rank owns the same share,
//!   and the cross-host step between the "logical same-index" owners of
//!   each run of parts.
//! - **Pipeline** (seed 002 §3.10): the level-1 ring runs on the master
//!   stream while a slave stream moves what each step delivered (or what
//!   the next step needs) within the host.

pub(crate) mod hosts;
mod level1;
mod pipeline;
mod two_level;

#[cfg(test)]
pub(crate) use level1::builtin_level1;
pub use level1::Level1Algorithm;
pub(crate) use level1::{NonuniformLevel1, RhdLevel1, RingLevel1};
pub(crate) use pipeline::PipelineExecutor;
pub(crate) use two_level::HierExecutor;
pub use two_level::HierKind;

use super::{CollExecutor, ExecutorFactory, ExecutorRegistry};
use crate::op::OpType;
use crate::topo::TopoInfo;
use hccl_platform::Result;
use std::sync::Arc;

/// The registered name of the `kind` executor for `op` with the level-1
/// algorithm whose name suffix is `suffix` (empty for ring): e.g.
/// `AllReduceTwoLevelExecutor`, `AllReduceTwoLevelRHDExecutor`,
/// `ReduceScatterAHCExecutor`, `AllGatherPipelineExecutor`.
pub fn hier_name(kind: HierKind, op: OpType, suffix: &str) -> String {
    let kind = match kind {
        HierKind::TwoLevel => "TwoLevel",
        HierKind::Ahc => "AHC",
        HierKind::Pipeline => "Pipeline",
    };
    format!("{}{kind}{suffix}Executor", OpType::hccl_name(op))
}

/// The (kind, op) pairs that take a level-1 allreduce algorithm.
const WITH_LEVEL1: &[(HierKind, OpType)] = &[
    (HierKind::TwoLevel, OpType::AllReduce),
    (HierKind::Ahc, OpType::AllReduce),
];

/// The (kind, op) pairs whose level 1 is always a ring.
#[cfg(test)]
const RING_ONLY: &[(HierKind, OpType)] = &[
    (HierKind::TwoLevel, OpType::AllGather),
    (HierKind::TwoLevel, OpType::ReduceScatter),
    (HierKind::Ahc, OpType::ReduceScatter),
    (HierKind::Pipeline, OpType::AllReduce),
    (HierKind::Pipeline, OpType::AllGather),
    (HierKind::Pipeline, OpType::ReduceScatter),
];

/// Registers the hierarchical executors that use `level1` for their
/// inter-host allreduce (AllReduce TwoLevel and AHC), under
/// [`hier_name`]`(kind, op, level1.suffix())`. This is how a level-1
/// algorithm written elsewhere plugs in: the executors are declared (served on
/// several hosts, each level priced with its own link from `level1.terms`),
/// so the selector ranks them with the built-in ones; they answer no
/// `HCCL_ALGO` value (the built-in level-1 algorithms are registered from
/// the registry's table, which gives theirs).
pub fn register_level1(
    registry: &ExecutorRegistry,
    level1: Arc<dyn Level1Algorithm>,
) -> Result<()> {
    for &(kind, op) in WITH_LEVEL1 {
        let name = hier_name(kind, op, level1.suffix());
        let (l1, n) = (level1.clone(), name.clone());
        let f: ExecutorFactory = Arc::new(move |t: &TopoInfo| {
            Box::new(HierExecutor::new(&n, op, kind, l1.clone(), t)) as Box<dyn CollExecutor>
        });
        let info = super::registry::hier_info(kind, op, level1.clone());
        registry.register_with(&name, f, info)?;
    }
    Ok(())
}

/// Every built-in hierarchical executor: (name, op, kind), for the tests
/// to check the registry's table against.
#[cfg(test)]
pub(crate) fn hier_executors() -> Vec<(String, OpType, HierKind)> {
    let mut v: Vec<(String, OpType, HierKind)> = builtin_level1()
        .iter()
        .flat_map(|l1| {
            WITH_LEVEL1
                .iter()
                .map(move |&(k, op)| (hier_name(k, op, l1.suffix()), op, k))
        })
        .collect();
    v.extend(
        RING_ONLY
            .iter()
            .map(|&(k, op)| (hier_name(k, op, ""), op, k)),
    );
    v
}
