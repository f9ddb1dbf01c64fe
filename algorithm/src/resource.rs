//! What an executor asks for, and what the framework grants.
//!
//! The shapes follow HCCL's: an [`AlgResourceRequest`] lists scratch bytes,
//! slave streams, notifies and, per communication plane, the links wanted
//! (peer pairs and which of the peer's buffers each link must address). The
//! framework answers with an [`AlgResourceResponse`] holding the memories,
//! streams, notifies and the established links in the same shape.

use crate::topo::{CommPlane, SubCommInfo};
use hccl_platform::{DeviceMem, HcclError, LinkHandle, MemKind, Notify, Result, Stream};
use std::sync::Arc;

/// One wanted link (HCCL's `TransportRequest`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TransportRequest {
    /// Whether the request is in use.
    pub is_valid: bool,
    /// This rank (user rank).
    pub local_user_rank: u32,
    /// The peer (user rank).
    pub remote_user_rank: u32,
    /// The peer's rank in the sub-communicator.
    pub remote_sub_rank: u32,
    /// Which peer buffer the link's "input" side addresses.
    pub input_mem_type: MemKind,
    /// Which peer buffer the link's "output" side addresses.
    pub output_mem_type: MemKind,
    /// Whether RDMA is wanted (ignored on CPU transports).
    pub is_used_rdma: bool,
    /// Extra notifies on the link.
    pub notify_num: u32,
}

/// The links of one sub-communicator (HCCL's `SingleSubCommTransport`).
///
/// Unlike HCCL's, the requests list only the peers wanted, not an entry
/// per sub-comm rank, and the rank list is shared: a rank of a p-rank
/// communicator asks for O(log p) links in the NHR, NB and RHD plans, and
/// p-entry tables per rank made a simulation of p ranks O(p²) (the
/// simulator at 65,536 ranks: 4.3 G entries).
#[derive(Clone, Debug, Default)]
pub struct SingleSubCommTransport {
    /// Wanted links, one per peer asked for, ascending by sub-comm rank
    /// ([`TransportRequest::remote_sub_rank`]).
    pub transport_requests: Vec<TransportRequest>,
    /// Established links, filled by the framework, indexed like the requests.
    pub links: Vec<Option<LinkHandle>>,
    /// User rank of each sub-comm rank.
    pub sub_comm_rank_to_user_rank: Arc<[u32]>,
    /// This rank's index in the sub-communicator.
    pub local_rank: u32,
}

impl SingleSubCommTransport {
    /// Requests links from `me` to the sub-comm peers `wanted` (sub-comm
    /// ranks) of the group `ranks` (user ranks in sub-comm order). Peers
    /// out of range, repeated, or `me` itself are not asked for.
    pub fn new(
        ranks: impl Into<Arc<[u32]>>,
        me: u32,
        wanted: &[u32],
        input_mem_type: MemKind,
        output_mem_type: MemKind,
    ) -> Result<Self> {
        let ranks: Arc<[u32]> = ranks.into();
        // O(1) where sub-comm ranks are user ranks (the flat plane)
        let local_rank = if ranks.get(me as usize) == Some(&me) {
            Some(me as usize)
        } else {
            ranks.iter().position(|&r| r == me)
        }
        .ok_or_else(|| {
            HcclError::internal(format!(
                "rank {me} is not in its own sub-communicator {ranks:?}"
            ))
        })? as u32;
        let mut peers: Vec<u32> = wanted
            .iter()
            .copied()
            .filter(|&i| (i as usize) < ranks.len() && ranks[i as usize] != me)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let transport_requests: Vec<TransportRequest> = peers
            .into_iter()
            .map(|i| TransportRequest {
                is_valid: true,
                local_user_rank: me,
                remote_user_rank: ranks[i as usize],
                remote_sub_rank: i,
                input_mem_type,
                output_mem_type,
                is_used_rdma: false,
                notify_num: 0,
            })
            .collect();
        Ok(SingleSubCommTransport {
            links: vec![None; transport_requests.len()],
            transport_requests,
            sub_comm_rank_to_user_rank: ranks,
            local_rank,
        })
    }

    /// Links to the ring neighbours (left and right) of `me` in `ranks`.
    pub fn ring(
        ranks: impl Into<Arc<[u32]>>,
        me: u32,
        input: MemKind,
        output: MemKind,
    ) -> Result<Self> {
        let ranks: Arc<[u32]> = ranks.into();
        let n = ranks.len() as u32;
        let pos = ranks.iter().position(|&r| r == me).unwrap_or(0) as u32;
        let wanted = [(pos + n - 1) % n.max(1), (pos + 1) % n.max(1)];
        Self::new(ranks, me, &wanted, input, output)
    }

    /// Links to every other rank of `ranks`.
    pub fn mesh(
        ranks: impl Into<Arc<[u32]>>,
        me: u32,
        input: MemKind,
        output: MemKind,
    ) -> Result<Self> {
        let ranks: Arc<[u32]> = ranks.into();
        let all: Vec<u32> = (0..ranks.len() as u32).collect();
        Self::new(ranks, me, &all, input, output)
    }

    /// This sub-communicator as an executor uses it.
    pub fn info(&self) -> SubCommInfo {
        SubCommInfo {
            local_rank: self.local_rank,
            local_rank_size: self.sub_comm_rank_to_user_rank.len() as u32,
            links: self
                .transport_requests
                .iter()
                .zip(&self.links)
                .filter_map(|(t, l)| Some((t.remote_sub_rank, l.clone()?)))
                .collect(),
        }
    }
}

/// All sub-communicators of one plane (HCCL's `LevelNSubCommTransport`).
pub type LevelNSubCommTransport = Vec<SingleSubCommTransport>;

/// Sub-communicators per plane, indexed by [`CommPlane`] (HCCL's `OpCommTransport`).
pub type OpCommTransport = [LevelNSubCommTransport; CommPlane::COUNT];

/// What an executor needs for an op (HCCL's `AlgResourceRequest`).
#[derive(Clone, Debug, Default)]
pub struct AlgResourceRequest {
    /// Scratch memory, bytes.
    pub scratch_mem_size: u64,
    /// Slave streams besides the master stream.
    pub stream_num: u32,
    /// Notifies for master/slave synchronisation (split into main and aux).
    pub notify_num: u32,
    /// AIV buffers (device-only; ignored on CPUs).
    pub need_aiv_buffer: bool,
    /// Links wanted per plane.
    pub op_transport: OpCommTransport,
}

/// What the framework granted (HCCL's `AlgResourceResponse`).
#[derive(Clone, Debug)]
pub struct AlgResourceResponse {
    /// The communicator's CCL input buffer.
    pub ccl_input: DeviceMem,
    /// The communicator's CCL output buffer.
    pub ccl_output: DeviceMem,
    /// The op's input (user) memory.
    pub param_input: DeviceMem,
    /// The op's output (user) memory.
    pub param_output: DeviceMem,
    /// Scratch memory (`scratch_mem_size` bytes).
    pub scratch: DeviceMem,
    /// AIV input (empty on CPUs).
    pub aiv_input: DeviceMem,
    /// AIV output (empty on CPUs).
    pub aiv_output: DeviceMem,
    /// Slave streams.
    pub slave_streams: Vec<Stream>,
    /// Notifies the master records and slaves wait on.
    pub notifies_main: Vec<Notify>,
    /// Notifies slaves record and the master waits on.
    pub notifies_aux: Vec<Notify>,
    /// The requested sub-communicators with their links established.
    pub op_transport: OpCommTransport,
}

impl AlgResourceResponse {
    /// Sub-communicator `index` of `plane`, or an internal error.
    pub fn sub_comm(&self, plane: CommPlane, index: usize) -> Result<SubCommInfo> {
        self.op_transport[plane as usize]
            .get(index)
            .map(SingleSubCommTransport::info)
            .ok_or_else(|| {
                HcclError::internal(format!(
                    "no sub-communicator {index} on plane {plane:?} was granted"
                ))
            })
    }
}
