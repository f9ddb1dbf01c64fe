//! Shareable memory: allocations that other processes of the host can map
//! and then address by load and store.
//!
//! A shareable region is a memfd (`memfd_create(2)`, close-on-exec) mapped
//! `MAP_SHARED`. A memfd has no name: nothing appears in `/dev/shm`, and
//! the memory goes when the last descriptor and mapping of it go, so
//! nothing survives the processes that use it. The descriptor stays open
//! for the region's whole life, because that is how a peer reaches it: it
//! opens `/proc/<pid>/fd/<fd>` (allowed between processes of one user
//! that may read each other's `/proc`, the same check as for
//! `/proc/<pid>/mem` reads, which Yama's `ptrace_scope` 1 does not
//! restrict) and maps the file itself. A descriptor number can be reused
//! once its region is freed, so a [`MemHandle`](super::MemHandle) also
//! carries the file's inode, which the importer checks.
//!
//! One memfd per allocation: a process with many allocations may reach
//! its soft `RLIMIT_NOFILE`; the first `EMFILE` raises the soft limit to
//! the hard one (once) and retries.
//!
//! Large regions ask for transparent huge pages (`madvise`), as private
//! host memory does; whether the kernel grants them for shared memory is
//! its `shmem_enabled` setting (`never` on many machines: the advice is
//! then ignored).
//!
//! Each region also holds its *registration marks*: the ranges that
//! communicators registered (`DeviceMem::register_in`). An op's link
//! sends a peer the handles of its buffers only when the buffers lie in
//! ranges registered with the op's communicator.

use crate::error::{HcclError, Result};
use crate::sync::{process, OnceLock, Ordering};
use rustix::fs::{fstat, memfd_create, MemfdFlags};
use std::fs::File;
use std::os::fd::AsRawFd;

/// The name every memfd of hccl-rs carries (visible in
/// `/proc/<pid>/fd` as `/memfd:hccl-rs-shareable`).
const MEMFD_NAME: &str = "hccl-rs-shareable";

/// Registrations and deregistrations of memory ranges in this process so
/// far (any allocation, any domain). A std atomic, not the loom-modelled
/// one: a process-wide counter in a static.
static REGISTRATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A number that changes whenever any range of any allocation of this
/// process is registered with or deregistered from a domain. Whether
/// memory is registered decides how an op on it runs (graph or op-base
/// mode); a caller that cached that decision (the adapter's repeat path)
/// keeps it only while this number stays the same.
pub fn registration_epoch() -> u64 {
    REGISTRATIONS.load(std::sync::atomic::Ordering::Acquire)
}

/// A range registered with a domain (a communicator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Byte offset in the region.
    pub(crate) offset: usize,
    /// Bytes.
    pub(crate) len: usize,
    /// Who registered it (a communicator's device uid).
    pub(crate) domain: u64,
}

/// The backing of a shareable region: the memfd and its mapping.
pub(crate) struct Shareable {
    // Declared before `file`: the mapping is dropped (unmapped) first.
    map: memmap2::MmapMut,
    file: File,
    inode: u64,
    marks: process::Mutex<Vec<Mark>>,
    /// How many marks there are (written under `marks`' lock): the op path
    /// asks every shareable buffer whether it is registered, and most are
    /// not, so that answer takes no lock.
    marked: process::AtomicUsize,
}

impl std::fmt::Debug for Shareable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shareable")
            .field("fd", &self.fd())
            .field("inode", &self.inode)
            .field("len", &self.map.len())
            .finish()
    }
}

impl Shareable {
    /// A new memfd of `len` bytes (zeroed), mapped shared.
    pub(crate) fn create(len: usize, huge: bool) -> Result<Shareable> {
        let fd = match memfd_create(MEMFD_NAME, MemfdFlags::CLOEXEC) {
            Err(rustix::io::Errno::MFILE) if raise_fd_limit() => {
                memfd_create(MEMFD_NAME, MemfdFlags::CLOEXEC)
            }
            other => other,
        }
        .map_err(|e| {
            HcclError::memory(format!(
                "creating a shareable allocation of {len} bytes (memfd_create): {e}"
            ))
        })?;
        let file = File::from(fd);
        file.set_len(len as u64).map_err(|e| {
            HcclError::memory(format!("sizing a shareable allocation to {len} bytes: {e}"))
        })?;
        let inode = fstat(&file)
            .map_err(|e| HcclError::syscall(format!("fstat of a new memfd: {e}")))?
            .st_ino;
        // SAFETY: the file is ours and sized; the mapping is shared with
        // peers by design, and no Rust reference assuming exclusivity is
        // ever made into it — only raw pointers used under the
        // algorithms' disjointness protocol, as for every region.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }
            .map_err(|e| HcclError::memory(format!("mapping {len} shareable bytes: {e}")))?;
        if huge {
            // only advice: shared memory gets huge pages only where the
            // kernel's shmem_enabled allows
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Ok(Shareable {
            map,
            file,
            inode: inode as u64,
            marks: process::Mutex::new(Vec::new()),
            marked: process::AtomicUsize::new(0),
        })
    }

    /// The mapping's first byte.
    pub(crate) fn ptr(&mut self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// The memfd's descriptor number in this process.
    pub(crate) fn fd(&self) -> u32 {
        self.file.as_raw_fd() as u32
    }

    /// The memfd's inode (what an importer checks).
    pub(crate) fn inode(&self) -> u64 {
        self.inode
    }

    /// Marks `[offset, offset + len)` registered with `domain`; a range
    /// of `domain` that overlaps it is an error naming both.
    pub(crate) fn mark(&self, m: Mark) -> Result<()> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = marks.iter().find(|o| {
            o.domain == m.domain && o.offset < m.offset + m.len && m.offset < o.offset + o.len
        }) {
            return Err(HcclError::para(format!(
                "memory [{}, +{}) of its allocation overlaps [{}, +{}), which is already registered \
                 with this communicator; deregister that first",
                m.offset, m.len, o.offset, o.len
            )));
        }
        marks.push(m);
        self.marked.store(marks.len(), Ordering::Release);
        REGISTRATIONS.fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Removes the mark of exactly `m`'s range and domain; whether there was one.
    pub(crate) fn unmark(&self, m: Mark) -> bool {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        match marks.iter().position(|o| *o == m) {
            Some(i) => {
                marks.swap_remove(i);
                self.marked.store(marks.len(), Ordering::Release);
                REGISTRATIONS.fetch_add(1, std::sync::atomic::Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Whether `[offset, offset + len)` (not empty) lies in ranges
    /// registered with `domain` (one range or several adjoining ones).
    pub(crate) fn covered(&self, offset: usize, len: usize, domain: u64) -> bool {
        if len == 0 || self.marked.load(Ordering::Acquire) == 0 {
            return false;
        }
        let marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let (start, end) = (offset, offset + len);
        // the common case, one mark holding it all, without allocating
        if marks
            .iter()
            .any(|m| m.domain == domain && m.offset <= start && end <= m.offset + m.len)
        {
            return true;
        }
        let mut mine: Vec<(usize, usize)> = marks
            .iter()
            .filter(|m| m.domain == domain)
            .map(|m| (m.offset, m.offset + m.len))
            .collect();
        drop(marks);
        mine.sort_unstable();
        let mut at = start;
        for (s, e) in mine {
            if s > at {
                return false;
            }
            at = at.max(e);
            if at >= end {
                return true;
            }
        }
        false
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, once per process;
/// whether it was raised now (so a retry may help).
fn raise_fd_limit() -> bool {
    static RAISED: OnceLock<bool> = OnceLock::new();
    let mut now = false;
    RAISED.get_or_init(|| {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let lim = getrlimit(Resource::Nofile);
        if lim.current.is_some() && lim.current != lim.maximum {
            let raised = rustix::process::Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            };
            now = setrlimit(Resource::Nofile, raised).is_ok();
            tracing::info!(
                from = ?lim.current,
                to = ?lim.maximum,
                ok = now,
                "out of file descriptors for shareable allocations: raised the soft RLIMIT_NOFILE"
            );
        }
        true
    });
    now
}

#[cfg(test)]
mod tests {
    use crate::error::HcclResult;
    use crate::DeviceMem;

    #[test]
    fn running_out_of_descriptors_raises_the_soft_limit_once() {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let lim = getrlimit(Resource::Nofile);
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        if lim.maximum.is_some_and(|m| m < open + 64) {
            tracing::warn!("hard RLIMIT_NOFILE too low to test raising the soft one");
            return;
        }
        // a soft limit a few descriptors above what is open now
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(open + 4),
                maximum: lim.maximum,
            },
        )
        .unwrap();
        let many: Vec<DeviceMem> = (0..16)
            .map(|_| DeviceMem::alloc_shareable(4096).unwrap())
            .collect();
        assert_eq!(many.len(), 16);
        assert_eq!(getrlimit(Resource::Nofile).current, lim.maximum);
        setrlimit(Resource::Nofile, lim).unwrap();
    }

    #[test]
    fn registration_marks_refuse_overlaps_and_private_memory() {
        let m = DeviceMem::alloc_shareable(1 << 16).unwrap();
        let (a, b) = (m.range(0, 4096).unwrap(), m.range(4096, 4096).unwrap());
        a.register_in(7).unwrap();
        b.register_in(7).unwrap();
        // the same range in another domain (communicator) is independent
        a.register_in(8).unwrap();
        assert!(
            m.range(100, 5000).unwrap().is_registered_in(7),
            "two adjoining ranges"
        );
        assert!(!m.range(100, 5000).unwrap().is_registered_in(8));
        assert!(!m.range(8000, 1000).unwrap().is_registered_in(7));
        let e = m.range(4000, 200).unwrap().register_in(7).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(e.to_string().contains("overlaps [0, +4096)"), "{e}");
        let e = DeviceMem::alloc(64).unwrap().register_in(7).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(
            e.to_string()
                .contains("only shareable memory can be registered")
                && e.to_string().contains("private host memory"),
            "{e}"
        );
        assert!(m.range(0, 0).unwrap().register_in(7).is_err());
        // deregistration is of exactly a registered range
        let e = m.range(0, 100).unwrap().deregister_in(7).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        a.deregister_in(7).unwrap();
        assert!(!a.is_registered_in(7));
        assert!(b.is_registered_in(7) && a.is_registered_in(8));
        assert!(b.registered_handle(7).is_some() && b.registered_handle(8).is_none());
    }
}
