//! The integration tests of hccl-rs, one binary (see tests/Cargo.toml):
//! each module is one file of this directory, a subject of its own, and
//! its tests are named `<module>::<test>`. `env_buffsize` (it sets a
//! process-wide variable) and `ibverbs` (a cargo feature) build apart.

mod aiv;
mod aiv_ops;
mod allreduce_matrix;
mod alltoallvc;
mod bad_input;
mod bench_buffers;
mod comm_lifecycle;
mod cpu_affinity;
mod crate_graph;
mod custom_executor;
mod dead_peers;
mod deterministic_strict;
mod fp8;
mod fused;
mod graph_capture;
mod graph_mode;
mod groups;
mod in_place;
mod multi_ring;
mod multiprocess;
mod multiprocess_memory;
mod netns;
mod op_retry;
mod primitives;
mod registered_memory;
mod repeat;
mod root_ahead;
mod soak;
mod threads_shrink;
mod transports;
mod writing_an_executor;
