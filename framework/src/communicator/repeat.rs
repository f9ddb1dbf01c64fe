//! The repeat path: an op run again with exactly the arguments of an op
//! before it, as its executor prepared it
//! ([`CollExecutor::repeat_plan`](hccl_algorithm::CollExecutor::repeat_plan)).
//!
//! A small collective in a loop (a parameter server's Broadcast, a
//! training step's scalar AllReduce) pays for its path more than for its
//! bytes: validation, executor lookup, sub-ranges, the descriptor and the
//! kernel's checks come to most of a few hundred nanoseconds. The caller
//! (the adapter) keeps the [`RepeatOp`] of an op it validated, compares
//! the next call's arguments with it, and when they are the same runs
//! [`Communicator::run_repeat`]: the abort check, the flight recorder and
//! the prepared launch, nothing else.

use super::{aborted_error, Communicator};
use hccl_algorithm::{OpParam, OpType, RepeatLaunch, WorkflowMode};
use hccl_platform::{DataType, DeviceMem, HcclError, OpLabel, ReduceOp, Result, Stream};
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// An op prepared to run again with the same arguments, on the stream it
/// first ran on (see the module docs). Made by
/// [`Communicator::exec_op_repeatable`], run by
/// [`Communicator::run_repeat`].
#[derive(Debug)]
pub struct RepeatOp {
    plan: Box<dyn RepeatLaunch>,
    label: Arc<OpLabel>,
    tag: Arc<str>,
    /// The stream the op ran on ([`Stream::id`]): a plan is for one
    /// stream (its device was checked when the op first ran).
    stream: u64,
    op_type: OpType,
    count: u64,
    dtype: DataType,
    reduce_op: ReduceOp,
    root: u32,
    peer: u32,
    mode: WorkflowMode,
    /// An empty range: what the flight recorder's view of the op holds as
    /// memory (it records arguments, not addresses).
    none: DeviceMem,
}

impl Communicator {
    /// How many ops the repeat path has run on this communicator (each
    /// an op whose arguments were the same as its op's previous call's).
    pub fn repeated_ops(&self) -> u64 {
        self.repeated.load(Ordering::Relaxed)
    }

    /// Runs `param` as [`exec_op`](Self::exec_op) does and, when its
    /// executor can repeat it ([`CollExecutor::repeat_plan`](hccl_algorithm::CollExecutor::repeat_plan))
    /// and nothing observes ops one by one (entry log, timeline, capture),
    /// returns that repeat: [`run_repeat`](Self::run_repeat) runs the same
    /// op again. The caller owns the promise that a repeat is run only for
    /// a call with the same arguments as `param` (buffers, count, type,
    /// reduction, root, mode, stream), validated as this one was.
    pub fn exec_op_repeatable(&self, param: &OpParam) -> Result<Option<RepeatOp>> {
        let idx = self.exec_op_index(param)?;
        if self.config.entry_log
            || param.send_v.is_some()
            || param.recv_v.is_some()
            || param.stream.is_capturing()
            || self.device.timeline().is_some()
        {
            return Ok(None);
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let op = &mut st.ops[idx];
        if param.mode == WorkflowMode::Graph && !op.graph {
            // ran in op-base mode in place of graph mode: not worth a plan
            return Ok(None);
        }
        let plan = match op.executor.repeat_plan(param, &op.res) {
            Ok(Some(plan)) => plan,
            Ok(None) => return Ok(None),
            Err(e) => {
                // the op ran: only its repeat is not prepared
                tracing::debug!(rank = self.rank, tag = %param.tag, error = %e,
                    "no repeat plan for this op");
                return Ok(None);
            }
        };
        Ok(Some(RepeatOp {
            plan,
            label: Arc::clone(&op.label),
            tag: Arc::clone(&param.tag),
            stream: param.stream.id(),
            op_type: param.op_type,
            count: param.count,
            dtype: param.dtype,
            reduce_op: param.reduce_op,
            root: param.root,
            peer: param.peer,
            mode: param.mode,
            none: DeviceMem::null(),
        }))
    }

    /// Runs the op `r` once more on `stream`, on `input` and `output`
    /// (what [`OpParam::input`] and [`OpParam::output`] of the call would
    /// be), or `None` when it cannot be
    /// run this way now (another stream than its own, the stream is
    /// capturing, a timeline is recording ops): then the caller takes the
    /// full path. Errors are the full path's: an aborted communicator
    /// refuses the op, and a failed launch leaves nothing queued.
    pub fn run_repeat(
        &self,
        r: &RepeatOp,
        stream: &Stream,
        input: &DeviceMem,
        output: &DeviceMem,
    ) -> Option<Result<()>> {
        if stream.id() != r.stream || stream.is_capturing() || self.device.timeline().is_some() {
            return None;
        }
        let ctx = |e: HcclError| e.rank(self.rank).tag(&*r.tag);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *st;
        if let Some(reason) = &st.aborted {
            return Some(Err(ctx(aborted_error(reason))));
        }
        if let Some(e) = self.revoked_error() {
            return Some(Err(ctx(e)));
        }
        if !st
            .last_executor
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, &r.label))
        {
            st.last_executor = Some(Arc::clone(&r.label));
        }
        stream.set_label_to(&r.label);
        let mark = stream.mark();
        let ticket = self.flight.as_ref().map(|fr| {
            let param = OpParam {
                tag: Cow::Borrowed(&r.tag),
                op_type: r.op_type,
                stream: Cow::Borrowed(stream),
                input: Cow::Borrowed(&r.none),
                output: Cow::Borrowed(&r.none),
                count: r.count,
                dtype: r.dtype,
                reduce_op: r.reduce_op,
                root: r.root,
                mode: r.mode,
                send_v: None,
                recv_v: None,
                peer: r.peer,
            };
            let start = stream.progress().enqueued;
            fr.begin(&mut st.fr_writer, &param, &r.label, start)
        });
        let run = r.plan.launch(stream, input, output);
        self.repeated.fetch_add(1, Ordering::Relaxed);
        if let (Some(fr), Some(t)) = (&self.flight, ticket) {
            fr.end(t, stream, run.is_ok());
        }
        Some(run.map_err(|e| {
            let e = ctx(e);
            stream.rollback(mark, &e);
            e
        }))
    }
}
