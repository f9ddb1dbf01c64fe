//! hccl-adapter: the Rust API of hccl-rs (op-base mode).
//!
//! ```no_run
//! use hccl_adapter::{HcclComm, DeviceBuffer, ReduceOp};
//! # fn main() -> hccl_adapter::Result<()> {
//! let comms = HcclComm::init_all(2)?; // two ranks in this process
//! std::thread::scope(|s| {
//!     for comm in &comms {
//!         s.spawn(move || -> hccl_adapter::Result<()> {
//!             let stream = comm.create_stream();
//!             let send = DeviceBuffer::from_slice(&[comm.rank() as f32; 4])?;
//!             let mut recv = DeviceBuffer::<f32>::alloc(4)?;
//!             comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
//!             stream.synchronize()?;
//!             assert_eq!(recv.to_vec()?, vec![1.0; 4]);
//!             Ok(())
//!         });
//!     }
//! });
//! # Ok(()) }
//! ```
//!
//! An op call checks its arguments, enqueues the op on the stream and
//! returns; `stream.synchronize()` waits for it and reports any failure.
//! Invalid arguments are rejected before anything is enqueued.
//!
//! **Capture and replay.** Ops issued on a capturing stream are recorded,
//! not run; the [`Graph`] that ends the capture replays them, as often as
//! wanted, without validating or selecting anything again (the buffers are
//! the ones captured: rewrite their contents between launches):
//!
//! ```no_run
//! # use hccl_adapter::{CaptureMode, DeviceBuffer, HcclComm, ReduceOp};
//! # fn rank(comm: &HcclComm) -> hccl_adapter::Result<()> {
//! let stream = comm.create_stream();
//! let send = DeviceBuffer::<f32>::alloc(1024)?;
//! let mut recv = DeviceBuffer::<f32>::alloc(1024)?;
//! stream.begin_capture(CaptureMode::Global)?;
//! comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
//! let graph = stream.end_capture()?;
//! for step in 0..100 {
//!     send.copy_from_slice(&[step as f32; 1024])?;
//!     graph.launch(&stream)?;
//!     stream.synchronize()?;
//! }
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The README's code is compiled and run as doc tests (`cargo test --doc`),
// so the page a registry shows cannot hold examples that no longer build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod comm;
mod validate;

// Communicators and their ops.
pub use comm::{
    all_to_all_vc_layout, group, group_end, group_start, group_status, AllToAllVcLayout, CommRef,
    HcclComm, SendRecvItem, SendRecvKind, CAPTURE_FUSE_MAX_BYTES, GROUP_FUSE_MAX_BYTES,
    PACK_FUSE_MAX_BYTES,
};
// The flight recorder: each communicator's last ops, dumped as JSON
// (`HCCL_RS_FR_DUMP_DIR`, `SIGUSR1`, `HcclComm::dump_flight_recorder`).
pub use hccl_framework::{
    dump_flight_recorders, FlightRecorder, FrDump, FrEntry, FrWait, DEFAULT_FR_BUFFER_SIZE,
    FR_DUMP_VERSION,
};
// Making communicators: configuration, threads of this process, and the
// root info processes share.
pub use hccl_framework::{launched_as, LaunchedAs};
pub use hccl_framework::{
    read_root_file, AlgoConfig, CommConfig, Deterministic, InProcGroup, RootInfo,
    HCCL_ROOT_INFO_BYTES, OP_EXPANSION_MODES,
};
// Calibrated cost-model parameters (`hccl-test --calibrate`).
pub use hccl_framework::{LinkTuning, Tuning, TUNING_VERSION};
// Memory, streams, element types and errors.
pub use hccl_platform::{
    DataType, Device, DeviceBuffer, DeviceMem, Element, HcclError, HcclResult, ReduceOp, Result,
    Stream,
};
// HCCL's 1-byte FP8 formats as elements (moved, never reduced).
pub use hccl_platform::{Fp8E4M3, Fp8E5M2, Fp8E8M0, Hif8};
// Timelines of a device's stream tasks and op spans (Chrome trace JSON:
// `HCCL_RS_TRACE`, `Device::start_timeline`, ACL profiling in the C API).
pub use hccl_platform::{Timeline, DEFAULT_TIMELINE_EVENTS};
// Capture and replay (HCCL's graph mode as ACL graphs reach it): ops
// issued on a capturing stream are recorded; the graph replays them.
pub use hccl_platform::{CaptureMode, CaptureStatus, Graph};
// Memory peers address: registrations, symmetric windows, the handles
// peers map memory by, and how peers' buffers were reached.
pub use hccl_framework::{MemRegistration, SymWindow};
pub use hccl_platform::{
    cross_memory_attach_permitted, imported_regions, imports_mapped, peer_access_stats, MemHandle,
    PeerAccessStats,
};
