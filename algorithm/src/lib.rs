//! hccl-algorithm: the algorithm layer of hccl-rs.
//!
//! Two kinds of building blocks, as in HCCL:
//! - **templates** ([`template`]) run one algorithm on one sub-communicator
//!   (a ring reduce-scatter, a ring allgather, ...) by enqueueing link verbs
//!   and local tasks on streams;
//! - **executors** ([`executor`]) implement one op: they state the resources
//!   they need ([`CollExecutor::calc_res_request`]) and, given what the
//!   framework granted, orchestrate templates over the levels of the
//!   topology ([`CollExecutor::orchestrate`]).
//!
//! Executors are registered by name in an [`ExecutorRegistry`] that any
//! crate can extend at run time; the framework picks a name, never a type.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cost;
pub mod executor;
pub mod op;
pub mod resource;
pub mod sim;
pub mod template;
pub mod topo;

pub use executor::{registry, CollExecutor, ExecutorFactory, ExecutorRegistry};
pub use op::{DescriptorCache, OpParam, OpType, VCounts, WorkflowMode};
pub use resource::{
    AlgResourceRequest, AlgResourceResponse, LevelNSubCommTransport, OpCommTransport,
    SingleSubCommTransport, TransportRequest,
};
pub use topo::{CommPlane, SubCommInfo, TopoInfo};

pub use hccl_platform as platform;
