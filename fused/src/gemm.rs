//! The GEMM seam: every product the fused ops compute goes through
//! [`mm_into`], which multiplies in f32 on the platform's cube unit
//! (`hccl_platform::cube`, the `gemm` crate), converting bf16/fp16
//! operands up and the result back down.

use crate::pipeline::Scratch;
use hccl_adapter::DataType;
use hccl_platform::cube::{self, Mat};
use hccl_platform::Result;

/// A contiguous f32 `rows × cols` matrix in scratch buffer `what`.
pub(crate) fn f32_scratch(
    scratch: &mut Scratch,
    what: &'static str,
    rows: usize,
    cols: usize,
) -> Result<Mat> {
    let mem = scratch.get(what, rows * cols * 4)?;
    Mat::new(&mem, DataType::Fp32, rows, cols, cols)
}

/// `m` as f32: itself, or converted into scratch buffer `what`.
pub(crate) fn as_f32(m: &Mat, scratch: &mut Scratch, what: &'static str) -> Result<Mat> {
    if m.dtype() == DataType::Fp32 {
        return Ok(m.clone());
    }
    let t = f32_scratch(scratch, what, m.row_count(), m.col_count())?;
    cube::convert(&t, m)?;
    Ok(t)
}

/// `out = a · b32` with `out` and `a` of any operand type, accumulated in
/// f32 with `threads` threads.
pub(crate) fn mm_into(
    out: &Mat,
    a: &Mat,
    b32: &Mat,
    scratch: &mut Scratch,
    threads: usize,
) -> Result<()> {
    if out.row_count() == 0 {
        return Ok(());
    }
    let a32 = as_f32(a, scratch, "a32")?;
    if out.dtype() == DataType::Fp32 {
        return cube::gemm(out, &a32, b32, false, threads);
    }
    let c32 = f32_scratch(scratch, "c32", out.row_count(), out.col_count())?;
    cube::gemm(&c32, &a32, b32, false, threads)?;
    cube::convert(out, &c32)
}

/// Blocks of `block` rows needed to cover `rows`.
pub(crate) fn blocks_of(rows: usize, block: usize) -> usize {
    rows.div_ceil(block.max(1))
}

/// Rows of block `c` (of `block` rows) in a part of `rows` rows: where it
/// starts in the part and how many rows it has (0 past the end).
pub(crate) fn block_rows(rows: usize, block: usize, c: usize) -> (usize, usize) {
    let start = (c * block).min(rows);
    (start, block.min(rows - start))
}

/// A contiguous `rows × cols` matrix of `dtype` at the start of `mem`.
pub(crate) fn dense(
    mem: &hccl_adapter::DeviceMem,
    dtype: DataType,
    rows: usize,
    cols: usize,
) -> Result<Mat> {
    Mat::new(mem, dtype, rows, cols, cols)
}
