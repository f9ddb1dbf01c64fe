//! The library's own ops on a communicator: exchanges of small fixed-size
//! records (registration handles, window sizes, statuses) among all ranks
//! or with chosen peers. They run on a stream of their own, with named
//! executors — not the user's selection: `HCCL_RS_EXECUTOR` may force an
//! executor that does not serve them — and are synchronized before the
//! call returns.

use crate::communicator::Communicator;
use hccl_algorithm::{OpParam, OpType};
use hccl_platform::{DataType, DeviceMem, HcclError, ReduceOp, Result};

impl Communicator {
    /// Every rank's `record` (one length on every rank), in rank order:
    /// an AllGather through the communicator itself.
    pub(crate) fn all_gather_records(&self, what: &str, record: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (n, p) = (record.len(), self.size() as usize);
        let stream = self.create_stream();
        let input = DeviceMem::alloc(n)?;
        input.copy_from_host_bytes(record)?;
        let output = DeviceMem::alloc(n * p)?;
        let param = OpParam::new(
            format!("{what}_{}", self.name()),
            OpType::AllGather,
            stream.clone(),
            input,
            output.clone(),
            n as u64,
            DataType::Uint8,
            ReduceOp::Sum,
            0,
        );
        self.exec_internal(&param, "AllGatherMeshExecutor")?;
        stream.synchronize()?;
        let mut all = vec![0u8; n * p];
        output.copy_to_host_bytes(&mut all)?;
        Ok(all.chunks(n.max(1)).map(<[u8]>::to_vec).collect())
    }

    /// `record` sent to each of `peers` and each one's received, in the
    /// order of `peers` (every peer must call this with this rank among
    /// its peers and a record of the same length). The sends run on one
    /// stream and the receives on another, each in ascending peer order,
    /// so any set of mutual pairs completes.
    pub(crate) fn exchange_records(
        &self,
        what: &str,
        record: &[u8],
        peers: &[u32],
    ) -> Result<Vec<Vec<u8>>> {
        let n = record.len();
        let (sends, recvs) = (self.create_stream(), self.create_stream());
        let mine = DeviceMem::alloc(n)?;
        mine.copy_from_host_bytes(record)?;
        let mut order: Vec<u32> = peers.to_vec();
        order.sort_unstable();
        let mut theirs = Vec::with_capacity(order.len());
        let op = |op_type: OpType, peer: u32, input: DeviceMem, output: DeviceMem| {
            let stream = if op_type == OpType::Send {
                &sends
            } else {
                &recvs
            };
            let mut p = OpParam::new(
                format!("{what}_{}_{}_{peer}", self.name(), op_type.name()),
                op_type,
                stream.clone(),
                input,
                output,
                n as u64,
                DataType::Uint8,
                ReduceOp::Sum,
                0,
            );
            p.peer = peer;
            let executor = if op_type == OpType::Send {
                "SendExecutor"
            } else {
                "ReceiveExecutor"
            };
            self.exec_internal(&p, executor)
        };
        for &q in &order {
            let buf = DeviceMem::alloc(n)?;
            op(OpType::Receive, q, DeviceMem::null(), buf.clone())?;
            theirs.push((q, buf));
        }
        for &q in &order {
            op(OpType::Send, q, mine.clone(), DeviceMem::null())?;
        }
        let sent = sends.synchronize();
        let received = recvs.synchronize();
        sent.and(received)?;
        peers
            .iter()
            .map(|q| {
                let (_, buf) = theirs
                    .iter()
                    .find(|(r, _)| r == q)
                    .ok_or_else(|| HcclError::internal("a peer's record is missing"))?;
                let mut b = vec![0u8; n];
                buf.copy_to_host_bytes(&mut b)?;
                Ok(b)
            })
            .collect()
    }
}
