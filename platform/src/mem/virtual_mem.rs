//! Memory without bytes: regions whose contents a layer above keeps in its
//! own form (the plan simulator's symbolic data at cluster scale, where
//! thousands of ranks' buffers would not fit in RAM as bytes).
//!
//! A virtual region has a length and an identity but no mapping. Copy and
//! reduce tasks, and the in-process links' transfers, hand its ranges to
//! its [`VirtualMem`] instead of touching bytes; everything that would
//! dereference it (host copies, kernels, other transports) refuses it or
//! panics, never reads through its placeholder address.

use crate::dtype::{DataType, ReduceOp};
use crate::error::Result;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The contents of a virtual region ([`DeviceMem::alloc_virtual`]): what
/// copy and reduce tasks do to it. Offsets are from the start of the
/// region. The other operand is always virtual too (mixing with real bytes
/// fails before the call); implementations downcast it with
/// [`VirtualMem::as_any`].
///
/// [`DeviceMem::alloc_virtual`]: crate::DeviceMem::alloc_virtual
pub trait VirtualMem: Send + Sync + 'static {
    /// `self[dst_off..dst_off + len] <- src[src_off..src_off + len]`
    /// (`src` may be `self`; overlapping ranges behave as memmove).
    fn copy(&self, dst_off: usize, src: &dyn VirtualMem, src_off: usize, len: usize) -> Result<()>;

    /// `self[dst_off..] <- self[dst_off..] op src[src_off..]`, `len` bytes
    /// of `dtype` elements.
    fn reduce(
        &self,
        dst_off: usize,
        src: &dyn VirtualMem,
        src_off: usize,
        len: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<()>;

    /// Self as `Any`, to downcast the other operand.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Placeholder addresses of virtual regions: distinct, never mapped and
/// never dereferenced; they only keep address comparisons (overlap checks,
/// kernels' input ranges) from confusing two virtual regions. They start
/// above the 47-bit user address space, so no real mapping can share one.
pub(crate) fn placeholder_address(len: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1 << 48);
    // page-aligned, a page apart: the alignment checks of kernels pass
    // and zero-length regions still differ
    let step = (len + 8191) & !4095;
    NEXT.fetch_add(step, Ordering::Relaxed)
}
