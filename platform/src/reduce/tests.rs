//! Tests of the reduce kernels: every type, operator, length and alignment
//! against [`Reducible::combine`], every fp16 / bf16 path on all 65536
//! inputs, and the semantics and error messages the module docs promise.

use super::half::{bf16_bias, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use super::ops::{store, typed};
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
trait TestElem: Reducible {
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
    assert!(e.to_string().contains(
        "length 3 bytes is not a multiple of the bf16 element size (2 bytes; 1 bytes left over)"
    ));

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
