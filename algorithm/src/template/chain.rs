//! The pipelined chain: data cut into segments that travel position 0 →
//! 1 → … → p−1, each position passing a segment on as soon as it has it,
//! so p−2 + S steps move S segments and every link carries the data once.
//! The ring Broadcast runs it from the root, the ring Reduce towards it
//! (reducing every arriving segment into its own before passing it on).

use crate::prim::{self, Rx, Tx};
use crate::template::layout::Slice;
use hccl_platform::{DataType, DeviceMem, LinkHandle, MemKind, ReduceOp, Result, Stream};

/// Runs one round of a pipelined chain on `w` (the round's bytes at offset
/// 0 of this rank's CCL input), at chain position `pos` of `p`, receiving
/// from `up` and sending to `down`: `w` is cut into p segments; segment k
/// leaves position 0 at step k and is passed on by each position as soon
/// as it arrives, so p−2+p steps move the round and every link carries it
/// once. Without `reduce`, arriving segments land in `w` itself
/// (broadcast); with it, they land in `landing` (this rank's CCL output,
/// same offsets) and are reduced into `w` before being passed on (reduce:
/// position p−1 ends with the full reduction).
pub fn run(
    s: &Stream,
    (pos, p): (u32, u32),
    (up, down): (&LinkHandle, &LinkHandle),
    w: &DeviceMem,
    reduce: Option<(&DeviceMem, DataType, ReduceOp)>,
) -> Result<()> {
    run_at(s, (pos, p), (up, down), (w, 0), reduce)
}

/// [`run`] on a round that sits at byte `base` of the CCL buffers rather
/// than at their start (`w` at `base` of the CCL input, the landing area
/// at `base` of the CCL output): an executor that gives each of several
/// chains its own region of the buffers (the multi-ring executors, one
/// per channel).
pub fn run_at(
    s: &Stream,
    (pos, p): (u32, u32),
    (up, down): (&LinkHandle, &LinkHandle),
    (w, base): (&DeviceMem, usize),
    reduce: Option<(&DeviceMem, DataType, ReduceOp)>,
) -> Result<()> {
    run_in(s, (pos, p), (up, down), (w, kind_of(reduce), base), reduce)
}

/// The buffer a chain's segments are written into at the next rank: the
/// CCL input, or for a reduction the landing area in the CCL output.
fn kind_of(reduce: Option<(&DeviceMem, DataType, ReduceOp)>) -> MemKind {
    if reduce.is_some() {
        MemKind::CclOutput
    } else {
        MemKind::CclInput
    }
}

/// [`run`] with the segments written into the next rank's `kind` buffer
/// at `base` (plus the segment's offset in `w`): a Broadcast in graph
/// mode passes them straight into the user output (`ParamOutput`).
pub fn run_in(
    s: &Stream,
    (pos, p): (u32, u32),
    (up, down): (&LinkHandle, &LinkHandle),
    (w, kind, base): (&DeviceMem, MemKind, usize),
    reduce: Option<(&DeviceMem, DataType, ReduceOp)>,
) -> Result<()> {
    for seg in Slice::split(w.len(), p as usize).into_iter().enumerate() {
        segment_in(s, (pos, p), (up, down), (w, kind, base), reduce, seg)?;
    }
    Ok(())
}

/// Segment `k` (`seg` of `Slice::split(w.len(), p)`) of [`run_at`]
/// alone: a plan issued a stage at a time issues the p segments in order,
/// which enqueues exactly what `run_at` does.
pub fn segment_at(
    s: &Stream,
    (pos, p): (u32, u32),
    (up, down): (&LinkHandle, &LinkHandle),
    (w, base): (&DeviceMem, usize),
    reduce: Option<(&DeviceMem, DataType, ReduceOp)>,
    seg: (usize, Slice),
) -> Result<()> {
    let at = (w, kind_of(reduce), base);
    segment_in(s, (pos, p), (up, down), at, reduce, seg)
}

/// Segment `k` of [`run_in`]: received (and reduced) from `up` unless this
/// rank starts the chain, passed to `down` unless it ends it.
fn segment_in(
    s: &Stream,
    (pos, p): (u32, u32),
    (up, down): (&LinkHandle, &LinkHandle),
    (w, kind, base): (&DeviceMem, MemKind, usize),
    reduce: Option<(&DeviceMem, DataType, ReduceOp)>,
    (k, seg): (usize, Slice),
) -> Result<()> {
    s.set_step(k as u32 + pos);
    let piece = seg.of(w)?;
    if pos > 0 {
        match reduce {
            Some((landing, dtype, op)) => {
                let into = (&piece, &seg.of(landing)?);
                prim::recv_reduce(s, Rx::new(up), into, (dtype, op))?;
            }
            None => prim::recv(s, Rx::new(up))?,
        }
    }
    if pos + 1 < p {
        prim::send(s, Tx::new(down, &piece, kind, base + seg.offset))?;
    }
    Ok(())
}
