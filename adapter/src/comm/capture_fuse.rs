//! Fusion of captured AllReduces (gradient bucketing in graph mode):
//! consecutive small AllReduces issued on a capturing stream by one
//! communicator, with the same type and reduction, are recorded as one —
//! their inputs packed into one buffer, reduced by one AllReduce, and
//! unpacked — so every replay pays one op's synchronisation instead of
//! one per tensor.
//!
//! A fusable AllReduce is not recorded when issued: the run it joins is
//! held back in the capture ([`Stream::capture_defer`]) and recorded when
//! something else comes — another op (any communicator), any other task
//! on any stream of the capture (a copy, an event, a kernel), or the end
//! of the capture — so stream order is kept. Its arguments are checked
//! when issued, as any op's; an error in recording the run surfaces from
//! the call that flushed it and invalidates the capture.

use super::group::{fused_all_reduce, Deferred, GROUP_FUSE_MAX_BYTES};
use super::HcclComm;
use hccl_algorithm::{OpParam, OpType};
use hccl_platform::{CaptureDeferred, DataType, ReduceOp, Result, Stream};
use std::cell::Cell;

/// A run's packed buffer holds at most this many bytes (the inputs of
/// the AllReduces fused into one).
pub const CAPTURE_FUSE_MAX_BYTES: usize = 4 << 20;

thread_local! {
    /// Set while a run is being recorded: its own AllReduce (and the
    /// single op of a run of one) must be recorded, not deferred again.
    static FLUSHING: Cell<bool> = const { Cell::new(false) };
}

/// The AllReduces held back in a capture, in issue order.
struct Run {
    ops: Vec<Deferred>,
    bytes: usize,
}

impl Run {
    /// Whether `d` may join this run: same communicator, stream, type and
    /// reduction, room left, no input of it written by an earlier op of
    /// the run (reading a result the fused op has not produced yet), and
    /// no output written twice (the next bucket of a loop over the same
    /// buffers starts a run of its own, so a flat bucket stays adjacent).
    fn admits(&self, d: &Deferred) -> bool {
        let first = &self.ops[0];
        first.comm.same_as(&d.comm)
            && first.param.stream.id() == d.param.stream.id()
            && key(&first.param) == key(&d.param)
            && self.bytes + d.param.input.len() <= CAPTURE_FUSE_MAX_BYTES
            && !self.ops.iter().any(|e| {
                e.param.output.overlaps(&d.param.input) || e.param.output.overlaps(&d.param.output)
            })
    }
}

impl CaptureDeferred for Run {
    fn flush(self: Box<Self>) -> Result<()> {
        FLUSHING.with(|f| f.set(true));
        let r = if self.ops.len() == 1 {
            let d = &self.ops[0];
            d.comm.g().comm.exec_op(&d.param)
        } else {
            fused_all_reduce(&self.ops)
        };
        FLUSHING.with(|f| f.set(false));
        r
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The type and reduction of a fusable AllReduce.
fn key(p: &OpParam<'_>) -> Option<(DataType, ReduceOp)> {
    (p.op_type == OpType::AllReduce && !p.input.is_empty() && p.input.len() <= GROUP_FUSE_MAX_BYTES)
        .then_some((p.dtype, p.reduce_op))
}

/// For an op issued on a capturing `stream`: a fusable AllReduce joins
/// (or starts) the run held back in the capture and `true` is returned;
/// any other op first records the run held back, and `false` is returned
/// (the caller records the op).
pub(super) fn defer(comm: &HcclComm, param: &OpParam<'_>, stream: &Stream) -> Result<bool> {
    if FLUSHING.with(Cell::get) {
        return Ok(false);
    }
    if key(param).is_none() {
        stream.flush_capture_deferred()?;
        return Ok(false);
    }
    let d = Deferred::of(comm, param);
    let mut held = stream.take_capture_deferred();
    if let Some(run) = held
        .as_mut()
        .and_then(|w| w.as_any_mut().downcast_mut::<Run>())
    {
        if run.admits(&d) {
            run.bytes += d.param.input.len();
            run.ops.push(d);
            stream.capture_defer(held.expect("matched above"))?;
            return Ok(true);
        }
    }
    if let Some(work) = held {
        work.flush()?;
    }
    let bytes = d.param.input.len();
    stream.capture_defer(Box::new(Run {
        ops: vec![d],
        bytes,
    }))?;
    Ok(true)
}
