//! hccl-platform: the bottom layer of hccl-rs.
//!
//! It owns everything that touches the machine: memory regions (host and
//! shared), streams (ordered, asynchronous task queues), notifies, links
//! (HCCL's transport verbs), the reduce kernels and the wait/park machinery.
//! Layers above address memory as [`DeviceMem`] handles (a region, an offset,
//! a length) and issue work only by enqueueing tasks on streams, so the same
//! algorithm code can run on real transports or on a plan simulator.
//!
//! Inside, dependencies point one way: [`sync`] (the loom switch point)
//! and [`mem`], [`dtype`], [`error`] at the bottom; [`link`] (transports
//! and their verbs) on them; [`stream`] (task queues, the
//! [`Kernel`](stream::Kernel) trait, the verbs' enqueue methods) on links;
//! kernels such as [`aiv`] on streams.

#![warn(missing_docs)]

pub mod aiv;
pub mod dtype;
pub mod error;
pub mod link;
pub mod mem;
pub mod notify;
pub mod reduce;
pub mod stream;
pub mod sync;

pub use dtype::{DataType, Element, ReduceOp};
pub use error::{ErrorContext, HcclError, HcclResult, Result};
pub use link::{Link, LinkHandle, LinkOp};
pub use mem::{DeviceBuffer, DeviceMem, MemKind};
pub use notify::Notify;
pub use stream::{
    BlockedTask, Device, DeviceConfig, DeviceStats, EnqueueMark, ExecMode, OpLabel, Stream,
};
