//! The cube unit: matrix work on device memory, for the fused
//! compute/communication ops (HCCL's MC2: a matmul on the AI Core's cube
//! unit feeding a collective).
//!
//! On this CPU platform the "cube" is the `gemm` crate (row-major f32 with
//! per-call thread control); bf16 and fp16 operands are converted to f32
//! first, so every product accumulates in f32. Alongside the GEMM live
//! the two element-wise kernels a fused op needs on 2-D blocks: `add`
//! (a receiver reducing a peer's tile into its accumulator) and `convert`
//! (copy with a type change, for upcasting inputs and rounding results).
//!
//! Operands are [`Mat`]s: a [`DeviceMem`] seen as a row-major matrix with a
//! leading dimension. Every function checks shapes, bounds, alignment and
//! that no enqueued task uses the memory, so the layers above stay safe.
//! Reads of memory a peer process writes (a symmetric window) are sound
//! only under the caller's protocol: the peer published the block (a
//! release store on a [`SharedCounter`](crate::SharedCounter)) before the
//! reader loaded it (acquire), and does not rewrite it until told.

use crate::dtype::DataType;
use crate::error::{HcclError, Result};
use crate::mem::DeviceMem;
use half::{bf16, f16};

/// A row-major matrix in device memory: element (i, j) is at element
/// offset `i * ld + j` of `mem`, of type `dtype`.
#[derive(Clone, Debug)]
pub struct Mat {
    mem: DeviceMem,
    dtype: DataType,
    rows: usize,
    cols: usize,
    ld: usize,
}

impl Mat {
    /// `rows × cols` elements of `dtype` at the start of `mem`, rows `ld`
    /// elements apart. Errors (`HCCL_E_PARA`): `ld < cols`, the matrix
    /// does not fit `mem`, or `mem` is not aligned to the element size.
    pub fn new(
        mem: &DeviceMem,
        dtype: DataType,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Result<Mat> {
        if ld < cols {
            return Err(HcclError::para(format!(
                "leading dimension {ld} is smaller than the {cols} columns"
            )));
        }
        let need = Self::bytes_for(dtype, rows, cols, ld);
        if need > mem.len() {
            return Err(HcclError::para(format!(
                "a {rows}×{cols} {} matrix with leading dimension {ld} needs {need} bytes; the \
                 buffer has {}",
                dtype.name(),
                mem.len()
            )));
        }
        if (mem.ptr() as usize) % dtype.size() != 0 {
            return Err(HcclError::para(format!(
                "a {} matrix must be aligned to {} bytes; this buffer is at {:#x}",
                dtype.name(),
                dtype.size(),
                mem.addr()
            )));
        }
        Ok(Mat {
            mem: mem.clone(),
            dtype,
            rows,
            cols,
            ld,
        })
    }

    /// Bytes a `rows × cols` matrix with leading dimension `ld` spans.
    pub fn bytes_for(dtype: DataType, rows: usize, cols: usize, ld: usize) -> usize {
        if rows == 0 || cols == 0 {
            0
        } else {
            ((rows - 1) * ld + cols) * dtype.size()
        }
    }

    /// Rows `[r0, r0 + n)` of this matrix (same columns and leading
    /// dimension).
    pub fn rows(&self, r0: usize, n: usize) -> Result<Mat> {
        if r0 + n > self.rows {
            return Err(HcclError::para(format!(
                "rows {r0}..{} are outside a matrix of {} rows",
                r0 + n,
                self.rows
            )));
        }
        let off = r0 * self.ld * self.dtype.size();
        let len = Self::bytes_for(self.dtype, n, self.cols, self.ld);
        let mem = if len == 0 {
            self.mem.range(off.min(self.mem.len()), 0)?
        } else {
            self.mem.range(off, len)?
        };
        Ok(Mat {
            mem,
            rows: n,
            ..self.clone()
        })
    }

    /// Columns `[c0, c0 + n)` of this matrix (same rows and leading
    /// dimension).
    pub fn cols(&self, c0: usize, n: usize) -> Result<Mat> {
        if c0 + n > self.cols {
            return Err(HcclError::para(format!(
                "columns {c0}..{} are outside a matrix of {} columns",
                c0 + n,
                self.cols
            )));
        }
        let off = c0 * self.dtype.size();
        let len = Self::bytes_for(self.dtype, self.rows, n, self.ld);
        let mem = self.mem.range(off.min(self.mem.len()), len)?;
        Ok(Mat {
            mem,
            cols: n,
            ..self.clone()
        })
    }

    /// Number of rows.
    pub fn row_count(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn col_count(&self) -> usize {
        self.cols
    }

    /// Elements between the starts of consecutive rows.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// Element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The memory the matrix lies in (from its first element).
    pub fn mem(&self) -> &DeviceMem {
        &self.mem
    }

    fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    fn check_idle(&self, what: &str) -> Result<()> {
        let n = self.mem.tasks_in_flight();
        if n != 0 {
            return Err(HcclError::unavail(format!(
                "cannot {what}: {n} enqueued task(s) still use this buffer; synchronize the \
                 stream first"
            )));
        }
        Ok(())
    }

    /// Row `i` as a typed slice. Only called on checked matrices, with
    /// `T` matching `dtype`.
    fn row<T>(&self, i: usize) -> &[T] {
        debug_assert!(i < self.rows && std::mem::size_of::<T>() == self.dtype.size());
        // SAFETY: `Mat::new` checked that rows × ld fits `mem` and that the
        // start is aligned for the element size (T has that size, checked
        // by every caller's dispatch on `dtype`); row i spans `cols`
        // elements from `i * ld`, inside the checked span. The bytes are
        // plain numbers (any pattern is valid). Concurrent writers are
        // excluded by the caller's protocol (module docs).
        unsafe {
            std::slice::from_raw_parts(
                self.mem.ptr().cast::<T>().cast_const().add(i * self.ld),
                self.cols,
            )
        }
    }

    /// Row `i` as a mutable typed slice; as [`row`](Self::row).
    #[allow(clippy::mut_from_ref)]
    fn row_mut<T>(&self, i: usize) -> &mut [T] {
        debug_assert!(i < self.rows && std::mem::size_of::<T>() == self.dtype.size());
        // SAFETY: as in `row`; the callers never hold two rows of one
        // matrix at once, and check that destination and source do not
        // overlap, so this is the only live reference to these bytes.
        unsafe {
            std::slice::from_raw_parts_mut(self.mem.ptr().cast::<T>().add(i * self.ld), self.cols)
        }
    }

    /// Whether the bytes this matrix spans meet `other`'s.
    fn overlaps(&self, other: &Mat) -> bool {
        if self.is_empty() || other.is_empty() {
            return false;
        }
        let span = |m: &Mat| {
            let s = m.mem.addr() as usize;
            (s, s + Self::bytes_for(m.dtype, m.rows, m.cols, m.ld))
        };
        let ((a0, a1), (b0, b1)) = (span(self), span(other));
        a0 < b1 && b0 < a1
    }
}

/// Types the cube reads as operands.
fn operand_type(what: &str, d: DataType) -> Result<()> {
    match d {
        DataType::Fp32 | DataType::Bf16 | DataType::Fp16 => Ok(()),
        _ => Err(HcclError::para(format!(
            "{what} has data type {}; the cube takes fp32, bf16 and fp16",
            d.name()
        ))),
    }
}

fn same_shape(what: &str, a: &Mat, b: &Mat) -> Result<()> {
    if a.rows != b.rows || a.cols != b.cols {
        return Err(HcclError::para(format!(
            "{what}: a {}×{} matrix against a {}×{} one",
            a.rows, a.cols, b.rows, b.cols
        )));
    }
    if a.overlaps(b) {
        return Err(HcclError::para(format!("{what}: the two matrices overlap")));
    }
    Ok(())
}

/// `c = a · b` (or `c += a · b` when `accumulate`), all f32, using up to
/// `threads` threads (1: the caller's thread only). Errors: not f32, shapes
/// that do not chain, `c` overlapping an operand, memory in use by a task.
pub fn gemm(c: &Mat, a: &Mat, b: &Mat, accumulate: bool, threads: usize) -> Result<()> {
    for (what, m) in [("c", c), ("a", a), ("b", b)] {
        if m.dtype != DataType::Fp32 {
            return Err(HcclError::para(format!(
                "the GEMM's {what} has data type {}; it multiplies fp32 (convert first)",
                m.dtype.name()
            )));
        }
    }
    if a.cols != b.rows || c.rows != a.rows || c.cols != b.cols {
        return Err(HcclError::para(format!(
            "GEMM shapes do not chain: c {}×{} = a {}×{} · b {}×{}",
            c.rows, c.cols, a.rows, a.cols, b.rows, b.cols
        )));
    }
    if c.overlaps(a) || c.overlaps(b) {
        return Err(HcclError::para("the GEMM's output overlaps an operand"));
    }
    c.check_idle("multiply into the buffer")?;
    a.check_idle("multiply from the buffer")?;
    b.check_idle("multiply from the buffer")?;
    if c.is_empty() {
        return Ok(());
    }
    if a.cols == 0 {
        if !accumulate {
            for i in 0..c.rows {
                c.row_mut::<f32>(i).fill(0.0);
            }
        }
        return Ok(());
    }
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the three matrices are f32, aligned and inside their buffers
    // (Mat::new), their shapes chain (checked above), the output overlaps
    // neither operand (checked), and no enqueued task uses any of them.
    // Strides are in elements: row stride ld, column stride 1. Concurrent
    // writers of the operands are excluded by the caller's protocol.
    unsafe {
        gemm::gemm(
            c.rows,
            c.cols,
            a.cols,
            c.mem.ptr().cast::<f32>(),
            1,
            c.ld as isize,
            accumulate,
            a.mem.ptr().cast::<f32>().cast_const(),
            1,
            a.ld as isize,
            b.mem.ptr().cast::<f32>().cast_const(),
            1,
            b.ld as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// `dst += src`, element-wise, both f32 and of one shape (a receiver
/// reducing a peer's tile into its accumulator).
pub fn add(dst: &Mat, src: &Mat) -> Result<()> {
    same_shape("add", dst, src)?;
    if dst.dtype != DataType::Fp32 || src.dtype != DataType::Fp32 {
        return Err(HcclError::para(format!(
            "add takes fp32 matrices, not {} += {}",
            dst.dtype.name(),
            src.dtype.name()
        )));
    }
    dst.check_idle("add into the buffer")?;
    src.check_idle("add from the buffer")?;
    for i in 0..dst.rows {
        crate::reduce::reduce_slice_in_place(
            crate::dtype::ReduceOp::Sum,
            dst.row_mut::<f32>(i),
            src.row::<f32>(i),
        );
    }
    Ok(())
}

/// `dst = src` with a type change (fp32, bf16, fp16 either way; equal
/// types copy), rounding to nearest even on narrowing.
pub fn convert(dst: &Mat, src: &Mat) -> Result<()> {
    same_shape("convert", dst, src)?;
    operand_type("convert's source", src.dtype)?;
    operand_type("convert's destination", dst.dtype)?;
    dst.check_idle("convert into the buffer")?;
    src.check_idle("convert from the buffer")?;
    use DataType::{Bf16, Fp16, Fp32};
    for i in 0..dst.rows {
        match (dst.dtype, src.dtype) {
            (Fp32, Fp32) => dst.row_mut::<f32>(i).copy_from_slice(src.row::<f32>(i)),
            (Bf16, Bf16) | (Fp16, Fp16) => dst.row_mut::<u16>(i).copy_from_slice(src.row::<u16>(i)),
            (Fp32, Bf16) => zip(dst.row_mut::<f32>(i), src.row::<bf16>(i), bf16::to_f32),
            (Fp32, Fp16) => zip(dst.row_mut::<f32>(i), src.row::<f16>(i), f16::to_f32),
            (Bf16, Fp32) => zip(dst.row_mut::<bf16>(i), src.row::<f32>(i), bf16::from_f32),
            (Fp16, Fp32) => zip(dst.row_mut::<f16>(i), src.row::<f32>(i), f16::from_f32),
            (Bf16, Fp16) => zip(dst.row_mut::<bf16>(i), src.row::<f16>(i), |x| {
                bf16::from_f32(x.to_f32())
            }),
            (Fp16, Bf16) => zip(dst.row_mut::<f16>(i), src.row::<bf16>(i), |x| {
                f16::from_f32(x.to_f32())
            }),
            (d, s) => {
                return Err(HcclError::internal(format!(
                    "convert from {} to {} has no kernel",
                    s.name(),
                    d.name()
                )))
            }
        }
    }
    Ok(())
}

fn zip<D, S: Copy>(dst: &mut [D], src: &[S], f: impl Fn(S) -> D) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(*s);
    }
}

#[cfg(test)]
mod tests;
