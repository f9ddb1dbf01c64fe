//! The reduction semantics per element type and operator, and the portable
//! kernels: the operator markers ([`Sum`], [`Prod`], [`Max`], [`Min`]), the
//! scalar reference [`Reducible::combine`] of every type, the chunked loops
//! of the native (integer, f32, f64) types, and the byte-level entry points
//! that view aligned buffers in place or copy misaligned ones through stack
//! buffers.

use super::Reducible;
use crate::dtype::{Element, ReduceOp};
use half::{bf16, f16};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Elements per chunk of the vectorised loops.
pub(super) const LANES: usize = 64;

// Operators on lanes
// ---------------------------------------------------------------------------

/// One reduction operator on one lane type; zero-sized markers so that each
/// (type, op) pair gets its own monomorphised loop.
pub(super) trait Op<T: Copy> {
    /// `op(a, b)` with the semantics of the module docs.
    fn apply(a: T, b: T) -> T;
}

/// Marker of [`ReduceOp::Sum`].
pub(super) struct Sum;
/// Marker of [`ReduceOp::Prod`].
pub(super) struct Prod;
/// Marker of [`ReduceOp::Max`].
pub(super) struct Max;
/// Marker of [`ReduceOp::Min`].
pub(super) struct Min;

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
pub(super) fn apply_op<T: Copy>(op: ReduceOp, a: T, b: T) -> T
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

// Kernels
// ---------------------------------------------------------------------------

/// The per-type kernels and byte access, implemented for the 12 element types.
///
/// A supertrait of [`Reducible`] (which is how the typed entry points reach
/// the kernel of `T` without a cast), but `pub` only in this private module:
/// outside the crate it can be neither named nor implemented, which keeps
/// the set of element types closed. The zerocopy bounds let the byte entry
/// points view aligned buffers as `[Self]` without `unsafe`.
pub trait Kernel: Element + Default + FromBytes + IntoBytes + Immutable + KnownLayout {
    /// `dst[i] = op(dst[i], src[i])`; lengths already checked equal.
    fn in_place(op: ReduceOp, dst: &mut [Self], src: &[Self]);
    /// `dst[i] = op(a[i], b[i])`; lengths already checked equal.
    fn into(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]);
    /// Reads one element from `size_of::<Self>()` native-endian bytes.
    fn read(b: &[u8]) -> Self;
    /// Writes one element as `size_of::<Self>()` native-endian bytes.
    fn write(self, b: &mut [u8]);
}

/// `dst[i] = op(dst[i], src[i])` for the native types, in fixed-size chunks.
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

/// `dst[i] = op(a[i], b[i])` for the native types, in fixed-size chunks.
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
            $crate::dtype::ReduceOp::Sum => {
                type $o = $crate::reduce::ops::Sum;
                $body
            }
            $crate::dtype::ReduceOp::Prod => {
                type $o = $crate::reduce::ops::Prod;
                $body
            }
            $crate::dtype::ReduceOp::Max => {
                type $o = $crate::reduce::ops::Max;
                $body
            }
            $crate::dtype::ReduceOp::Min => {
                type $o = $crate::reduce::ops::Min;
                $body
            }
        }
    };
}
pub(super) use with_op;

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

/// The native-endian [`Kernel::read`] and [`Kernel::write`] of `$t`.
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
pub(super) use bytes_io;

kernel!(native_in_place, native_into; i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// Reinterprets `bytes` as `[T]` where the address allows it.
///
/// Returns `None` unless the whole slice is aligned for `T` and a multiple of
/// its size (the caller has checked the latter).
pub(super) fn typed<T: Kernel>(bytes: &[u8]) -> Option<&[T]> {
    // zerocopy checks alignment and size; every bit pattern is a valid `T`.
    <[T]>::ref_from_bytes(bytes).ok()
}

/// Mutable form of [`typed`].
fn typed_mut<T: Kernel>(bytes: &mut [u8]) -> Option<&mut [T]> {
    <[T]>::mut_from_bytes(bytes).ok()
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
pub(super) fn store<T: Kernel>(vals: &[T], bytes: &mut [u8]) {
    let size = std::mem::size_of::<T>();
    for (v, b) in vals.iter().zip(bytes.chunks_exact_mut(size)) {
        v.write(b);
    }
}

/// `dst = op(dst, src)` on bytes holding `T`s (any alignment).
pub(super) fn bytes_in_place<T: Kernel>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
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

/// `dst = op(a, b)` on bytes holding `T`s (any alignment).
pub(super) fn bytes_into<T: Kernel>(op: ReduceOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
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
