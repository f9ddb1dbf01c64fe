//! Multi-channel rings across hosts, as NCCL builds them (`connectRings`,
//! seed 004): every channel is one ring over all ranks, made of one
//! intra-host order per host joined host to host.
//!
//! Within a host a channel's order starts at the host's *receiving* rank
//! (it takes from the sending rank of the previous host) and ends at its
//! *sending* rank (it gives to the receiving rank of the next host); hosts
//! follow each other in host order, the last one giving back to the first.
//! [`connect`] joins one channel's orders and returns the ring as one rank
//! sees it (NCCL's `ncclBuildRings`: the whole ring starting at the rank,
//! with its prev and next).
//!
//! [`intra_orders`] chooses the orders of a host's ranks so that different
//! channels put different ranks at the host boundaries and use no
//! intra-host edge (sender → receiver) twice: the inter-host traffic of
//! the channels then leaves from and arrives at different ranks (their
//! sockets, their cores), and channels can run in parallel without
//! sharing a directed link. [`Rings`] builds a communicator's channels:
//! the distinct orders, duplicated as NCCL does (`nChannels*2`) and
//! limited by [`ChannelLimits`] (`HCCL_RS_MIN_CHANNELS` /
//! `HCCL_RS_MAX_CHANNELS`, NCCL's `NCCL_MIN_NCHANNELS` /
//! `NCCL_MAX_NCHANNELS`; without a maximum the duplicates are left out).
//!
//! Links count verbs, they do not tell channels apart: two channels that
//! send over the same directed edge (a duplicate and its original, or any
//! two channels on hosts of one rank) must issue their verbs on that edge
//! in one agreed order, so [`Rings::groups`] puts channels that share a
//! directed edge into one group (one stream); channels of different
//! groups share at most a link used in opposite directions, whose
//! counters are separate.

use crate::topo::TopoInfo;
use hccl_platform::{HcclError, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// The limits live with the topology, which carries them to executors.
pub use crate::topo::{ChannelLimits, MAX_CHANNELS};

/// One channel's ring as one rank sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingChannel {
    /// Every rank once, in ring order, starting with the rank itself
    /// (NCCL's `userRanks`).
    pub order: Vec<u32>,
    /// The rank this one receives from.
    pub prev: u32,
    /// The rank this one sends to.
    pub next: u32,
}

/// Joins one channel's intra-host orders into its ring and returns it as
/// `rank` sees it. `hosts[n]` holds host n's ranks in the channel's
/// order: `hosts[n][0]` receives from the last rank of host n−1 and the
/// last rank of host n sends to the first rank of host n+1 (the last host
/// to the first). The ranks must be 0..p−1, each once, and `rank` one of
/// them; otherwise `HCCL_E_PARA` saying what is wrong.
pub fn connect(hosts: &[Vec<u32>], rank: u32) -> Result<RingChannel> {
    let p: usize = hosts.iter().map(Vec::len).sum();
    if let Some(h) = hosts.iter().position(Vec::is_empty) {
        return Err(HcclError::para(format!("host {h} has no rank in the ring")));
    }
    if rank as usize >= p {
        return Err(HcclError::para(format!(
            "rank {rank} is not among the ring's {p} ranks"
        )));
    }
    // next[r], as NCCL's ringNext after connectRings
    let mut next: Vec<Option<u32>> = vec![None; p];
    for (n, order) in hosts.iter().enumerate() {
        let following = &hosts[(n + 1) % hosts.len()];
        for (i, &r) in order.iter().enumerate() {
            let slot = next.get_mut(r as usize).ok_or_else(|| {
                HcclError::para(format!(
                    "rank {r} on host {n} is out of range for a ring of {p} ranks"
                ))
            })?;
            if slot.is_some() {
                return Err(HcclError::para(format!(
                    "rank {r} appears twice in the ring"
                )));
            }
            // the sending rank of host n gives to the receiving rank of host n+1
            *slot = Some(*order.get(i + 1).unwrap_or(&following[0]));
        }
    }
    let mut order = Vec::with_capacity(p);
    let mut r = rank;
    for _ in 0..p {
        order.push(r);
        // every rank has a next: p distinct ranks below p fill all p slots
        r = next[r as usize].unwrap_or(rank);
    }
    Ok(RingChannel {
        next: order.get(1).copied().unwrap_or(rank),
        prev: order[p - 1],
        order,
    })
}

/// The orders of a host's `k` ranks (local indices 0..k) that a
/// communicator's channels use, as many as exist with no two sharing a
/// directed edge, a first rank or a last rank: k orders for even k, k−1
/// for odd k ≥ 3, one for k = 1.
///
/// For k = 2m they are Walecki's zigzag paths of the complete graph on k
/// vertices — path i visits i, i+1, i−1, i+2, i−2, …, i+m (mod k), and the
/// m paths share no edge — each walked forwards and backwards (channel 2i
/// forwards, 2i+1 backwards): the forward walk starts at i and ends at
/// i+m, the backward one the other way round, so first and last ranks are
/// all different. For k = 2m+1 the extra rank 2m is put second in every
/// order of the 2m others: its edges in and out then come from and go to
/// the orders' (distinct) first and second ranks.
pub fn intra_orders(k: u32) -> Vec<Vec<u32>> {
    intra_orders_upto(k, usize::MAX)
}

/// The first `n` of [`intra_orders`]`(k)`, made without the others: a
/// host of k ranks has about k orders of k ranks each, and a communicator
/// keeps at most [`MAX_CHANNELS`] of them (the simulator's one host of
/// 1,024 ranks would otherwise build a million entries per rank).
fn intra_orders_upto(k: u32, n: usize) -> Vec<Vec<u32>> {
    if k <= 2 {
        return match k {
            0 => vec![],
            1 => vec![vec![0]],
            _ => vec![vec![0, 1], vec![1, 0]],
        }
        .into_iter()
        .take(n)
        .collect();
    }
    let even = k - k % 2;
    let m = even / 2;
    let zigzag = |i: u32| -> Vec<u32> {
        let mut v = vec![i];
        for t in 1..m {
            v.push((i + t) % even);
            v.push((i + even - t) % even);
        }
        v.push((i + m) % even);
        v
    };
    let wanted = n.min(even as usize);
    let mut out = Vec::with_capacity(wanted);
    for i in 0..m {
        if out.len() >= wanted {
            break;
        }
        let fwd = zigzag(i);
        let back: Vec<u32> = fwd.iter().rev().copied().collect();
        out.push(fwd);
        out.push(back);
    }
    out.truncate(wanted);
    if k % 2 == 1 {
        for o in &mut out {
            o.insert(1, even);
        }
    }
    out
}

/// A communicator's channels: one ring each, and the groups of channels
/// that must share a stream (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rings {
    /// Per channel, the ring starting at rank 0.
    rings: Vec<Vec<u32>>,
    /// Channels sharing a directed edge, transitively; ascending.
    groups: Vec<Vec<usize>>,
}

impl Rings {
    /// The channels of `topo` within its channel limits
    /// ([`TopoInfo::channels`]).
    ///
    /// Every rank's executor and the selector ask for them, and they
    /// depend only on the rank table and the limits: the last few are
    /// kept ([`RingsCache`]) and shared, so a communicator of p ranks in
    /// one process (the simulator) builds them once, not p times.
    pub fn of(topo: &TopoInfo) -> Result<Arc<Rings>> {
        if let Some(r) = CACHE.get(&topo.rank_to_server, topo.channels) {
            return Ok(r);
        }
        let hosts: Vec<Vec<u32>> = (0..topo.server_num())
            .map(|s| topo.server_ranks(s))
            .collect();
        let rings = Arc::new(Self::new(&hosts, topo.channels)?);
        CACHE.put(&topo.rank_to_server, topo.channels, &rings);
        Ok(rings)
    }

    /// The channels of ranks on `hosts` (each host's ranks, hosts in ring
    /// order) within `limits`: the [`intra_orders`] every host has (as
    /// many as the host with the fewest offers, counting hosts of two or
    /// more ranks, and at most [`MAX_CHANNELS`]), then doubled and limited
    /// as [`ChannelLimits`] says.
    pub fn new(hosts: &[Vec<u32>], limits: ChannelLimits) -> Result<Rings> {
        // NCCL's MAXCHANNELS bounds the channels: a host's orders past it
        // would never be used
        let per_host: Vec<Vec<Vec<u32>>> = hosts
            .iter()
            .map(|h| intra_orders_upto(h.len() as u32, MAX_CHANNELS as usize))
            .collect();
        let base = per_host
            .iter()
            .filter(|o| o.first().is_some_and(|o| o.len() >= 2))
            .map(Vec::len)
            .min()
            .unwrap_or(1);
        let mut rings = Vec::new();
        for c in 0..base {
            let orders: Vec<Vec<u32>> = hosts
                .iter()
                .zip(&per_host)
                .map(|(ranks, orders)| {
                    let o = orders.get(c % orders.len().max(1)).cloned();
                    o.unwrap_or_default()
                        .iter()
                        .map(|&i| ranks[i as usize])
                        .collect()
                })
                .collect();
            rings.push(connect(&orders, 0)?.order);
        }
        // NCCL duplicates the channels (connectRings' channel1) and keeps
        // the first NCCL_MAX_NCHANNELS; then repeats them up to the minimum
        if let Some(max) = limits.max {
            let doubled = (2 * rings.len()).min(MAX_CHANNELS as usize);
            for c in rings.len()..doubled {
                rings.push(rings[c - base].clone());
            }
            rings.truncate(max.max(1) as usize);
        }
        let kept = rings.len();
        for c in kept..(limits.min.min(MAX_CHANNELS) as usize) {
            rings.push(rings[c - kept].clone());
        }
        let groups = Self::group(&rings);
        Ok(Rings { rings, groups })
    }

    /// Channels that send over a common directed edge, joined
    /// transitively (union-find), each group ascending, groups by their
    /// first channel. One group on a single rank (no edges, no streams).
    fn group(rings: &[Vec<u32>]) -> Vec<Vec<usize>> {
        let n = rings.len();
        if rings.first().is_none_or(|r| r.len() <= 1) {
            return vec![(0..n).collect()];
        }
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(parent: &mut [usize], mut c: usize) -> usize {
            while parent[c] != c {
                parent[c] = parent[parent[c]];
                c = parent[c];
            }
            c
        }
        let mut owner: HashMap<(u32, u32), usize> = HashMap::new();
        for (c, ring) in rings.iter().enumerate() {
            for (i, &from) in ring.iter().enumerate() {
                let edge = (from, ring[(i + 1) % ring.len()]);
                let first = *owner.entry(edge).or_insert(c);
                let (a, b) = (root(&mut parent, first), root(&mut parent, c));
                // the lower channel becomes the root: groups sort by it
                parent[a.max(b)] = a.min(b);
            }
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut index: HashMap<usize, usize> = HashMap::new();
        for c in 0..n {
            let r = root(&mut parent, c);
            let g = *index.entry(r).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(c);
        }
        groups
    }

    /// Number of channels.
    pub fn count(&self) -> usize {
        self.rings.len()
    }

    /// Channel `c`'s ring starting at rank 0: the order every rank agrees
    /// on (an executor's sub-communicator of the channel).
    pub fn order(&self, c: usize) -> &[u32] {
        &self.rings[c]
    }

    /// Channel `c`'s ring as `rank` sees it.
    pub fn channel(&self, c: usize, rank: u32) -> RingChannel {
        let ring = &self.rings[c];
        let at = ring.iter().position(|&r| r == rank).unwrap_or(0);
        let p = ring.len();
        RingChannel {
            order: (0..p).map(|i| ring[(at + i) % p]).collect(),
            prev: ring[(at + p - 1) % p],
            next: ring[(at + 1) % p],
        }
    }

    /// The channels that must run on one stream, group after group (see
    /// the module docs): channels of different groups may run in parallel.
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups
    }
}

/// The channels of the last few (rank table, limits) asked for: see
/// [`Rings::of`].
static CACHE: RingsCache = RingsCache {
    entries: Mutex::new(Vec::new()),
};

/// Entries a [`RingsCache`] keeps: a process holds a few communicators
/// (a world, its sub-communicators, a test's several).
const CACHED: usize = 16;

/// Built channels by rank table (compared by content: two communicators
/// over the same hosts share them) and channel limits, the most recently
/// used last.
struct RingsCache {
    entries: Mutex<Vec<CachedRings>>,
}

/// A rank table, the limits, and the channels built for them.
type CachedRings = (Arc<[u32]>, ChannelLimits, Arc<Rings>);

impl RingsCache {
    fn get(&self, table: &Arc<[u32]>, limits: ChannelLimits) -> Option<Arc<Rings>> {
        // a poisoned lock only means a panic elsewhere mid-update of a
        // plain Vec: its entries are still whole
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let at = e
            .iter()
            .rposition(|(t, l, _)| *l == limits && (Arc::ptr_eq(t, table) || **t == **table))?;
        let hit = e.remove(at);
        let rings = hit.2.clone();
        e.push(hit);
        Some(rings)
    }

    fn put(&self, table: &Arc<[u32]>, limits: ChannelLimits, rings: &Arc<Rings>) {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if e.len() >= CACHED {
            e.remove(0);
        }
        e.push((table.clone(), limits, rings.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn topo(sizes: &[u32], limits: ChannelLimits) -> Rings {
        let mut next = 0;
        let hosts: Vec<Vec<u32>> = sizes
            .iter()
            .map(|&k| {
                let h = (next..next + k).collect();
                next += k;
                h
            })
            .collect();
        Rings::new(&hosts, limits).unwrap()
    }

    /// Seed 004's example: two hosts of eight GPUs, host 0's ring
    /// 0 7 6 3 2 5 4 1 and host 1's 10 9 8 13 12 15 14 11.
    #[test]
    fn seed_004_two_hosts_of_eight() {
        let hosts = vec![
            vec![0, 7, 6, 3, 2, 5, 4, 1],
            vec![10, 9, 8, 13, 12, 15, 14, 11],
        ];
        let c = connect(&hosts, 6).unwrap();
        assert_eq!(
            c.order,
            vec![6, 3, 2, 5, 4, 1, 10, 9, 8, 13, 12, 15, 14, 11, 0, 7]
        );
        assert_eq!((c.prev, c.next), (7, 3));
        // the host boundaries: 1 → 10 and 11 → 0
        assert_eq!(connect(&hosts, 1).unwrap().next, 10);
        assert_eq!(connect(&hosts, 10).unwrap().prev, 1);
        assert_eq!(connect(&hosts, 11).unwrap().next, 0);
        assert_eq!(connect(&hosts, 0).unwrap().prev, 11);
    }

    /// Every rank of every channel's ring appears once, and prev/next
    /// agree between neighbours (a's next is b exactly when b's prev is a).
    fn check_consistent(rings: &Rings, p: u32) {
        for c in 0..rings.count() {
            let mut next = vec![u32::MAX; p as usize];
            let mut prev = vec![u32::MAX; p as usize];
            for r in 0..p {
                let ch = rings.channel(c, r);
                assert_eq!(ch.order.len(), p as usize);
                assert_eq!(ch.order[0], r);
                let set: HashSet<u32> = ch.order.iter().copied().collect();
                assert_eq!(set.len(), p as usize, "channel {c}: every rank once");
                assert!(set.iter().all(|&q| q < p));
                next[r as usize] = ch.next;
                prev[r as usize] = ch.prev;
            }
            for r in 0..p {
                assert_eq!(prev[next[r as usize] as usize], r, "channel {c} rank {r}");
            }
        }
    }

    /// NCCL's doubling (any explicit maximum).
    fn doubled() -> ChannelLimits {
        ChannelLimits::new(1, MAX_CHANNELS).unwrap()
    }

    #[test]
    fn uneven_hosts_two_one_three() {
        let rings = topo(&[2, 1, 3], doubled());
        check_consistent(&rings, 6);
        // host 0 offers 2 orders, host 2 offers 2: 2 channels, doubled
        assert_eq!(rings.count(), 4);
        // channel 0: host 0 [0,1], host 1 [2], host 2 [3,5,4]
        assert_eq!(rings.order(0), &[0, 1, 2, 3, 5, 4]);
        // channel 1: host 0 [1,0], host 2 [4,5,3]
        assert_eq!(rings.channel(1, 1).order, vec![1, 0, 2, 4, 5, 3]);
        // different ranks send out of host 0 and into host 2
        assert_ne!(rings.channel(0, 2).prev, rings.channel(1, 2).prev);
        assert_ne!(rings.channel(0, 2).next, rings.channel(1, 2).next);
        // the duplicates share their originals' edges: two groups
        assert_eq!(rings.groups(), &[vec![0, 2], vec![1, 3]]);
        // without a maximum, the two distinct channels alone
        let distinct = topo(&[2, 1, 3], ChannelLimits::default());
        assert_eq!(distinct.count(), 2);
        assert_eq!(distinct.order(1), rings.order(1));
        assert_eq!(distinct.groups(), &[vec![0], vec![1]]);
    }

    /// A host of more ranks than NCCL's MAXCHANNELS offers more orders
    /// than a communicator may use: the first MAX_CHANNELS are kept, the
    /// same as the full set's first ones, and still share no edge.
    #[test]
    fn channels_stop_at_max_channels() {
        let k = 2 * MAX_CHANNELS + 6;
        assert_eq!(intra_orders(k).len(), k as usize);
        let first = intra_orders_upto(k, MAX_CHANNELS as usize);
        assert_eq!(first[..], intra_orders(k)[..MAX_CHANNELS as usize]);
        for limits in [ChannelLimits::default(), doubled()] {
            let rings = topo(&[k, k], limits);
            assert_eq!(rings.count(), MAX_CHANNELS as usize);
            check_consistent(&rings, 2 * k);
            assert_eq!(
                rings.groups().len(),
                MAX_CHANNELS as usize,
                "no shared edge"
            );
        }
        // odd hosts: k−1 orders, the extra rank second in each
        let odd = intra_orders_upto(2 * MAX_CHANNELS + 1, 3);
        assert!(odd.iter().all(|o| o[1] == 2 * MAX_CHANNELS));
    }

    /// Every rank's view of a communicator, and another communicator over
    /// the same hosts, share one built set of channels; other hosts or
    /// limits get their own.
    #[test]
    fn channels_are_built_once_per_rank_table() {
        let map = vec![0, 0, 0, 1, 1, 1, 2];
        let t0 = TopoInfo::new(0, map.clone()).unwrap();
        let a = Rings::of(&t0).unwrap();
        let b = Rings::of(&t0.for_rank(5).unwrap()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let other_comm = TopoInfo::new(3, map.clone()).unwrap();
        assert!(Arc::ptr_eq(&a, &Rings::of(&other_comm).unwrap()));
        let limited = t0.clone().with_channels(ChannelLimits::new(1, 1).unwrap());
        let one = Rings::of(&limited).unwrap();
        assert_eq!(one.count(), 1);
        assert!(a.count() > 1);
        let moved = TopoInfo::new(0, vec![0, 0, 1, 1, 1, 1, 2]).unwrap();
        assert_ne!(*Rings::of(&moved).unwrap(), *a);
        // what the cache returns is what building them gives
        let hosts = vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]];
        assert_eq!(*a, Rings::new(&hosts, ChannelLimits::default()).unwrap());
    }

    #[test]
    fn one_host_and_one_rank_per_host() {
        let one = topo(&[5], doubled());
        check_consistent(&one, 5);
        assert_eq!(one.count(), 8);
        // within one host the ring closes on itself: last → first (an
        // edge another channel's order may use, so the channels may share
        // streams: the multi-ring executors are meant for several hosts)
        assert_eq!(one.order(0), &[0, 4, 1, 3, 2]);
        assert_eq!(one.channel(0, 0).prev, 2);
        let single = topo(&[1, 1, 1], doubled());
        check_consistent(&single, 3);
        // every channel is the same ring 0 → 1 → 2: one group
        assert_eq!(single.count(), 2);
        assert_eq!(single.order(0), &[0, 1, 2]);
        assert_eq!(single.groups(), &[vec![0, 1]]);
        let lone = topo(&[1], ChannelLimits::default());
        assert_eq!(lone.channel(0, 0).order, vec![0]);
        assert_eq!(lone.groups().len(), 1);
    }

    #[test]
    fn intra_orders_are_edge_disjoint_with_distinct_boundaries() {
        for k in 1..=17u32 {
            let orders = intra_orders(k);
            let want = match k {
                1 => 1,
                k if k % 2 == 0 => k,
                k => k - 1,
            };
            assert_eq!(orders.len() as u32, want, "k={k}");
            let mut edges = HashSet::new();
            let (mut firsts, mut lasts) = (HashSet::new(), HashSet::new());
            for o in &orders {
                let mut sorted = o.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..k).collect::<Vec<_>>(), "k={k}: {o:?}");
                for w in o.windows(2) {
                    assert!(edges.insert((w[0], w[1])), "k={k}: edge {w:?} twice");
                }
                assert!(firsts.insert(o[0]), "k={k}: first rank twice");
                assert!(lasts.insert(o[o.len() - 1]), "k={k}: last rank twice");
            }
        }
    }

    /// Channels of different groups never send over the same directed
    /// edge; the distinct channels of even hosts are each their own group.
    #[test]
    fn groups_share_no_directed_edge() {
        for sizes in [
            &[4u32, 4][..],
            &[2, 3],
            &[2, 1, 3],
            &[8, 8],
            &[1, 1, 4],
            &[3, 3, 2],
            &[5, 2, 7],
        ] {
            let rings = topo(sizes, doubled());
            let p = sizes.iter().sum();
            check_consistent(&rings, p);
            let mut owner: HashMap<(u32, u32), usize> = HashMap::new();
            for (g, group) in rings.groups().iter().enumerate() {
                for &c in group {
                    let ring = rings.order(c);
                    for i in 0..ring.len() {
                        let e = (ring[i], ring[(i + 1) % ring.len()]);
                        assert_eq!(*owner.entry(e).or_insert(g), g, "{sizes:?} edge {e:?}");
                    }
                }
            }
        }
        let rings = topo(&[4, 4], doubled());
        assert_eq!(rings.count(), 8);
        assert_eq!(rings.groups().len(), 4);
        assert_eq!(topo(&[4, 4], ChannelLimits::default()).count(), 4);
        // host 0's four channels leave it from four different ranks, and
        // enter host 1 at four different ranks
        let sender = |c: usize| (0..4u32).find(|&r| rings.channel(c, r).next >= 4).unwrap();
        let receiver = |c: usize| rings.channel(c, sender(c)).next;
        assert_eq!((0..4).map(sender).collect::<HashSet<_>>().len(), 4);
        assert_eq!((0..4).map(receiver).collect::<HashSet<_>>().len(), 4);
    }

    /// NCCL's limits: at most `max` (the first channels), then repeated up
    /// to `min`.
    #[test]
    fn limits_keep_the_first_channels_and_repeat_them() {
        let all = topo(&[4, 4], doubled());
        assert_eq!(all.order(4), all.order(0));
        let two = topo(&[4, 4], ChannelLimits::new(1, 2).unwrap());
        assert_eq!(two.count(), 2);
        assert_eq!(two.order(1), all.order(1));
        assert_eq!(two.groups().len(), 2);
        let five = topo(&[4, 4], ChannelLimits::new(5, 2).unwrap());
        assert_eq!(five.count(), 5);
        assert_eq!(five.order(4), all.order(0));
        assert_eq!(five.order(3), all.order(1));
        assert_eq!(five.groups(), &[vec![0, 2, 4], vec![1, 3]]);
        let many = topo(&[4, 4], ChannelLimits::new(32, 32).unwrap());
        assert_eq!(many.count(), 32);
        let one = topo(&[4, 4], ChannelLimits::new(1, 1).unwrap());
        assert_eq!(one.count(), 1);
        assert_eq!(one.groups(), &[vec![0]]);
        // no maximum: the four distinct channels, repeated up to a minimum
        let six = topo(&[4, 4], ChannelLimits { min: 6, max: None });
        assert_eq!(six.count(), 6);
        assert_eq!(six.order(5), all.order(1));
        assert_eq!(six.groups(), &[vec![0, 4], vec![1, 5], vec![2], vec![3]]);
        for (min, max, why) in [(0, 4, "minimum"), (1, 33, "maximum")] {
            let e = ChannelLimits::new(min, max).unwrap_err();
            assert_eq!(e.code(), hccl_platform::HcclResult::EPara);
            assert!(e.to_string().contains(why), "{e}");
            assert!(e.to_string().contains("between 1 and 32"), "{e}");
        }
    }

    #[test]
    fn malformed_host_orders_are_refused() {
        for (hosts, rank, why) in [
            (vec![vec![0, 1], vec![]], 0, "host 1 has no rank"),
            (vec![vec![0, 1], vec![1, 2]], 0, "rank 1 appears twice"),
            (vec![vec![0, 5]], 0, "rank 5 on host 0 is out of range"),
            (vec![vec![0, 1]], 2, "rank 2 is not among"),
        ] {
            let e = connect(&hosts, rank).unwrap_err();
            assert_eq!(e.code(), hccl_platform::HcclResult::EPara);
            assert!(e.to_string().contains(why), "{e}");
        }
    }
}
