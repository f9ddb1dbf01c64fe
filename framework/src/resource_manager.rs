//! Turns an executor's resource request into granted resources.

use crate::fabric::Fabric;
use hccl_algorithm::OpParam;
use hccl_algorithm::{AlgResourceRequest, AlgResourceResponse};
use hccl_platform::{Device, DeviceMem, HcclError, LinkHandle, MemKind, Notify, Result, Stream};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Grants buffers, streams, notifies and links to executors for one rank.
/// Links are built on first request and reused by every later op.
#[derive(Debug)]
pub(crate) struct ResourceManager {
    rank: u32,
    device: Device,
    ccl_input: DeviceMem,
    ccl_output: DeviceMem,
    fabric: Arc<Fabric>,
    connect_timeout: Duration,
    /// By (peer, input kind, output kind, transport): ops whose sizes
    /// score different transports get a link over each.
    links: HashMap<(u32, MemKind, MemKind, &'static str), LinkHandle>,
}

impl ResourceManager {
    /// A manager for `rank`, owning its CCL buffers.
    pub(crate) fn new(
        rank: u32,
        device: Device,
        ccl_input: DeviceMem,
        ccl_output: DeviceMem,
        fabric: Arc<Fabric>,
        connect_timeout: Duration,
    ) -> Self {
        ResourceManager {
            rank,
            device,
            ccl_input,
            ccl_output,
            fabric,
            connect_timeout,
            links: HashMap::new(),
        }
    }

    /// Every link established so far.
    pub(crate) fn links(&self) -> impl Iterator<Item = &LinkHandle> {
        self.links.values()
    }

    /// The message size that chooses an op's transports: its bytes,
    /// which every rank of a consistent op agrees on; the V ops, whose
    /// per-rank counts differ, all choose at one size (64 KiB).
    pub(crate) fn transport_bytes(param: &OpParam<'_>) -> u64 {
        if param.send_v.is_some() || param.recv_v.is_some() {
            64 * 1024
        } else {
            param.count.saturating_mul(param.dtype.size() as u64)
        }
    }

    /// Grants `req` for an op of `bytes` (see [`Self::transport_bytes`]).
    /// `input`/`output` are the op's user buffers.
    pub(crate) fn grant(
        &mut self,
        req: &AlgResourceRequest,
        input: &DeviceMem,
        output: &DeviceMem,
        bytes: u64,
    ) -> Result<AlgResourceResponse> {
        let scratch = if req.scratch_mem_size > 0 {
            let n = usize::try_from(req.scratch_mem_size).map_err(|_| {
                HcclError::memory(format!(
                    "scratch of {} bytes is too large",
                    req.scratch_mem_size
                ))
            })?;
            DeviceMem::alloc(n)?
        } else {
            DeviceMem::null()
        };
        let slave_streams = (0..req.stream_num)
            .map(|_| Stream::new(&self.device))
            .collect();
        let main = req.notify_num / 2;
        let notifies_main = (0..main).map(|_| Notify::new(&self.device)).collect();
        let notifies_aux = (0..req.notify_num - main)
            .map(|_| Notify::new(&self.device))
            .collect();
        let mut op_transport = req.op_transport.clone();
        for level in op_transport.iter_mut() {
            for sub in level.iter_mut() {
                for (i, t) in sub.transport_requests.iter().enumerate() {
                    if !t.is_valid {
                        continue;
                    }
                    if t.local_user_rank != self.rank {
                        return Err(HcclError::internal(format!(
                            "transport request from rank {} issued on rank {}",
                            t.local_user_rank, self.rank
                        )));
                    }
                    let transport = self
                        .fabric
                        .transport_for(t.remote_user_rank, bytes)
                        .map_err(|e| e.rank(self.rank).peer(t.remote_user_rank))?;
                    let key = (
                        t.remote_user_rank,
                        t.input_mem_type,
                        t.output_mem_type,
                        transport,
                    );
                    let link = match self.links.get(&key) {
                        Some(l) => l.clone(),
                        None => {
                            let l = self
                                .fabric
                                .link(t.remote_user_rank, transport, self.connect_timeout)
                                .map_err(|e| e.rank(self.rank).peer(t.remote_user_rank))?;
                            tracing::debug!(
                                rank = self.rank,
                                peer = t.remote_user_rank,
                                transport,
                                "link established"
                            );
                            self.device.register_link(l.link());
                            self.links.insert(key, l.clone());
                            l
                        }
                    };
                    sub.links[i] = Some(link);
                }
            }
        }
        Ok(AlgResourceResponse {
            ccl_input: self.ccl_input.clone(),
            ccl_output: self.ccl_output.clone(),
            param_input: input.clone(),
            param_output: output.clone(),
            scratch,
            aiv_input: DeviceMem::null(),
            aiv_output: DeviceMem::null(),
            slave_streams,
            notifies_main,
            notifies_aux,
            op_transport,
        })
    }
}
