//! The mesh template: what each rank sends to and receives from each peer,
//! per op, as element blocks of the user buffers ([`MeshPlan`]), and the
//! part of a block one op-base round moves ([`window`]). One table drives
//! every mesh, star and pairwise executor, and the direct-read executors
//! read the same blocks from the peers' side.

use crate::op::{OpParam, OpType, VCounts};
use hccl_platform::{HcclError, Result};

/// A block of elements of a user buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// First element.
    pub off: u64,
    /// Elements.
    pub len: u64,
}

/// The part of block `b` that op-base round `round` moves, `n` elements
/// per round (`None`: the block is done, or there is none).
pub fn window(b: Option<Block>, round: u64, n: u64) -> Option<Block> {
    let b = b?;
    let start = round * n;
    (start < b.len).then(|| Block {
        off: b.off + start,
        len: n.min(b.len - start),
    })
}

impl Block {
    fn new(off: u64, len: u64) -> Option<Block> {
        Some(Block { off, len })
    }
}

/// One rank's part of a mesh op.
#[derive(Clone, Debug, Default)]
pub struct MeshPlan {
    /// Per peer: the input block sent to it (None: nothing, and for self).
    pub sends: Vec<Option<Block>>,
    /// Per peer: the output block its data lands in (None: nothing, and self).
    pub recvs: Vec<Option<Block>>,
    /// This rank's own contribution: input block → output block.
    pub own: Option<(Block, Block)>,
    /// Whether contributions are reduced (into the common output block)
    /// rather than placed.
    pub reduce: bool,
}

fn v<'a>(v: &'a Option<VCounts>, what: &str, p: u32) -> Result<&'a VCounts> {
    let v = v
        .as_ref()
        .ok_or_else(|| HcclError::para(format!("{what} counts/displacements are missing")))?;
    if v.counts.len() != p as usize || v.displs.len() != p as usize {
        return Err(HcclError::para(format!(
            "{what} counts ({}) and displacements ({}) must have one entry per rank ({p})",
            v.counts.len(),
            v.displs.len()
        )));
    }
    Ok(v)
}

impl MeshPlan {
    /// The plan of rank `me` of `p` for `param`.
    pub fn of(param: &OpParam, p: u32, me: u32) -> Result<MeshPlan> {
        let n = p as usize;
        let c = param.count;
        let root = param.root;
        let mut plan = MeshPlan {
            sends: vec![None; n],
            recvs: vec![None; n],
            own: None,
            reduce: false,
        };
        let others = (0..p).filter(|&q| q != me);
        match param.op_type {
            OpType::AllReduce => {
                plan.reduce = true;
                plan.own = Some((Block { off: 0, len: c }, Block { off: 0, len: c }));
                for q in others {
                    plan.recvs[q as usize] = Block::new(0, c);
                }
            }
            OpType::AllGather => {
                plan.own = Some((
                    Block { off: 0, len: c },
                    Block {
                        off: me as u64 * c,
                        len: c,
                    },
                ));
                for q in others {
                    plan.recvs[q as usize] = Block::new(q as u64 * c, c);
                }
            }
            OpType::AllGatherV => {
                let rv = v(&param.recv_v, "AllGatherV receive", p)?;
                if rv.counts[me as usize] != c {
                    return Err(HcclError::para(format!(
                        "AllGatherV: sendCount {c} differs from this rank's receive count {}",
                        rv.counts[me as usize]
                    )));
                }
                plan.own = Some((
                    Block { off: 0, len: c },
                    Block {
                        off: rv.displs[me as usize],
                        len: c,
                    },
                ));
                for q in others {
                    plan.sends[q as usize] = Block::new(0, c);
                    plan.recvs[q as usize] =
                        Block::new(rv.displs[q as usize], rv.counts[q as usize]);
                }
            }
            OpType::ReduceScatter => {
                plan.reduce = true;
                plan.own = Some((
                    Block {
                        off: me as u64 * c,
                        len: c,
                    },
                    Block { off: 0, len: c },
                ));
                for q in others {
                    plan.recvs[q as usize] = Block::new(0, c);
                }
            }
            OpType::ReduceScatterV => {
                let sv = v(&param.send_v, "ReduceScatterV send", p)?;
                if sv.counts[me as usize] != c {
                    return Err(HcclError::para(format!(
                        "ReduceScatterV: recvCount {c} differs from this rank's send count {}",
                        sv.counts[me as usize]
                    )));
                }
                plan.reduce = true;
                plan.own = Some((
                    Block {
                        off: sv.displs[me as usize],
                        len: c,
                    },
                    Block { off: 0, len: c },
                ));
                for q in others {
                    plan.sends[q as usize] =
                        Block::new(sv.displs[q as usize], sv.counts[q as usize]);
                    plan.recvs[q as usize] = Block::new(0, c);
                }
            }
            OpType::Broadcast => {
                if me != root {
                    plan.recvs[root as usize] = Block::new(0, c);
                }
            }
            OpType::Reduce => {
                if me == root {
                    plan.reduce = true;
                    plan.own = Some((Block { off: 0, len: c }, Block { off: 0, len: c }));
                    for q in others {
                        plan.recvs[q as usize] = Block::new(0, c);
                    }
                }
            }
            OpType::Scatter => {
                if me == root {
                    plan.own = Some((
                        Block {
                            off: me as u64 * c,
                            len: c,
                        },
                        Block { off: 0, len: c },
                    ));
                } else {
                    plan.recvs[root as usize] = Block::new(0, c);
                }
            }
            OpType::Gather => {
                if me == root {
                    plan.own = Some((
                        Block { off: 0, len: c },
                        Block {
                            off: me as u64 * c,
                            len: c,
                        },
                    ));
                    for q in others {
                        plan.recvs[q as usize] = Block::new(q as u64 * c, c);
                    }
                }
            }
            OpType::AllToAll => {
                plan.own = Some((
                    Block {
                        off: me as u64 * c,
                        len: c,
                    },
                    Block {
                        off: me as u64 * c,
                        len: c,
                    },
                ));
                for q in others {
                    plan.recvs[q as usize] = Block::new(q as u64 * c, c);
                }
            }
            OpType::AllToAllV => {
                let sv = v(&param.send_v, "AllToAllV send", p)?;
                let rv = v(&param.recv_v, "AllToAllV receive", p)?;
                let m = me as usize;
                plan.own = Some((
                    Block {
                        off: sv.displs[m],
                        len: sv.counts[m],
                    },
                    Block {
                        off: rv.displs[m],
                        len: rv.counts[m],
                    },
                ));
                for q in others {
                    let q = q as usize;
                    plan.sends[q] = Block::new(sv.displs[q], sv.counts[q]);
                    plan.recvs[q] = Block::new(rv.displs[q], rv.counts[q]);
                }
            }
            OpType::Send => {
                plan.sends[param.peer as usize] = Block::new(0, c);
            }
            OpType::Receive => {
                plan.recvs[param.peer as usize] = Block::new(0, c);
            }
        }
        // what this rank sends each peer, for the ops of fixed counts: one
        // rule, shared with the readers that ask it of a single peer
        if matches!(
            param.op_type,
            OpType::AllReduce
                | OpType::AllGather
                | OpType::ReduceScatter
                | OpType::Broadcast
                | OpType::Reduce
                | OpType::Scatter
                | OpType::Gather
                | OpType::AllToAll
        ) {
            for q in (0..p).filter(|&q| q != me) {
                plan.sends[q as usize] = Self::sent(param, p, me, q)?;
            }
        }
        if let Some((src, dst)) = plan.own {
            if src.len != dst.len {
                return Err(HcclError::para(format!(
                    "{}: this rank sends itself {} elements but expects {}",
                    param.op_type, src.len, dst.len
                )));
            }
        }
        Ok(plan)
    }

    /// The block rank `from` of `p` sends rank `to`: `MeshPlan::of(param,
    /// p, from)?.sends[to]`, worked out without the p-entry plan (a reader
    /// asks it of every peer: O(p²) per rank otherwise, O(p³) for the
    /// simulator's p ranks). The plan takes its sends of the fixed-count
    /// ops from here; the V ops, whose blocks come from count vectors,
    /// take them from the plan.
    pub fn sent(param: &OpParam, p: u32, from: u32, to: u32) -> Result<Option<Block>> {
        let c = param.count;
        let root = param.root;
        if from == to || to >= p {
            return Ok(None);
        }
        Ok(match param.op_type {
            OpType::AllReduce | OpType::AllGather => Block::new(0, c),
            OpType::ReduceScatter | OpType::AllToAll => Block::new(to as u64 * c, c),
            OpType::Broadcast => (from == root).then_some(Block { off: 0, len: c }),
            OpType::Reduce | OpType::Gather => (to == root).then_some(Block { off: 0, len: c }),
            OpType::Scatter => (from == root).then_some(Block {
                off: to as u64 * c,
                len: c,
            }),
            OpType::Send => (to == param.peer).then_some(Block { off: 0, len: c }),
            OpType::Receive => None,
            OpType::AllGatherV | OpType::ReduceScatterV | OpType::AllToAllV => {
                MeshPlan::of(param, p, from)?.sends[to as usize]
            }
        })
    }

    /// Elements of the longest block (sets the number of rounds).
    pub fn longest(&self) -> u64 {
        let blocks = self
            .sends
            .iter()
            .chain(self.recvs.iter())
            .flatten()
            .map(|b| b.len);
        blocks
            .chain(self.own.iter().map(|(s, _)| s.len))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_platform::{DataType, Device, DeviceMem, ReduceOp, Stream};

    /// `MeshPlan::sent` gives, for every op, root, peer and pair, the
    /// block the sender's whole plan says it sends; and for the ops of
    /// fixed counts (whose sends the plan takes from it) a sent block is
    /// exactly as long as the block the receiver's plan expects from the
    /// sender, and nothing is sent where nothing is expected.
    #[test]
    fn sent_is_the_senders_plan_entry() {
        let dev = Device::new(0, Default::default());
        let mut compared = 0;
        for p in 1..=5u32 {
            for op in OpType::ALL {
                for root in 0..p {
                    let mut param = OpParam::new(
                        "t",
                        op,
                        Stream::new(&dev),
                        DeviceMem::null(),
                        DeviceMem::null(),
                        3,
                        DataType::Fp32,
                        ReduceOp::Sum,
                        root,
                    );
                    param.peer = (root + 1) % p;
                    // uneven counts; each rank's own count is 3 where the
                    // op ties the two together
                    let counts: Vec<u64> = (0..p as u64)
                        .map(|q| if q % 2 == 0 { 3 } else { q })
                        .collect();
                    let displs = counts
                        .iter()
                        .scan(0, |a, &c| {
                            let d = *a;
                            *a += c;
                            Some(d)
                        })
                        .collect();
                    let v = crate::op::VCounts { counts, displs };
                    param.send_v = Some(v.clone());
                    param.recv_v = Some(v);
                    for from in 0..p {
                        let Ok(plan) = MeshPlan::of(&param, p, from) else {
                            continue; // a V op whose own count is not 3
                        };
                        for to in 0..p {
                            let want = if from == to {
                                None
                            } else {
                                plan.sends[to as usize]
                            };
                            assert_eq!(
                                MeshPlan::sent(&param, p, from, to).unwrap(),
                                want,
                                "{op} p={p} root={root} {from}->{to}"
                            );
                            compared += 1;
                            let fixed = !matches!(
                                op,
                                OpType::AllGatherV
                                    | OpType::ReduceScatterV
                                    | OpType::AllToAllV
                                    | OpType::Send
                                    | OpType::Receive
                            );
                            if fixed && from != to {
                                let expected = MeshPlan::of(&param, p, to).unwrap().recvs
                                    [from as usize]
                                    .map(|b| b.len);
                                assert_eq!(
                                    want.map(|b| b.len),
                                    expected,
                                    "{op} p={p} root={root} {from}->{to}: sent and expected differ"
                                );
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 1000, "{compared}");
    }
}
