//! The x86 kernels (AVX2, F16C), selected at run time: all of `reduce`'s
//! `unsafe` is in this file.
//!
//! Each instruction-set extension is represented by a token that only
//! [`Avx2::detect`] / [`Avx2F16c::detect`] can make, after asking the CPU;
//! the kernels take the token by value, so holding one is the proof their
//! `unsafe` blocks rely on, and the dispatch in the parent module stays safe
//! code.
//!
//! * bf16: the portable word kernels of `half.rs`, compiled again with AVX2
//!   enabled (same code, 256-bit vectors).
//! * fp16: `vcvtph2ps` widens 8 elements exactly, `vcvtps2ph` with
//!   `_MM_FROUND_TO_NEAREST_INT` narrows them with round-to-nearest-even,
//!   bit-identical to `half::f16::from_f32` (which uses the same instruction
//!   when F16C is available) and to the software conversion; the f32 combine
//!   in between is explicit AVX.

use super::half::{bf16_in_place_impl, bf16_into_impl};
use super::ops::{Max, Min, Op, Prod, Sum};
use crate::dtype::ReduceOp;
use half::{bf16, f16};
#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Proof that this CPU supports AVX2 (only [`Avx2::detect`] makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Avx2(());

impl Avx2 {
    /// A token if the CPU supports AVX2.
    pub(super) fn detect() -> Option<Avx2> {
        std::arch::is_x86_feature_detected!("avx2").then_some(Avx2(()))
    }
}

/// Proof that this CPU supports AVX2 and F16C (only [`Avx2F16c::detect`]
/// makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Avx2F16c(());

impl Avx2F16c {
    /// A token if the CPU supports AVX2 and F16C.
    pub(super) fn detect() -> Option<Avx2F16c> {
        (std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c"))
            .then_some(Avx2F16c(()))
    }
}

// ---------------------------------------------------------------------------
// bf16: the portable kernels compiled for AVX2
// ---------------------------------------------------------------------------

/// `dst[i] = op(dst[i], src[i])` for bf16, compiled for AVX2.
pub(super) fn bf16_in_place<O: Op<f32>>(_: Avx2, dst: &mut [bf16], src: &[bf16]) {
    // SAFETY: the token proves the CPU supports AVX2, the only requirement.
    unsafe { bf16_in_place_avx2::<O>(dst, src) }
}

/// `dst[i] = op(a[i], b[i])` for bf16, compiled for AVX2.
pub(super) fn bf16_into<O: Op<f32>>(_: Avx2, dst: &mut [bf16], a: &[bf16], b: &[bf16]) {
    // SAFETY: the token proves the CPU supports AVX2, the only requirement.
    unsafe { bf16_into_avx2::<O>(dst, a, b) }
}

/// The bf16 kernel compiled for AVX2 (same code, 256-bit vectors).
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn bf16_in_place_avx2<O: Op<f32>>(dst: &mut [bf16], src: &[bf16]) {
    bf16_in_place_impl::<O>(dst, src);
}

/// See [`bf16_in_place_avx2`].
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn bf16_into_avx2<O: Op<f32>>(dst: &mut [bf16], a: &[bf16], b: &[bf16]) {
    bf16_into_impl::<O>(dst, a, b);
}

// ---------------------------------------------------------------------------
// fp16 on F16C
// ---------------------------------------------------------------------------

/// Elements per vector.
const V: usize = 8;
/// Elements per unrolled step (independent vectors in flight).
const STEP: usize = 8 * V;

/// An operator on 8 f32 lanes, with exactly the semantics of the scalar
/// [`Op`] of the same marker. (Explicit intrinsics: written as
/// scalar code, LLVM turns max/min of two widened fp16 into a select of
/// the fp16 bits followed by a second conversion.)
trait Op8 {
    /// # Safety
    ///
    /// Only called (and inlined) from functions enabling AVX2 and F16C.
    unsafe fn apply8(a: __m256, b: __m256) -> __m256;
}

impl Op8 for Sum {
    #[inline(always)]
    unsafe fn apply8(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
}

impl Op8 for Prod {
    #[inline(always)]
    unsafe fn apply8(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
}

impl Op8 for Max {
    #[inline(always)]
    unsafe fn apply8(a: __m256, b: __m256) -> __m256 {
        // `vmaxps(a, b)` is `if a > b { a } else { b }` lane by lane;
        // unordered lanes then become the canonical NaN.
        let m = _mm256_max_ps(a, b);
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b);
        _mm256_blendv_ps(m, _mm256_set1_ps(f32::NAN), nan)
    }
}

impl Op8 for Min {
    #[inline(always)]
    unsafe fn apply8(a: __m256, b: __m256) -> __m256 {
        // `vminps(a, b)` is `if a < b { a } else { b }`.
        let m = _mm256_min_ps(a, b);
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b);
        _mm256_blendv_ps(m, _mm256_set1_ps(f32::NAN), nan)
    }
}

/// Combines 8 fp16 at `a` and `b` into 8 fp16 at `d` (which may be `a`).
///
/// # Safety
///
/// The CPU must support AVX2 and F16C; `a` and `b` must be valid for
/// reading and `d` for writing 8 elements (any alignment).
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn combine8<O: Op8>(d: *mut f16, a: *const f16, b: *const f16) {
    // SAFETY: the caller guarantees the features and that the pointers
    // cover 8 elements = 16 bytes; the loads and stores are unaligned.
    unsafe {
        let x = _mm256_cvtph_ps(_mm_loadu_si128(a.cast::<__m128i>()));
        let y = _mm256_cvtph_ps(_mm_loadu_si128(b.cast::<__m128i>()));
        let z = O::apply8(x, y);
        _mm_storeu_si128(
            d.cast::<__m128i>(),
            _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(z),
        );
    }
}

/// `d[i] = op(a[i], b[i])` for `i < n`, where `a` may be `d` itself.
///
/// # Safety
///
/// The CPU must support AVX2 and F16C; `a` and `b` must be valid for
/// reading `n` elements and `d` for writing `n` elements; `a` and `b`
/// may equal `d` but not otherwise overlap it.
#[target_feature(enable = "avx2,f16c")]
unsafe fn run<O: Op8>(d: *mut f16, a: *const f16, b: *const f16, n: usize) {
    // Every access below is within the first `n` elements of each buffer,
    // which the caller guarantees are valid, and each vector of `a` is read
    // before the same elements of `d` are written.
    let mut i = 0;
    while i + STEP <= n {
        for k in (0..STEP).step_by(V) {
            // SAFETY: `i + k + V <= n`; features by contract.
            unsafe { combine8::<O>(d.add(i + k), a.add(i + k), b.add(i + k)) };
        }
        i += STEP;
    }
    while i + V <= n {
        // SAFETY: `i + V <= n`; features by contract.
        unsafe { combine8::<O>(d.add(i), a.add(i), b.add(i)) };
        i += V;
    }
    if i < n {
        // Pad the tail to a whole vector (the padding lanes are discarded).
        let m = n - i;
        let mut x = [f16::ZERO; V];
        let mut y = [f16::ZERO; V];
        // SAFETY: `i + m == n`, so the copies stay within the buffers; `x`
        // and `y` are local arrays of `V >= m` elements; features by contract.
        unsafe {
            std::ptr::copy_nonoverlapping(a.add(i), x.as_mut_ptr(), m);
            std::ptr::copy_nonoverlapping(b.add(i), y.as_mut_ptr(), m);
            combine8::<O>(x.as_mut_ptr(), x.as_ptr(), y.as_ptr());
            std::ptr::copy_nonoverlapping(x.as_ptr(), d.add(i), m);
        }
    }
}

/// Dispatches `op` to [`run`].
///
/// # Safety
///
/// As for [`run`].
unsafe fn run_op(op: ReduceOp, d: *mut f16, a: *const f16, b: *const f16, n: usize) {
    // SAFETY: forwarded contract.
    unsafe {
        match op {
            ReduceOp::Sum => run::<Sum>(d, a, b, n),
            ReduceOp::Prod => run::<Prod>(d, a, b, n),
            ReduceOp::Max => run::<Max>(d, a, b, n),
            ReduceOp::Min => run::<Min>(d, a, b, n),
        }
    }
}

/// `dst[i] = op(dst[i], src[i])` for fp16 on F16C.
pub(super) fn f16_in_place(_: Avx2F16c, op: ReduceOp, dst: &mut [f16], src: &[f16]) {
    let n = dst.len().min(src.len());
    let d = dst.as_mut_ptr();
    // SAFETY: the token proves AVX2 and F16C; both slices hold `n` elements,
    // and a `&mut` and a `&` slice cannot overlap.
    unsafe { run_op(op, d, d, src.as_ptr(), n) }
}

/// `dst[i] = op(a[i], b[i])` for fp16 on F16C.
pub(super) fn f16_into(_: Avx2F16c, op: ReduceOp, dst: &mut [f16], a: &[f16], b: &[f16]) {
    let n = dst.len().min(a.len()).min(b.len());
    // SAFETY: the token proves AVX2 and F16C; all three slices hold `n`
    // elements, and `dst` (unique borrow) overlaps neither input.
    unsafe { run_op(op, dst.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n) }
}
