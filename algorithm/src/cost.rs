//! The α-β-γ cost model (seed 002): time = a·α + b·β + c·γ, where a is the
//! number of sequential communication steps, b the bytes the busiest rank
//! sends, and c the bytes it reduces. The plan simulator counts the same
//! three quantities, so each formula here is checked against it.

use crate::op::OpType;

/// Link parameters of one level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkParams {
    /// Latency per step, µs.
    pub alpha_us: f64,
    /// Time per byte sent, µs (1 / bandwidth).
    pub beta_us_per_byte: f64,
}

impl LinkParams {
    /// From latency (µs) and bandwidth (GB/s).
    pub fn new(alpha_us: f64, gbps: f64) -> Self {
        LinkParams {
            alpha_us,
            beta_us_per_byte: 1.0 / (gbps * 1e3),
        }
    }
}

/// Parameters of the whole machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostParams {
    /// Within a server (in-process or shared memory).
    pub level0: LinkParams,
    /// Between servers (TCP).
    pub level1: LinkParams,
    /// Time per byte reduced, µs.
    pub gamma_us_per_byte: f64,
    /// Capacity of one host's link to the others, per direction, GB/s:
    /// what every flow leaving (or entering) a host shares, where level 1's
    /// β is what one flow alone gets. `None`: flows do not share (each
    /// gets level 1's rate).
    pub host_gbps: Option<f64>,
}

impl CostParams {
    /// µs for `bytes` to cross one host's link at its capacity
    /// ([`host_gbps`](Self::host_gbps)); 0 without one. A plan across
    /// hosts takes at least this for the busiest host link's bytes,
    /// however its flows share it; the simulator's timed model shares the
    /// link the same way ([`SimSpec::cost`](crate::sim::SimSpec::cost)).
    pub fn host_us(&self, bytes: f64) -> f64 {
        match self.host_gbps {
            Some(g) if g > 0.0 => bytes / (g * 1e3),
            _ => 0.0,
        }
    }
}

impl Default for CostParams {
    /// Defaults measured on a 2-core VM; `hccl-test --calibrate` (issue 5)
    /// will replace them with measured values.
    fn default() -> Self {
        CostParams {
            level0: LinkParams::new(3.0, 3.0),
            level1: LinkParams::new(30.0, 1.5),
            gamma_us_per_byte: 1.0 / 5e3,
            host_gbps: None,
        }
    }
}

/// The flat algorithm families the executors implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ring: p−1 steps per phase, (p−1)/p of the data per rank per phase.
    Ring,
    /// Mesh: one step per op-base round, direct writes to every peer.
    Mesh,
    /// Recursive halving/doubling on the largest power of two ≤ p, with a
    /// fold-in and fold-out step for the remaining ranks (HCCL's H-D_R).
    Rhd,
    /// One peer per step (alltoall): p−1 steps.
    PairWise,
    /// The root talks to every rank directly, in one step (rooted ops).
    Star,
    /// Nonuniform hierarchical ring: ⌈log2 p⌉ ring steps at halving
    /// distances for any p, (p−1)/p of the data per rank per phase.
    Nhr,
    /// Nonuniform Bruck: ⌈log2 p⌉ ring steps at doubling distances for any
    /// p, ⌊(p−1+2^k)/2^(k+1)⌋ blocks at step k, (p−1)/p per rank per phase.
    Nb,
}

/// The (α, β, γ) coefficients: steps, bytes sent by the busiest rank (for
/// the RHD reduce tree, received by the root: its receives are what is
/// sequential), bytes reduced by the busiest rank. `bytes` is the op's
/// per-rank message as hccl_test counts it (the allreduce vector; the
/// gathered output of allgather; the input of reduce-scatter; the
/// broadcast buffer; one rank's block of scatter and gather).
pub fn terms(algo: Algo, op: OpType, p: u32, bytes: u64) -> Option<(f64, f64, f64)> {
    let (p, n) = (p as f64, bytes as f64);
    if p <= 1.0 {
        return Some((0.0, 0.0, 0.0));
    }
    let f = (p - 1.0) / p;
    // RHD: core of m = 2^⌊log2 p⌋ ranks, `fold` = 1 when ranks outside it
    // are folded in and out
    let m = (1u64 << (63 - (p as u64).leading_zeros())) as f64;
    let fold = if m < p { 1.0 } else { 0.0 };
    let g = (m - 1.0) / m;
    // binomial trees: the root's core rank talks to log2 m partners in turn,
    // plus its fold partner (roots inside the core; one step more otherwise)
    let tree = m.log2() + fold;
    // RHD allgather/reduce-scatter work on m groups, the first p − m of
    // which hold two rank blocks; core rank 0 is the busiest: its range
    // is groups 0..2^j at each of the log2 m steps
    // NHR and NB: ⌈log2 p⌉ steps per phase
    let k = (p as u32 - 1).ilog2() as f64 + 1.0;
    let s_rhd: f64 = (0..m.log2() as u32)
        .map(|j| {
            let k = (1u64 << j) as f64;
            k + k.min(p - m)
        })
        .sum::<f64>()
        * n
        / p;
    Some(match (algo, op) {
        (Algo::Ring, OpType::AllReduce) => (2.0 * (p - 1.0), 2.0 * f * n, f * n),
        (Algo::Ring, OpType::AllGather) => (p - 1.0, f * n, 0.0),
        (Algo::Ring, OpType::ReduceScatter) => (p - 1.0, f * n, f * n),
        // chain of p−1 hops carrying p pipelined segments
        (Algo::Ring, OpType::Broadcast) => (2.0 * (p - 1.0), n, 0.0),
        (Algo::Mesh, OpType::AllReduce) => (1.0, (p - 1.0) * n, (p - 1.0) * n),
        (Algo::Rhd, OpType::AllReduce) => (
            2.0 * m.log2() + 2.0 * fold,
            2.0 * g * n + fold * n,
            g * n + fold * n,
        ),
        // core rank 0 sends the groups it holds at each step, then (when
        // folded) everything to its fold partner
        (Algo::Rhd, OpType::AllGather) => (m.log2() + 2.0 * fold, s_rhd + fold * n, 0.0),
        // a folded rank sends its whole input; core rank 0 reduces that
        // and then the groups it keeps at each step
        (Algo::Rhd, OpType::ReduceScatter) => (
            m.log2() + 2.0 * fold,
            if fold > 0.0 { n } else { s_rhd },
            s_rhd + fold * n,
        ),
        // the root sends (broadcast) or receives and reduces (reduce) the
        // whole message once per tree step
        (Algo::Rhd, OpType::Broadcast) => (tree, tree * n, 0.0),
        (Algo::Rhd, OpType::Reduce) => (tree, tree * n, tree * n),
        // rooted ring ops: Reduce is the broadcast chain backwards (every
        // rank reduces the message once); Scatter and Gather pass p−1
        // blocks of n through the root's neighbour in p−1 steps
        (Algo::Ring, OpType::Reduce) => (2.0 * (p - 1.0), n, n),
        (Algo::Ring, OpType::Scatter | OpType::Gather) => (p - 1.0, (p - 1.0) * n, 0.0),
        // star: the mesh plan of a rooted op (seed 002: α + nβ per link)
        (Algo::Star, OpType::Broadcast | OpType::Scatter) => (1.0, (p - 1.0) * n, 0.0),
        (Algo::Star, OpType::Reduce) => (1.0, n, (p - 1.0) * n),
        (Algo::Star, OpType::Gather) => (1.0, n, 0.0),
        (Algo::Mesh, OpType::AllGather | OpType::AllToAll) => (1.0, f * n, 0.0),
        (Algo::Mesh, OpType::ReduceScatter) => (1.0, f * n, f * n),
        (Algo::PairWise, OpType::AllToAll) => (p - 1.0, f * n, 0.0),
        (Algo::Mesh, OpType::Broadcast | OpType::Scatter) => (1.0, (p - 1.0) * n, 0.0),
        (Algo::Mesh, OpType::Reduce) => (1.0, n, (p - 1.0) * n),
        (Algo::Mesh, OpType::Gather) => (1.0, n, 0.0),
        // seed 002 §3.7/§3.8, identical for both: each rank sends p−1 of p
        // blocks per phase; Broadcast is Scatter + AllGather, and a Scatter
        // root sends the p−1 other blocks (n is one rank's block)
        (Algo::Nhr | Algo::Nb, OpType::AllReduce) => (2.0 * k, 2.0 * f * n, f * n),
        (Algo::Nhr | Algo::Nb, OpType::AllGather) => (k, f * n, 0.0),
        (Algo::Nhr | Algo::Nb, OpType::ReduceScatter) => (k, f * n, f * n),
        (Algo::Nhr | Algo::Nb, OpType::Broadcast) => (2.0 * k, 2.0 * f * n, 0.0),
        (Algo::Nhr | Algo::Nb, OpType::Scatter) => (k, (p - 1.0) * n, 0.0),
        _ => return None,
    })
}

/// Predicted time in µs, or `None` if `algo` does not implement `op`.
pub fn predict(
    algo: Algo,
    op: OpType,
    p: u32,
    bytes: u64,
    link: LinkParams,
    gamma_us_per_byte: f64,
) -> Option<f64> {
    let (a, b, c) = terms(algo, op, p, bytes)?;
    Some(a * link.alpha_us + b * link.beta_us_per_byte + c * gamma_us_per_byte)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry;
    use crate::sim::{simulate, SimSpec};
    use hccl_platform::{DataType, ReduceOp};

    /// The simulator's counted steps, busiest-sender bytes and reduced bytes
    /// agree with each formula's α, β and γ terms.
    #[test]
    fn formulas_match_the_simulator() {
        let cases = [
            ("AllReduceRingExecutor", Algo::Ring, OpType::AllReduce),
            ("AllGatherRingExecutor", Algo::Ring, OpType::AllGather),
            (
                "ReduceScatterRingExecutor",
                Algo::Ring,
                OpType::ReduceScatter,
            ),
            ("AllReduceMeshExecutor", Algo::Mesh, OpType::AllReduce),
            ("BroadcastRingExecutor", Algo::Ring, OpType::Broadcast),
            ("AllReduceRHDExecutor", Algo::Rhd, OpType::AllReduce),
            ("AllGatherMeshExecutor", Algo::Mesh, OpType::AllGather),
            (
                "ReduceScatterMeshExecutor",
                Algo::Mesh,
                OpType::ReduceScatter,
            ),
            ("BroadcastMeshExecutor", Algo::Mesh, OpType::Broadcast),
            ("ScatterMeshExecutor", Algo::Mesh, OpType::Scatter),
            ("GatherMeshExecutor", Algo::Mesh, OpType::Gather),
            ("ReduceMeshExecutor", Algo::Mesh, OpType::Reduce),
            ("AllToAllMeshExecutor", Algo::Mesh, OpType::AllToAll),
            ("ReduceRingExecutor", Algo::Ring, OpType::Reduce),
            ("ScatterRingExecutor", Algo::Ring, OpType::Scatter),
            ("GatherRingExecutor", Algo::Ring, OpType::Gather),
            ("BroadcastStarExecutor", Algo::Star, OpType::Broadcast),
            ("ReduceStarExecutor", Algo::Star, OpType::Reduce),
            ("ScatterStarExecutor", Algo::Star, OpType::Scatter),
            ("GatherStarExecutor", Algo::Star, OpType::Gather),
            ("AllGatherRHDExecutor", Algo::Rhd, OpType::AllGather),
            ("ReduceScatterRHDExecutor", Algo::Rhd, OpType::ReduceScatter),
            ("BroadcastRHDExecutor", Algo::Rhd, OpType::Broadcast),
            ("ReduceRHDExecutor", Algo::Rhd, OpType::Reduce),
        ];
        let nonuniform = [
            ("AllReduceNHRExecutor", Algo::Nhr, OpType::AllReduce),
            ("AllGatherNHRExecutor", Algo::Nhr, OpType::AllGather),
            ("ReduceScatterNHRExecutor", Algo::Nhr, OpType::ReduceScatter),
            ("BroadcastNHRExecutor", Algo::Nhr, OpType::Broadcast),
            ("ScatterNHRExecutor", Algo::Nhr, OpType::Scatter),
            ("AllReduceNBExecutor", Algo::Nb, OpType::AllReduce),
            ("AllGatherNBExecutor", Algo::Nb, OpType::AllGather),
            ("ReduceScatterNBExecutor", Algo::Nb, OpType::ReduceScatter),
            ("BroadcastNBExecutor", Algo::Nb, OpType::Broadcast),
            ("ScatterNBExecutor", Algo::Nb, OpType::Scatter),
        ];
        for (name, algo, op) in cases.into_iter().chain(nonuniform) {
            for p in [2u32, 3, 4, 5, 7, 8, 16] {
                // RHD allreduce's 128-byte slices split evenly only on
                // powers of two; on other p the simulator's critical path
                // of the broadcast/reduce trees is shorter than their
                // sequential schedule (a rank's sends overlap)
                let exact_any_p = matches!(op, OpType::AllGather | OpType::ReduceScatter);
                if algo == Algo::Rhd && !p.is_power_of_two() && !exact_any_p {
                    continue;
                }
                // the NHR/NB scatter trees' critical path is their deepest
                // block path, shorter than the root's ⌈log2 p⌉ sequential
                // sends unless p is a power of two (checked in sim::tests)
                let rooted = matches!(op, OpType::Broadcast | OpType::Scatter);
                let alpha_exact =
                    !(matches!(algo, Algo::Nhr | Algo::Nb) && rooted) || p.is_power_of_two();
                // per-rank count chosen so slices divide evenly (and 128-byte aligned)
                let count = 32 * p as u64 * p as u64;
                let spec = SimSpec {
                    root: 0,
                    ..SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum)
                };
                let r = simulate(registry(), name, &spec)
                    .unwrap_or_else(|e| panic!("{name} p={p}: {e}"));
                // the message size the formulas use
                let unit = 4 * count;
                let bytes = match op {
                    OpType::AllGather | OpType::ReduceScatter | OpType::AllToAll => unit * p as u64,
                    OpType::Scatter | OpType::Gather => unit,
                    _ => unit,
                };
                let (a, b, _c) = terms(algo, op, p, bytes).unwrap();
                if alpha_exact {
                    assert_eq!(r.steps as f64, a, "{name} p={p}: α term (steps)");
                } else {
                    assert!((r.steps as f64) < a, "{name} p={p}: α term (steps)");
                }
                // the RHD reduce tree's β is the root's receives
                let measured = if (algo, op) == (Algo::Rhd, OpType::Reduce) {
                    let mut received = vec![0u64; p as usize];
                    for (&(_, to), &b) in &r.link_bytes {
                        received[to as usize] += b;
                    }
                    received.into_iter().max().unwrap_or(0)
                } else {
                    r.max_rank_bytes_sent
                };
                assert_eq!(
                    measured as f64, b,
                    "{name} p={p}: β term (bytes of the busiest sender)"
                );
            }
        }
    }

    #[test]
    fn small_messages_prefer_mesh_and_large_ones_ring() {
        let d = CostParams::default();
        let m = |n| {
            predict(
                Algo::Mesh,
                OpType::AllReduce,
                4,
                n,
                d.level0,
                d.gamma_us_per_byte,
            )
            .unwrap()
        };
        let r = |n| {
            predict(
                Algo::Ring,
                OpType::AllReduce,
                4,
                n,
                d.level0,
                d.gamma_us_per_byte,
            )
            .unwrap()
        };
        assert!(m(1024) < r(1024));
        assert!(m(16 << 20) > r(16 << 20));
        assert!(terms(Algo::Star, OpType::AllReduce, 4, 8).is_none());
    }
}

/// The α-β-γ coefficients of one level: steps on the critical path, bytes
/// the busiest rank sends on that level, bytes it reduces.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LevelTerms {
    /// Steps (α count).
    pub steps: f64,
    /// Bytes the busiest rank sends (β volume).
    pub bytes: f64,
    /// Bytes the busiest rank reduces (γ volume).
    pub reduce: f64,
}

/// Per-level terms of a hierarchical executor.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HierTerms {
    /// Intra-host (level 0).
    pub level0: LevelTerms,
    /// Inter-host (level 1).
    pub level1: LevelTerms,
    /// The most level-1 bytes that leave one host (all of its ranks'
    /// level-1 sends: a level-1 op's members are on different hosts).
    pub level1_host_bytes: f64,
}

/// Level-1 steps on the critical path when the level-1 ops run in order,
/// each taking `steps` and able to start once all its members finished
/// their earlier ones (a rank of a small host, or an AHC owner of several
/// runs, chains the groups it belongs to).
fn chained_steps(ops: &[(Vec<u32>, f64)], p: usize) -> f64 {
    let mut done = vec![0.0f64; p];
    for (group, steps) in ops {
        let start = group.iter().map(|&r| done[r as usize]).fold(0.0, f64::max);
        for &r in group {
            done[r as usize] = start + steps;
        }
    }
    done.into_iter().fold(0.0, f64::max)
}

/// The most of `sent` (bytes per rank) that leaves one host.
fn host_bytes(sent: impl Iterator<Item = f64>, host_of: &[u32], hosts: u32) -> f64 {
    let mut per_host = vec![0.0f64; hosts as usize];
    for (r, b) in sent.enumerate() {
        per_host[host_of[r] as usize] += b;
    }
    per_host.into_iter().fold(0.0, f64::max)
}

/// The per-level terms of the TwoLevel or AHC executor for `op` on hosts
/// of the given sizes (ranks numbered host after host), with `level1` the
/// inter-host allreduce (AllReduce; the other ops use a ring). `bytes` is
/// the message as [`terms`] counts it (the allreduce vector; the gathered
/// output of allgather; the input of reduce-scatter). Exact when the parts
/// split evenly into 128-byte slices; `None` for ops the executors do not
/// run.
pub fn hier_terms(
    kind: crate::executor::HierKind,
    op: OpType,
    level1: &dyn crate::executor::Level1Algorithm,
    host_sizes: &[u32],
    bytes: u64,
) -> Option<HierTerms> {
    use crate::executor::hier::hosts::{Hosts, Split};
    use crate::executor::HierKind;
    let map: Vec<u32> = host_sizes
        .iter()
        .enumerate()
        .flat_map(|(h, &n)| std::iter::repeat_n(h as u32, n as usize))
        .collect();
    let p = map.len();
    let hosts = Hosts::of(&crate::TopoInfo::new(0, map.clone()).ok()?);
    let hn = hosts.count();
    let n = bytes as f64;
    let split = if kind == HierKind::Ahc {
        Split::Lcm
    } else {
        Split::Index
    };
    let k = hosts.parts(split) as f64;
    let mut t = HierTerms::default();
    let max = |a: &mut f64, b: f64| *a = a.max(b);
    match (kind, op) {
        (HierKind::TwoLevel | HierKind::Ahc, OpType::AllReduce) => {
            // level 0: ring reduce-scatter + allgather of owned parts
            for h in 0..hn as usize {
                let s = hosts.size(h);
                let share = |j: u32| hosts.owned(h, j % s, split).len() as f64 * n / k;
                max(&mut t.level0.steps, 2.0 * (s as f64 - 1.0));
                if s > 1 {
                    for j in 0..s {
                        max(&mut t.level0.bytes, 2.0 * n - share(j) - share(j + 1));
                        max(&mut t.level0.reduce, n - share(j));
                    }
                }
            }
            // level 1: one allreduce per run of parts, among its owners
            let mut ops = Vec::new();
            let mut sent = vec![(0.0, 0.0); p];
            for run in hosts.runs(split) {
                let (a, b, c) = level1.terms(hn, (run.len() as f64 * n / k) as u64);
                let group = hosts.group(run.start, split);
                for &r in &group {
                    sent[r as usize].0 += b;
                    sent[r as usize].1 += c;
                }
                ops.push((group, a));
            }
            t.level1_host_bytes = host_bytes(sent.iter().map(|s| s.0), &map, hn);
            t.level1.steps = chained_steps(&ops, p);
            for (b, c) in sent {
                max(&mut t.level1.bytes, b);
                max(&mut t.level1.reduce, c);
            }
        }
        (HierKind::TwoLevel, OpType::AllGather | OpType::ReduceScatter) => {
            let block = n / p as f64;
            let real = |i: u32| (0..hn as usize).filter(|&h| hosts.size(h) > i).count() as f64;
            let region = |r: std::ops::Range<u32>| r.map(real).sum::<f64>() * block;
            let gather = op == OpType::AllGather;
            for h in 0..hn as usize {
                let s = hosts.size(h);
                max(&mut t.level0.steps, s as f64 - 1.0);
                for j in 0..s {
                    // a ring rank sends every slice but its right
                    // neighbour's (allgather) or its own (reduce-scatter)
                    let skip = if gather { (j + 1) % s } else { j };
                    let sent = if s > 1 {
                        n - region(hosts.owned(h, skip, split))
                    } else {
                        0.0
                    };
                    max(&mut t.level0.bytes, sent);
                    if !gather {
                        max(&mut t.level0.reduce, sent);
                    }
                }
            }
            let mut ops = Vec::new();
            let mut sent = vec![0.0; p];
            for i in 0..hosts.parts(split) {
                let group = hosts.group(i, split);
                for (h, &r) in group.iter().enumerate() {
                    let skip = if gather { (h + 1) % hn as usize } else { h };
                    let skipped = if hosts.size(skip) > i { block } else { 0.0 };
                    if hn > 1 {
                        sent[r as usize] += real(i) * block - skipped;
                    }
                }
                ops.push((group, hn as f64 - 1.0));
            }
            t.level1_host_bytes = host_bytes(sent.iter().copied(), &map, hn);
            t.level1.steps = chained_steps(&ops, p);
            t.level1.bytes = sent.into_iter().fold(0.0, f64::max);
            if !gather {
                t.level1.reduce = t.level1.bytes;
            }
        }
        _ => return None,
    }
    Some(t)
}

/// Predicted time in µs of a hierarchical executor from its per-level
/// terms: the levels one after the other, except Pipeline, whose levels
/// overlap (seed 002 §3.10: each of its H−1 ring steps costs the slower of
/// a level-1 and a level-0 step, plus one level-0 step).
pub fn predict_hier(
    kind: crate::executor::HierKind,
    t: &HierTerms,
    hosts: u32,
    c: &CostParams,
) -> f64 {
    let time = |l: &LevelTerms, k: &LinkParams| {
        l.steps * k.alpha_us + l.bytes * k.beta_us_per_byte + l.reduce * c.gamma_us_per_byte
    };
    let (t0, mut t1) = (time(&t.level0, &c.level0), time(&t.level1, &c.level1));
    // the busiest host link carries its bytes at no more than its capacity
    let beta = t.level1.bytes * c.level1.beta_us_per_byte;
    t1 += (c.host_us(t.level1_host_bytes) - beta).max(0.0);
    if kind != crate::executor::HierKind::Pipeline || hosts <= 1 {
        return t0 + t1;
    }
    let steps = hosts as f64 - 1.0;
    steps * (t0 / (steps + 1.0)).max(t1 / steps) + t0 / (steps + 1.0)
}

/// Predicted time in µs of the `kind` executor for `op` on hosts of
/// `host_sizes` ranks, with `level1` as the inter-host allreduce of
/// TwoLevel and AHC AllReduce (the other ops run a level-1 ring): level 0
/// priced with `c.level0`, level 1 with `c.level1` ([`hier_terms`], then
/// [`predict_hier`]). Pipeline moves what TwoLevel moves with a level-1
/// ring, its levels overlapped; its AllReduce is its ReduceScatter then
/// its AllGather of the same bytes (seed 002 §3.10: twice the pipelined
/// phase). `None` for pairs no hierarchical executor runs.
pub fn predict_hier_op(
    kind: crate::executor::HierKind,
    op: OpType,
    level1: &dyn crate::executor::Level1Algorithm,
    host_sizes: &[u32],
    bytes: u64,
    c: &CostParams,
) -> Option<f64> {
    use crate::executor::{HierKind, RingLevel1};
    let hosts = host_sizes.len() as u32;
    if kind != HierKind::Pipeline {
        let t = hier_terms(kind, op, level1, host_sizes, bytes)?;
        return Some(predict_hier(kind, &t, hosts, c));
    }
    let phase = |op| {
        let t = hier_terms(HierKind::TwoLevel, op, &RingLevel1, host_sizes, bytes)?;
        Some(predict_hier(kind, &t, hosts, c))
    };
    match op {
        OpType::AllReduce => Some(phase(OpType::ReduceScatter)? + phase(OpType::AllGather)?),
        OpType::AllGather | OpType::ReduceScatter => phase(op),
        _ => None,
    }
}

#[cfg(test)]
mod hier_tests {
    use super::*;
    use crate::executor::{HierKind, RingLevel1};
    use crate::registry;
    use crate::sim::{simulate, SimSpec};
    use crate::topo::CommPlane;
    use hccl_platform::{DataType, ReduceOp};

    /// The simulator's steps and busiest-rank bytes per level agree with
    /// [`hier_terms`] on even and uneven hosts.
    #[test]
    fn hierarchical_terms_match_the_simulator() {
        use crate::executor::{Level1Algorithm, NonuniformLevel1, RhdLevel1};
        let (ring, rhd): (&dyn Level1Algorithm, &dyn Level1Algorithm) = (&RingLevel1, &RhdLevel1);
        let (nhr, nb): (&dyn Level1Algorithm, &dyn Level1Algorithm) =
            (&NonuniformLevel1::NHR, &NonuniformLevel1::NB);
        let (two, ahc) = (HierKind::TwoLevel, HierKind::Ahc);
        let cases = [
            ("AllReduceTwoLevelExecutor", two, OpType::AllReduce, ring),
            ("AllReduceAHCExecutor", ahc, OpType::AllReduce, ring),
            ("AllGatherTwoLevelExecutor", two, OpType::AllGather, ring),
            (
                "ReduceScatterTwoLevelExecutor",
                two,
                OpType::ReduceScatter,
                ring,
            ),
            ("AllReduceTwoLevelNHRExecutor", two, OpType::AllReduce, nhr),
            ("AllReduceTwoLevelNBExecutor", two, OpType::AllReduce, nb),
            ("AllReduceAHCNHRExecutor", ahc, OpType::AllReduce, nhr),
            ("AllReduceAHCNBExecutor", ahc, OpType::AllReduce, nb),
        ];
        // RHD's halves split evenly only on powers of two (see above)
        let rhd_cases = [
            ("AllReduceTwoLevelRHDExecutor", two, OpType::AllReduce, rhd),
            ("AllReduceAHCRHDExecutor", ahc, OpType::AllReduce, rhd),
        ];
        let topologies: &[&[u32]] = &[
            &[2, 2],
            &[4, 4],
            &[2, 3],
            &[1, 4],
            &[3, 3, 2],
            &[1, 1, 1],
            &[5, 2, 7],
            &[2, 1, 2, 1, 2],
        ];
        for (name, kind, op, level1) in cases.into_iter().chain(rhd_cases) {
            for &hosts in topologies {
                if level1.suffix() == "RHD" && !hosts.len().is_power_of_two() {
                    continue;
                }
                let p: u32 = hosts.iter().sum();
                let h = hosts.len() as u64;
                let lcm = (1..)
                    .find(|l| hosts.iter().all(|&s| l % s as u64 == 0))
                    .unwrap();
                // every part, ring slice and block a whole number of 128-byte lines
                let count = match op {
                    OpType::AllReduce => 32 * lcm * h * p as u64,
                    _ => 32,
                };
                let spec = SimSpec::op(op, p, count, DataType::Fp32, ReduceOp::Sum).on_hosts(hosts);
                let r = simulate(registry(), name, &spec)
                    .unwrap_or_else(|e| panic!("{name} {hosts:?}: {e}"));
                let bytes = 4 * count * if op == OpType::AllReduce { 1 } else { p as u64 };
                let t = hier_terms(kind, op, level1, hosts, bytes).unwrap();
                let ctx = format!("{name} hosts={hosts:?}");
                let (l0, l1) = (CommPlane::Level0 as usize, CommPlane::Level1 as usize);
                assert_eq!(
                    r.plane_max_rank_bytes[l0] as f64, t.level0.bytes,
                    "{ctx}: level-0 β"
                );
                assert_eq!(
                    r.plane_max_rank_bytes[l1] as f64, t.level1.bytes,
                    "{ctx}: level-1 β"
                );
                assert_eq!(r.plane_steps[l0] as f64, t.level0.steps, "{ctx}: level-0 α");
                assert_eq!(r.plane_steps[l1] as f64, t.level1.steps, "{ctx}: level-1 α");
            }
        }
    }

    /// Pipeline AllReduce is priced as its two pipelined phases; ops
    /// without a hierarchical executor have no prediction; on two hosts of
    /// four a large allreduce costs less hierarchically than a flat ring
    /// whose every step crosses hosts.
    #[test]
    fn predict_hier_op_covers_the_hierarchical_executors() {
        let c = CostParams::default();
        let sizes = [4u32, 4];
        let n = 64u64 << 20;
        let at = |kind, op| predict_hier_op(kind, op, &RingLevel1, &sizes, n, &c);
        let pipe = |op| at(HierKind::Pipeline, op).unwrap();
        let sum = pipe(OpType::ReduceScatter) + pipe(OpType::AllGather);
        assert_eq!(pipe(OpType::AllReduce), sum);
        assert!(at(HierKind::TwoLevel, OpType::Broadcast).is_none());
        assert!(at(HierKind::Ahc, OpType::AllGather).is_none());
        let two = at(HierKind::TwoLevel, OpType::AllReduce).unwrap();
        let flat = predict(
            Algo::Ring,
            OpType::AllReduce,
            8,
            n,
            c.level1,
            c.gamma_us_per_byte,
        )
        .unwrap();
        assert!(two < flat, "two-level {two} vs flat ring {flat}");
    }

    #[test]
    fn pipeline_beats_two_level_when_levels_are_balanced() {
        let t = hier_terms(
            HierKind::TwoLevel,
            OpType::AllGather,
            &RingLevel1,
            &[4, 4, 4, 4],
            64 << 20,
        )
        .unwrap();
        let c = CostParams::default();
        assert!(
            predict_hier(HierKind::Pipeline, &t, 4, &c)
                < predict_hier(HierKind::TwoLevel, &t, 4, &c)
        );
    }
}

/// The α-β-γ quantities of a multi-ring executor ([`crate::rings`]: the
/// data cut into one part per channel, each part moved by a ring over its
/// channel's ring order, the channels of different groups in parallel).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MultiRingTerms {
    /// Steps of the longest stream: the channels of a group run one after
    /// another, each taking the steps of one ring.
    pub steps: f64,
    /// Per rank: the bytes it sends to ranks of its own host and to ranks
    /// of other hosts (over every channel).
    pub sent: Vec<(f64, f64)>,
    /// Per group: the bytes each link of a channel carries, summed over
    /// the group's channels (what one stream moves in sequence).
    pub group_bytes: Vec<f64>,
    /// Bytes the busiest rank reduces.
    pub reduce: f64,
}

/// The terms of the multi-ring executor for `op` of `bytes` (as [`terms`]
/// counts them: the allreduce vector, the gathered output of allgather,
/// the input of reduce-scatter, the broadcast / reduce buffer) on the
/// channels `rings` of ranks on hosts `rank_to_server`. Exact for every
/// rank's sends when the channels' parts (and, for AllReduce, their ring
/// slices) are whole 128-byte lines; Broadcast and Reduce count every
/// rank as sending its channel's part (all but the chain's last do).
/// `None` for ops it does not run.
pub fn multi_ring_terms(
    op: OpType,
    rings: &crate::rings::Rings,
    rank_to_server: &[u32],
    bytes: u64,
) -> Option<MultiRingTerms> {
    use crate::template::Slice;
    let p = rank_to_server.len();
    let c = rings.count();
    let pf = p as f64;
    // the executor's parts: of the buffer, or of each block (times p)
    let parts: Vec<f64> = match op {
        OpType::AllGather | OpType::ReduceScatter => {
            Slice::split((bytes / p.max(1) as u64) as usize, c)
                .iter()
                .map(|s| s.len as f64 * pf)
                .collect()
        }
        _ => Slice::split(bytes as usize, c)
            .iter()
            .map(|s| s.len as f64)
            .collect(),
    };
    let f = (pf - 1.0) / pf;
    // per channel: (steps, bytes on each link, bytes each rank reduces)
    let per = |m: f64| -> Option<(f64, f64, f64)> {
        Some(match op {
            OpType::AllReduce => (2.0 * (pf - 1.0), 2.0 * f * m, f * m),
            OpType::AllGather => (pf - 1.0, f * m, 0.0),
            OpType::ReduceScatter => (pf - 1.0, f * m, f * m),
            OpType::Broadcast => (2.0 * (pf - 1.0), m, 0.0),
            OpType::Reduce => (2.0 * (pf - 1.0), m, m),
            _ => return None,
        })
    };
    let mut t = MultiRingTerms {
        sent: vec![(0.0, 0.0); p],
        ..Default::default()
    };
    if p <= 1 {
        per(0.0)?;
        t.group_bytes = vec![0.0; rings.groups().len()];
        return Some(t);
    }
    let per_channel: Vec<(f64, f64, f64)> = parts.iter().map(|&m| per(m)).collect::<Option<_>>()?;
    for (j, &(_, link, reduce)) in per_channel.iter().enumerate() {
        let ring = rings.order(j);
        for (i, &r) in ring.iter().enumerate() {
            let next = ring[(i + 1) % p];
            let sent = &mut t.sent[r as usize];
            if rank_to_server[r as usize] == rank_to_server[next as usize] {
                sent.0 += link;
            } else {
                sent.1 += link;
            }
        }
        t.reduce += reduce;
    }
    for group in rings.groups() {
        let steps: f64 = group.iter().map(|&j| per_channel[j].0).sum();
        t.steps = t.steps.max(steps);
        t.group_bytes
            .push(group.iter().map(|&j| per_channel[j].1).sum());
    }
    Some(t)
}

/// Predicted µs of the multi-ring executor for `op` ([`multi_ring_terms`]):
/// the longest stream's steps at the α of the link every channel crosses
/// (between hosts when there are several), plus the larger of the
/// busiest rank's sends (each priced with the link it takes: one driver
/// thread per rank moves all of its channels' data) and the busiest
/// stream's (each channel paced by its slowest link), plus the busiest
/// rank's reductions. `None` for ops it does not run.
pub fn predict_multi_ring(
    op: OpType,
    rings: &crate::rings::Rings,
    rank_to_server: &[u32],
    bytes: u64,
    c: &CostParams,
) -> Option<f64> {
    let t = multi_ring_terms(op, rings, rank_to_server, bytes)?;
    let hosts = rank_to_server.iter().max().map_or(1, |m| m + 1);
    let link = if hosts > 1 { c.level1 } else { c.level0 };
    // the busiest host link carries its bytes at no more than its capacity
    let host = c.host_us(host_bytes(
        t.sent.iter().map(|s| s.1),
        rank_to_server,
        hosts,
    ));
    let rank = t
        .sent
        .iter()
        .map(|&(intra, inter)| {
            intra * c.level0.beta_us_per_byte + inter * c.level1.beta_us_per_byte
        })
        .fold(0.0, f64::max);
    let stream = t.group_bytes.iter().fold(0.0f64, |a, &b| a.max(b)) * link.beta_us_per_byte;
    Some(t.steps * link.alpha_us + rank.max(stream).max(host) + t.reduce * c.gamma_us_per_byte)
}
