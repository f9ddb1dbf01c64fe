//! Reduce kernels (placeholder until the kernel module lands).
use crate::dtype::{DataType, ReduceOp};
use crate::error::Result;
/// dst op= src
pub fn reduce_in_place(_dtype: DataType, _op: ReduceOp, _dst: &mut [u8], _src: &[u8]) -> Result<()> {
    Err(crate::HcclError::not_support("kernels not yet in"))
}
