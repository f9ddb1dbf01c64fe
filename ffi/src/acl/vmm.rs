//! Virtual memory of the ACL runtime: `aclrtReserveMemAddress` /
//! `aclrtReleaseMemAddress` (an address range reserved with an
//! inaccessible anonymous mapping), `aclrtMallocPhysical` /
//! `aclrtFreePhysical` (physical memory: a memfd of that size) and
//! `aclrtMapMem` / `aclrtUnmapMem` (the memfd mapped over part of a
//! reservation with `MAP_FIXED`, read-write and shared; unmapping puts the
//! inaccessible reservation back). `aclrtMemGetAllocationGranularity`
//! gives the page size (minimum) and 2 MiB (recommended). Also
//! `aclrtGetMemInfo`: the host's free and total memory.
//!
//! Handles of physical memory are registry keys, never dereferenced.
//! Sizes and offsets must be multiples of the page size, as Ascend asks
//! for multiples of the granularity.

use crate::guard::{acl, acl_err, AclFail};
use crate::handles::Registry;
use crate::types::*;
use rustix::fd::OwnedFd;
use rustix::mm::{MapFlags, ProtFlags};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What an `aclrtDrvMemHandle` from `aclrtMallocPhysical` stands for.
pub(crate) struct Physical {
    fd: OwnedFd,
    size: usize,
    /// Live mappings of it (`aclrtMapMem`).
    mapped: AtomicUsize,
}

static PHYSICAL: Registry<Physical> = Registry::new(0x6d);

/// A reserved range: its size and the physical memory mapped in it
/// (address → length, physical handle).
struct Reservation {
    size: usize,
    maps: BTreeMap<usize, (usize, Arc<Physical>)>,
}

static RESERVED: Mutex<BTreeMap<usize, Reservation>> = Mutex::new(BTreeMap::new());

/// Recommended granularity: a huge page.
const RECOMMENDED: usize = 2 << 20;

fn page() -> usize {
    rustix::param::page_size()
}

fn invalid(msg: impl Into<String>) -> AclFail {
    acl_err(ACL_ERROR_INVALID_PARAM, msg)
}

fn page_multiple(what: &str, v: usize) -> Result<(), AclFail> {
    if v == 0 || v % page() != 0 {
        return Err(invalid(format!(
            "{what} {v} is not a positive multiple of the granularity ({} bytes)",
            page()
        )));
    }
    Ok(())
}

fn check_prop(prop: *const aclrtPhysicalMemProp) -> Result<aclrtPhysicalMemProp, AclFail> {
    if prop.is_null() {
        return Err(invalid("prop is null"));
    }
    // SAFETY: non-null, points to an aclrtPhysicalMemProp (C contract).
    let p = unsafe { prop.read_unaligned() };
    if p.handleType != ACL_MEM_HANDLE_TYPE_NONE {
        return Err(invalid(format!(
            "prop.handleType {} is not ACL_MEM_HANDLE_TYPE_NONE",
            p.handleType
        )));
    }
    if p.allocationType != ACL_MEM_ALLOCATION_TYPE_PINNED {
        return Err(invalid(format!(
            "prop.allocationType {} is not ACL_MEM_ALLOCATION_TYPE_PINNED",
            p.allocationType
        )));
    }
    if p.memAttr > ACL_MEM_P2P_HUGE1G {
        return Err(invalid(format!(
            "prop.memAttr {} is not an aclrtMemAttr",
            p.memAttr
        )));
    }
    match p.location.type_ {
        ACL_MEM_LOCATION_TYPE_HOST => {}
        ACL_MEM_LOCATION_TYPE_DEVICE => super::device::check_device(p.location.id as i32)?,
        t => {
            return Err(invalid(format!(
                "prop.location.type {t} is not ACL_MEM_LOCATION_TYPE_HOST or _DEVICE"
            )))
        }
    }
    Ok(p)
}

/// `aclrtMemGetAllocationGranularity`: the page size (minimum) or 2 MiB
/// (recommended).
#[no_mangle]
pub extern "C" fn aclrtMemGetAllocationGranularity(
    prop: *mut aclrtPhysicalMemProp,
    option: aclrtMemGranularityOptions,
    granularity: *mut usize,
) -> aclError {
    acl("aclrtMemGetAllocationGranularity", || {
        check_prop(prop)?;
        if granularity.is_null() {
            return Err(invalid("granularity is null"));
        }
        let g = match option {
            ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM => page(),
            ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED => RECOMMENDED.max(page()),
            o => {
                return Err(invalid(format!(
                    "option {o} is not an aclrtMemGranularityOptions"
                )))
            }
        };
        // SAFETY: non-null, points to a size_t (C contract).
        unsafe { granularity.write(g) };
        Ok(())
    })
}

/// `aclrtReserveMemAddress`: reserves `size` bytes of address space,
/// aligned to `alignment` (0 = the page size), inaccessible until memory
/// is mapped in. `expectPtr` is a hint; `flags`: 0, or 1 (huge pages, as
/// HCCL's hccl_test asks: accepted, the reservation is the same).
#[no_mangle]
pub extern "C" fn aclrtReserveMemAddress(
    virPtr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expectPtr: *mut c_void,
    flags: u64,
) -> aclError {
    acl("aclrtReserveMemAddress", || {
        if virPtr.is_null() {
            return Err(invalid("virPtr is null"));
        }
        page_multiple("size", size)?;
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(invalid(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        if flags > 1 {
            return Err(invalid(format!("flags must be 0 or 1, not {flags}")));
        }
        let align = alignment.max(page());
        let span = size
            .checked_add(align - page())
            .ok_or_else(|| invalid(format!("size {size} is too large")))?;
        // SAFETY: a new private anonymous mapping, PROT_NONE; `expectPtr`
        // is only a hint (no MAP_FIXED), so no existing mapping is touched.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                expectPtr,
                span,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| acl_err(ACL_ERROR_BAD_ALLOC, format!("reserving {size} bytes: {e}")))?
            as usize;
        let start = base.next_multiple_of(align);
        // trim the alignment slack on both sides
        // SAFETY: both ranges lie in the mapping just made and are not
        // handed out.
        unsafe {
            if start > base {
                let _ = rustix::mm::munmap(base as *mut c_void, start - base);
            }
            let end = start + size;
            if base + span > end {
                let _ = rustix::mm::munmap(end as *mut c_void, base + span - end);
            }
        }
        RESERVED.lock().unwrap_or_else(|p| p.into_inner()).insert(
            start,
            Reservation {
                size,
                maps: BTreeMap::new(),
            },
        );
        // SAFETY: non-null, points to a void* (C contract).
        unsafe { virPtr.write(start as *mut c_void) };
        Ok(())
    })
}

/// `aclrtReleaseMemAddress`: releases a reservation (nothing may be
/// mapped in it any more).
#[no_mangle]
pub extern "C" fn aclrtReleaseMemAddress(virPtr: *mut c_void) -> aclError {
    acl("aclrtReleaseMemAddress", || {
        if virPtr.is_null() {
            return Err(invalid("virPtr is null"));
        }
        let mut r = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
        let res = r.get(&(virPtr as usize)).ok_or_else(|| {
            invalid(format!(
                "{virPtr:p} is not an address returned by aclrtReserveMemAddress"
            ))
        })?;
        if let Some((a, (l, _))) = res.maps.iter().next() {
            return Err(invalid(format!(
                "[{a:#x}, +{l}) is still mapped in the reservation; aclrtUnmapMem it first"
            )));
        }
        let size = res.size;
        r.remove(&(virPtr as usize));
        // SAFETY: the whole reservation, made by aclrtReserveMemAddress,
        // with nothing mapped in it; no longer handed out.
        unsafe { rustix::mm::munmap(virPtr, size) }
            .map_err(|e| acl_err(ACL_ERROR_RT_FAILURE, format!("munmap: {e}")))
    })
}

/// `aclrtMallocPhysical`: `size` bytes of physical memory (a memfd);
/// `flags` must be 0.
#[no_mangle]
pub extern "C" fn aclrtMallocPhysical(
    handle: *mut aclrtDrvMemHandle,
    size: usize,
    prop: *const aclrtPhysicalMemProp,
    flags: u64,
) -> aclError {
    acl("aclrtMallocPhysical", || {
        if handle.is_null() {
            return Err(invalid("handle is null"));
        }
        check_prop(prop)?;
        page_multiple("size", size)?;
        if flags != 0 {
            return Err(invalid(format!("flags must be 0, not {flags}")));
        }
        let fd = rustix::fs::memfd_create("hccl-rs-physical", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| acl_err(ACL_ERROR_BAD_ALLOC, format!("memfd_create: {e}")))?;
        rustix::fs::ftruncate(&fd, size as u64).map_err(|e| {
            acl_err(
                ACL_ERROR_BAD_ALLOC,
                format!("allocating {size} bytes of physical memory: {e}"),
            )
        })?;
        let h = PHYSICAL.insert(Arc::new(Physical {
            fd,
            size,
            mapped: AtomicUsize::new(0),
        }));
        // SAFETY: non-null, points to an aclrtDrvMemHandle (C contract).
        unsafe { handle.write(h) };
        Ok(())
    })
}

fn physical(h: aclrtDrvMemHandle) -> Result<Arc<Physical>, AclFail> {
    if h.is_null() {
        return Err(invalid("handle is null"));
    }
    PHYSICAL.get(h).ok_or_else(|| {
        acl_err(
            ACL_ERROR_INVALID_RESOURCE_HANDLE,
            format!("{h:p} is not physical memory from aclrtMallocPhysical (freed already?)"),
        )
    })
}

/// `aclrtFreePhysical`: frees physical memory that is mapped nowhere.
#[no_mangle]
pub extern "C" fn aclrtFreePhysical(handle: aclrtDrvMemHandle) -> aclError {
    acl("aclrtFreePhysical", || {
        let p = physical(handle)?;
        let n = p.mapped.load(Ordering::Acquire);
        if n != 0 {
            return Err(invalid(format!(
                "the physical memory is still mapped {n} time(s); aclrtUnmapMem first"
            )));
        }
        PHYSICAL.remove(handle);
        Ok(())
    })
}

/// `aclrtMapMem`: maps `[offset, offset + size)` of physical memory
/// `handle` at `virPtr`, inside a reservation; `flags` must be 0.
#[no_mangle]
pub extern "C" fn aclrtMapMem(
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
) -> aclError {
    acl("aclrtMapMem", || {
        if virPtr.is_null() {
            return Err(invalid("virPtr is null"));
        }
        let p = physical(handle)?;
        page_multiple("size", size)?;
        if offset % page() != 0 {
            return Err(invalid(format!(
                "offset {offset} is not a multiple of the granularity ({} bytes)",
                page()
            )));
        }
        if flags != 0 {
            return Err(invalid(format!("flags must be 0, not {flags}")));
        }
        if offset.checked_add(size).is_none_or(|e| e > p.size) {
            return Err(invalid(format!(
                "[{offset}, +{size}) is outside the {} bytes of the physical memory",
                p.size
            )));
        }
        let v = virPtr as usize;
        if v % page() != 0 {
            return Err(acl_err(
                ACL_ERROR_MEMORY_ADDRESS_UNALIGNED,
                format!(
                    "virPtr {virPtr:p} is not aligned to the granularity ({} bytes)",
                    page()
                ),
            ));
        }
        let mut r = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
        let (&base, res) = r
            .range_mut(..=v)
            .next_back()
            .filter(|(&b, res)| v.checked_add(size).is_some_and(|e| e <= b + res.size))
            .ok_or_else(|| {
                invalid(format!(
                    "[{virPtr:p}, +{size}) is not inside a range reserved with aclrtReserveMemAddress"
                ))
            })?;
        if let Some((a, (l, _))) = res
            .maps
            .iter()
            .find(|(&a, (l, _))| a < v + size && v < a + l)
        {
            return Err(invalid(format!(
                "[{virPtr:p}, +{size}) overlaps [{a:#x}, +{l}), mapped already"
            )));
        }
        // SAFETY: [v, v + size) lies inside the reservation at `base`
        // (checked) where nothing is mapped (checked): MAP_FIXED replaces
        // only our own PROT_NONE pages. The memfd holds offset + size bytes.
        unsafe {
            rustix::mm::mmap(
                virPtr,
                size,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::FIXED,
                &p.fd,
                offset as u64,
            )
        }
        .map_err(|e| acl_err(ACL_ERROR_BAD_ALLOC, format!("mapping at {virPtr:p}: {e}")))?;
        tracing::debug!(target: "hccl::acl", base, at = v, size, offset, "physical memory mapped");
        p.mapped.fetch_add(1, Ordering::AcqRel);
        res.maps.insert(v, (size, p));
        Ok(())
    })
}

/// `aclrtUnmapMem`: unmaps what `aclrtMapMem` mapped at `virPtr`; the
/// range stays reserved.
#[no_mangle]
pub extern "C" fn aclrtUnmapMem(virPtr: *mut c_void) -> aclError {
    acl("aclrtUnmapMem", || {
        if virPtr.is_null() {
            return Err(invalid("virPtr is null"));
        }
        let v = virPtr as usize;
        let mut r = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
        let res = r
            .range_mut(..=v)
            .next_back()
            .map(|(_, res)| res)
            .filter(|res| res.maps.contains_key(&v))
            .ok_or_else(|| invalid(format!("{virPtr:p} is not where aclrtMapMem mapped memory")))?;
        let (size, p) = res.maps.remove(&v).expect("checked above");
        // SAFETY: [v, v + size) is our own mapping of the physical memory,
        // inside our reservation: it becomes inaccessible reserved space again.
        unsafe {
            rustix::mm::mmap_anonymous(
                virPtr,
                size,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED,
            )
        }
        .map_err(|e| acl_err(ACL_ERROR_RT_FAILURE, format!("unmapping {virPtr:p}: {e}")))?;
        p.mapped.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}

/// `(free, total)` host memory in bytes from `/proc/meminfo`.
fn meminfo() -> std::io::Result<(usize, usize)> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .map(|kb| kb * 1024)
    };
    match (
        field("MemAvailable:").or(field("MemFree:")),
        field("MemTotal:"),
    ) {
        (Some(f), Some(t)) => Ok((f, t)),
        _ => Err(std::io::Error::other("MemAvailable/MemTotal missing")),
    }
}

/// `aclrtGetMemInfo`: the host's available and total memory (device memory
/// is host memory), whatever `attr`.
#[no_mangle]
pub extern "C" fn aclrtGetMemInfo(
    attr: aclrtMemAttr,
    free: *mut usize,
    total: *mut usize,
) -> aclError {
    acl("aclrtGetMemInfo", || {
        if attr > ACL_MEM_P2P_HUGE1G {
            return Err(invalid(format!("attr {attr} is not an aclrtMemAttr")));
        }
        if free.is_null() || total.is_null() {
            return Err(invalid("free or total is null"));
        }
        let (f, t) = meminfo()
            .map_err(|e| acl_err(ACL_ERROR_RT_FAILURE, format!("reading /proc/meminfo: {e}")))?;
        // SAFETY: both non-null, pointing to size_t (C contract).
        unsafe {
            free.write(f);
            total.write(t);
        }
        Ok(())
    })
}
