//! The portable half-precision (fp16 / bf16) kernels: branch-free
//! conversions to and from f32, the software path that widens, combines in
//! f32 and narrows back chunk by chunk, bf16 two elements per 32-bit word,
//! and fp16 through `half`'s slice conversions (FEAT_FP16 on aarch64).
//!
//! Which path runs is chosen in the parent module; the x86 builds of these
//! loops (AVX2, F16C) are in `x86.rs`.

use super::ops::Op;
use half::{bf16, f16};

// ---------------------------------------------------------------------------
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
pub(super) fn f16_to_f32(h: u16) -> f32 {
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
pub(super) fn f32_to_f16(f: f32) -> u16 {
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
pub(super) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to bf16 bits, round-to-nearest-even; NaN stays NaN (quiet bit set).
/// Bit-identical to `half::bf16::from_f32`.
#[inline(always)]
pub(super) fn f32_to_bf16(f: f32) -> u16 {
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
// Software path: widen, combine in f32, narrow
// ---------------------------------------------------------------------------

/// A 16-bit float type computed in f32, converted element by element with
/// the branch-free functions above (vectorises on any target).
pub(super) trait Half: Copy {
    /// The exact f32 value.
    fn widen(self) -> f32;
    /// `f` rounded to nearest, ties to even.
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
pub(super) fn half_in_place<H: Half, O: Op<f32>>(dst: &mut [H], src: &[H]) {
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
pub(super) fn half_into<H: Half, O: Op<f32>>(dst: &mut [H], a: &[H], b: &[H]) {
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
pub(super) fn bf16_bias(x: u32) -> u32 {
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
    // A by-value reinterpretation of the same bytes (zerocopy checks at
    // compile time that the sizes match and that every bit pattern is valid).
    zerocopy::transmute!(*c)
}

/// Stores 32-bit words back over a chunk of bf16 (inverse of [`bf16_load`]).
#[inline(always)]
fn bf16_store(c: &mut [bf16; BF16_LANES], w: [u32; BF16_WORDS]) {
    *c = zerocopy::transmute!(w);
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
/// (`x86::bf16_in_place`).
#[inline(always)]
pub(super) fn bf16_in_place_impl<O: Op<f32>>(dst: &mut [bf16], src: &[bf16]) {
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
pub(super) fn bf16_into_impl<O: Op<f32>>(dst: &mut [bf16], a: &[bf16], b: &[bf16]) {
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

// ---------------------------------------------------------------------------
// fp16 through `half`'s slice conversions
// ---------------------------------------------------------------------------

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

/// `dst = op(dst, src)` for fp16 through `half`'s slice conversions.
pub(super) fn f16_half_in_place<O: Op<f32>>(dst: &mut [f16], src: &[f16]) {
    let mut x = [0f32; HW_LANES];
    let mut y = [0f32; HW_LANES];
    let mut cur = [f16::ZERO; HW_LANES];
    for (d, s) in dst.chunks_mut(HW_LANES).zip(src.chunks(HW_LANES)) {
        let n = d.len();
        cur[..n].copy_from_slice(d);
        f16_half_chunk::<O>(d, &cur[..n], s, &mut x[..n], &mut y[..n]);
    }
}

/// `dst = op(a, b)` for fp16 through `half`'s slice conversions.
pub(super) fn f16_half_into<O: Op<f32>>(dst: &mut [f16], a: &[f16], b: &[f16]) {
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
