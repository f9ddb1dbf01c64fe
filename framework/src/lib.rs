//! hccl-framework: communicators, configuration, algorithm selection and
//! resource management.
//!
//! A [`Communicator`] is one rank's membership of a group. For each op it
//! asks the [`Selector`] for an executor *name*, builds that executor
//! through the algorithm crate's registry, turns its resource request into
//! granted resources with the [`ResourceManager`] (cached per op tag), and
//! lets it orchestrate the op on the caller's stream.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod algo_env;
pub mod bootstrap;
pub mod communicator;
pub mod config;
pub mod fabric;
pub mod multi_process;
pub mod resource_manager;
pub mod selector;
pub mod tuning;

pub use communicator::{Communicator, InProcGroup};
pub use config::{CommConfig, EnvSource};
pub use resource_manager::ResourceManager;
pub use selector::Selector;

pub use hccl_algorithm as algorithm;
pub use hccl_platform as platform;
