//! Ring allgather: p−1 steps; rank r starts with slice r and ends with all.
//!
//! Step s on sub-comm rank r: send slice (r−s) mod p to the right
//! neighbour's buffer at the same offset; slice (r−s−1) mod p arrives from
//! the left.

use crate::template::Slice;
use crate::topo::SubCommInfo;
use hccl_platform::{DeviceMem, MemKind, Result, Stream};

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
    pub slices: Vec<Slice>,
}

impl RingAllGather {
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
        let p = comm.local_rank_size as usize;
        let r = comm.local_rank as usize;
        if p <= 1 {
            return Ok(());
        }
        let left = comm.link(((r + p - 1) % p) as u32)?;
        let right = comm.link(((r + 1) % p) as u32)?;
        stream.set_step((p - 1 + s) as u32);
        let tx = self.slices[(r + p - s) % p];
        let rx = self.slices[(r + 2 * p - s - 1) % p];
        left.tx_ack(stream)?;
        right.rx_ack(stream)?;
        right.tx_async(
            self.output_kind,
            self.output_base + tx.offset,
            &self.output.range(tx.offset, tx.len)?,
            stream,
        )?;
        left.rx_async(
            self.output_kind,
            self.output_base + rx.offset,
            &self.output.range(rx.offset, rx.len)?,
            stream,
        )?;
        left.rx_wait_done(stream)?;
        right.tx_wait_done(stream)?;
        Ok(())
    }
}
