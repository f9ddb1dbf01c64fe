//! The adapter's side of the repeat path (the framework's
//! `communicator/repeat.rs`): a call with exactly the arguments of the
//! previous call of its op skips validation and the framework's full
//! path, and runs the op as its executor prepared it.
//!
//! Each op code keeps the arguments of its last validated call that
//! produced a plan. A call is a repeat when its buffers are the same
//! ranges of the same allocations (compared by identity, kept weakly: a
//! freed buffer is not kept mapped), its counts, type, reduction, root
//! and stream are the same, no memory was registered or deregistered
//! since (registration decides graph or op-base mode), and the thread is
//! not in a group. Validation depends on nothing else, so a repeat would
//! have passed it; everything that observes ops one by one (capture,
//! timeline, entry log) sends the call down the full path.

use super::{Call, HcclComm};
use hccl_algorithm::{OpParam, OpType};
use hccl_framework::RepeatOp;
use hccl_platform::{DataType, DeviceMem, ReduceOp, Result, Stream, WeakMem};
use std::sync::Mutex;

/// The last repeatable call of each op code.
pub(super) type RepeatSlots = [Mutex<Option<Repeat>>; OpType::CODES];

/// A validated call's arguments and the op it ran, prepared to run again.
#[derive(Debug)]
pub(super) struct Repeat {
    key: CallKey,
    op: RepeatOp,
    /// What a side the op does not use is handed as (an empty range).
    none: DeviceMem,
}

/// What decides a call's validation and its op.
#[derive(Debug)]
pub(super) struct CallKey {
    api: &'static str,
    /// The send buffer when the call uses one (`None`: it moves nothing
    /// of it, whatever was passed).
    send: Option<WeakMem>,
    recv: Option<WeakMem>,
    send_elems: u64,
    recv_elems: u64,
    count: u64,
    dtype: DataType,
    op: ReduceOp,
    root: u32,
    in_place: bool,
    participate: bool,
    stream: u64,
    epoch: u64,
}

impl CallKey {
    /// The key of `call` on `stream`, if the call can be repeated:
    /// collectives without count vectors (send and receive name their
    /// peer in a tag of their own; V ops carry vectors to compare).
    pub(super) fn of(call: &Call<'_>, stream: &Stream, epoch: u64) -> Option<CallKey> {
        if call.send_v.is_some()
            || call.recv_v.is_some()
            || matches!(call.op_type, OpType::Send | OpType::Receive)
        {
            return None;
        }
        Some(CallKey {
            api: call.api,
            send: (call.send_elems > 0).then(|| call.send.downgrade()),
            recv: (call.recv_elems > 0).then(|| call.recv.downgrade()),
            send_elems: call.send_elems,
            recv_elems: call.recv_elems,
            count: call.count,
            dtype: call.dtype,
            op: call.op,
            root: call.root,
            in_place: call.in_place,
            participate: call.participate,
            stream: stream.id(),
            epoch,
        })
    }

    /// Whether `call` on `stream` has exactly these arguments. (Count
    /// vectors need no look: a key exists only for op codes whose calls
    /// carry none.)
    fn matches(&self, call: &Call<'_>, stream: &Stream, epoch: u64) -> bool {
        let mem = |k: &Option<WeakMem>, elems: u64, m: &DeviceMem| match k {
            Some(k) => elems > 0 && k.is(m),
            None => elems == 0,
        };
        self.epoch == epoch
            && self.stream == stream.id()
            && self.count == call.count
            && std::ptr::eq(self.api, call.api)
            && self.dtype == call.dtype
            && self.op == call.op
            && self.root == call.root
            && self.in_place == call.in_place
            && self.participate == call.participate
            && self.send_elems == call.send_elems
            && self.recv_elems == call.recv_elems
            && mem(&self.send, call.send_elems, call.send)
            && mem(&self.recv, call.recv_elems, call.recv)
    }
}

impl HcclComm {
    /// Runs `call` as a repeat of the last call of its op, if it is one
    /// (see the module docs); `None`: take the full path.
    pub(super) fn try_repeat(
        &self,
        call: &Call<'_>,
        stream: &Stream,
        epoch: u64,
    ) -> Option<Result<()>> {
        let g = self.g();
        let slot = g.repeats.get(call.op_type.code() as usize)?;
        // another thread issuing this op on this communicator: the full
        // path (it serialises on the framework's lock anyway)
        let guard = slot.try_lock().ok()?;
        let r = guard.as_ref()?;
        if !r.key.matches(call, stream, epoch) || super::group::active() {
            return None;
        }
        let input = if call.send_elems > 0 {
            call.send
        } else {
            &r.none
        };
        let output = if call.recv_elems > 0 {
            call.recv
        } else {
            &r.none
        };
        g.comm.run_repeat(&r.op, stream, input, output)
    }

    /// Runs `param` (validated, from a call with key `key`) through the
    /// framework, and keeps its repeat for the next call of its op.
    pub(super) fn exec_keeping_repeat(
        &self,
        param: &OpParam<'_>,
        key: Option<CallKey>,
    ) -> Result<()> {
        let g = self.g();
        let (Some(key), Some(slot)) = (key, g.repeats.get(param.op_type.code() as usize)) else {
            return g.comm.exec_op(param);
        };
        let op = g.comm.exec_op_repeatable(param)?;
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        *slot = op.map(|op| Repeat {
            key,
            op,
            none: DeviceMem::null(),
        });
        Ok(())
    }
}
