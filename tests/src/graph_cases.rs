//! Every primitive as a graph-mode case: its buffers, how to issue it, and
//! the reference its output must equal. Shared by the graph-mode tests
//! with ranks as threads (`tests/tests/graph_mode.rs`) and as processes
//! (the multi-process worker's `graph` scenario), which capture each op
//! once and replay it many times, rewriting the inputs between launches.

use hccl_adapter::{DataType, DeviceMem, HcclComm, ReduceOp, Result, Stream};

/// The primitives, by the names the cases take.
pub const GRAPH_OPS: &[&str] = &[
    "all_reduce",
    "all_reduce_in_place",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "all_to_all",
    "all_gather_v",
    "reduce_scatter_v",
    "all_to_all_v",
    "send_recv",
];

/// One rank's buffers of one op (shareable memory, so peers on this host
/// can map them).
pub struct GraphCase {
    op: &'static str,
    rank: u32,
    p: u32,
    c: usize,
    /// What the rank sends from.
    pub send: DeviceMem,
    /// What the rank receives into (the send buffer for in-place ops).
    pub recv: DeviceMem,
    send_n: usize,
    recv_n: usize,
}

/// The value rank `r` puts at element `i` for launch `k`: small integers,
/// exact in fp32 sums.
pub fn value(r: u32, i: usize, k: u32) -> f32 {
    ((r + 1) * 1000 + (i as u32 % 997) + k * 7) as f32
}

const ROOT: u32 = 1;

impl GraphCase {
    /// The buffers of `op` with `c` elements per block on `comm`.
    pub fn new(op: &'static str, comm: &HcclComm, c: usize) -> Result<GraphCase> {
        let (rank, p) = (comm.rank(), comm.size());
        let pp = p as usize;
        let vsum: usize = (0..pp).map(|q| c + q).sum();
        let (send_n, recv_n) = match op {
            "all_reduce" | "all_reduce_in_place" | "broadcast" | "reduce" | "send_recv" => (c, c),
            "all_gather" | "gather" => (c, pp * c),
            "reduce_scatter" | "scatter" => (pp * c, c),
            "all_to_all" => (pp * c, pp * c),
            "all_gather_v" => (c + rank as usize, vsum),
            "reduce_scatter_v" => (vsum, c + rank as usize),
            "all_to_all_v" => (vsum, pp * (c + rank as usize)),
            other => panic!("unknown graph case {other}"),
        };
        let send = DeviceMem::alloc_shareable(send_n.max(1) * 4)?;
        let recv = if op == "all_reduce_in_place" {
            send.clone()
        } else {
            DeviceMem::alloc_shareable(recv_n.max(1) * 4)?
        };
        Ok(GraphCase {
            op,
            rank,
            p,
            c,
            send,
            recv,
            send_n,
            recv_n,
        })
    }

    /// Writes launch `k`'s inputs (and clears the output).
    pub fn write_inputs(&self, k: u32) -> Result<()> {
        if !self.send.same_range(&self.recv) {
            self.recv.copy_from_host(&vec![-1.0f32; self.recv_n])?;
        }
        let v: Vec<f32> = (0..self.send_n).map(|i| value(self.rank, i, k)).collect();
        self.send.copy_from_host(&v)
    }

    /// Issues the op on `s`.
    pub fn issue(&self, comm: &HcclComm, s: &Stream) -> Result<()> {
        let (p, r, c) = (self.p as usize, self.rank, self.c as u64);
        let f = DataType::Fp32;
        let sum = ReduceOp::Sum;
        let vcounts: Vec<u64> = (0..p as u64).map(|q| c + q).collect();
        let packed: Vec<u64> = vcounts
            .iter()
            .scan(0, |a, &n| {
                let d = *a;
                *a += n;
                Some(d)
            })
            .collect();
        let (send, recv) = (&self.send, &self.recv);
        match self.op {
            "all_reduce" | "all_reduce_in_place" => comm.all_reduce_raw(send, recv, c, f, sum, s),
            "all_gather" => comm.all_gather_raw(send, recv, c, f, s),
            "reduce_scatter" => comm.reduce_scatter_raw(send, recv, c, f, sum, s),
            "broadcast" => comm.broadcast_raw(if r == ROOT { send } else { recv }, c, f, ROOT, s),
            "reduce" => comm.reduce_raw(send, recv, c, f, sum, ROOT, s),
            "scatter" => comm.scatter_raw(send, recv, c, f, ROOT, s),
            "gather" => comm.gather_raw(send, recv, c, f, ROOT, s),
            "all_to_all" => comm.all_to_all_raw(send, c, f, recv, c, f, s),
            "all_gather_v" => {
                comm.all_gather_v_raw(send, c + r as u64, recv, &vcounts, &packed, f, s)
            }
            "reduce_scatter_v" => {
                comm.reduce_scatter_v_raw(send, &vcounts, &packed, recv, c + r as u64, f, sum, s)
            }
            "all_to_all_v" => {
                // rank r sends c + q elements to q and receives c + r from each
                let mine = c + r as u64;
                let rc = vec![mine; p];
                let rd: Vec<u64> = (0..p as u64).map(|q| q * mine).collect();
                comm.all_to_all_v_raw(send, &vcounts, &packed, f, recv, &rc, &rd, f, s)
            }
            "send_recv" => {
                // pairs (0,1), (2,3), ...: the even rank sends
                if r % 2 == 0 && r + 1 < self.p {
                    comm.send_raw(send, c, f, r + 1, s)
                } else if r % 2 == 1 {
                    comm.recv_raw(recv, c, f, r - 1, s)
                } else {
                    Ok(())
                }
            }
            other => panic!("unknown graph case {other}"),
        }
    }

    /// Checks launch `k`'s result; `Err` names the first wrong element.
    pub fn check(&self, k: u32) -> std::result::Result<(), String> {
        let (p, r, c) = (self.p, self.rank, self.c);
        let sum_at = |i: usize| (0..p).map(|q| value(q, i, k)).sum::<f32>();
        let vd = |q: u32| (0..q as usize).map(|x| c + x).sum::<usize>();
        let want: Option<Vec<f32>> = match self.op {
            "all_reduce" | "all_reduce_in_place" => Some((0..c).map(sum_at).collect()),
            "all_gather" => Some(
                (0..p as usize * c)
                    .map(|i| value((i / c) as u32, i % c, k))
                    .collect(),
            ),
            "reduce_scatter" => Some((0..c).map(|i| sum_at(r as usize * c + i)).collect()),
            "broadcast" => (r != ROOT).then(|| (0..c).map(|i| value(ROOT, i, k)).collect()),
            "reduce" => (r == ROOT).then(|| (0..c).map(sum_at).collect()),
            "scatter" => Some((0..c).map(|i| value(ROOT, r as usize * c + i, k)).collect()),
            "gather" => (r == ROOT).then(|| {
                (0..p as usize * c)
                    .map(|i| value((i / c) as u32, i % c, k))
                    .collect()
            }),
            "all_to_all" => Some(
                (0..p as usize * c)
                    .map(|i| value((i / c) as u32, r as usize * c + i % c, k))
                    .collect(),
            ),
            "all_gather_v" => Some(
                (0..p)
                    .flat_map(|q| (0..c + q as usize).map(move |i| value(q, i, k)))
                    .collect(),
            ),
            "reduce_scatter_v" => Some((0..c + r as usize).map(|i| sum_at(vd(r) + i)).collect()),
            "all_to_all_v" => Some(
                (0..p)
                    .flat_map(|q| (0..c + r as usize).map(move |i| value(q, vd(r) + i, k)))
                    .collect(),
            ),
            "send_recv" => (r % 2 == 1).then(|| (0..c).map(|i| value(r - 1, i, k)).collect()),
            other => panic!("unknown graph case {other}"),
        };
        let Some(want) = want else {
            return Ok(());
        };
        let got = self
            .recv
            .to_vec::<f32>(want.len())
            .map_err(|e| e.to_string())?;
        match got.iter().zip(&want).position(|(g, w)| g != w) {
            None => Ok(()),
            Some(i) => Err(format!(
                "{} rank {r} of {p}, launch {k}: element {i} is {}, want {}",
                self.op, got[i], want[i]
            )),
        }
    }
}
