//! The simulator's links of one plan: both ends of every link, made once
//! per unordered pair of ranks, and the traffic they carried.
//!
//! A mesh plan of p ranks has p(p−1)/2 of them (523,776 at 1,024 ranks):
//! they are kept in a vector in the order they were made, found through
//! an index, and the report is built from them in one sequential pass,
//! sorted once, instead of a tree insert per link. Up to [`DENSE_UP_TO`]
//! ranks the index is a triangular array of every pair's slot (2 MiB at
//! 1,024 ranks: a hash probe per link was a fifth of a mesh plan's set-up,
//! each a miss in a table several times that size); above, where a mesh
//! would not fit anyway and most plans have a few links a rank, a hash
//! map keyed by the pair packed into one word and hashed with a
//! multiply-xorshift (SipHash, the std default, showed in profiles).

use super::link::SimLink;
use super::SimReport;
use crate::topo::CommPlane;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Both ends of one link: the lower rank's, then the higher rank's.
struct Pair {
    lo: u32,
    hi: u32,
    ends: (Arc<SimLink>, Arc<SimLink>),
}

/// Plans of at most this many ranks index their links densely (see the
/// module docs): 8 MiB of index at 2,048 ranks.
const DENSE_UP_TO: u32 = 2048;

/// Every link of a plan (see the module docs).
pub(crate) struct LinkTable {
    pairs: Vec<Pair>,
    index: Index,
}

/// Where a pair's link is in [`LinkTable::pairs`].
enum Index {
    /// Slot of pair (lo, hi) at [`Index::triangle`], `u32::MAX` if none.
    Dense {
        p: u32,
        at: Vec<u32>,
    },
    Hashed(HashMap<u64, u32, BuildHasherDefault<PairHasher>>),
}

impl Index {
    /// The position of pair `lo < hi` (of `p` ranks) in a row-major
    /// upper triangle without its diagonal.
    fn triangle(p: u32, lo: u32, hi: u32) -> usize {
        let (p, lo, hi) = (p as usize, lo as usize, hi as usize);
        lo * (2 * p - lo - 1) / 2 + (hi - lo - 1)
    }
}

impl LinkTable {
    /// An empty table for a plan of `p` ranks.
    pub(crate) fn new(p: u32) -> Self {
        let index = if p <= DENSE_UP_TO {
            let n = (p as usize) * (p as usize).saturating_sub(1) / 2;
            Index::Dense {
                p,
                at: vec![u32::MAX; n],
            }
        } else {
            Index::Hashed(HashMap::default())
        };
        LinkTable {
            pairs: Vec::new(),
            index,
        }
    }

    /// Rank `a`'s end of its link to `b`, made by `make` (the lower
    /// rank's end first) if the pair has none yet.
    pub(crate) fn end(
        &mut self,
        a: u32,
        b: u32,
        make: impl FnOnce(u32, u32) -> (Arc<SimLink>, Arc<SimLink>),
    ) -> Arc<SimLink> {
        let (lo, hi) = (a.min(b), a.max(b));
        let pairs = &mut self.pairs;
        let add = || {
            pairs.push(Pair {
                lo,
                hi,
                ends: make(lo, hi),
            });
            (pairs.len() - 1) as u32
        };
        let at = match &mut self.index {
            Index::Dense { p, at } => {
                let slot = &mut at[Index::triangle(*p, lo, hi)];
                if *slot == u32::MAX {
                    *slot = add();
                }
                *slot
            }
            Index::Hashed(map) => *map.entry((lo as u64) << 32 | hi as u64).or_insert_with(add),
        };
        let ends = &self.pairs[at as usize].ends;
        if a == lo { &ends.0 } else { &ends.1 }.clone()
    }

    /// Writes the links' traffic into `report`: bytes and transfers per
    /// directed link that carried any, bytes per plane (a link's plane is
    /// that of its first request), and the most any rank sent, in all and
    /// per plane.
    pub(crate) fn report_traffic(&self, p: u32, report: &mut SimReport) {
        let mut sent = vec![0u64; p as usize];
        let mut plane_sent = vec![[0u64; CommPlane::COUNT]; p as usize];
        let mut bytes = Vec::new();
        let mut transfers = Vec::new();
        for pair in &self.pairs {
            let (lo, hi) = &pair.ends;
            for (from, to, l) in [(pair.lo, pair.hi, lo), (pair.hi, pair.lo, hi)] {
                let b = l.bytes.load(Ordering::Relaxed);
                let t = l.transfers.load(Ordering::Relaxed);
                if t > 0 {
                    bytes.push(((from, to), b));
                    transfers.push(((from, to), t));
                }
                let plane = l.plane();
                report.plane_bytes[plane] += b;
                sent[from as usize] += b;
                plane_sent[from as usize][plane] += b;
            }
        }
        // sorted, a map is built in one pass rather than a search per key
        bytes.sort_unstable_by_key(|e| e.0);
        transfers.sort_unstable_by_key(|e| e.0);
        report.link_bytes = BTreeMap::from_iter(bytes);
        report.link_transfers = BTreeMap::from_iter(transfers);
        report.max_rank_bytes_sent = sent.into_iter().max().unwrap_or(0);
        for (pl, max) in report.plane_max_rank_bytes.iter_mut().enumerate() {
            *max = plane_sent.iter().map(|s| s[pl]).max().unwrap_or(0);
        }
    }
}

/// Hashes a packed pair of ranks: one multiply-xorshift round (the
/// finaliser of SplitMix64) spreads consecutive ranks over every bit the
/// table looks at.
#[derive(Default)]
pub(crate) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ b as u64);
        }
    }

    fn write_u64(&mut self, v: u64) {
        let mut z = v.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = z ^ (z >> 31);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash(v: u64) -> u64 {
        let mut h = PairHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn the_triangle_gives_every_pair_its_own_slot() {
        for p in [2u32, 3, 7, 64] {
            let mut seen = vec![false; (p * (p - 1) / 2) as usize];
            for lo in 0..p {
                for hi in lo + 1..p {
                    let i = Index::triangle(p, lo, hi);
                    assert!(!seen[i], "p {p}: ({lo}, {hi}) at {i} twice");
                    seen[i] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "p {p}: a slot left over");
        }
    }

    #[test]
    fn packed_pairs_hash_apart() {
        // neighbouring pairs differ in the top 7 bits (the table's tag)
        // and the low bits (its bucket) often enough to spread
        let hs: Vec<u64> = (0..4096u64).map(|i| hash(i << 32 | (i + 1))).collect();
        let tags: std::collections::HashSet<u64> = hs.iter().map(|h| h >> 57).collect();
        let buckets: std::collections::HashSet<u64> = hs.iter().map(|h| h & 4095).collect();
        assert_eq!(tags.len(), 128, "every tag value used");
        assert!(
            buckets.len() > 2400,
            "{} of 4096 buckets used",
            buckets.len()
        );
    }
}
