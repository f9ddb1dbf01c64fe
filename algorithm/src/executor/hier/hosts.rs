//! The hosts of a communicator as the hierarchical executors see them: who
//! is on which host, which rank of each host owns which part of the data,
//! and which ranks meet on level 1 for each part.
//!
//! Data handled across hosts is cut into parts, and on every host each part
//! has one owning rank; a rank's parts are contiguous, so they are one
//! slice of the level-0 ring. The level-1 group of part k is its owner on
//! every host ("logical same-index" ranks). Two ways to share ([`Split`]):
//! - [`Split::Index`]: one part per index of the largest host; rank i owns
//!   part i, and on a smaller host its last rank also stands in for the
//!   indices the host lacks (HCCL's same-index level 1, made to work on
//!   uneven hosts; the stand-in carries more).
//! - [`Split::Lcm`] (AHC): LCM(host sizes) parts; on a host of s ranks rank
//!   j owns the parts k with ⌊k·s/LCM⌋ = j, exactly LCM/s of them, so
//!   every rank carries the same share.

use crate::template::Slice;
use crate::topo::TopoInfo;
use std::ops::Range;

/// How parts are cut and shared (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// One part per index of the largest host.
    Index,
    /// LCM(host sizes) parts, shared evenly.
    Lcm,
}

/// Hosts, their ranks, and this rank's place among them.
#[derive(Clone, Debug)]
pub(crate) struct Hosts {
    /// User ranks of each host, ascending.
    pub ranks: Vec<Vec<u32>>,
    /// This rank's host.
    pub host: usize,
    /// This rank's index on its host.
    pub index: u32,
}

/// Where each rank's block sits in a buffer laid out index-major: region i
/// holds the blocks of the ranks with host index i, in host order. Region i
/// is then exactly what level-1 group i exchanges, and a host rank's owned
/// regions are one contiguous level-0 slice.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// Block of each user rank.
    pub at: Vec<Slice>,
    /// Region of each host index.
    pub regions: Vec<Slice>,
    /// Bytes in all.
    pub total: usize,
}

/// The smallest slice covering `parts[range]` (consecutive parts).
pub(crate) fn span(parts: &[Slice], range: Range<u32>) -> Slice {
    let (a, b) = (range.start as usize, range.end as usize);
    if a >= b {
        let offset = parts.get(a).map_or(0, |s| s.offset);
        return Slice { offset, len: 0 };
    }
    Slice {
        offset: parts[a].offset,
        len: parts[b - 1].offset + parts[b - 1].len - parts[a].offset,
    }
}

/// The overlap of `a` and `b` (empty, at `a`'s start, if none).
pub(crate) fn overlap(a: Slice, b: Slice) -> Slice {
    let start = a.offset.max(b.offset);
    let end = (a.offset + a.len).min(b.offset + b.len);
    if end <= start {
        return Slice {
            offset: a.offset,
            len: 0,
        };
    }
    Slice {
        offset: start,
        len: end - start,
    }
}

impl Hosts {
    /// The hosts of `topo`.
    pub(crate) fn of(topo: &TopoInfo) -> Self {
        let ranks: Vec<Vec<u32>> = (0..topo.server_num())
            .map(|s| topo.server_ranks(s))
            .collect();
        let host = topo.server_index() as usize;
        let index = ranks[host]
            .iter()
            .position(|&r| r == topo.user_rank)
            .unwrap_or(0) as u32;
        Hosts { ranks, host, index }
    }

    /// Number of hosts.
    pub(crate) fn count(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Ranks on host `h`.
    pub(crate) fn size(&self, h: usize) -> u32 {
        self.ranks[h].len() as u32
    }

    /// Ranks on the largest host.
    pub(crate) fn largest(&self) -> u32 {
        (0..self.ranks.len())
            .map(|h| self.size(h))
            .max()
            .unwrap_or(1)
    }

    /// Least common multiple of the host sizes (AHC's part count).
    pub(crate) fn lcm(&self) -> u32 {
        fn gcd(a: u64, b: u64) -> u64 {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        let l = (0..self.ranks.len()).fold(1u64, |l, h| {
            let s = self.size(h) as u64;
            l / gcd(l, s) * s
        });
        u32::try_from(l).unwrap_or(u32::MAX)
    }

    /// This rank's host's ranks.
    pub(crate) fn mine(&self) -> &[u32] {
        &self.ranks[self.host]
    }

    /// How many parts `split` cuts the data into.
    pub(crate) fn parts(&self, split: Split) -> u32 {
        match split {
            Split::Index => self.largest(),
            Split::Lcm => self.lcm(),
        }
    }

    /// Local index owning part `k` on host `h`.
    pub(crate) fn owner(&self, h: usize, k: u32, split: Split) -> u32 {
        let s = self.size(h);
        match split {
            Split::Index => k.min(s - 1),
            Split::Lcm => (k as u64 * s as u64 / self.lcm() as u64) as u32,
        }
    }

    /// Parts owned by local index `j` of host `h`.
    pub(crate) fn owned(&self, h: usize, j: u32, split: Split) -> Range<u32> {
        let s = self.size(h);
        match split {
            Split::Index if j + 1 < s => j..j + 1,
            Split::Index => j..self.largest(),
            Split::Lcm => {
                let at = |j: u32| (j as u64 * self.lcm() as u64).div_ceil(s as u64) as u32;
                at(j)..at(j + 1)
            }
        }
    }

    /// The level-1 group of part `k`: its owner on every host, in host order.
    pub(crate) fn group(&self, k: u32, split: Split) -> Vec<u32> {
        (0..self.ranks.len())
            .map(|h| self.ranks[h][self.owner(h, k, split) as usize])
            .collect()
    }

    /// Maximal runs of consecutive parts with the same level-1 group: one
    /// level-1 op each.
    pub(crate) fn runs(&self, split: Split) -> Vec<Range<u32>> {
        // two parts have the same group when every host's owner is the
        // same (a host's ranks are distinct): compared in place, not as
        // a group built per part (each rank asks several times, and a
        // one-host plan of p ranks has p parts: p² allocations a plan)
        let same_group = |a: u32, b: u32| {
            (0..self.ranks.len()).all(|h| self.owner(h, a, split) == self.owner(h, b, split))
        };
        let mut out: Vec<Range<u32>> = Vec::new();
        for k in 0..self.parts(split) {
            match out.last_mut() {
                Some(r) if same_group(r.end - 1, k) => r.end = k + 1,
                _ => out.push(k..k + 1),
            }
        }
        out
    }

    /// The runs this rank takes part in, in the order every rank runs them.
    pub(crate) fn my_runs(&self, split: Split) -> Vec<Range<u32>> {
        self.runs(split)
            .into_iter()
            .filter(|r| self.owner(self.host, r.start, split) == self.index)
            .collect()
    }

    /// The level-0 ring slices of host `h`: local rank j's slice covers the
    /// parts it owns (`parts` as `split` cuts them).
    pub(crate) fn level0_slices(&self, h: usize, parts: &[Slice], split: Split) -> Vec<Slice> {
        (0..self.size(h))
            .map(|j| span(parts, self.owned(h, j, split)))
            .collect()
    }

    /// Index-major layout of one block per rank, rank r's block `len(r)` bytes.
    pub(crate) fn layout(&self, len: impl Fn(u32) -> usize) -> Layout {
        let regions = (0..self.largest() as usize).map(|i| {
            self.ranks
                .iter()
                .filter_map(|host| host.get(i).copied())
                .collect()
        });
        Self::pack(regions, len)
    }

    /// Host-major layout of one block per rank (host 0's ranks, then host
    /// 1's, ...); `regions` are then the hosts' ranges.
    pub(crate) fn host_major(&self, len: impl Fn(u32) -> usize) -> Layout {
        Self::pack(self.ranks.iter().cloned(), len)
    }

    /// Blocks packed region after region, each region's ranks in order.
    fn pack(regions: impl Iterator<Item = Vec<u32>>, len: impl Fn(u32) -> usize) -> Layout {
        let mut at = Vec::new();
        let mut out = Vec::new();
        let mut off = 0;
        for ranks in regions {
            let start = off;
            for r in ranks {
                if at.len() <= r as usize {
                    at.resize(r as usize + 1, Slice { offset: 0, len: 0 });
                }
                at[r as usize] = Slice {
                    offset: off,
                    len: len(r),
                };
                off += len(r);
            }
            out.push(Slice {
                offset: start,
                len: off - start,
            });
        }
        Layout {
            at,
            regions: out,
            total: off,
        }
    }

    /// The level-1 slices of region `i` (relative to the region), one per
    /// member of its group in host order: the block of the host's rank with
    /// index i, empty for hosts that have no such rank (their owner of the
    /// region stands in for it).
    pub(crate) fn region_slices(&self, layout: &Layout, i: u32) -> Vec<Slice> {
        let base = layout.regions[i as usize];
        self.ranks
            .iter()
            .map(|host| match host.get(i as usize) {
                Some(&r) => {
                    let s = layout.at[r as usize];
                    Slice {
                        offset: s.offset - base.offset,
                        len: s.len,
                    }
                }
                None => Slice {
                    offset: base.len,
                    len: 0,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(sizes: &[u32], rank: u32) -> Hosts {
        let map = sizes
            .iter()
            .enumerate()
            .flat_map(|(h, &n)| std::iter::repeat_n(h as u32, n as usize))
            .collect();
        Hosts::of(&TopoInfo::new(rank, map).unwrap())
    }

    #[test]
    fn lcm_parts_are_shared_evenly_and_grouped_by_logical_index() {
        // seed 002's example: groups of 2 and 3 ranks, LCM 6
        let h = hosts(&[2, 3], 0);
        assert_eq!(h.lcm(), 6);
        let l = Split::Lcm;
        assert_eq!(h.owned(0, 0, l), 0..3);
        assert_eq!(h.owned(0, 1, l), 3..6);
        assert_eq!(h.owned(1, 1, l), 2..4);
        assert_eq!(h.group(0, l), vec![0, 2]);
        assert_eq!(h.group(2, l), vec![0, 3]);
        assert_eq!(h.group(5, l), vec![1, 4]);
        assert_eq!(h.runs(l), vec![0..2, 2..3, 3..4, 4..6]);
        assert_eq!(h.my_runs(l), vec![0..2, 2..3]);
        // same-index groups; host 0's last rank stands in for index 2
        let i = Split::Index;
        assert_eq!(h.owned(0, 1, i), 1..3);
        assert_eq!(h.group(2, i), vec![1, 4]);
    }

    #[test]
    fn ownership_covers_every_part_once() {
        for sizes in [&[2u32, 3][..], &[1, 4], &[3, 3, 2], &[5, 2, 7], &[1, 1, 1]] {
            let h = hosts(sizes, 0);
            for split in [Split::Index, Split::Lcm] {
                for (hi, &s) in sizes.iter().enumerate() {
                    let mut next = 0;
                    for j in 0..s {
                        let r = h.owned(hi, j, split);
                        assert_eq!(r.start, next, "{sizes:?} {split:?}");
                        for k in r.clone() {
                            assert_eq!(h.owner(hi, k, split), j);
                        }
                        next = r.end;
                    }
                    assert_eq!(next, h.parts(split));
                }
            }
        }
    }

    #[test]
    fn index_major_layout() {
        let h = hosts(&[2, 3], 0);
        let l = h.layout(|_| 10);
        // regions: {0, 2}, {1, 3}, {4}
        assert_eq!(l.at[2].offset, 10);
        assert_eq!(l.at[1].offset, 20);
        assert_eq!(l.at[4].offset, 40);
        assert_eq!(
            l.regions[2],
            Slice {
                offset: 40,
                len: 10
            }
        );
        assert_eq!(
            h.region_slices(&l, 2),
            vec![Slice { offset: 10, len: 0 }, Slice { offset: 0, len: 10 }]
        );
    }
}
