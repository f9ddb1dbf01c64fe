//! AllReduce by recursive halving (reduce-scatter) and recursive doubling
//! (allgather): 2·log2(m) steps on the largest power of two m ≤ p, plus one
//! fold-in and one fold-out step when p is not a power of two (seed 002's
//! RHD). Rank r ≥ m first hands its data to rank r − m, which reduces it,
//! takes part in the power-of-two exchange, and hands the result back.
//!
//! Per op-base round the user data is staged in the CCL input (the working
//! buffer W); halving steps land the partner's half in the CCL output and
//! reduce it into W; doubling steps write owned blocks straight into the
//! partner's W.

use super::{run_op_base_loop, CollExecutor, PIPELINE_CHUNK_BYTES};
use crate::op::{OpParam, OpType};
use crate::resource::{AlgResourceRequest, AlgResourceResponse};
use crate::template::Slice;
use crate::topo::{CommPlane, SubCommInfo, TopoInfo};
use hccl_platform::{DeviceMem, LinkHandle, MemKind, Result, Stream};

/// RHD AllReduce over the flat plane.
#[derive(Debug)]
pub struct AllReduceRhdExecutor {
    topo: TopoInfo,
}

impl AllReduceRhdExecutor {
    /// The registered name.
    pub const NAME: &'static str = "AllReduceRHDExecutor";

    /// An executor for `topo`.
    pub fn new(topo: &TopoInfo) -> Self {
        AllReduceRhdExecutor { topo: topo.clone() }
    }
}

/// Largest power of two ≤ p.
fn core_size(p: u32) -> u32 {
    1 << (31 - p.leading_zeros())
}

/// Peers rank `r` of `p` exchanges with.
fn partners(r: u32, p: u32) -> Vec<u32> {
    let m = core_size(p);
    if r >= m {
        return vec![r - m];
    }
    let mut v: Vec<u32> = (0..m.trailing_zeros()).map(|b| r ^ (1 << b)).collect();
    if r + m < p {
        v.push(r + m);
    }
    v
}

/// One transfer: `src` (local) into the peer's `kind` buffer at `offset`,
/// with the handshake that makes it safe (the receiver acks first).
fn exchange(
    s: &Stream,
    l: &LinkHandle,
    send: Option<(&DeviceMem, MemKind, usize)>,
    recv: bool,
) -> Result<()> {
    if recv {
        l.tx_ack(s)?;
    }
    if let Some((src, kind, off)) = send {
        l.rx_ack(s)?;
        l.tx_async(kind, off, src, s)?;
    }
    if recv {
        l.rx_wait_done(s)?;
    }
    if send.is_some() {
        l.tx_wait_done(s)?;
    }
    Ok(())
}

impl AllReduceRhdExecutor {
    fn run_round(
        &self,
        param: &OpParam,
        comm: &SubCommInfo,
        w: &DeviceMem,
        landing: &DeviceMem,
    ) -> Result<()> {
        let s = &param.stream;
        let (r, p) = (comm.local_rank, comm.local_rank_size);
        let m = core_size(p);
        let n = w.len();
        let reduce = |dst: &DeviceMem, src: &DeviceMem| {
            if dst.is_empty() {
                Ok(())
            } else {
                s.reduce_async(dst, src, param.dtype, param.reduce_op)
            }
        };
        let mut step = 0u32;
        // fold-in
        s.set_step(step);
        if r >= m {
            exchange(
                s,
                comm.link(r - m)?,
                Some((w, MemKind::CclOutput, 0)),
                false,
            )?;
            // wait for the result to be written back into W
            s.set_step(1 + 2 * m.trailing_zeros());
            return exchange(s, comm.link(r - m)?, None, true);
        }
        if r + m < p {
            exchange(s, comm.link(r + m)?, None, true)?;
            reduce(w, &landing.range(0, n)?)?;
        }
        step += 1;
        let slices = Slice::split(n, m as usize);
        let bytes = |lo: u32, hi: u32| {
            let a = slices[lo as usize].offset;
            let b = slices[hi as usize - 1].offset + slices[hi as usize - 1].len;
            (a, b - a)
        };
        // recursive halving: keep the half whose index bit matches ours
        let (mut lo, mut hi) = (0u32, m);
        let mut k = m / 2;
        while k >= 1 {
            s.set_step(step);
            let partner = r ^ k;
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if r & k == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let (go, gl) = bytes(give.0, give.1);
            let (ko, kl) = bytes(keep.0, keep.1);
            exchange(
                s,
                comm.link(partner)?,
                Some((&w.range(go, gl)?, MemKind::CclOutput, go)),
                true,
            )?;
            reduce(&w.range(ko, kl)?, &landing.range(ko, kl)?)?;
            (lo, hi) = keep;
            k /= 2;
            step += 1;
        }
        // recursive doubling: hand our block to the partner, receive theirs
        let mut k = 1u32;
        while k < m {
            s.set_step(step);
            let partner = r ^ k;
            let (o, l) = bytes(lo, hi);
            exchange(
                s,
                comm.link(partner)?,
                Some((&w.range(o, l)?, MemKind::CclInput, o)),
                true,
            )?;
            let size = hi - lo;
            lo = (lo / (2 * size)) * 2 * size;
            hi = lo + 2 * size;
            k *= 2;
            step += 1;
        }
        // fold-out
        s.set_step(step);
        if r + m < p {
            exchange(s, comm.link(r + m)?, Some((w, MemKind::CclInput, 0)), false)?;
        }
        Ok(())
    }
}

impl CollExecutor for AllReduceRhdExecutor {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn calc_res_request(&self, param: &OpParam, topo: &TopoInfo) -> Result<AlgResourceRequest> {
        super::flat_request(Self::NAME, OpType::AllReduce, param, topo, partners)
    }

    fn orchestrate(&mut self, param: &OpParam, res: &AlgResourceResponse) -> Result<()> {
        let s = &param.stream;
        let bytes = param.input_bytes() as usize;
        if self.topo.user_rank_size == 1 {
            return super::copy_through(param, bytes);
        }
        let comm = res.sub_comm(CommPlane::Combine, 0)?;
        let capacity = res
            .ccl_input
            .len()
            .min(res.ccl_output.len())
            .min(PIPELINE_CHUNK_BYTES);
        run_op_base_loop(param, res, capacity, |chunk, res| {
            let w = res.ccl_input.range(0, chunk.bytes)?;
            s.memcpy_async(&w, &param.input.range(chunk.offset, chunk.bytes)?)?;
            self.run_round(param, &comm, &w, &res.ccl_output)?;
            s.memcpy_async(&param.output.range(chunk.offset, chunk.bytes)?, &w)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_symmetric() {
        for p in 1..=40u32 {
            for r in 0..p {
                for q in partners(r, p) {
                    assert!(q < p, "p={p} r={r} q={q}");
                    assert!(partners(q, p).contains(&r), "p={p}: {r}->{q} not mirrored");
                }
            }
        }
        assert_eq!(core_size(33), 32);
    }
}
