//! Large copies with non-temporal (streaming) stores: `nt_copy`, not to be
//! confused with the platform's streams (task queues).
//!
//! A copy far larger than the caches gains nothing from pulling its
//! destination into them: with ordinary stores every destination line is
//! first read from memory (read-for-ownership), then written back, three
//! memory transfers per line copied. Streaming stores write whole lines
//! straight to memory, two transfers per line, and leave the cache to the
//! data that is reused. Copies from [`NT_MIN`] bytes on (user blocks
//! moved by the direct executors, never the small staging copies whose
//! destination a peer reads next) take this path on x86-64 with AVX2.

/// Copies of at least this many bytes stream their stores: well past the
/// per-core L2 and a fair share of L3, so the destination would not stay
/// cached anyway.
pub(crate) const NT_MIN: usize = 4 << 20;

/// Copies `len` bytes from `src` to `dst` with streaming stores where the
/// CPU has them; `false` when it does not (the caller copies instead).
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and
/// the two ranges must not overlap.
pub(crate) unsafe fn copy_nt(dst: *mut u8, src: *const u8, len: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked above); the caller's
            // contract covers the ranges.
            unsafe { copy_avx2(dst, src, len) };
            return true;
        }
    }
    let _ = (dst, src, len);
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_avx2(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::*;
    // ordinary copy up to a 32-byte-aligned destination (streaming stores
    // need aligned addresses), then 128 bytes per step, then the tail
    let head = dst.align_offset(32).min(len);
    // SAFETY: every access below stays inside the first `len` bytes of
    // `src` and `dst` (the caller's contract); the stores go to
    // 32-byte-aligned addresses (dst + head is aligned).
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let (mut s, mut d) = (src.add(head), dst.add(head));
        let mut left = len - head;
        while left >= 128 {
            let a = _mm256_loadu_si256(s as *const __m256i);
            let b = _mm256_loadu_si256(s.add(32) as *const __m256i);
            let c = _mm256_loadu_si256(s.add(64) as *const __m256i);
            let e = _mm256_loadu_si256(s.add(96) as *const __m256i);
            _mm256_stream_si256(d as *mut __m256i, a);
            _mm256_stream_si256(d.add(32) as *mut __m256i, b);
            _mm256_stream_si256(d.add(64) as *mut __m256i, c);
            _mm256_stream_si256(d.add(96) as *mut __m256i, e);
            s = s.add(128);
            d = d.add(128);
            left -= 128;
        }
        std::ptr::copy_nonoverlapping(s, d, left);
        // streaming stores are weakly ordered: make them visible before
        // whatever signals the copy done
        _mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copy_is_exact_at_every_alignment_and_tail() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for (s_off, d_off, len) in [
            (0, 0, 0),
            (1, 3, 127),
            (5, 0, 128),
            (3, 17, 4099),
            (0, 31, 19_000),
        ] {
            let mut dst = vec![0xeeu8; 20_100];
            // SAFETY: both ranges are inside their vectors and distinct.
            let done =
                unsafe { copy_nt(dst.as_mut_ptr().add(d_off), src.as_ptr().add(s_off), len) };
            if !done {
                return; // no AVX2: nothing to test
            }
            assert_eq!(
                &dst[d_off..d_off + len],
                &src[s_off..s_off + len],
                "{s_off} {d_off} {len}"
            );
            assert!(dst[..d_off].iter().all(|&b| b == 0xee));
            assert!(dst[d_off + len..].iter().all(|&b| b == 0xee));
        }
    }
}
