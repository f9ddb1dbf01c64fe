//! Topology as the algorithm layer sees it: ranks, servers (hosts), levels.

use hccl_platform::LinkHandle;
use hccl_platform::{HcclError, Result};
use std::sync::Arc;

/// Most channels a communicator uses (NCCL's `MAXCHANNELS` before 2.12).
pub const MAX_CHANNELS: u32 = 32;

/// How many channels a communicator may use (`HCCL_RS_MIN_CHANNELS`,
/// `HCCL_RS_MAX_CHANNELS`).
///
/// With a maximum, NCCL's rule: the distinct channels doubled (each
/// duplicate after all originals), the first `max` of them kept, then
/// repeated until there are at least `min` (so `min > max` means "the
/// first `max` channels, repeated"). Without one (the default) the
/// distinct channels are not doubled: a duplicate shares every directed
/// edge with its original, hence its stream, so on CPUs it adds a round
/// of handshakes per round without adding parallelism (measured slower
/// at every size, by half at 1 MiB, docs/performance.md); `min` still
/// repeats them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelLimits {
    /// At least this many channels (repeating the first ones).
    pub min: u32,
    /// At most this many channels of the doubled set; `None`: the
    /// distinct channels, not doubled.
    pub max: Option<u32>,
}

impl Default for ChannelLimits {
    /// The distinct channels, neither doubled nor repeated.
    fn default() -> Self {
        ChannelLimits { min: 1, max: None }
    }
}

impl ChannelLimits {
    /// Limits of `min` and `max` channels (NCCL's rule), each between 1
    /// and [`MAX_CHANNELS`].
    pub fn new(min: u32, max: u32) -> Result<Self> {
        for (what, v) in [("minimum", min), ("maximum", max)] {
            if !(1..=MAX_CHANNELS).contains(&v) {
                return Err(HcclError::para(format!(
                    "the {what} channel count must be between 1 and {MAX_CHANNELS}, not {v}"
                )));
            }
        }
        Ok(ChannelLimits {
            min,
            max: Some(max),
        })
    }
}

/// A communication plane (HCCL's `CommPlane`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CommPlane {
    /// Ranks of one server (intra-host).
    Level0 = 0,
    /// Ranks with the same local index across servers (inter-host).
    Level1 = 1,
    /// Across super-pods.
    Level2 = 2,
    /// Every rank of the communicator as one flat group.
    Combine = 3,
}

impl CommPlane {
    /// Number of planes.
    pub const COUNT: usize = 4;
}

/// The communicator's topology, from one rank's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopoInfo {
    /// This rank.
    pub user_rank: u32,
    /// Ranks in the communicator.
    pub user_rank_size: u32,
    /// Server (host) index of every rank, shared by every rank's view of
    /// one communicator: a copy per rank would be O(p²) for p ranks in one
    /// process (the simulator: 17 GB at 16,384 ranks).
    pub rank_to_server: Arc<[u32]>,
    /// How many channels (rings) the multi-ring executors may use
    /// (`HCCL_RS_MIN_CHANNELS` / `HCCL_RS_MAX_CHANNELS`; see
    /// [`crate::rings`]). The same on every rank of a communicator.
    pub channels: ChannelLimits,
    /// 0..p, the flat plane's rank list, shared like `rank_to_server`.
    all_ranks: Arc<[u32]>,
}

impl TopoInfo {
    /// A topology where every rank is on one server.
    pub fn single_server(user_rank: u32, user_rank_size: u32) -> Result<TopoInfo> {
        Self::new(user_rank, vec![0; user_rank_size as usize])
    }

    /// A topology from each rank's server index. Servers must be numbered
    /// 0..n without gaps.
    pub fn new(user_rank: u32, rank_to_server: Vec<u32>) -> Result<TopoInfo> {
        Self::shared(user_rank, rank_to_server.into())
    }

    /// [`TopoInfo::new`] over a table other ranks' views may share.
    pub fn shared(user_rank: u32, rank_to_server: Arc<[u32]>) -> Result<TopoInfo> {
        let size = rank_to_server.len() as u32;
        if size == 0 {
            return Err(HcclError::para("a topology needs at least one rank"));
        }
        // one pass: testing each server index with `contains` was
        // O(servers × p)
        let servers = rank_to_server.iter().max().map_or(0, |m| m + 1);
        let mut seen = vec![false; servers as usize];
        for &s in rank_to_server.iter() {
            seen[s as usize] = true;
        }
        if let Some(s) = seen.iter().position(|&x| !x) {
            return Err(HcclError::para(format!("server index {s} has no rank")));
        }
        TopoInfo {
            user_rank: 0,
            user_rank_size: size,
            rank_to_server,
            channels: ChannelLimits::default(),
            all_ranks: (0..size).collect(),
        }
        .for_rank(user_rank)
    }

    /// The same communicator seen from `user_rank`: the rank table is
    /// shared, not copied or checked again (O(1)).
    pub fn for_rank(&self, user_rank: u32) -> Result<TopoInfo> {
        if user_rank >= self.user_rank_size {
            return Err(HcclError::para(format!(
                "rank {user_rank} is out of range for {} ranks",
                self.user_rank_size
            )));
        }
        Ok(TopoInfo {
            user_rank,
            rank_to_server: Arc::clone(&self.rank_to_server),
            all_ranks: Arc::clone(&self.all_ranks),
            ..*self
        })
    }

    /// Every rank in order (the [`CommPlane::Combine`] group), shared by
    /// every view of this communicator rather than made per call.
    pub fn flat_ranks(&self) -> Arc<[u32]> {
        Arc::clone(&self.all_ranks)
    }

    /// The same topology with the multi-channel executors limited to
    /// `channels`.
    pub fn with_channels(self, channels: ChannelLimits) -> TopoInfo {
        TopoInfo { channels, ..self }
    }

    /// Number of servers.
    pub fn server_num(&self) -> u32 {
        self.rank_to_server.iter().max().map_or(0, |m| m + 1)
    }

    /// This rank's server.
    pub fn server_index(&self) -> u32 {
        self.rank_to_server[self.user_rank as usize]
    }

    /// User ranks of server `server`, ascending.
    pub fn server_ranks(&self, server: u32) -> Vec<u32> {
        (0..self.user_rank_size)
            .filter(|&r| self.rank_to_server[r as usize] == server)
            .collect()
    }

    /// The user ranks of this rank's group on `plane`, in sub-comm rank order.
    pub fn plane_ranks(&self, plane: CommPlane) -> Vec<u32> {
        match plane {
            CommPlane::Combine | CommPlane::Level2 => (0..self.user_rank_size).collect(),
            CommPlane::Level0 => self.server_ranks(self.server_index()),
            CommPlane::Level1 => {
                let local = self
                    .server_ranks(self.server_index())
                    .iter()
                    .position(|&r| r == self.user_rank)
                    .unwrap_or(0);
                (0..self.server_num())
                    .filter_map(|s| self.server_ranks(s).get(local).copied())
                    .collect()
            }
        }
    }
}

/// One rank's view of a sub-communicator: its index, the group size, and
/// the established links by sub-comm rank (only the peers it asked a link
/// to: a p-entry table per rank is O(p²) for a simulation of p ranks).
#[derive(Clone, Debug)]
pub struct SubCommInfo {
    /// This rank's index in the sub-communicator.
    pub local_rank: u32,
    /// Number of ranks in the sub-communicator.
    pub local_rank_size: u32,
    /// Links as (sub-comm rank, link), ascending by sub-comm rank.
    pub links: Vec<(u32, LinkHandle)>,
}

impl SubCommInfo {
    /// The link to sub-comm rank `r`, or an internal error naming it.
    pub fn link(&self, r: u32) -> Result<&LinkHandle> {
        self.links
            .binary_search_by_key(&r, |(q, _)| *q)
            .map(|i| &self.links[i].1)
            .map_err(|_| {
                HcclError::internal(format!(
                    "no link from sub-comm rank {} to sub-comm rank {r} was granted",
                    self.local_rank
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_of_uneven_servers() {
        // servers: {0,1}, {2,3,4}
        let t = TopoInfo::new(3, vec![0, 0, 1, 1, 1]).unwrap();
        assert_eq!(t.server_num(), 2);
        assert_eq!(t.plane_ranks(CommPlane::Level0), vec![2, 3, 4]);
        assert_eq!(t.plane_ranks(CommPlane::Level1), vec![1, 3]);
        assert_eq!(t.plane_ranks(CommPlane::Combine), vec![0, 1, 2, 3, 4]);
        let t = TopoInfo::new(4, vec![0, 0, 1, 1, 1]).unwrap();
        assert_eq!(t.plane_ranks(CommPlane::Level1), vec![4]);
    }

    #[test]
    fn bad_topologies() {
        assert!(TopoInfo::new(2, vec![0, 0]).is_err());
        assert!(TopoInfo::new(0, vec![]).is_err());
        let e = TopoInfo::new(0, vec![0, 2]).unwrap_err();
        assert!(e.to_string().contains("server index 1 has no rank"), "{e}");
        let e = TopoInfo::new(0, vec![3, 0, 1]).unwrap_err();
        assert!(e.to_string().contains("server index 2 has no rank"), "{e}");
    }

    #[test]
    fn views_share_one_table() {
        let t = TopoInfo::new(0, vec![0, 0, 1]).unwrap();
        let u = t.for_rank(2).unwrap();
        assert!(Arc::ptr_eq(&t.rank_to_server, &u.rank_to_server));
        assert!(Arc::ptr_eq(&t.flat_ranks(), &u.flat_ranks()));
        assert_eq!(*u.flat_ranks(), u.plane_ranks(CommPlane::Combine)[..]);
        assert_eq!(u, TopoInfo::new(2, vec![0, 0, 1]).unwrap());
        assert_eq!(u.server_index(), 1);
        assert!(t.for_rank(3).is_err());
    }
}
