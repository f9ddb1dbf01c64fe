//! hccl-framework: communicators, configuration, algorithm selection and
//! resource management.
//!
//! A [`Communicator`] is one rank's membership of a group. For each op it
//! asks the [`Selector`] for an executor *name*, builds that executor
//! through the algorithm crate's registry, turns its resource request into
//! granted resources (cached per op tag), and lets it orchestrate the op on
//! the caller's stream.
//!
//! This page is the crate's whole public API; the modules are private.

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

mod affinity;
mod agree;
mod algo_env;
mod bootstrap;
mod comm_memory;
mod communicator;
mod config;
mod control;
mod fabric;
mod flight;
mod flight_signal;
mod internal_ops;
mod json_file;
mod multi_process;
mod op_retry;
mod registration;
mod resource_manager;
mod revoke;
mod selector;
mod successor;
mod successor_table;
mod sym_window;
mod sym_window_ops;
mod transports;
mod tuning;

// Communicators: made for ranks that are threads of this process
// (`Communicator::init_all`, `InProcGroup`), or processes on one or many
// hosts (`Communicator::init_root_info`, `init_cluster_info`,
// `init_from_env`, in `multi_process.rs`).
pub use communicator::{Communicator, InProcGroup, RepeatOp};
// The flight recorder: the last ops of each communicator, dumped as JSON.
pub use flight::{
    dump_all as dump_flight_recorders, FlightRecorder, FrDump, FrEntry, FrTicket, FrWait, FrWriter,
    DEFAULT_FR_BUFFER_SIZE, FR_DUMP_VERSION,
};

// Memory peers address: registrations (`Communicator::register_mem`,
// `exchange_mem`) and symmetric windows (`Communicator::sym_win_register`).
pub use comm_memory::MemRegistration;
pub use op_retry::{LinkLevel, OpRetry, RetryPlan, RetryVote, RETRY_MARK};
pub use sym_window::SymWindow;

// Configuration: from the environment (`HCCL_*`, `HCCL_RS_*`) or any
// other source of variables; `HCCL_ALGO` parsed.
pub use affinity::CpuAffinity;
pub use algo_env::{AlgoConfig, LevelAlgos};
pub use config::{CommConfig, Deterministic, EnvSource, OP_EXPANSION_MODES};

// Bootstrap: HCCL's root info, which the root hands to the other ranks
// (in memory, or through a file the adapter and tools read).
pub use bootstrap::root_info::{RootInfo, HCCL_ROOT_INFO_BYTES};
pub use multi_process::read_root_file;

// Launchers: whether this process is a rank of a job mpirun, srun or
// torchrun started (what `init_from_env` reads), before joining it.
pub use bootstrap::launcher::{launched_as, LaunchedAs};

// Selection: the executor name for an op (`HCCL_ALGO`, overrides, then a
// ranking of every declared executor by its cost).
pub use selector::Selector;

// Tuning: the calibrated cost-model parameters (`hccl-test --calibrate`
// writes them, `HCCL_RS_TUNING_FILE` names them).
pub use tuning::{LinkTuning, Tuning, TUNING_VERSION};
