//! Where data sits: per-rank slices of a buffer, consecutive groups of
//! bytes, per-rank windows of an op-base round, and the op-base loop
//! itself (HCCL's `RunLoop`: user data staged through the CCL buffers in
//! rounds).

use crate::op::OpParam;
use crate::resource::AlgResourceResponse;
use hccl_platform::{DataType, DeviceMem, HcclError, ReduceOp, Result, Stream};
use std::cell::RefCell;
use std::sync::Arc;

/// Slice boundaries are multiples of this many bytes (a multiple of every
/// element size, and the cache-line pair size that keeps peers' writes apart).
pub const SLICE_ALIGN: usize = 128;

/// Upper bound on the bytes an op-base round stages at once. Rounds this
/// small keep the staging copies, transfers and reductions of a round in
/// cache instead of streaming the whole message through DRAM several times
/// (measured: 32 MiB allreduce between two processes 2.0 → 3.2 GB/s bus
/// bandwidth going from a 200 MiB round to 1 MiB; 256 KiB–1 MiB is flat).
pub const PIPELINE_CHUNK_BYTES: usize = 1 << 20;

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
        let per = split_size(bytes, parts);
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

    /// [`Slice::split`], shared: a thread that asks for the same split
    /// again gets the same table. The plan simulator builds one ring per
    /// rank, all cut alike; a table each would be p² slices (4 GiB at
    /// 16,384 ranks).
    pub fn split_shared(bytes: usize, parts: usize) -> Arc<[Slice]> {
        /// The last split: bytes, parts, table.
        type Last = Option<(usize, usize, Arc<[Slice]>)>;
        thread_local! {
            static LAST: RefCell<Last> = const { RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some((b, n, t)) if *b == bytes && *n == parts => t.clone(),
                _ => {
                    let t: Arc<[Slice]> = Slice::split(bytes, parts).into();
                    *last = Some((bytes, parts, t.clone()));
                    t
                }
            }
        })
    }

    /// This slice of `mem`.
    pub fn of(&self, mem: &DeviceMem) -> Result<DeviceMem> {
        mem.range(self.offset, self.len)
    }
}

/// The size of each of `parts` (at least 1) slices of [`Slice::split`].
fn split_size(bytes: usize, parts: usize) -> usize {
    bytes.div_ceil(parts).div_ceil(SLICE_ALIGN) * SLICE_ALIGN
}

/// Slot slices for a round: p slots of `w` elements of `u` bytes each.
pub fn slots(p: u64, w: u64, u: u64) -> Vec<Slice> {
    (0..p)
        .map(|k| Slice {
            offset: (k * w * u) as usize,
            len: (w * u) as usize,
        })
        .collect()
}

/// [`slots`], shared: a thread that asks for the same slots again gets
/// the same table (see [`Slice::split_shared`]).
pub fn slots_shared(p: u64, w: u64, u: u64) -> Arc<[Slice]> {
    /// The last table: p, w, u, slots.
    type Last = Option<((u64, u64, u64), Arc<[Slice]>)>;
    thread_local! {
        static LAST: RefCell<Last> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((k, t)) if *k == (p, w, u) => t.clone(),
            _ => {
                let t: Arc<[Slice]> = slots(p, w, u).into();
                *last = Some(((p, w, u), t.clone()));
                t
            }
        }
    })
}

/// Consecutive groups of bytes of a buffer: group g is bytes
/// `[b[g], b[g + 1])` (the core groups of RHD, the blocks of NHR/NB).
///
/// The layouts the executors cut a buffer into (equal slices, equal
/// slots, RHD's groups of two sizes) compute a group's offset instead of
/// tabulating all of them: a rank of a p-rank plan asks for O(log p)
/// ranges, and a p-entry table per rank was O(p²) work for the simulator.
#[derive(Clone, Debug)]
pub struct Groups(Bounds);

#[derive(Clone, Debug)]
enum Bounds {
    /// Any sizes: the boundaries, tabulated.
    Table(Vec<usize>),
    /// `n` groups, the first `big` of `a` bytes and the rest of `b`,
    /// every boundary capped at `total`.
    Formula {
        n: u32,
        big: u32,
        a: usize,
        b: usize,
        total: usize,
    },
}

impl Groups {
    /// Groups from consecutive slices.
    pub fn from_slices(slices: &[Slice]) -> Self {
        Self::from_sizes(slices.iter().map(|s| s.len))
    }

    /// Consecutive groups of the given sizes.
    pub fn from_sizes(sizes: impl IntoIterator<Item = usize>) -> Self {
        let mut b = vec![0];
        for len in sizes {
            b.push(b[b.len() - 1] + len);
        }
        Groups(Bounds::Table(b))
    }

    /// The groups of [`Slice::split`]`(bytes, parts)`, computed.
    pub fn split(bytes: usize, parts: usize) -> Self {
        let parts = parts.max(1);
        let per = split_size(bytes, parts);
        Self::two_sizes(parts as u32, 0, (per, per), bytes)
    }

    /// The groups of [`slots`]`(p, w, u)`: p groups of `w · u` bytes, computed.
    pub fn slots(p: u64, w: u64, u: u64) -> Self {
        let len = (w * u) as usize;
        Self::two_sizes(p as u32, 0, (len, len), len * p as usize)
    }

    /// `n` groups, the first `big` of `a` bytes and the others of `b`
    /// (RHD's group-major layout), computed.
    pub fn two_sizes(n: u32, big: u32, (a, b): (usize, usize), total: usize) -> Self {
        Groups(Bounds::Formula {
            n,
            big: big.min(n),
            a,
            b,
            total,
        })
    }

    /// The boundary before group `g` (`g == n`: the end).
    fn bound(&self, g: u32) -> usize {
        match &self.0 {
            Bounds::Table(t) => t[g as usize],
            &Bounds::Formula {
                n,
                big,
                a,
                b,
                total,
            } => {
                // out of range panics, as the table's index does
                assert!(g <= n, "group {g} of {n}");
                let small = g.saturating_sub(big) as usize;
                (g.min(big) as usize * a + small * b).min(total)
            }
        }
    }

    /// Offset and length of groups `lo..hi`.
    pub fn range(&self, lo: u32, hi: u32) -> (usize, usize) {
        let (a, b) = (self.bound(lo), self.bound(hi));
        (a, b - a)
    }

    /// Offset of group `g`.
    pub fn start(&self, g: u32) -> usize {
        self.bound(g)
    }
}

/// Bytes one op-base round of an executor that works in both CCL buffers
/// may stage: what both hold, capped at [`PIPELINE_CHUNK_BYTES`].
pub fn round_capacity(res: &AlgResourceResponse) -> usize {
    res.ccl_input
        .len()
        .min(res.ccl_output.len())
        .min(PIPELINE_CHUNK_BYTES)
}

/// Elements per rank block that one op-base round moves: p blocks of `u`
/// bytes each must fit both CCL buffers (and the round-size cap that
/// keeps a round in cache).
pub fn per_rank_window(res: &AlgResourceResponse, p: u64, u: u64) -> Result<u64> {
    let cap = round_capacity(res) as u64;
    let n = cap / (p * u);
    if n == 0 {
        // `p` counts blocks: one per rank, or several (the pipeline's
        // reduce-scatter stages a copy of every block per host)
        return Err(HcclError::para(format!(
            "an op-base round holds at most {cap} bytes (the smaller CCL buffer, capped at \
             {PIPELINE_CHUNK_BYTES}), less than one {u}-byte element of each of its {p} blocks \
             ({} bytes)",
            p * u
        )));
    }
    Ok(n)
}

/// One chunk of the op: element range and byte range in the user buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Index of the chunk.
    pub index: u64,
    /// First element of the chunk.
    pub first: u64,
    /// Elements in the chunk.
    pub count: u64,
    /// Byte offset of the chunk in the user buffers.
    pub offset: usize,
    /// Bytes in the chunk.
    pub bytes: usize,
}

/// Calls `body` for each chunk of `param.count` elements that fits
/// `chunk_capacity` bytes of CCL buffer (whole elements). `body` enqueues the
/// staging copies and the algorithm for its chunk.
pub fn run_op_base_loop(
    param: &OpParam,
    res: &AlgResourceResponse,
    chunk_capacity: usize,
    mut body: impl FnMut(Chunk, &AlgResourceResponse) -> Result<()>,
) -> Result<()> {
    for chunk in OpBaseChunks::new(param, chunk_capacity)? {
        tracing::trace!(tag = %param.tag, ?chunk, "op-base chunk");
        body(chunk, res)?;
    }
    Ok(())
}

/// The chunks of [`run_op_base_loop`], one at a time (for plans issued a
/// stage at a time: see [`crate::StagedOp`]).
#[derive(Clone, Debug)]
pub struct OpBaseChunks {
    unit: u64,
    per_chunk: u64,
    count: u64,
    first: u64,
    index: u64,
}

impl OpBaseChunks {
    /// The chunks of `param.count` elements that fit `chunk_capacity`
    /// bytes of CCL buffer (whole elements); an error if not one does.
    pub fn new(param: &OpParam, chunk_capacity: usize) -> Result<Self> {
        let unit = param.dtype.size() as u64;
        let per_chunk = chunk_capacity as u64 / unit;
        if per_chunk == 0 {
            return Err(HcclError::para(format!(
                "the CCL buffer ({chunk_capacity} bytes) cannot hold one {} element",
                param.dtype
            ))
            .tag(&**param.tag));
        }
        Ok(OpBaseChunks {
            unit,
            per_chunk,
            count: param.count,
            first: 0,
            index: 0,
        })
    }
}

impl Iterator for OpBaseChunks {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        if self.first >= self.count {
            return None;
        }
        let count = self.per_chunk.min(self.count - self.first);
        let chunk = Chunk {
            index: self.index,
            first: self.first,
            count,
            offset: (self.first * self.unit) as usize,
            bytes: (count * self.unit) as usize,
        };
        self.first += count;
        self.index += 1;
        Some(chunk)
    }
}

/// What an op-base plan issued a round at a time (see
/// [`crate::StagedOp`]) stages through the CCL buffers: the user buffers,
/// the CCL input and output, and the rounds still to come. Each round
/// copies its chunk of the user input into the CCL input and, at its end,
/// its result from the CCL output into the user output.
pub(crate) struct OpBaseIo {
    pub stream: Stream,
    pub input: DeviceMem,
    pub output: DeviceMem,
    /// The CCL input and output.
    pub ccl: (DeviceMem, DeviceMem),
    pub how: (DataType, ReduceOp),
    chunks: OpBaseChunks,
}

impl OpBaseIo {
    /// `param`'s buffers and rounds, staged through `res`'s CCL buffers.
    pub(crate) fn new(param: &OpParam, res: &AlgResourceResponse) -> Result<Self> {
        Ok(OpBaseIo {
            stream: param.stream.clone().into_owned(),
            input: param.input.clone().into_owned(),
            output: param.output.clone().into_owned(),
            ccl: (res.ccl_input.clone(), res.ccl_output.clone()),
            how: (param.dtype, param.reduce_op),
            chunks: OpBaseChunks::new(param, round_capacity(res))?,
        })
    }

    /// The next round, its chunk of the user input copied into the CCL
    /// input: the chunk and its bytes in the CCL input and output.
    pub(crate) fn next_round(&mut self) -> Result<Option<(Chunk, DeviceMem, DeviceMem)>> {
        let Some(chunk) = self.chunks.next() else {
            return Ok(None);
        };
        let cin = self.ccl.0.range(0, chunk.bytes)?;
        let cout = self.ccl.1.range(0, chunk.bytes)?;
        let input = self.input.range(chunk.offset, chunk.bytes)?;
        self.stream.memcpy_async(&cin, &input)?;
        Ok(Some((chunk, cin, cout)))
    }

    /// Ends `chunk`'s round: its result, in the CCL output, copied into
    /// the user output.
    pub(crate) fn copy_out(&self, chunk: &Chunk) -> Result<()> {
        let out = self.output.range(chunk.offset, chunk.bytes)?;
        self.stream
            .memcpy_async(&out, &self.ccl.1.range(0, chunk.bytes)?)
    }
}

/// One round of an op that moves one window per rank block: elements
/// `first..first + len` of every rank's block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Index of the round.
    pub index: u64,
    /// First element of the window in each rank block.
    pub first: u64,
    /// Elements in the window.
    pub len: u64,
}

/// The op-base loop of the executors that move one window per rank block
/// (`count` elements each, `p` blocks of `u`-byte elements): `round` for
/// each window that fits [`per_rank_window`].
pub fn run_per_rank_rounds(
    res: &AlgResourceResponse,
    (p, count, u): (u64, u64, u64),
    mut round: impl FnMut(Window) -> Result<()>,
) -> Result<()> {
    for w in PerRankWindows::new(res, (p, count, u))? {
        round(w)?;
    }
    Ok(())
}

/// The windows of [`run_per_rank_rounds`], one at a time (for plans
/// issued a stage at a time: see [`crate::StagedOp`]).
#[derive(Clone, Debug)]
pub struct PerRankWindows {
    /// Elements per window, elements per rank block, next window.
    n: u64,
    count: u64,
    index: u64,
}

impl PerRankWindows {
    /// The windows of `count` elements per rank block (p blocks of `u`
    /// bytes each) that fit [`per_rank_window`].
    pub fn new(res: &AlgResourceResponse, (p, count, u): (u64, u64, u64)) -> Result<Self> {
        Ok(PerRankWindows {
            n: per_rank_window(res, p, u)?,
            count,
            index: 0,
        })
    }
}

impl Iterator for PerRankWindows {
    type Item = Window;

    fn next(&mut self) -> Option<Window> {
        let first = self.index * self.n;
        if first >= self.count {
            return None;
        }
        let w = Window {
            index: self.index,
            first,
            len: self.n.min(self.count - first),
        };
        self.index += 1;
        Some(w)
    }
}

/// Where block i of a run sits in a buffer: `base + i · stride` bytes.
pub type Strided<'a> = (&'a DeviceMem, usize, usize);

/// Enqueues the copies of `n` blocks of `len` bytes, block i from `src`
/// to `dst` (each [`Strided`]). When both strides are `len` the blocks are
/// one contiguous run on both sides and move in one copy (an op-base
/// AllGather or ReduceScatter whose round holds whole rank blocks: one
/// task instead of p, the same bytes); otherwise one copy per block.
pub fn copy_blocks(
    s: &Stream,
    n: u32,
    len: usize,
    (dst, dst_base, dst_stride): Strided<'_>,
    (src, src_base, src_stride): Strided<'_>,
) -> Result<()> {
    if n == 0 || len == 0 {
        return Ok(());
    }
    if dst_stride == len && src_stride == len {
        let all = n as usize * len;
        return s.memcpy_async(&dst.range(dst_base, all)?, &src.range(src_base, all)?);
    }
    for i in 0..n as usize {
        s.memcpy_async(
            &dst.range(dst_base + i * dst_stride, len)?,
            &src.range(src_base + i * src_stride, len)?,
        )?;
    }
    Ok(())
}

/// On a one-rank communicator every op this crate's executors run is a copy
/// of the first `bytes` of the input to the output; enqueues it (nothing
/// when they are the same memory).
pub fn copy_through(param: &OpParam, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let (src, dst) = (param.input.range(0, bytes)?, param.output.range(0, bytes)?);
    if !src.same_range(&dst) {
        param.stream.memcpy_async(&dst, &src)?;
    }
    Ok(())
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

    /// The computed layouts are the tabulated ones, boundary for boundary.
    #[test]
    fn computed_groups_match_their_tables() {
        let same = |g: &Groups, t: &Groups, n: u32| {
            for lo in 0..=n {
                for hi in lo..=n {
                    assert_eq!(g.range(lo, hi), t.range(lo, hi), "{g:?} {lo}..{hi}");
                }
            }
        };
        for bytes in [0usize, 1, 28, 128, 129, 1000, 4097 * 4] {
            for parts in 1..=9 {
                let t = Groups::from_slices(&Slice::split(bytes, parts));
                same(&Groups::split(bytes, parts), &t, parts as u32);
            }
        }
        for (p, w, u) in [(1u64, 3u64, 4u64), (5, 1, 2), (7, 16, 4), (3, 0, 4)] {
            let t = Groups::from_slices(&slots(p, w, u));
            same(&Groups::slots(p, w, u), &t, p as u32);
        }
        for (n, big, a, b) in [(4u32, 0u32, 8usize, 4usize), (4, 3, 8, 4), (8, 8, 2, 1)] {
            let t = Groups::from_sizes((0..n).map(|g| if g < big { a } else { b }));
            let total = big as usize * a + (n - big) as usize * b;
            same(&Groups::two_sizes(n, big, (a, b), total), &t, n);
        }
    }

    #[test]
    fn groups_cover_their_sizes() {
        let g = Groups::from_sizes([3, 0, 5]);
        assert_eq!(g.range(0, 3), (0, 8));
        assert_eq!(g.range(1, 2), (3, 0));
        assert_eq!(g.start(2), 3);
    }
}
