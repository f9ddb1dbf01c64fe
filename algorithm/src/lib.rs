//! hccl-algorithm: the algorithm layer of hccl-rs.
//!
//! Three layers, each built on the one before, as in HCCL (and NCCL's
//! prims):
//! - **step primitives** ([`prim`]) enqueue one communication step (send,
//!   receive, send+receive+reduce, a many-peer exchange) on the link verbs
//!   with the receiver-acks-first handshake;
//! - **templates** ([`template`]) run one algorithm on one sub-communicator
//!   (a ring reduce-scatter, a ring allgather, ...) as a table of steps;
//! - **executors** implement one op: they state the resources they need
//!   ([`CollExecutor::calc_res_request`]) and, given what the framework
//!   granted, orchestrate templates over the levels of the topology
//!   ([`CollExecutor::orchestrate`]).
//!
//! Executors are registered by name in an [`ExecutorRegistry`] that any
//! crate can extend at run time, each with an [`ExecutorInfo`] declaring
//! what it serves and what it costs; the framework picks a name, never a
//! type. The built-in executors are reached only by name
//! ([`registry`]`().names()` lists them). The plan simulator ([`sim`])
//! runs any registered executor for N symbolic ranks on one thread, and
//! [`cost`] is the α-β-γ model the declarations price themselves with.
//!
//! [`rings`] builds multi-channel rings across hosts (NCCL's
//! `connectRings`), which the multi-ring executors run on.
//!
//! This page is the crate's whole public API: the items below, and the
//! five public modules, which are vocabularies by design.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Keeps this page the whole API: an item that is `pub` but not re-exported
// here must say `pub(crate)`.
#![warn(unreachable_pub)]

// The README's code is compiled and run as doc tests (`cargo test --doc`),
// so the page a registry shows cannot hold examples that no longer build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// Public modules: each is a vocabulary a user of this layer writes or
// reads code in as a whole, so it stays a module rather than a list of
// re-exports here.
// - `cost`: the α-β-γ model (link parameters per level, which the
//   framework's tuning file fills, and the per-algorithm terms an
//   `ExecutorInfo` prices itself with);
// - `prim`: the step primitives templates and user executors are written in;
// - `rings`: multi-channel rings across hosts (NCCL's connectRings): the
//   ring orders and channel limits an executor of several rings builds on;
// - `sim`: the plan simulator, where algorithm developers check an
//   executor at any rank count and the cost model is validated;
// - `template`: the templates executors compose, built-in or not
//   (`template::layout` holds the op-base loop).
pub mod cost;
pub mod prim;
pub mod rings;
pub mod sim;
pub mod template;

// `executor` holds the executors. Its public items are exactly the ones
// re-exported below, whose home is this page; the built-in executors,
// their shared flat-executor impl, the hierarchical executors' host
// arithmetic and the registry's table are `pub(crate)`: users reach
// built-ins by name through `registry()`.
mod executor;

// Private modules: everything users need of them is re-exported below.
mod op;
mod resource;
mod topo;

// The executor contract: what the framework hands an executor and what
// the executor asks for and is granted.
pub use executor::{CollExecutor, RepeatLaunch, StagedOp};
pub use op::{DescriptorCache, OpParam, OpType, VCounts, WorkflowMode};
pub use resource::{
    AlgResourceRequest, AlgResourceResponse, LevelNSubCommTransport, OpCommTransport,
    SingleSubCommTransport, TransportRequest,
};
pub use topo::{CommPlane, SubCommInfo, TopoInfo};

// The registry: executors by name, each with its declaration.
pub use executor::{registry, ExecutorFactory, ExecutorRegistry};
pub use executor::{AlgoTag, CostFn, Estimate, ExecutorInfo, ScoreRange, ServesFn};

// Selection: what a selector (the framework's) asks the registry with and
// ranks by.
pub use executor::{best, model_bytes, Candidate, SelectLimits, SelectQuery, AIV_MAX_BYTES};

// Hierarchical executors: the kinds `HCCL_ALGO` names on level 1, and how
// a level-1 allreduce written elsewhere plugs into them.
pub use executor::{hier_name, register_level1, HierKind, Level1Algorithm};
