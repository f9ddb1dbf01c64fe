//! HCCL's C API (`hccl.h`) over the Rust adapter.
//!
//! Communicators live in a registry; an `HcclComm` handle is a key into it
//! (see `handles.rs`). Ops resolve their stream (see [`crate::acl`]) and
//! buffers (see `mem.rs`), then call the adapter, which validates every
//! argument before anything is enqueued.

mod callbacks;
mod collectives;
mod comm;
mod config;
mod diagnostics;
mod fused;
mod group;
mod memory_ranges;
mod one_sided;
mod register;
mod registration;
mod state;
mod sym_win;
mod timeouts;

pub use collectives::*;
pub use comm::*;
pub use diagnostics::*;
pub use fused::*;
pub use group::*;
pub use one_sided::*;
pub use register::*;
pub use registration::*;
pub use state::*;
pub use sym_win::*;
pub use timeouts::*;

pub(crate) use comm::comm_devices_on;
