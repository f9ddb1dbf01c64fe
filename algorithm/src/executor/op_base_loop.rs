//! The op-base loop (HCCL's `RunLoop`): user data staged through the CCL
//! buffers in chunks of at most the CCL buffer size.

use crate::op::OpParam;
use crate::resource::AlgResourceResponse;
use hccl_platform::{HcclError, Result};

/// One chunk of the op: element range and byte range in the user buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Index of the chunk.
    pub index: u64,
    /// First element of the chunk.
    pub first: u64,
    /// Elements in the chunk.
    pub count: u64,
    /// Byte offset of the chunk in the user buffers.
    pub offset: usize,
    /// Bytes in the chunk.
    pub bytes: usize,
}

/// Bytes one op-base round of an executor that works in both CCL buffers
/// may stage: what both hold, capped at [`super::PIPELINE_CHUNK_BYTES`].
pub fn round_capacity(res: &AlgResourceResponse) -> usize {
    res.ccl_input
        .len()
        .min(res.ccl_output.len())
        .min(super::PIPELINE_CHUNK_BYTES)
}

/// Calls `body` for each chunk of `param.count` elements that fits
/// `chunk_capacity` bytes of CCL buffer (whole elements). `body` enqueues the
/// staging copies and the algorithm for its chunk.
pub fn run_op_base_loop(
    param: &OpParam,
    res: &AlgResourceResponse,
    chunk_capacity: usize,
    mut body: impl FnMut(Chunk, &AlgResourceResponse) -> Result<()>,
) -> Result<()> {
    let unit = param.dtype.size() as u64;
    let per_chunk = chunk_capacity as u64 / unit;
    if per_chunk == 0 {
        return Err(HcclError::para(format!(
            "the CCL buffer ({chunk_capacity} bytes) cannot hold one {} element",
            param.dtype
        ))
        .tag(&**param.tag));
    }
    let mut first = 0u64;
    let mut index = 0u64;
    while first < param.count {
        let count = per_chunk.min(param.count - first);
        let chunk = Chunk {
            index,
            first,
            count,
            offset: (first * unit) as usize,
            bytes: (count * unit) as usize,
        };
        tracing::trace!(tag = %param.tag, ?chunk, "op-base chunk");
        body(chunk, res)?;
        first += count;
        index += 1;
    }
    Ok(())
}

/// On a one-rank communicator every op this crate's executors run is a copy
/// of the first `bytes` of the input to the output; enqueues it (nothing
/// when they are the same memory).
pub fn copy_through(param: &OpParam, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let (src, dst) = (param.input.range(0, bytes)?, param.output.range(0, bytes)?);
    if !src.same_range(&dst) {
        param.stream.memcpy_async(&dst, &src)?;
    }
    Ok(())
}
