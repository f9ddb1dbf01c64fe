//! Ring templates over one sub-communicator: reduce-scatter, allgather,
//! and allreduce = reduce-scatter + allgather (bandwidth-optimal: each rank
//! sends 2(p−1)/p of the data in 2(p−1) steps).
//!
//! Every step is one [`prim`] call to both neighbours: send to the right
//! neighbour straight into its buffer at the slice's offset, receive from
//! the left. Slices are per sub-comm rank, relative to the buffers.
//!
//! - **Reduce-scatter** step s on rank r: send the partial of slice
//!   (r−s−1) mod p, receive the left neighbour's partial of slice
//!   (r−s−2) mod p into the landing buffer and reduce it into the input.
//!   Slice k starts at rank k+1 and ends fully reduced at rank k.
//! - **Allgather** step s on rank r: send slice (r−s) mod p, receive slice
//!   (r−s−1) mod p in place; rank r starts with slice r and ends with all.

use crate::prim::{self, Rx, Tx};
use crate::template::layout::Slice;
use crate::topo::SubCommInfo;
use hccl_platform::{DataType, DeviceMem, LinkHandle, MemKind, ReduceOp, Result, Stream};
use std::sync::Arc;

/// This rank's place on the ring of a sub-communicator's ranks.
#[derive(Clone, Copy, Debug)]
pub struct Ring<'a> {
    /// This rank's sub-comm index.
    pub r: usize,
    /// Ranks on the ring.
    pub p: usize,
    /// Link to rank r−1.
    pub left: &'a LinkHandle,
    /// Link to rank r+1.
    pub right: &'a LinkHandle,
}

impl<'a> Ring<'a> {
    /// The ring of `comm`'s ranks, in sub-comm order; `None` on one rank.
    pub fn of(comm: &'a SubCommInfo) -> Result<Option<Self>> {
        let (r, p) = (comm.local_rank as usize, comm.local_rank_size as usize);
        if p <= 1 {
            return Ok(None);
        }
        let left = comm.link(((r + p - 1) % p) as u32)?;
        let right = comm.link(((r + 1) % p) as u32)?;
        Ok(Some(Ring { r, p, left, right }))
    }

    /// The rank `k` places to the left of this one, (r − k) mod p.
    pub fn behind(&self, k: usize) -> usize {
        (self.r + self.p - k % self.p) % self.p
    }
}

/// A prepared ring reduce-scatter over one sub-communicator.
#[derive(Clone, Debug)]
pub struct RingReduceScatter {
    /// Local data, reduced in place (slice r ends fully reduced).
    pub input: DeviceMem,
    /// Where peers' partials land (same layout as `input`).
    pub output: DeviceMem,
    /// Which peer buffer `output` is, as the peer's link addresses it.
    pub output_kind: MemKind,
    /// Offset of `output` inside that peer buffer.
    pub output_base: usize,
    /// Slice of each sub-comm rank, in bytes, relative to input/output.
    pub slices: Arc<[Slice]>,
    /// Element type.
    pub dtype: DataType,
    /// Reduction.
    pub op: ReduceOp,
}

/// A prepared ring allgather over one sub-communicator.
#[derive(Clone, Debug)]
pub struct RingAllGather {
    /// The gathered buffer: slice r is this rank's contribution on entry.
    pub output: DeviceMem,
    /// Which peer buffer `output` is, as the peer's link addresses it.
    pub output_kind: MemKind,
    /// Offset of `output` inside that peer buffer.
    pub output_base: usize,
    /// Slice of each sub-comm rank, in bytes, relative to `output`.
    pub slices: Arc<[Slice]>,
}

/// Enqueues one ring allreduce among `comm`'s ranks of the bytes held in
/// `input`, using `output` (same size, addressed by peers as `output_kind`
/// at `output_base`) as the landing and gather buffer. The result ends in
/// `output`.
pub fn all_reduce(
    stream: &Stream,
    comm: &SubCommInfo,
    (input, output): (&DeviceMem, &DeviceMem),
    at: (MemKind, usize),
    how: (DataType, ReduceOp),
) -> Result<()> {
    let ar = RingAllReduce::new(comm, (input, output), at, how);
    for i in 0..ar.stages() {
        ar.stage(stream, comm, i)?;
    }
    Ok(())
}

/// A prepared ring allreduce ([`all_reduce`]), to be enqueued a stage at a
/// time: the p−1 reduce-scatter steps, the copy of this rank's reduced
/// slice into the gather buffer, the p−1 allgather steps.
#[derive(Clone, Debug)]
pub struct RingAllReduce {
    rs: RingReduceScatter,
    ag: RingAllGather,
    /// This rank's sub-comm index and the ring's size.
    r: usize,
    p: usize,
}

impl RingAllReduce {
    /// The allreduce of [`all_reduce`] with the same arguments.
    pub fn new(
        comm: &SubCommInfo,
        (input, output): (&DeviceMem, &DeviceMem),
        at: (MemKind, usize),
        (dtype, op): (DataType, ReduceOp),
    ) -> Self {
        let p = comm.local_rank_size as usize;
        let slices = Slice::split_shared(input.len(), p);
        let rs = (input.clone(), output.clone(), slices.clone());
        RingAllReduce {
            rs: RingReduceScatter::new(rs, at, (dtype, op)),
            ag: RingAllGather::new((output.clone(), slices), at),
            r: comm.local_rank as usize,
            p,
        }
    }

    /// How many stages [`stage`](Self::stage) takes: 2(p−1) + 1.
    pub fn stages(&self) -> usize {
        2 * self.p.saturating_sub(1) + 1
    }

    /// Enqueues stage `i` of [`stages`](Self::stages), in order.
    pub fn stage(&self, stream: &Stream, comm: &SubCommInfo, i: usize) -> Result<()> {
        let steps = self.p.saturating_sub(1);
        if i < steps {
            return self.rs.step(stream, comm, i);
        }
        if i > steps {
            return self.ag.step(stream, comm, i - steps - 1);
        }
        // this rank's reduced slice joins the gather buffer
        let mine = self.rs.slices[self.r];
        if mine.len > 0 {
            stream.memcpy_async(&mine.of(&self.ag.output)?, &mine.of(&self.rs.input)?)?;
        }
        Ok(())
    }
}

impl RingReduceScatter {
    /// A reduce-scatter of `input` cut into `slices`, with partials
    /// landing in `output` (addressed by peers as `output_kind` at
    /// `output_base`).
    pub fn new(
        (input, output, slices): (DeviceMem, DeviceMem, impl Into<Arc<[Slice]>>),
        (output_kind, output_base): (MemKind, usize),
        (dtype, op): (DataType, ReduceOp),
    ) -> Self {
        RingReduceScatter {
            input,
            output,
            output_kind,
            output_base,
            slices: slices.into(),
            dtype,
            op,
        }
    }

    /// Enqueues the reduce-scatter on `stream` over `comm`'s ring links.
    pub fn run(&self, stream: &Stream, comm: &SubCommInfo) -> Result<()> {
        for s in 0..(comm.local_rank_size as usize).saturating_sub(1) {
            self.step(stream, comm, s)?;
        }
        Ok(())
    }

    /// Enqueues step `s` (of p−1) alone, for executors that interleave the
    /// ring with other work: it sends slice (r−s−1) mod p and reduces the
    /// arriving partial of slice (r−s−2) mod p into `input`.
    pub fn step(&self, stream: &Stream, comm: &SubCommInfo, s: usize) -> Result<()> {
        let Some(ring) = Ring::of(comm)? else {
            return Ok(());
        };
        stream.set_step(s as u32);
        let (tx, rx) = (
            self.slices[ring.behind(s + 1)],
            self.slices[ring.behind(s + 2)],
        );
        let (kind, base) = (self.output_kind, self.output_base);
        let landing = rx.of(&self.output)?;
        prim::send_recv_reduce(
            stream,
            Tx::new(ring.right, &tx.of(&self.input)?, kind, base + tx.offset),
            Rx::at(ring.left, &landing, kind, base + rx.offset),
            (&rx.of(&self.input)?, &landing),
            (self.dtype, self.op),
        )
    }
}

impl RingAllGather {
    /// An allgather in `output` cut into `slices` (addressed by peers as
    /// `output_kind` at `output_base`).
    pub fn new(
        (output, slices): (DeviceMem, impl Into<Arc<[Slice]>>),
        (output_kind, output_base): (MemKind, usize),
    ) -> Self {
        RingAllGather {
            output,
            output_kind,
            output_base,
            slices: slices.into(),
        }
    }

    /// Enqueues the allgather on `stream` over `comm`'s ring links.
    pub fn run(&self, stream: &Stream, comm: &SubCommInfo) -> Result<()> {
        for s in 0..(comm.local_rank_size as usize).saturating_sub(1) {
            self.step(stream, comm, s)?;
        }
        Ok(())
    }

    /// Enqueues step `s` (of p−1) alone, for executors that interleave the
    /// ring with other work: afterwards the slice of sub-comm rank
    /// (r−s−1) mod p has arrived.
    pub fn step(&self, stream: &Stream, comm: &SubCommInfo, s: usize) -> Result<()> {
        let Some(ring) = Ring::of(comm)? else {
            return Ok(());
        };
        stream.set_step((ring.p - 1 + s) as u32);
        let (tx, rx) = (self.slices[ring.behind(s)], self.slices[ring.behind(s + 1)]);
        let (kind, base) = (self.output_kind, self.output_base);
        prim::send_recv(
            stream,
            Tx::new(ring.right, &tx.of(&self.output)?, kind, base + tx.offset),
            Rx::at(ring.left, &rx.of(&self.output)?, kind, base + rx.offset),
        )
    }
}
