//! hccl-platform: the bottom layer of hccl-rs.
//!
//! It owns everything that touches the machine: memory regions (host and
//! shared), streams (ordered, asynchronous task queues), notifies, links
//! (HCCL's transport verbs), the reduce kernels and the wait/park machinery.
//! Layers above address memory as [`DeviceMem`] handles (a region, an offset,
//! a length) and issue work only by enqueueing tasks on streams, so the same
//! algorithm code can run on real transports or on a plan simulator.
//!
//! Inside, dependencies point one way: `sync` (the loom switch point)
//! and `mem`, `dtype`, `error` at the bottom; `link` (transports and their
//! verbs) on them; `stream` (task queues, the [`Kernel`] trait, the verbs'
//! enqueue methods) on links; kernels such as the AIV boards (`aiv/`, see
//! its `PROTOCOL.md`) on streams. The modules are private: this page is the
//! platform's whole public API.

#![warn(missing_docs)]

// The README's code is compiled and run as doc tests (`cargo test --doc`),
// so the page a registry shows cannot hold examples that no longer build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod aiv;
mod clock;
pub mod cube;
mod dtype;
mod error;
mod link;
mod mem;
mod notify;
mod reduce;
mod stream;
mod sync;
pub mod transport;

// Data types and errors: what every layer speaks.
pub use dtype::{DataType, Element, Fp8E4M3, Fp8E5M2, Fp8E8M0, Hif8, ReduceOp};
pub use error::{ErrorContext, HcclError, HcclResult, Result};

// Memory: handles addressed as (buffer kind, offset, length), owned
// buffers, shared-memory names, cross-memory attach.
pub use mem::cma::permitted as cross_memory_attach_permitted;
pub use mem::{
    shm_segment_name, DeviceBuffer, DeviceMem, MemKind, PinnedMem, RegionKind, SharedCounter,
    VirtualMem, WeakMem, SHM_PREFIX,
};
// Shareable memory: handles peers of the host map it by, the shared
// cache of mapped peer regions, and how peers' buffers were reached.
pub use mem::{
    imported_regions, imports_mapped, peer_access_stats, registration_epoch, ImportOwner,
    MemHandle, PeerAccessStats,
};

// Streams: ordered asynchronous task queues, their driver, notifies, and
// the kernel trait a whole-op task implements.
pub use notify::Notify;
pub use stream::{
    BlockedTask, Device, DeviceConfig, DeviceStats, EnqueueMark, ExecMode, FailureHook,
    HostCallback, HostFn, Kernel, OpArgs, OpLabel, QuietWaits, Stream, StreamProgress, TaskDone,
    TaskObserver, Timeline, DEFAULT_TIMELINE_EVENTS,
};
// Capture and replay: tasks recorded on a capturing stream, replayed as a
// graph (ACL graphs' `aclmdlRI`).
pub use stream::{CaptureDeferred, CaptureMode, CaptureStatus, Graph};

// Links: HCCL's transport verbs and the transports that implement them.
// A transport implements [`Link`]; algorithms enqueue verbs through
// [`LinkHandle`]'s methods.
pub use link::{
    decode_tcp_address, encode_tcp_address, is_relayed_by, names_link_failure,
    sweep_stale_segments, FlushRequest, InProcEndpoint, InProcLink, InProcRendezvous,
    InProcTransport, Link, LinkHandle, LinkOp, LinkOpState, OpDesc, ParamMem, ParkHook,
    PeerProcess, ShmLink, ShmSegment, ShmTransport, TcpLink, TcpNode, TcpOptions, TcpTransport,
    BOARD_BYTES, IN_PROCESS_SCORE, SHM_SCORE, TCP_MAX_SOCKETS, TCP_SCORE,
};

// AIV kernels: a whole small collective as one task over per-rank boards.
#[cfg(feature = "ibverbs")]
pub use link::{IbvLink, IbvTransport, IBVERBS_SCORE};

pub use aiv::{AivBoards, AivKind, AivLaunch, AivPlan, AIV_MAX_BYTES};

// Reduce kernels and the park/wake primitive, for layers that run plans
// without streams (the algorithm crate's simulator).
pub use reduce::{
    reduce_in_place, reduce_into, reduce_slice_in_place, reduce_slice_into, Reducible,
};
pub use sync::{EventCount, Waiter};
// A cheap clock for per-op timestamps (flight recorder).
pub use clock::{init_clock, stamp, Stamp, StampClock};
