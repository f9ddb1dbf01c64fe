//! Splitting a buffer into per-rank slices aligned to 128 bytes.

/// Slice boundaries are multiples of this many bytes (a multiple of every
/// element size, and the cache-line pair size that keeps peers' writes apart).
pub const SLICE_ALIGN: usize = 128;

/// A byte range of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Offset in bytes.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Slice {
    /// Splits `bytes` into `parts` slices of equal 128-byte-aligned size
    /// (the tail slices may be shorter or empty).
    pub fn split(bytes: usize, parts: usize) -> Vec<Slice> {
        let parts = parts.max(1);
        let per = bytes.div_ceil(parts).div_ceil(SLICE_ALIGN) * SLICE_ALIGN;
        (0..parts)
            .map(|i| {
                let offset = (i * per).min(bytes);
                Slice {
                    offset,
                    len: per.min(bytes - offset),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_buffer_aligned() {
        for bytes in [0usize, 1, 28, 128, 129, 4097 * 4, 1 << 20] {
            for parts in 1..=9 {
                let s = Slice::split(bytes, parts);
                assert_eq!(s.len(), parts);
                assert_eq!(s.iter().map(|s| s.len).sum::<usize>(), bytes);
                let mut next = 0;
                for sl in &s {
                    assert_eq!(sl.offset, next);
                    assert!(sl.offset % SLICE_ALIGN == 0 || sl.len == 0);
                    next += sl.len;
                }
            }
        }
    }
}
