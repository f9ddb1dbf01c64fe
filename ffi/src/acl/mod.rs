//! The CPU runtime shim: the part of Ascend's ACL runtime (`aclInit`,
//! `aclrt*`) that HCCL programs call around the HCCL calls.
//!
//! A "device" is an id (0..`HCCL_RS_DEVICE_COUNT`, default 8) chosen per
//! thread with `aclrtSetDevice`; its streams run on a platform
//! [`Device`]. When a communicator is created on a thread, the device's
//! later streams run on the communicator's platform device, so its ops and
//! the stream's copies and events share one queue; a stream created before
//! is moved there (after draining) at its first HCCL op (or when it
//! begins capturing).
//!
//! ACL graphs (`aclmdlRICapture*`, `aclmdlRI*`, `graph.rs`):
//! tasks issued on a capturing stream are recorded and replayed by
//! `aclmdlRIExecuteAsync`.
//!
//! ACL profiling (`aclprof*`, `prof.rs`): `aclprofStart` records the
//! timelines of the platform devices serving the listed devices (and of
//! communicators created on them later); `aclprofStop` writes each as
//! Chrome trace JSON.

mod device;
mod event;
mod graph;
mod memory;
mod modes;
mod placement;
mod prof;
mod stream;
mod vmm;

pub use device::*;
pub use event::*;
pub use graph::*;
pub use memory::*;
pub use modes::*;
pub use prof::*;
pub use stream::*;
pub use vmm::*;

pub(crate) use placement::{bind_device, current_device};
pub(crate) use prof::device_appeared;
pub(crate) use stream::stream_for_op;
