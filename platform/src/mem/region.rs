//! A region: one contiguous allocation that tasks read and write.

use crate::error::{HcclError, Result};
use crate::mem::shareable::Shareable;
use crate::mem::shm::ShmSegment;
use crate::sync::{process, Arc, AtomicUsize, OnceLock, Ordering, Weak};
use std::collections::HashMap;
use std::ptr::NonNull;

/// Where a region's bytes live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Private anonymous memory of this process.
    Host,
    /// A POSIX shared-memory segment that other processes can map by name.
    Shared {
        /// The segment's name (`/hccl-rs-...`).
        name: String,
    },
    /// Memory owned by someone else (e.g. a C caller), borrowed for its lifetime.
    External,
    /// Host memory that peer processes of this host can map
    /// ([`DeviceMem::alloc_shareable`](crate::DeviceMem::alloc_shareable):
    /// a memfd, nameless, so nothing outlives the processes).
    Shareable,
    /// A peer process's shareable memory, mapped into this process
    /// ([`MemHandle::import`](crate::MemHandle::import)).
    PeerMapped {
        /// The owner's process id.
        pid: u32,
        /// The memory's inode (its identity while the owner lives).
        inode: u64,
    },
    /// No bytes: contents kept by a [`VirtualMem`](crate::VirtualMem)
    /// ([`DeviceMem::alloc_virtual`](crate::DeviceMem::alloc_virtual)).
    Virtual,
}

enum Backing {
    Empty,
    Anon(#[allow(dead_code)] memmap2::MmapMut),
    Shared(#[allow(dead_code)] ShmSegment),
    External,
    Shareable(Shareable),
    PeerMapped(#[allow(dead_code)] memmap2::MmapMut),
    Virtual(std::sync::Arc<dyn super::virtual_mem::VirtualMem>),
}

/// One allocation. Tasks access it through raw pointers; the host accesses
/// it only through [`DeviceMem`](crate::DeviceMem)'s checked copy methods.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    kind: RegionKind,
    /// Tasks enqueued but not finished that reference this region; host
    /// access is refused while it is non-zero.
    in_flight: AtomicUsize,
    _backing: Backing,
}

// SAFETY: a Region is a plain byte allocation; it owns its mapping (or, for
// External, the creator promised the memory outlives it). Concurrent access
// goes through raw pointers from tasks whose algorithms guarantee disjoint
// writes (a peer writes only where the owner acknowledged the range free),
// and host access is refused while tasks are in flight.
unsafe impl Send for Region {}
// SAFETY: see `Send`; shared references only expose the pointer and counters.
unsafe impl Sync for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Host allocations from this size on ask for transparent huge pages.
const HUGE_PAGE_MIN: usize = 2 << 20;

/// `HCCL_RS_HUGE_PAGES` (default 1; 0 turns the advice off), read once.
fn huge_pages_wanted() -> bool {
    static WANTED: OnceLock<bool> = OnceLock::new();
    *WANTED.get_or_init(|| {
        !matches!(
            std::env::var("HCCL_RS_HUGE_PAGES")
                .as_deref()
                .map(str::trim),
            Ok("0" | "off" | "false")
        )
    })
}

impl Region {
    pub(crate) fn host(len: usize) -> Result<Region> {
        Self::host_paged(len, huge_pages_wanted())
    }

    /// Host memory that never asks for huge pages: for buffers of which
    /// only a small part is ever touched, where every touched 2 MiB page
    /// would otherwise be zeroed and kept whole.
    pub(crate) fn host_sparse(len: usize) -> Result<Region> {
        Self::host_paged(len, false)
    }

    fn host_paged(len: usize, huge: bool) -> Result<Region> {
        if len == 0 {
            return Ok(Region::empty());
        }
        let mut map = memmap2::MmapMut::map_anon(len).map_err(|e| {
            HcclError::memory(format!("allocating {len} bytes of host memory: {e}"))
        })?;
        if len >= HUGE_PAGE_MIN && huge {
            // Large buffers are copied and read by peers (cross-memory
            // attach walks their page tables) a page at a time: 2 MiB pages
            // where the kernel grants them. Only advice; failure is fine.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        let ptr = NonNull::new(map.as_mut_ptr()).expect("mmap returned null");
        Ok(Region {
            ptr,
            len,
            kind: RegionKind::Host,
            in_flight: AtomicUsize::new(0),
            _backing: Backing::Anon(map),
        })
    }

    pub(crate) fn empty() -> Region {
        Region {
            ptr: NonNull::dangling(),
            len: 0,
            kind: RegionKind::Host,
            in_flight: AtomicUsize::new(0),
            _backing: Backing::Empty,
        }
    }

    pub(crate) fn shared(mut seg: ShmSegment) -> Region {
        let len = seg.len();
        let ptr = NonNull::new(seg.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region {
            ptr,
            len,
            kind: RegionKind::Shared {
                name: seg.name().to_owned(),
            },
            in_flight: AtomicUsize::new(0),
            _backing: Backing::Shared(seg),
        }
    }

    /// `len` zeroed bytes of shareable memory (see `mem/shareable.rs`).
    pub(crate) fn shareable(len: usize) -> Result<Region> {
        if len == 0 {
            return Ok(Region::empty());
        }
        let mut backing = Shareable::create(len, len >= HUGE_PAGE_MIN && huge_pages_wanted())?;
        let ptr = NonNull::new(backing.ptr()).expect("mmap returned null");
        Ok(Region {
            ptr,
            len,
            kind: RegionKind::Shareable,
            in_flight: AtomicUsize::new(0),
            _backing: Backing::Shareable(backing),
        })
    }

    /// A peer's shareable memory mapped here (`map`, the whole region).
    pub(crate) fn peer_mapped(mut map: memmap2::MmapMut, pid: u32, inode: u64) -> Region {
        let len = map.len();
        let ptr = NonNull::new(map.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region {
            ptr,
            len,
            kind: RegionKind::PeerMapped { pid, inode },
            in_flight: AtomicUsize::new(0),
            _backing: Backing::PeerMapped(map),
        }
    }

    /// Makes a shareable `region` findable by its memfd's inode for
    /// handles of this process ([`Region::local`]); other kinds need not.
    pub(crate) fn publish_local(region: &Arc<Region>) {
        if let Some(s) = region.shareable_backing() {
            // (entries leave when their region drops: see `Drop`)
            local_shareable()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(s.inode(), Arc::downgrade(region));
        }
    }

    /// The shareable region of this process whose memfd has `inode`, if
    /// it is still alive.
    pub(crate) fn local(inode: u64) -> Option<Arc<Region>> {
        local_shareable()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&inode)
            .and_then(Weak::upgrade)
    }

    /// The memfd behind a shareable region.
    pub(crate) fn shareable_backing(&self) -> Option<&Shareable> {
        match &self._backing {
            Backing::Shareable(s) => Some(s),
            _ => None,
        }
    }

    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for the whole
    /// life of the region and of every handle and task derived from it.
    pub(crate) unsafe fn external(ptr: NonNull<u8>, len: usize) -> Region {
        Region {
            ptr,
            len,
            kind: RegionKind::External,
            in_flight: AtomicUsize::new(0),
            _backing: Backing::External,
        }
    }

    /// `len` bytes kept by `contents` (see `virtual_mem.rs`).
    pub(crate) fn virtual_(
        len: usize,
        contents: std::sync::Arc<dyn super::virtual_mem::VirtualMem>,
    ) -> Region {
        let at = super::virtual_mem::placeholder_address(len);
        Region {
            // never dereferenced: every path that would checks
            // `virtual_contents` first (see `virtual_mem.rs`)
            ptr: NonNull::new(at as *mut u8).unwrap_or(NonNull::dangling()),
            len,
            kind: RegionKind::Virtual,
            in_flight: AtomicUsize::new(0),
            _backing: Backing::Virtual(contents),
        }
    }

    /// The contents of a virtual region.
    pub(crate) fn virtual_contents(
        &self,
    ) -> Option<&std::sync::Arc<dyn super::virtual_mem::VirtualMem>> {
        match &self._backing {
            Backing::Virtual(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn kind(&self) -> &RegionKind {
        &self.kind
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn pin(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn unpin(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// Shareable regions of this process that are alive, by memfd inode: a
/// handle of this very process (ranks that are threads) resolves to the
/// region itself instead of a second mapping.
fn local_shareable() -> &'static process::Mutex<HashMap<u64, Weak<Region>>> {
    static LOCAL: OnceLock<process::Mutex<HashMap<u64, Weak<Region>>>> = OnceLock::new();
    LOCAL.get_or_init(Default::default)
}

impl Drop for Region {
    fn drop(&mut self) {
        // Forget a shareable region while its memfd is still open (the
        // backing drops after this), so a new allocation cannot have
        // taken the inode in between.
        if let Backing::Shareable(s) = &self._backing {
            let mut t = local_shareable().lock().unwrap_or_else(|p| p.into_inner());
            if t.get(&s.inode()).is_some_and(|w| w.strong_count() == 0) {
                t.remove(&s.inode());
            }
        }
    }
}
