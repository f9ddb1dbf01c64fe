//! [`DeviceMem`]: a handle to a byte range of a region; [`DeviceBuffer`]: its typed form.

use crate::dtype::{DataType, Element, ReduceOp};
use crate::error::{HcclError, Result};
use crate::mem::import::MemHandle;
use crate::mem::region::{Region, RegionKind};
use crate::mem::shareable::Mark;
use crate::mem::shm::ShmSegment;
use crate::sync::{Arc, Weak};
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A byte range of a memory region: what tasks read and write.
///
/// Cloning is cheap (a reference count). The bytes are reached by tasks on
/// streams; the host reads and writes them with the `copy_*` methods, which
/// refuse while a task that references the region is still queued or running.
#[derive(Clone)]
pub struct DeviceMem {
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

/// A range of memory named without being kept: a cache that remembers
/// which buffer an op ran on ([`DeviceMem::downgrade`]) must not keep
/// the user's freed buffer mapped. While the weak handle lives, no other
/// region can take its region's place, so [`WeakMem::is`] never mistakes
/// a new allocation at the same address for the old one.
#[derive(Clone, Debug)]
pub struct WeakMem {
    region: Weak<Region>,
    offset: usize,
    len: usize,
}

impl WeakMem {
    /// Whether `m` is exactly this range (of the same, still living,
    /// region).
    pub fn is(&self, m: &DeviceMem) -> bool {
        std::ptr::eq(self.region.as_ptr(), Arc::as_ptr(&m.region))
            && self.offset == m.offset
            && self.len == m.len
    }
}

impl std::fmt::Debug for DeviceMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMem")
            .field("region", &self.region)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceMem {
    /// `len` zeroed bytes of private host memory.
    pub fn alloc(len: usize) -> Result<DeviceMem> {
        Ok(Self::whole(Region::host(len)?))
    }

    /// `len` zeroed bytes of private host memory that, unlike [`alloc`],
    /// never asks for transparent huge pages: for large buffers of which
    /// only a little is touched (the plan simulator gives each of 1,024
    /// ranks 4 MiB CCL buffers and uses a few KiB of them; with huge pages
    /// every touched buffer costs a zeroed, resident 2 MiB page).
    ///
    /// [`alloc`]: DeviceMem::alloc
    pub fn alloc_sparse(len: usize) -> Result<DeviceMem> {
        Ok(Self::whole(Region::host_sparse(len)?))
    }

    /// `len` zeroed bytes of *shareable* host memory: peer processes of
    /// this host can map it (through a [`MemHandle`] from
    /// [`share_handle`](Self::share_handle)) and then read and write it
    /// directly. Backed by a memfd, which has no name: nothing appears in
    /// `/dev/shm` and nothing outlives the processes. User buffers
    /// ([`DeviceBuffer`], the C ABI's `aclrtMalloc`) are shareable; a
    /// communicator may only register shareable memory.
    pub fn alloc_shareable(len: usize) -> Result<DeviceMem> {
        let region = crate::sync::Arc::new(Region::shareable(len)?);
        Region::publish_local(&region);
        Ok(Self::of_region(region))
    }

    /// The whole of `region`.
    pub(crate) fn of_region(region: Arc<Region>) -> DeviceMem {
        let len = region.len();
        DeviceMem {
            region,
            offset: 0,
            len,
        }
    }

    /// Whether peer processes can map this memory
    /// ([`alloc_shareable`](Self::alloc_shareable)).
    pub fn is_shareable(&self) -> bool {
        self.region.shareable_backing().is_some()
    }

    /// Where this range is, for a peer process of this host that will map
    /// it ([`MemHandle::import`]); `None` unless the memory is shareable.
    pub fn share_handle(&self) -> Option<MemHandle> {
        let s = self.region.shareable_backing()?;
        Some(MemHandle {
            pid: std::process::id(),
            fd: s.fd(),
            inode: s.inode(),
            region_len: self.region.len() as u64,
            offset: self.offset as u64,
            len: self.len as u64,
        })
    }

    /// Registers this range with `domain` (a communicator: the uid of its
    /// device, [`Device::uid`](crate::Device::uid), which is what link
    /// verbs check): from then on ops of that communicator on buffers in
    /// the range send peers its handle, and peers on this host reach it by
    /// load and store. Errors (`HCCL_E_PARA`, naming why): the memory is
    /// not shareable; it is empty; it overlaps a range already registered
    /// with `domain`.
    pub fn register_in(&self, domain: u64) -> Result<()> {
        let s = self.region.shareable_backing().ok_or_else(|| {
            HcclError::para(format!(
                "only shareable memory can be registered: this buffer of {} bytes is {} \
                 (allocate with DeviceMem::alloc_shareable, DeviceBuffer or aclrtMalloc)",
                self.len,
                describe_kind(self.region.kind())
            ))
        })?;
        if self.len == 0 {
            return Err(HcclError::para("cannot register an empty buffer"));
        }
        s.mark(Mark {
            offset: self.offset,
            len: self.len,
            domain,
        })
    }

    /// Undoes [`register_in`](Self::register_in) of exactly this range;
    /// `HCCL_E_PARA` if it was not registered with `domain`.
    pub fn deregister_in(&self, domain: u64) -> Result<()> {
        let m = Mark {
            offset: self.offset,
            len: self.len,
            domain,
        };
        match self.region.shareable_backing() {
            Some(s) if s.unmark(m) => Ok(()),
            _ => Err(HcclError::para(format!(
                "[{}, +{}) of this allocation is not registered with this communicator",
                self.offset, self.len
            ))),
        }
    }

    /// Whether this whole (non-empty) range lies in memory registered with
    /// `domain`.
    pub fn is_registered_in(&self, domain: u64) -> bool {
        self.region
            .shareable_backing()
            .is_some_and(|s| s.covered(self.offset, self.len, domain))
    }

    /// This range's handle if it lies in memory registered with `domain`.
    pub(crate) fn registered_handle(&self, domain: u64) -> Option<MemHandle> {
        if self.is_registered_in(domain) {
            self.share_handle()
        } else {
            None
        }
    }

    /// `len` bytes with no backing memory, kept by `contents` instead:
    /// copy and reduce tasks and in-process link transfers on its ranges
    /// call `contents` (see [`VirtualMem`](crate::VirtualMem)). The host
    /// cannot read or write it, and kernels and other transports refuse
    /// it. What the plan simulator runs thousands of ranks on.
    pub fn alloc_virtual(len: usize, contents: std::sync::Arc<dyn crate::VirtualMem>) -> DeviceMem {
        Self::whole(Region::virtual_(len, contents))
    }

    /// The contents of a virtual region ([`DeviceMem::alloc_virtual`]),
    /// `None` for memory with bytes.
    pub fn virtual_contents(&self) -> Option<&std::sync::Arc<dyn crate::VirtualMem>> {
        self.region.virtual_contents()
    }

    /// A zero-length handle: HCCL's null pointer. Ops given it with a non-zero
    /// count fail with `HCCL_E_PTR`.
    pub fn null() -> DeviceMem {
        Self::whole(Region::empty())
    }

    /// `len` zeroed bytes in a new shared-memory segment called `name`
    /// (e.g. from [`shm_segment_name`](crate::mem::shm_segment_name)), which
    /// other processes can map with [`DeviceMem::open_shared`]. The segment
    /// is unlinked when this region is dropped.
    pub fn create_shared(name: &str, len: usize) -> Result<DeviceMem> {
        Ok(Self::whole(Region::shared(ShmSegment::create(name, len)?)))
    }

    /// Maps an existing shared segment created by another process (or this one).
    pub fn open_shared(name: &str) -> Result<DeviceMem> {
        Ok(Self::whole(Region::shared(ShmSegment::open(name)?)))
    }

    /// Wraps memory owned by the caller (used by the C ABI).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes, and not be
    /// accessed by anyone else in ways that race with enqueued tasks, until
    /// every handle derived from the result is dropped and every task that
    /// uses it has completed.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> DeviceMem {
        // SAFETY: forwarded to the caller's contract above.
        Self::whole(unsafe { Region::external(ptr, len) })
    }

    fn whole(region: Region) -> DeviceMem {
        let len = region.len();
        DeviceMem {
            region: Arc::new(region),
            offset: 0,
            len,
        }
    }

    /// The whole allocation this handle is a range of.
    pub fn allocation(&self) -> DeviceMem {
        DeviceMem {
            region: self.region.clone(),
            offset: 0,
            len: self.region.len(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the handle covers zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this is the zero-length null handle of an empty region.
    pub fn is_null(&self) -> bool {
        self.region.len() == 0
    }

    /// Offset of this handle inside its region.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// What backs the region.
    pub fn region_kind(&self) -> &RegionKind {
        self.region.kind()
    }

    /// A sub-range `[offset, offset + len)` of this handle.
    pub fn range(&self, offset: usize, len: usize) -> Result<DeviceMem> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(DeviceMem {
                region: self.region.clone(),
                offset: self.offset + offset,
                len,
            }),
            _ => Err(HcclError::para(format!(
                "range [{offset}, +{len}) is outside a buffer of {} bytes",
                self.len
            ))),
        }
    }

    /// The first `len` bytes of this handle: borrowed when that is all of
    /// it, so the per-op path of a call that passes exact buffers touches
    /// no reference count.
    pub fn prefix(&self, len: usize) -> Result<std::borrow::Cow<'_, DeviceMem>> {
        Ok(if len == self.len {
            std::borrow::Cow::Borrowed(self)
        } else {
            std::borrow::Cow::Owned(self.range(0, len)?)
        })
    }

    /// The one range `parts` cover when they lie back to back, in order, in
    /// one region (`parts[i + 1]` starts where `parts[i]` ends); `None`
    /// otherwise or when `parts` is empty. Lets several ops on adjacent
    /// slices of one allocation (a framework's flat gradient buffer) run
    /// as one op on the slices themselves, with nothing copied.
    pub fn concat<'a>(parts: impl IntoIterator<Item = &'a DeviceMem>) -> Option<DeviceMem> {
        let mut parts = parts.into_iter();
        let first = parts.next()?;
        let mut end = first.offset + first.len;
        for m in parts {
            if !first.same_region(m) || m.offset != end {
                return None;
            }
            end += m.len;
        }
        Some(DeviceMem {
            region: first.region.clone(),
            offset: first.offset,
            len: end - first.offset,
        })
    }

    /// Whether both handles lie in the same region and their ranges overlap.
    pub fn overlaps(&self, other: &DeviceMem) -> bool {
        Arc::ptr_eq(&self.region, &other.region)
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }

    /// Whether both handles are in the same region.
    pub fn same_region(&self, other: &DeviceMem) -> bool {
        Arc::ptr_eq(&self.region, &other.region)
    }

    /// A handle that names this range without keeping its memory (see
    /// [`WeakMem`]).
    pub fn downgrade(&self) -> WeakMem {
        WeakMem {
            region: Arc::downgrade(&self.region),
            offset: self.offset,
            len: self.len,
        }
    }

    /// Whether both handles cover exactly the same bytes.
    pub fn same_range(&self, other: &DeviceMem) -> bool {
        self.same_region(other) && self.offset == other.offset && self.len == other.len
    }

    /// Non-zero while enqueued tasks still reference this handle's region:
    /// the number of streams (and detached task forms) holding such tasks,
    /// not of tasks. The C ABI refuses to free memory while it is non-zero.
    pub fn tasks_in_flight(&self) -> usize {
        self.region.in_flight()
    }

    fn check_idle(&self, what: &str) -> Result<()> {
        let n = self.region.in_flight();
        if n != 0 {
            return Err(HcclError::unavail(format!(
                "cannot {what}: {n} enqueued task(s) still use this buffer; synchronize the stream first"
            )));
        }
        Ok(())
    }

    /// Copies host bytes into the start of this buffer.
    pub fn copy_from_host_bytes(&self, src: &[u8]) -> Result<()> {
        self.check_idle("write the buffer from the host")?;
        self.check_bytes("write the buffer from the host")?;
        if src.len() > self.len {
            return Err(HcclError::para(format!(
                "host data of {} bytes does not fit a buffer of {} bytes",
                src.len(),
                self.len
            )));
        }
        // SAFETY: the range lies inside the region (checked above and by
        // construction of the handle), no task uses the region (check_idle),
        // and `src` is a distinct host slice so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr(), src.len());
        }
        Ok(())
    }

    /// Copies the start of this buffer into host bytes.
    pub fn copy_to_host_bytes(&self, dst: &mut [u8]) -> Result<()> {
        self.check_idle("read the buffer from the host")?;
        self.check_bytes("read the buffer from the host")?;
        if dst.len() > self.len {
            return Err(HcclError::para(format!(
                "cannot read {} bytes from a buffer of {} bytes",
                dst.len(),
                self.len
            )));
        }
        // SAFETY: as in copy_from_host_bytes, with the direction reversed.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr(), dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }

    /// Copies typed host data into the start of this buffer.
    pub fn copy_from_host<T: Element>(&self, src: &[T]) -> Result<()> {
        self.copy_from_host_bytes(as_bytes(src))
    }

    /// Copies the start of this buffer into typed host data.
    pub fn copy_to_host<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        self.copy_to_host_bytes(as_bytes_mut(dst))
    }

    /// The first `count` elements of this buffer as a vector.
    pub fn to_vec<T: Element + Default>(&self, count: usize) -> Result<Vec<T>> {
        let mut v = vec![T::default(); count];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Sets every byte to `byte`.
    pub fn fill_bytes(&self, byte: u8) -> Result<()> {
        self.check_idle("fill the buffer")?;
        self.check_bytes("fill the buffer")?;
        // SAFETY: range inside the region; no task uses it (check_idle).
        unsafe { std::ptr::write_bytes(self.ptr(), byte, self.len) };
        Ok(())
    }

    /// Fails for a virtual region: it has no bytes for the host to touch.
    fn check_bytes(&self, what: &str) -> Result<()> {
        if self.region.virtual_contents().is_some() {
            return Err(HcclError::para(format!(
                "cannot {what}: it is virtual memory (no bytes; see DeviceMem::alloc_virtual)"
            )));
        }
        Ok(())
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        // a virtual region's placeholder address must never be
        // dereferenced; every caller of `ptr` may
        assert!(
            self.region.virtual_contents().is_none(),
            "virtual memory has no address (see DeviceMem::alloc_virtual)"
        );
        // SAFETY: offset <= region length, so the result stays inside (or one
        // past the end of) the allocation.
        unsafe { self.region.base().add(self.offset) }
    }

    /// The address of the first byte, as a number: what a peer process names
    /// this memory by when it reads it with cross-memory attach
    /// (`cma::read`).
    pub fn addr(&self) -> u64 {
        // a number, never dereferenced here: a virtual region's
        // placeholder address names it as well as a real one
        self.region.base() as u64 + self.offset as u64
    }

    /// Marks the region busy for the lifetime of the returned pin.
    pub fn pin(&self) -> PinnedMem {
        self.region.pin();
        PinnedMem(self.clone())
    }

    /// The shared region, for streams that keep one reference per region
    /// rather than one per queued task.
    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// A borrowed view of the same bytes (no reference count).
    pub(crate) fn view(&self) -> MemView<'_> {
        MemView {
            region: &self.region,
            offset: self.offset,
            len: self.len,
        }
    }
}

/// "private host memory", ... for messages.
fn describe_kind(k: &RegionKind) -> &'static str {
    match k {
        RegionKind::Host => "private host memory",
        RegionKind::Shared { .. } => "a shared-memory segment of the library",
        RegionKind::External => "memory the caller owns (not allocated by hccl-rs)",
        RegionKind::Shareable => "shareable memory",
        RegionKind::PeerMapped { .. } => "a peer's memory mapped into this process",
        RegionKind::Virtual => "virtual memory (no bytes)",
    }
}

/// A byte range of a region that something else keeps alive: what a queued
/// task resolves its memory to when it runs, without touching reference
/// counts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemView<'a> {
    pub(crate) region: &'a Arc<Region>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl MemView<'_> {
    fn ptr(&self) -> *mut u8 {
        // SAFETY: the view was made from a checked handle (offset + len
        // inside the region), so the result stays inside the allocation.
        unsafe { self.region.base().add(self.offset) }
    }

    fn same_range(&self, other: &MemView<'_>) -> bool {
        Arc::ptr_eq(self.region, other.region)
            && self.offset == other.offset
            && self.len == other.len
    }

    fn overlaps(&self, other: &MemView<'_>) -> bool {
        Arc::ptr_eq(self.region, other.region)
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }

    /// A [`PinnedMem`] of these bytes for the duration of a borrow, made
    /// without touching the region's reference count or pin count: a link
    /// verb stored compactly in a stream's queue is handed to
    /// [`Link::poll`](crate::link::Link::poll) as the public `LinkOp`, whose
    /// memory operands are `PinnedMem`s. The result is never dropped (so it
    /// never releases what it did not take); a clone of it is a real pin.
    pub(crate) fn as_pinned(&self) -> std::mem::ManuallyDrop<PinnedMem> {
        // SAFETY: `Arc::from_raw` on the pointer of a live `Arc` yields a
        // second handle to the same allocation without incrementing its
        // strong count. The handle is wrapped in `ManuallyDrop` and this
        // module never drops it, so the count is never decremented for it;
        // the region stays alive for the view's lifetime `'_` because
        // `self.region` borrows an `Arc` that someone else holds.
        let region = unsafe { Arc::from_raw(Arc::as_ptr(self.region)) };
        std::mem::ManuallyDrop::new(PinnedMem(DeviceMem {
            region,
            offset: self.offset,
            len: self.len,
        }))
    }
}

/// A [`DeviceMem`] that a queued task holds: while any pin of a region is
/// alive, host access to the region is refused.
#[derive(Debug)]
pub struct PinnedMem(DeviceMem);

impl PinnedMem {
    /// The pinned range.
    pub fn mem(&self) -> &DeviceMem {
        &self.0
    }
}

impl Drop for PinnedMem {
    fn drop(&mut self) {
        self.0.region.unpin();
    }
}

impl Clone for PinnedMem {
    fn clone(&self) -> Self {
        self.0.pin()
    }
}

fn as_bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: every Element is a plain numeric type without padding or
    // invalid bit patterns, so viewing it as bytes is sound; the length is
    // the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; additionally every byte pattern is a valid
    // Element value, so writes through the byte view cannot create invalid values.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// `dst <- src` (lengths must match; overlapping ranges are handled as memmove).
pub(crate) fn copy_mem(dst: &DeviceMem, src: &DeviceMem) -> Result<()> {
    copy_view(dst.view(), src.view())
}

/// [`copy_mem`] on borrowed views.
pub(crate) fn copy_view(dst: MemView<'_>, src: MemView<'_>) -> Result<()> {
    if dst.len != src.len {
        return Err(HcclError::internal(format!(
            "memcpy length mismatch: dst {} bytes, src {} bytes",
            dst.len, src.len
        )));
    }
    if dst.len == 0 || dst.same_range(&src) {
        return Ok(());
    }
    if let Some((d, s)) = virtual_pair(&dst, &src, "memcpy")? {
        return d.copy(dst.offset, &**s, src.offset, dst.len);
    }
    // by address, not by region: two external regions may wrap the same
    // caller memory
    let (d, s) = (dst.ptr() as usize, src.ptr() as usize);
    if dst.len >= super::nt_copy::NT_MIN && (d + dst.len <= s || s + dst.len <= d) {
        // SAFETY: as below, and the ranges do not overlap (checked).
        if unsafe { super::nt_copy::copy_nt(dst.ptr(), src.ptr(), dst.len) } {
            return Ok(());
        }
    }
    // SAFETY: both ranges lie inside live regions (the handles keep them
    // alive); `copy` tolerates overlap; concurrent writers to these bytes are
    // excluded by the algorithms' ack protocol.
    unsafe { std::ptr::copy(src.ptr(), dst.ptr(), dst.len) };
    Ok(())
}

type VirtualRef<'a> = &'a std::sync::Arc<dyn crate::VirtualMem>;

/// Both operands' virtual contents when both are virtual, `None` when
/// neither is; an error when only one is (symbolic data cannot meet bytes).
fn virtual_pair<'a>(
    dst: &MemView<'a>,
    src: &MemView<'a>,
    what: &str,
) -> Result<Option<(VirtualRef<'a>, VirtualRef<'a>)>> {
    match (dst.region.virtual_contents(), src.region.virtual_contents()) {
        (None, None) => Ok(None),
        (Some(d), Some(s)) => Ok(Some((d, s))),
        _ => Err(HcclError::internal(format!(
            "{what} between virtual memory and memory with bytes"
        ))),
    }
}

/// `dst <- dst op src`, elementwise as `dtype`.
pub(crate) fn reduce_mem(
    dst: &DeviceMem,
    src: &DeviceMem,
    dtype: DataType,
    op: ReduceOp,
) -> Result<()> {
    reduce_view(dst.view(), src.view(), dtype, op)
}

/// [`reduce_mem`] on borrowed views.
pub(crate) fn reduce_view(
    dst: MemView<'_>,
    src: MemView<'_>,
    dtype: DataType,
    op: ReduceOp,
) -> Result<()> {
    if dst.len != src.len {
        return Err(HcclError::internal(format!(
            "reduce length mismatch: dst {} bytes, src {} bytes",
            dst.len, src.len
        )));
    }
    if dst.len == 0 {
        return Ok(());
    }
    if let Some((d, s)) = virtual_pair(&dst, &src, "reduce")? {
        return d.reduce(dst.offset, &**s, src.offset, dst.len, dtype, op);
    }
    if dst.overlaps(&src) {
        return Err(HcclError::internal(
            "reduce source and destination overlap".to_string(),
        ));
    }
    // SAFETY: both ranges lie inside live regions and do not overlap
    // (checked), so a shared and an exclusive slice over them may coexist;
    // other threads do not touch these bytes while the task runs (ack protocol).
    let (d, s) = unsafe {
        (
            std::slice::from_raw_parts_mut(dst.ptr(), dst.len),
            std::slice::from_raw_parts(src.ptr(), src.len),
        )
    };
    crate::reduce::reduce_in_place(dtype, op, d, s)
}

/// A typed device buffer of `len()` elements of `T`.
#[derive(Clone, Debug)]
pub struct DeviceBuffer<T: Element> {
    mem: DeviceMem,
    count: usize,
    _t: PhantomData<T>,
}

impl<T: Element> DeviceBuffer<T> {
    /// `count` zeroed elements of shareable host memory
    /// ([`DeviceMem::alloc_shareable`]: a communicator can register it).
    pub fn alloc(count: usize) -> Result<Self> {
        let bytes = count.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            HcclError::para(format!("buffer of {count} elements overflows usize"))
        })?;
        Ok(DeviceBuffer {
            mem: DeviceMem::alloc_shareable(bytes)?,
            count,
            _t: PhantomData,
        })
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[T]) -> Result<Self> {
        let b = Self::alloc(data.len())?;
        b.mem.copy_from_host(data)?;
        Ok(b)
    }

    /// Views untyped memory as `T`s (whole elements only).
    pub fn from_mem(mem: DeviceMem) -> Self {
        let count = mem.len() / std::mem::size_of::<T>();
        DeviceBuffer {
            mem,
            count,
            _t: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The untyped handle.
    pub fn mem(&self) -> &DeviceMem {
        &self.mem
    }

    /// Copies the contents to a vector (refused while tasks use the buffer).
    pub fn to_vec(&self) -> Result<Vec<T>>
    where
        T: Default,
    {
        self.mem.to_vec(self.count)
    }

    /// Overwrites the first `data.len()` elements.
    pub fn copy_from_slice(&self, data: &[T]) -> Result<()> {
        if data.len() > self.count {
            return Err(HcclError::para(format!(
                "{} elements do not fit a buffer of {}",
                data.len(),
                self.count
            )));
        }
        self.mem.copy_from_host(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_memory_is_zeroed_host_memory() {
        let m = DeviceMem::alloc_sparse(4 << 20).unwrap();
        assert_eq!(m.len(), 4 << 20);
        let tail = m.range((4 << 20) - 8, 8).unwrap();
        assert_eq!(tail.to_vec::<u32>(2).unwrap(), vec![0, 0]);
        tail.copy_from_host(&[7u32, 9]).unwrap();
        assert_eq!(tail.to_vec::<u32>(2).unwrap(), vec![7, 9]);
        assert!(DeviceMem::alloc_sparse(0).unwrap().is_empty());
    }

    #[test]
    fn host_roundtrip_and_ranges() {
        let m = DeviceMem::alloc(64).unwrap();
        m.copy_from_host(&[1u32, 2, 3, 4]).unwrap();
        let r = m.range(4, 8).unwrap();
        assert_eq!(r.to_vec::<u32>(2).unwrap(), vec![2, 3]);
        assert!(m.range(60, 8).is_err());
        assert!(m.range(usize::MAX, 2).is_err());
        assert!(r.overlaps(&m));
        assert!(!r.overlaps(&m.range(12, 4).unwrap()));
    }

    #[test]
    fn concat_joins_adjacent_ranges_of_one_region_only() {
        let m = DeviceMem::alloc(64).unwrap();
        m.copy_from_host(&[1u32, 2, 3, 4, 5, 6]).unwrap();
        let (a, b, c) = (
            m.range(4, 8).unwrap(),
            m.range(12, 4).unwrap(),
            m.range(16, 8).unwrap(),
        );
        let all = DeviceMem::concat([&a, &b, &c]).unwrap();
        assert!(all.same_range(&m.range(4, 20).unwrap()));
        assert_eq!(all.to_vec::<u32>(5).unwrap(), vec![2, 3, 4, 5, 6]);
        // a gap, the wrong order, another region, nothing: no range
        assert!(DeviceMem::concat([&a, &c]).is_none());
        assert!(DeviceMem::concat([&b, &a]).is_none());
        let other = DeviceMem::alloc(64).unwrap();
        assert!(DeviceMem::concat([&a, &other.range(12, 4).unwrap()]).is_none());
        assert!(DeviceMem::concat(std::iter::empty::<&DeviceMem>()).is_none());
        assert!(DeviceMem::concat([&b]).unwrap().same_range(&b));
    }

    #[test]
    fn pinned_region_refuses_host_access() {
        let m = DeviceMem::alloc(16).unwrap();
        let pin = m.pin();
        let e = m.copy_from_host(&[1u8]).unwrap_err();
        assert_eq!(e.code(), crate::HcclResult::EUnavail);
        assert!(
            e.to_string().contains("synchronize the stream first"),
            "{e}"
        );
        drop(pin);
        m.copy_from_host(&[1u8]).unwrap();
    }

    #[test]
    fn shared_segment_is_visible_through_a_second_mapping_and_unlinked_on_drop() {
        let name = crate::mem::shm_segment_name("test");
        let a = DeviceMem::create_shared(&name, 4096).unwrap();
        let b = DeviceMem::open_shared(&name).unwrap();
        a.copy_from_host(&[7u64, 9]).unwrap();
        assert_eq!(b.to_vec::<u64>(2).unwrap(), vec![7, 9]);
        let path = format!("/dev/shm{name}");
        assert!(std::path::Path::new(&path).exists());
        drop(a);
        assert!(
            !std::path::Path::new(&path).exists(),
            "segment must be unlinked by its creator"
        );
        // the second mapping stays valid after unlink
        assert_eq!(b.to_vec::<u64>(1).unwrap(), vec![7]);
        let e = DeviceMem::open_shared(&name).unwrap_err();
        assert_eq!(e.code(), crate::HcclResult::ENotFound);
    }

    #[test]
    fn typed_buffer() {
        let b = DeviceBuffer::from_slice(&[1.5f32, 2.5]).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b.to_vec().unwrap(), vec![1.5, 2.5]);
        assert!(b.copy_from_slice(&[0.0; 3]).is_err());
    }
}
