//! The simulator's links of one plan: both ends of every link, made once
//! per unordered pair of ranks, and the traffic they carried.
//!
//! A mesh plan of p ranks has p(p−1)/2 of them (523,776 at 1,024 ranks):
//! they are kept in a vector in the order they were made, found through
//! an index keyed by the pair packed into one word and hashed with a
//! multiply-xorshift (SipHash, the std default, showed in profiles of
//! those plans), and the report is built from them in one sequential
//! pass, sorted once, instead of a tree insert per link.

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

/// Every link of a plan (see the module docs).
#[derive(Default)]
pub(crate) struct LinkTable {
    pairs: Vec<Pair>,
    index: HashMap<u64, u32, BuildHasherDefault<PairHasher>>,
}

impl LinkTable {
    /// Rank `a`'s end of its link to `b`, made by `make` (the lower
    /// rank's end first) if the pair has none yet.
    pub(crate) fn end(
        &mut self,
        a: u32,
        b: u32,
        make: impl FnOnce(u32, u32) -> (Arc<SimLink>, Arc<SimLink>),
    ) -> Arc<SimLink> {
        let (lo, hi) = (a.min(b), a.max(b));
        let key = (lo as u64) << 32 | hi as u64;
        let at = *self.index.entry(key).or_insert_with(|| {
            self.pairs.push(Pair {
                lo,
                hi,
                ends: make(lo, hi),
            });
            (self.pairs.len() - 1) as u32
        });
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
