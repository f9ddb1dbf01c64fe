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

mod device;
mod event;
mod graph;
mod memory;
mod placement;
mod stream;

pub use device::*;
pub use event::*;
pub use graph::*;
pub use memory::*;
pub use stream::*;

pub(crate) use placement::{bind_device, current_device};
pub(crate) use stream::stream_for_op;
