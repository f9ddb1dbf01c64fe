//! Ring reduce-scatter: p−1 steps; afterwards rank r holds slice r fully reduced.
//!
//! Step s (0-based) on sub-comm rank r of p: send the partial of slice
//! (r−s−1) mod p to the right neighbour, which lands in its output buffer;
//! receive slice (r−s−2) mod p from the left into this rank's output buffer
//! and reduce it into the input buffer. Slice k starts at rank k+1 and
//! reaches rank k after p−1 hops.

use crate::template::Slice;
use crate::topo::SubCommInfo;
use hccl_platform::{DataType, DeviceMem, MemKind, ReduceOp, Result, Stream};

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
    pub slices: Vec<Slice>,
    /// Element type.
    pub dtype: DataType,
    /// Reduction.
    pub op: ReduceOp,
}

impl RingReduceScatter {
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
        let p = comm.local_rank_size as usize;
        let r = comm.local_rank as usize;
        if p <= 1 {
            return Ok(());
        }
        let left = comm.link(((r + p - 1) % p) as u32)?;
        let right = comm.link(((r + 1) % p) as u32)?;
        stream.set_step(s as u32);
        let tx = self.slices[(r + 2 * p - s - 1) % p];
        let rx = self.slices[(r + 2 * p - s - 2) % p];
        left.tx_ack(stream)?;
        right.rx_ack(stream)?;
        right.tx_async(
            self.output_kind,
            self.output_base + tx.offset,
            &self.input.range(tx.offset, tx.len)?,
            stream,
        )?;
        let landing = self.output.range(rx.offset, rx.len)?;
        left.rx_async(
            self.output_kind,
            self.output_base + rx.offset,
            &landing,
            stream,
        )?;
        left.rx_wait_done(stream)?;
        right.tx_wait_done(stream)?;
        if rx.len > 0 {
            stream.reduce_async(
                &self.input.range(rx.offset, rx.len)?,
                &landing,
                self.dtype,
                self.op,
            )?;
        }
        Ok(())
    }
}
