//! Links: HCCL's transport verbs between two ranks.
//!
//! A [`Link`] is one rank's end of a connection to one peer. Algorithm
//! templates never call a transport directly: they enqueue verbs on a stream
//! through a [`LinkHandle`] (`tx_ack`, `rx_ack`, `tx_async`, ...: the
//! enqueue methods live with the streams, which may know links, never the
//! reverse), and the stream's driver polls [`Link::poll`] until each verb
//! completes. This module knows memory, errors and data types only. Every
//! transport (in-process, shared memory, TCP) implements the same verbs, so a
//! template written once runs on all of them.
//!
//! Verb semantics (write-based, as HCCL's device transports):
//! - `tx_ack` tells the peer "you may write into my buffers now";
//!   `rx_ack` waits for the peer's ack. One `tx_ack` satisfies one `rx_ack`.
//! - `tx_async(dst_kind, dst_offset, src)` transfers `src` into the peer's
//!   buffer `dst_kind` at `dst_offset`, then signals completion; each
//!   `tx_async` satisfies one `rx_wait_done` on the peer.
//! - `rx_async` is the receiver's half of a transfer; on write-based
//!   transports it only records intent and completes at once.
//! - `tx_wait_done` waits until this side's transfers have left its buffers.
//! - `tx_data_signal` / `rx_data_signal` are a second, independent signal
//!   pair (HCCL uses them for barriers).
//! - `tx_with_reduce` transfers and reduces into the peer's buffer
//!   (`dst = dst op src`), satisfying one `rx_wait_done`.
//!
//! Read-based verbs, on links between ranks of one host
//! ([`Link::reads_peer_param`]): `expose_param_mem` sends where this
//! rank's user buffers of the op are, `rx_param_mem` receives the peer's,
//! and `read_peer` copies from the peer's user buffer straight into a
//! local one, one copy in all; `read_peer_reduce` reduces it straight
//! into a local one. The executor's own acks keep the peer's buffer
//! stable while it is read.
//!
//! How the peer's buffer is reached: where the link maps peers' memory
//! ([`Link::maps_peer_param`]: shared memory, in-process) and the peer's
//! buffers of the op are registered shareable memory, their handles come
//! with the addresses; the reader maps the peer's region once (a
//! process-wide cache) and reads with plain loads — no system call per
//! transfer — and `TxAsync` into the peer's `PARAM_INPUT` /
//! `PARAM_OUTPUT` writes straight into its user buffer. Otherwise a read
//! is a cross-memory attach (`process_vm_readv`) of the announced
//! address, and a reduction reads through a bounded staging window.

mod consistency;
#[cfg(feature = "ibverbs")]
mod ibverbs;
mod in_process;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod param_mem_tests;
mod peer;
mod shm;
mod tcp;
mod verb;
mod write_based;

pub(crate) use consistency::is_inconsistency;
pub use consistency::{OpDesc, ParamMem};
#[cfg(feature = "ibverbs")]
pub use ibverbs::{IbvLink, IbvTransport, IBVERBS_SCORE};
pub use in_process::{
    InProcEndpoint, InProcLink, InProcRendezvous, InProcTransport, IN_PROCESS_SCORE,
};
pub use peer::{is_relayed_by, names_link_failure, PeerProcess};
pub(crate) use peer::{relayed_failure, TCP_LINK};
pub use shm::{sweep_stale_segments, ShmLink, ShmSegment, ShmTransport, SHM_SCORE};
pub use tcp::{
    decode_tcp_address, encode_tcp_address, TcpLink, TcpNode, TcpOptions, TcpTransport,
    MAX_SOCKETS as TCP_MAX_SOCKETS, TCP_SCORE,
};

pub(crate) use peer::{describe_peer, lost_peer_error};
pub(crate) use verb::Verb;

use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::mem::{DeviceMem, MemKind, PinnedMem};
use crate::sync::Arc;
use std::fmt;
use std::task::Poll;

/// Bytes of the board area each rank of a host offers for kernels that
/// read and write each other's memory directly ([`Link::boards`]): the
/// links allocate and map it, the kernels lay it out (and check at compile
/// time that their layout fits). 73 pages: 256 header slots of 128 bytes,
/// 16 data entries of 16 KiB and a line each, then a counter line.
pub const BOARD_BYTES: usize = 73 * 4096;

/// Told when a rank's driver is about to park and when it has woken, and
/// asked to flush (`Device::add_park_hook`). A transport whose sockets the
/// driver reads itself while it runs hands them, while it sleeps, to a
/// thread of its own that wakes it when something arrives; one that
/// gathers small frames into one write sends them when the driver has
/// finished a round of tasks.
pub trait ParkHook: Send + Sync + fmt::Debug {
    /// The driver found nothing to do and is about to park.
    fn parking(&self);
    /// The driver woke from a park.
    fn woke(&self);
    /// The driver finished a round of tasks after [`FlushRequest::raise`]:
    /// write out what was gathered.
    fn flush(&self) {}
    /// The device's flush request, to raise when something is gathered.
    fn set_flush_request(&self, _request: FlushRequest) {}
    /// The driver stopped driving without parking: what it waited for
    /// came (its op completed) or its caller's deadline passed, and no
    /// verb of this rank polls the links until the device drives again,
    /// which may be never (the rank goes on to another communicator's op,
    /// for which a peer waits on this one). Whatever was gathered and not
    /// yet written must still reach the peers.
    fn released(&self) {}
}

/// A device's "flush after this round" flag ([`ParkHook::flush`]): one
/// relaxed load per round when nothing is gathered.
#[derive(Clone, Debug, Default)]
pub struct FlushRequest(Arc<std::sync::atomic::AtomicBool>);

impl FlushRequest {
    /// Asks for [`ParkHook::flush`] at the end of the driver's round.
    pub fn raise(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a flush was asked for since the last call (and clears it).
    pub(crate) fn take(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
            && self.0.swap(false, std::sync::atomic::Ordering::Acquire)
    }
}

/// One verb to perform on a link, as queued on a stream.
#[derive(Debug)]
pub enum LinkOp {
    /// Tell the peer it may write into this rank's buffers.
    TxAck,
    /// Wait for the peer's ack.
    RxAck,
    /// Raise the secondary signal at the peer.
    TxDataSignal,
    /// Wait for the peer's secondary signal.
    RxDataSignal,
    /// Transfer `src` into the peer's `dst_kind` buffer at `dst_offset`.
    TxAsync {
        /// Which of the peer's buffers.
        dst_kind: MemKind,
        /// Byte offset in that buffer.
        dst_offset: usize,
        /// Local source bytes.
        src: PinnedMem,
    },
    /// The receiving half of a transfer into `dst` (from the peer's
    /// `src_kind` buffer at `src_offset` on read-based transports).
    RxAsync {
        /// Which of the peer's buffers holds the data.
        src_kind: MemKind,
        /// Byte offset in that buffer.
        src_offset: usize,
        /// Local destination bytes.
        dst: PinnedMem,
    },
    /// `RxAck` then `TxAsync` as one verb (one step's single send): a
    /// transport that can hold data arriving before the receiver's ack
    /// ([`Link::eager_max`]) may send small payloads at once instead of
    /// waiting a round trip for the ack.
    TxAfterAck {
        /// Which of the peer's buffers.
        dst_kind: MemKind,
        /// Byte offset in that buffer.
        dst_offset: usize,
        /// Local source bytes.
        src: PinnedMem,
    },
    /// Transfer `src` and reduce it into the peer's buffer.
    TxWithReduce {
        /// Which of the peer's buffers.
        dst_kind: MemKind,
        /// Byte offset in that buffer.
        dst_offset: usize,
        /// Local source bytes.
        src: PinnedMem,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Wait until this side's transfers have completed.
    TxWaitDone,
    /// Send this rank's op descriptor to the peer.
    TxDesc(Box<OpDesc>),
    /// Receive the peer's op descriptor and check it against this one.
    RxDesc(Box<OpDesc>),
    /// Wait until the peer's next transfer into this rank has completed.
    RxWaitDone,
    /// Receive the peer's next descriptor without checking it and remember
    /// where its user buffers are, for `RxAsync` reads from its
    /// `ParamInput` / `ParamOutput` (mapping them when the peer sent
    /// handles and the link maps peers' memory).
    RxParamMem,
    /// `dst = dst op peer[src_kind][src_offset..]`, elementwise, straight
    /// out of the peer's user buffer (`ParamInput` / `ParamOutput`, as
    /// received by `RxParamMem`): one pass over a mapped buffer, or
    /// cross-memory reads through a bounded staging window.
    RxReduce {
        /// Which of the peer's user buffers.
        src_kind: MemKind,
        /// Byte offset in that buffer.
        src_offset: usize,
        /// Local destination and first operand.
        dst: PinnedMem,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
}

impl LinkOp {
    /// HCCL's name of the verb.
    pub fn verb(&self) -> &'static str {
        match self {
            LinkOp::TxAck => "TxAck",
            LinkOp::RxAck => "RxAck",
            LinkOp::TxDataSignal => "TxDataSignal",
            LinkOp::RxDataSignal => "RxDataSignal",
            LinkOp::TxAsync { .. } => "TxAsync",
            LinkOp::TxAfterAck { .. } => "RxAck+TxAsync",
            LinkOp::RxAsync { .. } => "RxAsync",
            LinkOp::TxWithReduce { .. } => "TxWithReduce",
            LinkOp::TxWaitDone => "TxWaitDone",
            LinkOp::TxDesc(_) => "TxDesc",
            LinkOp::RxDesc(_) => "RxDesc (consistency check)",
            LinkOp::RxWaitDone => "RxWaitDone",
            LinkOp::RxParamMem => "RxParamMem",
            LinkOp::RxReduce { .. } => "RxReduce",
        }
    }

    /// Bytes this verb moves (0 for signals).
    pub fn bytes(&self) -> usize {
        match self {
            LinkOp::TxAsync { src, .. }
            | LinkOp::TxAfterAck { src, .. }
            | LinkOp::TxWithReduce { src, .. } => src.mem().len(),
            op if op.is_peer_read() => match op {
                LinkOp::RxAsync { dst, .. } | LinkOp::RxReduce { dst, .. } => dst.mem().len(),
                _ => 0,
            },
            _ => 0,
        }
    }

    /// Whether this is a read from the peer's user buffer (an `RxAsync`
    /// from `ParamInput` / `ParamOutput`, or an `RxReduce`), which moves
    /// data, rather than the receiving half of a write.
    pub fn is_peer_read(&self) -> bool {
        matches!(
            self,
            LinkOp::RxAsync {
                src_kind: MemKind::ParamInput | MemKind::ParamOutput,
                ..
            } | LinkOp::RxReduce { .. }
        )
    }
}

/// Per-task progress a link keeps between polls of one verb (e.g. which
/// signal number the verb waits for, assigned at its first poll).
#[derive(Debug, Default, Clone, Copy)]
pub struct LinkOpState {
    /// Sequence number assigned at the first poll.
    pub seq: Option<u64>,
    /// Transport-defined progress (bytes moved so far, ...).
    pub progress: u64,
    /// The id of the stream the verb runs on ([`Stream::id`](crate::Stream::id)),
    /// set by the driver before each poll (0 where none applies: a graph
    /// replay, a loom model). Transports ignore it; the plan simulator's
    /// links keep a logical clock per stream with it.
    pub stream: u64,
}

/// One rank's end of a connection to one peer.
pub trait Link: Send + Sync + fmt::Debug {
    /// This rank.
    fn local_rank(&self) -> u32;
    /// The peer.
    fn remote_rank(&self) -> u32;
    /// Transport name for messages (`"in-process"`, `"shm"`, `"tcp"`).
    fn transport(&self) -> &'static str;
    /// Length of the peer's buffer `kind`, if the link can address it.
    fn remote_mem_len(&self, kind: MemKind) -> Option<usize>;
    /// Advances `op`. Returns `Ready` when it has completed; `Pending` when it
    /// waits for the peer (the transport wakes the polling device when that
    /// may have changed).
    fn poll(&self, op: &LinkOp, state: &mut LinkOpState) -> Poll<Result<()>>;
    /// Tells the peer this side has failed, so its waits end with an error
    /// instead of a timeout.
    fn abort(&self, reason: &str);
    /// Fails every current and future wait on this end with `reason` and
    /// tells the peer (HCCL's communicator abort).
    fn shutdown(&self, reason: &str);
    /// `Ok` while the link is usable; otherwise the error that broke it.
    fn health(&self) -> Result<()>;
    /// Largest payload this link may send before the receiver's ack
    /// ([`LinkOp::TxAfterAck`]); 0 (the default) = never, and
    /// `tx_after_ack` then enqueues `RxAck` and `TxAsync` as two verbs.
    fn eager_max(&self) -> usize {
        0
    }
    /// Whether this end can read the peer's user buffers (`read_peer`):
    /// both ranks on this host and cross-memory attach permitted.
    fn reads_peer_param(&self) -> bool {
        false
    }
    /// Whether this end reaches the peer's user buffers by load and store
    /// when they are registered shareable memory: it imports the handles
    /// the peer's descriptor carries (`expose_param_mem` sends them only
    /// over such links), so `read_peer` and `read_peer_reduce` read the
    /// mapping and `TxAsync` into `PARAM_INPUT` / `PARAM_OUTPUT` writes
    /// into it. Unregistered buffers still go through cross-memory attach.
    fn maps_peer_param(&self) -> bool {
        false
    }
    /// This rank's board and the peer's ([`BOARD_BYTES`] each: memory that
    /// kernels of the host's ranks read and write directly), if the link
    /// can reach them (ranks of one host).
    fn boards(&self) -> Option<(DeviceMem, DeviceMem)> {
        None
    }
    /// Wakes the peer's driver (after writing something it may wait for,
    /// e.g. on a board).
    fn wake_peer(&self) {}
    /// `Ok` while the link is usable and the peer is alive, as far as the
    /// transport can tell (checked now and then while waiting on it).
    fn liveness(&self) -> Result<()> {
        self.health()
    }
    /// `Some` once the transport knows the peer is gone — its process
    /// exited or was killed, its connection closed without a goodbye —
    /// with an error naming it (rank, process, host). Asked by the
    /// device's driver when a wait has lasted a while (not per poll), on
    /// every link of the device, so a rank notices a dead peer whether or
    /// not it is waiting on that peer at the moment. Unlike
    /// [`health`](Self::health), an abort the peer sent is not "gone".
    fn peer_lost(&self) -> Option<HcclError> {
        None
    }
    /// Tells the peer that this end's communicator was destroyed, so that
    /// a wait of the peer on this rank ends at once with an error naming
    /// it (instead of a timeout while this process lives on).
    fn close(&self) {}
}

/// A shared link handle. Its verbs are enqueue methods (`tx_ack(stream)`,
/// `tx_async(..., stream)`, ...), defined where streams are: links know
/// nothing of streams.
#[derive(Clone, Debug)]
pub struct LinkHandle(Arc<dyn Link>);

impl LinkHandle {
    /// Wraps a link.
    pub fn new(link: Arc<dyn Link>) -> Self {
        LinkHandle(link)
    }

    /// The underlying link.
    pub fn link(&self) -> &Arc<dyn Link> {
        &self.0
    }

    /// The peer rank.
    pub fn remote_rank(&self) -> u32 {
        self.0.remote_rank()
    }

    /// This rank.
    pub fn local_rank(&self) -> u32 {
        self.0.local_rank()
    }

    /// `Ok` if a transfer of `len` bytes at `offset` fits the peer's
    /// buffer `kind`.
    pub(crate) fn check_remote(&self, kind: MemKind, offset: usize, len: usize) -> Result<()> {
        let cap = self.0.remote_mem_len(kind).ok_or_else(|| {
            HcclError::internal(format!(
                "{} link to rank {} cannot address the peer's {kind} buffer",
                self.0.transport(),
                self.0.remote_rank()
            ))
        })?;
        if offset.checked_add(len).is_none_or(|end| end > cap) {
            return Err(HcclError::internal(format!(
                "transfer of {len} bytes at offset {offset} overruns the peer's {kind} buffer of {cap} bytes"
            ))
            .peer(self.0.remote_rank()));
        }
        Ok(())
    }

    /// `Ok` if this link can read the peer's user buffers (`read_peer`).
    pub(crate) fn require_peer_reads(&self) -> Result<()> {
        if self.0.reads_peer_param() {
            return Ok(());
        }
        Err(HcclError::not_support(format!(
            "the {} link to rank {} cannot read the peer's user buffers (needs both ranks on one host \
             and cross-memory attach: same user, Yama ptrace_scope 0, HCCL_RS_CMA not 0)",
            self.0.transport(),
            self.0.remote_rank()
        )))
    }
}
