//! Enqueueing link verbs on a stream: the enqueue methods of
//! [`LinkHandle`] (`tx_ack(stream)`, `tx_async(..., stream)`, ...).
//!
//! They live here, not in `link/`, because a stream may know links but a
//! link knows nothing of streams. Signal and transfer verbs are queued in
//! their compact form ([`Verb`]: no `LinkOp` or pin built); the descriptor
//! verbs, once per op, keep their public [`LinkOp`] form.

use super::task::{link_op, TaskKind};
use super::Stream;
use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::link::{LinkHandle, LinkOp, LinkOpState, OpDesc, ParamMem, Verb};
use crate::mem::{DeviceMem, MemKind};

impl LinkHandle {
    /// Enqueues `op` in its public form.
    fn push(&self, stream: &Stream, op: LinkOp) -> Result<()> {
        stream.enqueue(TaskKind::Link {
            link: self.link().clone(),
            op,
            state: LinkOpState::default(),
        })
    }

    /// Enqueues `verb` in its compact form (no `LinkOp` or pin built).
    fn push_verb(
        &self,
        stream: &Stream,
        verb: Verb,
        mem: Option<&DeviceMem>,
        remote_off: usize,
    ) -> Result<()> {
        stream.push(|pools| link_op(pools, self.link(), verb, mem, remote_off))
    }

    /// Enqueues `TxAck`.
    pub fn tx_ack(&self, stream: &Stream) -> Result<()> {
        self.push_verb(stream, Verb::TxAck, None, 0)
    }
    /// Enqueues `RxAck`.
    pub fn rx_ack(&self, stream: &Stream) -> Result<()> {
        self.push_verb(stream, Verb::RxAck, None, 0)
    }
    /// Enqueues `TxDataSignal`.
    pub fn tx_data_signal(&self, stream: &Stream) -> Result<()> {
        self.push_verb(stream, Verb::TxDataSignal, None, 0)
    }
    /// Enqueues `RxDataSignal`.
    pub fn rx_data_signal(&self, stream: &Stream) -> Result<()> {
        self.push_verb(stream, Verb::RxDataSignal, None, 0)
    }
    /// Enqueues `TxAsync`: `src` to the peer's `dst_kind` at `dst_offset`.
    pub fn tx_async(
        &self,
        dst_kind: MemKind,
        dst_offset: usize,
        src: &DeviceMem,
        stream: &Stream,
    ) -> Result<()> {
        self.check_remote(dst_kind, dst_offset, src.len())?;
        self.push_verb(stream, Verb::TxAsync(dst_kind), Some(src), dst_offset)
    }
    /// Enqueues `RxAck` then `TxAsync` (`src` to the peer's `dst_kind` at
    /// `dst_offset` once the peer has acked): one verb on links that may
    /// send small payloads before the ack arrives ([`Link::eager_max`]),
    /// two elsewhere.
    ///
    /// [`Link::eager_max`]: crate::link::Link::eager_max
    pub fn tx_after_ack(
        &self,
        dst_kind: MemKind,
        dst_offset: usize,
        src: &DeviceMem,
        stream: &Stream,
    ) -> Result<()> {
        self.check_remote(dst_kind, dst_offset, src.len())?;
        let eager_max = self.link().eager_max();
        if eager_max == 0 || src.len() > eager_max {
            self.rx_ack(stream)?;
            return self.push_verb(stream, Verb::TxAsync(dst_kind), Some(src), dst_offset);
        }
        self.push_verb(stream, Verb::TxAfterAck(dst_kind), Some(src), dst_offset)
    }
    /// Enqueues `RxAsync`: the receiving half of a transfer into `dst`.
    pub fn rx_async(
        &self,
        src_kind: MemKind,
        src_offset: usize,
        dst: &DeviceMem,
        stream: &Stream,
    ) -> Result<()> {
        self.push_verb(stream, Verb::RxAsync(src_kind), Some(dst), src_offset)
    }
    /// Enqueues `TxWithReduce`: the peer's `dst_kind[dst_offset..] op= src`.
    pub fn tx_with_reduce(
        &self,
        dst_kind: MemKind,
        dst_offset: usize,
        src: &DeviceMem,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.check_remote(dst_kind, dst_offset, src.len())?;
        self.push_verb(
            stream,
            Verb::tx_with_reduce(dst_kind, dtype, op),
            Some(src),
            dst_offset,
        )
    }
    /// Enqueues the consistency handshake: send `desc`, then receive the
    /// peer's and fail with HCCL's inconsistency error if they differ.
    pub fn exchange_desc(&self, desc: OpDesc, stream: &Stream) -> Result<()> {
        self.push(stream, LinkOp::TxDesc(Box::new(desc)))?;
        self.push(stream, LinkOp::RxDesc(Box::new(desc)))
    }

    /// Enqueues sending this rank's op descriptor.
    pub fn tx_desc(&self, desc: OpDesc, stream: &Stream) -> Result<()> {
        self.push(stream, LinkOp::TxDesc(Box::new(desc)))
    }

    /// Enqueues receiving the peer's op descriptor and checking it against `desc`.
    pub fn rx_desc(&self, desc: OpDesc, stream: &Stream) -> Result<()> {
        self.push(stream, LinkOp::RxDesc(Box::new(desc)))
    }

    /// Enqueues sending where this rank's user buffers of the op are
    /// (`input`, `output`), for a peer that will read them with
    /// [`read_peer`](Self::read_peer). The peer takes it with
    /// [`rx_param_mem`](Self::rx_param_mem). Buffers registered with the
    /// communicator whose device runs `stream` (`DeviceMem::register_in`
    /// with its uid) go with their handles when the link maps peers'
    /// memory ([`Link::maps_peer_param`]): the peer then reads (and may
    /// write, `TxAsync` into `PARAM_INPUT` / `PARAM_OUTPUT`) them directly.
    ///
    /// [`Link::maps_peer_param`]: crate::link::Link::maps_peer_param
    pub fn expose_param_mem(
        &self,
        input: &DeviceMem,
        output: &DeviceMem,
        stream: &Stream,
    ) -> Result<()> {
        self.require_peer_reads()?;
        // handles only of buffers registered with this op's communicator
        // (the stream's device is the communicator's), and only to peers
        // that map them
        let (domain, maps) = (stream.device().uid(), self.link().maps_peer_param());
        let handle = |m: &DeviceMem| maps.then(|| m.registered_handle(domain)).flatten();
        let mem = ParamMem {
            input_addr: input.addr(),
            input_len: input.len() as u64,
            output_addr: output.addr(),
            output_len: output.len() as u64,
            input_handle: handle(input),
            output_handle: handle(output),
        };
        self.push(
            stream,
            LinkOp::TxDesc(Box::new(OpDesc {
                mem,
                ..OpDesc::default()
            })),
        )
    }

    /// Enqueues receiving where the peer's user buffers of the op are.
    pub fn rx_param_mem(&self, stream: &Stream) -> Result<()> {
        self.require_peer_reads()?;
        self.push(stream, LinkOp::RxParamMem)
    }

    /// Enqueues a read of `dst.len()` bytes at `src_offset` of the peer's
    /// user buffer `src_kind` (`ParamInput` or `ParamOutput`, as the peer
    /// exposed them for this op) into `dst`.
    pub fn read_peer(
        &self,
        src_kind: MemKind,
        src_offset: usize,
        dst: &DeviceMem,
        stream: &Stream,
    ) -> Result<()> {
        self.require_peer_reads()?;
        if !matches!(src_kind, MemKind::ParamInput | MemKind::ParamOutput) {
            return Err(HcclError::internal(format!(
                "read_peer reads the peer's user buffers (PARAM_INPUT, PARAM_OUTPUT), not {src_kind}"
            )));
        }
        self.push(
            stream,
            LinkOp::RxAsync {
                src_kind,
                src_offset,
                dst: dst.pin(),
            },
        )
    }

    /// Enqueues `dst = dst op` the `dst.len()` bytes at `src_offset` of the
    /// peer's user buffer `src_kind` (`ParamInput` or `ParamOutput`, as the
    /// peer exposed them for this op), elementwise as `dtype`: one pass
    /// straight out of the peer's buffer where it is mapped, else
    /// cross-memory reads through a bounded staging window.
    pub fn read_peer_reduce(
        &self,
        src_kind: MemKind,
        src_offset: usize,
        dst: &DeviceMem,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.require_peer_reads()?;
        if !matches!(src_kind, MemKind::ParamInput | MemKind::ParamOutput) {
            return Err(HcclError::internal(format!(
                "read_peer_reduce reads the peer's user buffers (PARAM_INPUT, PARAM_OUTPUT), not {src_kind}"
            )));
        }
        if dst.len() % dtype.size() != 0 {
            return Err(HcclError::internal(format!(
                "read_peer_reduce of {} bytes is not a whole number of {dtype} elements",
                dst.len()
            )));
        }
        self.push(
            stream,
            LinkOp::RxReduce {
                src_kind,
                src_offset,
                dst: dst.pin(),
                dtype,
                op,
            },
        )
    }

    /// Enqueues `TxWaitDone`.
    pub fn tx_wait_done(&self, stream: &Stream) -> Result<()> {
        self.push_verb(stream, Verb::TxWaitDone, None, 0)
    }
    /// Enqueues `RxWaitDone`.
    pub fn rx_wait_done(&self, stream: &Stream) -> Result<()> {
        self.push_verb(stream, Verb::RxWaitDone, None, 0)
    }
}
