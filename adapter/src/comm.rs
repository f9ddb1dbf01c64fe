//! [`HcclComm`]: a rank's communicator with the op-base collective calls.

use crate::validate;
use hccl_algorithm::{OpParam, OpType, WorkflowMode};
use hccl_framework::{CommConfig, Communicator, InProcGroup};
use hccl_platform::{
    DataType, Device, DeviceBuffer, DeviceMem, Element, HcclError, ReduceOp, Result, Stream,
};
use std::sync::Arc;

/// One rank's communicator.
#[derive(Debug)]
pub struct HcclComm {
    inner: Communicator,
    allreduce_tag: String,
}

impl HcclComm {
    fn wrap(inner: Communicator) -> HcclComm {
        let allreduce_tag = format!("AllReduce_{}", inner.name());
        HcclComm {
            inner,
            allreduce_tag,
        }
    }

    /// `n` ranks in this process, configured from the environment
    /// (HCCL's `HcclCommInitAll`). Rank i is at index i.
    pub fn init_all(n: u32) -> Result<Vec<HcclComm>> {
        Self::init_all_with(n, CommConfig::from_env()?)
    }

    /// `n` ranks in this process with an explicit configuration.
    pub fn init_all_with(n: u32, config: CommConfig) -> Result<Vec<HcclComm>> {
        Ok(Communicator::init_all(n, config)?
            .into_iter()
            .map(Self::wrap)
            .collect())
    }

    /// Joins `group` as `rank` (for ranks that are threads each creating its
    /// own communicator).
    pub fn join(group: &Arc<InProcGroup>, rank: u32) -> Result<HcclComm> {
        Ok(Self::wrap(group.join(rank)?))
    }

    /// This rank (HCCL's `HcclGetRankId`).
    pub fn rank(&self) -> u32 {
        self.inner.rank()
    }

    /// Number of ranks (HCCL's `HcclGetRankSize`).
    pub fn size(&self) -> u32 {
        self.inner.size()
    }

    /// The communicator name (HCCL's `HcclGetCommName`).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The rank's device.
    pub fn device(&self) -> &Device {
        self.inner.device()
    }

    /// A new stream on this rank's device.
    pub fn create_stream(&self) -> Stream {
        self.inner.create_stream()
    }

    /// The framework communicator underneath.
    pub fn communicator(&self) -> &Communicator {
        &self.inner
    }

    /// AllReduce of `send` into `recv` (whole `send`; `recv` at least as long).
    pub fn all_reduce<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.all_reduce_raw(
            send.mem(),
            recv.mem(),
            send.len() as u64,
            T::DTYPE,
            op,
            stream,
        )
    }

    /// In-place AllReduce of `buf`.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.all_reduce_raw(buf.mem(), buf.mem(), buf.len() as u64, T::DTYPE, op, stream)
    }

    /// Untyped AllReduce (HCCL's `HcclAllReduce`): `count` elements of
    /// `dtype` from `send` into `recv`. `send` and `recv` may be the same
    /// memory (in place) but must not partly overlap.
    pub fn all_reduce_raw(
        &self,
        send: &DeviceMem,
        recv: &DeviceMem,
        count: u64,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let ctx = |e: HcclError| {
            e.rank(self.rank())
                .tag(self.allreduce_tag.clone())
                .during("HcclAllReduce")
        };
        let bytes = validate::bytes_of(count, dtype).map_err(ctx)?;
        if count == 0 {
            return Ok(());
        }
        validate::buffer("sendBuf", send, bytes, count, dtype).map_err(ctx)?;
        validate::buffer("recvBuf", recv, bytes, count, dtype).map_err(ctx)?;
        let (send, recv) = (send.range(0, bytes)?, recv.range(0, bytes)?);
        if send.overlaps(&recv) && !send.same_range(&recv) {
            return Err(ctx(HcclError::para("sendBuf and recvBuf partly overlap")));
        }
        let param = OpParam {
            tag: self.allreduce_tag.clone(),
            op_type: OpType::AllReduce,
            stream: stream.clone(),
            input: send,
            output: recv,
            count,
            dtype,
            reduce_op: op,
            root: 0,
            mode: WorkflowMode::OpBase,
            send_v: None,
            recv_v: None,
            peer: 0,
        };
        self.inner.exec_op(&param)
    }
}
