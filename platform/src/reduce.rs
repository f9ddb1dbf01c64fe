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

use crate::dtype::{DataType, Element, ReduceOp};
use crate::error::{HcclError, Result};
use half::{bf16, f16};
use std::any::TypeId;

/// Elements per chunk of the vectorised loops.
const LANES: usize = 64;

/// An element type that can be reduced: the scalar reference semantics.
///
/// Implemented for all twelve [`Element`] types (`i8`..`i64`, `u8`..`u64`,
/// [`struct@f16`], [`struct@bf16`], `f32`, `f64`); see the [module docs](self) for the
/// semantics of each operator.
pub trait Reducible: Element {
    /// Combines `a` and `b` with `op`. This is the reference semantics that
    /// the slice and byte kernels reproduce element by element.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

// ---------------------------------------------------------------------------
// Operators on lanes
// ---------------------------------------------------------------------------

/// One reduction operator on one lane type; zero-sized markers so that each
/// (type, op) pair gets its own monomorphised loop.
trait Op<T: Copy> {
    fn apply(a: T, b: T) -> T;
}

struct Sum;
struct Prod;
struct Max;
struct Min;

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl Op<$t> for Sum {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.wrapping_add(b) }
        }
        impl Op<$t> for Prod {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.wrapping_mul(b) }
        }
        impl Op<$t> for Max {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { if a > b { a } else { b } }
        }
        impl Op<$t> for Min {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { if a < b { a } else { b } }
        }
        impl Reducible for $t {
            #[inline]
            fn combine(op: ReduceOp, a: $t, b: $t) -> $t { apply_op(op, a, b) }
        }
    )*};
}

macro_rules! float_ops {
    ($($t:ty),*) => {$(
        impl Op<$t> for Sum {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a + b }
        }
        impl Op<$t> for Prod {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a * b }
        }
        impl Op<$t> for Max {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t {
                // `a > b` is false when either is NaN; the unordered test then
                // replaces the result by the canonical NaN (order-independent).
                let m = if a > b { a } else { b };
                if a.is_nan() | b.is_nan() { <$t>::NAN } else { m }
            }
        }
        impl Op<$t> for Min {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t {
                let m = if a < b { a } else { b };
                if a.is_nan() | b.is_nan() { <$t>::NAN } else { m }
            }
        }
        impl Reducible for $t {
            #[inline]
            fn combine(op: ReduceOp, a: $t, b: $t) -> $t { apply_op(op, a, b) }
        }
    )*};
}

int_ops!(i8, i16, i32, i64, u8, u16, u32, u64);
float_ops!(f32, f64);

/// Scalar dispatch on `op` (used by `combine` only, never inside a loop).
#[inline(always)]
fn apply_op<T: Copy>(op: ReduceOp, a: T, b: T) -> T
where
    Sum: Op<T>,
    Prod: Op<T>,
    Max: Op<T>,
    Min: Op<T>,
{
    match op {
        ReduceOp::Sum => <Sum as Op<T>>::apply(a, b),
        ReduceOp::Prod => <Prod as Op<T>>::apply(a, b),
        ReduceOp::Max => <Max as Op<T>>::apply(a, b),
        ReduceOp::Min => <Min as Op<T>>::apply(a, b),
    }
}

impl Reducible for f16 {
    #[inline]
    fn combine(op: ReduceOp, a: f16, b: f16) -> f16 {
        f16::from_f32(apply_op(op, a.to_f32(), b.to_f32()))
    }
}

impl Reducible for bf16 {
    #[inline]
    fn combine(op: ReduceOp, a: bf16, b: bf16) -> bf16 {
        bf16::from_f32(apply_op(op, a.to_f32(), b.to_f32()))
    }
}

// ---------------------------------------------------------------------------
// Branch-free (vectorisable) fp16/bf16 <-> f32 conversions
// ---------------------------------------------------------------------------

/// fp16 bits to f32, exact. Branch-free so that loops over it vectorise.
///
/// The fp16 sign, exponent and mantissa are moved into their f32 positions
/// (sign-extending shift, then masking off the copies of the sign), which
/// reads as the right value times 2^-112 for every finite input, subnormals
/// included; one exact multiplication by 2^112 rebiases it. Inputs with an
/// all-ones exponent (inf, NaN) then get the f32 exponent set to all ones,
/// keeping the mantissa (NaN payload).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    const SCALE: f32 = f32::from_bits((127 + 112) << 23); // 2^112
    let w = ((u32::from(h) << 16) as i32) >> 3; // s sss eeeee m(10) 0(13)
    let x = (w as u32) & 0x8fff_e000; // sign, exponent, mantissa
    let v = f32::from_bits(x) * SCALE;
    let inf_nan = if x & 0x0f80_0000 == 0x0f80_0000 {
        0x7f80_0000
    } else {
        0
    };
    f32::from_bits(v.to_bits() | inf_nan)
}

/// f32 to fp16 bits, round-to-nearest-even; overflow gives ±inf, NaN gives a
/// quiet NaN. Bit-identical to `half::f16::from_f32` for every non-NaN input.
///
/// The FPU does the rounding: `|f|` is scaled by 2^112 * 2^-110 (the first
/// product overflows to inf exactly when the fp16 result is inf, the second
/// cannot lose bits that fp16 keeps), then added to a power of two chosen so
/// that the sum's unit in the last place is the fp16 one (or the subnormal
/// one, for tiny values); the sum's exponent and top mantissa bits are then
/// the fp16 result.
#[inline(always)]
fn f32_to_f16(f: f32) -> u16 {
    const TO_INF: f32 = f32::from_bits((127 + 112) << 23); // 2^112
    const TO_ZERO: f32 = f32::from_bits((127 - 110) << 23); // 2^-110
    const MIN_BIAS: f32 = f32::from_bits(0x3880_0000); // 2^-14: fp16 subnormal ulp * 2^24 * 4
    let bits = f.to_bits();
    let abs = bits & 0x7fff_ffff;
    let base = (f32::from_bits(abs) * TO_INF) * TO_ZERO;
    let e = f32::from_bits(abs & 0x7f80_0000); // 2^exponent (or inf), never NaN
    let e = if e > MIN_BIAS { e } else { MIN_BIAS };
    let sum = f32::from_bits(e.to_bits() + 0x0780_0000) + base; // 2^(exponent + 15) + base
    let r = sum.to_bits();
    let nonsign = ((r >> 13) & 0x7c00) + (r & 0x0fff);
    let o = if abs > 0x7f80_0000 { 0x7e00 } else { nonsign };
    // All-ones above bit 15 when negative: keeps the result a sign-extended
    // 16-bit value, which the vectoriser narrows with a saturating pack (SSE2
    // `packssdw`) instead of shuffles.
    let sign = ((bits as i32) >> 16) & !0x7fff;
    (o as i32 | sign) as u16
}

/// bf16 bits to f32, exact.
#[inline(always)]
fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to bf16 bits, round-to-nearest-even; NaN stays NaN (quiet bit set).
/// Bit-identical to `half::bf16::from_f32`.
#[inline(always)]
fn f32_to_bf16(f: f32) -> u16 {
    // Computed on i32 with arithmetic shifts so the results are sign-extended
    // 16-bit values, which lets the vectoriser narrow them with a saturating
    // pack (SSE2 `packssdw`) instead of shuffles.
    let x = f.to_bits() as i32;
    let nan = (x >> 16) | 0x0040;
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let o = if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    };
    o as u16
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

/// The per-type kernels and byte access, implemented for the 12 element types.
trait Kernel: Reducible + Default {
    /// `dst[i] = op(dst[i], src[i])`; lengths already checked equal.
    fn in_place(op: ReduceOp, dst: &mut [Self], src: &[Self]);
    /// `dst[i] = op(a[i], b[i])`; lengths already checked equal.
    fn into(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]);
    /// Reads one element from `size_of::<Self>()` native-endian bytes.
    fn read(b: &[u8]) -> Self;
    /// Writes one element as `size_of::<Self>()` native-endian bytes.
    fn write(self, b: &mut [u8]);
}

#[inline(always)]
fn native_in_place<T: Copy, O: Op<T>>(dst: &mut [T], src: &[T]) {
    let mut dc = dst.chunks_exact_mut(LANES);
    let mut sc = src.chunks_exact(LANES);
    for (d, s) in (&mut dc).zip(&mut sc) {
        let d: &mut [T; LANES] = d.try_into().unwrap();
        let s: &[T; LANES] = s.try_into().unwrap();
        for (x, y) in d.iter_mut().zip(s) {
            *x = O::apply(*x, *y);
        }
    }
    for (x, y) in dc.into_remainder().iter_mut().zip(sc.remainder()) {
        *x = O::apply(*x, *y);
    }
}

#[inline(always)]
fn native_into<T: Copy, O: Op<T>>(dst: &mut [T], a: &[T], b: &[T]) {
    let mut dc = dst.chunks_exact_mut(LANES);
    let mut ac = a.chunks_exact(LANES);
    let mut bc = b.chunks_exact(LANES);
    for ((d, x), y) in (&mut dc).zip(&mut ac).zip(&mut bc) {
        let d: &mut [T; LANES] = d.try_into().unwrap();
        let x: &[T; LANES] = x.try_into().unwrap();
        let y: &[T; LANES] = y.try_into().unwrap();
        for ((d, x), y) in d.iter_mut().zip(x).zip(y) {
            *d = O::apply(*x, *y);
        }
    }
    let rem = dc
        .into_remainder()
        .iter_mut()
        .zip(ac.remainder())
        .zip(bc.remainder());
    for ((d, x), y) in rem {
        *d = O::apply(*x, *y);
    }
}

/// Runs `$body` with the type alias `$o` bound to the operator marker of `$op`.
macro_rules! with_op {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            ReduceOp::Sum => {
                type $o = Sum;
                $body
            }
            ReduceOp::Prod => {
                type $o = Prod;
                $body
            }
            ReduceOp::Max => {
                type $o = Max;
                $body
            }
            ReduceOp::Min => {
                type $o = Min;
                $body
            }
        }
    };
}

/// A 16-bit float type computed in f32, converted element by element with
/// the branch-free functions above (vectorises on any target).
trait Half: Copy {
    fn widen(self) -> f32;
    fn narrow(f: f32) -> Self;
}

impl Half for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f16_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn narrow(f: f32) -> f16 {
        f16::from_bits(f32_to_f16(f))
    }
}

impl Half for bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        bf16_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn narrow(f: f32) -> bf16 {
        bf16::from_bits(f32_to_bf16(f))
    }
}

/// Elements per chunk of the software 16-bit float paths (measured best of
/// 32..1024 elements).
const HALF_LANES: usize = 128;

/// One chunk of 16-bit floats: widen `a` and `b` into `x` and `y`, combine in
/// f32, narrow into `dst`. Separate simple loops (rather than one fused loop)
/// keep the loads of each chunk together, which measured ~2x faster on
/// buffers that do not fit in cache.
#[inline(always)]
fn half_chunk<H: Half, O: Op<f32>>(dst: &mut [H], a: &[H], b: &[H], x: &mut [f32], y: &mut [f32]) {
    for (x, a) in x.iter_mut().zip(a) {
        *x = a.widen();
    }
    for (y, b) in y.iter_mut().zip(b) {
        *y = b.widen();
    }
    for (x, y) in x.iter_mut().zip(y.iter()) {
        *x = O::apply(*x, *y);
    }
    for (d, x) in dst.iter_mut().zip(x.iter()) {
        *d = H::narrow(*x);
    }
}

/// `dst[i] = narrow(op(widen(dst[i]), widen(src[i])))`, in fixed-size chunks.
#[inline(always)]
fn half_in_place<H: Half, O: Op<f32>>(dst: &mut [H], src: &[H]) {
    let mut x = [0f32; HALF_LANES];
    let mut y = [0f32; HALF_LANES];
    let mut dc = dst.chunks_exact_mut(HALF_LANES);
    let mut sc = src.chunks_exact(HALF_LANES);
    for (d, s) in (&mut dc).zip(&mut sc) {
        let d: &mut [H; HALF_LANES] = d.try_into().unwrap();
        let s: &[H; HALF_LANES] = s.try_into().unwrap();
        let cur = *d;
        half_chunk::<H, O>(d, &cur, s, &mut x, &mut y);
    }
    for (x, y) in dc.into_remainder().iter_mut().zip(sc.remainder()) {
        *x = H::narrow(O::apply(x.widen(), y.widen()));
    }
}

/// `dst[i] = narrow(op(widen(a[i]), widen(b[i])))`, in fixed-size chunks.
#[inline(always)]
fn half_into<H: Half, O: Op<f32>>(dst: &mut [H], a: &[H], b: &[H]) {
    let mut x = [0f32; HALF_LANES];
    let mut y = [0f32; HALF_LANES];
    let mut dc = dst.chunks_exact_mut(HALF_LANES);
    let mut ac = a.chunks_exact(HALF_LANES);
    let mut bc = b.chunks_exact(HALF_LANES);
    for ((d, p), q) in (&mut dc).zip(&mut ac).zip(&mut bc) {
        let d: &mut [H; HALF_LANES] = d.try_into().unwrap();
        let p: &[H; HALF_LANES] = p.try_into().unwrap();
        let q: &[H; HALF_LANES] = q.try_into().unwrap();
        half_chunk::<H, O>(d, p, q, &mut x, &mut y);
    }
    let rem = dc
        .into_remainder()
        .iter_mut()
        .zip(ac.remainder())
        .zip(bc.remainder());
    for ((d, p), q) in rem {
        *d = H::narrow(O::apply(p.widen(), q.widen()));
    }
}

// ---------------------------------------------------------------------------
// bf16: two elements per 32-bit word
// ---------------------------------------------------------------------------

/// bf16 elements per chunk of the bf16 kernel.
const BF16_LANES: usize = 64;
/// 32-bit words per chunk of the bf16 kernel (two elements each).
const BF16_WORDS: usize = BF16_LANES / 2;

/// Adds the round-to-nearest-even bias for dropping the low 16 bits of the
/// f32 bit pattern `x`: the high 16 bits of the result are `x` rounded to
/// bf16 (overflow correctly carries into the exponent, up to infinity).
///
/// There is no NaN fix-up, unlike [`f32_to_bf16`]: the kernels only round
/// results of [`Op`]s on widened bf16 values, and such a NaN has its low 16
/// bits clear (Rust guarantees a NaN result is either the preferred NaN or
/// the (quietened) payload of an input NaN, and widened inputs have zero low
/// bits; max/min return `f32::NAN`). The bias then never reaches bit 16 and
/// the NaN's high half is returned unchanged: still a NaN, and the canonical
/// one for max/min.
#[inline(always)]
fn bf16_bias(x: u32) -> u32 {
    x.wrapping_add(0x7fff + ((x >> 16) & 1))
}

/// Combines two words of two bf16 each, lane by lane: the low halves as one
/// pair of operands, the high halves as another. Works in whichever order
/// the two elements are stored in the word (native endianness), since both
/// halves are treated alike and written back in the same place.
#[inline(always)]
fn bf16_word<O: Op<f32>>(a: u32, b: u32) -> u32 {
    const HI: u32 = 0xffff_0000;
    let lo = O::apply(f32::from_bits(a << 16), f32::from_bits(b << 16));
    let hi = O::apply(f32::from_bits(a & HI), f32::from_bits(b & HI));
    (bf16_bias(lo.to_bits()) >> 16) | (bf16_bias(hi.to_bits()) & HI)
}

/// A chunk of bf16 as 32-bit words.
#[inline(always)]
fn bf16_load(c: &[bf16; BF16_LANES]) -> [u32; BF16_WORDS] {
    // SAFETY: both types are `2 * BF16_LANES` bytes of plain old data (bf16 is
    // a `repr(transparent)` u16) for which every bit pattern is valid, and
    // `read_unaligned` has no alignment requirement.
    unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<[u32; BF16_WORDS]>()) }
}

/// Stores 32-bit words back over a chunk of bf16 (inverse of [`bf16_load`]).
#[inline(always)]
fn bf16_store(c: &mut [bf16; BF16_LANES], w: [u32; BF16_WORDS]) {
    // SAFETY: as in `bf16_load`; the destination is a unique borrow of
    // exactly that many bytes, and any bit pattern is a valid bf16.
    unsafe { std::ptr::write_unaligned(c.as_mut_ptr().cast::<[u32; BF16_WORDS]>(), w) }
}

/// `dst = op(a, b)` on one chunk.
#[inline(always)]
fn bf16_chunk<O: Op<f32>>(
    dst: &mut [bf16; BF16_LANES],
    a: &[bf16; BF16_LANES],
    b: &[bf16; BF16_LANES],
) {
    let (a, b) = (bf16_load(a), bf16_load(b));
    let mut w = [0u32; BF16_WORDS];
    for ((w, a), b) in w.iter_mut().zip(a).zip(b) {
        *w = bf16_word::<O>(a, b);
    }
    bf16_store(dst, w);
}

/// `dst[i] = op(dst[i], src[i])` for bf16. Portable; also compiled for AVX2
/// (see [`bf16_in_place_avx2`]).
#[inline(always)]
fn bf16_in_place_impl<O: Op<f32>>(dst: &mut [bf16], src: &[bf16]) {
    let mut dc = dst.chunks_exact_mut(BF16_LANES);
    let mut sc = src.chunks_exact(BF16_LANES);
    for (d, s) in (&mut dc).zip(&mut sc) {
        let d: &mut [bf16; BF16_LANES] = d.try_into().unwrap();
        let cur = *d;
        bf16_chunk::<O>(d, &cur, s.try_into().unwrap());
    }
    let (d, s) = (dc.into_remainder(), sc.remainder());
    if !d.is_empty() {
        // Pad the tail to a whole chunk (the padding lanes are discarded).
        let n = d.len();
        let mut x = [bf16::ZERO; BF16_LANES];
        let mut y = [bf16::ZERO; BF16_LANES];
        x[..n].copy_from_slice(d);
        y[..n].copy_from_slice(s);
        let cur = x;
        bf16_chunk::<O>(&mut x, &cur, &y);
        d.copy_from_slice(&x[..n]);
    }
}

/// `dst[i] = op(a[i], b[i])` for bf16. Portable; also compiled for AVX2.
#[inline(always)]
fn bf16_into_impl<O: Op<f32>>(dst: &mut [bf16], a: &[bf16], b: &[bf16]) {
    let mut dc = dst.chunks_exact_mut(BF16_LANES);
    let mut ac = a.chunks_exact(BF16_LANES);
    let mut bc = b.chunks_exact(BF16_LANES);
    for ((d, p), q) in (&mut dc).zip(&mut ac).zip(&mut bc) {
        bf16_chunk::<O>(
            d.try_into().unwrap(),
            p.try_into().unwrap(),
            q.try_into().unwrap(),
        );
    }
    let d = dc.into_remainder();
    if !d.is_empty() {
        let n = d.len();
        let mut x = [bf16::ZERO; BF16_LANES];
        let mut y = [bf16::ZERO; BF16_LANES];
        x[..n].copy_from_slice(ac.remainder());
        y[..n].copy_from_slice(bc.remainder());
        let mut z = [bf16::ZERO; BF16_LANES];
        bf16_chunk::<O>(&mut z, &x, &y);
        d.copy_from_slice(&z[..n]);
    }
}

/// The bf16 kernels compiled for AVX2 (same code, 256-bit vectors).
///
/// # Safety
///
/// The CPU must support AVX2.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2")]
unsafe fn bf16_in_place_avx2<O: Op<f32>>(dst: &mut [bf16], src: &[bf16]) {
    bf16_in_place_impl::<O>(dst, src);
}

/// See [`bf16_in_place_avx2`].
///
/// # Safety
///
/// The CPU must support AVX2.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2")]
unsafe fn bf16_into_avx2<O: Op<f32>>(dst: &mut [bf16], a: &[bf16], b: &[bf16]) {
    bf16_into_impl::<O>(dst, a, b);
}

/// Instruction-set choice of the bf16 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bf16Path {
    /// Baseline target features (SSE2 on x86-64).
    Portable,
    /// x86 AVX2, detected at run time.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    Avx2,
}

impl Bf16Path {
    /// The fastest path this CPU supports.
    fn detect() -> Bf16Path {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Bf16Path::Avx2;
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

/// `dst = op(dst, src)` for bf16 with an explicit path; `path` must be
/// supported by the CPU (as returned by [`Bf16Path::detect`]).
fn bf16_in_place(op: ReduceOp, dst: &mut [bf16], src: &[bf16], path: Bf16Path) {
    match path {
        Bf16Path::Portable => with_op!(op, O => bf16_in_place_impl::<O>(dst, src)),
        // SAFETY: the `Avx2` path is only chosen after detecting AVX2.
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Bf16Path::Avx2 => with_op!(op, O => unsafe { bf16_in_place_avx2::<O>(dst, src) }),
    }
}

/// `dst = op(a, b)` for bf16 with an explicit path (see [`bf16_in_place`]).
fn bf16_into(op: ReduceOp, dst: &mut [bf16], a: &[bf16], b: &[bf16], path: Bf16Path) {
    match path {
        Bf16Path::Portable => with_op!(op, O => bf16_into_impl::<O>(dst, a, b)),
        // SAFETY: the `Avx2` path is only chosen after detecting AVX2.
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Bf16Path::Avx2 => with_op!(op, O => unsafe { bf16_into_avx2::<O>(dst, a, b) }),
    }
}

// ---------------------------------------------------------------------------
// fp16
// ---------------------------------------------------------------------------

/// Instruction-set choice of the fp16 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum F16Path {
    /// Branch-free software conversion, baseline target features.
    Soft,
    /// `half`'s slice conversions (hardware FEAT_FP16 on aarch64; only
    /// tested elsewhere).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    Half,
    /// x86 F16C (`vcvtph2ps` / `vcvtps2ph`) with AVX, detected at run time.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    F16c,
}

impl F16Path {
    /// The fastest path this CPU supports.
    fn detect() -> F16Path {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return F16Path::F16c;
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

/// Elements per chunk of the `half` slice-conversion path (measured best of
/// 64..1024).
const HW_LANES: usize = 256;

/// One chunk of fp16 through `half`'s slice conversions: widen `a` and `b`
/// into `x` and `y`, combine in f32, narrow into `dst`.
#[inline(always)]
fn f16_half_chunk<O: Op<f32>>(dst: &mut [f16], a: &[f16], b: &[f16], x: &mut [f32], y: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    a.convert_to_f32_slice(x);
    b.convert_to_f32_slice(y);
    for (x, y) in x.iter_mut().zip(y.iter()) {
        *x = O::apply(*x, *y);
    }
    dst.convert_from_f32_slice(x);
}

fn f16_half_in_place<O: Op<f32>>(dst: &mut [f16], src: &[f16]) {
    let mut x = [0f32; HW_LANES];
    let mut y = [0f32; HW_LANES];
    let mut cur = [f16::ZERO; HW_LANES];
    for (d, s) in dst.chunks_mut(HW_LANES).zip(src.chunks(HW_LANES)) {
        let n = d.len();
        cur[..n].copy_from_slice(d);
        f16_half_chunk::<O>(d, &cur[..n], s, &mut x[..n], &mut y[..n]);
    }
}

fn f16_half_into<O: Op<f32>>(dst: &mut [f16], a: &[f16], b: &[f16]) {
    let mut x = [0f32; HW_LANES];
    let mut y = [0f32; HW_LANES];
    for ((d, a), b) in dst
        .chunks_mut(HW_LANES)
        .zip(a.chunks(HW_LANES))
        .zip(b.chunks(HW_LANES))
    {
        let n = d.len();
        f16_half_chunk::<O>(d, a, b, &mut x[..n], &mut y[..n]);
    }
}

/// fp16 kernels on x86 F16C: `vcvtph2ps` widens 8 elements exactly,
/// `vcvtps2ph` with `_MM_FROUND_TO_NEAREST_INT` narrows them with
/// round-to-nearest-even, bit-identical to `half::f16::from_f32` (which uses
/// the same instruction when F16C is available) and to [`f32_to_f16`]; the
/// f32 combine in between is plain Rust, vectorised with AVX.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod f16c {
    use super::{f16, Max, Min, Prod, Sum};
    use crate::dtype::ReduceOp;
    #[cfg(target_arch = "x86")]
    use std::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    /// Elements per vector.
    const V: usize = 8;
    /// Elements per unrolled step (independent vectors in flight).
    const STEP: usize = 8 * V;

    /// An operator on 8 f32 lanes, with exactly the semantics of the scalar
    /// [`super::Op`] of the same marker. (Explicit intrinsics: written as
    /// scalar code, LLVM turns max/min of two widened fp16 into a select of
    /// the fp16 bits followed by a second conversion.)
    pub(super) trait Op8 {
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
        let mut i = 0;
        // SAFETY (the three blocks below): every access is within the first
        // `n` elements of each buffer, which the caller guarantees are valid,
        // and each vector of `a` is read before the same elements of `d` are
        // written.
        while i + STEP <= n {
            for k in (0..STEP).step_by(V) {
                unsafe { combine8::<O>(d.add(i + k), a.add(i + k), b.add(i + k)) };
            }
            i += STEP;
        }
        while i + V <= n {
            unsafe { combine8::<O>(d.add(i), a.add(i), b.add(i)) };
            i += V;
        }
        if i < n {
            // Pad the tail to a whole vector (the padding lanes are discarded).
            let m = n - i;
            let mut x = [f16::ZERO; V];
            let mut y = [f16::ZERO; V];
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

    /// `dst[i] = op(dst[i], src[i])`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    pub(super) unsafe fn in_place(op: ReduceOp, dst: &mut [f16], src: &[f16]) {
        let n = dst.len().min(src.len());
        let d = dst.as_mut_ptr();
        // SAFETY: features by contract; both slices hold `n` elements, and a
        // `&mut` and a `&` slice cannot overlap.
        unsafe { run_op(op, d, d, src.as_ptr(), n) }
    }

    /// `dst[i] = op(a[i], b[i])`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    pub(super) unsafe fn into(op: ReduceOp, dst: &mut [f16], a: &[f16], b: &[f16]) {
        let n = dst.len().min(a.len()).min(b.len());
        // SAFETY: features by contract; all three slices hold `n` elements,
        // and `dst` (unique borrow) overlaps neither input.
        unsafe { run_op(op, dst.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n) }
    }
}

/// `dst = op(dst, src)` for fp16 with an explicit path; `path` must be
/// supported by the CPU (see [`F16Path::detect`]).
fn f16_in_place(op: ReduceOp, dst: &mut [f16], src: &[f16], path: F16Path) {
    match path {
        F16Path::Soft => with_op!(op, O => half_in_place::<f16, O>(dst, src)),
        F16Path::Half => with_op!(op, O => f16_half_in_place::<O>(dst, src)),
        // SAFETY: the `F16c` path is only chosen after detecting AVX2 and F16C.
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        F16Path::F16c => unsafe { f16c::in_place(op, dst, src) },
    }
}

/// `dst = op(a, b)` for fp16 with an explicit path (see [`f16_in_place`]).
fn f16_into(op: ReduceOp, dst: &mut [f16], a: &[f16], b: &[f16], path: F16Path) {
    match path {
        F16Path::Soft => with_op!(op, O => half_into::<f16, O>(dst, a, b)),
        F16Path::Half => with_op!(op, O => f16_half_into::<O>(dst, a, b)),
        // SAFETY: the `F16c` path is only chosen after detecting AVX2 and F16C.
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        F16Path::F16c => unsafe { f16c::into(op, dst, a, b) },
    }
}

macro_rules! kernel {
    ($in_place:ident, $into:ident; $($t:ty),*) => {$(
        impl Kernel for $t {
            fn in_place(op: ReduceOp, dst: &mut [$t], src: &[$t]) {
                match op {
                    ReduceOp::Sum => $in_place::<$t, Sum>(dst, src),
                    ReduceOp::Prod => $in_place::<$t, Prod>(dst, src),
                    ReduceOp::Max => $in_place::<$t, Max>(dst, src),
                    ReduceOp::Min => $in_place::<$t, Min>(dst, src),
                }
            }
            fn into(op: ReduceOp, dst: &mut [$t], a: &[$t], b: &[$t]) {
                match op {
                    ReduceOp::Sum => $into::<$t, Sum>(dst, a, b),
                    ReduceOp::Prod => $into::<$t, Prod>(dst, a, b),
                    ReduceOp::Max => $into::<$t, Max>(dst, a, b),
                    ReduceOp::Min => $into::<$t, Min>(dst, a, b),
                }
            }
            bytes_io!($t);
        }
    )*};
}

macro_rules! bytes_io {
    ($t:ty) => {
        #[inline(always)]
        fn read(b: &[u8]) -> $t {
            <$t>::from_ne_bytes(b.try_into().unwrap())
        }
        #[inline(always)]
        fn write(self, b: &mut [u8]) {
            b.copy_from_slice(&self.to_ne_bytes());
        }
    };
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

kernel!(native_in_place, native_into; i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

// ---------------------------------------------------------------------------
// Byte-level entry points
// ---------------------------------------------------------------------------

/// Reinterprets `bytes` as `[T]` where the address allows it.
///
/// Returns `None` unless the whole slice is aligned for `T` and a multiple of
/// its size (the caller has checked the latter).
fn typed<T: Kernel>(bytes: &[u8]) -> Option<&[T]> {
    // SAFETY: `T` is one of the 12 element types (integers, f32/f64, f16/bf16),
    // all plain old data without padding for which every bit pattern is a
    // valid value, so viewing initialised bytes as `T` is sound; `align_to`
    // itself guarantees the middle slice is correctly aligned and in bounds.
    let (pre, mid, post) = unsafe { bytes.align_to::<T>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// Mutable form of [`typed`].
fn typed_mut<T: Kernel>(bytes: &mut [u8]) -> Option<&mut [T]> {
    // SAFETY: as in `typed`: every bit pattern is a valid `T` and every `T`
    // written through the result is a valid sequence of initialised bytes, so
    // the `u8` view stays valid too.
    let (pre, mid, post) = unsafe { bytes.align_to_mut::<T>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// Copies `bytes` (a whole number of elements, at most `LANES`) into `buf`.
#[inline(always)]
fn load<T: Kernel>(buf: &mut [T; LANES], bytes: &[u8]) -> usize {
    let size = std::mem::size_of::<T>();
    let n = bytes.len() / size;
    for (v, b) in buf.iter_mut().zip(bytes.chunks_exact(size)) {
        *v = T::read(b);
    }
    n
}

/// Copies `vals` out to `bytes`.
#[inline(always)]
fn store<T: Kernel>(vals: &[T], bytes: &mut [u8]) {
    let size = std::mem::size_of::<T>();
    for (v, b) in vals.iter().zip(bytes.chunks_exact_mut(size)) {
        v.write(b);
    }
}

fn bytes_in_place<T: Kernel>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    if let Some(s) = typed::<T>(src) {
        if let Some(d) = typed_mut::<T>(dst) {
            T::in_place(op, d, s);
            return;
        }
    }
    tracing::trace!(dtype = %T::DTYPE, %op, bytes = dst.len(), "reduce: misaligned buffer, copying path");
    let chunk = LANES * std::mem::size_of::<T>();
    let mut x = [T::default(); LANES];
    let mut y = [T::default(); LANES];
    for (d, s) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
        let n = load(&mut x, d);
        load(&mut y, s);
        T::in_place(op, &mut x[..n], &y[..n]);
        store(&x[..n], d);
    }
}

fn bytes_into<T: Kernel>(op: ReduceOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
    if let (Some(a), Some(b)) = (typed::<T>(a), typed::<T>(b)) {
        if let Some(d) = typed_mut::<T>(dst) {
            T::into(op, d, a, b);
            return;
        }
    }
    tracing::trace!(dtype = %T::DTYPE, %op, bytes = dst.len(), "reduce: misaligned buffer, copying path");
    let chunk = LANES * std::mem::size_of::<T>();
    let mut x = [T::default(); LANES];
    let mut y = [T::default(); LANES];
    let mut z = [T::default(); LANES];
    for ((d, a), b) in dst
        .chunks_mut(chunk)
        .zip(a.chunks(chunk))
        .zip(b.chunks(chunk))
    {
        let n = load(&mut x, a);
        load(&mut y, b);
        T::into(op, &mut z[..n], &x[..n], &y[..n]);
        store(&z[..n], d);
    }
}

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
// Typed entry points
// ---------------------------------------------------------------------------

/// `s` as a slice of `U`, which must be the same type as `T`.
fn same_type<T: 'static, U: 'static>(s: &[T]) -> &[U] {
    assert!(
        TypeId::of::<T>() == TypeId::of::<U>(),
        "Element::DTYPE does not match the type"
    );
    // SAFETY: `T` and `U` have equal `TypeId`s, so they are the same type and
    // this is an identity cast (same layout, length and lifetime).
    unsafe { &*(s as *const [T] as *const [U]) }
}

/// Mutable form of [`same_type`].
fn same_type_mut<T: 'static, U: 'static>(s: &mut [T]) -> &mut [U] {
    assert!(
        TypeId::of::<T>() == TypeId::of::<U>(),
        "Element::DTYPE does not match the type"
    );
    // SAFETY: as in `same_type`: identity cast of a uniquely borrowed slice.
    unsafe { &mut *(s as *mut [T] as *mut [U]) }
}

fn typed_in_place<U: Kernel, T: Reducible>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    U::in_place(op, same_type_mut::<T, U>(dst), same_type::<T, U>(src));
}

fn typed_into<U: Kernel, T: Reducible>(op: ReduceOp, dst: &mut [T], a: &[T], b: &[T]) {
    U::into(
        op,
        same_type_mut::<T, U>(dst),
        same_type::<T, U>(a),
        same_type::<T, U>(b),
    );
}

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
    dispatch!(T::DTYPE, U => typed_in_place::<U, T>(op, dst, src));
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
    dispatch!(T::DTYPE, U => typed_into::<U, T>(op, dst, a, b));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HcclResult;

    /// Deterministic xorshift64* generator.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// Test data for one element type.
    trait TestElem: Kernel {
        /// Values that must be exercised: zeros, extremes, inf, NaN, subnormals.
        fn edges() -> Vec<Self>;
        /// An arbitrary value from random bits.
        fn random(r: u64) -> Self;
        fn is_nan(self) -> bool {
            false
        }
        fn is_zero(self) -> bool;
    }

    macro_rules! test_int {
        ($($t:ty),*) => {$(
            impl TestElem for $t {
                fn edges() -> Vec<$t> {
                    vec![0, 1, 2, <$t>::MAX, <$t>::MIN, <$t>::MAX - 1, <$t>::MIN.wrapping_add(1),
                         (0 as $t).wrapping_sub(1), 3, 127, 100]
                }
                fn random(r: u64) -> $t {
                    // Mostly small magnitudes (products stay interesting), sometimes any bits.
                    if r & 1 == 0 { (r >> 8) as $t } else { ((r >> 8) % 19) as $t }
                }
                fn is_zero(self) -> bool {
                    self == 0
                }
            }
        )*};
    }
    test_int!(i8, i16, i32, i64, u8, u16, u32, u64);

    macro_rules! test_float {
        ($($t:ty, $bits:ty, $from:expr, $nan:expr);*) => {$(
            impl TestElem for $t {
                fn edges() -> Vec<$t> {
                    let f = $from;
                    let b = <$t>::from_bits;
                    vec![f(0.0), f(-0.0), f(1.0), f(-1.0), f(0.5), f(1.5), f(3.0),
                         <$t>::INFINITY, <$t>::NEG_INFINITY, <$t>::NAN, $nan,
                         <$t>::MAX, <$t>::MIN, <$t>::MIN_POSITIVE, -<$t>::MIN_POSITIVE,
                         b(1), b(2), b(3), b(<$t>::MIN_POSITIVE.to_bits() - 1),
                         <$t>::EPSILON, f(1.0) + <$t>::EPSILON]
                }
                fn random(r: u64) -> $t {
                    match r & 3 {
                        // any bit pattern: NaNs, infinities, subnormals, ...
                        0 => <$t>::from_bits((r >> 8) as $bits),
                        // moderate values with rounding work to do
                        1 => ($from)((((r >> 8) % 20001) as f64 - 10000.0) / 64.0),
                        // small exact values
                        _ => ($from)((((r >> 8) % 9) as f64) - 4.0),
                    }
                }
                fn is_nan(self) -> bool {
                    <$t>::is_nan(self)
                }
                fn is_zero(self) -> bool {
                    self.to_bits() << 1 == 0
                }
            }
        )*};
    }
    test_float!(
        f32, u32, |x: f64| x as f32, f32::from_bits(0xffc1_2345);
        f64, u64, |x: f64| x, f64::from_bits(0xfff8_0000_0000_1234);
        f16, u16, f16::from_f64, f16::from_bits(0xfe01);
        bf16, u16, bf16::from_f64, bf16::from_bits(0xffc1)
    );

    const LENGTHS: [usize; 11] = [0, 1, 15, 16, 17, 63, 64, 65, 129, 1000, 4099];

    fn data<T: TestElem>(len: usize, seed: u64) -> Vec<T> {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let edges = T::edges();
        (0..len)
            .map(|_| {
                let r = rng.next();
                if r & 3 == 0 {
                    edges[(r >> 16) as usize % edges.len()]
                } else {
                    T::random(rng.next())
                }
            })
            .collect()
    }

    fn to_bytes<T: Kernel>(v: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; std::mem::size_of_val(v)];
        store(v, &mut out);
        out
    }

    fn from_bytes<T: Kernel>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(std::mem::size_of::<T>())
            .map(T::read)
            .collect()
    }

    /// A buffer holding `bytes` at an address that is aligned for `T` when
    /// `mis == 0` and misaligned by `mis` bytes otherwise.
    struct Placed {
        buf: Vec<u8>,
        off: usize,
        len: usize,
    }

    impl Placed {
        fn new<T>(bytes: &[u8], mis: usize) -> Placed {
            let align = std::mem::align_of::<T>();
            let mut buf = vec![0u8; bytes.len() + 2 * align + 1];
            let base = buf.as_ptr() as usize;
            let off = (align - base % align) % align + mis;
            buf[off..off + bytes.len()].copy_from_slice(bytes);
            Placed {
                buf,
                off,
                len: bytes.len(),
            }
        }
        fn get(&self) -> &[u8] {
            &self.buf[self.off..self.off + self.len]
        }
        fn get_mut(&mut self) -> &mut [u8] {
            &mut self.buf[self.off..self.off + self.len]
        }
    }

    fn same<T: TestElem>(op: ReduceOp, got: T, want: T) -> bool {
        if got.is_nan() || want.is_nan() {
            return got.is_nan() && want.is_nan();
        }
        if matches!(op, ReduceOp::Max | ReduceOp::Min) && got.is_zero() && want.is_zero() {
            return true;
        }
        to_bytes(&[got]) == to_bytes(&[want])
    }

    fn check<T: TestElem>(what: &str, op: ReduceOp, a: &[T], b: &[T], got: &[T]) {
        assert_eq!(got.len(), a.len(), "{what}");
        for i in 0..a.len() {
            let want = T::combine(op, a[i], b[i]);
            assert!(
                same(op, got[i], want),
                "{what}: {} {op} element {i} of {}: combine({:?}, {:?}) = {:?}, kernel gave {:?}",
                T::DTYPE,
                a.len(),
                a[i],
                b[i],
                want,
                got[i]
            );
        }
    }

    fn exhaustive<T: TestElem>() {
        let align = std::mem::align_of::<T>();
        let mis_options: &[usize] = if align > 1 { &[0, 1] } else { &[0] };
        for op in ReduceOp::ALL {
            for (k, &len) in LENGTHS.iter().enumerate() {
                let a = data::<T>(len, 1000 + k as u64);
                let b = data::<T>(len, 2000 + k as u64);
                let (ab, bb) = (to_bytes(&a), to_bytes(&b));
                let name = |f: &str, m: &[usize]| format!("{f} len {len} misalign {m:?}");

                // typed forms
                let mut d = a.clone();
                reduce_slice_in_place(op, &mut d, &b);
                check(&name("reduce_slice_in_place", &[]), op, &a, &b, &d);
                let mut d = vec![T::default(); len];
                reduce_slice_into(op, &mut d, &a, &b);
                check(&name("reduce_slice_into", &[]), op, &a, &b, &d);

                // byte forms, every alignment combination
                for &md in mis_options {
                    for &ms in mis_options {
                        let mut dst = Placed::new::<T>(&ab, md);
                        let src = Placed::new::<T>(&bb, ms);
                        reduce_in_place(T::DTYPE, op, dst.get_mut(), src.get()).unwrap();
                        let got = from_bytes::<T>(dst.get());
                        check(&name("reduce_in_place", &[md, ms]), op, &a, &b, &got);
                        for &mb in mis_options {
                            let mut dst = Placed::new::<T>(&vec![0xa5; ab.len()], md);
                            let pa = Placed::new::<T>(&ab, ms);
                            let pb = Placed::new::<T>(&bb, mb);
                            reduce_into(T::DTYPE, op, dst.get_mut(), pa.get(), pb.get()).unwrap();
                            let got = from_bytes::<T>(dst.get());
                            check(&name("reduce_into", &[md, ms, mb]), op, &a, &b, &got);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn all_types_and_ops_match_combine() {
        exhaustive::<i8>();
        exhaustive::<i16>();
        exhaustive::<i32>();
        exhaustive::<i64>();
        exhaustive::<u8>();
        exhaustive::<u16>();
        exhaustive::<u32>();
        exhaustive::<u64>();
        exhaustive::<f16>();
        exhaustive::<bf16>();
        exhaustive::<f32>();
        exhaustive::<f64>();
    }

    #[test]
    fn f16_and_bf16_paths_match_combine() {
        for op in ReduceOp::ALL {
            for (k, &len) in LENGTHS.iter().enumerate() {
                let a = data::<f16>(len, 3000 + k as u64);
                let b = data::<f16>(len, 4000 + k as u64);
                for path in F16Path::available() {
                    let what = format!("f16 {path:?} len {len}");
                    let mut d = a.clone();
                    f16_in_place(op, &mut d, &b, path);
                    check(&what, op, &a, &b, &d);
                    let mut d = vec![f16::ZERO; len];
                    f16_into(op, &mut d, &a, &b, path);
                    check(&what, op, &a, &b, &d);
                }
                let a = data::<bf16>(len, 5000 + k as u64);
                let b = data::<bf16>(len, 6000 + k as u64);
                for path in Bf16Path::available() {
                    let what = format!("bf16 {path:?} len {len}");
                    let mut d = a.clone();
                    bf16_in_place(op, &mut d, &b, path);
                    check(&what, op, &a, &b, &d);
                    let mut d = vec![bf16::ZERO; len];
                    bf16_into(op, &mut d, &a, &b, path);
                    check(&what, op, &a, &b, &d);
                }
            }
        }
    }

    /// Partner operands for every 16-bit input `a`: fixed edge values,
    /// scrambled other inputs (all pairs classes, NaN payloads included),
    /// and exact fractions of `a`'s ulp, so that sums hit every rounding
    /// case (ties to even and odd, just below and above ties, carries into
    /// the exponent and up to infinity, subnormal results).
    fn partners_16(to_f32: fn(u16) -> f32, from_f32: fn(f32) -> u16) -> Vec<(String, Vec<u16>)> {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut sets: Vec<(String, Vec<u16>)> = Vec::new();
        for c in [
            0x0000, 0x8000, 0x0001, 0x8001, 0x7fff, 0xffff, 0x7c00, 0xfc00,
        ] {
            sets.push((format!("const {c:#06x}"), vec![c; all.len()]));
        }
        for (k, c) in [(40_503u32, 1u32), (7, 12_345), (65_535, 0), (257, 3)] {
            let v = all.iter().map(|&a| (u32::from(a) * k + c) as u16).collect();
            sets.push((format!("scrambled {k} {c}"), v));
        }
        for frac in [0.5f32, 0.25, 0.75, 0.5 + 1.0 / 64.0, 1.0, 1.5] {
            let v = all
                .iter()
                .map(|&a| {
                    let x = to_f32(a);
                    let next = to_f32(a.wrapping_add(1) & 0x7fff | (a & 0x8000));
                    from_f32((next - x) * frac)
                })
                .collect();
            sets.push((format!("ulp * {frac}"), v));
        }
        sets
    }

    #[test]
    fn f16_kernels_match_combine_on_all_inputs() {
        let a: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let sets = partners_16(
            |h| f16::from_bits(h).to_f32(),
            |f| f16::from_f32(f).to_bits(),
        );
        for (name, b) in sets {
            let b: Vec<f16> = b.into_iter().map(f16::from_bits).collect();
            for op in ReduceOp::ALL {
                for path in F16Path::available() {
                    let what = format!("f16 {path:?} all inputs, b = {name}");
                    let mut d = a.clone();
                    f16_in_place(op, &mut d, &b, path);
                    check(&what, op, &a, &b, &d);
                    let mut d = vec![f16::ZERO; a.len()];
                    f16_into(op, &mut d, &b, &a, path);
                    check(&what, op, &b, &a, &d);
                }
            }
        }
    }

    #[test]
    fn bf16_kernels_match_combine_on_all_inputs() {
        let a: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let sets = partners_16(
            |h| bf16::from_bits(h).to_f32(),
            |f| bf16::from_f32(f).to_bits(),
        );
        for (name, b) in sets {
            let b: Vec<bf16> = b.into_iter().map(bf16::from_bits).collect();
            for op in ReduceOp::ALL {
                for path in Bf16Path::available() {
                    let what = format!("bf16 {path:?} all inputs, b = {name}");
                    let mut d = a.clone();
                    bf16_in_place(op, &mut d, &b, path);
                    check(&what, op, &a, &b, &d);
                    let mut d = vec![bf16::ZERO; a.len()];
                    bf16_into(op, &mut d, &b, &a, path);
                    check(&what, op, &b, &a, &d);
                }
            }
        }
    }

    #[test]
    fn max_min_return_the_canonical_nan() {
        let nan16 = [0x7c01u16, 0xfc01, 0x7e00, 0xfe00, 0x7fff, 0xffff];
        let nanb = [0x7f81u16, 0xff81, 0x7fc0, 0xffc0, 0x7fff, 0xffff];
        for op in [ReduceOp::Max, ReduceOp::Min] {
            for &n in &nan16 {
                for other in [0u16, 0x3c00, 0xfc00, n] {
                    let a = vec![f16::from_bits(n); 37];
                    let b = vec![f16::from_bits(other); 37];
                    for path in F16Path::available() {
                        for (x, y) in [(&a, &b), (&b, &a)] {
                            let mut d = x.clone();
                            f16_in_place(op, &mut d, y, path);
                            assert!(
                                d.iter().all(|v| v.to_bits() == f16::NAN.to_bits()),
                                "{path:?} {op} {n:#x} {other:#x}: {d:?}"
                            );
                        }
                    }
                }
            }
            for &n in &nanb {
                for other in [0u16, 0x3f80, 0xff80, n] {
                    let a = vec![bf16::from_bits(n); 37];
                    let b = vec![bf16::from_bits(other); 37];
                    for path in Bf16Path::available() {
                        for (x, y) in [(&a, &b), (&b, &a)] {
                            let mut d = x.clone();
                            bf16_in_place(op, &mut d, y, path);
                            assert!(
                                d.iter().all(|v| v.to_bits() == bf16::NAN.to_bits()),
                                "{path:?} {op} {n:#x} {other:#x}: {d:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn aligned_buffers_take_the_fast_path() {
        let p = Placed::new::<f64>(&[0u8; 64], 0);
        assert!(typed::<f64>(p.get()).is_some());
        let p = Placed::new::<f64>(&[0u8; 64], 1);
        assert!(typed::<f64>(p.get()).is_none());
        let p = Placed::new::<u8>(&[0u8; 7], 0);
        assert!(typed::<u8>(p.get()).is_some());
    }

    #[test]
    fn integer_semantics() {
        assert_eq!(i32::combine(ReduceOp::Sum, i32::MAX, 1), i32::MIN);
        assert_eq!(u8::combine(ReduceOp::Sum, 255, 3), 2);
        assert_eq!(i8::combine(ReduceOp::Prod, 16, 16), 0);
        assert_eq!(i8::combine(ReduceOp::Prod, -128, -1), -128);
        assert_eq!(u64::combine(ReduceOp::Prod, u64::MAX, u64::MAX), 1);
        assert_eq!(i16::combine(ReduceOp::Max, -5, 3), 3);
        assert_eq!(i16::combine(ReduceOp::Min, -5, 3), -5);
        assert_eq!(u32::combine(ReduceOp::Min, 0, u32::MAX), 0);
        let mut d = [i64::MAX, 7];
        reduce_slice_in_place(ReduceOp::Sum, &mut d, &[1, -8]);
        assert_eq!(d, [i64::MIN, -1]);
    }

    #[test]
    fn float_semantics() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        assert!(f32::combine(ReduceOp::Sum, inf, -inf).is_nan());
        assert!(f32::combine(ReduceOp::Prod, 0.0, inf).is_nan());
        assert_eq!(f32::combine(ReduceOp::Sum, f32::MAX, f32::MAX), inf);
        assert_eq!(f64::combine(ReduceOp::Sum, 0.1, 0.2), 0.1 + 0.2);
        let tiny = f32::from_bits(1);
        assert_eq!(
            f32::combine(ReduceOp::Sum, tiny, tiny).to_bits(),
            2,
            "no flush-to-zero"
        );
        for op in [ReduceOp::Max, ReduceOp::Min] {
            assert!(f32::combine(op, nan, 1.0).is_nan(), "{op}(NaN, 1)");
            assert!(f32::combine(op, 1.0, nan).is_nan(), "{op}(1, NaN)");
            assert!(f32::combine(op, nan, inf).is_nan(), "{op}(NaN, inf)");
            assert!(f64::combine(op, -f64::INFINITY, f64::NAN).is_nan());
            assert!(f16::combine(op, f16::NAN, f16::ONE).is_nan());
            assert!(bf16::combine(op, bf16::ONE, bf16::NAN).is_nan());
            // order-independent, bit for bit
            let x = f32::from_bits(0x7fc0_1234);
            let y = f32::from_bits(0xffc0_0001);
            assert_eq!(
                f32::combine(op, x, y).to_bits(),
                f32::combine(op, y, x).to_bits()
            );
            // kernels agree
            let mut d = [nan, 1.0, 2.0, -inf];
            reduce_slice_in_place(op, &mut d, &[1.0, nan, 3.0, 0.0]);
            assert!(d[0].is_nan() && d[1].is_nan());
            assert_eq!(d[2], if op == ReduceOp::Max { 3.0 } else { 2.0 });
            assert_eq!(d[3], if op == ReduceOp::Max { 0.0 } else { -inf });
        }
        assert_eq!(f32::combine(ReduceOp::Max, -1.0, -2.0), -1.0);
        assert_eq!(f32::combine(ReduceOp::Min, -inf, inf), -inf);
        assert_eq!(f32::combine(ReduceOp::Max, 0.0, -0.0), 0.0); // either sign allowed
    }

    #[test]
    fn half_precision_rounds_once_from_f32() {
        let h = f16::from_f32;
        // 2048 + 1 = 2049 is a tie between 2048 and 2050: even mantissa wins.
        assert_eq!(f16::combine(ReduceOp::Sum, h(2048.0), h(1.0)), h(2048.0));
        assert_eq!(f16::combine(ReduceOp::Sum, h(2050.0), h(1.0)), h(2052.0));
        assert_eq!(
            f16::combine(ReduceOp::Sum, f16::MAX, f16::MAX),
            f16::INFINITY
        );
        assert_eq!(
            f16::combine(ReduceOp::Prod, h(300.0), h(300.0)),
            f16::INFINITY
        );
        let sub = f16::from_bits(1); // smallest subnormal
        assert_eq!(f16::combine(ReduceOp::Sum, sub, sub).to_bits(), 2);
        // product underflows to the nearest subnormal / zero
        assert_eq!(
            f16::combine(ReduceOp::Prod, sub, h(0.5)).to_bits(),
            0,
            "tie to even 0"
        );
        assert_eq!(
            f16::combine(ReduceOp::Prod, sub, h(1.5)).to_bits(),
            2,
            "tie to even 2"
        );
        assert!(f16::combine(ReduceOp::Sum, f16::INFINITY, f16::NEG_INFINITY).is_nan());
        let b = bf16::from_f32;
        // bf16 has 8 significant bits: 256 + 1 ties to 256, 258 + 1 to 260.
        assert_eq!(bf16::combine(ReduceOp::Sum, b(256.0), b(1.0)), b(256.0));
        assert_eq!(bf16::combine(ReduceOp::Sum, b(258.0), b(1.0)), b(260.0));
        assert_eq!(
            bf16::combine(ReduceOp::Sum, bf16::MAX, bf16::MAX),
            bf16::INFINITY
        );
        // the kernels round the same way
        let mut d = [h(2048.0); 70];
        reduce_slice_in_place(ReduceOp::Sum, &mut d, &[h(1.0); 70]);
        assert!(d.iter().all(|&x| x == h(2048.0)));
    }

    #[test]
    fn f16_conversions_match_half() {
        for bits in 0..=u16::MAX {
            let want = f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}");
            }
            let (want, got) = (bf16::from_bits(bits).to_f32(), bf16_to_f32(bits));
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}");
            }
        }
        // f32 -> 16 bits: a dense sample of all f32 bit patterns, plus the
        // neighbourhood of every f16 / bf16 rounding boundary.
        let check = |x: u32| {
            let f = f32::from_bits(x);
            let (want, got) = (f16::from_f32(f), f16::from_bits(f32_to_f16(f)));
            if f.is_nan() {
                assert!(got.is_nan(), "{x:#010x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "f16 from {f:e} ({x:#010x})");
            }
            let (want, got) = (bf16::from_f32(f), f32_to_bf16(f));
            assert_eq!(got, want.to_bits(), "bf16 from {f:e} ({x:#010x})");
            // The kernels' rounding (no NaN fix-up): exact for every
            // non-NaN, and NaN stays NaN when its low 16 bits are clear, as
            // for every NaN the kernels' ops produce.
            let got = (bf16_bias(x) >> 16) as u16;
            if !f.is_nan() {
                assert_eq!(
                    got,
                    want.to_bits(),
                    "bf16 kernel rounding of {f:e} ({x:#010x})"
                );
            } else if x & 0xffff == 0 {
                assert!(
                    bf16::from_bits(got).is_nan(),
                    "bf16 kernel rounding of {x:#010x}"
                );
            }
        };
        for x in (0..=u32::MAX).step_by(997) {
            check(x);
        }
        for bits in 0..=u16::MAX {
            let mid = f16::from_bits(bits).to_f32().to_bits();
            let bmid = u32::from(bits) << 16;
            for d in 0..=0x2000u32 {
                if d & 63 == 0 || !(16..=0x1ff0).contains(&d) {
                    for base in [mid, bmid] {
                        check(base.wrapping_add(d));
                        check(base.wrapping_sub(d));
                    }
                }
            }
        }
    }

    #[test]
    fn length_errors() {
        let mut d = [0u8; 8];
        let e = reduce_in_place(DataType::Fp32, ReduceOp::Sum, &mut d, &[0u8; 12]).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        let m = e.to_string();
        assert!(
            m.contains("dst is 8 bytes") && m.contains("src is 12 bytes"),
            "{m}"
        );
        assert!(m.contains("fp32") && m.contains("reduce_in_place"), "{m}");

        let mut d = [1u8; 6];
        let e = reduce_in_place(DataType::Fp32, ReduceOp::Max, &mut d, &[0u8; 6]).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        let m = e.to_string();
        assert!(
            m.contains("length 6 bytes is not a multiple of the fp32 element size (4 bytes; 2 bytes left over)"),
            "{m}"
        );
        assert_eq!(d, [1u8; 6], "dst untouched on error");

        let mut d = [0u8; 16];
        let e = reduce_into(
            DataType::Int64,
            ReduceOp::Sum,
            &mut d,
            &[0u8; 16],
            &[0u8; 8],
        )
        .unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        let m = e.to_string();
        assert!(
            m.contains("b is 8 bytes") && m.contains("int64") && m.contains("reduce_into"),
            "{m}"
        );
        let e = reduce_into(
            DataType::Bf16,
            ReduceOp::Sum,
            &mut [0u8; 3],
            &[0u8; 3],
            &[0u8; 3],
        )
        .unwrap_err();
        assert!(e
            .to_string()
            .contains("length 3 bytes is not a multiple of the bf16 element size (2 bytes; 1 bytes left over)"));

        // empty buffers are fine
        reduce_in_place(DataType::Fp64, ReduceOp::Sum, &mut [], &[]).unwrap();
        reduce_into(DataType::Int8, ReduceOp::Min, &mut [], &[], &[]).unwrap();
    }

    #[test]
    #[should_panic(expected = "reduce_slice_in_place: dst has 2 elements but src has 3 (fp32)")]
    fn typed_length_mismatch_panics() {
        reduce_slice_in_place(ReduceOp::Sum, &mut [0f32; 2], &[0f32; 3]);
    }

    #[test]
    #[should_panic(expected = "reduce_slice_into: dst has 2 elements, a 2, b 1 (uint16)")]
    fn typed_into_length_mismatch_panics() {
        reduce_slice_into(ReduceOp::Sum, &mut [0u16; 2], &[0u16; 2], &[0u16; 1]);
    }
}
