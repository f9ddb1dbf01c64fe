//! Handles to shareable memory, and mapping a peer's memory from one.
//!
//! A [`MemHandle`] names a range of a shareable region by where its memfd
//! is open (process id, descriptor number), the memfd's inode (a
//! descriptor number is reused once its region is freed: the importer
//! checks that the file it opened is still the same one) and the range's
//! place in the region. Importing one opens `/proc/<pid>/fd/<fd>`, checks
//! the inode and maps the whole file `MAP_SHARED`: from then on this
//! process reads and writes the peer's memory with plain loads and stores.
//! A handle of this very process resolves to the region itself.
//!
//! Mappings are shared through a process-wide cache keyed by (pid, inode),
//! so a peer region is mapped once however many links, registrations and
//! windows use it. Each user holds an [`ImportOwner`]; an entry lives while
//! some owner claims it (and the returned [`DeviceMem`]s keep the mapping
//! itself alive as long as they exist). Dropping an owner — a
//! communicator's link, a registration, a symmetric window — gives up its
//! claims; entries of processes that are gone are dropped whenever a new
//! region is mapped.

use super::region::Region;
use super::DeviceMem;
use crate::error::{HcclError, Result};
use crate::sync::{process, Arc, OnceLock, Ordering};
use rustix::fs::{fstat, Mode, OFlags};
use std::collections::HashMap;
use std::fs::File;

/// Where a range of shareable memory is, for a process of the same host
/// that will map it ([`DeviceMem::share_handle`], [`MemHandle::import`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemHandle {
    /// The owner's process id (never 0 for a real handle).
    pub pid: u32,
    /// The memfd's descriptor number in the owner.
    pub fd: u32,
    /// The memfd's inode.
    pub inode: u64,
    /// Bytes of the whole region.
    pub region_len: u64,
    /// Where the range starts in the region.
    pub offset: u64,
    /// Bytes of the range.
    pub len: u64,
}

impl MemHandle {
    /// Bytes of the wire form.
    pub const WIRE: usize = 40;

    /// Wire form (little-endian, [`MemHandle::WIRE`] bytes); all zero for
    /// "no handle".
    pub fn to_bytes(&self) -> [u8; MemHandle::WIRE] {
        let mut b = [0u8; MemHandle::WIRE];
        b[0..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..8].copy_from_slice(&self.fd.to_le_bytes());
        for (i, v) in [self.inode, self.region_len, self.offset, self.len]
            .into_iter()
            .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// From the wire form; `None` for the all-zero "no handle" (pid 0).
    pub fn from_bytes(b: &[u8; MemHandle::WIRE]) -> Option<MemHandle> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let h = MemHandle {
            pid: u32_at(0),
            fd: u32_at(4),
            inode: u64_at(8),
            region_len: u64_at(16),
            offset: u64_at(24),
            len: u64_at(32),
        };
        (h.pid != 0).then_some(h)
    }

    /// Maps the memory this handle names (a second mapping every call: see
    /// [`ImportOwner::import`] for the shared one) and returns the range.
    /// A handle of this process gives a range of the region itself.
    ///
    /// Errors: the owner is gone or its descriptor is closed
    /// (`HCCL_E_NOT_FOUND`); the descriptor now names another file — the
    /// region was freed and the number reused — (`HCCL_E_NOT_FOUND`);
    /// `/proc` refuses (another user, `HCCL_E_SYSCALL`); an inconsistent
    /// handle (`HCCL_E_PARA`).
    pub fn import(&self) -> Result<DeviceMem> {
        self.check()?;
        let region = match self.own_region()? {
            Some(r) => r,
            None => Arc::new(self.map()?),
        };
        self.range_of(region)
    }

    fn check(&self) -> Result<()> {
        if self.pid == 0 {
            return Err(HcclError::para(
                "a memory handle with process id 0 names no memory",
            ));
        }
        if self
            .offset
            .checked_add(self.len)
            .is_none_or(|end| end > self.region_len)
        {
            return Err(HcclError::para(format!(
                "memory handle range [{}, +{}) overruns its region of {} bytes",
                self.offset, self.len, self.region_len
            )));
        }
        Ok(())
    }

    /// For a handle of this process: the region, if it is still alive.
    fn own_region(&self) -> Result<Option<Arc<Region>>> {
        if self.pid != std::process::id() {
            return Ok(None);
        }
        let r = Region::local(self.inode).ok_or_else(|| {
            HcclError::not_found(format!(
                "the shareable allocation with inode {} of this process was freed",
                self.inode
            ))
        })?;
        if r.len() as u64 != self.region_len {
            return Err(self.mismatch(r.len() as u64));
        }
        Ok(Some(r))
    }

    fn mismatch(&self, actual: u64) -> HcclError {
        HcclError::para(format!(
            "memory handle says the region of process {} (fd {}, inode {}) has {} bytes, it has {actual}",
            self.pid, self.fd, self.inode, self.region_len
        ))
    }

    /// Opens the owner's memfd through `/proc`, checks it and maps it whole.
    fn map(&self) -> Result<Region> {
        let path = format!("/proc/{}/fd/{}", self.pid, self.fd);
        let fd = rustix::fs::open(path.as_str(), OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| {
                let why = match e {
                    rustix::io::Errno::NOENT => {
                        return HcclError::not_found(format!(
                            "cannot map memory of process {}: {path} does not exist (the process \
                             exited or freed the allocation)",
                            self.pid
                        ))
                    }
                    rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => {
                        " (permission denied: processes of different users, or not allowed to \
                         read each other's /proc)"
                    }
                    _ => "",
                };
                HcclError::syscall(format!("opening {path} to map a peer's memory: {e}{why}"))
            })?;
        let file = File::from(fd);
        let st = fstat(&file).map_err(|e| HcclError::syscall(format!("fstat of {path}: {e}")))?;
        if st.st_ino as u64 != self.inode {
            return Err(HcclError::not_found(format!(
                "{path} is no longer the memory the handle names (inode {}, expected {}): process {} \
                 freed that allocation and reused the descriptor",
                st.st_ino, self.inode, self.pid
            )));
        }
        if st.st_size as u64 != self.region_len {
            return Err(self.mismatch(st.st_size as u64));
        }
        let len = usize::try_from(self.region_len)
            .map_err(|_| HcclError::para("memory handle region does not fit this address space"))?;
        // SAFETY: a shared mapping of the peer's memfd, checked above to be
        // the region the handle names and of its size (memfds never
        // shrink: hccl-rs sizes them once). It is reached only through raw
        // pointers under the algorithms' ack protocol, as every region.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
            .map_err(|e| HcclError::memory(format!("mapping {len} bytes of {path}: {e}")))?;
        tracing::debug!(
            pid = self.pid,
            fd = self.fd,
            inode = self.inode,
            len,
            "mapped a peer's shareable memory"
        );
        IMPORTS_MAPPED.fetch_add(1, Ordering::Relaxed);
        Ok(Region::peer_mapped(map, self.pid, self.inode))
    }

    fn range_of(&self, region: Arc<Region>) -> Result<DeviceMem> {
        DeviceMem::of_region(region).range(self.offset as usize, self.len as usize)
    }
}

/// Peer regions this process has mapped since it started (every mapping,
/// shared or not): a test can tell "mapped once" from "mapped per use".
static IMPORTS_MAPPED: process::AtomicU64 = process::AtomicU64::new(0);

/// How many times this process has mapped a peer's region.
pub fn imports_mapped() -> u64 {
    IMPORTS_MAPPED.load(Ordering::Relaxed)
}

struct Entry {
    region: Arc<Region>,
    owners: Vec<u64>,
}

fn cache() -> &'static process::Mutex<HashMap<(u32, u64), Entry>> {
    static CACHE: OnceLock<process::Mutex<HashMap<(u32, u64), Entry>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Whether process `pid` no longer exists.
fn gone(pid: u32) -> bool {
    match rustix::process::Pid::from_raw(pid as i32) {
        Some(p) => matches!(
            rustix::process::test_kill_process(p),
            Err(rustix::io::Errno::SRCH)
        ),
        None => true,
    }
}

/// Peer regions the process-wide cache holds now.
pub fn imported_regions() -> usize {
    cache().lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// One user of imported peer memory (a link, a registration, a window):
/// what it imports through [`import`](Self::import) is mapped once per
/// process and stays cached while some owner claims it. Dropping the owner
/// gives up its claims.
#[derive(Debug)]
pub struct ImportOwner {
    id: u64,
}

impl Default for ImportOwner {
    fn default() -> Self {
        Self::new()
    }
}

impl ImportOwner {
    /// A new owner, claiming nothing yet.
    pub fn new() -> ImportOwner {
        static NEXT: process::AtomicU64 = process::AtomicU64::new(1);
        ImportOwner {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The range `handle` names, from the cached mapping of its region
    /// (mapped now if no owner has it), claimed by this owner. Errors as
    /// [`MemHandle::import`].
    pub fn import(&self, handle: &MemHandle) -> Result<DeviceMem> {
        handle.check()?;
        if let Some(r) = handle.own_region()? {
            return handle.range_of(r);
        }
        let key = (handle.pid, handle.inode);
        let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = c.get_mut(&key) {
            if e.region.len() as u64 != handle.region_len {
                return Err(handle.mismatch(e.region.len() as u64));
            }
            if !e.owners.contains(&self.id) {
                e.owners.push(self.id);
            }
            return handle.range_of(e.region.clone());
        }
        // a new mapping: first forget the regions of processes that are gone
        c.retain(|&(pid, _), _| !gone(pid));
        let region = Arc::new(handle.map()?);
        c.insert(
            key,
            Entry {
                region: region.clone(),
                owners: vec![self.id],
            },
        );
        drop(c);
        handle.range_of(region)
    }

    /// Gives up this owner's claim on the region of `handle` (the entry
    /// goes when no owner is left).
    pub fn release(&self, handle: &MemHandle) {
        let key = (handle.pid, handle.inode);
        let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = c.get_mut(&key) {
            e.owners.retain(|&o| o != self.id);
            if e.owners.is_empty() {
                c.remove(&key);
            }
        }
    }
}

impl Drop for ImportOwner {
    fn drop(&mut self) {
        let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
        c.retain(|_, e| {
            e.owners.retain(|&o| o != self.id);
            !e.owners.is_empty()
        });
    }
}

/// Whether the process-wide cache holds the region of `pid` with `inode`.
#[cfg(test)]
fn is_cached(pid: u32, inode: u64) -> bool {
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&(pid, inode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HcclResult;
    use crate::RegionKind;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::process::{Child, Command};

    /// The `/dev/shm` entries this process could have made: tests run in
    /// parallel processes, and another process's segment
    /// (`hccl-rs-<its pid>-…`) may come and go between two looks.
    fn dev_shm() -> Vec<String> {
        let prefix = crate::SHM_PREFIX.trim_start_matches('/');
        let ours = format!("{prefix}{}-", std::process::id());
        let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with(prefix) || n.starts_with(&ours))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn shareable_memory_is_zeroed_has_a_handle_and_leaves_nothing_in_dev_shm() {
        let before = dev_shm();
        let m = DeviceMem::alloc_shareable(3 << 20).unwrap();
        assert_eq!(m.region_kind(), &RegionKind::Shareable);
        assert!(m.is_shareable());
        let tail = m.range((3 << 20) - 16, 16).unwrap();
        assert_eq!(tail.to_vec::<u64>(2).unwrap(), vec![0, 0]);
        tail.copy_from_host(&[5u64, 6]).unwrap();
        assert_eq!(tail.to_vec::<u64>(2).unwrap(), vec![5, 6]);
        let h = tail.share_handle().unwrap();
        assert_eq!(h.pid, std::process::id());
        assert_eq!(
            (h.region_len, h.offset, h.len),
            ((3 << 20) as u64, ((3 << 20) - 16) as u64, 16)
        );
        // the memfd is open in this process under hccl-rs's name
        let link = std::fs::read_link(format!("/proc/self/fd/{}", h.fd)).unwrap();
        assert!(
            link.to_string_lossy()
                .starts_with("/memfd:hccl-rs-shareable"),
            "{link:?}"
        );
        assert_eq!(MemHandle::from_bytes(&h.to_bytes()), Some(h));
        assert_eq!(MemHandle::from_bytes(&[0; MemHandle::WIRE]), None);
        // private memory has no handle; nothing appeared in /dev/shm
        assert!(DeviceMem::alloc(64).unwrap().share_handle().is_none());
        assert!(!DeviceMem::alloc(64).unwrap().is_shareable());
        assert_eq!(
            dev_shm(),
            before,
            "a shareable allocation must not create a /dev/shm entry"
        );
        drop((m, tail));
        assert_eq!(dev_shm(), before);
        assert!(DeviceMem::alloc_shareable(0).unwrap().is_empty());
        assert!(crate::DeviceBuffer::<f32>::alloc(8)
            .unwrap()
            .mem()
            .is_shareable());
    }

    #[test]
    fn a_handle_of_this_process_is_the_region_itself_and_a_mapping_sees_the_same_bytes() {
        let m = DeviceMem::alloc_shareable(1 << 16).unwrap();
        m.copy_from_host(&[1u32, 2, 3, 4]).unwrap();
        let h = m.range(4, 8).unwrap().share_handle().unwrap();
        // in-process (ranks as threads): the very region, no second mapping
        let same = h.import().unwrap();
        assert!(same.same_region(&m));
        assert_eq!(same.to_vec::<u32>(2).unwrap(), vec![2, 3]);
        // a real mapping of the memfd (what a peer process gets)
        let whole = MemHandle {
            offset: 0,
            len: h.region_len,
            ..h
        };
        let mapped = DeviceMem::of_region(Arc::new(whole.map().unwrap()));
        assert!(matches!(
            mapped.region_kind(),
            RegionKind::PeerMapped { pid, .. } if *pid == std::process::id()
        ));
        assert_ne!(mapped.addr(), m.addr(), "a second mapping");
        assert_eq!(mapped.to_vec::<u32>(4).unwrap(), vec![1, 2, 3, 4]);
        mapped
            .range(8, 4)
            .unwrap()
            .copy_from_host(&[33u32])
            .unwrap();
        assert_eq!(m.to_vec::<u32>(4).unwrap(), vec![1, 2, 33, 4]);
        // an inconsistent handle is refused before anything is opened
        let e = MemHandle {
            len: 1 << 17,
            ..whole
        }
        .import()
        .unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara, "{e}");
        // a freed region: its handle no longer resolves
        drop((m, same, mapped));
        let e = h.import().unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotFound, "{e}");
    }

    #[test]
    fn the_inode_check_catches_a_reused_descriptor() {
        let a = DeviceMem::alloc_shareable(4096).unwrap();
        let ha = a.share_handle().unwrap();
        drop(a);
        // the next allocation takes the lowest free descriptor: a's
        let b = DeviceMem::alloc_shareable(4096).unwrap();
        let hb = b.share_handle().unwrap();
        assert_ne!(ha.inode, hb.inode);
        let e = ha.map().unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotFound, "{e}");
        if ha.fd == hb.fd {
            assert!(e.to_string().contains("reused the descriptor"), "{e}");
        }
        // a descriptor that is not open at all
        let e = MemHandle { fd: 1 << 20, ..hb }.map().unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotFound, "{e}");
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    /// A child process (`sleep`) that holds an inheritable memfd of `len`
    /// bytes filled with `fill`: another process's shareable memory.
    fn child_holding(len: usize, fill: u8) -> (Child, MemHandle) {
        let fd = rustix::fs::memfd_create("hccl-rs-test", rustix::fs::MemfdFlags::empty()).unwrap();
        let mut f = File::from(fd);
        f.write_all(&vec![fill; len]).unwrap();
        let inode = fstat(&f).unwrap().st_ino as u64;
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let h = MemHandle {
            pid: child.id(),
            fd: f.as_raw_fd() as u32,
            inode,
            region_len: len as u64,
            offset: 0,
            len: len as u64,
        };
        // the child holds its own copy of the descriptor from now on
        drop(f);
        (child, h)
    }

    #[test]
    fn another_process_region_is_mapped_once_and_released_with_its_owners_or_its_process() {
        let (mut c1, h1) = child_holding(8192, 0x5a);
        let (o1, o2) = (ImportOwner::new(), ImportOwner::new());
        let a = o1.import(&h1).unwrap();
        assert_eq!(a.to_vec::<u8>(8192).unwrap(), vec![0x5a; 8192]);
        assert!(matches!(a.region_kind(), RegionKind::PeerMapped { pid, .. } if *pid == h1.pid));
        let part = MemHandle {
            offset: 4096,
            len: 16,
            ..h1
        };
        let b = o2.import(&part).unwrap();
        assert_eq!(b.addr(), a.addr() + 4096, "one mapping, shared");
        assert!(is_cached(h1.pid, h1.inode));
        // a writes through one mapping are seen through the other
        b.copy_from_host(&[7u8; 16]).unwrap();
        assert_eq!(
            a.range(4096, 16).unwrap().to_vec::<u8>(16).unwrap(),
            vec![7; 16]
        );
        drop(o1);
        assert!(is_cached(h1.pid, h1.inode), "o2 still claims it");
        o2.release(&h1);
        assert!(!is_cached(h1.pid, h1.inode), "no owner left");
        // the handles stay valid for as long as they live
        assert_eq!(b.to_vec::<u8>(1).unwrap(), vec![7]);
        // a region of a process that is gone leaves the cache with it
        let o3 = ImportOwner::new();
        o3.import(&h1).unwrap();
        c1.kill().unwrap();
        c1.wait().unwrap();
        let (mut c2, h2) = child_holding(4096, 1);
        o3.import(&h2).unwrap();
        assert!(
            !is_cached(h1.pid, h1.inode),
            "the dead process's region was dropped"
        );
        assert!(is_cached(h2.pid, h2.inode));
        // and its handle no longer resolves
        let e = ImportOwner::new().import(&h1).unwrap_err();
        assert_eq!(e.code(), HcclResult::ENotFound, "{e}");
        drop(o3);
        assert!(!is_cached(h2.pid, h2.inode));
        c2.kill().unwrap();
        c2.wait().unwrap();
    }
}
