//! Result checking: a reference reduction independent of the library's
//! kernels, and input patterns whose reductions are exact in every type.

use half::{bf16, f16};
use hccl_adapter::{Element, Fp8E4M3, Fp8E5M2, Fp8E8M0, Hif8, ReduceOp};

/// An element type with the checker's own reference arithmetic.
pub trait CheckElem: Element + Default + PartialOrd {
    /// A small test value.
    fn from_i8(v: i8) -> Self;
    /// The reference combine: wrapping for integers, f32 math for halves.
    fn reference(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl CheckElem for $t {
            fn from_i8(v: i8) -> Self { v as $t }
            fn reference(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
int_elem!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl CheckElem for $t {
            fn from_i8(v: i8) -> Self { v as $t }
            fn reference(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
float_elem!(f32, f64);

macro_rules! half_elem {
    ($($t:ty),*) => {$(
        impl CheckElem for $t {
            fn from_i8(v: i8) -> Self { <$t>::from_f32(v as f32) }
            fn reference(op: ReduceOp, a: Self, b: Self) -> Self {
                let (x, y) = (a.to_f32(), b.to_f32());
                <$t>::from_f32(match op {
                    ReduceOp::Sum => x + y,
                    ReduceOp::Prod => x * y,
                    ReduceOp::Max => x.max(y),
                    ReduceOp::Min => x.min(y),
                })
            }
        }
    )*};
}
half_elem!(f16, bf16);

macro_rules! fp8_elem {
    ($($t:ty),*) => {$(
        impl CheckElem for $t {
            /// Bytes 0x31..=0x35 for the checker's values -2..=2 (values
            /// -50..=50 give 0x01..=0x65): positive finite numbers in every
            /// FP8 format (no NaN or infinity pattern), compared as bytes.
            fn from_i8(v: i8) -> Self { <$t>::from_bits((v as i16 + 51) as u8) }
            fn reference(op: ReduceOp, _: Self, _: Self) -> Self {
                unreachable!("{} is never reduced ({op} refused before any op runs)", <$t>::DTYPE)
            }
        }
    )*};
}
fp8_elem!(Hif8, Fp8E4M3, Fp8E5M2, Fp8E8M0);

/// Rank `rank`'s input element `i` for op `op`: small values whose sums and
/// products over up to 8 ranks are exact in every float type (so the result
/// does not depend on reduction order; more ranks may round), and wrap
/// deterministically in integer types.
pub fn input_value<T: CheckElem>(op: ReduceOp, rank: u32, i: usize) -> T {
    let k = (i.wrapping_mul(7) + rank as usize * 3) % 5;
    let v: i8 = match op {
        // float products: powers of two, |x| <= 2^8 over 8 ranks, exact
        // even in bf16; integer products use larger factors so that small
        // integer types overflow and the wrapping semantics are exercised.
        ReduceOp::Prod if T::DTYPE.is_float() => [1, 2, 1, -1, -2][k],
        ReduceOp::Prod => [1, 3, -1, 5, 2][k],
        _ => k as i8 - 2,
    };
    let unsigned = T::from_i8(-1) > T::from_i8(0);
    T::from_i8(if unsigned { v.abs() } else { v })
}

/// The reference result of reducing every rank's input element `i`.
pub fn expected_value<T: CheckElem>(op: ReduceOp, ranks: u32, i: usize) -> T {
    (1..ranks).fold(input_value::<T>(op, 0, i), |acc, r| {
        T::reference(op, acc, input_value::<T>(op, r, i))
    })
}
