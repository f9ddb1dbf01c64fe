//! The parameters of one collective op, as the framework hands them to executors.

use hccl_platform::{DataType, DeviceMem, ReduceOp, Stream};
use std::borrow::Cow;
use std::sync::Arc;

/// The collective being performed (HCCL's `HcclCMDType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpType {
    /// `HCCL_CMD_ALLREDUCE`
    AllReduce,
    /// `HCCL_CMD_ALLGATHER`
    AllGather,
    /// `HCCL_CMD_REDUCE_SCATTER`
    ReduceScatter,
    /// `HCCL_CMD_BROADCAST`
    Broadcast,
    /// `HCCL_CMD_REDUCE`
    Reduce,
    /// `HCCL_CMD_SCATTER`
    Scatter,
    /// `HCCL_CMD_GATHER`
    Gather,
    /// `HCCL_CMD_ALLTOALL`
    AllToAll,
    /// `HCCL_CMD_ALLTOALLV`
    AllToAllV,
    /// `HCCL_CMD_ALLGATHER_V`
    AllGatherV,
    /// `HCCL_CMD_REDUCE_SCATTER_V`
    ReduceScatterV,
    /// `HCCL_CMD_SEND`
    Send,
    /// `HCCL_CMD_RECEIVE`
    Receive,
}

impl OpType {
    /// Every op type, in declaration order (the flight recorder stores an
    /// op as its index here: append, never reorder).
    pub const ALL: [OpType; 13] = [
        OpType::AllReduce,
        OpType::AllGather,
        OpType::ReduceScatter,
        OpType::Broadcast,
        OpType::Reduce,
        OpType::Scatter,
        OpType::Gather,
        OpType::AllToAll,
        OpType::AllToAllV,
        OpType::AllGatherV,
        OpType::ReduceScatterV,
        OpType::Send,
        OpType::Receive,
    ];

    /// How many distinct [`code`](Self::code)s there are (codes are
    /// `0..CODES`).
    pub const CODES: usize = 12;

    /// A numeric code for descriptors; Send and Receive share one, as the
    /// two halves of the same transfer.
    pub const fn code(self) -> u32 {
        match self {
            OpType::AllReduce => 0,
            OpType::AllGather => 1,
            OpType::ReduceScatter => 2,
            OpType::Broadcast => 3,
            OpType::Reduce => 4,
            OpType::Scatter => 5,
            OpType::Gather => 6,
            OpType::AllToAll => 7,
            OpType::Send | OpType::Receive => 8,
            OpType::AllToAllV => 9,
            OpType::AllGatherV => 10,
            OpType::ReduceScatterV => 11,
        }
    }

    /// Whether the op reduces (AllReduce, Reduce, ReduceScatter(V)): only
    /// these need a reducible data type ([`DataType::is_reducible`]).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            OpType::AllReduce | OpType::Reduce | OpType::ReduceScatter | OpType::ReduceScatterV
        )
    }

    /// Whether the op has a root (Broadcast, Reduce, Scatter, Gather).
    pub const fn rooted(self) -> bool {
        matches!(
            self,
            OpType::Broadcast | OpType::Reduce | OpType::Scatter | OpType::Gather
        )
    }

    /// Whether the op is one half of a point-to-point transfer (Send,
    /// Receive): it has a peer.
    pub const fn point_to_point(self) -> bool {
        matches!(self, OpType::Send | OpType::Receive)
    }

    /// Refuses `dtype` for this op when the op reduces and the type cannot
    /// be reduced (HCCL's FP8 formats): `HCCL_E_NOT_SUPPORT`, as HCCL's
    /// `CheckDataType` returns, naming the type and the op.
    pub fn check_dtype(self, dtype: DataType) -> hccl_platform::Result<()> {
        if !self.reduces() || dtype.is_reducible() {
            return Ok(());
        }
        let supported: Vec<&str> = DataType::reducible().map(|d| d.name()).collect();
        Err(hccl_platform::HcclError::not_support(format!(
            "data type {dtype} ({} = {}) is not supported by {} (a reducing op): HCCL only \
             moves it (AllGather, Broadcast, AllToAll, Scatter, Gather, Send/Recv); reducing \
             ops support {}",
            dtype.hccl_name(),
            dtype.code(),
            self.name(),
            supported.join(", ")
        )))
    }

    /// The op's name as HCCL_ALGO and tags spell it (`allreduce`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            OpType::AllReduce => "allreduce",
            OpType::AllGather => "allgather",
            OpType::ReduceScatter => "reducescatter",
            OpType::Broadcast => "broadcast",
            OpType::Reduce => "reduce",
            OpType::Scatter => "scatter",
            OpType::Gather => "gather",
            OpType::AllToAll => "alltoall",
            OpType::AllToAllV => "alltoallv",
            OpType::AllGatherV => "allgatherv",
            OpType::ReduceScatterV => "reducescatterv",
            OpType::Send => "send",
            OpType::Receive => "receive",
        }
    }
}

impl OpType {
    /// HCCL's name of the op as executor names, timelines and dumps spell
    /// it (`AllReduce`, ...).
    pub const fn hccl_name(self) -> &'static str {
        match self {
            OpType::AllReduce => "AllReduce",
            OpType::AllGather => "AllGather",
            OpType::ReduceScatter => "ReduceScatter",
            OpType::Broadcast => "Broadcast",
            OpType::Reduce => "Reduce",
            OpType::Scatter => "Scatter",
            OpType::Gather => "Gather",
            OpType::AllToAll => "AllToAll",
            OpType::AllToAllV => "AllToAllV",
            OpType::AllGatherV => "AllGatherV",
            OpType::ReduceScatterV => "ReduceScatterV",
            OpType::Send => "Send",
            OpType::Receive => "Receive",
        }
    }
}

impl std::fmt::Display for OpType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How user data meets the algorithm (HCCL's `HcclWorkflowMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkflowMode {
    /// Graph mode: the algorithm runs directly on registered user memory.
    Graph,
    /// Op-base mode: user data is staged through the CCL buffers in chunks.
    OpBase,
}

/// Everything an executor needs to know about one op call.
///
/// The stream and the buffers are borrowed from the caller where it can
/// (the adapter's per-call path: no reference counts touched per op) or
/// owned ([`OpParam::new`]); either way they read as `&Stream` and
/// `&DeviceMem` through `Deref`.
#[derive(Clone, Debug)]
pub struct OpParam<'a> {
    /// The op tag: names the op for resource caching and error messages.
    /// Shared, so a caller that repeats an op hands the same tag again
    /// without building a string per call, and borrowed where it can (no
    /// reference count per call).
    pub tag: Cow<'a, Arc<str>>,
    /// Which collective.
    pub op_type: OpType,
    /// The master stream the op is enqueued on.
    pub stream: Cow<'a, Stream>,
    /// The user's input memory (the whole op).
    pub input: Cow<'a, DeviceMem>,
    /// The user's output memory (the whole op).
    pub output: Cow<'a, DeviceMem>,
    /// Element count (per rank, as HCCL's API counts it for the op).
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction (reducing ops only).
    pub reduce_op: ReduceOp,
    /// Root rank (rooted ops only).
    pub root: u32,
    /// Op-base or graph mode.
    pub mode: WorkflowMode,
    /// Per-peer send counts and displacements, elements (AllToAllV,
    /// ReduceScatterV).
    pub send_v: Option<VCounts>,
    /// Per-peer receive counts and displacements, elements (AllToAllV,
    /// AllGatherV).
    pub recv_v: Option<VCounts>,
    /// The peer of a Send (destination) or Receive (source).
    pub peer: u32,
}

/// Per-rank element counts and displacements of a "V" collective.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VCounts {
    /// Elements per rank.
    pub counts: Vec<u64>,
    /// Element offset of each rank's block.
    pub displs: Vec<u64>,
}

impl VCounts {
    /// Counts laid out back to back.
    pub fn packed(counts: Vec<u64>) -> Self {
        let mut displs = Vec::with_capacity(counts.len());
        let mut off = 0;
        for c in &counts {
            displs.push(off);
            off += c;
        }
        VCounts { counts, displs }
    }

    /// Elements needed to hold every block (max of displ + count).
    pub fn extent(&self) -> u64 {
        self.counts
            .iter()
            .zip(&self.displs)
            .map(|(c, d)| c + d)
            .max()
            .unwrap_or(0)
    }
}

impl OpParam<'_> {
    /// The descriptor ranks compare before running this op: fields that
    /// legitimately differ between ranks (a V op's own count, an AllToAllV's
    /// row of counts, the peer of a send/receive) are left out. The
    /// per-rank counts every rank of an AllGatherV or ReduceScatterV passes
    /// whole must agree, so they are compared by digest.
    pub fn descriptor(&self, buffer: u64) -> hccl_platform::OpDesc {
        let count = match self.op_type {
            OpType::AllToAllV => 0,
            OpType::AllGatherV | OpType::ReduceScatterV => self
                .shared_counts()
                .map_or(0, hccl_platform::OpDesc::counts_digest),
            _ => self.count,
        };
        let rooted = self.op_type.rooted();
        let reducing = self.op_type.reduces();
        // a send and its receive carry different tags (each names its peer)
        let tag = if matches!(self.op_type, OpType::Send | OpType::Receive) {
            0
        } else {
            hccl_platform::OpDesc::tag_hash(&self.tag)
        };
        hccl_platform::OpDesc {
            op: self.op_type.code(),
            dtype: self.dtype.code(),
            reduce: if reducing { self.reduce_op.code() } else { 0 },
            root: if rooted { self.root } else { 0 },
            count,
            buffer,
            tag,
            mem: Default::default(),
        }
    }

    /// Every rank's count of an AllGatherV (its recvCounts) or a
    /// ReduceScatterV (its sendCounts): the same on every rank, unlike
    /// AllToAllV's, whose counts are this rank's row alone.
    pub fn shared_counts(&self) -> Option<&[u64]> {
        match self.op_type {
            OpType::AllGatherV => self.recv_v.as_ref().map(|v| &v.counts[..]),
            OpType::ReduceScatterV => self.send_v.as_ref().map(|v| &v.counts[..]),
            _ => None,
        }
    }

    /// Input size in bytes (`count × dtype size`).
    pub fn input_bytes(&self) -> u64 {
        self.count * self.dtype.size() as u64
    }
}

/// The last descriptor an op computed, kept with what it was computed
/// from: a repeated op (same tag object, same shape) reuses it instead of
/// hashing its tag again, a multiply per tag byte on the per-op path.
#[derive(Debug, Default)]
pub struct DescriptorCache {
    last: Option<(Arc<str>, DescKey, hccl_platform::OpDesc)>,
}

/// The fields of an [`OpParam`] a descriptor is computed from, besides
/// the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DescKey {
    op_type: OpType,
    count: u64,
    dtype: DataType,
    reduce_op: ReduceOp,
    root: u32,
    buffer: u64,
}

impl DescriptorCache {
    /// `param.descriptor(buffer)`, from the cache when `param` repeats the
    /// last op (its tag is the same object: the adapter hands the same
    /// tag for every call of one op kind).
    pub fn get(&mut self, param: &OpParam<'_>, buffer: u64) -> hccl_platform::OpDesc {
        // a digest of per-rank counts is not in the key: computed afresh
        if param.shared_counts().is_some() {
            return param.descriptor(buffer);
        }
        let key = DescKey {
            op_type: param.op_type,
            count: param.count,
            dtype: param.dtype,
            reduce_op: param.reduce_op,
            root: param.root,
            buffer,
        };
        match &self.last {
            Some((tag, k, desc)) if *k == key && Arc::ptr_eq(tag, &param.tag) => *desc,
            _ => {
                let desc = param.descriptor(buffer);
                self.last = Some((Arc::clone(&param.tag), key, desc));
                desc
            }
        }
    }
}

impl OpParam<'static> {
    /// A parameter set with no V counts and no peer, owning its stream and
    /// buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tag: impl Into<Arc<str>>,
        op_type: OpType,
        stream: Stream,
        input: DeviceMem,
        output: DeviceMem,
        count: u64,
        dtype: DataType,
        reduce_op: ReduceOp,
        root: u32,
    ) -> Self {
        OpParam {
            tag: Cow::Owned(tag.into()),
            op_type,
            stream: Cow::Owned(stream),
            input: Cow::Owned(input),
            output: Cow::Owned(output),
            count,
            dtype,
            reduce_op,
            root,
            mode: WorkflowMode::OpBase,
            send_v: None,
            recv_v: None,
            peer: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_lie_below_codes_and_cover_it() {
        use OpType::*;
        let all = [
            AllReduce,
            AllGather,
            ReduceScatter,
            Broadcast,
            Reduce,
            Scatter,
            Gather,
            AllToAll,
            AllToAllV,
            AllGatherV,
            ReduceScatterV,
            Send,
            Receive,
        ];
        let mut seen = [false; OpType::CODES];
        for op in all {
            seen[op.code() as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "a code below CODES is unused");
    }
}
