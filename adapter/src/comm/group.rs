//! Group calls (HCCL's `HcclGroupStart` / `HcclGroupEnd` /
//! `HcclGroupStatusGet`): ops issued by a thread between a start and the
//! matching end are checked at once but launched together at the end.
//!
//! At the end, in issue order:
//! - every Send and Receive of one communicator on one stream goes out as
//!   one [`HcclComm::batch_send_recv`] (at the place of the group's first
//!   one), whose rounds pair each transfer with its partner's, so a group
//!   in which two ranks send to each other before receiving cannot
//!   deadlock;
//! - consecutive small AllReduces of one communicator on one stream with
//!   the same type and reduction are fused: their inputs are packed into
//!   one buffer, reduced by one AllReduce, and unpacked (gradient
//!   bucketing: one op's synchronisation instead of one per tensor);
//! - every other op is launched as issued.
//!
//! Groups nest (only the outermost end launches) and belong to the
//! calling thread, as HCCL's do.

use super::HcclComm;
use hccl_algorithm::{OpParam, OpType};
use hccl_platform::{DataType, DeviceMem, HcclError, ReduceOp, Result, Stream};
use std::borrow::Cow;
use std::cell::RefCell;

use super::batch::{SendRecvItem, SendRecvKind};

/// AllReduces of at most this many bytes are fused with their neighbours
/// in a group; larger ones already run at bandwidth on their own.
pub const GROUP_FUSE_MAX_BYTES: usize = 1 << 20;

/// One op deferred to the end of its group (or held back in a capture),
/// with owned arguments.
pub(super) struct Deferred {
    pub(super) comm: HcclComm,
    pub(super) param: OpParam<'static>,
}

impl Deferred {
    /// `param` of `comm`, owned.
    pub(super) fn of(comm: &HcclComm, param: &OpParam<'_>) -> Self {
        Deferred {
            comm: comm.clone(),
            param: owned(param),
        }
    }
}

#[derive(Default)]
struct GroupState {
    depth: u32,
    pending: Vec<Deferred>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::default();
}

/// Starts a group on this thread (HCCL's `HcclGroupStart`): ops issued
/// until the matching [`group_end`] are checked when issued and launched
/// at the end. Groups nest.
pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Whether this thread is inside a group (HCCL's `HcclGroupStatusGet`).
pub fn group_status() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Ends a group (HCCL's `HcclGroupEnd`). The outermost end launches the
/// group's ops (see the module docs) and returns the first launch error;
/// ops after a failed one are not launched. An end without a start is an
/// `HCCL_E_PARA` error.
pub fn group_end() -> Result<()> {
    let pending = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(HcclError::para(
                "HcclGroupEnd without a matching HcclGroupStart on this thread",
            ));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            std::mem::take(&mut g.pending)
        } else {
            Vec::new()
        })
    })?;
    launch(pending).map_err(|e| e.during("HcclGroupEnd"))
}

/// Runs `f` inside a group: [`group_start`], `f`, [`group_end`] (also
/// when `f` fails, so the thread leaves the group; `f`'s error wins).
pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    group_start();
    let r = f();
    let end = group_end();
    let r = r?;
    end?;
    Ok(r)
}

/// Whether this thread is in a group (its ops are deferred).
pub(super) fn active() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Defers `param` of `comm` if this thread is in a group; returns
/// whether it did.
pub(super) fn defer(comm: &HcclComm, param: &OpParam<'_>) -> bool {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return false;
        }
        g.pending.push(Deferred::of(comm, param));
        true
    })
}

/// `param` with every borrowed part cloned (reference counts, no copies).
fn owned(p: &OpParam<'_>) -> OpParam<'static> {
    OpParam {
        tag: Cow::Owned(std::sync::Arc::clone(&p.tag)),
        op_type: p.op_type,
        stream: Cow::Owned(Stream::clone(&p.stream)),
        input: Cow::Owned(DeviceMem::clone(&p.input)),
        output: Cow::Owned(DeviceMem::clone(&p.output)),
        count: p.count,
        dtype: p.dtype,
        reduce_op: p.reduce_op,
        root: p.root,
        mode: p.mode,
        send_v: p.send_v.clone(),
        recv_v: p.recv_v.clone(),
        peer: p.peer,
    }
}

fn same_target(a: &Deferred, b: &Deferred) -> bool {
    a.comm.same_as(&b.comm) && a.param.stream.id() == b.param.stream.id()
}

fn point_to_point(d: &Deferred) -> bool {
    matches!(d.param.op_type, OpType::Send | OpType::Receive)
}

/// Whether `d` may be fused with AllReduces of the same key.
fn fusable(d: &Deferred) -> Option<(DataType, ReduceOp)> {
    (d.param.op_type == OpType::AllReduce
        && d.param.input.len() <= GROUP_FUSE_MAX_BYTES
        && !d.param.input.is_empty())
    .then_some((d.param.dtype, d.param.reduce_op))
}

fn launch(pending: Vec<Deferred>) -> Result<()> {
    let mut batched = vec![false; pending.len()];
    let mut i = 0;
    while i < pending.len() {
        if batched[i] {
            i += 1;
            continue;
        }
        let d = &pending[i];
        if point_to_point(d) {
            // every transfer of this communicator and stream in the group
            let mut items = Vec::new();
            for (j, e) in pending.iter().enumerate().skip(i) {
                if !batched[j] && point_to_point(e) && same_target(d, e) {
                    batched[j] = true;
                    let send = e.param.op_type == OpType::Send;
                    items.push(SendRecvItem {
                        kind: if send {
                            SendRecvKind::Send
                        } else {
                            SendRecvKind::Recv
                        },
                        buf: if send {
                            DeviceMem::clone(&e.param.input)
                        } else {
                            DeviceMem::clone(&e.param.output)
                        },
                        count: e.param.count,
                        dtype: e.param.dtype,
                        peer: e.param.peer,
                    });
                }
            }
            d.comm.batch_send_recv(&items, &d.param.stream)?;
            i += 1;
            continue;
        }
        // a run of fusable AllReduces of one communicator, stream and kind
        let mut end = i + 1;
        if let Some(key) = fusable(d) {
            while end < pending.len()
                && !batched[end]
                && fusable(&pending[end]) == Some(key)
                && same_target(d, &pending[end])
                && !pending[i..end].iter().any(|e| {
                    e.param.output.overlaps(&pending[end].param.input)
                        || e.param.output.overlaps(&pending[end].param.output)
                })
            {
                end += 1;
            }
        }
        if end - i >= 2 {
            fused_all_reduce(&pending[i..end])?;
        } else {
            d.comm.g().comm.exec_op(&d.param)?;
        }
        i = end;
    }
    Ok(())
}

/// Fused AllReduces whose buffers are not back to back in one allocation
/// (so the fused op packs or unpacks them by copies) are fused only while
/// they average at most this many bytes; larger ones run one by one.
pub const PACK_FUSE_MAX_BYTES: usize = 256;

/// One AllReduce for several. Where the inputs lie back to back in one
/// allocation (a framework's flat gradient buffer), the op reads them in
/// place; where the outputs do, it writes them in place; only a side
/// whose buffers are scattered is packed into (or unpacked from) one
/// staging buffer by copies — all in stream order on the run's stream.
/// With both sides adjacent nothing is copied: the fused op costs what
/// one AllReduce of the total costs.
pub(super) fn fused_all_reduce(run: &[Deferred]) -> Result<()> {
    let first = &run[0];
    let s: &Stream = &first.param.stream;
    let dtype = first.param.dtype;
    let total: usize = run.iter().map(|d| d.param.input.len()).sum();
    let count = (total / dtype.size()) as u64;
    let inputs = DeviceMem::concat(run.iter().map(|d| &*d.param.input));
    let outputs: Vec<DeviceMem> = run
        .iter()
        .map(|d| d.param.output.range(0, d.param.input.len()))
        .collect::<Result<_>>()?;
    let mut output = DeviceMem::concat(&outputs);
    // the op may run in place or on disjoint buffers, never partly
    // overlapping ones: stage the outputs then
    if let (Some(i), Some(o)) = (&inputs, &output) {
        if i.overlaps(o) && !i.same_range(o) {
            output = None;
        }
    }
    // Packing and unpacking cost a copy task per tensor: measured, that
    // pays only for the smallest ops (docs/performance.md, "Graph-mode
    // bars"); larger ones on scattered buffers run one by one.
    if (inputs.is_none() || output.is_none()) && total > PACK_FUSE_MAX_BYTES * run.len() {
        for d in run {
            d.comm.g().comm.exec_op(&d.param)?;
        }
        tracing::debug!(
            ops = run.len(),
            bytes = total,
            "AllReduces on scattered buffers run one by one (too large to pack)"
        );
        return Ok(());
    }
    let staged = || {
        // a captured op runs on memory its peers map
        if s.is_capturing() {
            DeviceMem::alloc_shareable(total)
        } else {
            DeviceMem::alloc(total)
        }
    };
    // the op's destination: the adjacent outputs, or a staging buffer
    let (recv, unpack) = match output {
        Some(o) => (o, false),
        None => (staged()?, true),
    };
    // the op's source: the adjacent inputs, or the inputs packed into
    // its destination (then reduced in place)
    let packed = inputs.is_none();
    let send = match inputs {
        Some(i) => i,
        None => {
            let mut at = 0;
            for d in run {
                let n = d.param.input.len();
                let slot = recv.range(at, n)?;
                // an in-place op of the run already sits in its slot
                if !slot.same_range(&d.param.input) {
                    s.memcpy_async(&slot, &d.param.input)?;
                }
                at += n;
            }
            recv.clone()
        }
    };
    first
        .comm
        .all_reduce_raw(&send, &recv, count, dtype, first.param.reduce_op, s)?;
    if unpack {
        let mut at = 0;
        for o in &outputs {
            s.memcpy_async(o, &recv.range(at, o.len())?)?;
            at += o.len();
        }
    }
    tracing::debug!(
        ops = run.len(),
        bytes = total,
        packed,
        unpacked = unpack,
        "AllReduces fused into one"
    );
    Ok(())
}
