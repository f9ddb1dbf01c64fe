//! "Device" memory of the C ABI: the host allocations `aclrtMalloc` hands
//! out, and the raw pointers ops receive, turned into [`DeviceMem`] ranges.
//!
//! `aclrtMalloc` memory is *shareable* (`DeviceMem::alloc_shareable`: a
//! memfd, page aligned, zeroed): a communicator can register it, and
//! peer processes of the host then map it and reach it directly.
//! `aclrtMallocHost` memory is private host memory.
//!
//! Pointers inside an `aclrtMalloc` allocation become ranges of that
//! allocation's region, so the library's overlap and in-flight checks see
//! them. Other pointers (the caller's own `malloc`) are wrapped as external
//! memory; the buffers of one call that overlap share one wrapper, so "same
//! buffer" (in place) and "partly overlapping" are still told apart.

use crate::guard::{acl_err, AclFail};
use crate::types::ACL_ERROR_BAD_ALLOC;
use crate::types::ACL_ERROR_INVALID_PARAM;
use hccl_adapter::{DeviceMem, HcclError, Result};
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::RwLock;

/// Alignment of every allocation: a cache line pair, like the CCL buffers.
const ALIGN: usize = 128;

struct Alloc {
    mem: DeviceMem,
    /// `Some` for `aclrtMallocHost` memory, which this module allocated
    /// and frees; `aclrtMalloc` memory is owned by `mem` itself.
    host_layout: Option<Layout>,
}

static ALLOCS: RwLock<BTreeMap<usize, Alloc>> = RwLock::new(BTreeMap::new());

/// Allocates `size` zeroed bytes (`host`: by `aclrtMallocHost`).
pub(crate) fn alloc(size: usize, host: bool) -> std::result::Result<*mut c_void, AclFail> {
    if size == 0 {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            "size must be greater than 0",
        ));
    }
    if !host {
        // shareable memory: mapped pages, so aligned far beyond ALIGN
        let mem = DeviceMem::alloc_shareable(size).map_err(|e| {
            acl_err(
                ACL_ERROR_BAD_ALLOC,
                format!("out of memory allocating {size} bytes: {e}"),
            )
        })?;
        let p = mem.addr() as usize;
        ALLOCS.write().unwrap_or_else(|e| e.into_inner()).insert(
            p,
            Alloc {
                mem,
                host_layout: None,
            },
        );
        return Ok(p as *mut c_void);
    }
    let layout = Layout::from_size_align(size, ALIGN)
        .map_err(|_| acl_err(ACL_ERROR_INVALID_PARAM, format!("size {size} is too large")))?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    let p = NonNull::new(p).ok_or_else(|| {
        acl_err(
            ACL_ERROR_BAD_ALLOC,
            format!("out of memory allocating {size} bytes"),
        )
    })?;
    // SAFETY: `p` is a fresh allocation of `size` bytes that lives until
    // `free` removes this entry, which refuses while tasks still use it.
    let mem = unsafe { DeviceMem::from_raw(p, size) };
    ALLOCS.write().unwrap_or_else(|e| e.into_inner()).insert(
        p.as_ptr() as usize,
        Alloc {
            mem,
            host_layout: Some(layout),
        },
    );
    Ok(p.as_ptr().cast())
}

/// Frees an allocation made by [`alloc`] with the same `host` flag.
pub(crate) fn free(ptr: *mut c_void, host: bool) -> std::result::Result<(), AclFail> {
    let (api, other) = if host {
        ("aclrtMallocHost", "aclrtMalloc")
    } else {
        ("aclrtMalloc", "aclrtMallocHost")
    };
    if ptr.is_null() {
        return Err(acl_err(ACL_ERROR_INVALID_PARAM, "the pointer is null"));
    }
    let mut allocs = ALLOCS.write().unwrap_or_else(|e| e.into_inner());
    let a = allocs.get(&(ptr as usize)).ok_or_else(|| {
        acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("{ptr:p} was not returned by {api} (or was freed already)"),
        )
    })?;
    if a.host_layout.is_some() != host {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("{ptr:p} was allocated by {other}, not {api}"),
        ));
    }
    let n = a.mem.tasks_in_flight();
    if n != 0 {
        return Err(acl_err(
            ACL_ERROR_INVALID_PARAM,
            format!("{ptr:p} is still used by enqueued tasks ({n} stream(s) or task(s)); synchronize the stream first"),
        ));
    }
    let a = allocs.remove(&(ptr as usize)).expect("looked up above");
    drop(a.mem);
    if let Some(layout) = a.host_layout {
        // SAFETY: allocated by `alloc` with this layout; no task references
        // it (checked above) and the registry no longer hands it out.
        unsafe { std::alloc::dealloc(ptr.cast(), layout) };
    }
    // (shareable memory is unmapped with its last handle: a communicator
    // it is still registered with keeps it until deregistration)
    Ok(())
}

/// `[p, p + len)` as a range of the `aclrtMalloc` allocation holding it
/// all (shareable memory), if there is one.
pub(crate) fn device_range(p: usize, len: usize) -> Option<DeviceMem> {
    let allocs = ALLOCS.read().unwrap_or_else(|e| e.into_inner());
    let (&start, a) = allocs.range(..=p).next_back()?;
    if a.host_layout.is_some() || p.checked_add(len)? > start + a.mem.len() {
        return None;
    }
    a.mem.range(p - start, len).ok()
}

/// The allocation containing `p`, as (start, its whole handle).
fn containing(p: usize) -> Option<(usize, DeviceMem)> {
    let allocs = ALLOCS.read().unwrap_or_else(|e| e.into_inner());
    let (&start, a) = allocs.range(..=p).next_back()?;
    (p < start + a.mem.len()).then(|| (start, a.mem.clone()))
}

/// One buffer argument of a call.
#[derive(Clone, Copy)]
pub(crate) struct Arg {
    /// Its C name, for errors ("sendBuf").
    pub what: &'static str,
    /// The pointer.
    pub ptr: *const c_void,
    /// Bytes the call will touch.
    pub len: usize,
}

/// Resolves the buffer arguments of one call (see the module docs).
/// Zero-length arguments give null handles; a null pointer with a non-zero
/// length is `HCCL_E_PTR`.
pub(crate) fn resolve(args: &[Arg]) -> Result<Vec<DeviceMem>> {
    let mut out = vec![DeviceMem::null(); args.len()];
    let mut external: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, arg index)
    for (i, a) in args.iter().enumerate() {
        if a.len == 0 {
            continue;
        }
        if a.ptr.is_null() {
            return Err(HcclError::ptr(format!("{} is null", a.what)));
        }
        let p = a.ptr as usize;
        let end = p.checked_add(a.len).ok_or_else(|| {
            HcclError::para(format!(
                "{} + {} bytes overflows the address space",
                a.what, a.len
            ))
        })?;
        match containing(p) {
            Some((start, mem)) => {
                if end > start + mem.len() {
                    return Err(HcclError::para(format!(
                        "{} needs {} bytes at offset {} of its aclrtMalloc allocation, which holds only {} bytes",
                        a.what,
                        a.len,
                        p - start,
                        mem.len()
                    )));
                }
                out[i] = mem.range(p - start, a.len)?;
            }
            None => external.push((p, end, i)),
        }
    }
    external.sort_unstable();
    let mut k = 0;
    while k < external.len() {
        let (start, mut end, _) = external[k];
        let mut j = k + 1;
        while j < external.len() && external[j].0 < end {
            end = end.max(external[j].1);
            j += 1;
        }
        let base = NonNull::new(start as *mut u8).expect("null pointers were rejected above");
        // SAFETY: the C contract of every op: each buffer argument is valid
        // for the bytes the op touches until the op completes on its
        // stream; the union of overlapping arguments is covered by them.
        let region = unsafe { DeviceMem::from_raw(base, end - start) };
        for &(s, e, i) in &external[k..j] {
            out[i] = region.range(s - start, e - s)?;
        }
        k = j;
    }
    Ok(out)
}

/// Copies `count` bytes (ACL's synchronous memcpy: the caller has
/// synchronized the streams that use either buffer).
pub(crate) fn copy(dst: *mut c_void, src: *const c_void, count: usize) {
    // SAFETY: the caller checked both pointers are non-null and the C
    // contract makes them valid for `count` bytes; `copy` allows overlap.
    unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), count) }
}

/// Sets `count` bytes at `dst` to `value` (as ACL does, the low byte).
pub(crate) fn set(dst: usize, value: u8, count: usize) {
    // SAFETY: as for `copy`; `dst` is non-null and valid for `count` bytes.
    unsafe { std::ptr::write_bytes(dst as *mut u8, value, count) }
}
