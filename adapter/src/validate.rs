//! Argument checks shared by the op-base entry points.

use hccl_platform::{DataType, DeviceMem, HcclError, Result};

/// Bytes of `count` elements of `dtype`, or a parameter error on overflow.
pub(crate) fn bytes_of(count: u64, dtype: DataType) -> Result<usize> {
    dtype.bytes_of(count)
}

/// Checks that `mem` (named `what`, e.g. "sendBuf") can hold `bytes`.
pub(crate) fn buffer(
    what: &str,
    mem: &DeviceMem,
    bytes: usize,
    count: u64,
    dtype: DataType,
) -> Result<()> {
    if mem.is_null() {
        return Err(HcclError::ptr(format!("{what} is null")));
    }
    if mem.len() < bytes {
        return Err(HcclError::para(format!(
            "{what} holds {} bytes but the op needs {bytes} ({count} × {dtype})",
            mem.len()
        )));
    }
    Ok(())
}
