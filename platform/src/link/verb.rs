//! [`Verb`]: the compact form of a [`LinkOp`], as a queued task stores it.
//!
//! A [`LinkOp`] owns its memory operand (a pin) and is 40-odd bytes; a
//! stream queues millions of link verbs before any runs (the plan
//! simulator), so it keeps only the verb and its small operands and holds
//! the link and the memory elsewhere. This file is the translation between
//! the two forms; it knows nothing of streams.

use super::LinkOp;
use crate::dtype::{DataType, ReduceOp};
use crate::mem::{DeviceMem, MemKind, MemView, PinnedMem};
use std::mem::ManuallyDrop;

/// A link verb with its small operands; the link, the memory range and the
/// peer's offset are kept by whoever stores the verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    TxAck,
    RxAck,
    TxDataSignal,
    RxDataSignal,
    TxWaitDone,
    RxWaitDone,
    /// Into the peer's buffer of this kind.
    TxAsync(MemKind),
    /// `RxAck`, then into the peer's buffer of this kind.
    TxAfterAck(MemKind),
    /// From the peer's buffer of this kind.
    RxAsync(MemKind),
    /// Into the peer's buffer of this kind, reducing (codes of the
    /// data type and the operator, one byte each, to keep tasks small).
    TxWithReduce(MemKind, u8, u8),
}

impl Verb {
    /// `TxWithReduce` into `dst_kind` with `dtype` and `op`.
    pub(crate) fn tx_with_reduce(dst_kind: MemKind, dtype: DataType, op: ReduceOp) -> Verb {
        Verb::TxWithReduce(dst_kind, dtype.code() as u8, op.code() as u8)
    }

    /// The compact form of `op` with its memory operand and the peer's
    /// offset; `None` for the verbs that keep their public form (the
    /// descriptor verbs, once per op: not worth a compact form; the fused
    /// read-reduce, which moves a whole block per verb).
    pub(crate) fn of(op: &LinkOp) -> Option<(Verb, Option<&PinnedMem>, usize)> {
        Some(match op {
            LinkOp::TxAck => (Verb::TxAck, None, 0),
            LinkOp::RxAck => (Verb::RxAck, None, 0),
            LinkOp::TxDataSignal => (Verb::TxDataSignal, None, 0),
            LinkOp::RxDataSignal => (Verb::RxDataSignal, None, 0),
            LinkOp::TxWaitDone => (Verb::TxWaitDone, None, 0),
            LinkOp::RxWaitDone => (Verb::RxWaitDone, None, 0),
            LinkOp::TxAsync {
                dst_kind,
                dst_offset,
                src,
            } => (Verb::TxAsync(*dst_kind), Some(src), *dst_offset),
            LinkOp::TxAfterAck {
                dst_kind,
                dst_offset,
                src,
            } => (Verb::TxAfterAck(*dst_kind), Some(src), *dst_offset),
            LinkOp::RxAsync {
                src_kind,
                src_offset,
                dst,
            } => (Verb::RxAsync(*src_kind), Some(dst), *src_offset),
            LinkOp::TxWithReduce {
                dst_kind,
                dst_offset,
                src,
                dtype,
                op,
            } => (
                Verb::tx_with_reduce(*dst_kind, *dtype, *op),
                Some(src),
                *dst_offset,
            ),
            LinkOp::TxDesc(_)
            | LinkOp::RxDesc(_)
            | LinkOp::RxParamMem
            | LinkOp::RxReduce { .. } => return None,
        })
    }

    /// Whether the verb has a local memory operand.
    pub(crate) fn has_mem(self) -> bool {
        matches!(
            self,
            Verb::TxAsync(_) | Verb::TxAfterAck(_) | Verb::RxAsync(_) | Verb::TxWithReduce(..)
        )
    }

    /// HCCL's name of the verb (as [`LinkOp::verb`]).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Verb::TxAck => "TxAck",
            Verb::RxAck => "RxAck",
            Verb::TxDataSignal => "TxDataSignal",
            Verb::RxDataSignal => "RxDataSignal",
            Verb::TxWaitDone => "TxWaitDone",
            Verb::RxWaitDone => "RxWaitDone",
            Verb::TxAsync(_) => "TxAsync",
            Verb::TxAfterAck(_) => "RxAck+TxAsync",
            Verb::RxAsync(_) => "RxAsync",
            Verb::TxWithReduce(..) => "TxWithReduce",
        }
    }

    /// The public `LinkOp` for this verb, pinning `mem`.
    pub(crate) fn to_link_op(self, mem: Option<&DeviceMem>, remote_off: usize) -> LinkOp {
        self.link_op(remote_off, || {
            mem.expect("a transfer verb has a memory operand").pin()
        })
    }

    /// The public `LinkOp` for this verb at the peer's offset
    /// `remote_off`, its memory operand borrowed from `mem` (see
    /// [`MemView::as_pinned`]; the result must not be dropped).
    pub(crate) fn materialize(
        self,
        mem: Option<MemView<'_>>,
        remote_off: usize,
    ) -> ManuallyDrop<LinkOp> {
        ManuallyDrop::new(self.link_op(remote_off, || {
            ManuallyDrop::into_inner(
                mem.expect("a transfer verb has a memory operand")
                    .as_pinned(),
            )
        }))
    }

    /// The `LinkOp` for this verb, its memory operand (transfer verbs
    /// only) from `pinned`: the one mapping both forms share.
    #[inline]
    fn link_op(self, remote_off: usize, pinned: impl FnOnce() -> PinnedMem) -> LinkOp {
        match self {
            Verb::TxAck => LinkOp::TxAck,
            Verb::RxAck => LinkOp::RxAck,
            Verb::TxDataSignal => LinkOp::TxDataSignal,
            Verb::RxDataSignal => LinkOp::RxDataSignal,
            Verb::TxWaitDone => LinkOp::TxWaitDone,
            Verb::RxWaitDone => LinkOp::RxWaitDone,
            Verb::TxAsync(dst_kind) => LinkOp::TxAsync {
                dst_kind,
                dst_offset: remote_off,
                src: pinned(),
            },
            Verb::TxAfterAck(dst_kind) => LinkOp::TxAfterAck {
                dst_kind,
                dst_offset: remote_off,
                src: pinned(),
            },
            Verb::RxAsync(src_kind) => LinkOp::RxAsync {
                src_kind,
                src_offset: remote_off,
                dst: pinned(),
            },
            Verb::TxWithReduce(dst_kind, dtype, op) => LinkOp::TxWithReduce {
                dst_kind,
                dst_offset: remote_off,
                src: pinned(),
                dtype: DataType::of_byte(dtype),
                op: ReduceOp::of_byte(op),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_verbs_have_the_public_verbs_names() {
        let m = DeviceMem::alloc(8).unwrap();
        let k = MemKind::CclInput;
        let (dt, op) = (DataType::Fp32.code() as u8, ReduceOp::Max.code() as u8);
        for v in [
            Verb::TxAck,
            Verb::RxAck,
            Verb::TxDataSignal,
            Verb::RxDataSignal,
            Verb::TxWaitDone,
            Verb::RxWaitDone,
            Verb::TxAsync(k),
            Verb::TxAfterAck(k),
            Verb::RxAsync(k),
            Verb::TxWithReduce(k, dt, op),
        ] {
            let op = v.materialize(Some(m.view()), 0);
            assert_eq!(op.verb(), v.name());
        }
        assert_eq!(m.tasks_in_flight(), 0, "a borrowed pin pins nothing");
    }
}
