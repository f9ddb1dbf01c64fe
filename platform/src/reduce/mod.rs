//! Reduce kernels: element-wise `dst = op(dst, src)` and `dst = op(a, b)` over
//! buffers of any HCCL [`DataType`].
//!
//! # Semantics
//!
//! [`Reducible::combine`] is the reference definition; the slice and byte
//! kernels give bit-identical results element by element (except for NaN
//! payloads, which are unspecified, and the sign of a zero returned by max/min).
//!
//! | dtype                          | sum                         | prod                        | max / min                         |
//! |--------------------------------|-----------------------------|-----------------------------|-----------------------------------|
//! | int8/16/32/64, uint8/16/32/64  | wrapping (two's complement) | wrapping (two's complement) | ordinary integer max / min        |
//! | fp32, fp64                     | IEEE add, round-to-nearest-even | IEEE mul, round-to-nearest-even | NaN-propagating (see below)   |
//! | fp16, bf16                     | in f32, rounded back once (RNE) | in f32, rounded back once (RNE) | NaN-propagating, in f32       |
//!
//! * **Integers** wrap on overflow, as C does on the device. Wrapping sum and
//!   product are associative and commutative, so the result does not depend on
//!   the order in which ranks are combined.
//! * **Float sum/prod** are plain IEEE 754 arithmetic: overflow gives ±inf,
//!   `inf + -inf` and `0 * inf` give NaN, NaN operands give NaN (payload
//!   unspecified), subnormals are kept (no flush-to-zero).
//! * **Float max/min propagate NaN**: if either operand is NaN the result is
//!   NaN (always the canonical quiet NaN of the type), whatever the order of
//!   the operands, so every rank sees the same result. This differs from
//!   [`f32::max`], which ignores NaN. Otherwise the larger (smaller) value is
//!   returned; for `-0.0` vs `+0.0`, which compare equal, either may be
//!   returned (the implementation returns the second operand).
//! * **fp16 / bf16** operands are widened to f32 exactly, combined in f32 and
//!   rounded back once per combine with round-to-nearest-even (what `half`'s
//!   `from_f32` does): overflow rounds to ±inf, tiny results to subnormals or
//!   ±0.
//!
//! # Performance
//!
//! The operator and type are dispatched once per call; each (type, op) pair
//! then runs its own monomorphised loop over fixed-size chunks that the
//! compiler auto-vectorises (portable code; SSE2 is the baseline on x86-64).
//!
//! * **bf16** is processed two elements per 32-bit word: widening is a shift
//!   or a mask, narrowing a round-to-nearest-even bias add, all branch-free
//!   integer lane operations. The same code is also compiled for AVX2, used
//!   when the CPU has it (detected at run time).
//! * **fp16** on x86 CPUs with F16C and AVX2 (detected at run time) uses the
//!   hardware conversions (`vcvtph2ps` / `vcvtps2ph`, round-to-nearest-even)
//!   8 lanes at a time. On aarch64 with FEAT_FP16 it goes through `half`'s
//!   slice conversions. Elsewhere, a branch-free software conversion (the
//!   FPU does the exponent rebias and the rounding) vectorises with the
//!   baseline target features.
//!
//! Every path is tested bit for bit against [`Reducible::combine`] on all
//! 65536 inputs of each 16-bit type.
//!
//! Byte buffers whose addresses are aligned for the element type are
//! reinterpreted in place; misaligned buffers (allowed) take a slower path
//! that copies chunks through aligned stack buffers.
//!
//! # Where things are
//!
//! This file holds the API and the dispatch (on the data type, and on the
//! instruction set for fp16 / bf16); `ops.rs` the semantics of each operator
//! and the portable kernels; `half.rs` the portable fp16 / bf16 paths;
//! `x86.rs` the AVX2 / F16C kernels and with them all of the module's
//! `unsafe`; `tests.rs` the tests.

mod half;
mod ops;
#[cfg(test)]
mod tests;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod x86;

use self::half::{bf16_in_place_impl, bf16_into_impl, f16_half_in_place, f16_half_into};
use self::half::{half_in_place, half_into};
use self::ops::{bytes_in_place, bytes_into, bytes_io, with_op, Kernel};
use crate::dtype::{DataType, Element, ReduceOp};
use crate::error::{HcclError, Result};
use ::half::{bf16, f16};

/// An element type that can be reduced: the scalar reference semantics.
///
/// Implemented for all twelve [`Element`] types (`i8`..`i64`, `u8`..`u64`,
/// [`struct@f16`], [`struct@bf16`], `f32`, `f64`); see the `reduce` module docs for the
/// semantics of each operator. Sealed: its supertrait `Kernel` (the
/// vectorised kernels of the type) is private to this module.
pub trait Reducible: Element + Kernel {
    /// Combines `a` and `b` with `op`. This is the reference semantics that
    /// the slice and byte kernels reproduce element by element.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

// ---------------------------------------------------------------------------
// Instruction-set dispatch of the 16-bit float kernels
// ---------------------------------------------------------------------------

/// Instruction-set choice of the bf16 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bf16Path {
    /// Baseline target features (SSE2 on x86-64).
    Portable,
    /// x86 AVX2, detected at run time (the token is the proof).
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    Avx2(x86::Avx2),
}

impl Bf16Path {
    /// The fastest path this CPU supports.
    fn detect() -> Bf16Path {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(t) = x86::Avx2::detect() {
            return Bf16Path::Avx2(t);
        }
        Bf16Path::Portable
    }

    /// Every path this CPU supports (for tests).
    #[cfg(test)]
    fn available() -> Vec<Bf16Path> {
        let mut v = vec![Bf16Path::Portable];
        if Bf16Path::detect() != Bf16Path::Portable {
            v.push(Bf16Path::detect());
        }
        v
    }
}

/// `dst = op(dst, src)` for bf16 on an explicit path.
fn bf16_in_place(op: ReduceOp, dst: &mut [bf16], src: &[bf16], path: Bf16Path) {
    match path {
        Bf16Path::Portable => with_op!(op, O => bf16_in_place_impl::<O>(dst, src)),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Bf16Path::Avx2(t) => with_op!(op, O => x86::bf16_in_place::<O>(t, dst, src)),
    }
}

/// `dst = op(a, b)` for bf16 on an explicit path.
fn bf16_into(op: ReduceOp, dst: &mut [bf16], a: &[bf16], b: &[bf16], path: Bf16Path) {
    match path {
        Bf16Path::Portable => with_op!(op, O => bf16_into_impl::<O>(dst, a, b)),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Bf16Path::Avx2(t) => with_op!(op, O => x86::bf16_into::<O>(t, dst, a, b)),
    }
}

/// Instruction-set choice of the fp16 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum F16Path {
    /// Branch-free software conversion, baseline target features.
    Soft,
    /// `half`'s slice conversions (hardware FEAT_FP16 on aarch64; only
    /// tested elsewhere).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    Half,
    /// x86 F16C (`vcvtph2ps` / `vcvtps2ph`) with AVX2, detected at run time
    /// (the token is the proof).
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    F16c(x86::Avx2F16c),
}

impl F16Path {
    /// The fastest path this CPU supports.
    fn detect() -> F16Path {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(t) = x86::Avx2F16c::detect() {
            return F16Path::F16c(t);
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("fp16") {
            return F16Path::Half;
        }
        F16Path::Soft
    }

    /// Every path this CPU supports (for tests; `half` works everywhere).
    #[cfg(test)]
    fn available() -> Vec<F16Path> {
        let mut v = vec![F16Path::Soft, F16Path::Half];
        if !v.contains(&F16Path::detect()) {
            v.push(F16Path::detect());
        }
        v
    }
}

/// `dst = op(dst, src)` for fp16 on an explicit path.
fn f16_in_place(op: ReduceOp, dst: &mut [f16], src: &[f16], path: F16Path) {
    match path {
        F16Path::Soft => with_op!(op, O => half_in_place::<f16, O>(dst, src)),
        F16Path::Half => with_op!(op, O => f16_half_in_place::<O>(dst, src)),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        F16Path::F16c(t) => x86::f16_in_place(t, op, dst, src),
    }
}

/// `dst = op(a, b)` for fp16 on an explicit path.
fn f16_into(op: ReduceOp, dst: &mut [f16], a: &[f16], b: &[f16], path: F16Path) {
    match path {
        F16Path::Soft => with_op!(op, O => half_into::<f16, O>(dst, a, b)),
        F16Path::Half => with_op!(op, O => f16_half_into::<O>(dst, a, b)),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        F16Path::F16c(t) => x86::f16_into(t, op, dst, a, b),
    }
}

impl Kernel for f16 {
    fn in_place(op: ReduceOp, dst: &mut [f16], src: &[f16]) {
        f16_in_place(op, dst, src, F16Path::detect());
    }
    fn into(op: ReduceOp, dst: &mut [f16], a: &[f16], b: &[f16]) {
        f16_into(op, dst, a, b, F16Path::detect());
    }
    bytes_io!(f16);
}

impl Kernel for bf16 {
    fn in_place(op: ReduceOp, dst: &mut [bf16], src: &[bf16]) {
        bf16_in_place(op, dst, src, Bf16Path::detect());
    }
    fn into(op: ReduceOp, dst: &mut [bf16], a: &[bf16], b: &[bf16]) {
        bf16_into(op, dst, a, b, Bf16Path::detect());
    }
    bytes_io!(bf16);
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

/// Checks that every buffer has `dst`'s length and that it is a whole number
/// of `dtype` elements.
pub(crate) fn check_lengths(
    what: &str,
    dtype: DataType,
    dst: usize,
    others: &[(&str, usize)],
) -> Result<()> {
    for &(name, len) in others {
        if len != dst {
            return Err(HcclError::para(format!(
                "{what}: buffer lengths differ: dst is {dst} bytes but {name} is {len} bytes \
                 (dtype {dtype})"
            )));
        }
    }
    let size = dtype.size();
    let rem = dst % size;
    if rem != 0 {
        return Err(HcclError::para(format!(
            "{what}: buffer length {dst} bytes is not a multiple of the {dtype} element size \
             ({size} bytes; {rem} bytes left over)"
        )));
    }
    Ok(())
}

/// The error for reducing a type HCCL only moves (the FP8 formats).
pub(crate) fn not_reducible(dtype: DataType) -> HcclError {
    HcclError::not_support(format!(
        "data type {dtype} ({}) cannot be reduced: HCCL moves it (AllGather, Broadcast, \
         AllToAll, ...) but no reduction supports it",
        dtype.hccl_name()
    ))
}

/// Runs `$body` with the type alias `$u` bound to the Rust type of `$dtype`.
macro_rules! dispatch {
    ($dtype:expr, $u:ident => $body:expr) => {
        match $dtype {
            DataType::Int8 => {
                type $u = i8;
                $body
            }
            DataType::Int16 => {
                type $u = i16;
                $body
            }
            DataType::Int32 => {
                type $u = i32;
                $body
            }
            DataType::Int64 => {
                type $u = i64;
                $body
            }
            DataType::Uint8 => {
                type $u = u8;
                $body
            }
            DataType::Uint16 => {
                type $u = u16;
                $body
            }
            DataType::Uint32 => {
                type $u = u32;
                $body
            }
            DataType::Uint64 => {
                type $u = u64;
                $body
            }
            DataType::Fp16 => {
                type $u = f16;
                $body
            }
            DataType::Bf16 => {
                type $u = bf16;
                $body
            }
            DataType::Fp32 => {
                type $u = f32;
                $body
            }
            DataType::Fp64 => {
                type $u = f64;
                $body
            }
            DataType::Hif8 | DataType::Fp8E4M3 | DataType::Fp8E5M2 | DataType::Fp8E8M0 => {
                return Err(not_reducible($dtype));
            }
        }
    };
}

/// `dst[i] = op(dst[i], src[i])` for every element; byte slices interpreted as
/// `dtype` (native endianness).
///
/// The slices may have any alignment; aligned slices take the fast path.
///
/// # Errors
///
/// A parameter error (`HcclResult::EPara`) if the lengths differ or are not a
/// multiple of `dtype.size()`.
pub fn reduce_in_place(dtype: DataType, op: ReduceOp, dst: &mut [u8], src: &[u8]) -> Result<()> {
    check_lengths("reduce_in_place", dtype, dst.len(), &[("src", src.len())])?;
    dispatch!(dtype, U => bytes_in_place::<U>(op, dst, src));
    Ok(())
}

/// `dst[i] = op(a[i], b[i])` for every element; byte slices interpreted as
/// `dtype` (native endianness).
///
/// The slices may have any alignment; aligned slices take the fast path.
///
/// # Errors
///
/// A parameter error (`HcclResult::EPara`) if the lengths differ or are not a
/// multiple of `dtype.size()`.
pub fn reduce_into(
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<()> {
    check_lengths(
        "reduce_into",
        dtype,
        dst.len(),
        &[("a", a.len()), ("b", b.len())],
    )?;
    dispatch!(dtype, U => bytes_into::<U>(op, dst, a, b));
    Ok(())
}

// ---------------------------------------------------------------------------

/// Typed form of [`reduce_in_place`]: `dst[i] = op(dst[i], src[i])`.
///
/// # Panics
///
/// If `dst` and `src` have different lengths.
pub fn reduce_slice_in_place<T: Reducible>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "reduce_slice_in_place: dst has {} elements but src has {} ({})",
        dst.len(),
        src.len(),
        T::DTYPE
    );
    T::in_place(op, dst, src);
}

/// Typed form of [`reduce_into`]: `dst[i] = op(a[i], b[i])`.
///
/// # Panics
///
/// If `dst`, `a` and `b` do not all have the same length.
pub fn reduce_slice_into<T: Reducible>(op: ReduceOp, dst: &mut [T], a: &[T], b: &[T]) {
    assert!(
        dst.len() == a.len() && dst.len() == b.len(),
        "reduce_slice_into: dst has {} elements, a {}, b {} ({})",
        dst.len(),
        a.len(),
        b.len(),
        T::DTYPE
    );
    T::into(op, dst, a, b);
}
